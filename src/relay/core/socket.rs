//! One upgraded socket: a reader that hands the client's messages on part by part as they arrive
//! (cut-through) and watches for silence, and a writer that drains this socket's queue. Both run
//! inside the connection's task, so a socket costs one task, one small read buffer, the part
//! being read and its queue.
//!
//! A phone's parts go to the agent tagged with the phone's peer id (`PART`, then `TEXT` or
//! `BINARY`); an agent's messages are read by their relay header and go to that one phone as
//! WebSocket fragments. The relay looks at nothing else of what it carries.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{FusedFuture, FutureExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout, Instant};
use tracing::debug;

use super::codec::{self, close, OutFrame};
use super::hub::{Forward, Hub, Seat, Slot, TooManyPhones};
use super::queue::{Action, Cork, End, QueueLimits, SendQueue, MAX_BATCH_BYTES, MAX_BATCH_FRAMES};
use super::reader::{close_code_allowed, Event, FrameReader, Meter, Part};
use super::stream::DirectSink;
use super::{Claim, RelayStream, Shutdown, SocketLimits};
use crate::protocol::relay::{self, close as relay_close, header, is_notice, Framing, Kind, PeerId, HEADER_LEN};
use crate::protocol::PeerRole;

/// Time the writer gets to finish its frame and send the close frame once the socket ends.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Time the reader gets afterwards to see the client's close frame or end of stream.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// Where a socket belongs: its pairing and its place in it.
pub(crate) struct Membership {
    pub(crate) hub: Arc<Hub>,
    pub(crate) claim: Claim,
}

/// A socket seated in its pairing.
pub(crate) struct Seated {
    pub slot: Arc<Slot>,
    pub seat: Seat,
}

impl Membership {
    /// The relay code, as the log may name it once hashed.
    pub(crate) fn code(&self) -> u128 {
        self.claim.code
    }

    /// Whether an agent holds this code at this relay now.
    pub(crate) fn agent_present(&self) -> bool {
        self.hub.has_agent(self.claim.code)
    }

    /// A send queue for this socket, within the limits and counted in the relay's ledger.
    pub(crate) fn queue(&self, limits: &SocketLimits) -> Arc<SendQueue> {
        self.queue_into(limits, None)
    }

    /// A send queue whose frames may go straight into `sink` when nothing waits before them.
    fn queue_into(&self, limits: &SocketLimits, sink: Option<DirectSink>) -> Arc<SendQueue> {
        let queue = QueueLimits { frames: limits.send_queue_frames, bytes: limits.send_queue_bytes };
        Arc::new(SendQueue::with_sink(queue, Arc::clone(&self.hub.ledger), sink))
    }

    /// Takes this socket's place in its pairing; the other side's frames go to `queue`. A phone
    /// finding every place taken is ended 4003 `too-many-phones`.
    pub(crate) fn join(&self, queue: &Arc<SendQueue>) -> Option<Seated> {
        match self.hub.join(&self.claim, queue) {
            Ok((slot, seat)) => {
                self.hub.metrics().socket_joined(self.claim.role);
                Some(Seated { slot, seat })
            }
            Err(TooManyPhones) => {
                debug!("refused a phone: the code has the most phones it may have");
                queue.end(End::close(relay_close::TOO_MANY_PHONES, relay_close::TOO_MANY_PHONES_REASON));
                None
            }
        }
    }

    /// Gives the place back; the others hear of it.
    pub(crate) fn leave(&self, seated: &Seated) {
        self.hub.leave(self.claim.code, &seated.slot, seated.seat);
        self.hub.metrics().socket_left(self.claim.role);
    }
}

/// Runs an upgraded `/agent` or `/ws` socket until it ends, then closes it within bounded time.
pub(crate) async fn serve<S: RelayStream>(
    stream: S,
    leftover: Vec<u8>,
    member: Membership,
    limits: &SocketLimits,
    shutdown: &Shutdown,
) {
    let (mut read_half, mut write_half, sink) = stream.into_halves();
    let queue = member.queue_into(limits, sink);
    // The relay's header on an agent's messages does not count against the frame limit.
    let max_message_len = match member.claim.role {
        PeerRole::Agent => limits.max_frame_len.saturating_add(HEADER_LEN),
        PeerRole::Phone => limits.max_frame_len,
    };
    let frames = FrameReader::new(max_message_len, &leftover);
    drop(leftover);
    let writer = write_side(&mut write_half, &queue).fuse();
    tokio::pin!(writer);
    let Some(seated) = member.join(&queue) else {
        let _ = timeout(CLOSE_GRACE, &mut writer).await;
        return;
    };
    debug!("joined");
    // Frames this socket's reader hands over are corked at their receivers until it next waits.
    let cork = Cork::default();
    let to_peer = Forwarder {
        hub: &member.hub,
        slot: &seated.slot,
        own: &queue,
        cork: &cork,
        stall_timeout: limits.stall_timeout,
    };
    let deliver = match seated.seat {
        Seat::Phone { peer } => Parts::Phone(PhoneParts { to: to_peer, peer, agent: None }),
        Seat::Agent { conn } => Parts::Agent(AgentMessages {
            to: to_peer,
            conn,
            framing: member.claim.framing,
            state: Reading::Header([0; HEADER_LEN], 0),
        }),
    };
    let reader = read_side(&mut read_half, frames, &member.hub, &queue, &cork, limits, deliver).fuse();
    tokio::pin!(reader);
    // In order, without drawing a random one first: whichever ends first ends the socket.
    tokio::select! {
        biased;
        () = &mut reader => {}
        result = &mut writer => {
            if let Err(err) = result {
                debug!(%err, "write failed");
            }
        }
        () = queue.ending() => {}
        () = shutdown.wait() => queue.end(End::close(close::GOING_AWAY, "relay shutting down")),
    }
    // What the reader corked goes before the notice of this socket's leaving. Leave first, so
    // the others hear of it at once even if this client is slow to close.
    cork.release();
    member.leave(&seated);
    queue.end(End::Abort);
    debug!(end = ?queue.ended(), "left");
    wind_down(&mut writer, &mut reader).await;
}

/// After a socket left its pairing: the writer sends the close frame while the reader, which has
/// dropped its buffers, waits for the client's close or end of stream — each within bounded time.
pub(crate) async fn wind_down<W, R>(writer: &mut W, reader: &mut R)
where
    W: FusedFuture + Unpin,
    R: FusedFuture + Unpin,
{
    let close = async {
        if !writer.is_terminated() && timeout(CLOSE_GRACE, &mut *writer).await.is_err() {
            debug!("close frame not written in time");
        }
    };
    let linger = async {
        if !reader.is_terminated() {
            let _ = timeout(CLOSE_GRACE + CLOSE_LINGER, &mut *reader).await;
        }
    };
    tokio::join!(close, linger);
}

/// Where a socket's data goes, part by part.
pub(crate) trait Deliver {
    /// Takes one part; waiting here stops the socket from being read. `Break` ends the socket
    /// (its queue was ended with the reason).
    async fn deliver(&mut self, part: Part) -> ControlFlow<()>;
}

/// The parts of either kind of socket.
enum Parts<'a> {
    Phone(PhoneParts<'a>),
    Agent(AgentMessages<'a>),
}

impl Deliver for Parts<'_> {
    async fn deliver(&mut self, part: Part) -> ControlFlow<()> {
        match self {
            Parts::Phone(phone) => phone.deliver(part).await,
            Parts::Agent(agent) => agent.deliver(part).await,
        }
    }
}

/// The other side of the pairing, as one socket's reader sees it.
pub(crate) struct Forwarder<'a> {
    pub hub: &'a Hub,
    pub slot: &'a Slot,
    /// The reading socket's own queue: its end stops a wait, and a waiting part is its bytes.
    pub own: &'a SendQueue,
    /// The receivers' queues this reader corked.
    pub cork: &'a Cork,
    pub stall_timeout: Duration,
}

/// A phone's parts, to the agent, tagged with the phone's peer id.
pub(crate) struct PhoneParts<'a> {
    pub to: Forwarder<'a>,
    pub peer: PeerId,
    /// The agent that got the first part of the message being read: the rest goes to it only.
    pub agent: Option<u64>,
}

impl Deliver for PhoneParts<'_> {
    async fn deliver(&mut self, part: Part) -> ControlFlow<()> {
        let kind = match (part.fin, part.text) {
            (false, _) => Kind::Part,
            (true, true) => Kind::Text,
            (true, false) => Kind::Binary,
        };
        let peer = self.peer;
        let frame = OutFrame::tagged(header(kind, peer), part.bytes);
        // A message's first part goes to the agent there now, and the rest to that one only.
        let mut first = part.first;
        let agent = &mut self.agent;
        let route = |hub: &Hub, slot: &Slot, frame, cork: Option<&Cork>| {
            if std::mem::take(&mut first) {
                let (forward, to) = hub.to_current_agent(slot, peer, frame, cork);
                *agent = to;
                forward
            } else {
                hub.to_agent(slot, peer, *agent, frame, cork)
            }
        };
        self.to.forward(frame, route).await;
        ControlFlow::Continue(())
    }
}

/// How far the agent's current message has been read.
enum Reading {
    /// The relay header so far.
    Header([u8; HEADER_LEN], usize),
    /// A frame for `peer`; `begun` once its first fragment went out.
    Data { peer: PeerId, text: bool, begun: bool },
    /// A `CLOSE_PEER` request and its payload so far.
    ClosePeer { peer: PeerId, payload: Vec<u8> },
    /// A `PROVEN` mark, which carries nothing.
    Proven { peer: PeerId },
    /// The rest of a message the relay drops.
    Skip,
}

/// The agent's messages, each to the phone its header names, as fragments read as they arrive.
pub(crate) struct AgentMessages<'a> {
    to: Forwarder<'a>,
    conn: u64,
    /// The relay framing agreed in the upgrade: the kinds this agent may send.
    framing: Framing,
    state: Reading,
}

impl AgentMessages<'_> {
    fn refuse(&self, why: &'static str) -> ControlFlow<()> {
        debug!(why, "closing the agent's socket");
        self.to.own.end(End::close(close::PROTOCOL_ERROR, why));
        ControlFlow::Break(())
    }
}

impl Deliver for AgentMessages<'_> {
    async fn deliver(&mut self, part: Part) -> ControlFlow<()> {
        if part.text {
            return self.refuse("the agent's messages are binary (relay framing 2)");
        }
        let mut bytes = part.bytes;
        if part.first {
            self.state = Reading::Header([0; HEADER_LEN], 0);
        }
        if let Reading::Header(head, have) = &mut self.state {
            let take = (HEADER_LEN - *have).min(bytes.len());
            head[*have..*have + take].copy_from_slice(&bytes[..take]);
            *have += take;
            bytes.drain(..take);
            if *have < HEADER_LEN {
                return if part.fin {
                    self.refuse("a message shorter than the relay header")
                } else {
                    ControlFlow::Continue(())
                };
            }
            let Some((kind, peer, _)) = relay::split(&head[..]) else {
                return self.refuse("unknown relay message kind");
            };
            let next = match kind {
                Kind::Text | Kind::Binary => Some(Reading::Data { peer, text: kind == Kind::Text, begun: false }),
                Kind::ClosePeer => Some(Reading::ClosePeer { peer, payload: Vec::new() }),
                Kind::Proven => Some(Reading::Proven { peer }),
                Kind::Part | Kind::Joined | Kind::Left | Kind::Receipt => None,
            };
            match next.filter(|_| self.framing.agent_sends(kind)) {
                Some(next) => self.state = next,
                None => return self.refuse("a relay message kind agents do not send (in this relay framing)"),
            }
        }
        match &mut self.state {
            Reading::Header(..) | Reading::Skip => {}
            Reading::Data { peer, text, begun } => {
                if !*begun && bytes.is_empty() && !part.fin {
                    return ControlFlow::Continue(());
                }
                if !*begun && *text && is_notice(&bytes) {
                    debug!("dropped an agent frame posing as a relay notice");
                    self.state = Reading::Skip;
                    return ControlFlow::Continue(());
                }
                let opcode = match (*begun, *text) {
                    (true, _) => codec::OP_CONTINUATION,
                    (false, true) => codec::OP_TEXT,
                    (false, false) => codec::OP_BINARY,
                };
                *begun = true;
                let (peer, conn) = (*peer, self.conn);
                let frame = OutFrame { opcode, fin: part.fin, tag: None, payload: bytes };
                self.to.forward(frame, |hub, slot, frame, cork| hub.to_phone(slot, conn, peer, frame, cork)).await;
            }
            Reading::ClosePeer { peer, payload } => {
                if payload.len() + bytes.len() > 2 + relay::MAX_CLOSE_REASON {
                    return self.refuse("a CLOSE_PEER reason longer than 123 bytes");
                }
                payload.extend_from_slice(&bytes);
                if part.fin {
                    match relay::parse_close_peer(payload) {
                        Some((code, reason)) if close_code_allowed(code) => {
                            self.to.hub.close_phone(self.to.slot, self.conn, *peer, code, reason)
                        }
                        _ => return self.refuse("a malformed CLOSE_PEER"),
                    }
                }
            }
            Reading::Proven { peer } => {
                if !bytes.is_empty() {
                    return self.refuse("a PROVEN that carries a payload");
                }
                if part.fin {
                    self.to.hub.prove(self.to.slot, self.conn, *peer);
                }
            }
        }
        ControlFlow::Continue(())
    }
}

impl Forwarder<'_> {
    /// Hands a frame to the other side through `route`, corked at the receiver while the reader
    /// has more of its read to hand on (see [`Cork`]). While the receiver's queue is full this
    /// socket is not read, so the sender slows to the receiver's pace, and the waiting frame
    /// counts against the memory budget as this socket's; a receiver that writes nothing at all
    /// for the stall timeout is closed with 1013 and its queue freed.
    pub(crate) async fn forward(
        &self,
        mut frame: OutFrame,
        mut route: impl FnMut(&Hub, &Slot, OutFrame, Option<&Cork>) -> Forward,
    ) {
        let len = frame.len();
        let mut waiting = false;
        loop {
            let peer = match route(self.hub, self.slot, frame, self.cork.wanted()) {
                Forward::Done => break,
                Forward::Full(back, peer) => {
                    frame = back;
                    peer
                }
            };
            // The full queue may hold frames corked here: its writer must have them to make room.
            self.cork.release();
            if !waiting {
                self.hub.metrics().queue_full();
                if !self.own.grow(len) {
                    // This socket is ending: the frame goes with it.
                    return;
                }
                waiting = true;
                self.hub.enforce_budget();
            }
            let reading = tokio::select! {
                reading = peer.room_or_stall(len, self.stall_timeout) => reading,
                () = self.own.ending() => return,
            };
            if !reading {
                debug!("the other side stopped reading; closed it");
                break;
            }
        }
        if waiting {
            self.own.shrink(len);
        }
        if self.hub.ledger.over() {
            self.hub.enforce_budget();
        }
    }
}

/// Reads the client's frames until the socket ends: data goes to `deliver` part by part, pings
/// are answered, silence is met with pings and, past the idle timeout, the end of the socket.
pub(crate) async fn read_side<R: AsyncRead + Unpin>(
    io: &mut R,
    mut frames: FrameReader,
    hub: &Hub,
    queue: &SendQueue,
    cork: &Cork,
    limits: &SocketLimits,
    mut deliver: impl Deliver,
) {
    let mut silence = Silence { last_heard: Instant::now(), received: frames.received(), limits };
    let wake = tokio::time::sleep(limits.ping_interval);
    let ending = queue.ending();
    tokio::pin!(wake, ending);
    let meter = Budgeted { queue, hub, cork };
    loop {
        // The end first (one atomic load), then the stream; the timer only once the stream has
        // nothing (a socket that is read is not silent).
        let event = tokio::select! {
            biased;
            () = &mut ending => {
                frames.discard(io, &meter).await;
                return;
            }
            event = frames.read_event(io, &meter) => event,
            () = &mut wake => {
                match silence.check(frames.received(), queue) {
                    Some(next) => wake.as_mut().reset(next),
                    None => return,
                }
                continue;
            }
        };
        let flow = match event {
            Ok(Some(Event::Data(part))) => {
                cork.read_ahead(frames.has_buffered());
                deliver.deliver(part).await
            }
            Ok(Some(Event::Ping(payload))) => {
                queue.pong(payload);
                ControlFlow::Continue(())
            }
            Ok(Some(Event::Pong)) => ControlFlow::Continue(()),
            Ok(Some(Event::Close(code))) => {
                queue.end(End::Echo(code));
                return;
            }
            Ok(None) => {
                queue.end(End::Abort);
                return;
            }
            Err(err) => {
                debug!(%err, "closing the socket");
                match err.close() {
                    Some((code, reason)) => {
                        queue.end(End::close(code, reason));
                        ControlFlow::Break(())
                    }
                    None => {
                        queue.end(End::Abort);
                        return;
                    }
                }
            }
        };
        if flow.is_break() {
            // Keep reading (and dropping) so the close frame is not lost to a reset of a
            // connection with unread data; the caller bounds this in time.
            frames.discard(io, &meter).await;
            return;
        }
    }
}

/// How long a socket has been silent, checked whenever its ping timer fires. What it heard is
/// told by the reader's byte count alone (every event comes from bytes read), so reading a frame
/// costs no look at the clock.
struct Silence<'a> {
    /// The start, or the last check that found new bytes.
    last_heard: Instant,
    /// Bytes the reader had received at the last check.
    received: u64,
    limits: &'a SocketLimits,
}

impl Silence<'_> {
    /// Pings a socket silent for the ping interval and ends one silent for the idle timeout;
    /// gives the time of the next check, or `None` once the socket is ended.
    fn check(&mut self, received: u64, queue: &SendQueue) -> Option<Instant> {
        let now = Instant::now();
        // A slow upload of one large message is not silence.
        if received != self.received {
            self.received = received;
            self.last_heard = now;
        }
        let silent = now.saturating_duration_since(self.last_heard);
        if silent >= self.limits.idle_timeout {
            debug!(silent_ms = silent.as_millis() as u64, "peer stopped answering");
            queue.end(End::close(close::GOING_AWAY, "idle timeout"));
            return None;
        }
        if silent >= self.limits.ping_interval {
            queue.ping();
            Some(now + self.limits.ping_interval.min(self.limits.idle_timeout - silent))
        } else {
            Some(self.last_heard + self.limits.ping_interval)
        }
    }
}

/// A reader's meter: its socket's share of the memory budget, enforced as it grows; and what it
/// corked, released before it waits for the stream.
struct Budgeted<'a> {
    queue: &'a SendQueue,
    hub: &'a Hub,
    cork: &'a Cork,
}

impl Meter for Budgeted<'_> {
    fn grow(&self, bytes: usize) -> bool {
        if !self.queue.grow(bytes) {
            return false;
        }
        if self.hub.ledger.over() {
            self.hub.enforce_budget();
        }
        !self.queue.is_ended()
    }

    fn shrink(&self, bytes: usize) {
        self.queue.shrink(bytes);
    }

    fn waiting(&self) {
        self.cork.release();
    }
}

/// Writes this socket's queue, control frames and finally its close frame.
pub(crate) async fn write_side<W: AsyncWrite + Unpin>(io: &mut W, queue: &SendQueue) -> std::io::Result<()> {
    loop {
        let action = match queue.try_next() {
            Some(action) => action,
            None => {
                // Flush only when the queue runs dry: TLS records then carry several frames.
                io.flush().await?;
                queue.next().await
            }
        };
        match action {
            Action::Frame(frame) => {
                // Frames queued behind this one go out in the same write.
                let mut batch = Vec::new();
                queue.take_more(&mut batch, MAX_BATCH_FRAMES, MAX_BATCH_BYTES);
                if batch.is_empty() {
                    codec::write_data_frame(io, frame, |n| queue.wrote(n)).await?;
                } else {
                    batch.insert(0, frame);
                    codec::write_frames(io, &mut batch, |n| queue.wrote(n)).await?;
                }
            }
            Action::Pong(payload) => codec::write_frame(io, codec::OP_PONG, &payload, |_| {}).await?,
            Action::Ping => codec::write_frame(io, codec::OP_PING, &[], |_| {}).await?,
            Action::Close(end) => {
                if let Some((code, reason)) = end.close_frame() {
                    codec::write_frame(io, codec::OP_CLOSE, &codec::close_payload(code, reason), |_| {}).await?;
                }
                io.shutdown().await?;
                return Ok(());
            }
        }
    }
}
