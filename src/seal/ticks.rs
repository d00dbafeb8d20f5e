//! Sealed ticks (docs/PROTOCOL.md, "Sealed sessions (protocol 3)", "Ticks"): each side of a
//! sealed session sends a sealed `{"type":"tick"}` once it has sent nothing else for
//! [`TICK_INTERVAL`], and ends a session that heard nothing sealed for [`STALL_AFTER`]
//! (`sealed-session-stalled`). Every sealed message carries the next nonce, so a frame the relay
//! drops makes the next one — at the latest the next tick — fail to open: a dropped frame ends the
//! session `sealed-session-broken` within one interval, a dead socket within [`STALL_AFTER`].

use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

/// A side that sent nothing sealed for this long sends a tick.
pub const TICK_INTERVAL: Duration = Duration::from_secs(10);
/// A side that heard nothing sealed for this long ends the session `sealed-session-stalled`.
pub const STALL_AFTER: Duration = Duration::from_secs(25);
/// The tick, as sealed (kind `0x00`, a JSON frame).
pub const TICK: &str = r#"{"type":"tick"}"#;

/// Longest frame read as a tick: a tick is 15 bytes; anything this long is passed on as it is.
const MAX_TICK_LEN: usize = 64;

/// Whether an opened JSON frame is a tick, which the seal consumes: the session never sees it.
pub fn is_tick(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Typed<'a> {
        #[serde(rename = "type", borrow)]
        kind: &'a str,
    }
    text.len() <= MAX_TICK_LEN && serde_json::from_str::<Typed>(text).is_ok_and(|frame| frame.kind == "tick")
}

/// One side's two clocks: when its next tick is due and when its peer counts as stalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticks {
    next_tick: Instant,
    stall_at: Instant,
}

impl Ticks {
    /// Both clocks started at `now` (the session was just sealed).
    pub fn new(now: Instant) -> Self {
        Ticks { next_tick: now + TICK_INTERVAL, stall_at: now + STALL_AFTER }
    }

    /// This side sent a sealed message at `now`: no tick is due before another interval.
    pub fn sent(&mut self, now: Instant) {
        self.next_tick = now + TICK_INTERVAL;
    }

    /// A sealed message from the peer opened at `now`.
    pub fn heard(&mut self, now: Instant) {
        self.stall_at = now + STALL_AFTER;
    }

    /// When this side sends a tick unless it sends something else first.
    pub fn next_tick(&self) -> Instant {
        self.next_tick
    }

    /// When the session ends stalled unless something sealed arrives first.
    pub fn stall_at(&self) -> Instant {
        self.stall_at
    }

    /// Whether the peer is stalled at `now`.
    pub fn stalled(&self, now: Instant) -> bool {
        now >= self.stall_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_is_read_however_it_is_spelled_and_nothing_else_is_one() {
        for tick in [TICK, r#"{ "type" : "tick" }"#, r#"{"type":"tick","extra":1}"#] {
            assert!(is_tick(tick), "{tick}");
        }
        let long = format!(r#"{{"type":"tick","pad":"{}"}}"#, "x".repeat(64));
        for other in [r#"{"type":"status"}"#, r#"{"type":"ticks"}"#, "tick", "", "{}", long.as_str()] {
            assert!(!is_tick(other), "{other}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sending_puts_the_tick_off_and_hearing_puts_the_stall_off() {
        let start = Instant::now();
        let mut ticks = Ticks::new(start);
        assert_eq!((ticks.next_tick(), ticks.stall_at()), (start + TICK_INTERVAL, start + STALL_AFTER));
        tokio::time::advance(Duration::from_secs(7)).await;
        ticks.sent(Instant::now());
        assert_eq!(ticks.next_tick(), start + Duration::from_secs(17));
        assert_eq!(ticks.stall_at(), start + STALL_AFTER, "sending says nothing of the peer");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(ticks.stalled(Instant::now()));
        ticks.heard(Instant::now());
        assert!(!ticks.stalled(Instant::now()));
        assert_eq!(ticks.stall_at(), start + Duration::from_secs(27) + STALL_AFTER);
    }
}
