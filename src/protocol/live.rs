//! The `/live` socket between a page and a relay that hosts its call (docs/PROTOCOL.md, "Hosted
//! voice"). Nothing of the pairing crosses it: no challenge, no hello, no session frame. The relay
//! sends the page the voice frames of a self-hosted call ([`AgentMessage`](super::AgentMessage)'s
//! `call_started`, `transcript`, `tool_activity` …) and the model's calls as `tool_call` and
//! `cancel` frames shaped as a session's ([`ClientMessage`](super::ClientMessage)), which the
//! page sends on inside its sealed session; what the page sends the relay is [`LiveMessage`].

use serde::{Deserialize, Serialize};

use super::ToolResult;

/// Start of the ids of the calls a relay's model makes; the page carries no other id on `/live`.
pub const LIVE_CALL_PREFIX: &str = "gemini-hosted-";

/// Frames a page sends a relay on `/live`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveMessage {
    /// Starts the call; `tools` are the names the laptop listed in the page's sealed `hello_ok`,
    /// the only tools the relay declares to its model.
    CallStart {
        #[serde(default)]
        tools: Vec<String>,
    },
    /// Typed text for the model.
    Say { text: String },
    /// The end of a push-to-talk utterance.
    AudioEnd,
    /// Ends the call.
    CallEnd,
    /// The laptop's answer to one of the relay's `tool_call`s, as the page got it in its sealed
    /// session (a screenshot's pixels stay on the page: its result says one was shown).
    ToolResult(ToolResult),
    /// A note for the model (narration, an approval's read-back) that the laptop sent the page.
    Narrate { text: String },
}

impl LiveMessage {
    /// The frame as the page sends it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads one text frame from a page.
    pub fn parse(text: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn live_frames_have_the_agreed_shape() {
        let start = LiveMessage::parse(br#"{"type":"call_start","tools":["list_dir","brief"]}"#).unwrap();
        assert_eq!(start, LiveMessage::CallStart { tools: vec!["list_dir".into(), "brief".into()] });
        assert_eq!(LiveMessage::parse(br#"{"type":"call_start"}"#).unwrap(), LiveMessage::CallStart { tools: vec![] });
        let result =
            LiveMessage::parse(br#"{"type":"tool_result","id":"gemini-hosted-0a1b2c3d-1","ok":true,"result":{"n":1}}"#)
                .unwrap();
        let LiveMessage::ToolResult(result) = result else { panic!("not a result") };
        assert_eq!(
            (result.id.as_str(), result.ok, result.result),
            ("gemini-hosted-0a1b2c3d-1", true, Some(json!({"n":1})))
        );
        let note: serde_json::Value =
            serde_json::from_str(&LiveMessage::Narrate { text: "hi".into() }.to_json()).unwrap();
        assert_eq!(note, json!({"type":"narrate","text":"hi"}));
        for junk in [&br#"{"type":"hello","protocol":2}"#[..], br#"{"type":"calls"}"#, br#"{"type":"follow"}"#, b"[]"] {
            assert!(LiveMessage::parse(junk).is_err(), "{}", String::from_utf8_lossy(junk));
        }
    }
}
