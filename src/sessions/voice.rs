//! What a voice call's model is told without asking (`[voice] narrate`, docs/GUIDE.md "What you
//! can say"): a session's turn that ended (its title and one line of outcome), a session that
//! failed, an approval that opened (tool, summary, risk: the read-back the user answers) and one
//! decided elsewhere — each one short text turn it can read out. A self-hosted call hears them on
//! its bridge; for a call the relay hosts the agent sends them to the page in its sealed session,
//! which passes them to the relay's model (docs/PROTOCOL.md, "Hosted voice").

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::SessionHost;
use crate::approvals::{self, one_line, redact_secrets, Broker, Notice};
use crate::config::Narrate;
use crate::protocol::{AgentMessage, ApprovalFrame, Event, SessionEvent};

/// Error codes that mean the session itself failed, not one turn.
const FAILURES: &[&str] = &["agent-exited", "unavailable", "stuck", "timeout"];
/// Longest outcome quoted in a note, in bytes: a spoken line.
pub const MAX_OUTCOME_LEN: usize = 160;

/// One note for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Told {
    pub text: String,
    /// The approval it reads back (the user's answer to it may follow).
    pub approval: Option<String>,
}

impl Told {
    fn plain(text: String) -> Told {
        Told { text, approval: None }
    }
}

/// Who hosts the call being narrated: its model may answer approvals only on the laptop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// The laptop's own bridge: the model may answer with the user's spoken yes.
    Laptop,
    /// The relay: the model never answers; it asks the user to tap.
    Relay,
}

/// The text turn that tells the model of `event`, if it is worth telling; `title` names the
/// session when known.
pub fn voice_note(event: &SessionEvent, title: Option<&str>) -> Option<String> {
    let named = match title.map(one_line).filter(|title| !title.is_empty()) {
        Some(title) => format!("Coding session \"{title}\""),
        None => format!("Coding session {}", event.session),
    };
    // The agent's words are its own: one line, secrets masked, quoted so they read as a report.
    let quoted = |text: &str| crate::text::prefix(&redact_secrets(&one_line(text)), MAX_OUTCOME_LEN).to_owned();
    let note = match &event.event {
        Event::TurnEnd { ok: true, result, .. } if result.trim().is_empty() => format!("{named} finished its turn."),
        Event::TurnEnd { ok: true, result, .. } => format!("{named} finished its turn: \"{}\"", quoted(result)),
        Event::TurnEnd { ok: false, result, .. } => {
            format!("{named} ended its turn without finishing: \"{}\"", quoted(result))
        }
        Event::Error { code, message } if FAILURES.contains(&code.as_str()) => {
            format!("{named} failed: \"{}\"", quoted(message))
        }
        _ => return None,
    };
    Some(format!("[voxa] {note} Tell the user in a sentence; agent_log with session \"{}\" has more.", event.session))
}

/// The read-back of an approval for the model of a call the relay hosts: it never answers
/// approvals (the relay writes the transcript, so a "yes" would be the relay's word).
pub fn hosted_approval_note(frame: &ApprovalFrame) -> String {
    format!(
        "[voxa] Approval needed ({}): {}. Read this to the user and ask them to tap Allow or Deny on their phone; \
         you cannot answer approvals in this call.",
        frame.risk.as_str(),
        frame.summary
    )
}

/// The note of an approval `notice` for a call hosted by `host`, if any.
fn approval_note(notice: Notice, host: Host) -> Option<Told> {
    match (notice, host) {
        (AgentMessage::Approval(frame), Host::Laptop) => {
            Some(Told { text: approvals::voice_prompt(&frame), approval: Some(frame.approval) })
        }
        (AgentMessage::Approval(frame), Host::Relay) => Some(Told::plain(hosted_approval_note(&frame))),
        (notice, _) => approvals::voice_prompts(notice).map(Told::plain),
    }
}

/// What narrates one call.
#[derive(Clone)]
pub struct Narrator {
    /// Approvals are told when set.
    pub broker: Option<Broker>,
    pub sessions: Option<SessionHost>,
    pub mode: Narrate,
    pub host: Host,
}

impl Narrator {
    /// Tells the call, through `out`, what `mode` says it hears — the approvals open now, then
    /// every change — until `end` fires or `out` closes.
    pub async fn run<T: Send + 'static>(self, out: mpsc::Sender<T>, end: CancellationToken, wrap: fn(Told) -> T) {
        if self.mode == Narrate::Off {
            return;
        }
        let host = self.host;
        let approvals = async {
            if let Some(broker) = self.broker {
                let note = move |notice| approval_note(notice, host).map(wrap);
                approvals::forward(broker, out.clone(), end.clone(), note).await;
            }
        };
        let sessions = async {
            if let (Narrate::Changes, Some(sessions)) = (self.mode, self.sessions) {
                tell(sessions, out.clone(), end.clone(), move |text| wrap(Told::plain(text))).await;
            }
        };
        tokio::join!(approvals, sessions);
    }
}

/// Tells a running call's model, through `input`, of every turn that ends and every session
/// that fails from now until `end` fires or `input` closes.
pub async fn tell<T>(host: SessionHost, input: mpsc::Sender<T>, end: CancellationToken, wrap: impl Fn(String) -> T) {
    let mut events = host.live_events();
    loop {
        let event = tokio::select! {
            () = end.cancelled() => return,
            () = input.closed() => return,
            event = events.recv() => event,
        };
        let event = match event {
            Ok(event) => event,
            // Told late is better than not at all; what was skipped is in the log.
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        let title = host.info(&event.session).ok().map(|info| info.title);
        if let Some(note) = voice_note(&event, title.as_deref()) {
            if input.send(wrap(note)).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ApprovalSource, Risk};

    fn event(event: Event) -> SessionEvent {
        SessionEvent { session: "s-1".into(), seq: 4, at: 0, event }
    }

    #[test]
    fn ended_turns_and_failures_are_told_short_and_the_rest_is_not() {
        let done = event(Event::TurnEnd {
            ok: true,
            result: "Fixed\nthe test".into(),
            cost_usd: None,
            duration_ms: 5,
            interrupted: false,
        });
        let note = voice_note(&done, Some("Fix the test")).unwrap();
        assert!(
            note.starts_with("[voxa] Coding session \"Fix the test\" finished its turn: \"Fixed the test\""),
            "{note}"
        );
        assert!(note.contains("agent_log") && note.contains("\"s-1\""), "{note}");
        let long = event(Event::TurnEnd {
            ok: true,
            result: "word ".repeat(200),
            cost_usd: None,
            duration_ms: 5,
            interrupted: false,
        });
        assert!(voice_note(&long, None).unwrap().len() < MAX_OUTCOME_LEN + 200, "one spoken line");
        let failed = event(Event::TurnEnd {
            ok: false,
            result: "interrupted".into(),
            cost_usd: None,
            duration_ms: 0,
            interrupted: false,
        });
        assert!(voice_note(&failed, None).unwrap().contains("s-1 ended its turn without finishing: \"interrupted\""));
        let exited = event(Event::error("agent-exited", "the agent exited (code 1): TOKEN=abcdef0123456789abcdef"));
        let note = voice_note(&exited, None).unwrap();
        assert!(note.contains("failed") && !note.contains("abcdef0123456789abcdef"), "{note}");
        assert!(voice_note(&event(Event::error("agent-error", "x")), None).is_none());
        assert!(voice_note(&event(Event::Text { text: "hi".into(), partial: true }), None).is_none());
    }

    #[test]
    fn a_call_the_relay_hosts_is_told_to_ask_for_a_tap_and_the_laptops_may_answer() {
        let frame = ApprovalFrame {
            approval: "a-7".into(),
            source: ApprovalSource::Call("c1".into()),
            tool: "run_command".into(),
            input: serde_json::json!({"command": "rm -rf build"}),
            summary: "Run: rm -rf build".into(),
            risk: Risk::Exec,
            diff: None,
            questions: None,
            allow_session: false,
            grant_allows: None,
            expires_at: 0,
        };
        let hosted = approval_note(AgentMessage::Approval(frame.clone()), Host::Relay).unwrap();
        assert_eq!(hosted.approval, None, "nothing the relay's model hears can answer it");
        assert!(hosted.text.contains("Run: rm -rf build") && hosted.text.contains("tap Allow or Deny"), "{hosted:?}");
        assert!(!hosted.text.contains("a-7") && !hosted.text.contains("call approve"), "{hosted:?}");
        let own = approval_note(AgentMessage::Approval(frame), Host::Laptop).unwrap();
        assert_eq!(own.approval.as_deref(), Some("a-7"));
        assert!(own.text.contains("(exec)") && own.text.contains("approve"), "{own:?}");
    }
}
