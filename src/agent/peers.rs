//! One relay connection's phones (docs/PROTOCOL.md, "Relay"): every message on the agent's
//! socket is a relay-framed binary message naming a peer, and each peer is one independent
//! session — its own challenge, hello and calls. A peer that leaves takes its session, its
//! partial frame and its unsent output with it.

use std::collections::HashMap;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::link::{Ended, LinkEvent, RelayLink};
use super::outbox::Outbox;
use super::session::Session;
use super::start::{Admitted, Carrier, Next, Refusal, SessionInput, SessionStart, HELLO_TIMEOUT};
use crate::net::dial;
use crate::net::liveness::{cancelled, close_message, sleep_until, Liveness, Pulse};
use crate::protocol::relay::{self as relay_framing, Kind, PeerId};
use crate::protocol::{close, AgentMessage, ErrorCode, Frame, MAX_FRAME_LEN, SEND_QUEUE_FRAMES};

/// Peers one connection serves at once; the relay seats fewer, so more means a relay gone wrong.
pub const MAX_PEERS: usize = 4 * relay_framing::MAX_PHONES_PER_CODE;

/// Longest wait for a revoked session's last frames before its socket is closed.
const REVOKED_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// The peers of one relay connection, and how to reach the socket.
pub(super) struct Peers {
    slots: HashMap<PeerId, PeerSlot>,
    /// The socket's writer queue (relay-framed messages).
    out: mpsc::Sender<Message>,
    /// The relay chose a framing that takes `PROVEN` (`voxa-relay.3`): it hears which peers
    /// proved the token, so a full code makes room by closing an unproven one.
    tells_proven: bool,
}

impl Peers {
    pub(super) fn new(out: mpsc::Sender<Message>, tells_proven: bool) -> Self {
        Peers { slots: HashMap::new(), out, tells_proven }
    }

    fn sender(&self, peer: PeerId) -> PeerSender {
        PeerSender { peer, frames: self.out.clone() }
    }

    /// The earliest moment a peer needs the clock: a start's deadline or a sealed session's stall.
    fn deadline(&self) -> Option<Instant> {
        self.slots.values().filter_map(|slot| slot.state.deadline()).min()
    }

    #[cfg(test)]
    /// Bytes the peers that have not completed their hello make the agent hold (their frames in
    /// parts); at most [`MAX_PEERS`] × [`MAX_RELAYED_PREAUTH_LEN`](super::start::MAX_RELAYED_PREAUTH_LEN).
    pub(super) fn held_before_hello(&self) -> usize {
        self.slots.values().filter(|slot| matches!(slot.state, Peer::Starting(_))).map(|slot| slot.partial.len()).sum()
    }
}

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
    /// Its session start, until it is admitted or refused.
    Starting(Box<SessionStart>),
    Ready {
        session: Box<Session>,
        /// The session's writer (sealing it when the session is sealed), for what the link
        /// itself tells the peer.
        writer: mpsc::Sender<Frame>,
        /// What opens the peer's frames (a sealed session) or passes them on (protocol 2).
        inbound: SessionInput,
        revoked: Option<CancellationToken>,
    },
    /// Refused or ended and closed: what it still sends is dropped until the relay says it left.
    Closed,
}

impl Peer {
    fn deadline(&self) -> Option<Instant> {
        match self {
            Peer::Starting(start) => start.deadline(),
            Peer::Ready { inbound, .. } => inbound.stall_deadline(),
            Peer::Closed => None,
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
struct PeerSender {
    peer: PeerId,
    frames: mpsc::Sender<Message>,
}

impl PeerSender {
    async fn send(&self, frame: Frame) {
        let _ = self.frames.send(Message::binary(self.framed(&frame))).await;
    }

    fn framed(&self, frame: &Frame) -> Vec<u8> {
        match frame {
            Frame::Text(text) => relay_framing::message(Kind::Text, self.peer, text.as_bytes()),
            Frame::Binary(data) => relay_framing::message(Kind::Binary, self.peer, data),
        }
    }

    /// Asks the relay to close this peer's socket, after what was queued for it.
    async fn close(&self, code: CloseCode, reason: &str) {
        let _ = self.frames.send(Message::binary(relay_framing::close_peer(self.peer, code.into(), reason))).await;
    }

    /// Tells the relay this peer proved the pairing's token.
    async fn proven(&self) {
        let _ = self.frames.send(Message::binary(relay_framing::message(Kind::Proven, self.peer, &[]))).await;
    }

    /// Starts copying a session's frames to this peer; the returned sender is the session's.
    fn forward(&self) -> (mpsc::Sender<Frame>, JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<Frame>(SEND_QUEUE_FRAMES);
        let to = self.clone();
        let task = tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if to.frames.send(Message::binary(to.framed(&frame))).await.is_err() {
                    return;
                }
            }
        });
        (tx, task)
    }
}

impl RelayLink {
    /// Serves one relay connection: its phones, the heartbeat, shutdown and revocation.
    /// `tells_proven`: the relay chose the framing that takes `PROVEN`.
    pub(super) async fn serve(
        &self,
        socket: dial::ClientSocket,
        tells_proven: bool,
        shutdown: &CancellationToken,
    ) -> Ended {
        let (sink, mut stream) = socket.split();
        let outbox = Outbox::spawn(sink);
        let mut peers = Peers::new(outbox.frames.clone(), tells_proven);
        let mut liveness = Liveness::new(self.heartbeat);
        let ended = loop {
            let deadline = peers.deadline();
            // Every session a link admits passes one gate, so they share its revocation.
            let revoked = peers.slots.values().find_map(|slot| slot.state.revoked()).cloned();
            tokio::select! {
                // A revocation outranks a shutdown that arrives with it: the host must hear why.
                biased;
                _ = cancelled(revoked) => self.revoke(&mut peers).await,
                _ = shutdown.cancelled() => {
                    let _ = peers.out.try_send(close_message(CloseCode::Away, "agent shutting down"));
                    break Ended::Shutdown;
                }
                pulse = liveness.tick() => match pulse {
                    Pulse::Silent(silent) => break Ended::Lost(format!("no answer from the relay for {} s", silent.as_secs())),
                    Pulse::Ping => { let _ = peers.out.try_send(Message::Ping(Default::default())); }
                },
                _ = sleep_until(deadline) => self.on_clock(&mut peers, Instant::now()).await,
                frame = stream.next() => {
                    let frame = match frame {
                        None => break Ended::Lost("relay closed the connection".into()),
                        Some(Err(err)) => break Ended::Lost(format!("{err}")),
                        Some(Ok(frame)) => frame,
                    };
                    liveness.heard();
                    if let Err(ended) = self.on_frame(frame, &mut peers).await {
                        break ended;
                    }
                    self.ctx.status.set_link(self.relay.as_str(), None, Some(!peers.slots.is_empty()));
                }
            }
        };
        drop(peers);
        outbox.finish().await;
        ended
    }

    /// The pairing was revoked: every session it admitted hears so (inside the session, sealed
    /// when it is) and is closed 1008 once that was written.
    async fn revoke(&self, peers: &mut Peers) {
        let gone: Vec<PeerId> = peers
            .slots
            .iter()
            .filter(|(_, slot)| slot.state.revoked().is_some_and(CancellationToken::is_cancelled))
            .map(|(peer, _)| *peer)
            .collect();
        for peer in gone {
            let Some(mut slot) = peers.slots.remove(&peer) else { continue };
            let to = peers.sender(peer);
            if let Peer::Ready { writer, .. } = std::mem::replace(&mut slot.state, Peer::Closed) {
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
            to.close(CloseCode::Policy, ErrorCode::PairingRevoked.as_str()).await;
        }
    }

    /// The clock reached a peer's deadline: a peer whose hello did not complete in time is
    /// refused and closed (on a phone's code as on a pairing's: a stranger that holds a seat
    /// locks the owner out), and a sealed session that heard nothing sealed for too long ends
    /// `sealed-session-stalled`.
    async fn on_clock(&self, peers: &mut Peers, now: Instant) {
        let due: Vec<PeerId> = peers
            .slots
            .iter()
            .filter(|(_, slot)| slot.state.deadline().is_some_and(|deadline| deadline <= now))
            .map(|(peer, _)| *peer)
            .collect();
        for peer in due {
            let to = peers.sender(peer);
            let Some(slot) = peers.slots.get_mut(&peer) else { continue };
            match std::mem::replace(&mut slot.state, Peer::Closed) {
                Peer::Starting(mut start) => match start.on_timeout(now) {
                    Some(refusal) => self.refuse(slot, refusal, &to).await,
                    None => slot.state = Peer::Starting(start),
                },
                Peer::Ready { .. } => {
                    debug!("a sealed session heard nothing sealed in time; closing it");
                    self.end_session(slot, ErrorCode::SealedSessionStalled, &to).await;
                }
                Peer::Closed => {}
            }
        }
    }

    /// One message from the relay: a peer joining or leaving, a peer's frame (or part of one), or
    /// the relay's close.
    pub(super) async fn on_frame(&self, frame: Message, peers: &mut Peers) -> Result<(), Ended> {
        let data = match frame {
            Message::Binary(data) => data,
            Message::Close(frame) if frame.as_ref().is_some_and(|f| u16::from(f.code) == close::REPLACED) => {
                return Err(Ended::Replaced)
            }
            Message::Close(_) => return Err(Ended::Lost("relay closed the connection".into())),
            _ => return Ok(()),
        };
        let Some((kind, peer, payload)) = relay_framing::split(&data) else {
            debug!("dropped a relay message that is not relay framing");
            return Ok(());
        };
        let to = peers.sender(peer);
        match kind {
            Kind::Joined if peers.slots.len() >= MAX_PEERS => debug!("more peers than the relay seats; ignored"),
            Kind::Joined => {
                let state = self.on_joined(&to).await;
                // A peer id is never reused: a second JOINED replaces nothing but a stale slot.
                peers.slots.insert(peer, PeerSlot { state, partial: Vec::new(), forwarder: None });
                self.report(LinkEvent::PeerJoined);
            }
            Kind::Left => {
                // Its session ends here: its calls are cancelled and its unsent output dropped.
                if peers.slots.remove(&peer).is_some() {
                    self.report(LinkEvent::PeerLeft);
                }
            }
            Kind::Part => {
                let Some(slot) = peers.slots.get_mut(&peer) else { return Ok(()) };
                if self.take_bytes(slot, payload.len(), &to).await {
                    slot.partial.extend_from_slice(payload);
                }
            }
            Kind::Text | Kind::Binary => {
                let Some(slot) = peers.slots.get_mut(&peer) else { return Ok(()) };
                if !self.take_bytes(slot, payload.len(), &to).await {
                    return Ok(());
                }
                let whole = if slot.partial.is_empty() {
                    payload.to_vec()
                } else {
                    let mut whole = std::mem::take(&mut slot.partial);
                    whole.extend_from_slice(payload);
                    whole
                };
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
                let tells_proven = peers.tells_proven;
                match std::mem::replace(&mut slot.state, Peer::Closed) {
                    Peer::Ready { session, writer, inbound, revoked } => {
                        self.on_session_frame(frame, slot, session, writer, inbound, revoked, &to).await
                    }
                    Peer::Starting(mut start) => {
                        let next = start.on_frame(frame, &|admission| self.ctx.hello_ok(admission));
                        self.on_start(next, start, slot, tells_proven, &to).await;
                    }
                    Peer::Closed => {}
                }
            }
            // A service worker's receipt for a push it showed: only the notifier can tell it from
            // noise (it checks it against the pushes it sent).
            Kind::Receipt => {
                if let Some(notifier) = &self.ctx.notifier {
                    notifier.receipt(payload);
                }
            }
            Kind::ClosePeer | Kind::Proven => debug!("dropped a relay message only agents send"),
        }
        Ok(())
    }

    /// `len` more bytes from a peer: whether to keep them. Before its hello a peer has its
    /// start's budget (one byte over closes it 1009); after it, a frame may grow to the frame
    /// limit; a closed peer keeps nothing.
    async fn take_bytes(&self, slot: &mut PeerSlot, len: usize, to: &PeerSender) -> bool {
        match &mut slot.state {
            Peer::Closed => false,
            Peer::Starting(start) => match start.on_bytes(len) {
                None => true,
                Some(refusal) => {
                    debug!("a peer sent too much before its hello; closing it");
                    self.refuse(slot, refusal, to).await;
                    false
                }
            },
            Peer::Ready { .. } if slot.partial.len() + len > MAX_FRAME_LEN => {
                debug!("a peer's frame is over the frame limit; closing it");
                slot.partial = Vec::new();
                to.close(CloseCode::Size, "message too big").await;
                false
            }
            Peer::Ready { .. } => true,
        }
    }

    /// A peer joined: it gets its own session start, and its challenge (none on a pairing's code).
    async fn on_joined(&self, to: &PeerSender) -> Peer {
        match SessionStart::new(self.gate.clone(), Carrier::Relay, Instant::now() + HELLO_TIMEOUT) {
            Ok((start, opening)) => {
                for frame in opening {
                    to.send(frame).await;
                }
                Peer::Starting(Box::new(start))
            }
            Err(err) => {
                warn!("cannot challenge the phone: {err:#}");
                to.close(CloseCode::Error, ErrorCode::Internal.as_str()).await;
                Peer::Closed
            }
        }
    }

    /// What a step of a peer's session start asks for.
    async fn on_start(
        &self,
        next: Next,
        start: Box<SessionStart>,
        slot: &mut PeerSlot,
        tells_proven: bool,
        to: &PeerSender,
    ) {
        slot.state = match next {
            Next::Wait => Peer::Starting(start),
            Next::Send(frames) => {
                for frame in frames {
                    to.send(frame).await;
                }
                Peer::Starting(start)
            }
            Next::Refused(refusal) => return self.refuse(slot, refusal, to).await,
            Next::Admitted(admitted) => self.admit(*admitted, slot, tells_proven, to).await,
        };
    }

    /// An admitted peer: the relay's word that it proved the token (when the relay takes it),
    /// then its session's queue (with `hello_ok` first) and its session. The word goes first on
    /// the socket both share: a phone told it is in is already proven at the relay, so a full code
    /// never closes it to make room.
    async fn admit(&self, admitted: Admitted, slot: &mut PeerSlot, tells_proven: bool, to: &PeerSender) -> Peer {
        let Admitted { admission, frames, ends } = admitted;
        if tells_proven {
            to.proven().await;
        }
        let (queue, forwarder) = to.forward();
        slot.forwarder = Some(forwarder);
        for frame in frames {
            let _ = queue.send(frame).await;
        }
        let io = ends.open(queue, &self.ctx.status.sessions);
        self.report(LinkEvent::PeerAdmitted);
        let revoked = admission.revoked.clone();
        let writer = io.out.clone();
        let shown = super::session::connected(&admission, io.input.is_sealed(), "relay");
        let session = Session::new(self.ctx.clone(), admission.caller, io.out).shown(shown);
        Peer::Ready { session: Box::new(session), writer, inbound: io.input, revoked }
    }

    /// Refuses a peer: it hears why, then the relay closes it; what it sent is dropped.
    async fn refuse(&self, slot: &mut PeerSlot, refusal: Refusal, to: &PeerSender) {
        slot.state = Peer::Closed;
        slot.partial = Vec::new();
        for frame in refusal.frames {
            to.send(frame).await;
        }
        to.close(refusal.close, refusal.reason).await;
        self.report(LinkEvent::PeerRefused { code: refusal.code });
    }

    /// Ends an admitted peer's session with `code` (its seal broke, or it went silent): the
    /// session goes (its unsent output with it; its calls go on) and the relay closes the peer
    /// 1008 with the code as the reason. A broken seal is also answered with the code unsealed
    /// (docs/PROTOCOL.md), which a peer expecting sealed frames takes as the end too.
    async fn end_session(&self, slot: &mut PeerSlot, code: ErrorCode, to: &PeerSender) {
        slot.state = Peer::Closed;
        slot.partial = Vec::new();
        if let Some(forwarder) = slot.forwarder.take() {
            forwarder.abort();
        }
        if code == ErrorCode::SealedSessionBroken {
            to.send(Frame::from(AgentMessage::error(code))).await;
        }
        to.close(CloseCode::Policy, code.as_str()).await;
        self.report(LinkEvent::PeerRefused { code });
    }

    /// A frame of an admitted peer's session, opened first when the session is sealed. A sealed
    /// session that receives what it cannot open ends here with nothing run, and its socket is
    /// closed 1008 `sealed-session-broken`.
    #[allow(clippy::too_many_arguments)]
    async fn on_session_frame(
        &self,
        frame: Frame,
        slot: &mut PeerSlot,
        mut session: Box<Session>,
        writer: mpsc::Sender<Frame>,
        mut inbound: SessionInput,
        revoked: Option<CancellationToken>,
        to: &PeerSender,
    ) {
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
                return self.end_session(slot, ErrorCode::SealedSessionBroken, to).await;
            }
        }
        slot.state = Peer::Ready { session, writer, inbound, revoked };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::agent::context::AgentContext;
    use crate::agent::gate::TokenGate;
    use crate::agent::start::MAX_RELAYED_PREAUTH_LEN;
    use crate::secret::Secret;
    use crate::tools::{Toolbox, ToolboxOptions};
    use tokio_util::task::TaskTracker;

    fn link(workspace: &std::path::Path) -> RelayLink {
        let options = ToolboxOptions { workspace: workspace.to_owned(), ..Default::default() };
        let ctx = AgentContext::new(
            Toolbox::new(options).unwrap(),
            crate::approvals::Broker::new(Default::default()),
            None,
            TaskTracker::new(),
        );
        let token = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        RelayLink {
            url: "ws://127.0.0.1:9/agent".into(),
            relay: crate::config::RelayUrl::parse("http://127.0.0.1:9").unwrap(),
            dial: Default::default(),
            heartbeat: Default::default(),
            backoff: Default::default(),
            gate: Arc::new(TokenGate::new(token, "phone", false)),
            ctx: Arc::new(ctx),
            events: None,
        }
    }

    /// Every `CLOSE_PEER` the link asked for: peer, code and reason.
    fn closes(sent: &mut mpsc::Receiver<Message>) -> Vec<(PeerId, u16, String)> {
        let mut found = Vec::new();
        while let Ok(message) = sent.try_recv() {
            let data = message.into_data();
            if let Some((Kind::ClosePeer, peer, payload)) = relay_framing::split(&data) {
                let (code, reason) = relay_framing::parse_close_peer(payload).unwrap();
                found.push((peer, code, reason.to_owned()));
            }
        }
        found
    }

    /// A relay that makes up peer ids and has each send 128 KiB before any hello: each seated
    /// peer is closed 1009 once past 64 KiB, at most `MAX_PEERS` are seated, and the agent never
    /// holds more than `MAX_PEERS` × 64 KiB for them.
    #[tokio::test]
    async fn strangers_before_their_hello_hold_at_most_their_budget_each_and_the_peer_limit_in_all() {
        let workspace = tempfile::tempdir().unwrap();
        let link = link(workspace.path());
        let (out, mut sent) = mpsc::channel(16 * MAX_PEERS);
        let mut peers = Peers::new(out, false);
        let part = vec![b'{'; 16 << 10];
        let bound = MAX_PEERS * MAX_RELAYED_PREAUTH_LEN;
        let mut most = 0;
        for peer in 0..1000u32 {
            link.on_frame(Message::binary(relay_framing::header(Kind::Joined, peer).to_vec()), &mut peers)
                .await
                .unwrap();
        }
        for _ in 0..8 {
            for peer in 0..1000u32 {
                let message = Message::binary(relay_framing::message(Kind::Part, peer, &part));
                link.on_frame(message, &mut peers).await.unwrap();
                most = most.max(peers.held_before_hello());
                assert!(peers.held_before_hello() <= bound, "{} bytes held", peers.held_before_hello());
            }
        }
        assert_eq!(most, MAX_PEERS * 4 * part.len(), "each seated peer held 64 KiB at the most");
        assert_eq!(peers.held_before_hello(), 0, "every stranger was closed and its bytes dropped");
        let closed = closes(&mut sent);
        assert_eq!(closed.len(), MAX_PEERS, "{closed:?}");
        assert!(closed.iter().all(|(peer, code, reason)| (*peer as usize) < MAX_PEERS
            && *code == 1009
            && reason == crate::agent::start::TOO_MUCH_BEFORE_HELLO));
        assert_eq!(bound, 2 << 20);
    }

    /// A hello refused through the relay is told and then closed; so is a peer silent past its
    /// deadline: neither keeps its seat at the relay.
    #[tokio::test(start_paused = true)]
    async fn refused_and_silent_peers_are_closed_not_kept() {
        let workspace = tempfile::tempdir().unwrap();
        let link = link(workspace.path());
        let (out, mut sent) = mpsc::channel(64);
        let mut peers = Peers::new(out, true);
        for peer in [1, 2] {
            link.on_frame(Message::binary(relay_framing::header(Kind::Joined, peer).to_vec()), &mut peers)
                .await
                .unwrap();
        }
        let hello = r#"{"type":"hello","protocol":3,"noise":"AAAA"}"#;
        link.on_frame(Message::binary(relay_framing::message(Kind::Text, 1, hello.as_bytes())), &mut peers)
            .await
            .unwrap();
        assert_eq!(closes(&mut sent), [(1, 1008, "bearer-refused".to_owned())]);
        assert_eq!(peers.deadline(), Some(Instant::now() + HELLO_TIMEOUT), "peer 2 still has its time");
        tokio::time::advance(HELLO_TIMEOUT).await;
        link.on_clock(&mut peers, Instant::now()).await;
        assert_eq!(closes(&mut sent), [(2, 1008, "unauthenticated-call".to_owned())]);
        assert_eq!(peers.deadline(), None);
        // Frames of a closed peer are dropped; no PROVEN was ever sent.
        link.on_frame(Message::binary(relay_framing::message(Kind::Part, 1, &[0; 1024])), &mut peers).await.unwrap();
        assert_eq!(peers.held_before_hello(), 0);
        while let Ok(message) = sent.try_recv() {
            let data = message.into_data();
            assert_ne!(relay_framing::split(&data).map(|(kind, ..)| kind), Some(Kind::Proven));
        }
    }

    /// The challenge the link sent `peer`.
    fn challenge_of(sent: &mut mpsc::Receiver<Message>, peer: PeerId) -> String {
        while let Ok(message) = sent.try_recv() {
            let data = message.into_data();
            if let Some((Kind::Text, to, payload)) = relay_framing::split(&data) {
                let frame: serde_json::Value = serde_json::from_slice(payload).unwrap();
                if to == peer && frame["type"] == "challenge" {
                    return frame["nonce"].as_str().unwrap().to_owned();
                }
            }
        }
        panic!("no challenge for peer {peer}")
    }

    /// After admission the link tells the relay `PROVEN` for that peer — only on a relay that
    /// chose the framing that takes it, and before the peer's `hello_ok`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_admitted_peer_is_told_proven_to_a_relay_that_takes_it_and_only_then() {
        use base64::Engine;
        let workspace = tempfile::tempdir().unwrap();
        let link = link(workspace.path());
        let token = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        for tells_proven in [true, false] {
            let (out, mut sent) = mpsc::channel(64);
            let mut peers = Peers::new(out, tells_proven);
            link.on_frame(Message::binary(relay_framing::header(Kind::Joined, 7).to_vec()), &mut peers).await.unwrap();
            let challenge = challenge_of(&mut sent, 7);
            let (_, one) = crate::seal::Initiator::start(&token, &challenge).unwrap();
            let noise = base64::engine::general_purpose::STANDARD.encode(one);
            let hello = serde_json::json!({"type":"hello","protocol":3,"noise": noise}).to_string();
            link.on_frame(Message::binary(relay_framing::message(Kind::Text, 7, hello.as_bytes())), &mut peers)
                .await
                .unwrap();
            assert!(matches!(peers.slots[&7].state, Peer::Ready { .. }));
            // What the link sent after the challenge, in order, once `hello_ok` is among it.
            let mut said = Vec::new();
            while !said.iter().any(|(kind, _)| *kind == Kind::Text) {
                let message =
                    tokio::time::timeout(std::time::Duration::from_secs(5), sent.recv()).await.unwrap().unwrap();
                if let Some((kind, peer, payload)) = relay_framing::split(&message.into_data()) {
                    assert_eq!(peer, 7);
                    said.push((kind, payload.to_vec()));
                }
            }
            said.extend(std::iter::from_fn(|| sent.try_recv().ok()).filter_map(|message| {
                relay_framing::split(&message.into_data()).map(|(kind, _, payload)| (kind, payload.to_vec()))
            }));
            let kinds: Vec<Kind> = said.iter().map(|(kind, _)| *kind).collect();
            let hello_ok: serde_json::Value = serde_json::from_slice(&said[kinds.len() - 1].1).unwrap_or_default();
            if tells_proven {
                assert_eq!(kinds, [Kind::Proven, Kind::Text], "PROVEN before hello_ok");
            } else {
                assert_eq!(kinds, [Kind::Text]);
            }
            assert_eq!(hello_ok["type"], "hello_ok");
        }
    }
}
