//! `brief`: what every coding-agent session did since the user last looked — turns finished,
//! files changed, approvals waiting, cost — as a few sentences a voice model reads out, with the
//! figures beside them. "Last looked" is the start of the latest time no client followed the
//! sessions (a phone's page follows while it is open): while one follows, the absence before it;
//! before any, since the agent started.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;

use super::event::now_ms;
use super::{Event, SessionHost, SessionInfo, SessionState};
use crate::protocol::{ErrorCode, ToolError};

/// Sessions named in a brief, the most recently active first; the rest are counted.
pub const MAX_BRIEFED: usize = 6;
/// Events read per session for one brief (the most recent sessions first, a page at a time).
const MAX_EVENTS_READ: usize = 5000;
const PAGE: usize = 500;

/// When the user looked at the sessions, as the followers come and go.
#[derive(Debug)]
pub(crate) struct Looks {
    watching: usize,
    /// Unix ms since nobody follows, while nobody does.
    away_since: Option<u64>,
    /// The start of the latest absence that ended.
    last_away: Option<u64>,
    opened_at: u64,
}

impl Looks {
    pub(crate) fn new() -> Arc<Mutex<Looks>> {
        Arc::new(Mutex::new(Looks { watching: 0, away_since: None, last_away: None, opened_at: now_ms() }))
    }

    /// Unix ms a brief starts from.
    fn since(&self) -> u64 {
        let away = if self.watching == 0 { self.away_since } else { self.last_away };
        away.unwrap_or(self.opened_at)
    }
}

/// One client following the sessions, for as long as it lives.
pub struct Look(Arc<Mutex<Looks>>);

impl Look {
    pub(crate) fn begin(looks: &Arc<Mutex<Looks>>) -> Look {
        let mut state = looks.lock().unwrap_or_else(PoisonError::into_inner);
        if state.watching == 0 {
            if let Some(away) = state.away_since.take() {
                state.last_away = Some(away);
            }
        }
        state.watching += 1;
        drop(state);
        Look(looks.clone())
    }
}

impl Drop for Look {
    fn drop(&mut self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.watching = state.watching.saturating_sub(1);
        if state.watching == 0 {
            state.away_since = Some(now_ms());
        }
    }
}

/// One session in a brief.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Briefed {
    pub session: String,
    pub title: String,
    pub agent: String,
    pub state: String,
    pub turns_finished: u64,
    pub files_changed: Vec<String>,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub approvals_waiting: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Its last turn failed or the session did.
    pub failed: bool,
}

/// The `brief` tool's result.
pub fn brief(host: &SessionHost) -> Result<Value, ToolError> {
    let since = host.shared.looks.lock().unwrap_or_else(PoisonError::into_inner).since();
    let sessions = host.sessions()?;
    let mut briefed: Vec<Briefed> = Vec::new();
    for info in &sessions {
        if info.last_event_at < since && info.pending == 0 {
            continue;
        }
        briefed.push(digest(host, info, since)?);
    }
    briefed.retain(|b| b.turns_finished > 0 || !b.files_changed.is_empty() || b.approvals_waiting > 0 || b.failed);
    let quiet = sessions.len() - briefed.len();
    let more = briefed.len().saturating_sub(MAX_BRIEFED);
    briefed.truncate(MAX_BRIEFED);
    let spoken = spoken(&briefed, more, quiet, since);
    Ok(serde_json::json!({
        "since": since,
        "digest": spoken,
        "sessions": briefed,
        "more_sessions": more,
        "quiet_sessions": quiet,
    }))
}

/// What one session did since `since`.
fn digest(host: &SessionHost, info: &SessionInfo, since: u64) -> Result<Briefed, ToolError> {
    let mut briefed = Briefed {
        session: info.session.clone(),
        title: info.title.clone(),
        agent: info.agent.clone(),
        state: info.state.as_str().to_owned(),
        approvals_waiting: info.pending,
        failed: info.state == SessionState::Failed,
        ..Briefed::default()
    };
    let mut files = BTreeMap::new();
    let (mut after, mut read) = (0, 0);
    while read < MAX_EVENTS_READ {
        let events = host.shared.store.events(&info.session, after, PAGE).map_err(|err| {
            ToolError::new(ErrorCode::Internal, format!("could not read session {}: {err:#}", info.session))
        })?;
        let Some(last) = events.last() else { break };
        after = last.seq;
        read += events.len();
        for event in events.iter().filter(|event| event.at >= since) {
            match &event.event {
                Event::TurnEnd { ok, cost_usd, .. } => {
                    briefed.turns_finished += 1;
                    briefed.failed = !ok;
                    if let Some(cost) = cost_usd {
                        *briefed.cost_usd.get_or_insert(0.0) += cost;
                    }
                }
                Event::ToolUse { input, summary, diff: Some(diff), .. } => {
                    let file = ["file_path", "path", "notebook_path"]
                        .iter()
                        .find_map(|field| input.get(field).and_then(Value::as_str))
                        .unwrap_or(summary);
                    files.insert(short_name(file), ());
                    for line in diff.lines() {
                        if line.starts_with('+') && !line.starts_with("+++") {
                            briefed.lines_added += 1;
                        } else if line.starts_with('-') && !line.starts_with("---") {
                            briefed.lines_removed += 1;
                        }
                    }
                }
                Event::Error { .. } => briefed.failed = true,
                _ => {}
            }
        }
    }
    briefed.files_changed = files.into_keys().collect();
    Ok(briefed)
}

/// A file as it is said: its last two path parts.
fn short_name(path: &str) -> String {
    let parts: Vec<&str> = path.rsplit('/').filter(|part| !part.is_empty()).take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// "2 turns", "1 turn".
fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The brief in a few spoken sentences.
fn spoken(briefed: &[Briefed], more: usize, quiet: usize, since: u64) -> String {
    let minutes = now_ms().saturating_sub(since) / 60_000;
    let when = match minutes {
        0 => "in the last minute".to_owned(),
        m if m < 120 => format!("in the last {}", counted(m, "minute", "minutes")),
        m => format!("in the last {}", counted(m / 60, "hour", "hours")),
    };
    if briefed.is_empty() {
        return format!("Nothing happened in the coding sessions {when}.");
    }
    let mut sentences = vec![format!("Since you last looked ({when}):")];
    for b in briefed {
        let mut facts = Vec::new();
        if b.turns_finished > 0 {
            facts.push(format!("finished {}", counted(b.turns_finished, "turn", "turns")));
        }
        if !b.files_changed.is_empty() {
            let files = b.files_changed.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
            let others = b.files_changed.len().saturating_sub(3);
            let rest = if others > 0 { format!(" and {others} more") } else { String::new() };
            facts.push(format!("changed {files}{rest} (+{} −{} lines)", b.lines_added, b.lines_removed));
        }
        if b.approvals_waiting > 0 {
            facts.push(format!("is waiting for {}", counted(b.approvals_waiting as u64, "approval", "approvals")));
        }
        if b.failed {
            facts.push("hit a failure".to_owned());
        }
        if let Some(cost) = b.cost_usd {
            facts.push(format!("cost ${cost:.2}"));
        }
        let title = crate::approvals::one_line(&b.title);
        sentences.push(format!("\"{title}\" ({}) {}.", b.agent, facts.join(", ")));
    }
    if more > 0 {
        sentences.push(format!("{} more changed too.", counted(more as u64, "session", "sessions")));
    }
    if quiet > 0 {
        sentences.push(format!("{} had nothing new.", counted(quiet as u64, "other session", "other sessions")));
    }
    sentences.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looking_moves_the_start_of_the_brief() {
        let looks = Looks::new();
        let opened = looks.lock().unwrap().opened_at;
        assert_eq!(looks.lock().unwrap().since(), opened, "nobody ever looked: since the start");
        let first = Look::begin(&looks);
        let second = Look::begin(&looks);
        drop(first);
        assert_eq!(looks.lock().unwrap().since(), opened, "still watched");
        drop(second);
        let away = looks.lock().unwrap().away_since.unwrap();
        assert_eq!(looks.lock().unwrap().since(), away, "away now: since the page closed");
        let back = Look::begin(&looks);
        assert_eq!(looks.lock().unwrap().since(), away, "back: since the absence began");
        drop(back);
    }

    #[test]
    fn the_digest_names_each_session_in_words() {
        let briefed = Briefed {
            session: "s-1".into(),
            title: "Fix the login test".into(),
            agent: "claude".into(),
            state: "idle".into(),
            turns_finished: 2,
            files_changed: vec!["src/login.rs".into(), "tests/login.rs".into()],
            lines_added: 12,
            lines_removed: 3,
            approvals_waiting: 1,
            cost_usd: Some(0.25),
            failed: false,
        };
        let said = spoken(&[briefed], 0, 2, now_ms() - 30 * 60_000);
        assert!(said.starts_with("Since you last looked (in the last 30 minutes):"), "{said}");
        for part in [
            "\"Fix the login test\" (claude) finished 2 turns",
            "changed src/login.rs, tests/login.rs (+12 −3 lines)",
            "is waiting for 1 approval",
            "cost $0.25",
            "2 other sessions had nothing new.",
        ] {
            assert!(said.contains(part), "{part:?} missing from {said}");
        }
        assert_eq!(spoken(&[], 0, 0, now_ms()), "Nothing happened in the coding sessions in the last minute.");
        assert_eq!(short_name("/home/u/project/src/main.rs"), "src/main.rs");
    }
}
