//! One relay connection's phones (docs/PROTOCOL.md, "Relay"): every message on the agent's
//! socket is a relay-framed binary message naming a peer, and each peer is one independent
//! session — its own challenge, hello and calls. A peer that leaves takes its session, its
//! partial frame and its unsent output with it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::gate::{
    admit_bearer, admit_hello, admit_sealed_bearer, start_session, HelloVerdict, SessionInput, SessionIo,
};
use super::link::{Ended, LinkEvent, RelayLink};
use super::outbox::Outbox;
use super::session::Session;
use crate::net::dial;
use crate::net::liveness::{cancelled, close_message, sleep_until, Liveness, Pulse};
use crate::net::relay_framing::{self, Kind, PeerId};
use crate::protocol::{self, close, AgentMessage, ErrorCode, Frame, MAX_FRAME_LEN, SEND_QUEUE_FRAMES};

/// Peers one connection serves at once; the relay seats fewer, so more means a relay gone wrong.
pub const MAX_PEERS: usize = 4 * relay_framing::MAX_PHONES_PER_CODE;

/// Longest wait for a revoked session's last frames before its socket is closed.
const REVOKED_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// One phone (or host) on the relay code.
struct PeerSlot {
    state: Peer,
    /// A frame arriving in parts, so far.
    partial: Vec<u8>,
    /// Copies the session's frames to the socket, tagged with this peer; aborted when it leaves,
    /// so its unsent frames go nowhere.
    forwarder: Option<JoinHandle<()>>,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        if let Some(forwarder) = self.forwarder.take() {
            forwarder.abort();
        }
    }
}

/// How far a peer's session has come.
enum Peer {
    /// Challenged (with this nonce, empty on a pairing); waiting for the hello.
    AwaitingHello {
        deadline: Instant,
        challenge: String,
    },
    /// A host's hello was answered with this environment's signature; waiting for its bearer.
    AwaitingBearer {
        deadline: Instant,
    },
    /// A host's sealed hello was answered and the signature sent inside the channel; waiting for
    /// its bearer there.
    AwaitingSealedBearer {
        deadline: Instant,
        io: SessionIo,
    },
    Refused,
    Ready {
        session: Box<Session>,
        /// The session's writer (sealing it when the session is sealed), for what the link
        /// itself tells the peer.
        writer: mpsc::Sender<Frame>,
        /// What opens the peer's frames (a sealed session) or passes them on (protocol 2).
        inbound: SessionInput,
        revoked: Option<CancellationToken>,
    },
}

impl Peer {
    fn hello_deadline(&self) -> Option<Instant> {
        match self {
            Peer::AwaitingHello { deadline, .. }
            | Peer::AwaitingBearer { deadline }
            | Peer::AwaitingSealedBearer { deadline, .. } => Some(*deadline),
            _ => None,
        }
    }

    fn revoked(&self) -> Option<&CancellationToken> {
        match self {
            Peer::Ready { revoked, .. } => revoked.as_ref(),
            _ => None,
        }
    }
}

/// A peer's frames toward the socket: relay-framed binary messages.
#[derive(Clone)]
struct ToPeer {
    peer: PeerId,
    frames: mpsc::Sender<Message>,
}

impl ToPeer {
    async fn send(&self, message: AgentMessage) {
        let framed = relay_framing::message(Kind::Text, self.peer, message.to_json().as_bytes());
        let _ = self.frames.send(Message::binary(framed)).await;
    }

    /// Asks the relay to close this peer's socket.
    fn close(&self, code: CloseCode, reason: &str) {
        let _ = self.frames.try_send(Message::binary(relay_framing::close_peer(self.peer, code.into(), reason)));
    }

    /// Starts copying a session's frames to this peer; the returned sender is the session's.
    fn forward(&self) -> (mpsc::Sender<Frame>, JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<Frame>(SEND_QUEUE_FRAMES);
        let to = self.clone();
        let task = tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                let framed = match &frame {
                    Frame::Text(text) => relay_framing::message(Kind::Text, to.peer, text.as_bytes()),
                    Frame::Binary(data) => relay_framing::message(Kind::Binary, to.peer, data),
                };
                if to.frames.send(Message::binary(framed)).await.is_err() {
                    return;
                }
            }
        });
        (tx, task)
    }
}

impl RelayLink {
    /// Serves one relay connection: its phones, the heartbeat, shutdown and revocation.
    pub(super) async fn serve(&self, socket: dial::ClientSocket, shutdown: &CancellationToken) -> Ended {
        let (sink, mut stream) = socket.split();
        let outbox = Outbox::spawn(sink);
        let out_tx = outbox.frames.clone();
        let mut peers: HashMap<PeerId, PeerSlot> = HashMap::new();
        let mut liveness = Liveness::new(self.heartbeat);
        let ended = loop {
            let deadline = peers.values().filter_map(|slot| slot.state.hello_deadline()).min();
            // Every session a link admits passes one gate, so they share its revocation.
            let revoked = peers.values().find_map(|slot| slot.state.revoked()).cloned();
            tokio::select! {
                // A revocation outranks a shutdown that arrives with it: the host must hear why.
                biased;
                _ = cancelled(revoked) => self.revoke(&mut peers, &out_tx).await,
                _ = shutdown.cancelled() => {
                    let _ = out_tx.try_send(close_message(CloseCode::Away, "agent shutting down"));
                    break Ended::Shutdown;
                }
                pulse = liveness.tick() => match pulse {
                    Pulse::Silent(silent) => break Ended::Lost(format!("no answer from the relay for {} s", silent.as_secs())),
                    Pulse::Ping => { let _ = out_tx.try_send(Message::Ping(Default::default())); }
                },
                _ = sleep_until(deadline) => self.refuse_silent_peers(&mut peers, &out_tx).await,
                frame = stream.next() => {
                    let frame = match frame {
                        None => break Ended::Lost("relay closed the connection".into()),
                        Some(Err(err)) => break Ended::Lost(format!("{err}")),
                        Some(Ok(frame)) => frame,
                    };
                    liveness.heard();
                    if let Err(ended) = self.on_frame(frame, &mut peers, &out_tx).await {
                        break ended;
                    }
                    self.ctx.status.phone_present.store(!peers.is_empty(), Ordering::Relaxed);
                }
            }
        };
        drop(peers);
        drop(out_tx);
        outbox.finish().await;
        ended
    }

    /// The pairing was revoked: every session it admitted hears so (inside the session, sealed
    /// when it is) and is closed 1008 once that was written.
    async fn revoke(&self, peers: &mut HashMap<PeerId, PeerSlot>, out: &mpsc::Sender<Message>) {
        let gone: Vec<PeerId> = peers
            .iter()
            .filter(|(_, slot)| slot.state.revoked().is_some_and(CancellationToken::is_cancelled))
            .map(|(peer, _)| *peer)
            .collect();
        for peer in gone {
            let Some(mut slot) = peers.remove(&peer) else { continue };
            let to = ToPeer { peer, frames: out.clone() };
            if let Peer::Ready { writer, .. } = std::mem::replace(&mut slot.state, Peer::Refused) {
                let _ = writer.send(Frame::from(AgentMessage::error(ErrorCode::PairingRevoked))).await;
            }
            // The session and its writers are gone with the slot's state; its forwarder ends once
            // it passed on what they wrote, and the close follows it.
            let forwarder = slot.forwarder.take();
            drop(slot);
            // Every session of a link shares its pairing, so nothing else waits meanwhile.
            if let Some(forwarder) = forwarder {
                let _ = tokio::time::timeout(REVOKED_FLUSH, forwarder).await;
            }
            to.close(CloseCode::Policy, ErrorCode::PairingRevoked.as_str());
        }
    }

    /// Refuses the peers that sent no hello in time. On a pairing's code they are also closed
    /// (1008): a host that does not authenticate has no business on it.
    async fn refuse_silent_peers(&self, peers: &mut HashMap<PeerId, PeerSlot>, out: &mpsc::Sender<Message>) {
        let now = Instant::now();
        let code = self.gate.timeout_code();
        for (peer, slot) in peers.iter_mut() {
            if slot.state.hello_deadline().is_none_or(|deadline| deadline > now) {
                continue;
            }
            let to = ToPeer { peer: *peer, frames: out.clone() };
            let refusal = AgentMessage::Error { code, message: Some("no hello in time".into()) };
            match std::mem::replace(&mut slot.state, Peer::Refused) {
                // A sealed host hears it inside its channel.
                Peer::AwaitingSealedBearer { io, .. } => {
                    let _ = io.out.send(Frame::from(refusal)).await;
                }
                _ => to.send(refusal).await,
            }
            if code == ErrorCode::ExecutorUnauthenticated {
                to.close(CloseCode::Policy, code.as_str());
            }
        }
    }

    /// One message from the relay: a peer joining or leaving, a peer's frame (or part of one), or
    /// the relay's close.
    async fn on_frame(
        &self,
        frame: Message,
        peers: &mut HashMap<PeerId, PeerSlot>,
        out: &mpsc::Sender<Message>,
    ) -> Result<(), Ended> {
        let data = match frame {
            Message::Binary(data) => data,
            Message::Close(frame) if frame.as_ref().is_some_and(|f| u16::from(f.code) == close::REPLACED) => {
                return Err(Ended::Replaced)
            }
            Message::Close(_) => return Err(Ended::Lost("relay closed the connection".into())),
            _ => return Ok(()),
        };
        let Some((kind, peer, payload)) = relay_framing::split(&data) else {
            debug!("dropped a relay message that is not relay framing 2");
            return Ok(());
        };
        match kind {
            Kind::Joined if peers.len() >= MAX_PEERS => debug!("more peers than the relay seats; ignored"),
            Kind::Joined => {
                let to = ToPeer { peer, frames: out.clone() };
                let state = self.on_joined(&to).await;
                // A peer id is never reused: a second JOINED replaces nothing but a stale slot.
                peers.insert(peer, PeerSlot { state, partial: Vec::new(), forwarder: None });
                self.report(LinkEvent::PeerJoined);
            }
            Kind::Left => {
                // Its session ends here: its calls are cancelled and its unsent output dropped.
                if peers.remove(&peer).is_some() {
                    self.report(LinkEvent::PeerLeft);
                }
            }
            Kind::Part => {
                let Some(slot) = peers.get_mut(&peer) else { return Ok(()) };
                if slot.partial.len() + payload.len() > MAX_FRAME_LEN {
                    debug!("a peer's frame is over the frame limit; closing it");
                    slot.partial = Vec::new();
                    ToPeer { peer, frames: out.clone() }.close(CloseCode::Size, "message too big");
                    return Ok(());
                }
                slot.partial.extend_from_slice(payload);
            }
            Kind::Text | Kind::Binary => {
                let Some(slot) = peers.get_mut(&peer) else { return Ok(()) };
                let whole = if slot.partial.is_empty() {
                    payload.to_vec()
                } else {
                    let mut whole = std::mem::take(&mut slot.partial);
                    whole.extend_from_slice(payload);
                    whole
                };
                let to = ToPeer { peer, frames: out.clone() };
                let frame = match kind {
                    Kind::Binary => Frame::binary(whole),
                    _ => match String::from_utf8(whole) {
                        Ok(text) => Frame::text(text),
                        Err(_) => {
                            debug!("a peer's text frame is not UTF-8; dropped");
                            return Ok(());
                        }
                    },
                };
                let state = std::mem::replace(&mut slot.state, Peer::Refused);
                slot.state = match (state, frame) {
                    (Peer::Ready { session, writer, inbound, revoked }, frame) => {
                        self.on_session_frame(frame, session, writer, inbound, revoked, &to).await
                    }
                    (Peer::AwaitingSealedBearer { deadline, io }, frame) => {
                        self.on_sealed_bearer(frame, deadline, io, &to).await
                    }
                    (state, Frame::Text(text)) => self.on_text(state, &text, &to, slot).await,
                    (state, Frame::Binary(_)) => state,
                };
            }
            Kind::ClosePeer | Kind::Proven => debug!("dropped a relay message only agents send"),
        }
        Ok(())
    }

    /// A peer joined: it gets its own challenge (none on a pairing's code).
    async fn on_joined(&self, to: &ToPeer) -> Peer {
        let deadline = Instant::now() + protocol::HELLO_TIMEOUT;
        if !self.gate.challenges() {
            return Peer::AwaitingHello { deadline, challenge: String::new() };
        }
        match protocol::new_nonce() {
            Ok(challenge) => {
                to.send(AgentMessage::challenge(&challenge)).await;
                Peer::AwaitingHello { deadline, challenge }
            }
            Err(err) => {
                warn!("cannot challenge the phone: {err:#}");
                Peer::Refused
            }
        }
    }

    /// A frame of a host's sealed pairing session before its bearer: opened, it must be the
    /// bearer. Anything that does not open closes the session with nothing run.
    async fn on_sealed_bearer(&self, frame: Frame, deadline: Instant, mut io: SessionIo, to: &ToPeer) -> Peer {
        let text = match io.input.open(frame) {
            Ok(Some(Frame::Text(text))) => text,
            Ok(_) => return Peer::AwaitingSealedBearer { deadline, io },
            Err(broken) => {
                warn!("{broken}; the host's session is closed");
                return self.break_sealed(to).await;
            }
        };
        let hello_ok = |admission: &_| self.ctx.hello_ok(admission);
        match admit_sealed_bearer(self.gate.as_ref(), &text, hello_ok, &io.out).await {
            Ok(admission) => {
                self.report(LinkEvent::PeerAdmitted);
                let revoked = admission.revoked.clone();
                let writer = io.out.clone();
                let session = Session::new(self.ctx.clone(), admission.caller, io.out);
                Peer::Ready { session: Box::new(session), writer, inbound: io.input, revoked }
            }
            Err(ErrorCode::UnauthenticatedCall) => Peer::AwaitingSealedBearer { deadline, io },
            Err(code) => {
                let _ = io.out.send(Frame::from(AgentMessage::error(code))).await;
                self.report(LinkEvent::PeerRefused { code });
                Peer::Refused
            }
        }
    }

    /// Ends a sealed session that received what it cannot open: the peer hears
    /// `sealed-session-broken` and its socket is closed 1008.
    async fn break_sealed(&self, to: &ToPeer) -> Peer {
        to.send(AgentMessage::error(ErrorCode::SealedSessionBroken)).await;
        to.close(CloseCode::Policy, ErrorCode::SealedSessionBroken.as_str());
        self.report(LinkEvent::PeerRefused { code: ErrorCode::SealedSessionBroken });
        Peer::Refused
    }

    /// A frame of an admitted peer's session, opened first when the session is sealed. A sealed
    /// session that receives what it cannot open ends here with nothing run, and its socket is
    /// closed 1008 `sealed-session-broken`.
    async fn on_session_frame(
        &self,
        frame: Frame,
        mut session: Box<Session>,
        writer: mpsc::Sender<Frame>,
        mut inbound: SessionInput,
        revoked: Option<CancellationToken>,
        to: &ToPeer,
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
                return self.break_sealed(to).await;
            }
        }
        Peer::Ready { session, writer, inbound, revoked }
    }

    async fn on_text(&self, peer: Peer, text: &str, to: &ToPeer, slot: &mut PeerSlot) -> Peer {
        let admitted = match peer {
            Peer::AwaitingHello { deadline, challenge } => match admit_hello(self.gate.as_ref(), text, &challenge) {
                Ok(HelloVerdict::Admitted(admission)) => Ok(admission),
                Ok(HelloVerdict::AwaitBearer(answer)) => {
                    to.send(answer).await;
                    return Peer::AwaitingBearer { deadline };
                }
                Ok(HelloVerdict::AwaitSealedBearer(seal)) => {
                    let (session_out, forwarder) = to.forward();
                    slot.forwarder = Some(forwarder);
                    return match seal.open(session_out, &self.ctx.status.sessions).await {
                        Ok(io) => Peer::AwaitingSealedBearer { deadline, io },
                        Err(err) => {
                            warn!("cannot answer the host's sealed hello: {err:#}");
                            to.send(AgentMessage::error(ErrorCode::Internal)).await;
                            Peer::Refused
                        }
                    };
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
            other @ (Peer::Ready { .. } | Peer::AwaitingSealedBearer { .. }) => return other,
            Peer::Refused => return Peer::Refused,
        };
        match admitted {
            Ok(mut admission) => {
                let (session_out, forwarder) = to.forward();
                slot.forwarder = Some(forwarder);
                let hello_ok = self.ctx.hello_ok(&admission);
                let io = match start_session(&mut admission, hello_ok, session_out, &self.ctx.status.sessions).await {
                    Ok(io) => io,
                    Err(err) => {
                        warn!("cannot answer the phone's hello: {err:#}");
                        to.send(AgentMessage::error(ErrorCode::Internal)).await;
                        return Peer::Refused;
                    }
                };
                self.report(LinkEvent::PeerAdmitted);
                let revoked = admission.revoked.clone();
                let writer = io.out.clone();
                let shown = super::session::connected(&admission, io.input.is_sealed(), "relay");
                let session = Session::new(self.ctx.clone(), admission.caller, io.out).shown(shown);
                Peer::Ready { session: Box::new(session), writer, inbound: io.input, revoked }
            }
            Err(code) => {
                to.send(AgentMessage::error(code)).await;
                self.report(LinkEvent::PeerRefused { code });
                Peer::Refused
            }
        }
    }
}
