//! The relay link: a small reconnect actor that keeps one outbound connection to the relay alive
//! through sleep, roaming and relay restarts, admits the peer that joins the relay code (a phone,
//! or a host driving this machine as an environment) and serves its session. What happens is
//! reported as [`LinkEvent`]s; `voxa run` prints them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::Rng;
use tokio::sync::{broadcast, mpsc};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::context::AgentContext;
use super::gate::{admit_bearer, admit_hello, start_session, Gate, HelloStep, SessionInput};
use super::outbox::Outbox;
use super::session::Session;
use crate::config::RelayUrl;
use crate::net::dial::{self, DialOptions};
use crate::net::liveness::{cancelled, close_message, sleep_until, Heartbeat, Liveness, Pulse};
use crate::protocol::{self, close, AgentMessage, ErrorCode, Frame, PeerNotice, PeerRole, PeerState};

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
    /// The peer (phone) joined the relay code.
    PeerJoined,
    /// The peer left.
    PeerLeft,
    /// The peer's hello was admitted.
    PeerAdmitted,
    /// The peer's hello was refused.
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
enum Ended {
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
        // When this agent gave up on a dial, its request may still reach the relay later (a relay
        // that was frozen, a slow network) and take the code over from the live connection.
        let mut last_abandoned_dial: Option<Instant> = None;
        loop {
            let connected = tokio::select! {
                _ = shutdown.cancelled() => return,
                result = dial::connect(&self.url, &self.dial) => result,
            };
            match connected {
                Ok(socket) => match self.connection(socket, &shutdown, &mut backoff).await {
                    Ended::Shutdown => return,
                    Ended::Replaced if last_abandoned_dial.is_some_and(|at| at.elapsed() < STALE_DIAL_WINDOW) => {
                        // Most likely our own abandoned dial arriving late: it is dead, so dial again.
                        last_abandoned_dial = None;
                        self.report(LinkEvent::ReplacedByLateDial);
                    }
                    Ended::Replaced => self.on_replaced(),
                    Ended::Lost(reason) => self.report(LinkEvent::Lost { reason }),
                },
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

    /// One connection to the relay, served until it ends. The backoff starts over after a
    /// connection that proved healthy.
    async fn connection(
        &self,
        socket: dial::ClientSocket,
        shutdown: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Ended {
        self.ctx.status.relay_connected.store(true, Ordering::Relaxed);
        self.report(LinkEvent::Connected { relay: self.relay.to_string() });
        let since = Instant::now();
        // A connection runs in its own task: should anything in it panic, the dialer notices,
        // reports it and dials again instead of going silent for good.
        let mut connection = self.ctx.tasks.spawn({
            let link = self.clone();
            let shutdown = shutdown.clone();
            async move { link.serve(socket, &shutdown).await }
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
        self.ctx.status.relay_connected.store(false, Ordering::Relaxed);
        self.ctx.status.phone_present.store(false, Ordering::Relaxed);
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

    fn report(&self, event: LinkEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(event);
        }
    }

    async fn serve(&self, socket: dial::ClientSocket, shutdown: &CancellationToken) -> Ended {
        let (sink, mut stream) = socket.split();
        let outbox = Outbox::spawn(sink);
        let out_tx = outbox.frames.clone();
        let mut peer = Peer::Absent;
        let mut liveness = Liveness::new(self.heartbeat);
        let ended = loop {
            let deadline = peer.hello_deadline();
            let revoked = peer.revoked();
            tokio::select! {
                // A revocation outranks a shutdown that arrives with it: the host must hear why.
                biased;
                _ = cancelled(revoked) => {
                    send(&out_tx, AgentMessage::error(ErrorCode::PairingRevoked)).await;
                    let _ = out_tx.try_send(close_message(CloseCode::Policy, ErrorCode::PairingRevoked.as_str()));
                    break Ended::Lost("pairing revoked".into());
                }
                _ = shutdown.cancelled() => {
                    let _ = out_tx.try_send(close_message(CloseCode::Away, "agent shutting down"));
                    break Ended::Shutdown;
                }
                pulse = liveness.tick() => match pulse {
                    Pulse::Silent(silent) => break Ended::Lost(format!("no answer from the relay for {} s", silent.as_secs())),
                    Pulse::Ping => { let _ = out_tx.try_send(Message::Ping(Default::default())); }
                },
                _ = sleep_until(deadline) => {
                    peer = Peer::Refused;
                    if let Err(ended) = self.refuse_silent_peer(&out_tx).await {
                        break ended;
                    }
                }
                frame = stream.next() => {
                    let frame = match frame {
                        None => break Ended::Lost("relay closed the connection".into()),
                        Some(Err(err)) => break Ended::Lost(format!("{err}")),
                        Some(Ok(frame)) => frame,
                    };
                    liveness.heard();
                    if let Err(ended) = self.on_frame(frame, &mut peer, &outbox).await {
                        break ended;
                    }
                }
            }
        };
        drop(peer);
        drop(out_tx);
        outbox.finish().await;
        ended
    }

    /// Refuses a peer that sent no hello in time. On a pairing's code it is also closed out (the
    /// link ends and comes back for the next host).
    async fn refuse_silent_peer(&self, out_tx: &mpsc::Sender<Message>) -> Result<(), Ended> {
        let code = self.gate.timeout_code();
        send(out_tx, AgentMessage::Error { code, message: Some("no hello in time".into()) }).await;
        if code == ErrorCode::ExecutorUnauthenticated {
            let _ = out_tx.try_send(close_message(CloseCode::Policy, code.as_str()));
            return Err(Ended::Lost("a peer on the pairing's code did not authenticate in time".into()));
        }
        Ok(())
    }

    /// One frame from the relay: a notice, the peer's text or audio, or the relay's close.
    async fn on_frame(&self, frame: Message, peer: &mut Peer, outbox: &Outbox) -> Result<(), Ended> {
        match frame {
            Message::Text(_) | Message::Binary(_) => {
                let current = std::mem::replace(peer, Peer::Absent);
                let notice = match &frame {
                    Message::Text(text) => PeerNotice::parse(text),
                    _ => None,
                };
                *peer = match (notice, current, Frame::from_message(frame)) {
                    (Some(notice), current, _) => self.on_notice(notice, current, outbox).await,
                    (None, Peer::Ready { session, inbound, revoked }, Ok(frame)) => {
                        self.on_session_frame(frame, session, inbound, revoked, outbox).await
                    }
                    (None, current, Ok(Frame::Text(text))) => self.on_text(current, &text, outbox).await,
                    (None, current, _) => current,
                };
            }
            Message::Close(frame) if frame.as_ref().is_some_and(|f| u16::from(f.code) == close::REPLACED) => {
                return Err(Ended::Replaced)
            }
            Message::Close(_) => return Err(Ended::Lost("relay closed the connection".into())),
            _ => {}
        }
        Ok(())
    }

    async fn on_notice(&self, notice: PeerNotice, peer: Peer, outbox: &Outbox) -> Peer {
        if notice.peer != PeerRole::Phone {
            return peer;
        }
        // Any earlier session ends here: its calls are cancelled and its unsent output dropped.
        drop(peer);
        outbox.end_session().await;
        match notice.state {
            PeerState::Joined => {
                self.ctx.status.phone_present.store(true, Ordering::Relaxed);
                self.report(LinkEvent::PeerJoined);
                let deadline = tokio::time::Instant::now() + protocol::HELLO_TIMEOUT;
                if !self.gate.challenges() {
                    return Peer::AwaitingHello { deadline, challenge: String::new() };
                }
                match protocol::new_nonce() {
                    Ok(challenge) => {
                        send(&outbox.frames, AgentMessage::challenge(&challenge)).await;
                        Peer::AwaitingHello { deadline, challenge }
                    }
                    Err(err) => {
                        warn!("cannot challenge the phone: {err:#}");
                        Peer::Refused
                    }
                }
            }
            PeerState::Left => {
                self.ctx.status.phone_present.store(false, Ordering::Relaxed);
                self.report(LinkEvent::PeerLeft);
                Peer::Absent
            }
        }
    }

    /// A frame of an admitted session's peer, opened when the session is sealed. A sealed session
    /// that receives what it cannot open ends here, with nothing run.
    async fn on_session_frame(
        &self,
        frame: Frame,
        mut session: Box<Session>,
        mut inbound: SessionInput,
        revoked: Option<CancellationToken>,
        outbox: &Outbox,
    ) -> Peer {
        match inbound.open(frame) {
            Ok(Some(frame)) => {
                // A revocation written a moment ago ends the session before this frame runs.
                self.gate.check_revocations();
                if !revoked.as_ref().is_some_and(CancellationToken::is_cancelled) {
                    session.on_frame(frame).await;
                }
            }
            Ok(None) => {}
            Err(broken) => {
                warn!("{broken}; the phone's session is closed");
                drop(session);
                outbox.end_session().await;
                send(&outbox.frames, AgentMessage::error(ErrorCode::SealedSessionBroken)).await;
                self.report(LinkEvent::PeerRefused { code: ErrorCode::SealedSessionBroken });
                return Peer::Refused;
            }
        }
        Peer::Ready { session, inbound, revoked }
    }

    async fn on_text(&self, peer: Peer, text: &str, outbox: &Outbox) -> Peer {
        let out = &outbox.frames;
        let admitted = match peer {
            Peer::AwaitingHello { deadline, challenge } => match admit_hello(self.gate.as_ref(), text, &challenge) {
                Ok(HelloStep::Admitted(admission)) => Ok(admission),
                Ok(HelloStep::AwaitBearer(answer)) => {
                    send(out, answer).await;
                    return Peer::AwaitingBearer { deadline };
                }
                // Anything but a hello is ignored until a good hello arrives.
                Err(ErrorCode::UnauthenticatedCall) => return Peer::AwaitingHello { deadline, challenge },
                Err(code) => Err(code),
            },
            Peer::AwaitingBearer { deadline } => match admit_bearer(self.gate.as_ref(), text) {
                Ok(admission) => Ok(admission),
                Err(ErrorCode::UnauthenticatedCall) => return Peer::AwaitingBearer { deadline },
                Err(code) => Err(code),
            },
            other => return other,
        };
        match admitted {
            Ok(mut admission) => {
                let session_out = outbox.begin_session().await;
                let hello_ok = self.ctx.hello_ok(&admission);
                let io = match start_session(&mut admission, hello_ok, session_out, &self.ctx.status.sessions).await {
                    Ok(io) => io,
                    Err(err) => {
                        warn!("cannot answer the phone's hello: {err:#}");
                        send(out, AgentMessage::error(ErrorCode::Internal)).await;
                        return Peer::Refused;
                    }
                };
                self.report(LinkEvent::PeerAdmitted);
                let revoked = admission.revoked.clone();
                let session = Session::new(self.ctx.clone(), admission.caller, io.out).relayed();
                Peer::Ready { session: Box::new(session), inbound: io.input, revoked }
            }
            Err(code) => {
                send(out, AgentMessage::error(code)).await;
                self.report(LinkEvent::PeerRefused { code });
                Peer::Refused
            }
        }
    }
}

/// The other side of the relay code on the current connection: the phone, or a host when this
/// link serves an environment pairing.
enum Peer {
    Absent,
    /// Challenged (with this nonce, empty on a pairing); waiting for the hello.
    AwaitingHello {
        deadline: tokio::time::Instant,
        challenge: String,
    },
    /// A host's hello was answered with this environment's signature; waiting for its bearer.
    AwaitingBearer {
        deadline: tokio::time::Instant,
    },
    Refused,
    Ready {
        session: Box<Session>,
        inbound: SessionInput,
        revoked: Option<CancellationToken>,
    },
}

impl Peer {
    fn hello_deadline(&self) -> Option<tokio::time::Instant> {
        match self {
            Peer::AwaitingHello { deadline, .. } | Peer::AwaitingBearer { deadline } => Some(*deadline),
            _ => None,
        }
    }

    fn revoked(&self) -> Option<CancellationToken> {
        match self {
            Peer::Ready { revoked, .. } => revoked.clone(),
            _ => None,
        }
    }
}

async fn send(out: &mpsc::Sender<Message>, message: AgentMessage) {
    let _ = out.send(Message::text(message.to_json())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

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
