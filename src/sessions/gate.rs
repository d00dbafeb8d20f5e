//! Where a session's permission prompts and questions go: the [`PermissionGate`] the approval
//! broker implements, and [`LocalGate`], a small in-memory one answered through
//! [`super::SessionHost::approve`]. Every prompt has a deadline; none waits for ever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use super::event::now_ms;
pub use super::event::Risk;

/// How long a prompt waits for an answer when nothing else is configured.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);
/// The message an agent reads when nobody answered in time.
pub const NO_ANSWER: &str = "no one approved in time";

/// An answer's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    AllowSession,
    Deny,
}

impl Decision {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::AllowSession => "allow_session",
            Decision::Deny => "deny",
        }
    }
}

/// One prompt of a coding agent.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionRequest {
    /// voxa's session id.
    pub session: String,
    /// The agent's tool name (`Bash`, `Write`, `AskUserQuestion`, `commandExecution`, …).
    pub tool: String,
    pub input: Value,
    /// One line saying what would happen.
    pub summary: String,
    pub risk: Risk,
    /// A question's `questions[]`, when this is a question rather than a permission.
    pub questions: Option<Value>,
    /// Whether "allow for the session" is offered.
    pub allow_session: bool,
}

/// The answer to a prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionAnswer {
    pub decision: Decision,
    /// What the agent reads, on a deny.
    pub message: Option<String>,
    /// A question's answers: `{"<question>": "<label>"}`.
    pub answers: Option<Value>,
    /// `phone`, `voice`, `cli`, `timeout`, …
    pub by: String,
}

impl PermissionAnswer {
    /// The deny of a prompt nobody answered.
    pub fn timed_out() -> Self {
        PermissionAnswer {
            decision: Decision::Deny,
            message: Some(NO_ANSWER.into()),
            answers: None,
            by: "timeout".into(),
        }
    }
}

/// An open prompt.
pub struct Pending {
    /// The prompt's id, `a-…`.
    pub approval: String,
    /// When it is denied unanswered, Unix ms.
    pub expires_at: u64,
    /// Resolves once, with the answer (a deny by `timeout` at `expires_at`).
    pub answer: BoxFuture<'static, PermissionAnswer>,
}

/// Takes the prompts of coding agents to whoever can answer them.
pub trait PermissionGate: Send + Sync + 'static {
    /// Opens a prompt and returns at once; the answer comes through [`Pending::answer`].
    fn open(&self, request: PermissionRequest) -> Pending;
    /// The agent withdrew the prompt: it is closed unanswered.
    fn withdraw(&self, approval: &str);
}

/// An in-memory gate: prompts wait in a table until [`LocalGate::answer`] or their deadline.
pub struct LocalGate {
    timeout: Duration,
    open: Mutex<HashMap<String, oneshot::Sender<PermissionAnswer>>>,
}

impl LocalGate {
    /// A gate whose prompts expire after `timeout`.
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(LocalGate { timeout, open: Mutex::default() })
    }

    /// Answers an open prompt; false when it is not open (answered, expired or withdrawn).
    pub fn answer(&self, approval: &str, answer: PermissionAnswer) -> bool {
        let sender = self.open.lock().ok().and_then(|mut open| open.remove(approval));
        sender.is_some_and(|sender| sender.send(answer).is_ok())
    }
}

impl PermissionGate for LocalGate {
    fn open(&self, _request: PermissionRequest) -> Pending {
        let approval = format!("a-{}", hex::encode(rand::random::<[u8; 8]>()));
        let (sender, receiver) = oneshot::channel();
        if let Ok(mut open) = self.open.lock() {
            open.insert(approval.clone(), sender);
        }
        let timeout = self.timeout;
        let expires_at = now_ms().saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let answer = Box::pin(async move {
            match tokio::time::timeout(timeout, receiver).await {
                Ok(Ok(answer)) => answer,
                _ => PermissionAnswer::timed_out(),
            }
        });
        Pending { approval, expires_at, answer }
    }

    fn withdraw(&self, approval: &str) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(approval);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> PermissionRequest {
        PermissionRequest {
            session: "s-1".into(),
            tool: "Bash".into(),
            input: Value::Null,
            summary: "ls".into(),
            risk: Risk::Exec,
            questions: None,
            allow_session: false,
        }
    }

    #[tokio::test]
    async fn an_answer_resolves_once_and_a_second_finds_nothing() {
        let gate = LocalGate::new(Duration::from_secs(60));
        let pending = gate.open(request());
        let allow = PermissionAnswer { decision: Decision::Allow, message: None, answers: None, by: "phone".into() };
        assert!(gate.answer(&pending.approval, allow.clone()));
        assert!(!gate.answer(&pending.approval, allow.clone()));
        assert_eq!(pending.answer.await, allow);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_prompt_is_denied_at_its_deadline() {
        let gate = LocalGate::new(Duration::from_secs(600));
        let pending = gate.open(request());
        let answer = pending.answer.await;
        assert_eq!(answer, PermissionAnswer::timed_out());
        assert_eq!(answer.message.as_deref(), Some(NO_ANSWER));
    }

    #[tokio::test(start_paused = true)]
    async fn a_withdrawn_prompt_cannot_be_answered() {
        let gate = LocalGate::new(Duration::from_secs(5));
        let pending = gate.open(request());
        gate.withdraw(&pending.approval);
        assert!(!gate.answer(&pending.approval, PermissionAnswer::timed_out()));
    }
}
