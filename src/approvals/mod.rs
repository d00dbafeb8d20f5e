//! The approval broker (docs/PROTOCOL.md, "Approvals"): one place where every action that needs
//! the user's decision waits — voxa's own tools under the policy's `ask`, and the coding agents'
//! permission prompts and questions. It lives in the agent, not in a connection: an approval
//! outlives a dropped phone and a relay restart, every following client sees it, the first answer
//! wins, and nobody answering means deny at `expires_at`. The open ones are kept in the home so a
//! restarted agent reports them as denied.

mod answer;
mod deliver;
pub mod grants;
mod rules;
mod store;
mod summary;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use answer::{answer, approve_from_args, decided_by};
pub use deliver::{forward, voice_prompt, voice_prompts};
pub use grants::{Grant, Grants, Scope, GRANTS_FILE};
pub use rules::{ask_for, coding_agent_risk, command_risk, describe, Ask};
pub use summary::{one_line, redact_secrets, MAX_SUMMARY_LEN};

use crate::audit::{ApprovalRecord, Audit};
use crate::protocol::{AgentMessage, ApprovalFrame, ApprovalResolved, ApprovalSource, DecidedBy, Decision, Risk};

/// The file in the home that keeps the open approvals across a restart.
pub const STORE_FILE: &str = "approvals.json";
/// Approvals open at once; one more is denied at once rather than queued.
pub const MAX_OPEN_APPROVALS: usize = 256;
/// Notices buffered per following client before it counts as behind (and is sent the open list again).
pub const NOTICE_QUEUE: usize = 256;
/// The message of an approval nobody answered.
pub const EXPIRED_MESSAGE: &str = "no one approved in time";
/// The message of an approval that was open when voxa stopped.
pub const RESTART_MESSAGE: &str = "voxa stopped before anyone answered";
/// Largest `input` kept in an approval frame, in bytes of JSON; a larger one is replaced by a note.
pub const MAX_INPUT_LEN: usize = 64 << 10;

/// How to build a [`Broker`].
#[derive(Clone, Debug)]
pub struct BrokerOptions {
    /// How long an approval waits before it is denied.
    pub timeout: Duration,
    /// Where requests and decisions are recorded.
    pub audit: Option<Audit>,
    /// File (0600) that keeps the open approvals, so a restart can report them.
    pub store: Option<PathBuf>,
    /// File (0600) that keeps the grants ("Allow for session").
    pub grants: Option<PathBuf>,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            timeout: Duration::from_secs(crate::config::DEFAULT_APPROVAL_TIMEOUT_SECS),
            audit: None,
            store: None,
            grants: None,
        }
    }
}

/// One action that waits for the user.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub source: ApprovalSource,
    pub tool: String,
    pub input: Value,
    /// One line for people and the voice model; made one line, capped and redacted here.
    pub summary: String,
    pub risk: Risk,
    pub diff: Option<String>,
    pub questions: Option<Value>,
    /// "Allow for session" is offered: for a coding-agent session it makes a [`Grant`], whose
    /// words the frame carries (`grant_allows`).
    pub offers_session: bool,
}

/// The decision an asker gets.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub decision: Decision,
    /// The user's words, or why nobody decided ([`EXPIRED_MESSAGE`]).
    pub message: Option<String>,
    /// Answers to a coding agent's questions.
    pub answers: Option<Value>,
    pub by: DecidedBy,
}

impl Answer {
    /// The sentence a denied asker reports: the user's message, else who denied it.
    pub fn denial_message(&self) -> String {
        match (&self.message, self.by) {
            (Some(message), _) => message.clone(),
            (None, DecidedBy::Withdrawn) => "the request was withdrawn".into(),
            (None, by) => format!("denied by the user ({})", by.as_str()),
        }
    }
}

/// Why a decision was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecideError {
    /// No open approval has that id: it was decided already, expired or never existed.
    NotFound,
    /// `allow_session` for an approval that does not offer it.
    SessionNotOffered,
    /// A voice answer for a risky action that is not a plain, one-time allow or a deny.
    NeedsExplicitAllow,
}

impl std::fmt::Display for DecideError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecideError::NotFound => "no open approval has that id; it was already decided or has expired",
            DecideError::SessionNotOffered => {
                "this approval cannot be allowed for the session; allow it once or deny it"
            }
            DecideError::NeedsExplicitAllow => {
                "by voice, an action that runs programs, reaches the network or leaves the workspace is allowed once \
                 only, after the user said yes to it"
            }
        })
    }
}

impl std::error::Error for DecideError {}

/// A notice for following clients: an `approval` or an `approval_resolved` frame.
pub type Notice = AgentMessage;

/// The broker: cheap to clone, one per agent.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

struct Inner {
    timeout: Duration,
    audit: Option<Audit>,
    store: Option<PathBuf>,
    state: Mutex<State>,
    grants: Mutex<Grants>,
    notices: broadcast::Sender<Notice>,
    /// Cancelled when the agent stops: what is withdrawn from then on is ended by the stop, and
    /// stays in the store so the next start reports it too.
    stop: std::sync::OnceLock<CancellationToken>,
}

#[derive(Default)]
struct State {
    open: BTreeMap<String, Open>,
    /// Approvals a previous run left open, ended as denied when this one started: told to every
    /// client that follows, so a card it still shows goes away.
    ended_by_restart: Vec<ApprovalResolved>,
}

struct Open {
    frame: ApprovalFrame,
    answer: oneshot::Sender<Answer>,
    /// The grant an "Allow for session" makes: scope and command.
    grant: Option<(Scope, Option<String>)>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("open", &self.lock().open.len()).finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker; approvals a previous run left in `store` are ended as denied (and audited).
    pub fn new(options: BrokerOptions) -> Self {
        let (notices, _) = broadcast::channel(NOTICE_QUEUE);
        let broker = Broker {
            inner: Arc::new(Inner {
                timeout: options.timeout,
                audit: options.audit,
                store: options.store,
                state: Mutex::default(),
                grants: Mutex::new(Grants::open(options.grants)),
                notices,
                stop: std::sync::OnceLock::new(),
            }),
        };
        broker.end_leftovers();
        broker
    }

    /// Ties the broker to the agent's shutdown: an approval withdrawn while the agent stops (its
    /// call cancelled, its coding agent ended) is ended `by:"restart"`, and the home keeps it so
    /// the next start says so again to whoever follows then.
    pub fn stop_with(&self, shutdown: CancellationToken) {
        let _ = self.inner.stop.set(shutdown);
    }

    fn stopping(&self) -> bool {
        self.inner.stop.get().is_some_and(CancellationToken::is_cancelled)
    }

    /// How long an approval waits.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Opens an approval and tells every following client. Wait for the answer with
    /// [`Pending::wait`]; dropping the [`Pending`] withdraws it.
    pub fn request(&self, request: Request) -> Pending {
        let id = new_id();
        let deadline = Instant::now() + self.inner.timeout;
        let expires_at = unix_ms(SystemTime::now() + self.inner.timeout);
        let offered = match &request.source {
            ApprovalSource::Session(_) if request.offers_session => {
                grants::scope_of(&request.tool, &request.input, request.risk)
            }
            _ => None,
        };
        let allow_session =
            request.offers_session && (offered.is_some() || !matches!(request.source, ApprovalSource::Session(_)));
        let grant_allows = offered.as_ref().map(|(_, _, words)| words.clone());
        let grant = offered.map(|(scope, command, _)| (scope, command));
        let frame = ApprovalFrame {
            approval: id.clone(),
            source: request.source,
            tool: summary::clip(&one_line(&request.tool), 128),
            input: bounded_input(request.input),
            summary: one_line(&redact_secrets(&request.summary)),
            risk: request.risk,
            diff: request.diff,
            questions: request.questions,
            allow_session,
            grant_allows,
            expires_at,
        };
        let (answer, receiver) = oneshot::channel();
        let mut state = self.lock();
        if state.open.len() >= MAX_OPEN_APPROVALS {
            drop(state);
            let _ = answer.send(Answer {
                decision: Decision::Deny,
                message: Some(format!("{MAX_OPEN_APPROVALS} approvals are already waiting; answer those first")),
                answers: None,
                by: DecidedBy::Withdrawn,
            });
            return Pending { broker: self.clone(), id, receiver, deadline, settled: true };
        }
        self.audit(&frame, None);
        let _ = self.inner.notices.send(AgentMessage::Approval(frame.clone()));
        state.open.insert(id.clone(), Open { frame, answer, grant });
        self.persist(&state);
        drop(state);
        Pending { broker: self.clone(), id, receiver, deadline, settled: false }
    }

    /// Decides an open approval: the first answer wins, every following client is told.
    pub fn decide(
        &self,
        id: &str,
        decision: Decision,
        message: Option<String>,
        answers: Option<Value>,
        by: DecidedBy,
    ) -> Result<(), DecideError> {
        let mut state = self.lock();
        let open = state.open.get(id).ok_or(DecideError::NotFound)?;
        if decision == Decision::AllowSession && !open.frame.allow_session {
            return Err(DecideError::SessionNotOffered);
        }
        if by == DecidedBy::Voice && decision == Decision::AllowSession && open.frame.risk.needs_explicit_allow() {
            return Err(DecideError::NeedsExplicitAllow);
        }
        let stopping = by == DecidedBy::Withdrawn && self.stopping();
        let (by, message) =
            if stopping { (DecidedBy::Restart, Some(RESTART_MESSAGE.to_owned())) } else { (by, message) };
        let Some(open) = state.open.remove(id) else { return Err(DecideError::NotFound) };
        let message = message.map(|text| summary::clip(&text, crate::protocol::MAX_APPROVAL_TEXT_LEN));
        let grant = match (&open.frame.source, decision, &open.grant) {
            (ApprovalSource::Session(session), Decision::AllowSession, Some((scope, command))) => {
                let made = Grant {
                    grant: grants::new_id(),
                    session: session.clone(),
                    tool: open.frame.tool.clone(),
                    scope: *scope,
                    command: command.clone(),
                    allows: open.frame.grant_allows.clone().unwrap_or_default(),
                    created_at: unix_ms(SystemTime::now()),
                };
                Some(self.lock_grants().add(made).grant)
            }
            _ => None,
        };
        let resolved = ApprovalResolved { approval: id.to_owned(), decision, by, message: message.clone(), grant };
        self.audit(&open.frame, Some(&resolved));
        let _ = open.answer.send(Answer { decision, message, answers, by });
        let _ = self.inner.notices.send(AgentMessage::ApprovalResolved(resolved));
        if !stopping {
            self.persist(&state);
        }
        Ok(())
    }

    /// The open approvals, oldest first.
    pub fn open(&self) -> Vec<ApprovalFrame> {
        let mut open: Vec<_> = self.lock().open.values().map(|open| open.frame.clone()).collect();
        open.sort_by_key(|frame| frame.expires_at);
        open
    }

    /// One open approval.
    pub fn get(&self, id: &str) -> Option<ApprovalFrame> {
        self.lock().open.get(id).map(|open| open.frame.clone())
    }

    /// What a client that starts following must be sent (the open approvals, and the ones a restart
    /// ended), and the notices from then on — taken together, so none is missed or sent twice.
    pub fn follow(&self) -> (Vec<Notice>, broadcast::Receiver<Notice>) {
        let state = self.lock();
        let receiver = self.inner.notices.subscribe();
        let mut open: Vec<_> = state.open.values().map(|open| open.frame.clone()).collect();
        open.sort_by_key(|frame| frame.expires_at);
        let mut snapshot: Vec<Notice> =
            state.ended_by_restart.iter().cloned().map(AgentMessage::ApprovalResolved).collect();
        snapshot.extend(open.into_iter().map(AgentMessage::Approval));
        (snapshot, receiver)
    }

    /// Every grant, oldest first.
    pub fn grants(&self) -> Vec<Grant> {
        self.lock_grants().list().to_vec()
    }

    /// Ends a grant: the prompts it answered ask again. False when none has that id.
    pub fn revoke(&self, id: &str) -> bool {
        let revoked = self.lock_grants().revoke(id);
        if revoked {
            tracing::info!(grant = %crate::text::prefix(id, 64), "a grant was revoked");
        }
        revoked
    }

    /// Answers a coding agent's prompt from a grant, if one covers it: the approval it stands
    /// for (a fresh id, audited as allowed `by:"grant"`) and the grant. Nothing is opened.
    pub fn granted(&self, request: &Request) -> Option<(String, Grant)> {
        let ApprovalSource::Session(session) = &request.source else { return None };
        let grant = self.lock_grants().covering(session, &request.tool, &request.input)?.clone();
        let id = new_id();
        let frame = ApprovalFrame {
            approval: id.clone(),
            source: request.source.clone(),
            tool: summary::clip(&one_line(&request.tool), 128),
            input: serde_json::Value::Null,
            summary: one_line(&redact_secrets(&request.summary)),
            risk: request.risk,
            diff: None,
            questions: None,
            allow_session: false,
            grant_allows: None,
            expires_at: unix_ms(SystemTime::now()),
        };
        let resolved = ApprovalResolved {
            approval: id.clone(),
            decision: Decision::Allow,
            by: DecidedBy::Grant,
            message: None,
            grant: Some(grant.grant.clone()),
        };
        self.audit(&frame, Some(&resolved));
        Some((id, grant))
    }

    fn lock_grants(&self) -> MutexGuard<'_, Grants> {
        self.inner.grants.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn audit(&self, frame: &ApprovalFrame, resolved: Option<&ApprovalResolved>) {
        let Some(audit) = &self.inner.audit else { return };
        let record = ApprovalRecord {
            approval: frame.approval.clone(),
            source: match &frame.source {
                ApprovalSource::Session(session) => format!("session:{session}"),
                ApprovalSource::Call(call) => format!("call:{call}"),
            },
            tool: frame.tool.clone(),
            summary: frame.summary.clone(),
            risk: frame.risk.as_str().to_owned(),
            decision: resolved.map_or_else(|| "requested".to_owned(), |r| r.decision.as_str().to_owned()),
            by: resolved.map(|r| r.by.as_str().to_owned()),
        };
        if let Err(err) = audit.record_approval(&record) {
            tracing::warn!(error = %format!("{err:#}"), "could not record an approval in the audit trail");
        }
    }

    fn persist(&self, state: &State) {
        let Some(path) = &self.inner.store else { return };
        let open: Vec<_> = state.open.values().map(|open| store::Kept::of(&open.frame)).collect();
        if let Err(err) = store::save(path, &open) {
            tracing::warn!(error = %format!("{err:#}"), "could not keep the open approvals");
        }
    }

    /// Ends what a previous run left open: denied by restart, audited, told to followers.
    fn end_leftovers(&self) {
        let Some(path) = &self.inner.store else { return };
        let kept = match store::take(path) {
            Ok(kept) => kept,
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), "could not read the approvals a previous run left open");
                return;
            }
        };
        let mut state = self.lock();
        for kept in kept.into_iter().take(MAX_OPEN_APPROVALS) {
            tracing::warn!(approval = %kept.approval, tool = %kept.tool, "an approval was open when voxa stopped; it is denied");
            let frame = kept.into_frame();
            let resolved = ApprovalResolved {
                approval: frame.approval.clone(),
                decision: Decision::Deny,
                by: DecidedBy::Restart,
                message: Some(RESTART_MESSAGE.into()),
                grant: None,
            };
            self.audit(&frame, Some(&resolved));
            state.ended_by_restart.push(resolved);
        }
    }
}

/// An open approval its asker waits on.
pub struct Pending {
    broker: Broker,
    id: String,
    receiver: oneshot::Receiver<Answer>,
    deadline: Instant,
    settled: bool,
}

impl Pending {
    /// The approval's id (`a-…`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits for the first answer; denies it at the expiry, withdraws it when `cancel` fires.
    pub async fn wait(mut self, cancel: &CancellationToken) -> Answer {
        if !self.settled {
            let timeout = tokio::select! {
                answer = &mut self.receiver => return self.settle(answer.ok()),
                _ = tokio::time::sleep_until(self.deadline) => (Some(EXPIRED_MESSAGE.to_owned()), DecidedBy::Timeout),
                _ = cancel.cancelled() => (None, DecidedBy::Withdrawn),
            };
            // An answer may have won the race; then it stands.
            let _ = self.broker.decide(&self.id, Decision::Deny, timeout.0, None, timeout.1);
        }
        let answer = self.receiver.try_recv().ok();
        self.settle(answer)
    }

    fn settle(&mut self, answer: Option<Answer>) -> Answer {
        self.settled = true;
        answer.unwrap_or(Answer {
            decision: Decision::Deny,
            message: Some("the approval ended without an answer".into()),
            answers: None,
            by: DecidedBy::Withdrawn,
        })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.settled {
            let _ = self.broker.decide(&self.id, Decision::Deny, None, None, DecidedBy::Withdrawn);
        }
    }
}

/// A fresh approval id: `a-` and 64 random bits in hex.
fn new_id() -> String {
    format!("a-{:016x}", rand::random::<u64>())
}

/// `time` in Unix milliseconds, the unit of `expires_at`.
pub fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// The input as sent to clients: itself, or a note when it is too large to show.
fn bounded_input(input: Value) -> Value {
    let len = serde_json::to_vec(&input).map_or(usize::MAX, |bytes| bytes.len());
    if len <= MAX_INPUT_LEN {
        input
    } else {
        serde_json::json!({ "omitted": format!("the input is {len} bytes; too large to show") })
    }
}

#[cfg(test)]
mod tests;
