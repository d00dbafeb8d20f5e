//! The seal between a socket and a session, for both ends: [`Socket`] wraps a client's WebSocket
//! (sealed once its hello completes, plain until then or for protocol 2), and on the agent
//! [`seal_writer`] seals what a session sends while [`Inbound`] opens what its peer sends. The
//! session and every client above it see plain text and audio frames either way. Both ends keep
//! the [`ticks`](super::ticks): they send a tick when quiet and consume the peer's, and a client
//! whose agent went quiet for too long ends the session itself.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_util::{Sink, Stream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tracing::debug;

use super::handshake::Keys;
use super::ticks::{is_tick, Ticks, TICK};
use super::transport::{Opener, Plain, Sealer, KIND_AUDIO, KIND_JSON};
use super::Broken;
use crate::protocol::{self, ErrorCode, Frame, AUDIO_PREFIX, SEND_QUEUE_FRAMES};

/// A session frame as the binary frames that carry it sealed; a binary frame must be audio.
pub fn seal_frame(sealer: &mut Sealer, frame: &Frame) -> Result<Vec<Frame>, Broken> {
    let messages = match frame {
        Frame::Text(text) => sealer.seal(KIND_JSON, text.as_bytes())?,
        Frame::Binary(data) => match data.split_first() {
            Some((&AUDIO_PREFIX, audio)) => sealer.seal(KIND_AUDIO, audio)?,
            _ => return Err(Broken("only audio travels in binary frames")),
        },
    };
    Ok(messages.into_iter().map(Frame::binary).collect())
}

/// [`seal_frame`] for a socket message: control frames (ping, pong, close) are the WebSocket's own
/// and pass as they are.
fn seal_message(sealer: &mut Sealer, message: Message) -> Result<Vec<Message>, Broken> {
    match Frame::from_message(message) {
        Ok(frame) => Ok(seal_frame(sealer, &frame)?.into_iter().map(Message::from).collect()),
        Err(Message::Frame(_)) => Err(Broken("raw frames cannot be sealed")),
        Err(control) => Ok(vec![control]),
    }
}

/// An opened frame as the session sees it: JSON as text, audio as `0x01` + audio.
fn as_frame(plain: Plain) -> Frame {
    match plain {
        Plain::Json(text) => Frame::text(text),
        Plain::Audio(audio) => {
            let mut data = Vec::with_capacity(audio.len() + 1);
            data.push(AUDIO_PREFIX);
            data.extend_from_slice(&audio);
            Frame::binary(data)
        }
    }
}

/// The close frame that ends a broken sealed session.
pub fn broken_close() -> Message {
    ending_close(ErrorCode::SealedSessionBroken)
}

/// The close frame that ends a sealed session whose peer sent nothing sealed for
/// [`STALL_AFTER`](super::ticks::STALL_AFTER).
pub fn stalled_close() -> Message {
    ending_close(ErrorCode::SealedSessionStalled)
}

fn ending_close(code: ErrorCode) -> Message {
    Message::Close(Some(CloseFrame { code: CloseCode::from(protocol::close::POLICY), reason: code.as_str().into() }))
}

/// A presence notice of the relay's own, which the relay may send to a client in any session
/// (docs/PROTOCOL.md, "Relay"): a text frame starting with U+0001. `Err` for a frame that starts
/// like a notice but does not read as one.
pub fn relay_notice(text: &str) -> Option<Result<protocol::Presence, ()>> {
    protocol::relay::is_notice(text.as_bytes()).then(|| protocol::Presence::parse(text).ok_or(()))
}

/// Whether a frame is a client's `hello` (or a control frame), which a socket whose sealed
/// session ended may still send: it starts the next session.
fn is_hello(message: &Message) -> bool {
    match message {
        Message::Text(text) => {
            matches!(serde_json::from_str::<protocol::ClientMessage>(text), Ok(protocol::ClientMessage::Hello(_)))
        }
        Message::Binary(_) | Message::Frame(_) => false,
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) => true,
    }
}

/// Whether an unsealed frame is the `challenge` that opens a new session.
fn is_challenge(text: &str) -> bool {
    matches!(serde_json::from_str::<protocol::AgentMessage>(text), Ok(protocol::AgentMessage::Challenge { .. }))
}

/// What the agent reads from one session's peer: frames as they come (protocol 2), or opened.
pub enum Inbound {
    Plain,
    Sealed(Opener),
}

impl Inbound {
    pub fn is_sealed(&self) -> bool {
        matches!(self, Inbound::Sealed(_))
    }

    /// One frame from the peer as the session should see it; `None` after a part of a larger
    /// frame, and for a tick, which the seal consumes. On a sealed session any frame that is not a
    /// sealed message breaks it.
    pub fn open(&mut self, frame: Frame) -> Result<Option<Frame>, Broken> {
        let Inbound::Sealed(opener) = self else { return Ok(Some(frame)) };
        match frame {
            Frame::Binary(data) => Ok(opener.open(&data)?.filter(|plain| !is_tick_plain(plain)).map(as_frame)),
            Frame::Text(_) => Err(Broken("an unsealed frame in a sealed session")),
        }
    }
}

fn is_tick_plain(plain: &Plain) -> bool {
    matches!(plain, Plain::Json(text) if is_tick(text))
}

/// Seals what a session sends: the returned queue takes plain frames, a task seals them in order
/// into `out`, with a tick whenever the session sent nothing for
/// [`TICK_INTERVAL`](super::ticks::TICK_INTERVAL). It ends when either side is gone, or (logged)
/// if a frame cannot be sealed. A socket that goes away ends it at once, not at the next frame, so
/// the returned queue closes with the socket, as a plain session's does: whoever holds a clone of
/// it (a terminal waiting for its acknowledgements) sees the session gone.
pub fn seal_writer(mut sealer: Sealer, out: mpsc::Sender<Frame>) -> mpsc::Sender<Frame> {
    let (tx, mut rx) = mpsc::channel::<Frame>(SEND_QUEUE_FRAMES);
    tokio::spawn(async move {
        let mut ticks = Ticks::new(Instant::now());
        loop {
            let frame = tokio::select! {
                frame = rx.recv() => match frame {
                    Some(frame) => frame,
                    None => return,
                },
                () = out.closed() => return,
                _ = tokio::time::sleep_until(ticks.next_tick()) => Frame::text(TICK),
            };
            let sealed = match seal_frame(&mut sealer, &frame) {
                Ok(sealed) => sealed,
                Err(err) => {
                    debug!(%err, "sealed writer stops");
                    return;
                }
            };
            for message in sealed {
                if out.send(message).await.is_err() {
                    return;
                }
            }
            ticks.sent(Instant::now());
        }
    });
    tx
}

/// A client's sealed channel: its keys, its ticks, and the one timer that wakes its reader for
/// whichever comes first, the next tick or the stall.
struct Sealed {
    sealer: Sealer,
    opener: Opener,
    ticks: Ticks,
    timer: Pin<Box<Sleep>>,
}

impl Sealed {
    fn new(keys: Keys) -> Self {
        let ticks = Ticks::new(Instant::now());
        let timer = Box::pin(tokio::time::sleep_until(ticks.next_tick()));
        Sealed { sealer: keys.sealer, opener: keys.opener, ticks, timer }
    }

    fn rearm(&mut self) {
        let at = self.ticks.next_tick().min(self.ticks.stall_at());
        self.timer.as_mut().reset(at);
    }

    fn sent(&mut self) {
        self.ticks.sent(Instant::now());
        self.rearm();
    }

    fn heard(&mut self) {
        self.ticks.heard(Instant::now());
        self.rearm();
    }
}

/// What a client's timer asks of its socket.
enum Due {
    Nothing,
    Tick,
    Stalled,
}

/// A client's WebSocket: plain until [`Socket::seal`], then every text and audio frame is sealed
/// on the way out and opened on the way in. A sealed socket that receives anything it cannot open
/// (relay notices aside) answers with the close frame `sealed-session-broken`, yields that close
/// frame to its reader and ends. While it is read, a sealed socket sends the agent a tick when it
/// sent nothing for a while, consumes the agent's ticks, and ends with `sealed-session-stalled`
/// (the same way) when nothing sealed came for [`STALL_AFTER`](super::ticks::STALL_AFTER).
pub struct Socket<S> {
    inner: S,
    seal: Option<Sealed>,
    outgoing: VecDeque<Message>,
    broken: bool,
    /// The agent of a sealed session left the relay: only relay notices and the next session's
    /// `challenge` may come unsealed until then.
    ended: bool,
    /// The socket carried a sealed session: unsealed, it sends nothing but a new hello.
    was_sealed: bool,
}

impl<S> Socket<S> {
    /// A socket that is not (yet) sealed.
    pub fn plain(inner: S) -> Self {
        Socket { inner, seal: None, outgoing: VecDeque::new(), broken: false, ended: false, was_sealed: false }
    }

    /// Seals every frame from now on with the keys of a completed handshake.
    pub fn seal(&mut self, keys: Keys) {
        self.seal = Some(Sealed::new(keys));
        self.ended = false;
        self.was_sealed = true;
    }

    pub fn is_sealed(&self) -> bool {
        self.seal.is_some()
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S> Socket<S>
where
    S: Sink<Message, Error = WsError> + Unpin,
{
    /// Sends a close frame (none: a bare close) and flushes it.
    pub async fn close(&mut self, frame: Option<CloseFrame>) -> Result<(), WsError> {
        futures_util::SinkExt::send(self, Message::Close(frame)).await
    }

    /// Writes what is queued into the inner socket.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        while let Some(message) = self.outgoing.pop_front() {
            match Pin::new(&mut self.inner).poll_ready(cx) {
                Poll::Ready(Ok(())) => Pin::new(&mut self.inner).start_send(message)?,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => {
                    self.outgoing.push_front(message);
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Ends a broken session: the close goes out as soon as the socket takes it, the reader gets
    /// the same close frame, and nothing more is read or sealed.
    fn break_session(&mut self, cx: &mut Context<'_>, why: Broken) -> Poll<Option<Result<Message, WsError>>> {
        debug!(%why, "sealed session broken");
        self.end_session(cx, broken_close())
    }

    /// Ends the session with `close`, sent to the agent and yielded to the reader.
    fn end_session(&mut self, cx: &mut Context<'_>, close: Message) -> Poll<Option<Result<Message, WsError>>> {
        self.broken = true;
        self.seal = None;
        self.outgoing.clear();
        self.outgoing.push_back(close.clone());
        self.push_out(cx);
        Poll::Ready(Some(Ok(close)))
    }

    /// Writes what is queued and flushes it, as far as the socket takes it now; the rest goes with
    /// the next write or read.
    fn push_out(&mut self, cx: &mut Context<'_>) {
        if let Poll::Ready(Ok(())) = self.poll_drain(cx) {
            let _ = Pin::new(&mut self.inner).poll_flush(cx);
        }
    }

    /// What the sealed channel's timer asks for now, if it fired: a tick to send, or the end.
    fn due(&mut self, cx: &mut Context<'_>) -> Due {
        let Some(sealed) = self.seal.as_mut() else { return Due::Nothing };
        if sealed.timer.as_mut().poll(cx).is_pending() {
            return Due::Nothing;
        }
        let now = Instant::now();
        if sealed.ticks.stalled(now) {
            return Due::Stalled;
        }
        if now < sealed.ticks.next_tick() {
            sealed.rearm();
            return Due::Nothing;
        }
        Due::Tick
    }

    /// Seals a tick and sends it.
    fn tick(&mut self, cx: &mut Context<'_>) -> Result<(), Broken> {
        let Some(sealed) = self.seal.as_mut() else { return Ok(()) };
        let message = sealed.sealer.seal(KIND_JSON, TICK.as_bytes())?;
        sealed.sent();
        self.outgoing.extend(message.into_iter().map(Message::binary));
        self.push_out(cx);
        Ok(())
    }
}

impl<S> Stream for Socket<S>
where
    S: Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Unpin,
{
    type Item = Result<Message, WsError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.broken {
                return Poll::Ready(None);
            }
            match this.due(cx) {
                Due::Nothing => {}
                Due::Tick => {
                    if let Err(why) = this.tick(cx) {
                        return this.break_session(cx, why);
                    }
                    continue;
                }
                Due::Stalled => {
                    debug!("sealed session stalled: nothing sealed from the agent in time");
                    return this.end_session(cx, stalled_close());
                }
            }
            let frame = ready!(Pin::new(&mut this.inner).poll_next(cx));
            if let Some(Ok(Message::Text(text))) = &frame {
                match relay_notice(text) {
                    Some(Ok(notice)) => {
                        if notice.peer == protocol::PeerRole::Agent && notice.state == protocol::PeerState::Left {
                            // The sealed session is over; a new one starts with its own hello.
                            this.ended |= this.seal.take().is_some();
                        }
                        return Poll::Ready(frame);
                    }
                    Some(Err(())) if this.seal.is_some() || this.ended => {
                        return this.break_session(cx, Broken("an unreadable relay notice"))
                    }
                    _ => {}
                }
                if this.ended && is_challenge(text) {
                    this.ended = false;
                    return Poll::Ready(frame);
                }
            }
            if this.ended && matches!(frame, Some(Ok(Message::Text(_) | Message::Binary(_) | Message::Frame(_)))) {
                return this.break_session(cx, Broken("an unsealed frame after a sealed session"));
            }
            let Some(sealed) = this.seal.as_mut() else { return Poll::Ready(frame) };
            match frame {
                Some(Ok(Message::Binary(data))) => match sealed.opener.open(&data) {
                    Ok(opened) => {
                        sealed.heard();
                        match opened {
                            Some(plain) if !is_tick_plain(&plain) => {
                                return Poll::Ready(Some(Ok(as_frame(plain).into())))
                            }
                            _ => continue,
                        }
                    }
                    Err(why) => return this.break_session(cx, why),
                },
                Some(Ok(Message::Text(_) | Message::Frame(_))) => {
                    return this.break_session(cx, Broken("an unsealed frame in a sealed session"))
                }
                other => return Poll::Ready(other),
            }
        }
    }
}

impl<S> Sink<Message> for Socket<S>
where
    S: Sink<Message, Error = WsError> + Unpin,
{
    type Error = WsError;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        self.poll_drain(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: Message) -> Result<(), WsError> {
        let this = &mut *self;
        if this.broken {
            return Err(WsError::AlreadyClosed);
        }
        match this.seal.as_mut() {
            None if this.was_sealed && !is_hello(&item) => return Err(WsError::AlreadyClosed),
            None => this.outgoing.push_back(item),
            Some(sealed) => {
                let messages = seal_message(&mut sealed.sealer, item)
                    .map_err(|err| WsError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, err)))?;
                if messages.iter().any(Message::is_binary) {
                    sealed.sent();
                }
                this.outgoing.extend(messages);
            }
        }
        Ok(())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::{SinkExt, StreamExt};
    use tokio::io::DuplexStream;
    use tokio_tungstenite::WebSocketStream;

    use super::*;
    use crate::seal::handshake::{Initiator, Responder};
    use crate::seal::ticks::{STALL_AFTER, TICK_INTERVAL};
    use crate::secret::Secret;

    type Ws = WebSocketStream<DuplexStream>;

    /// A client socket sealed with a completed handshake, the agent's end and the agent's keys.
    async fn sealed_pair() -> (Socket<Ws>, Ws, Keys) {
        let (near, far) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { tokio_tungstenite::accept_async(far).await.unwrap() });
        let (client, _) = tokio_tungstenite::client_async("ws://agent.test/", near).await.unwrap();
        let agent = server.await.unwrap();
        let token = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        let challenge = "0123456789abcdef0123456789abcdef";
        let (initiator, one) = Initiator::start(&token, challenge).unwrap();
        let (agent_keys, two) = Responder::accept(&token, challenge, &one).unwrap().finish(b"{}").unwrap();
        let (client_keys, _) = initiator.finish(&two).unwrap();
        let mut socket = Socket::plain(client);
        socket.seal(client_keys);
        (socket, agent, agent_keys)
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_socket_ticks_when_quiet_swallows_the_agents_ticks_and_ends_a_stalled_session() {
        let (mut client, mut agent, mut keys) = sealed_pair().await;
        let started = Instant::now();
        let reader = tokio::spawn(async move { client.next().await });
        let mut ticks_at = Vec::new();
        let close = loop {
            match agent.next().await.unwrap().unwrap() {
                Message::Binary(data) => {
                    assert_eq!(keys.opener.open(&data).unwrap(), Some(Plain::Json(TICK.into())));
                    ticks_at.push(started.elapsed());
                    if ticks_at.len() == 1 {
                        // The agent's own tick: heard, and never handed to the reader.
                        let tick = keys.sealer.seal(KIND_JSON, TICK.as_bytes()).unwrap().remove(0);
                        agent.send(Message::binary(tick)).await.unwrap();
                    }
                }
                Message::Close(frame) => break frame,
                other => panic!("{other:?}"),
            }
        };
        let secs = |n| Duration::from_secs(n);
        assert_eq!(ticks_at, [TICK_INTERVAL, secs(20), secs(30)], "a tick every interval while quiet");
        assert_eq!(started.elapsed(), TICK_INTERVAL + STALL_AFTER, "stalled 25 s after the agent's last tick");
        let close = close.unwrap();
        assert_eq!((u16::from(close.code), close.reason.as_str()), (1008, "sealed-session-stalled"));
        let Some(Ok(Message::Close(Some(yielded)))) = reader.await.unwrap() else { panic!("the reader saw no end") };
        assert_eq!(yielded.reason.as_str(), "sealed-session-stalled");
    }

    #[tokio::test(start_paused = true)]
    async fn what_the_client_sends_puts_its_tick_off() {
        let (client, mut agent, mut keys) = sealed_pair().await;
        let started = Instant::now();
        let (mut sink, mut stream) = client.split();
        let reader = tokio::spawn(async move { stream.next().await });
        tokio::time::sleep(Duration::from_secs(6)).await;
        sink.send(Message::text(r#"{"type":"status"}"#)).await.unwrap();
        let Some(Ok(Message::Binary(data))) = agent.next().await else { panic!() };
        assert_eq!(keys.opener.open(&data).unwrap(), Some(Plain::Json(r#"{"type":"status"}"#.into())));
        let Some(Ok(Message::Binary(data))) = agent.next().await else { panic!() };
        assert_eq!(keys.opener.open(&data).unwrap(), Some(Plain::Json(TICK.into())));
        assert_eq!(started.elapsed(), Duration::from_secs(6) + TICK_INTERVAL);
        reader.abort();
    }
}
