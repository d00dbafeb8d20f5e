//! The relay link: a small reconnect actor that keeps one outbound connection to the relay alive
//! through sleep, roaming and relay restarts; on it, [`super::peers`] admits each peer that joins
//! the relay code (phones, or hosts driving this machine as an environment) and serves its
//! session. What happens is reported as [`LinkEvent`]s; `voxa run` prints them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::context::AgentContext;
use super::gate::Gate;
use crate::config::RelayUrl;
use crate::net::dial::{self, DialOptions};
use crate::net::liveness::Heartbeat;
use crate::protocol::relay::{AGENT_SUBPROTOCOLS, SUBPROTOCOL_3};
use crate::protocol::{ErrorCode, RelayPage};

/// A 4001 this soon after an abandoned dial is taken for that dial arriving late, not for
/// another agent: the link dials again without warning that its code is in use.
pub const STALE_DIAL_WINDOW: Duration = Duration::from_secs(2 * dial::CONNECT_TIMEOUT.as_secs());

/// Link events kept for a slow reader before the oldest are dropped.
pub const EVENT_QUEUE: usize = 256;

/// What a relay link reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// Connected to the relay.
    Connected { relay: String },
    /// The connection ended and will be dialed again.
    Lost { reason: String },
    /// The connection was taken over, probably by a late dial of this agent; dialing again.
    ReplacedByLateDial,
    /// Another agent with this relay code took over; this link keeps dialing to take it back.
    /// Reported once per episode: the first time, loudly.
    Replaced,
    /// Replaced again within the same episode.
    ReplacedAgain,
    /// The link held its code for a healthy while after being replaced: the episode is over.
    Recovered,
    /// A dial failed.
    Unreachable { reason: String },
    /// The next dial comes after `delay`.
    Reconnecting { delay: Duration, attempt: u32 },
    /// A peer (a phone) joined the relay code.
    PeerJoined,
    /// A peer left.
    PeerLeft,
    /// A peer's hello was admitted.
    PeerAdmitted,
    /// A peer's hello was refused.
    PeerRefused { code: ErrorCode },
    /// The relay code replaced by `pair --rotate` is answered (and refused) until this time,
    /// in Unix seconds.
    RetiredCodeAnswered { until: u64 },
    /// The retired relay code's window is over: it is no longer dialled.
    RetiredCodeEnded,
    /// An environment pairing went live: its relay code is dialed for its host.
    PairingActive { pairing: String, relay: String },
    /// An environment pairing was revoked: its sessions were closed and it is no longer dialed.
    PairingEnded { pairing: String },
    /// The relay's page and scripts were compared with this voxa's (after a connect).
    RelayPage { page: RelayPage },
}

/// Sends a link's events; without receivers they are dropped.
pub type LinkEvents = broadcast::Sender<LinkEvent>;

/// A sender for link events, with room for [`EVENT_QUEUE`] unread events per receiver.
pub fn link_events() -> LinkEvents {
    broadcast::channel(EVENT_QUEUE).0
}

/// Exponential backoff with full jitter.
#[derive(Clone, Copy, Debug)]
pub struct BackoffPolicy {
    /// Ceiling of the first delay.
    pub base: Duration,
    /// Largest delay.
    pub cap: Duration,
    /// A connection that stayed up this long proved healthy and resets the backoff.
    pub healthy_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
            healthy_after: Duration::from_secs(10),
        }
    }
}

/// Delays between reconnect attempts.
#[derive(Debug)]
pub struct Backoff {
    policy: BackoffPolicy,
    attempt: u32,
}

impl Backoff {
    pub fn new(policy: BackoffPolicy) -> Self {
        Backoff { policy, attempt: 0 }
    }

    /// The next delay: uniform in `[0, min(cap, base·2^attempt)]`.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(16)).unwrap_or(u32::MAX);
        let ceiling = self.policy.base.saturating_mul(factor).min(self.policy.cap);
        self.attempt = self.attempt.saturating_add(1);
        ceiling.mul_f64(rand::rng().random::<f64>())
    }

    /// Attempts since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Why one relay connection ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// Closed or lost; try again.
    Lost(String),
    /// Another agent with this code took over (close 4001).
    Replaced,
    /// Shutting down.
    Shutdown,
}

/// The reconnect actor.
#[derive(Clone)]
pub struct RelayLink {
    pub url: String,
    pub relay: RelayUrl,
    pub dial: DialOptions,
    pub heartbeat: Heartbeat,
    pub backoff: BackoffPolicy,
    pub gate: Arc<dyn Gate>,
    pub ctx: Arc<AgentContext>,
    /// Where events go; `None` keeps them to the log (environment pairings).
    pub events: Option<LinkEvents>,
}

impl RelayLink {
    /// Dials until `shutdown`, serving each connection while it lasts. Never stops for good:
    /// when another agent takes this code (close 4001) it warns once per episode and dials
    /// again with backoff.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new(self.backoff);
        // The relay carries several phones on this socket in its own framing.
        let dial = DialOptions { subprotocol: Some(AGENT_SUBPROTOCOLS), ..self.dial.clone() };
        // When this agent gave up on a dial, its request may still reach the relay later (a relay
        // that was frozen, a slow network) and take the code over from the live connection.
        let mut last_abandoned_dial: Option<Instant> = None;
        loop {
            let connected = tokio::select! {
                _ = shutdown.cancelled() => return,
                result = dial::connect_negotiated(&self.url, &dial) => result,
            };
            match connected {
                Ok((socket, framing)) => {
                    let tells_proven = framing.as_deref() == Some(SUBPROTOCOL_3);
                    match self.connection(socket, tells_proven, &shutdown, &mut backoff).await {
                        Ended::Shutdown => return,
                        Ended::Replaced if last_abandoned_dial.is_some_and(|at| at.elapsed() < STALE_DIAL_WINDOW) => {
                            // Most likely our own abandoned dial arriving late: it is dead, so dial again.
                            last_abandoned_dial = None;
                            self.report(LinkEvent::ReplacedByLateDial);
                        }
                        Ended::Replaced => self.on_replaced(),
                        Ended::Lost(reason) => self.report(LinkEvent::Lost { reason }),
                    }
                }
                Err(err) => {
                    last_abandoned_dial = Some(Instant::now());
                    self.report(LinkEvent::Unreachable { reason: format!("{err:#}") });
                }
            }
            let delay = backoff.next_delay();
            self.report(LinkEvent::Reconnecting { delay, attempt: backoff.attempt() });
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Compares the page the relay serves with this voxa's, in the background: after each connect
    /// of a link that reports (an environment pairing's does not), one comparison at a time. Only
    /// the pairing's first relay serves the page a phone opens (the others carry its socket only).
    fn check_page(&self, shutdown: &CancellationToken) {
        let status = &self.ctx.status;
        let serves_page = status.relay.lock().is_ok_and(|first| *first == self.relay.as_str());
        if self.events.is_none() || !serves_page || status.relay_page_checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let (link, shutdown) = (self.clone(), shutdown.clone());
        self.ctx.tasks.spawn(async move {
            let page = tokio::select! {
                page = crate::net::page_check::check(&link.relay, &link.dial) => page,
                _ = shutdown.cancelled() => return,
            };
            if let RelayPage::Altered { paths } = &page {
                warn!(files = %paths.join(", "), "the relay serves a web client that differs from this voxa's");
            }
            link.ctx.status.relay_page.send_replace(Some(page.clone()));
            link.ctx.status.relay_page_checking.store(false, Ordering::Release);
            link.report(LinkEvent::RelayPage { page });
        });
    }

    /// One connection to the relay, served until it ends. The backoff starts over after a
    /// connection that proved healthy.
    async fn connection(
        &self,
        socket: dial::ClientSocket,
        tells_proven: bool,
        shutdown: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Ended {
        self.ctx.status.set_link(self.relay.as_str(), Some(true), None);
        self.report(LinkEvent::Connected { relay: self.relay.to_string() });
        self.check_page(shutdown);
        let since = Instant::now();
        // A connection runs in its own task: should anything in it panic, the dialer notices,
        // reports it and dials again instead of going silent for good.
        let mut connection = self.ctx.tasks.spawn({
            let link = self.clone();
            let shutdown = shutdown.clone();
            async move { link.serve(socket, tells_proven, &shutdown).await }
        });
        let joined = tokio::select! {
            joined = &mut connection => joined,
            _ = tokio::time::sleep(self.backoff.healthy_after) => {
                // Held the code long enough: whoever took it before is gone.
                self.end_replaced_episode();
                connection.await
            }
        };
        let ended = joined.unwrap_or_else(|err| {
            warn!(%err, "relay connection task failed");
            Ended::Lost("internal error".into())
        });
        self.ctx.status.set_link(self.relay.as_str(), Some(false), Some(false));
        if since.elapsed() >= self.backoff.healthy_after {
            backoff.reset();
        }
        ended
    }

    /// Another agent took this code: loud once per episode, quiet after that.
    fn on_replaced(&self) {
        if self.ctx.status.relay_replaced.swap(true, Ordering::Relaxed) {
            return self.report(LinkEvent::ReplacedAgain);
        }
        warn!(
            "another voxa agent is using this relay code (the relay replaced this connection, close 4001); if it \
             is not yours, someone holds your code: run `voxa pair --rotate`. This agent keeps dialing to take \
             the code back."
        );
        self.report(LinkEvent::Replaced);
    }

    /// This agent held its code for a healthy while: the replacement episode is over.
    fn end_replaced_episode(&self) {
        if self.ctx.status.relay_replaced.swap(false, Ordering::Relaxed) {
            self.report(LinkEvent::Recovered);
        }
    }

    pub(super) fn report(&self, event: LinkEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offer_names_the_proven_framing_first_and_the_older_one_after() {
        let offered: Vec<&str> = AGENT_SUBPROTOCOLS.split(',').map(str::trim).collect();
        assert_eq!(offered, [SUBPROTOCOL_3, crate::protocol::relay::SUBPROTOCOL]);
    }

    #[test]
    fn backoff_grows_to_the_cap_with_jitter_and_resets() {
        let policy =
            BackoffPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(30), healthy_after: Duration::ZERO };
        let mut backoff = Backoff::new(policy);
        let first = backoff.next_delay();
        assert!(first <= Duration::from_secs(1));
        let delays: Vec<_> = (0..20).map(|_| backoff.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(30)));
        // Full jitter: later delays are spread, not all equal to the cap.
        let distinct: std::collections::BTreeSet<_> = delays.iter().map(|d| d.as_millis()).collect();
        assert!(distinct.len() > 5);
        backoff.reset();
        assert_eq!(backoff.attempt(), 0);
        assert!(backoff.next_delay() <= Duration::from_secs(1));
    }
}
