//! The relay's core: it moves frames between the sockets of one relay code and never sees HTTP,
//! TLS or ACME. Its entry point is [`Core::accept`]: a stream already upgraded to a WebSocket,
//! and the place it claims (a code, a side); a service's socket comes in beside it through
//! [`Core::accept_line`], which runs the socket and hands the service a [`ServiceLine`]. Pairing
//! ([`hub`]: one agent and up to [`MAX_PHONES_PER_CODE`] phones per code), forwarding
//! ([`socket`]), a service's socket ([`line`]), queues and the memory ledger ([`queue`]), limits
//! ([`SocketLimits`]) and the relay's metrics ([`metrics`]) live here.
//!
//! Decisions the protocol leaves to the relay:
//! - A replaced agent is closed 4001 `replaced`; the phones hear `left` and then `joined`, so
//!   they start their sessions (hello) again.
//! - A phone past [`MAX_PHONES_PER_CODE`] takes the place of the oldest phone the agent has not
//!   marked proven (`PROVEN`, relay framing 3), which is closed 4003 `made-room-for-a-new-phone`;
//!   when every phone is proven, the newcomer is closed 4003 `too-many-phones` right after the
//!   upgrade. Marks are the word of the agent seated when they were given: a new agent starts
//!   with none.
//! - Cut-through: a message goes on in parts as its bytes arrive (at most 16 KiB each), never
//!   held whole; toward an agent each part is a `PART` message, toward a phone a WebSocket
//!   fragment. A sender that fails in the middle of a message ends it for its receiver: the agent
//!   hears `LEFT` for that phone, a phone is closed 4004. Messages over 16 MiB close the socket
//!   with 1009, bad framing with 1002, text that is not UTF-8 with 1007; shutdown and idle
//!   sockets get 1001.
//! - Slow readers: while a receiver's queue is full, the sender's socket is not read (so TCP slows
//!   the sender down); a receiver that writes nothing at all for [`STALL_TIMEOUT`] is closed 1013
//!   and its queue freed at once. One agent socket carries every phone of its code, so a phone
//!   that stops reading holds the agent's messages back until it is closed.
//! - A socket silent for the ping interval is pinged and one silent for the idle timeout is
//!   dropped, so a vanished peer is gone within 45 s and the others hear of it. Every ping is
//!   answered (a bounded number of pongs wait).
//! - Memory: one budget for the process counts queued parts, parts being read and parts waiting
//!   for room; over it the oldest socket holding more than an even share is closed 1013.

pub(crate) mod codec;
pub(crate) mod hub;
pub(crate) mod line;
pub mod metrics;
pub(crate) mod queue;
pub(crate) mod reader;
#[doc(hidden)]
pub mod reader_check;
pub(crate) mod socket;
pub(crate) mod stream;

use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use tokio_util::sync::CancellationToken;

use self::hub::Hub;
use self::line::ServiceLine;
use self::metrics::RelayMetrics;
use self::queue::Ledger;
use self::socket::Membership;
pub(crate) use self::stream::RelayStream;
use crate::protocol::relay::Framing;
pub use crate::protocol::relay::MAX_PHONES_PER_CODE;
use crate::protocol::{PeerRole, IDLE_TIMEOUT, MAX_FRAME_LEN, PING_INTERVAL, SEND_QUEUE_FRAMES};

/// Bytes queued for one socket's writer before its senders wait. Messages go through in parts of
/// at most 16 KiB, so this bounds what one socket holds of any message; a single frame (the
/// relay's own, or a hosted call's) always fits an empty queue.
pub const SEND_QUEUE_BYTES: usize = 64 << 10;
/// Time a receiver whose queue is full may write nothing before it is closed 1013.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of messages the whole process may hold in queues and partial reads; over it, the oldest
/// socket holding more than its share is closed 1013.
pub const MEMORY_BUDGET: usize = 256 << 20;

/// Timing and size limits of one relayed socket.
#[derive(Clone, Copy, Debug)]
pub struct SocketLimits {
    /// Silence after which a socket is pinged.
    pub ping_interval: Duration,
    /// Silence after which a socket is dropped.
    pub idle_timeout: Duration,
    /// Frames queued for a socket; while they are queued, the sender waits.
    pub send_queue_frames: usize,
    /// Bytes queued for a socket; while they are queued, the sender waits.
    pub send_queue_bytes: usize,
    /// Time a socket with a full queue may write nothing before it is closed 1013 (slow reader).
    pub stall_timeout: Duration,
    /// Largest message accepted; larger ones close the socket with 1009.
    pub max_frame_len: usize,
}

impl Default for SocketLimits {
    fn default() -> Self {
        SocketLimits {
            ping_interval: PING_INTERVAL,
            idle_timeout: IDLE_TIMEOUT,
            send_queue_frames: SEND_QUEUE_FRAMES,
            send_queue_bytes: SEND_QUEUE_BYTES,
            stall_timeout: STALL_TIMEOUT,
            max_frame_len: MAX_FRAME_LEN,
        }
    }
}

impl SocketLimits {
    /// Refuses limits that would spin (zero intervals) or could never pass a frame.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.ping_interval.is_zero() || self.idle_timeout < self.ping_interval {
            bail!("relay limits: the ping interval must be non-zero and no longer than the idle timeout");
        }
        if self.stall_timeout.is_zero() || self.send_queue_frames == 0 || self.max_frame_len == 0 {
            bail!("relay limits: stall timeout, queue length and frame size must be non-zero");
        }
        Ok(())
    }
}

/// The place an accepted stream claims: a side of the pairing of one relay code.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claim {
    pub code: u128,
    pub role: PeerRole,
    /// The connection's id, unique for the relay's lifetime: the older of two sockets has the
    /// smaller one.
    pub conn: u64,
    /// A phone hears the relay's presence notices (it may ask for none: `presence=none`).
    pub notices: bool,
    /// The relay framing the agent agreed to in its upgrade (a phone's is never read).
    pub framing: Framing,
}

/// The core of one relay: the map of codes, the memory ledger, the limits every socket gets and
/// the signal that closes them all. Shared by every shard.
pub(crate) struct Core {
    hub: Arc<Hub>,
    limits: SocketLimits,
    shutdown: Shutdown,
}

/// The signal that closes every socket: a flag each socket's wait looks at on its wake-ups, and
/// the token that wakes them (and what a service listens to).
pub(crate) struct Shutdown {
    closing: AtomicBool,
    token: CancellationToken,
}

impl Shutdown {
    /// Resolves once the core shuts down.
    pub(crate) async fn wait(&self) {
        queue::wait_until(self.token.cancelled(), || self.closing.load(Ordering::Acquire)).await
    }
}

impl Core {
    /// A core within `limits` that holds at most `memory_budget` bytes of messages and counts
    /// what it does in `metrics`.
    pub(crate) fn new(limits: SocketLimits, memory_budget: usize, metrics: Arc<RelayMetrics>) -> anyhow::Result<Core> {
        limits.validate()?;
        if memory_budget < limits.max_frame_len.saturating_mul(2) {
            bail!("relay limits: the memory budget must hold at least two of the largest messages");
        }
        metrics.set_limit("memory_budget_bytes", memory_budget);
        metrics.set_limit("max_message_bytes", limits.max_frame_len);
        metrics.set_limit("send_queue_frames", limits.send_queue_frames);
        metrics.set_limit("send_queue_bytes", limits.send_queue_bytes);
        let ledger = Arc::new(Ledger { budget: memory_budget, metrics });
        let shutdown = Shutdown { closing: AtomicBool::new(false), token: CancellationToken::new() };
        Ok(Core { hub: Arc::new(Hub::new(ledger)), limits, shutdown })
    }

    /// Relays one upgraded WebSocket in the place it claims until it ends (or the core shuts
    /// down), then closes it within bounded time. `leftover` holds the bytes read past the
    /// request head: the client's first frames.
    pub(crate) async fn accept<S: RelayStream>(&self, stream: S, leftover: Vec<u8>, claim: Claim) {
        socket::serve(stream, leftover, self.membership(claim), &self.limits, &self.shutdown).await;
    }

    /// Runs one upgraded socket of a service (a phone's `claim` it takes no place with, from
    /// `client`): the core reads and writes it while `service` serves its [`ServiceLine`], and
    /// closes it within bounded time once `service` returns.
    pub(crate) async fn accept_line<S: RelayStream, F: Future<Output = ()>>(
        &self,
        stream: S,
        leftover: Vec<u8>,
        claim: Claim,
        client: IpAddr,
        service: impl FnOnce(ServiceLine) -> F,
    ) {
        let member = self.membership(claim);
        let shutdown = self.shutdown.token.clone();
        line::serve(stream, leftover, member, client, &self.limits, shutdown, service).await;
    }

    /// The place `claim` names, not taken yet.
    fn membership(&self, claim: Claim) -> Membership {
        Membership { hub: Arc::clone(&self.hub), claim }
    }

    /// Passes a push receipt to the agent of `code`, unread; false when no agent holds it.
    pub(crate) fn receipt(&self, code: u128, body: &[u8]) -> bool {
        self.hub.receipt(code, body)
    }

    pub(crate) fn metrics(&self) -> &Arc<RelayMetrics> {
        &self.hub.ledger.metrics
    }

    /// Cancelled once the core shuts down.
    pub(crate) fn cancel(&self) -> &CancellationToken {
        &self.shutdown.token
    }

    /// Closes every socket (1001); sockets accepted after it close at once.
    pub(crate) fn shut_down(&self) {
        self.shutdown.closing.store(true, Ordering::Release);
        self.shutdown.token.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_that_would_spin_are_refused() {
        assert!(SocketLimits::default().validate().is_ok());
        assert!(SocketLimits { ping_interval: Duration::ZERO, ..SocketLimits::default() }.validate().is_err());
        assert!(SocketLimits { idle_timeout: Duration::from_secs(1), ..SocketLimits::default() }.validate().is_err());
        assert!(SocketLimits { send_queue_frames: 0, ..SocketLimits::default() }.validate().is_err());
        let metrics = Arc::default();
        assert!(Core::new(SocketLimits::default(), MAX_FRAME_LEN, metrics).is_err(), "a budget of one message");
    }
}
