//! One upgraded socket: a reader that forwards the client's frames to the other side and watches
//! for silence, and a writer that drains this socket's queue. Both run inside the connection's
//! task, so a socket costs one task, one small read buffer and its queue.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{FusedFuture, FutureExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::codec::{self, close, FrameReader, Message, Meter, OutFrame};
use super::hub::{Action, End, Forward, Hub, Outbox, QueueLimits, Slot};
use super::Limits;
use crate::protocol::{is_peer_frame, PeerRole};

/// Time the writer gets to finish its frame and send the close frame once the socket ends.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Time the reader gets afterwards to see the client's close frame or end of stream.
pub(super) const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// Most queued frames written in one system call.
const MAX_BATCH_FRAMES: usize = 64;
/// Most queued bytes written in one system call (a larger single frame still goes alone).
const MAX_BATCH_BYTES: usize = 256 << 10;

/// A client connection the relay serves: plain TCP or TLS.
pub(super) trait RelayStream: AsyncRead + AsyncWrite + Unpin + Send + Sized {
    /// Read and write halves for one task. Plain TCP splits without a lock; TLS needs one.
    fn halves(&mut self) -> (impl AsyncRead + Unpin + '_, impl AsyncWrite + Unpin + '_);

    /// The plain socket, for another thread to serve; a TLS stream cannot move (`Err(self)`).
    fn detach(self) -> Result<std::io::Result<std::net::TcpStream>, Self>;
}

impl RelayStream for TcpStream {
    fn halves(&mut self) -> (impl AsyncRead + Unpin + '_, impl AsyncWrite + Unpin + '_) {
        self.split()
    }

    fn detach(self) -> Result<std::io::Result<std::net::TcpStream>, Self> {
        Ok(self.into_std())
    }
}

impl RelayStream for tokio_rustls::server::TlsStream<TcpStream> {
    fn halves(&mut self) -> (impl AsyncRead + Unpin + '_, impl AsyncWrite + Unpin + '_) {
        tokio::io::split(self)
    }

    fn detach(self) -> Result<std::io::Result<std::net::TcpStream>, Self> {
        Err(self)
    }
}

/// Where a socket belongs: its pairing and its place in it.
pub(super) struct Membership {
    pub hub: Arc<Hub>,
    pub code: u128,
    pub role: PeerRole,
    pub conn: u64,
}

impl Membership {
    /// A send queue for this socket, within the limits and counted in the relay's ledger.
    pub(super) fn outbox(&self, limits: &Limits) -> Arc<Outbox> {
        let queue = QueueLimits { frames: limits.send_queue_frames, bytes: limits.send_queue_bytes };
        Arc::new(Outbox::new(queue, Arc::clone(&self.hub.ledger)))
    }

    /// Takes this socket's place in its pairing; the peer's frames go to `outbox`.
    pub(super) fn join(&self, outbox: &Arc<Outbox>) -> Arc<Slot> {
        let slot = self.hub.join(self.code, self.role, self.conn, outbox);
        self.hub.metrics().socket_joined(self.role);
        slot
    }

    /// Gives the place back; the peer hears `left`.
    pub(super) fn leave(&self, slot: &Arc<Slot>) {
        self.hub.leave(self.code, slot, self.role, self.conn);
        self.hub.metrics().socket_left(self.role);
    }
}

/// Runs an upgraded socket until it ends, then closes it within bounded time.
pub(super) async fn serve<S: RelayStream>(
    mut stream: S,
    leftover: Vec<u8>,
    member: Membership,
    limits: &Limits,
    cancel: &CancellationToken,
) {
    let outbox = member.outbox(limits);
    let (mut read_half, mut write_half) = stream.halves();
    let frames = FrameReader::new(limits.max_frame_len, &leftover);
    drop(leftover);
    let slot = member.join(&outbox);
    debug!("joined");

    let to_peer = ToPeer { slot: &slot, member: &member, own: &outbox, stall_timeout: limits.stall_timeout };
    let reader = read_side(&mut read_half, frames, &member, &outbox, limits, to_peer).fuse();
    let writer = write_side(&mut write_half, &outbox).fuse();
    tokio::pin!(reader, writer);
    tokio::select! {
        () = &mut reader => {}
        result = &mut writer => {
            if let Err(err) = result {
                debug!(%err, "write failed");
            }
        }
        () = outbox.ending() => {}
        () = cancel.cancelled() => outbox.end(End::Close { code: close::GOING_AWAY, reason: "relay shutting down" }),
    }
    // Leave first, so the other side hears `left` at once even if this client is slow to close.
    member.leave(&slot);
    outbox.end(End::Abort);
    debug!(end = ?outbox.ended(), "left");
    wind_down(&mut writer, &mut reader).await;
}

/// After a socket left its pairing: the writer sends the close frame while the reader, which has
/// dropped its buffers, waits for the client's close or end of stream — each within bounded time.
pub(super) async fn wind_down<W, R>(writer: &mut W, reader: &mut R)
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

/// Where a socket's data frames go.
pub(super) trait Deliver {
    /// Takes one data frame; waiting here stops the socket from being read.
    async fn deliver(&mut self, frame: OutFrame);
}

/// The other side of the pairing.
struct ToPeer<'a> {
    slot: &'a Slot,
    member: &'a Membership,
    own: &'a Outbox,
    stall_timeout: Duration,
}

impl Deliver for ToPeer<'_> {
    async fn deliver(&mut self, frame: OutFrame) {
        forward(self.slot, self.member, self.own, frame, self.stall_timeout).await;
    }
}

/// Reads the client's messages until the socket ends: data goes to `deliver`, pings are
/// answered, silence is met with pings and, past the idle timeout, the end of the socket.
pub(super) async fn read_side<R: AsyncRead + Unpin>(
    io: &mut R,
    mut frames: FrameReader,
    member: &Membership,
    outbox: &Outbox,
    limits: &Limits,
    mut deliver: impl Deliver,
) {
    let mut silence = Silence { last_heard: Instant::now(), received: frames.received(), limits };
    let wake = tokio::time::sleep(limits.ping_interval);
    let ending = outbox.ending();
    tokio::pin!(wake, ending);
    let meter = Budgeted { outbox, hub: &member.hub };
    loop {
        let message = tokio::select! {
            message = frames.read_message(io, &meter) => message,
            () = &mut ending => {
                frames.discard(io, &meter).await;
                return;
            }
            () = &mut wake => {
                match silence.check(frames.received(), outbox) {
                    Some(next) => wake.as_mut().reset(next),
                    None => return,
                }
                continue;
            }
        };
        silence.last_heard = Instant::now();
        match message {
            Ok(Some(message)) => {
                if take_message(message, outbox, &mut deliver).await.is_break() {
                    return;
                }
            }
            Ok(None) => {
                outbox.end(End::Abort);
                return;
            }
            Err(err) => {
                debug!(%err, "closing the socket");
                match err.close() {
                    Some((code, reason)) => {
                        outbox.end(End::Close { code, reason });
                        // Keep reading (and dropping) so the close frame is not lost to a reset
                        // of a connection with unread data; the caller bounds this in time.
                        frames.discard(io, &meter).await;
                    }
                    None => outbox.end(End::Abort),
                }
                return;
            }
        }
    }
}

/// Acts on one message from the client; `Break` once it closed the socket.
async fn take_message(message: Message, outbox: &Outbox, deliver: &mut impl Deliver) -> ControlFlow<()> {
    match message {
        Message::Text(text) => {
            if is_peer_frame(&text) {
                debug!("dropped a client frame posing as a relay notice");
            } else {
                deliver.deliver(OutFrame::text(text)).await;
            }
        }
        Message::Binary(payload) => deliver.deliver(OutFrame::binary(payload)).await,
        Message::Ping(payload) => outbox.pong(payload),
        Message::Pong => {}
        Message::Close(code) => {
            outbox.end(End::Echo(code));
            return ControlFlow::Break(());
        }
    }
    ControlFlow::Continue(())
}

/// How long a socket has been silent, checked whenever its ping timer fires.
struct Silence<'a> {
    last_heard: Instant,
    /// Bytes the reader had received at the last check.
    received: u64,
    limits: &'a Limits,
}

impl Silence<'_> {
    /// Pings a socket silent for the ping interval and ends one silent for the idle timeout;
    /// gives the time of the next check, or `None` once the socket is ended.
    fn check(&mut self, received: u64, outbox: &Outbox) -> Option<Instant> {
        let now = Instant::now();
        // A slow upload of one large message is not silence.
        if received != self.received {
            self.received = received;
            self.last_heard = now;
        }
        let silent = now.saturating_duration_since(self.last_heard);
        if silent >= self.limits.idle_timeout {
            debug!(silent_ms = silent.as_millis() as u64, "peer stopped answering");
            outbox.end(End::Close { code: close::GOING_AWAY, reason: "idle timeout" });
            return None;
        }
        if silent >= self.limits.ping_interval {
            outbox.ping();
            Some(now + self.limits.ping_interval.min(self.limits.idle_timeout - silent))
        } else {
            Some(self.last_heard + self.limits.ping_interval)
        }
    }
}

/// A reader's meter: its socket's share of the memory budget, enforced as it grows.
struct Budgeted<'a> {
    outbox: &'a Outbox,
    hub: &'a Hub,
}

impl Meter for Budgeted<'_> {
    fn grow(&self, bytes: usize) -> bool {
        if !self.outbox.grow(bytes) {
            return false;
        }
        if self.hub.ledger.over() {
            self.hub.enforce_budget();
        }
        self.outbox.ended().is_none()
    }

    fn shrink(&self, bytes: usize) {
        self.outbox.shrink(bytes);
    }
}

/// Hands a frame to the other side. While its queue is full this socket is not read, so the
/// sender slows to the receiver's pace, and the waiting frame counts against the memory budget as
/// this socket's; a receiver that writes nothing at all for `stall_timeout` is closed with 1013
/// and its queue freed.
pub(super) async fn forward(
    slot: &Slot,
    member: &Membership,
    own: &Outbox,
    mut frame: OutFrame,
    stall_timeout: Duration,
) {
    let len = frame.payload.len();
    let mut waiting = false;
    loop {
        let peer = match member.hub.forward(slot, member.role, member.conn, frame) {
            Forward::Done => break,
            Forward::Full(back, peer) => {
                frame = back;
                peer
            }
        };
        if !waiting {
            member.hub.metrics().queue_full();
            if !own.grow(len) {
                // This socket is ending: the frame goes with it.
                return;
            }
            waiting = true;
            member.hub.enforce_budget();
        }
        let reading = tokio::select! {
            reading = peer.room_or_stall(len, stall_timeout) => reading,
            () = own.ending() => return,
        };
        if !reading {
            debug!("the other side stopped reading; closed it");
            break;
        }
    }
    if waiting {
        own.shrink(len);
    }
    if member.hub.ledger.over() {
        member.hub.enforce_budget();
    }
}

/// Writes this socket's queue, control frames and finally its close frame.
pub(super) async fn write_side<W: AsyncWrite + Unpin>(io: &mut W, outbox: &Outbox) -> std::io::Result<()> {
    loop {
        let action = match outbox.try_next() {
            Some(action) => action,
            None => {
                // Flush only when the queue runs dry: TLS records then carry several frames.
                io.flush().await?;
                outbox.next().await
            }
        };
        match action {
            Action::Frame(frame) => {
                // Frames queued behind this one go out in the same write.
                let mut batch = Vec::new();
                outbox.take_more(&mut batch, MAX_BATCH_FRAMES, MAX_BATCH_BYTES);
                if batch.is_empty() {
                    codec::write_data_frame(io, frame, |n| outbox.wrote(n)).await?;
                } else {
                    batch.insert(0, frame);
                    codec::write_frames(io, &mut batch, |n| outbox.wrote(n)).await?;
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
