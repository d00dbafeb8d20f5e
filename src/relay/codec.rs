//! The relay's WebSocket frames (RFC 6455, server side, no extensions).
//!
//! The relay reads and writes frames itself instead of through a general WebSocket library so that
//! memory follows the traffic: a message's buffer grows as its bytes arrive (never to the length a
//! header merely announces), is handed to the other side's queue and freed as soon as it is
//! written, and no per-socket buffer ever grows to the largest frame a socket has seen. A socket
//! holds one small read buffer, and every larger buffer is counted against a [`Meter`].

use std::io::{self, IoSlice};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub(super) const OP_CONTINUATION: u8 = 0x0;
pub(super) const OP_TEXT: u8 = 0x1;
pub(super) const OP_BINARY: u8 = 0x2;
pub(super) const OP_CLOSE: u8 = 0x8;
pub(super) const OP_PING: u8 = 0x9;
pub(super) const OP_PONG: u8 = 0xA;

/// A data frame waiting to be written to one socket.
pub(super) struct OutFrame {
    pub opcode: u8,
    pub payload: Vec<u8>,
}

impl OutFrame {
    pub(super) fn text(text: String) -> Self {
        OutFrame { opcode: OP_TEXT, payload: text.into_bytes() }
    }

    pub(super) fn binary(payload: Vec<u8>) -> Self {
        OutFrame { opcode: OP_BINARY, payload }
    }
}

/// Bytes of a socket's read buffer, which holds frame headers and small frames.
pub(super) const READ_BUFFER_LEN: usize = 2 << 10;
/// Spare room a payload read whole from the read buffer is given, enough for its server header
/// (2 or 4 bytes at that size): the writer moves the header in front and sends one plain write.
const HEADER_ROOM: usize = 4;
/// Largest payload the writer moves to make room for its header; larger ones go vectored.
const MAX_INLINE_PAYLOAD: usize = READ_BUFFER_LEN;
/// Largest control frame payload (RFC 6455 §5.5).
const MAX_CONTROL_LEN: usize = 125;
/// Longest frame header: 2 bytes, 8 of extended length, 4 of mask.
const MAX_HEADER_LEN: usize = 14;
/// First allocation for a message that does not fit the read buffer; it then doubles as bytes
/// arrive, up to the announced length.
const FIRST_GROWTH: usize = 64 << 10;

/// Counts the bytes a reader holds in message buffers against a memory budget.
pub(super) trait Meter {
    /// Counts `bytes` more; false when the socket is ending and must stop reading.
    fn grow(&self, bytes: usize) -> bool;
    /// Counts `bytes` fewer.
    fn shrink(&self, bytes: usize);
}

/// No budget at all.
#[cfg(test)]
pub(super) struct Unmetered;

#[cfg(test)]
impl Meter for Unmetered {
    fn grow(&self, _: usize) -> bool {
        true
    }

    fn shrink(&self, _: usize) {}
}

/// RFC 6455 close codes the relay sends besides those of `protocol::close`.
pub(super) mod close {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const INVALID_DATA: u16 = 1007;
}

/// One complete message from a client.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Message {
    /// A text message, already checked to be UTF-8.
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong,
    /// The client's close frame and its status code, if it sent one.
    Close(Option<u16>),
}

/// Why a client's byte stream is no longer a WebSocket the relay will read.
#[derive(Debug)]
pub(super) enum ReadError {
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
    pub(super) fn close(&self) -> Option<(u16, &'static str)> {
        match self {
            ReadError::Io(_) | ReadError::Ended => None,
            ReadError::TooBig => Some((crate::protocol::close::TOO_BIG, "message too big")),
            ReadError::Protocol(why) => Some((close::PROTOCOL_ERROR, why)),
            ReadError::InvalidUtf8 => Some((close::INVALID_DATA, "text is not UTF-8")),
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

/// A frame whose payload is read straight into its own allocation, grown as bytes arrive.
struct Pending {
    header: Header,
    payload: Vec<u8>,
}

/// Reads client messages from a byte stream. Every field of progress lives here, so
/// [`FrameReader::read_message`] is cancel-safe: a dropped call loses nothing.
pub(super) struct FrameReader {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    pending: Option<Pending>,
    /// Opcode and bytes so far of a fragmented data message.
    fragments: Option<(u8, Vec<u8>)>,
    max_message_len: usize,
    /// Bytes read so far: progress on a large message counts as a sign of life.
    received: u64,
    /// Bytes of message buffers counted on the meter.
    metered: usize,
}

impl FrameReader {
    /// A reader for messages up to `max_message_len`, starting with bytes already read past the
    /// HTTP request head.
    pub(super) fn new(max_message_len: usize, leftover: &[u8]) -> Self {
        let mut buf = vec![0u8; READ_BUFFER_LEN.max(leftover.len())].into_boxed_slice();
        buf[..leftover.len()].copy_from_slice(leftover);
        FrameReader {
            buf,
            start: 0,
            end: leftover.len(),
            pending: None,
            fragments: None,
            max_message_len,
            received: 0,
            metered: 0,
        }
    }

    /// Bytes read from the stream so far, complete messages or not.
    pub(super) fn received(&self) -> u64 {
        self.received
    }

    /// The next complete message, or `None` on a clean end of stream between frames. Message
    /// buffers are counted on `meter` as they grow and uncounted once the message is returned.
    pub(super) async fn read_message<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        meter: &impl Meter,
    ) -> Result<Option<Message>, ReadError> {
        let result = self.next_message(io, meter).await;
        self.settle(meter)?;
        result
    }

    async fn next_message<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        meter: &impl Meter,
    ) -> Result<Option<Message>, ReadError> {
        loop {
            if self.pending.is_some() {
                if self.read_pending(io, meter).await? {
                    continue;
                }
                let Some(Pending { header, payload }) = self.pending.take() else { continue };
                if let Some(message) = self.complete(header, payload)? {
                    return Ok(Some(message));
                }
                self.settle(meter)?;
                continue;
            }
            match parse_header(&self.buf[self.start..self.end])? {
                Some((header, header_len)) => {
                    if let Some(message) = self.start_frame(header, header_len, meter)? {
                        return Ok(Some(message));
                    }
                }
                None => {
                    if !self.fill_buffer(io).await? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Reads more of the pending frame's payload straight into its buffer, grown as bytes
    /// arrive; false once the payload is complete.
    async fn read_pending<R: AsyncRead + Unpin>(&mut self, io: &mut R, meter: &impl Meter) -> Result<bool, ReadError> {
        let Some(pending) = self.pending.as_mut() else { return Ok(false) };
        let missing = pending.header.len - pending.payload.len();
        if missing == 0 {
            return Ok(false);
        }
        if pending.payload.capacity() == pending.payload.len() {
            let grown = (pending.payload.len() * 2).max(FIRST_GROWTH).min(pending.header.len);
            pending.payload.reserve_exact(grown - pending.payload.len());
            self.settle(meter)?;
        }
        let Some(pending) = self.pending.as_mut() else { return Ok(true) };
        let n = (&mut *io).take(missing as u64).read_buf(&mut pending.payload).await.map_err(ReadError::Io)?;
        if n == 0 {
            return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        self.received += n as u64;
        Ok(true)
    }

    /// Takes a frame whose header is at the start of the read buffer: whole, when its payload is
    /// there too, or else as the pending frame, its payload moved to a buffer of its own.
    fn start_frame(
        &mut self,
        header: Header,
        header_len: usize,
        meter: &impl Meter,
    ) -> Result<Option<Message>, ReadError> {
        self.check(&header)?;
        self.start += header_len;
        let available = self.end - self.start;
        if header.len <= available {
            let mut payload = Vec::with_capacity(header.len + HEADER_ROOM);
            payload.extend_from_slice(&self.buf[self.start..self.start + header.len]);
            self.start += header.len;
            if let Some(message) = self.complete(header, payload)? {
                return Ok(Some(message));
            }
        } else {
            let mut payload = Vec::with_capacity(available.max(FIRST_GROWTH).min(header.len));
            payload.extend_from_slice(&self.buf[self.start..self.end]);
            (self.start, self.end) = (0, 0);
            self.pending = Some(Pending { header, payload });
        }
        self.settle(meter)?;
        Ok(None)
    }

    /// Reads more bytes into the read buffer; false on a clean end of stream between frames.
    async fn fill_buffer<R: AsyncRead + Unpin>(&mut self, io: &mut R) -> Result<bool, ReadError> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = io.read(&mut self.buf[self.end..]).await.map_err(ReadError::Io)?;
        if n == 0 {
            if self.end == 0 && self.fragments.is_none() {
                return Ok(false);
            }
            return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        self.end += n;
        self.received += n as u64;
        Ok(true)
    }

    /// Bytes held in message buffers: the frame being read and the fragments so far.
    fn held(&self) -> usize {
        self.pending.as_ref().map_or(0, |pending| pending.payload.capacity())
            + self.fragments.as_ref().map_or(0, |(_, so_far)| so_far.capacity())
    }

    /// Brings the meter up to date with the buffers held now.
    fn settle(&mut self, meter: &impl Meter) -> Result<(), ReadError> {
        let held = self.held();
        if held > self.metered {
            if !meter.grow(held - self.metered) {
                // The socket is ending: its buffers go now, not when the task is dropped.
                self.pending = None;
                self.fragments = None;
                self.metered = 0;
                return Err(ReadError::Ended);
            }
        } else if held < self.metered {
            meter.shrink(self.metered - held);
        }
        self.metered = held;
        Ok(())
    }

    /// Reads and throws away whatever the client still sends, until it stops or fails. Used after
    /// a fatal error, so the close frame is not lost to a reset; the caller bounds it in time.
    pub(super) async fn discard<R: AsyncRead + Unpin>(&mut self, io: &mut R, meter: &impl Meter) {
        self.pending = None;
        self.fragments = None;
        let _ = self.settle(meter);
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
                if self.fragments.is_some() {
                    return Err(ReadError::Protocol("new message inside a fragmented one"));
                }
                if header.len > self.max_message_len {
                    return Err(ReadError::TooBig);
                }
            }
            OP_CONTINUATION => {
                let Some((_, so_far)) = &self.fragments else {
                    return Err(ReadError::Protocol("continuation without a message"));
                };
                if header.len > self.max_message_len.saturating_sub(so_far.len()) {
                    return Err(ReadError::TooBig);
                }
            }
            _ => return Err(ReadError::Protocol("unknown opcode")),
        }
        Ok(())
    }

    /// Turns a whole frame into a message, or keeps it as a fragment.
    fn complete(&mut self, header: Header, mut payload: Vec<u8>) -> Result<Option<Message>, ReadError> {
        unmask(&mut payload, header.mask);
        let message = match header.opcode {
            OP_PING => Message::Ping(payload),
            OP_PONG => Message::Pong,
            OP_CLOSE => Message::Close(parse_close(&payload)?),
            OP_CONTINUATION => {
                let Some((opcode, mut so_far)) = self.fragments.take() else {
                    return Err(ReadError::Protocol("continuation without a message"));
                };
                so_far.extend_from_slice(&payload);
                if !header.fin {
                    self.fragments = Some((opcode, so_far));
                    return Ok(None);
                }
                data_message(opcode, so_far)?
            }
            opcode if !header.fin => {
                self.fragments = Some((opcode, payload));
                return Ok(None);
            }
            opcode => data_message(opcode, payload)?,
        };
        Ok(Some(message))
    }
}

fn data_message(opcode: u8, payload: Vec<u8>) -> Result<Message, ReadError> {
    if opcode == OP_TEXT {
        String::from_utf8(payload).map(Message::Text).map_err(|_| ReadError::InvalidUtf8)
    } else {
        Ok(Message::Binary(payload))
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
fn close_code_allowed(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

fn unmask(payload: &mut [u8], mask: [u8; 4]) {
    let mut words = payload.chunks_exact_mut(4);
    for word in &mut words {
        for (byte, key) in word.iter_mut().zip(mask) {
            *byte ^= key;
        }
    }
    for (byte, key) in words.into_remainder().iter_mut().zip(mask) {
        *byte ^= key;
    }
}

/// Writes one unmasked, unfragmented server frame: header and payload in one vectored write
/// where the stream allows it, without copying the payload. `wrote` hears of every write.
pub(super) async fn write_frame<W: AsyncWrite + Unpin>(
    io: &mut W,
    opcode: u8,
    payload: &[u8],
    mut wrote: impl FnMut(usize),
) -> io::Result<()> {
    let mut head = [0u8; 10];
    let head_len = encode_header(&mut head, opcode, payload.len());
    let (mut head, mut body) = (&head[..head_len], payload);
    while !head.is_empty() || !body.is_empty() {
        let written = if head.is_empty() {
            io.write(body).await?
        } else {
            io.write_vectored(&[IoSlice::new(head), IoSlice::new(body)]).await?
        };
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        wrote(written);
        let from_head = written.min(head.len());
        head = &head[from_head..];
        body = &body[written - from_head..];
    }
    Ok(())
}

impl OutFrame {
    /// Puts the frame's header in front of its payload when the payload is small and has the
    /// room to spare (as the reader leaves it), so header and payload are one slice; otherwise
    /// gives the header back, to be written beside the payload.
    fn frame_in_place(&mut self) -> Option<([u8; 10], usize)> {
        let mut head = [0u8; 10];
        let head_len = encode_header(&mut head, self.opcode, self.payload.len());
        let payload = &mut self.payload;
        if payload.len() > MAX_INLINE_PAYLOAD || payload.capacity() - payload.len() < head_len {
            return Some((head, head_len));
        }
        payload.extend_from_slice(&head[..head_len]);
        payload.rotate_right(head_len);
        None
    }
}

/// Writes one data frame: a small one read by this relay goes out in one plain write, with no
/// copy but of its header; others as [`write_frame`] does.
pub(super) async fn write_data_frame<W: AsyncWrite + Unpin>(
    io: &mut W,
    mut frame: OutFrame,
    mut wrote: impl FnMut(usize),
) -> io::Result<()> {
    if frame.frame_in_place().is_some() {
        return write_frame(io, frame.opcode, &frame.payload, wrote).await;
    }
    let mut bytes = &frame.payload[..];
    while !bytes.is_empty() {
        let written = io.write(bytes).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        wrote(written);
        bytes = &bytes[written..];
    }
    Ok(())
}

/// Writes several data frames with as few vectored writes as the stream allows.
pub(super) async fn write_frames<W: AsyncWrite + Unpin>(
    io: &mut W,
    frames: &mut [OutFrame],
    mut wrote: impl FnMut(usize),
) -> io::Result<()> {
    let heads: Vec<Option<([u8; 10], usize)>> = frames.iter_mut().map(OutFrame::frame_in_place).collect();
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(frames.len() * 2);
    for (head, frame) in heads.iter().zip(&*frames) {
        if let Some((head, head_len)) = head {
            slices.push(IoSlice::new(&head[..*head_len]));
        }
        if !frame.payload.is_empty() {
            slices.push(IoSlice::new(&frame.payload));
        }
    }
    let mut remaining = &mut slices[..];
    while !remaining.is_empty() {
        let written = io.write_vectored(remaining).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        wrote(written);
        IoSlice::advance_slices(&mut remaining, written);
    }
    Ok(())
}

/// The payload of a close frame: the code, then the reason (cut to fit a control frame).
pub(super) fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let reason = crate::text::prefix(reason, MAX_CONTROL_LEN - 2);
    let mut payload = Vec::with_capacity(2 + reason.len());
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(reason.as_bytes());
    payload
}

fn encode_header(head: &mut [u8; 10], opcode: u8, len: usize) -> usize {
    head[0] = 0x80 | opcode;
    if len < 126 {
        head[1] = len as u8;
        2
    } else if let Ok(len16) = u16::try_from(len) {
        head[1] = 126;
        head[2..4].copy_from_slice(&len16.to_be_bytes());
        4
    } else {
        head[1] = 127;
        head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame, as a browser or phone sends it.
    fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
        match payload.len() {
            len if len < 126 => out.push(0x80 | len as u8),
            len if len <= 0xFFFF => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    async fn read_all(input: &[u8], max: usize) -> Vec<Result<Message, String>> {
        let mut reader = FrameReader::new(max, &[]);
        let mut io = input;
        let mut out = Vec::new();
        loop {
            match reader.read_message(&mut io, &Unmetered).await {
                Ok(Some(message)) => out.push(Ok(message)),
                Ok(None) => return out,
                Err(err) => {
                    out.push(Err(err.to_string()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn reads_text_binary_and_control_frames_of_every_length_encoding() {
        let big = vec![7u8; 70_000];
        let mid = vec![9u8; 300];
        let mut input = client_frame(true, OP_TEXT, "héllo".as_bytes());
        input.extend(client_frame(true, OP_BINARY, &mid));
        input.extend(client_frame(true, OP_PING, b"p"));
        input.extend(client_frame(true, OP_BINARY, &big));
        input.extend(client_frame(true, OP_PONG, b""));
        input.extend(client_frame(true, OP_CLOSE, &close_payload(1000, "bye")));
        let got = read_all(&input, 1 << 20).await;
        assert_eq!(
            got,
            vec![
                Ok(Message::Text("héllo".into())),
                Ok(Message::Binary(mid)),
                Ok(Message::Ping(b"p".to_vec())),
                Ok(Message::Binary(big)),
                Ok(Message::Pong),
                Ok(Message::Close(Some(1000))),
            ]
        );
    }

    #[tokio::test]
    async fn reassembles_fragments_with_interleaved_control_frames() {
        let mut input = client_frame(false, OP_TEXT, b"ab");
        input.extend(client_frame(true, OP_PING, b""));
        input.extend(client_frame(false, OP_CONTINUATION, b"cd"));
        input.extend(client_frame(true, OP_CONTINUATION, b"ef"));
        let got = read_all(&input, 1 << 20).await;
        assert_eq!(got, vec![Ok(Message::Ping(vec![])), Ok(Message::Text("abcdef".into()))]);
    }

    #[tokio::test]
    async fn survives_cancellation_at_every_byte() {
        use futures_util::FutureExt;
        // Feed frames one byte at a time and drop the read whenever it would wait.
        let small = b"tiny".to_vec();
        let large = vec![5u8; READ_BUFFER_LEN + 904];
        let input = [client_frame(true, OP_TEXT, &small), client_frame(true, OP_BINARY, &large)].concat();
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut reader = FrameReader::new(1 << 20, &[]);
        let mut got = Vec::new();
        for byte in &input {
            client.write_all(&[*byte]).await.unwrap();
            if let Some(result) = reader.read_message(&mut server, &Unmetered).now_or_never() {
                got.push(result.unwrap().unwrap());
            }
        }
        assert_eq!(got, vec![Message::Text("tiny".into()), Message::Binary(large)]);
    }

    #[tokio::test]
    async fn refuses_oversized_frames_before_allocating() {
        // A header announcing 2^62 bytes must fail at once, not try to allocate.
        let mut input = vec![0x82, 0x80 | 127];
        input.extend_from_slice(&(1u64 << 62).to_be_bytes());
        input.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(read_all(&input, 1 << 20).await, vec![Err("message too big".into())]);

        let at_limit = client_frame(true, OP_BINARY, &[1u8; 100]);
        assert!(matches!(read_all(&at_limit, 100).await[..], [Ok(Message::Binary(_))]));
        assert_eq!(read_all(&at_limit, 99).await, vec![Err("message too big".into())]);

        let mut fragmented = client_frame(false, OP_BINARY, &[1u8; 60]);
        fragmented.extend(client_frame(true, OP_CONTINUATION, &[1u8; 60]));
        assert_eq!(read_all(&fragmented, 100).await, vec![Err("message too big".into())]);
    }

    #[tokio::test]
    async fn refuses_protocol_violations() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                {
                    let mut f = client_frame(true, OP_TEXT, b"x");
                    f[1] &= 0x7F;
                    f
                },
                "unmasked",
            ),
            (
                {
                    let mut f = client_frame(true, OP_TEXT, b"x");
                    f[0] |= 0x40;
                    f
                },
                "reserved",
            ),
            (client_frame(true, 0x3, b"x"), "unknown opcode"),
            (client_frame(false, OP_PING, b"x"), "fragmented control"),
            (client_frame(true, OP_PING, &[0u8; 126]), "control frame too long"),
            (client_frame(true, OP_CONTINUATION, b"x"), "continuation without"),
            ([client_frame(false, OP_TEXT, b"x"), client_frame(true, OP_TEXT, b"y")].concat(), "inside a fragmented"),
            (client_frame(true, OP_CLOSE, &[3]), "one-byte"),
            (client_frame(true, OP_CLOSE, &1005u16.to_be_bytes()), "invalid close code"),
            (client_frame(true, OP_TEXT, &[0xff, 0xfe]), "not UTF-8"),
        ];
        for (input, expected) in cases {
            let got = read_all(&input, 1 << 20).await;
            match got.last() {
                Some(Err(err)) => assert!(err.contains(expected), "{err} does not mention {expected}"),
                other => panic!("expected an error mentioning {expected}, got {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn end_of_stream_mid_frame_is_an_error_and_between_frames_is_not() {
        let frame = client_frame(true, OP_TEXT, b"hello");
        assert_eq!(read_all(&frame, 100).await, vec![Ok(Message::Text("hello".into()))]);
        let cut = &frame[..frame.len() - 1];
        assert!(matches!(&read_all(cut, 100).await[..], [Err(err)] if err.contains("read failed")));
    }

    #[tokio::test]
    async fn writes_server_frames_with_minimal_length_encoding() {
        for (len, head_len) in [(0, 2), (125, 2), (126, 4), (65_535, 4), (65_536, 10)] {
            let payload = vec![3u8; len];
            let mut out = Vec::new();
            write_frame(&mut out, OP_BINARY, &payload, |_| {}).await.unwrap();
            assert_eq!(out.len(), head_len + len, "length {len}");
            assert_eq!(out[0], 0x82);
            assert_eq!(out[1] & 0x80, 0, "server frames are unmasked");
            assert!(out[head_len..].iter().all(|b| *b == 3));
        }
        // The last payload has room for its header, as the reader leaves small payloads.
        let frames = || {
            let mut roomy = Vec::with_capacity(300 + HEADER_ROOM);
            roomy.extend_from_slice(&[2u8; 300]);
            [
                OutFrame::text("a".into()),
                OutFrame::binary(Vec::new()),
                OutFrame::binary(vec![1u8; 300]),
                OutFrame::binary(roomy),
            ]
        };
        let mut expected = Vec::new();
        for frame in &frames() {
            write_frame(&mut expected, frame.opcode, &frame.payload, |_| {}).await.unwrap();
        }
        let mut out = Vec::new();
        write_frames(&mut out, &mut frames(), |_| {}).await.unwrap();
        assert_eq!(out, expected);
        // One by one, framed in place where the payload has room or as a separate header.
        let mut out = Vec::new();
        for frame in frames() {
            write_data_frame(&mut out, frame, |_| {}).await.unwrap();
        }
        assert_eq!(out, expected);
        // Through a pipe that takes a few bytes at a time, every partial write resumes correctly.
        let (mut tx, mut rx) = tokio::io::duplex(7);
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut total = 0;
        write_frames(&mut tx, &mut frames(), |n| total += n).await.unwrap();
        drop(tx);
        assert_eq!(reading.await.unwrap(), expected);
        assert_eq!(total, expected.len());

        let close = close_payload(4001, &"é".repeat(100));
        assert!(close.len() <= MAX_CONTROL_LEN);
        assert!(std::str::from_utf8(&close[2..]).is_ok());
    }
}
