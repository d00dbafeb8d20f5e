//! Every text frame the relay and agent decode: `parse_client`, `is_peer_frame`,
//! `PeerNotice::parse`, on arbitrary bytes read as UTF-8 (lossy, as a text frame must be valid).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use voxa::protocol::{self, ClientMessage, PeerNotice};

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let peer = protocol::is_peer_frame(&text);
    if PeerNotice::parse(&text).is_some() {
        assert!(peer, "a parsed notice is a peer frame");
    }
    // Whatever a lenient JSON reader takes as presence must never pass the relay.
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&text) {
        if map.get("type").and_then(Value::as_str) == Some(protocol::PEER_TYPE) {
            assert!(peer, "a frame typed __peer was not recognised");
        }
    }
    if let Ok(message) = protocol::parse_client(&text) {
        let floats = matches!(&message, ClientMessage::ToolCall(call) if has_float(&call.args));
        if !floats {
            let again = serde_json::to_string(&message).expect("client messages serialise");
            assert_eq!(protocol::parse_client(&again).ok(), Some(message), "re-encoding changes the message");
        }
    }
});
