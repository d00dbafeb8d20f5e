//! What a session's log holds (docs/PROTOCOL.md, "Coding-agent sessions": `agent_event`): one [`Event`] per thing that happened,
//! numbered per session from 1 and kept on disk.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::{DecidedBy, Decision, Risk};

/// Longest text of one `text` event; longer agent text is cut.
pub const MAX_TEXT_LEN: usize = 64 << 10;
/// Longest `output` of one `tool_result` event; longer output is cut, the cut said.
pub const MAX_TOOL_OUTPUT: usize = 16 << 10;
/// Longest `diff` of one `tool_use` event.
pub const MAX_DIFF_LEN: usize = 64 << 10;
/// Most bytes of a tool's `input` kept in a `tool_use` or `approval` event; larger inputs are
/// replaced by their summary.
pub const MAX_INPUT_LEN: usize = 64 << 10;

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
    },
    TurnEnd {
        ok: bool,
        result: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        duration_ms: u64,
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

/// One numbered event of one session: an `agent_event` frame without its `type`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionEvent {
    pub session: String,
    pub seq: u64,
    /// Unix ms.
    pub at: u64,
    pub event: Event,
}

impl SessionEvent {
    /// The `agent_event` frame.
    pub fn to_frame(&self) -> Value {
        let mut frame = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut frame {
            map.insert("type".into(), Value::String("agent_event".into()));
        }
        frame
    }
}

/// An input small enough to keep, else `{"omitted": "<summary>"}`.
pub fn bounded_input(input: Value, summary: &str) -> Value {
    let len = serde_json::to_string(&input).map_or(usize::MAX, |text| text.len());
    if len <= MAX_INPUT_LEN {
        input
    } else {
        serde_json::json!({ "omitted": format!("{len} bytes: {summary}") })
    }
}

/// `text` cut to `max` bytes, saying so when it was cut.
pub fn capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}\n… ({} more bytes)", crate::text::prefix(text, max), text.len() - crate::text::prefix(text, max).len())
}

/// Now, in Unix ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_have_the_wire_shape() {
        let event = SessionEvent {
            session: "s-1".into(),
            seq: 3,
            at: 10,
            event: Event::TurnEnd { ok: true, result: "done".into(), cost_usd: None, duration_ms: 5 },
        };
        assert_eq!(
            event.to_frame(),
            json!({"type":"agent_event","session":"s-1","seq":3,"at":10,
                   "event":{"kind":"turn_end","ok":true,"result":"done","duration_ms":5}})
        );
        let state: Event = serde_json::from_value(json!({"kind":"state","state":"waiting"})).unwrap();
        assert_eq!(state, Event::State { state: SessionState::Waiting });
        assert_eq!(SessionState::parse("ended"), Some(SessionState::Ended));
        assert_eq!(SessionState::parse("nope"), None);
    }

    #[test]
    fn long_text_and_inputs_are_cut() {
        let cut = capped(&"é".repeat(100), 11);
        assert!(cut.starts_with("ééééé\n…"), "{cut}");
        assert!(cut.contains("190 more bytes"), "{cut}");
        assert_eq!(capped("short", 10), "short");
        let big = json!({"content": "x".repeat(MAX_INPUT_LEN + 1)});
        assert!(bounded_input(big, "write a.txt")["omitted"].as_str().unwrap().ends_with("write a.txt"));
        assert_eq!(bounded_input(json!({"a": 1}), "s"), json!({"a": 1}));
    }
}
