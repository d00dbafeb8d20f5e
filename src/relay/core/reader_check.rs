//! The relay's frame reader held against tungstenite's: the same client bytes, handed over in
//! reads of one size, go to [`FrameReader`] and to a server-side tungstenite socket, and both must
//! accept the same messages (kind, payload, in order) and refuse the same streams (reserved bits,
//! lengths, control frames over 125 bytes or fragmented, continuations out of place, text or close
//! reasons that are not UTF-8, messages over the limit). Run by the `frame_reader` fuzz target and
//! by a unit test over its seeds.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket, WebSocketConfig};
use tokio_tungstenite::tungstenite::{error::ProtocolError, Error as WsError, Message as WsMessage};

use super::reader::{Event, FrameReader, Meter, ReadError, PART_LEN};

/// The message limit both readers get: small, so the fuzzer reaches it.
pub const MAX_MESSAGE_LEN: usize = 1024;

/// One whole message a reader accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    Text(Vec<u8>),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong,
    Close(Option<u16>),
}

/// How a reader stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The bytes ran out (between messages or inside one).
    Ended,
    /// After the client's close frame.
    Closed,
    /// A frame or message over the limit (1009).
    TooBig,
    /// A protocol violation (1002).
    Protocol,
    /// Text or a close reason that is not UTF-8 (1007).
    Utf8,
}

/// What one reader made of the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub messages: Vec<Accepted>,
    pub stop: Stop,
}

/// Reads `data` with both readers, `read_size` bytes at a time; the relay's verdict when they
/// agree, else what differs.
pub async fn compare(data: &[u8], read_size: usize) -> Result<Verdict, String> {
    let relay = relay_verdict(data, read_size.max(1)).await?;
    let reference = reference_verdict(data, read_size.max(1));
    if agree(&relay, &reference) {
        Ok(relay)
    } else {
        Err(format!("the relay read {relay:?}, tungstenite {reference:?}"))
    }
}

/// Where the two may differ without either being wrong.
fn agree(relay: &Verdict, reference: &Verdict) -> bool {
    // tungstenite answers a close code it does not allow with a close of its own, 1002
    // "Protocol violation", where the relay refuses the frame; it also does not allow 1014,
    // which the relay does (IANA's "Bad Gateway").
    if let Some(Accepted::Close(Some(1002))) = reference.messages.last() {
        let before = &reference.messages[..reference.messages.len() - 1];
        if relay.messages.as_slice() == before && relay.stop == Stop::Protocol {
            return true;
        }
        if relay.messages.len() == reference.messages.len()
            && relay.messages[..before.len()] == *before
            && matches!(relay.messages.last(), Some(Accepted::Close(Some(1002 | 1014))))
        {
            return true;
        }
    }
    if relay.messages != reference.messages {
        return false;
    }
    match (relay.stop, reference.stop) {
        (a, b) if a == b => true,
        // The relay refuses a frame on its header, before its payload is there; tungstenite reads
        // the whole frame first, so a cut-off bad frame is only the end of the bytes to it.
        (Stop::TooBig | Stop::Protocol | Stop::Utf8, Stop::Ended) => true,
        // tungstenite checks the length first; the relay checks the framing (reserved bits, mask,
        // opcode, continuation) first.
        (Stop::Protocol, Stop::TooBig) => true,
        // A close frame with a code no one may send and a reason that is not UTF-8 is wrong
        // twice: the relay names the code, tungstenite the reason.
        (Stop::Protocol, Stop::Utf8) => true,
        _ => false,
    }
}

/// Hands out `data` `size` bytes per read.
struct Chunked<'a> {
    data: &'a [u8],
    size: usize,
}

impl Chunked<'_> {
    fn next_bytes(&mut self, room: usize) -> &[u8] {
        let n = self.size.min(room).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let room = buf.remaining();
        let bytes = self.next_bytes(room);
        buf.put_slice(bytes);
        Poll::Ready(Ok(()))
    }
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let bytes = self.next_bytes(buf.len());
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len())
    }
}

impl Write for Chunked<'_> {
    /// What the server answers (pongs, its close) goes nowhere.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Counts nothing: the check is about framing, not the budget.
struct Unbudgeted;

impl Meter for Unbudgeted {
    fn grow(&self, _: usize) -> bool {
        true
    }

    fn shrink(&self, _: usize) {}
}

async fn relay_verdict(data: &[u8], read_size: usize) -> Result<Verdict, String> {
    let mut io = Chunked { data, size: read_size };
    let mut reader = FrameReader::new(MAX_MESSAGE_LEN, &[]);
    let mut messages = Vec::new();
    // The message being put together: (text, bytes).
    let mut open: Option<(bool, Vec<u8>)> = None;
    let stop = loop {
        let event = match reader.read_event(&mut io, &Unbudgeted).await {
            Ok(Some(event)) => event,
            Ok(None) => break Stop::Ended,
            Err(ReadError::Io(_)) => break Stop::Ended,
            Err(ReadError::TooBig) => break Stop::TooBig,
            Err(ReadError::Protocol(_)) => break Stop::Protocol,
            Err(ReadError::InvalidUtf8) => break Stop::Utf8,
            Err(ReadError::Ended) => return Err("an unbudgeted reader ended".into()),
        };
        match event {
            Event::Data(part) => {
                if part.bytes.len() > PART_LEN {
                    return Err(format!("a part of {} bytes", part.bytes.len()));
                }
                match (&mut open, part.first) {
                    (None, true) => open = Some((part.text, part.bytes)),
                    (Some((text, bytes)), false) if *text == part.text => bytes.extend_from_slice(&part.bytes),
                    _ => return Err(format!("a part out of order (first: {})", part.first)),
                }
                if part.fin {
                    let Some((text, bytes)) = open.take() else { return Err("no message to end".into()) };
                    if text && std::str::from_utf8(&bytes).is_err() {
                        return Err("a text message that is not UTF-8 was accepted".into());
                    }
                    messages.push(if text { Accepted::Text(bytes) } else { Accepted::Binary(bytes) });
                }
            }
            Event::Ping(payload) => messages.push(Accepted::Ping(payload)),
            Event::Pong => messages.push(Accepted::Pong),
            Event::Close(code) => {
                messages.push(Accepted::Close(code));
                break Stop::Closed;
            }
        }
    };
    Ok(Verdict { messages, stop })
}

fn reference_verdict(data: &[u8], read_size: usize) -> Verdict {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_LEN))
        .max_frame_size(Some(MAX_MESSAGE_LEN))
        .read_buffer_size(read_size.max(16));
    let mut socket = WebSocket::from_raw_socket(Chunked { data, size: read_size }, Role::Server, Some(config));
    let mut messages = Vec::new();
    let stop = loop {
        match socket.read() {
            Ok(WsMessage::Text(text)) => messages.push(Accepted::Text(text.as_bytes().to_vec())),
            Ok(WsMessage::Binary(bytes)) => messages.push(Accepted::Binary(bytes.to_vec())),
            Ok(WsMessage::Ping(payload)) => messages.push(Accepted::Ping(payload.to_vec())),
            Ok(WsMessage::Pong(_)) => messages.push(Accepted::Pong),
            Ok(WsMessage::Close(frame)) => {
                messages.push(Accepted::Close(frame.map(|frame| u16::from(frame.code))));
                break Stop::Closed;
            }
            Ok(WsMessage::Frame(_)) => {}
            Err(WsError::Capacity(_)) => break Stop::TooBig,
            Err(WsError::Utf8(_)) => break Stop::Utf8,
            Err(WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake)) => break Stop::Ended,
            Err(WsError::Protocol(_)) => break Stop::Protocol,
            Err(_) => break Stop::Ended,
        }
    };
    Verdict { messages, stop }
}
