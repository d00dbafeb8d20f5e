//! How much of what happened a session's log keeps: the limits on an event's text, output, diff
//! and input, and the clock its events are stamped with. The events themselves are wire types
//! (`crate::protocol::Event`, docs/PROTOCOL.md "Coding-agent sessions").

use serde_json::Value;

/// Longest text of one `text` event; longer agent text is cut.
pub const MAX_TEXT_LEN: usize = 64 << 10;
/// Longest `output` of one `tool_result` event; longer output is cut, the cut said.
pub const MAX_TOOL_OUTPUT: usize = 16 << 10;
/// Longest `diff` of one `tool_use` event.
pub const MAX_DIFF_LEN: usize = 64 << 10;
/// Most bytes of a tool's `input` kept in a `tool_use` or `approval` event; larger inputs are
/// replaced by their summary.
pub const MAX_INPUT_LEN: usize = 64 << 10;

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
