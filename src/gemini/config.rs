//! Where and how to reach Gemini Live: the endpoint, the key, the model and voice, the heartbeat.

use std::time::Duration;

use crate::net::liveness::Heartbeat;
use crate::secret::Secret;

/// Public Gemini Live endpoint; `VOXA_GEMINI_URL` overrides it.
pub const GEMINI_LIVE_URL: &str =
    "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";

/// Pings on a quiet Gemini socket. The service answers pings 8 to 30 s late, so the link counts
/// as dead only after a full minute without any frame.
pub const HEARTBEAT: Heartbeat = Heartbeat { ping_every: Duration::from_secs(10), dead_after: Duration::from_secs(60) };
/// `VOXA_GEMINI_URL` must be a WebSocket URL without a key in it: the key travels only in the
/// `x-goog-api-key` header. The URL itself is never repeated (it may hold a key).
pub fn check_url(url: &str) -> anyhow::Result<()> {
    let parsed = url::Url::parse(url.trim())
        .map_err(|_| crate::error::ConfigError::new("VOXA_GEMINI_URL is not a valid URL (expected wss://…)"))?;
    if !matches!(parsed.scheme(), "ws" | "wss") {
        return Err(crate::error::ConfigError::new(
            "VOXA_GEMINI_URL must start with wss:// (or ws:// for a loopback host)",
        )
        .into());
    }
    if parsed.query_pairs().any(|(name, _)| name.eq_ignore_ascii_case("key")) {
        return Err(crate::error::ConfigError::new(
            "VOXA_GEMINI_URL must not carry an API key (?key=…): voxa sends GEMINI_API_KEY in a header",
        )
        .into());
    }
    Ok(())
}

/// Where and how to reach Gemini Live.
#[derive(Clone, Debug)]
pub struct GeminiConfig {
    /// Sent only in the `x-goog-api-key` header; `Debug` shows it redacted.
    pub api_key: Secret,
    /// WebSocket endpoint (`VOXA_GEMINI_URL` overrides the public one).
    pub url: String,
    /// Model name; the `models/` prefix is added when missing.
    pub model: String,
    /// Prebuilt voice name (e.g. `Kore`).
    pub voice: String,
    /// Pings on a quiet Gemini socket; one silent for `dead_after` counts as lost (and is resumed).
    pub heartbeat: Heartbeat,
}

impl GeminiConfig {
    /// The settings for `api_key`: the endpoint of [`live_url`], `model` or the default model, the
    /// `Kore` voice and the default heartbeat.
    pub fn new(api_key: Secret, model: Option<String>) -> anyhow::Result<Self> {
        Ok(GeminiConfig {
            api_key,
            url: live_url()?,
            model: model.unwrap_or_else(|| crate::config::DEFAULT_GEMINI_MODEL.to_owned()),
            voice: "Kore".into(),
            heartbeat: HEARTBEAT,
        })
    }
}

/// The Live endpoint to dial: `VOXA_GEMINI_URL` when set (and valid), else [`GEMINI_LIVE_URL`].
pub fn live_url() -> anyhow::Result<String> {
    match std::env::var("VOXA_GEMINI_URL").ok().filter(|url| !url.trim().is_empty()) {
        Some(url) => {
            check_url(&url)?;
            Ok(url.trim().to_owned())
        }
        None => Ok(GEMINI_LIVE_URL.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_redacts_the_key() {
        let config = GeminiConfig {
            api_key: Secret::from_string("AIzaSy-very-secret".into()),
            url: "wss://example.com/ws".into(),
            model: "models/m".into(),
            voice: "Kore".into(),
            heartbeat: Heartbeat::default(),
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
        assert!(shown.contains("redacted"));
    }
}
