//! Tool frames (docs/PROTOCOL.md, "Tools"): `tool_call`, `tool_result`, `image` and the tool error.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ErrorCode;

/// One tool invocation.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(default = "empty_object")]
    pub args: Value,
    /// Environment to route the call to (docs/PROTOCOL.md, "Environments"); absent for this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Who asked, for the laptop's audit and policy: set by a page carrying a call of the model of
    /// a call the relay hosts ([`HOSTED_CALLER`]); an agent honours it on relayed sessions only
    /// (docs/PROTOCOL.md, "Hosted voice").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

/// `caller` of the tool calls the model of a call the relay hosts makes (carried by the page), and
/// their audit name.
pub const HOSTED_CALLER: &str = "gemini-hosted";

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Outcome of one tool call.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ToolResult {
    pub id: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

impl ToolResult {
    pub fn success(id: String, result: Value) -> Self {
        Self { id, ok: true, result: Some(result), error: None, env: None }
    }

    pub fn failure(id: String, error: ToolError) -> Self {
        Self { id, ok: false, result: None, error: Some(error), env: None }
    }
}

/// A screenshot, sent to the phone only.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
pub struct Image {
    pub id: String,
    pub mime: String,
    pub width: u32,
    pub height: u32,
    /// Base64 of the encoded image.
    pub data: String,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("id", &self.id)
            .field("mime", &self.mime)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// A failed tool call: a stable code and a sentence for people.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

/// `{"type":"receipt","id","ok",error?}`: what became of a frame that carried `receipt: id`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct Receipt {
    pub id: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

impl Receipt {
    /// The receipt of a frame that was applied (`Ok`) or refused.
    pub fn of(id: String, outcome: Result<(), ToolError>) -> Self {
        match outcome {
            Ok(()) => Receipt { id, ok: true, error: None },
            Err(error) => Receipt { id, ok: false, error: Some(error) },
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::*;

    #[test]
    fn tool_call_parses_with_and_without_args() {
        let call = parse_client(r#"{"type":"tool_call","id":"c1","name":"list_dir"}"#).unwrap();
        assert_eq!(
            call,
            ClientMessage::ToolCall(ToolCall {
                id: "c1".into(),
                name: "list_dir".into(),
                args: serde_json::json!({}),
                env: None,
                caller: None
            })
        );
        assert!(parse_client(r#"{"type":"tool_call","id":"c1"}"#).is_err());
        assert!(parse_client(r#"{"type":"nope"}"#).is_err());
    }
}
