//! A service's socket (hosted voice at `/live`), run by the core as it runs its own: the reader
//! (limits, pings, silence, the memory budget), the writer and the wind-down are the core's, and
//! the service gets a [`ServiceLine`]: whole messages in, messages out, an end. The socket holds
//! a phone's place in nothing: it only knows its code, and whether an agent holds it here.

use std::future::Future;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{FusedFuture, FutureExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::codec::{close, OutFrame, OP_TEXT};
use super::queue::{Cork, End, Push, SendQueue};
use super::reader::{FrameReader, Part};
use super::socket::{read_side, wind_down, write_side, Deliver, Membership};
use super::{RelayStream, SocketLimits};
use crate::protocol::{Bytes, Frame, Utf8Bytes};

/// Whole messages from a service's client waiting for the service; while they wait, the client
/// is not read.
const LINE_QUEUE: usize = 64;

/// A service's end of one socket the core runs: its client's messages, whole, and a way to send
/// it messages and end it.
pub struct ServiceLine {
    queue: Arc<SendQueue>,
    incoming: mpsc::Receiver<Frame>,
    member: Membership,
    client: IpAddr,
    stall_timeout: Duration,
    shutdown: CancellationToken,
}

impl ServiceLine {
    /// The client's next message; `None` once the socket ends (the client left or was closed).
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Option<Frame> {
        tokio::select! {
            biased;
            () = self.queue.ending() => None,
            frame = self.incoming.recv() => frame,
        }
    }

    /// Queues a message for the client. While its queue is full this waits; a client that reads
    /// nothing for the stall timeout is closed 1013 and the message dropped, as is one sent after
    /// the socket ended.
    pub async fn send(&self, frame: Frame) {
        let mut frame = out_frame(frame);
        loop {
            match self.queue.push(frame) {
                Push::Queued | Push::Corked | Push::Dropped => return,
                Push::Full(back) => frame = back,
            }
            if !self.queue.room_or_stall(frame.len(), self.stall_timeout).await {
                debug!("the client stopped reading; closed it");
                return;
            }
        }
    }

    /// Queues a message for the client unless its queue is full: `false` when it was dropped for
    /// that (a client that is behind loses it rather than stalling the sender).
    pub fn try_send(&self, frame: Frame) -> bool {
        !matches!(self.queue.push(out_frame(frame)), Push::Full(_))
    }

    /// Resolves once every queued message went to the writer, or the socket is ending.
    pub async fn drained(&self) {
        self.queue.drained().await
    }

    /// Ends the socket with this close frame; what is still queued is dropped. The first end
    /// decided wins.
    pub fn close(&self, code: u16, reason: &'static str) {
        self.queue.end(End::close(code, reason));
    }

    /// The relay code the socket named, as the log may name it once hashed.
    pub fn code(&self) -> u128 {
        self.member.code()
    }

    /// Whether an agent holds this code at this relay now: a service that speaks for no pairing
    /// serves only the codes of connected laptops, without taking a place.
    pub fn agent_present(&self) -> bool {
        self.member.agent_present()
    }

    /// The client's address: the TCP peer's, or the one the service's trusted header names.
    pub fn client(&self) -> IpAddr {
        self.client
    }

    /// Cancelled when the relay shuts down; the service then sends its last messages, closes the
    /// socket ([`ServiceLine::close`]) and returns.
    pub fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

fn out_frame(frame: Frame) -> OutFrame {
    match frame {
        Frame::Text(text) => OutFrame { opcode: OP_TEXT, fin: true, tag: None, payload: Vec::from(Bytes::from(text)) },
        Frame::Binary(data) => OutFrame::binary(Vec::from(data)),
    }
}

/// Runs an upgraded service socket: `service` gets its [`ServiceLine`], and the socket is read and
/// written until the service returns; then it is closed within bounded time.
pub(crate) async fn serve<S, F>(
    stream: S,
    leftover: Vec<u8>,
    member: Membership,
    client: IpAddr,
    limits: &SocketLimits,
    shutdown: CancellationToken,
    service: impl FnOnce(ServiceLine) -> F,
) where
    S: RelayStream,
    F: Future<Output = ()>,
{
    // The service's messages go through its queue alone: nobody else writes to this socket.
    let (mut read_half, mut write_half, _) = stream.into_halves();
    let queue = member.queue(limits);
    let hub = Arc::clone(&member.hub);
    let frames = FrameReader::new(limits.max_frame_len, &leftover);
    drop(leftover);
    let writer = write_side(&mut write_half, &queue).fuse();
    tokio::pin!(writer);
    let (to_service, incoming) = mpsc::channel(LINE_QUEUE);
    let line = ServiceLine {
        queue: Arc::clone(&queue),
        incoming,
        member,
        client,
        stall_timeout: limits.stall_timeout,
        shutdown,
    };
    let messages = Messages { to: to_service, own: &queue, message: Vec::new() };
    // The reader hands messages to the service, never to another socket: it corks nothing.
    let cork = Cork::default();
    let reader = read_side(&mut read_half, frames, &hub, &queue, &cork, limits, messages).fuse();
    let served = service(line).fuse();
    tokio::pin!(reader, served);
    loop {
        tokio::select! {
            () = &mut served => break,
            () = &mut reader, if !reader.is_terminated() => {}
            result = &mut writer, if !writer.is_terminated() => {
                if let Err(err) = result {
                    debug!(%err, "write failed");
                }
                queue.end(End::Abort);
            }
        }
    }
    queue.end(End::Abort);
    debug!(end = ?queue.ended(), "left");
    wind_down(&mut writer, &mut reader).await;
}

/// A service socket's parts, put together into whole messages for the service; once the
/// socket's reading stops, the channel closes.
struct Messages<'a> {
    to: mpsc::Sender<Frame>,
    /// The socket's own queue: its end stops a wait for the service.
    own: &'a SendQueue,
    /// The message being put together (bounded by the relay's message limit).
    message: Vec<u8>,
}

impl Deliver for Messages<'_> {
    async fn deliver(&mut self, part: Part) -> ControlFlow<()> {
        if !part.fin {
            self.message.extend_from_slice(&part.bytes);
            return ControlFlow::Continue(());
        }
        let payload = if self.message.is_empty() {
            part.bytes
        } else {
            self.message.extend_from_slice(&part.bytes);
            std::mem::take(&mut self.message)
        };
        let frame = if part.text {
            // The reader checked the text to be UTF-8 as it arrived.
            match Utf8Bytes::try_from(payload) {
                Ok(text) => Frame::Text(text),
                Err(_) => {
                    self.own.end(End::close(close::INVALID_DATA, "text that is not UTF-8"));
                    return ControlFlow::Break(());
                }
            }
        } else {
            Frame::Binary(Bytes::from(payload))
        };
        tokio::select! {
            _ = self.to.send(frame) => ControlFlow::Continue(()),
            () = self.own.ending() => ControlFlow::Break(()),
        }
    }
}
