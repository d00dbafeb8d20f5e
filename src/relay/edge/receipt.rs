//! `POST /ack?code=…`: a push receipt from a phone's service worker, which cannot open a
//! WebSocket, passed to that code's agent as a `RECEIPT` message without being read. The body is
//! bounded ([`MAX_RECEIPT_LEN`]) and the endpoint rate-limited per code and per address, so a
//! stranger can neither flood an agent nor hold the relay's memory. The agent alone can tell a
//! receipt from noise (docs/SECURITY.md, "Push receipts").

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::net::http::{self, RequestHead};
use crate::protocol::relay::MAX_RECEIPT_LEN;
use crate::relay::core::Core;

/// Receipts one code may get in a [`WINDOW`]: a few phones acknowledging a few pushes each.
pub const PER_CODE: u32 = 30;
/// Receipts one address may send in a [`WINDOW`].
pub const PER_ADDRESS: u32 = 60;
/// The window the limits count in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Time the body may take to arrive after the head.
pub(super) const BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// Keys a limiter remembers; past it, windows that ended are forgotten, and if none has, the
/// newcomer is refused (the relay never grows without bound).
const MAX_KEYS: usize = 16_384;

/// Counts per key in fixed windows.
pub(super) struct Limiter<K> {
    max: u32,
    counts: Mutex<HashMap<K, (Instant, u32)>>,
}

impl<K: Hash + Eq + Copy> Limiter<K> {
    pub(super) fn new(max: u32) -> Self {
        Limiter { max, counts: Mutex::default() }
    }

    /// Counts one for `key` at `now`: false when it is over its limit.
    pub(super) fn take(&self, key: K, now: Instant) -> bool {
        let Ok(mut counts) = self.counts.lock() else { return false };
        if counts.len() >= MAX_KEYS && !counts.contains_key(&key) {
            counts.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
            if counts.len() >= MAX_KEYS {
                return false;
            }
        }
        let (start, count) = counts.entry(key).or_insert((now, 0));
        if now.duration_since(*start) >= WINDOW {
            (*start, *count) = (now, 0);
        }
        *count += 1;
        *count <= self.max
    }
}

/// The limits of the receipt endpoint, shared by every shard.
pub(super) struct ReceiptLimits {
    pub per_code: Limiter<u128>,
    pub per_address: Limiter<IpAddr>,
}

impl Default for ReceiptLimits {
    fn default() -> Self {
        ReceiptLimits { per_code: Limiter::new(PER_CODE), per_address: Limiter::new(PER_ADDRESS) }
    }
}

/// What a receipt's request gets before its body is read: the length to read, or the answer.
pub(super) enum Admitted {
    Read(usize),
    Answer(Plain),
}

/// A plain-text answer: status, reason and body.
pub(super) type Plain = (u16, &'static str, &'static str);

/// A body longer than a receipt may be, or than its length said: counted, and its answer.
pub(super) fn too_long(core: &Core) -> Plain {
    core.metrics().refused(413);
    (413, "Payload Too Large", "a receipt is at most 256 bytes")
}

/// Counts a receipt against `limits` and checks its length: how much body to read, or the
/// answer — 429 past a limit, 411/413 for a body without a length or too long.
pub(super) fn admit(core: &Core, limits: &ReceiptLimits, head: &RequestHead, code: u128, client: IpAddr) -> Admitted {
    let now = Instant::now();
    if !limits.per_address.take(client, now) || !limits.per_code.take(code, now) {
        core.metrics().refused(429);
        return Admitted::Answer((429, "Too Many Requests", "too many receipts"));
    }
    const NO_LENGTH: Plain = (411, "Length Required", "a receipt needs content-length");
    if head.header("transfer-encoding").is_some() {
        return Admitted::Answer(NO_LENGTH);
    }
    let Some(len) = head.single_header("content-length").and_then(|len| len.trim().parse::<usize>().ok()) else {
        return Admitted::Answer(NO_LENGTH);
    };
    if len > MAX_RECEIPT_LEN {
        return Admitted::Answer(too_long(core));
    }
    Admitted::Read(len)
}

/// Passes a receipt's body to its code's agent: 202 when the agent got it, 404 when no agent
/// holds the code.
pub(super) fn pass(core: &Core, code: u128, body: &[u8]) -> Plain {
    if core.receipt(code, body) {
        (202, "Accepted", "passed on")
    } else {
        (404, "Not Found", "no laptop holds this code")
    }
}

/// Reads the receipt's body (within [`BODY_TIMEOUT`]) and passes it on, answering as [`admit`]
/// and [`pass`] say.
pub(super) async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    core: &Core,
    limits: &ReceiptLimits,
    stream: &mut S,
    head: &RequestHead,
    leftover: Vec<u8>,
    code: u128,
    client: IpAddr,
) -> anyhow::Result<()> {
    let (status, reason, text) = match admit(core, limits, head, code, client) {
        Admitted::Answer(plain) => plain,
        Admitted::Read(len) if leftover.len() > len => too_long(core),
        Admitted::Read(len) => {
            let mut body = leftover;
            let start = body.len();
            body.resize(len, 0);
            match tokio::time::timeout(BODY_TIMEOUT, stream.read_exact(&mut body[start..])).await {
                Ok(Ok(_)) => pass(core, code, &body),
                Ok(Err(_)) | Err(_) => return Ok(()),
            }
        }
    };
    Ok(http::respond(stream, status, reason, text).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limiter_counts_per_key_in_windows() {
        let limiter = Limiter::new(2);
        let now = Instant::now();
        assert!(limiter.take(1u8, now) && limiter.take(1, now));
        assert!(!limiter.take(1, now), "the third in a window");
        assert!(limiter.take(2, now), "another key has its own count");
        assert!(limiter.take(1, now + WINDOW), "a new window");
    }
}
