//! Self-hosted voice: the shape of `GEMINI_API_KEY` (never its value) and the Live endpoint.

use super::http::{open_stream, Target};
use super::Check;
use crate::net::dial::DialOptions;
use crate::secret::Secret;

/// Length of a Google API key (`AIza` + 35 characters).
const GOOGLE_KEY_LEN: usize = 39;

/// The shape of `GEMINI_API_KEY` (taken out of the environment at start), never its value.
pub(super) fn check_gemini_key(key: Option<&Secret>) -> Check {
    const NAME: &str = "gemini key";
    let key = key.map(Secret::expose).unwrap_or_default().trim();
    if key.is_empty() {
        return Check::fail(
            NAME,
            "GEMINI_API_KEY is not set; --self-hosted needs it",
            "export GEMINI_API_KEY=… (from Google AI Studio)",
        );
    }
    let plausible = key.len() == GOOGLE_KEY_LEN
        && key.starts_with("AIza")
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plausible {
        Check::ok(NAME, "GEMINI_API_KEY is set and plausible (shape of a Google API key)")
    } else {
        Check::warn(
            NAME,
            format!(
                "GEMINI_API_KEY does not look like a Google API key ({GOOGLE_KEY_LEN} characters starting with AIza)"
            ),
            "copy the key again from Google AI Studio (no quotes or spaces)",
        )
    }
}

/// TCP (and TLS) to the Gemini Live endpoint; the key is not sent.
pub(super) async fn check_gemini_reachable(dial: Option<&DialOptions>) -> Check {
    const NAME: &str = "gemini";
    let url = match crate::gemini::live_url() {
        Ok(url) => url,
        Err(err) => return Check::fail(NAME, format!("{err:#}"), "fix or unset VOXA_GEMINI_URL"),
    };
    let Ok(parsed) = url::Url::parse(&url) else {
        return Check::fail(NAME, "the Gemini URL is not valid", "fix or unset VOXA_GEMINI_URL");
    };
    let target = Target {
        host: parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned(),
        port: parsed.port_or_known_default().unwrap_or(443),
        tls: parsed.scheme() == "wss",
        base_path: String::new(),
    };
    let dial = dial.cloned().unwrap_or_default();
    match open_stream(&target, &dial).await {
        Ok(_) => Check::ok(
            NAME,
            format!("{}:{} answers{}", target.host, target.port, if target.tls { " (TLS verified)" } else { "" }),
        ),
        Err(err) => Check::fail(
            NAME,
            format!("cannot reach {}:{}: {err:#}", target.host, target.port),
            "check the network and proxy (HTTPS_PROXY); Gemini Live is wss:// on port 443",
        ),
    }
}
