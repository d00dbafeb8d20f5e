//! The liveness loop of every long-lived WebSocket voxa holds (relay link, loopback socket, a
//! host's environment sessions, the Gemini link): ping when quiet, give the socket up after
//! silence. Each owner keeps a [`Liveness`] beside its socket, calls [`Liveness::heard`] for
//! every frame that arrives and selects on [`Liveness::tick`].

use std::time::Duration;

use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::protocol::{IDLE_TIMEOUT, PING_INTERVAL};

/// How a socket notices its peer is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Ping the peer this often.
    pub ping_every: Duration,
    /// Give the connection up when nothing arrived for this long.
    pub dead_after: Duration,
}

impl Heartbeat {
    /// The protocol's own timing (loopback sockets and environment sessions): see
    /// [`PING_INTERVAL`] and [`IDLE_TIMEOUT`].
    pub const PROTOCOL: Heartbeat = Heartbeat { ping_every: PING_INTERVAL, dead_after: IDLE_TIMEOUT };
}

impl Default for Heartbeat {
    /// The relay link's timing: a half-open socket is noticed within 25 s when idle.
    fn default() -> Self {
        Heartbeat { ping_every: Duration::from_secs(10), dead_after: Duration::from_secs(25) }
    }
}

/// What a tick of the liveness loop asks of its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pulse {
    /// Send a ping.
    Ping,
    /// Nothing arrived for this long: the peer is gone, close the socket.
    Silent(Duration),
}

/// Ping ticker and last-heard clock of one socket.
#[derive(Debug)]
pub struct Liveness {
    heartbeat: Heartbeat,
    last_heard: Instant,
    ticker: Interval,
}

impl Liveness {
    /// Starts the clock now; the first tick comes at once.
    pub fn new(heartbeat: Heartbeat) -> Self {
        let mut ticker = tokio::time::interval(heartbeat.ping_every);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Liveness { heartbeat, last_heard: Instant::now(), ticker }
    }

    /// Something arrived from the peer.
    pub fn heard(&mut self) {
        self.last_heard = Instant::now();
    }

    /// True when the peer was heard within `window`.
    pub fn heard_within(&self, window: Duration) -> bool {
        self.last_heard.elapsed() < window
    }

    /// Waits for the next tick and says whether to ping or to give up.
    pub async fn tick(&mut self) -> Pulse {
        self.ticker.tick().await;
        let silent = self.last_heard.elapsed();
        if silent >= self.heartbeat.dead_after {
            Pulse::Silent(silent)
        } else {
            Pulse::Ping
        }
    }
}

/// A close frame with a code and reason.
pub fn close_message(code: CloseCode, reason: &str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.to_owned().into() }))
}

/// Sleeps until `deadline`, or forever without one (a disabled `select!` arm).
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Resolves when `token` is cancelled, never without one.
pub async fn cancelled(token: Option<CancellationToken>) {
    match token {
        Some(token) => token.cancelled_owned().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pings_while_heard_and_reports_silence_after_dead_after() {
        let heartbeat = Heartbeat { ping_every: Duration::from_secs(10), dead_after: Duration::from_secs(25) };
        let mut liveness = Liveness::new(heartbeat);
        assert_eq!(liveness.tick().await, Pulse::Ping); // at once
        assert_eq!(liveness.tick().await, Pulse::Ping); // 10 s
        liveness.heard();
        assert!(liveness.heard_within(Duration::from_secs(1)));
        assert_eq!(liveness.tick().await, Pulse::Ping); // 20 s, heard at 10 s
        assert_eq!(liveness.tick().await, Pulse::Ping); // 30 s: 20 s of silence
        assert_eq!(liveness.tick().await, Pulse::Silent(Duration::from_secs(30))); // 40 s
        assert!(!liveness.heard_within(Duration::from_secs(29)));
    }
}
