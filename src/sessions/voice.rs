//! What a voice call's model is told of the coding-agent sessions while the call runs: a turn
//! that ended and a session that failed, each as one text turn it can read out ("Claude finished
//! fixing the test"). Self-hosted calls hear it from [`tell`]; a call the relay hosts sees the
//! `agent_event` frames pass by and words them with [`voice_note`].

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::SessionHost;
use crate::approvals::{one_line, redact_secrets};
use crate::protocol::{Event, SessionEvent};

/// Error codes that mean the session itself failed, not one turn.
const FAILURES: &[&str] = &["agent-exited", "unavailable", "stuck", "timeout"];

/// The text turn that tells the model of `event`, if it is worth telling; `title` names the
/// session when known.
pub fn voice_note(event: &SessionEvent, title: Option<&str>) -> Option<String> {
    let named = match title.map(one_line).filter(|title| !title.is_empty()) {
        Some(title) => format!("Coding session \"{title}\" ({})", event.session),
        None => format!("Coding session {}", event.session),
    };
    // The agent's words are its own: one line, secrets masked, quoted so they read as a report.
    let quoted = |text: &str| redact_secrets(&one_line(text));
    let note = match &event.event {
        Event::TurnEnd { ok: true, result, .. } if result.trim().is_empty() => format!("{named} finished its turn."),
        Event::TurnEnd { ok: true, result, .. } => {
            format!("{named} finished its turn. Its answer begins: \"{}\"", quoted(result))
        }
        Event::TurnEnd { ok: false, result, .. } => {
            format!("{named} ended its turn without finishing: \"{}\"", quoted(result))
        }
        Event::Error { code, message } if FAILURES.contains(&code.as_str()) => {
            format!("{named} failed: \"{}\"", quoted(message))
        }
        _ => return None,
    };
    Some(format!("[voxa] {note} Tell the user briefly; agent_log with session \"{}\" has the details.", event.session))
}

/// Tells a running call's model, through `input`, of every turn that ends and every session
/// that fails from now until `end` fires or `input` closes.
pub async fn tell<T>(host: SessionHost, input: mpsc::Sender<T>, end: CancellationToken, wrap: fn(String) -> T) {
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

    fn event(event: Event) -> SessionEvent {
        SessionEvent { session: "s-1".into(), seq: 4, at: 0, event }
    }

    #[test]
    fn ended_turns_and_failures_are_told_and_the_rest_is_not() {
        let done = event(Event::TurnEnd { ok: true, result: "Fixed\nthe test".into(), cost_usd: None, duration_ms: 5 });
        let note = voice_note(&done, Some("Fix the test")).unwrap();
        assert!(note.starts_with("[voxa] Coding session \"Fix the test\" (s-1) finished its turn."), "{note}");
        assert!(note.contains("\"Fixed the test\"") && note.contains("agent_log"), "{note}");
        let failed = event(Event::TurnEnd { ok: false, result: "interrupted".into(), cost_usd: None, duration_ms: 0 });
        assert!(voice_note(&failed, None).unwrap().contains("s-1 ended its turn without finishing: \"interrupted\""));
        let exited = event(Event::error("agent-exited", "the agent exited (code 1): TOKEN=abcdef0123456789abcdef"));
        let note = voice_note(&exited, None).unwrap();
        assert!(note.contains("failed") && !note.contains("abcdef0123456789abcdef"), "{note}");
        assert!(voice_note(&event(Event::error("agent-error", "x")), None).is_none());
        assert!(voice_note(&event(Event::Text { text: "hi".into(), partial: true }), None).is_none());
    }
}
