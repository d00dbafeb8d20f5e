//! Reading a client's WebSocket frames (RFC 6455, server side, no extensions), cut-through: a
//! data message comes out in [`Part`]s of at most [`PART_LEN`] bytes as its bytes arrive, so the
//! relay hands each part on and never holds a whole message. A socket holds one small read
//! buffer and the part being read, and that part is counted against a [`Meter`].

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::codec::{HEADER_ROOM, MAX_CONTROL_LEN, OP_BINARY, OP_CLOSE, OP_CONTINUATION, OP_PING, OP_PONG, OP_TEXT};

/// Bytes of a socket's read buffer, which holds frame headers, control frames and small frames.
pub(crate) const READ_BUFFER_LEN: usize = 2 << 10;
/// Most bytes of a message read into one part before it is handed on.
pub(crate) const PART_LEN: usize = 16 << 10;
/// Longest frame header: 2 bytes, 8 of extended length, 4 of mask.
const MAX_HEADER_LEN: usize = 14;

/// Counts the bytes a reader holds in message buffers against a memory budget, and hears when
/// the reader is about to wait for the stream.
pub(crate) trait Meter {
    /// Counts `bytes` more; false when the socket is ending and must stop reading.
    fn grow(&self, bytes: usize) -> bool;
    /// Counts `bytes` fewer.
    fn shrink(&self, bytes: usize);
    /// The reader has used every byte it read and reads the stream again (it may wait there).
    fn waiting(&self) {}
}

/// No budget at all.
#[cfg(test)]
pub(crate) struct Unmetered;

#[cfg(test)]
impl Meter for Unmetered {
    fn grow(&self, _: usize) -> bool {
        true
    }

    fn shrink(&self, _: usize) {}
}

/// A piece of a data message, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Part {
    /// The message is text (checked to be UTF-8 up to here); otherwise binary.
    pub text: bool,
    /// The first part of its message.
    pub first: bool,
    /// The last part of its message.
    pub fin: bool,
    pub bytes: Vec<u8>,
}

/// What a client sent, as far as it has arrived.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Data(Part),
    Ping(Vec<u8>),
    Pong,
    /// The client's close frame and its status code, if it sent one.
    Close(Option<u16>),
}

/// One whole message, for code that reads messages rather than parts.
#[cfg(test)]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong,
    Close(Option<u16>),
}

/// Why a client's byte stream is no longer a WebSocket the relay will read.
#[derive(Debug)]
pub(crate) enum ReadError {
    Io(io::Error),
    /// A frame or message longer than the limit (close 1009).
    TooBig,
    /// A protocol violation (close 1002).
    Protocol(&'static str),
    /// A text message that is not UTF-8 (close 1007).
    InvalidUtf8,
    /// The socket is ending (the meter refused more): stop reading.
    Ended,
}

impl ReadError {
    /// The close code and reason to answer with; `None` when the connection itself failed.
    pub(crate) fn close(&self) -> Option<(u16, &'static str)> {
        match self {
            ReadError::Io(_) | ReadError::Ended => None,
            ReadError::TooBig => Some((crate::protocol::close::TOO_BIG, "message too big")),
            ReadError::Protocol(why) => Some((super::codec::close::PROTOCOL_ERROR, why)),
            ReadError::InvalidUtf8 => Some((super::codec::close::INVALID_DATA, "text is not UTF-8")),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(err) => write!(f, "read failed: {err}"),
            ReadError::TooBig => f.write_str("message too big"),
            ReadError::Protocol(why) => write!(f, "protocol error: {why}"),
            ReadError::InvalidUtf8 => f.write_str("text message is not UTF-8"),
            ReadError::Ended => f.write_str("socket ending"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Header {
    fin: bool,
    opcode: u8,
    mask: [u8; 4],
    len: usize,
}

/// A data frame whose payload is being read.
struct InFrame {
    header: Header,
    /// Payload bytes read so far (the mask's phase).
    read: usize,
}

/// A data message between its first frame and its last.
struct Open {
    text: bool,
    /// Payload bytes announced so far, against the message limit.
    len: usize,
    /// A part of it was handed out already.
    emitted: bool,
    utf8: Utf8,
}

/// Reads client frames from a byte stream. Every field of progress lives here, so
/// [`FrameReader::read_event`] is cancel-safe: a dropped call loses nothing.
pub(crate) struct FrameReader {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    frame: Option<InFrame>,
    message: Option<Open>,
    /// The part being read.
    part: Vec<u8>,
    /// The message [`FrameReader::read_message`] is putting together.
    whole: Vec<u8>,
    max_message_len: usize,
    /// Bytes read so far: progress on a large message counts as a sign of life.
    received: u64,
    /// Bytes of message buffers counted on the meter.
    metered: usize,
}

impl FrameReader {
    /// A reader for messages up to `max_message_len`, starting with bytes already read past the
    /// HTTP request head.
    pub(crate) fn new(max_message_len: usize, leftover: &[u8]) -> Self {
        let mut buf = vec![0u8; READ_BUFFER_LEN.max(leftover.len())].into_boxed_slice();
        buf[..leftover.len()].copy_from_slice(leftover);
        FrameReader {
            buf,
            start: 0,
            end: leftover.len(),
            frame: None,
            message: None,
            part: Vec::new(),
            whole: Vec::new(),
            max_message_len,
            received: 0,
            metered: 0,
        }
    }

    /// Whether bytes read from the stream wait in the buffer, not yet handed out.
    pub(crate) fn has_buffered(&self) -> bool {
        self.end > self.start
    }

    /// Bytes read from the stream so far, complete messages or not.
    pub(crate) fn received(&self) -> u64 {
        self.received
    }

    /// The next event, or `None` on a clean end of stream between messages. The part being read
    /// is counted on `meter` as it grows and uncounted once it is handed out.
    pub(crate) async fn read_event<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        meter: &impl Meter,
    ) -> Result<Option<Event>, ReadError> {
        let result = self.next_event(io, meter).await;
        self.settle(meter)?;
        result
    }

    /// The next whole message, put together from its parts (bounded by the message limit).
    #[cfg(test)]
    pub(crate) async fn read_message<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        meter: &impl Meter,
    ) -> Result<Option<Message>, ReadError> {
        loop {
            let part = match self.read_event(io, meter).await? {
                None => return Ok(None),
                Some(Event::Data(part)) => part,
                Some(Event::Ping(payload)) => return Ok(Some(Message::Ping(payload))),
                Some(Event::Pong) => return Ok(Some(Message::Pong)),
                Some(Event::Close(code)) => return Ok(Some(Message::Close(code))),
            };
            let bytes = if part.first && part.fin {
                part.bytes
            } else {
                self.whole.extend_from_slice(&part.bytes);
                self.settle(meter)?;
                if !part.fin {
                    continue;
                }
                std::mem::take(&mut self.whole)
            };
            self.settle(meter)?;
            return Ok(Some(if part.text {
                // Checked part by part already.
                Message::Text(String::from_utf8(bytes).map_err(|_| ReadError::InvalidUtf8)?)
            } else {
                Message::Binary(bytes)
            }));
        }
    }

    async fn next_event<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        meter: &impl Meter,
    ) -> Result<Option<Event>, ReadError> {
        loop {
            if self.frame.is_some() {
                if let Some(part) = self.read_payload(io, meter).await? {
                    return Ok(Some(Event::Data(part)));
                }
                continue;
            }
            let Some((header, header_len)) = parse_header(&self.buf[self.start..self.end])? else {
                meter.waiting();
                if !self.fill_buffer(io).await? {
                    return Ok(None);
                }
                continue;
            };
            self.check(&header)?;
            if matches!(header.opcode, OP_CLOSE | OP_PING | OP_PONG) {
                if self.end - self.start < header_len + header.len {
                    // A control frame is read whole into the buffer, which always has room.
                    meter.waiting();
                    if !self.fill_buffer(io).await? {
                        return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
                    }
                    continue;
                }
                self.start += header_len;
                let mut payload = self.buf[self.start..self.start + header.len].to_vec();
                self.start += header.len;
                unmask(&mut payload, header.mask, 0);
                return Ok(Some(match header.opcode {
                    OP_PING => Event::Ping(payload),
                    OP_PONG => Event::Pong,
                    _ => Event::Close(parse_close(&payload)?),
                }));
            }
            self.start += header_len;
            if header.opcode != OP_CONTINUATION {
                self.message =
                    Some(Open { text: header.opcode == OP_TEXT, len: 0, emitted: false, utf8: Utf8::default() });
            }
            if let Some(open) = self.message.as_mut() {
                open.len += header.len;
            }
            self.frame = Some(InFrame { header, read: 0 });
        }
    }

    /// Reads more of the current data frame's payload: from the buffer, or else with one read
    /// straight into the part. Gives the part once it holds something (or ends its message).
    async fn read_payload<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        meter: &impl Meter,
    ) -> Result<Option<Part>, ReadError> {
        let Some(frame) = self.frame.as_ref() else { return Ok(None) };
        let (header, read) = (frame.header, frame.read);
        let want = (header.len - read).min(PART_LEN.saturating_sub(self.part.len()));
        if want > 0 {
            if self.part.capacity() - self.part.len() < want {
                self.part.reserve_exact(want + HEADER_ROOM);
            }
            let from = self.part.len();
            let available = self.end - self.start;
            let n = if available > 0 {
                // Handed out before anything is awaited: the part is counted where it waits (in a
                // queue, or as this socket's while the receiver has no room), not here.
                let n = available.min(want);
                self.part.extend_from_slice(&self.buf[self.start..self.start + n]);
                self.start += n;
                n
            } else {
                // While the stream is awaited, the part counts against the budget.
                self.settle(meter)?;
                meter.waiting();
                let n = (&mut *io).take(want as u64).read_buf(&mut self.part).await.map_err(ReadError::Io)?;
                if n == 0 {
                    return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                self.received += n as u64;
                n
            };
            unmask(&mut self.part[from..], header.mask, read);
            if let Some(frame) = self.frame.as_mut() {
                frame.read += n;
            }
        }
        let frame_done = self.frame.as_ref().is_some_and(|frame| frame.read == frame.header.len);
        let fin = frame_done && header.fin;
        if frame_done {
            self.frame = None;
        }
        if self.part.is_empty() && !fin {
            return Ok(None);
        }
        let Some(open) = self.message.as_mut() else { return Err(ReadError::Protocol("data outside a message")) };
        if open.text {
            open.utf8.feed(&self.part, fin)?;
        }
        let part = Part { text: open.text, first: !open.emitted, fin, bytes: std::mem::take(&mut self.part) };
        open.emitted = true;
        if fin {
            self.message = None;
        }
        Ok(Some(part))
    }

    /// Reads more bytes into the read buffer; false on a clean end of stream between messages.
    async fn fill_buffer<R: AsyncRead + Unpin>(&mut self, io: &mut R) -> Result<bool, ReadError> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = io.read(&mut self.buf[self.end..]).await.map_err(ReadError::Io)?;
        if n == 0 {
            if self.end == 0 && self.message.is_none() {
                return Ok(false);
            }
            return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        self.end += n;
        self.received += n as u64;
        Ok(true)
    }

    /// Brings the meter up to date with the buffers held now.
    fn settle(&mut self, meter: &impl Meter) -> Result<(), ReadError> {
        let held = self.part.capacity() + self.whole.capacity();
        if held > self.metered {
            if !meter.grow(held - self.metered) {
                // The socket is ending: its buffers go now, not when the task is dropped.
                self.drop_buffers();
                self.metered = 0;
                return Err(ReadError::Ended);
            }
        } else if held < self.metered {
            meter.shrink(self.metered - held);
        }
        self.metered = held;
        Ok(())
    }

    fn drop_buffers(&mut self) {
        self.part = Vec::new();
        self.whole = Vec::new();
        self.frame = None;
        self.message = None;
    }

    /// Reads and throws away whatever the client still sends, until it stops or fails. Used after
    /// a fatal error, so the close frame is not lost to a reset; the caller bounds it in time.
    pub(crate) async fn discard<R: AsyncRead + Unpin>(&mut self, io: &mut R, meter: &impl Meter) {
        self.drop_buffers();
        let _ = self.settle(meter);
        meter.waiting();
        while let Ok(1..) = io.read(&mut self.buf).await {}
    }

    /// Rejects a header before any of its payload is read or allocated.
    fn check(&self, header: &Header) -> Result<(), ReadError> {
        match header.opcode {
            OP_CLOSE | OP_PING | OP_PONG => {
                if !header.fin {
                    return Err(ReadError::Protocol("fragmented control frame"));
                }
                if header.len > MAX_CONTROL_LEN {
                    return Err(ReadError::Protocol("control frame too long"));
                }
            }
            OP_TEXT | OP_BINARY => {
                if self.message.is_some() {
                    return Err(ReadError::Protocol("new message inside a fragmented one"));
                }
                if header.len > self.max_message_len {
                    return Err(ReadError::TooBig);
                }
            }
            OP_CONTINUATION => {
                let Some(open) = &self.message else {
                    return Err(ReadError::Protocol("continuation without a message"));
                };
                if header.len > self.max_message_len.saturating_sub(open.len) {
                    return Err(ReadError::TooBig);
                }
            }
            _ => return Err(ReadError::Protocol("unknown opcode")),
        }
        Ok(())
    }
}

/// UTF-8 checked part by part: a character cut between two parts is carried over.
#[derive(Default)]
struct Utf8 {
    carry: [u8; 4],
    carried: usize,
}

impl Utf8 {
    fn feed(&mut self, mut bytes: &[u8], fin: bool) -> Result<(), ReadError> {
        if self.carried > 0 {
            let width = match self.carry[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (width - self.carried).min(bytes.len());
            let mut joined = self.carry;
            joined[self.carried..self.carried + take].copy_from_slice(&bytes[..take]);
            let joined = &joined[..self.carried + take];
            match std::str::from_utf8(joined) {
                Ok(_) => self.carried = 0,
                Err(err) if err.error_len().is_none() && take < width - self.carried => {
                    self.carry[..joined.len()].copy_from_slice(joined);
                    self.carried = joined.len();
                }
                Err(_) => return Err(ReadError::InvalidUtf8),
            }
            bytes = &bytes[take..];
        }
        if self.carried == 0 {
            match std::str::from_utf8(bytes) {
                Ok(_) => {}
                Err(err) if err.error_len().is_none() => {
                    let rest = &bytes[err.valid_up_to()..];
                    self.carry[..rest.len()].copy_from_slice(rest);
                    self.carried = rest.len();
                }
                Err(_) => return Err(ReadError::InvalidUtf8),
            }
        }
        if fin && self.carried > 0 {
            return Err(ReadError::InvalidUtf8);
        }
        Ok(())
    }
}

/// Parses a frame header from the start of `bytes`; `None` until it is all there.
fn parse_header(bytes: &[u8]) -> Result<Option<(Header, usize)>, ReadError> {
    let [b0, b1, ..] = *bytes else { return Ok(None) };
    if b0 & 0x70 != 0 {
        return Err(ReadError::Protocol("reserved bits set"));
    }
    if b1 & 0x80 == 0 {
        return Err(ReadError::Protocol("unmasked client frame"));
    }
    let (len, mut at) = match b1 & 0x7F {
        126 => {
            let Some(ext) = bytes.get(2..4) else { return Ok(None) };
            (u64::from(u16::from_be_bytes([ext[0], ext[1]])), 4)
        }
        127 => {
            let Some(ext) = bytes.get(2..10) else { return Ok(None) };
            let mut raw = [0u8; 8];
            raw.copy_from_slice(ext);
            let len = u64::from_be_bytes(raw);
            if len >> 63 != 0 {
                return Err(ReadError::Protocol("frame length out of range"));
            }
            (len, 10)
        }
        short => (u64::from(short), 2),
    };
    let Some(mask_bytes) = bytes.get(at..at + 4) else { return Ok(None) };
    let mut mask = [0u8; 4];
    mask.copy_from_slice(mask_bytes);
    at += 4;
    debug_assert!(at <= MAX_HEADER_LEN);
    // A length beyond the address space is over any limit; `check` refuses it as too big.
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    Ok(Some((Header { fin: b0 & 0x80 != 0, opcode: b0 & 0x0F, mask, len }, at)))
}

fn parse_close(payload: &[u8]) -> Result<Option<u16>, ReadError> {
    match payload {
        [] => Ok(None),
        [_] => Err(ReadError::Protocol("close frame with a one-byte body")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !close_code_allowed(code) {
                return Err(ReadError::Protocol("invalid close code"));
            }
            if std::str::from_utf8(reason).is_err() {
                return Err(ReadError::InvalidUtf8);
            }
            Ok(Some(code))
        }
    }
}

/// Close codes a peer may send (RFC 6455 §7.4 and the IANA registry).
pub(crate) fn close_code_allowed(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Unmasks payload bytes that start `phase` bytes into their frame.
fn unmask(payload: &mut [u8], mask: [u8; 4], phase: usize) {
    let mut key = mask;
    key.rotate_left(phase % 4);
    let mut words = payload.chunks_exact_mut(4);
    for word in &mut words {
        for (byte, key) in word.iter_mut().zip(key) {
            *byte ^= key;
        }
    }
    for (byte, key) in words.into_remainder().iter_mut().zip(key) {
        *byte ^= key;
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
