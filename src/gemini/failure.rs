//! Why a call could not start or go on: a stable code and a sentence that never holds the key.

use super::CallErrorCode;
use crate::protocol::AgentMessage;
use crate::secret::Secret;

/// Why a call could not start or go on: a stable code and a sentence without the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallFailure {
    pub code: CallErrorCode,
    pub message: String,
    /// The WebSocket close code the service ended with, if it sent one.
    pub close_code: Option<u16>,
}

impl CallFailure {
    /// A failure whose message has every occurrence of `key` removed.
    pub fn new(code: CallErrorCode, message: impl Into<String>, key: &Secret) -> Self {
        CallFailure { code, message: scrub(&message.into(), key), close_code: None }
    }

    /// The same failure, caused by a close with `code`.
    pub fn with_close_code(mut self, code: u16) -> Self {
        self.close_code = Some(code);
        self
    }

    pub(super) fn to_message(&self) -> AgentMessage {
        AgentMessage::CallError { code: self.code, message: self.message.clone() }
    }
}

/// `text` without any occurrence of the key (a hostile server may echo it).
fn scrub(text: &str, key: &Secret) -> String {
    let key = key.expose();
    if key.is_empty() {
        text.to_owned()
    } else {
        text.replace(key, "<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_scrub_the_key_and_keep_stable_codes() {
        let key = Secret::from_string("AIzaSy-very-secret".into());
        let failure = CallFailure::new(CallErrorCode::BadKey, "key AIzaSy-very-secret rejected", &key);
        assert_eq!(failure.message, "key <redacted> rejected");
        let codes = [
            CallErrorCode::BadKey,
            CallErrorCode::GeminiRefused,
            CallErrorCode::GeminiNotFound,
            CallErrorCode::GeminiUnavailable,
            CallErrorCode::GeminiUnreachable,
            CallErrorCode::GeminiClosed,
        ];
        let names: Vec<_> = codes.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "bad-key",
                "gemini-refused",
                "gemini-not-found",
                "gemini-unavailable",
                "gemini-unreachable",
                "gemini-closed"
            ]
        );
        let json = failure.to_message().to_json();
        assert_eq!(json, r#"{"type":"call_error","code":"bad-key","message":"key <redacted> rejected"}"#);
    }
}
