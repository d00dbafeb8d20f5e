//! The events of a coding-agent session (docs/PROTOCOL.md, "Coding-agent sessions"), as its log
//! keeps them and as the `agent_event` frame carries them: one [`Event`] per thing that happened,
//! numbered per session from 1.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{DecidedBy, Decision, Risk};

/// Where a session is (docs/PROTOCOL.md, "Coding-agent sessions": `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// The process is starting; the first turn is not taken yet.
    Starting,
    /// A turn is running.
    Working,
    /// An approval or a question is open.
    Waiting,
    /// Between turns.
    Idle,
    /// No process; the next `agent_send` resumes it.
    Ended,
    /// It could not run; the next `agent_send` tries again.
    Failed,
}

impl SessionState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Starting => "starting",
            SessionState::Working => "working",
            SessionState::Waiting => "waiting",
            SessionState::Idle => "idle",
            SessionState::Ended => "ended",
            SessionState::Failed => "failed",
        }
    }

    /// The state of this name, if any.
    pub fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(Value::String(name.to_owned())).ok()
    }

    /// Whether a process belongs to a session in this state.
    pub fn is_live(self) -> bool {
        matches!(self, SessionState::Starting | SessionState::Working | SessionState::Waiting | SessionState::Idle)
    }
}

/// One thing that happened in a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    State {
        state: SessionState,
    },
    /// A turn someone sent.
    User {
        text: String,
        /// `phone`, `loopback`, `gemini`, …: who sent it.
        by: String,
    },
    /// The agent's text; `partial` pieces as it writes, then the whole block once.
    Text {
        text: String,
        partial: bool,
    },
    ToolUse {
        tool_use_id: String,
        name: String,
        input: Value,
        summary: String,
        /// A unified diff, for file edits.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
    },
    ToolResult {
        tool_use_id: String,
        ok: bool,
        output: String,
    },
    Approval {
        approval: String,
        tool: String,
        input: Value,
        summary: String,
        risk: Risk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        questions: Option<Value>,
        expires_at: u64,
    },
    ApprovalResolved {
        approval: String,
        decision: Decision,
        by: DecidedBy,
        /// The options chosen, for a question: `{"<question>": "<label>"}`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answers: Option<Value>,
    },
    TurnEnd {
        ok: bool,
        result: String,
        /// What this turn cost (not a running total).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        duration_ms: u64,
        /// The user interrupted it (`ok` is false): not a failure.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    Error {
        code: String,
        message: String,
    },
}

impl Event {
    /// An `error` event.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Event::Error { code: code.to_owned(), message: message.into() }
    }
}

/// One numbered event of one session: the `agent_event` frame ([`super::AgentMessage::AgentEvent`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionEvent {
    pub session: String,
    pub seq: u64,
    /// Unix ms.
    pub at: u64,
    pub event: Event,
}

impl SessionEvent {
    /// The `agent_event` frame as JSON (what [`super::AgentMessage::AgentEvent`] serialises to,
    /// without copying the event).
    pub fn to_frame(&self) -> Value {
        let mut frame = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut frame {
            map.insert("type".into(), Value::String(AGENT_EVENT.into()));
        }
        frame
    }
}

/// The `type` of the frame that carries a [`SessionEvent`].
const AGENT_EVENT: &str = "agent_event";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::AgentMessage;

    #[test]
    fn events_have_the_wire_shape() {
        let event = SessionEvent {
            session: "s-1".into(),
            seq: 3,
            at: 10,
            event: Event::TurnEnd {
                ok: true,
                result: "done".into(),
                cost_usd: None,
                duration_ms: 5,
                interrupted: false,
            },
        };
        let frame = json!({"type":"agent_event","session":"s-1","seq":3,"at":10,
                           "event":{"kind":"turn_end","ok":true,"result":"done","duration_ms":5}});
        assert_eq!(event.to_frame(), frame);
        // The frame is one of the agent's frames, both ways.
        assert_eq!(serde_json::to_value(AgentMessage::AgentEvent(event.clone())).unwrap(), frame);
        assert_eq!(serde_json::from_value::<AgentMessage>(frame).unwrap(), AgentMessage::AgentEvent(event));
        let state: Event = serde_json::from_value(json!({"kind":"state","state":"waiting"})).unwrap();
        assert_eq!(state, Event::State { state: SessionState::Waiting });
        assert_eq!(SessionState::parse("ended"), Some(SessionState::Ended));
        assert_eq!(SessionState::parse("nope"), None);
    }
}
