//! Every text frame the relay and agent decode: `parse_client` and the relay's presence notices
//! (`Presence::parse`, `is_notice`), on arbitrary bytes read as UTF-8 (lossy, as a text frame must
//! be valid).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use voxa::protocol::relay::{self as presence, Presence};
use voxa::protocol::{self, ClientMessage};

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
    let notice = presence::is_notice(text.as_bytes());
    if let Some(parsed) = Presence::parse(&text) {
        assert!(notice, "a parsed notice starts with the notice mark");
        assert_eq!(Presence::parse(&parsed.to_text()), Some(parsed), "a notice survives re-encoding");
    }
    if let Ok(message) = protocol::parse_client(&text) {
        assert!(!notice, "a client message is never a notice");
        let floats = matches!(&message, ClientMessage::ToolCall(call) if has_float(&call.args));
        if !floats {
            let again = serde_json::to_string(&message).expect("client messages serialise");
            assert_eq!(protocol::parse_client(&again).ok(), Some(message), "re-encoding changes the message");
        }
    }
});
