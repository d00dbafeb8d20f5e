//! Whether a push arrived: each push carries a receipt, a random secret inside its encrypted
//! payload (one per subscription), which the phone's service worker sends back through the relay
//! (`POST /ack`) once it has shown the notification. Only the agent and that browser ever hold
//! the secret before it comes back: the push service and the relay see ciphertext, so neither can
//! acknowledge a push that was not shown (docs/SECURITY.md, "Push receipts").
//!
//! The agent remembers the last [`MAX_TRACKED`] pushes by the SHA-256 of their receipts, and a
//! receipt is checked against all of them in constant time.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::NotifyEvent;
use crate::protocol::relay::MAX_RECEIPT_LEN;
pub use crate::protocol::PushStatus;

/// Pushes remembered for their receipts.
pub const MAX_TRACKED: usize = 64;
/// An approval's push with no receipt after this long is sent again, once.
pub const RESEND_AFTER: Duration = Duration::from_secs(20);

struct Sent {
    seq: u64,
    event: NotifyEvent,
    at: Instant,
    unix_ms: u64,
    /// SHA-256 of each subscription's receipt.
    receipts: Vec<[u8; 32]>,
    delivered: Option<Duration>,
    resent: bool,
}

/// The pushes sent lately and their receipts.
#[derive(Default)]
pub struct Receipts {
    sent: Mutex<VecDeque<Sent>>,
    next: std::sync::atomic::AtomicU64,
    resend_after: Option<Duration>,
}

/// A receipt made for one subscription's payload: the secret (hex, in the payload) and its hash.
pub struct Receipt {
    pub secret: String,
    hash: [u8; 32],
}

impl Receipt {
    pub fn new() -> Receipt {
        let bytes: [u8; 16] = rand::random();
        let secret = hex::encode(bytes);
        Receipt { hash: Sha256::digest(secret.as_bytes()).into(), secret }
    }
}

impl Default for Receipt {
    fn default() -> Self {
        Receipt::new()
    }
}

impl Receipts {
    pub fn new(resend_after: Duration) -> Self {
        Receipts { resend_after: Some(resend_after), ..Receipts::default() }
    }

    /// How long an approval's push waits for its receipt before it is sent again.
    pub fn resend_after(&self) -> Duration {
        self.resend_after.unwrap_or(RESEND_AFTER)
    }

    /// Records a push sent with `receipts` (one per subscription that took it); its number.
    pub fn sent(&self, event: NotifyEvent, receipts: &[Receipt], resent: bool) -> u64 {
        let seq = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let record = Sent {
            seq,
            event,
            at: Instant::now(),
            unix_ms,
            receipts: receipts.iter().map(|r| r.hash).collect(),
            delivered: None,
            resent,
        };
        if let Ok(mut sent) = self.sent.lock() {
            if sent.len() >= MAX_TRACKED {
                sent.pop_front();
            }
            sent.push_back(record);
        }
        seq
    }

    /// A receipt's body (`{"receipt":"<32 hex>"}`) from the relay: true when it answers a push
    /// remembered here (the first receipt of a push marks it delivered). Anything else is noise.
    pub fn take(&self, body: &[u8]) -> bool {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            receipt: String,
        }
        if body.len() > MAX_RECEIPT_LEN {
            return false;
        }
        let Ok(Body { receipt }) = serde_json::from_slice::<Body>(body) else { return false };
        if receipt.len() != 32 || !receipt.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return false;
        }
        let hash: [u8; 32] = Sha256::digest(receipt.as_bytes()).into();
        let Ok(mut sent) = self.sent.lock() else { return false };
        // Every remembered receipt is compared, whichever matches.
        let mut found = None;
        for (index, push) in sent.iter().enumerate() {
            for kept in &push.receipts {
                if bool::from(kept.ct_eq(&hash)) {
                    found = Some(index);
                }
            }
        }
        let Some(push) = found.and_then(|index| sent.get_mut(index)) else { return false };
        if push.delivered.is_none() {
            push.delivered = Some(push.at.elapsed());
        }
        true
    }

    /// Whether push `seq` had a receipt.
    pub fn delivered(&self, seq: u64) -> bool {
        self.sent.lock().is_ok_and(|sent| sent.iter().any(|push| push.seq == seq && push.delivered.is_some()))
    }

    /// The last push, for `status`.
    pub fn last(&self) -> Option<PushStatus> {
        let sent = self.sent.lock().ok()?;
        let push = sent.back()?;
        let state = match push.delivered {
            Some(_) => "delivered",
            None if push.at.elapsed() >= self.resend_after() => "not-delivered",
            None => "waiting",
        };
        Some(PushStatus {
            event: push.event.as_str().to_owned(),
            sent_at: push.unix_ms,
            state: state.to_owned(),
            delivered_after_ms: push.delivered.map(|d| d.as_millis() as u64),
            resent: push.resent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_receipt_the_agent_made_marks_a_push_delivered() {
        let receipts = Receipts::new(Duration::from_secs(20));
        let made = [Receipt::new(), Receipt::new()];
        let seq = receipts.sent(NotifyEvent::Approval, &made, false);
        assert_eq!(receipts.last().unwrap().state, "waiting");
        for noise in [
            &b""[..],
            b"{}",
            b"{\"receipt\":\"00000000000000000000000000000000\"}",
            b"{\"receipt\":\"zz\"}",
            format!("{{\"receipt\":\"{}\",\"more\":1}}", made[0].secret).as_bytes(),
            made[0].secret.as_bytes(),
        ] {
            assert!(!receipts.take(noise), "{:?}", String::from_utf8_lossy(noise));
        }
        assert!(!receipts.delivered(seq));
        assert!(receipts.take(format!("{{\"receipt\":\"{}\"}}", made[1].secret).as_bytes()));
        assert!(receipts.delivered(seq));
        let last = receipts.last().unwrap();
        assert_eq!((last.event.as_str(), last.state.as_str(), last.resent), ("approval", "delivered", false));
        assert!(last.delivered_after_ms.is_some());
    }

    #[test]
    fn a_push_without_a_receipt_in_time_is_not_delivered() {
        let receipts = Receipts::new(Duration::ZERO);
        receipts.sent(NotifyEvent::TurnEnd, &[Receipt::new()], true);
        let last = receipts.last().unwrap();
        assert_eq!((last.state.as_str(), last.resent), ("not-delivered", true));
    }
}
