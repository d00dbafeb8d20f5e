//! Notification frames (docs/PROTOCOL.md, "Notifications"): the web client hands the agent its
//! Web Push subscription, as `PushSubscription.toJSON()` gives it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The longest endpoint URL accepted.
pub const MAX_PUSH_ENDPOINT_LEN: usize = 1024;

/// A subscription's keys: the browser's P-256 public key and its 16-byte auth secret (base64url).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushKeys {
    pub p256dh: String,
    pub auth: String,
}

/// One browser's push subscription (`push_subscribe`'s `subscription`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSubscription {
    pub endpoint: String,
    pub keys: PushKeys,
}

impl std::fmt::Debug for PushSubscription {
    // The endpoint is a capability (anyone holding it can push to the browser): show its host only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushSubscription")
            .field("endpoint", &push_endpoint_host(&self.endpoint))
            .finish_non_exhaustive()
    }
}

impl PushSubscription {
    /// Checks what a hostile page could send: an `https://` endpoint (loopback `http://` too), a
    /// 65-byte uncompressed point and a 16-byte auth secret. The error is a sentence for the page.
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoint.len() > MAX_PUSH_ENDPOINT_LEN {
            return Err(format!("the push endpoint is longer than {MAX_PUSH_ENDPOINT_LEN} bytes"));
        }
        let url = url::Url::parse(&self.endpoint).map_err(|_| "the push endpoint is not a URL".to_owned())?;
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
            None => false,
        };
        match url.scheme() {
            "https" if url.host().is_some() => {}
            // As for relays: plain http only to this machine.
            "http" if loopback => {}
            _ => return Err("the push endpoint must be an https:// URL".into()),
        }
        let decode = |value: &str| URL_SAFE_NO_PAD.decode(value.trim_end_matches('='));
        match decode(&self.keys.p256dh) {
            Ok(point) if point.len() == 65 && point[0] == 0x04 => {}
            _ => return Err("keys.p256dh is not an uncompressed P-256 public key".into()),
        }
        match decode(&self.keys.auth) {
            Ok(auth) if auth.len() == 16 => Ok(()),
            _ => Err("keys.auth must be 16 bytes of base64url".into()),
        }
    }

    /// The endpoint's host, the only part of it voxa prints.
    pub fn host(&self) -> String {
        push_endpoint_host(&self.endpoint)
    }
}

/// The host of an endpoint URL (or `?` when it has none).
pub fn push_endpoint_host(endpoint: &str) -> String {
    url::Url::parse(endpoint).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_else(|| "?".into())
}
