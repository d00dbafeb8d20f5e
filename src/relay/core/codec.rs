//! Writing the relay's WebSocket frames (RFC 6455, server side, no extensions); reading them is
//! [`super::reader`].
//!
//! The relay reads and writes frames itself instead of through a general WebSocket library so that
//! memory follows the traffic: a message goes on in parts as its bytes arrive (never held whole,
//! never to the length a header merely announces), each part is handed to the other side's queue
//! and freed as soon as it is written, and no per-socket buffer ever grows to the largest frame a
//! socket has seen.

use std::io::{self, IoSlice};

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::protocol::relay::HEADER_LEN;

pub(crate) const OP_CONTINUATION: u8 = 0x0;
pub(crate) const OP_TEXT: u8 = 0x1;
pub(crate) const OP_BINARY: u8 = 0x2;
pub(crate) const OP_CLOSE: u8 = 0x8;
pub(crate) const OP_PING: u8 = 0x9;
pub(crate) const OP_PONG: u8 = 0xA;
/// Not an opcode: the payload is a frame already encoded, headers and all (the rest of one whose
/// first bytes a reader wrote at once), and goes out as it is.
const ENCODED: u8 = 0xF0;

/// Spare room a part is given for its server header and the relay's header (toward an agent),
/// so the writer moves both in front and sends one plain write.
pub(crate) const HEADER_ROOM: usize = 4 + HEADER_LEN;
/// Largest payload the writer moves to make room for its header; larger ones go vectored.
const MAX_INLINE_PAYLOAD: usize = 2 << 10;
/// Largest control frame payload (RFC 6455 §5.5).
pub(crate) const MAX_CONTROL_LEN: usize = 125;
/// Room for a server frame header and the relay's header.
const MAX_HEAD: usize = 10 + HEADER_LEN;

/// A data frame (or a fragment of one) waiting to be written to one socket.
pub(crate) struct OutFrame {
    /// `OP_TEXT`, `OP_BINARY` or, for a later fragment, `OP_CONTINUATION`.
    pub opcode: u8,
    /// The last fragment of its message.
    pub fin: bool,
    /// The relay's header, written in front of the payload (messages to an agent).
    pub tag: Option<[u8; HEADER_LEN]>,
    pub payload: Vec<u8>,
}

impl OutFrame {
    pub(crate) fn text(text: String) -> Self {
        OutFrame { opcode: OP_TEXT, fin: true, tag: None, payload: text.into_bytes() }
    }

    pub(crate) fn binary(payload: Vec<u8>) -> Self {
        OutFrame { opcode: OP_BINARY, fin: true, tag: None, payload }
    }

    /// A binary message to an agent: the relay's header, then `payload`.
    pub(crate) fn tagged(tag: [u8; HEADER_LEN], payload: Vec<u8>) -> Self {
        OutFrame { opcode: OP_BINARY, fin: true, tag: Some(tag), payload }
    }

    /// Bytes this frame counts in queues: its payload and the relay's header.
    pub(crate) fn len(&self) -> usize {
        self.payload.len() + self.tag.map_or(0, |tag| tag.len())
    }

    /// The last bytes of an encoded frame, to be written as they are.
    fn encoded(fin: bool, bytes: Vec<u8>) -> Self {
        OutFrame { opcode: ENCODED, fin, tag: None, payload: bytes }
    }

    /// Writes the frame to `sink` at once, without waiting: the bytes written, and what is left
    /// to write when the socket took less (or none: the frame itself, or the rest of its bytes).
    pub(crate) fn try_write(mut self, sink: &TcpStream) -> (usize, Option<OutFrame>) {
        let head = self.frame_in_place();
        let written = match &head {
            None => sink.try_write(&self.payload),
            Some((head, head_len)) => {
                sink.try_write_vectored(&[IoSlice::new(&head[..*head_len]), IoSlice::new(&self.payload)])
            }
        }
        .unwrap_or(0);
        if written == framed_len(&head, &self) {
            return (written, None);
        }
        (written, Some(self.rest(head, written)))
    }

    /// What is left of this frame, framed (`head` as [`OutFrame::frame_in_place`] gave it), after
    /// the first `written` of its bytes went: the frame as it was if nothing went and its headers
    /// are apart, otherwise its remaining bytes, encoded.
    fn rest(self, head: Option<([u8; MAX_HEAD], usize)>, written: usize) -> OutFrame {
        match head {
            Some(_) if written == 0 => self,
            Some((head, head_len)) => {
                let mut bytes = head[written.min(head_len)..head_len].to_vec();
                bytes.extend_from_slice(&self.payload[written.saturating_sub(head_len)..]);
                OutFrame::encoded(self.fin, bytes)
            }
            // Framed in place: the payload is the whole frame now.
            None => {
                let mut bytes = self.payload;
                bytes.drain(..written);
                OutFrame::encoded(self.fin, bytes)
            }
        }
    }
}

/// Bytes of a framed frame: its headers (when apart) and its payload.
fn framed_len(head: &Option<([u8; MAX_HEAD], usize)>, frame: &OutFrame) -> usize {
    head.map_or(0, |(_, len)| len) + frame.payload.len()
}

/// What a write at once left unwritten of the frames it was given, in order.
pub(crate) struct Unwritten {
    pub frames: Vec<OutFrame>,
    /// The first of them is the rest of a frame the socket took in part.
    pub begun: bool,
}

/// Writes `frames` to `sink` in one vectored write at once, without waiting: the bytes written,
/// and the frames left to write (the rest of one taken in part, then those not touched, each
/// already encoded if it was framed in place).
pub(crate) fn try_write_frames(mut frames: Vec<OutFrame>, sink: &TcpStream) -> (usize, Unwritten) {
    let heads: Vec<Option<([u8; MAX_HEAD], usize)>> = frames.iter_mut().map(OutFrame::frame_in_place).collect();
    let written = {
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(frames.len() * 2);
        for (head, frame) in heads.iter().zip(&frames) {
            if let Some((head, head_len)) = head {
                slices.push(IoSlice::new(&head[..*head_len]));
            }
            slices.push(IoSlice::new(&frame.payload));
        }
        sink.try_write_vectored(&slices).unwrap_or(0)
    };
    let mut unwritten = Unwritten { frames: Vec::new(), begun: false };
    let mut left = written;
    for (frame, head) in frames.into_iter().zip(heads) {
        let total = framed_len(&head, &frame);
        if left >= total {
            left -= total;
            continue;
        }
        unwritten.begun |= left > 0;
        unwritten.frames.push(frame.rest(head, left));
        left = 0;
    }
    (written, unwritten)
}

/// RFC 6455 close codes the relay sends besides those of `protocol::close` (whose `GOING_AWAY` is named here too).
pub(crate) mod close {
    pub use crate::protocol::close::GOING_AWAY;
    pub const NORMAL: u16 = 1000;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const INVALID_DATA: u16 = 1007;
}

/// Writes a head and a body with as few writes as the stream allows. `wrote` hears of every write.
async fn write_two<W: AsyncWrite + Unpin>(
    io: &mut W,
    mut head: &[u8],
    mut body: &[u8],
    wrote: &mut impl FnMut(usize),
) -> io::Result<()> {
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

/// Writes one unmasked, unfragmented server frame: header and payload in one vectored write
/// where the stream allows it, without copying the payload. `wrote` hears of every write.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    io: &mut W,
    opcode: u8,
    payload: &[u8],
    mut wrote: impl FnMut(usize),
) -> io::Result<()> {
    let mut head = [0u8; MAX_HEAD];
    let head_len = encode_header(&mut head, true, opcode, payload.len());
    write_two(io, &head[..head_len], payload, &mut wrote).await
}

impl OutFrame {
    /// The server header and the relay's header of this frame.
    fn head(&self) -> ([u8; MAX_HEAD], usize) {
        let mut head = [0u8; MAX_HEAD];
        let mut head_len = encode_header(&mut head, self.fin, self.opcode, self.len());
        if let Some(tag) = self.tag {
            head[head_len..head_len + tag.len()].copy_from_slice(&tag);
            head_len += tag.len();
        }
        (head, head_len)
    }

    /// Puts the frame's headers in front of its payload when the payload is small and has the
    /// room to spare (as the reader leaves it), so headers and payload are one slice; otherwise
    /// gives the headers back, to be written beside the payload.
    fn frame_in_place(&mut self) -> Option<([u8; MAX_HEAD], usize)> {
        if self.opcode == ENCODED {
            return None;
        }
        let (head, head_len) = self.head();
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
/// copy but of its headers; others header beside payload.
pub(crate) async fn write_data_frame<W: AsyncWrite + Unpin>(
    io: &mut W,
    mut frame: OutFrame,
    mut wrote: impl FnMut(usize),
) -> io::Result<()> {
    match frame.frame_in_place() {
        Some((head, head_len)) => write_two(io, &head[..head_len], &frame.payload, &mut wrote).await,
        None => write_two(io, &[], &frame.payload, &mut wrote).await,
    }
}

/// Writes several data frames with as few vectored writes as the stream allows.
pub(crate) async fn write_frames<W: AsyncWrite + Unpin>(
    io: &mut W,
    frames: &mut [OutFrame],
    mut wrote: impl FnMut(usize),
) -> io::Result<()> {
    let heads: Vec<Option<([u8; MAX_HEAD], usize)>> = frames.iter_mut().map(OutFrame::frame_in_place).collect();
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
pub(crate) fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let reason = crate::text::prefix(reason, MAX_CONTROL_LEN - 2);
    let mut payload = Vec::with_capacity(2 + reason.len());
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(reason.as_bytes());
    payload
}

fn encode_header(head: &mut [u8; MAX_HEAD], fin: bool, opcode: u8, len: usize) -> usize {
    head[0] = if fin { 0x80 } else { 0 } | opcode;
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
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn fragments_and_tagged_frames_carry_their_bits_and_headers() {
        let mut out = Vec::new();
        let fragment = OutFrame { opcode: OP_TEXT, fin: false, tag: None, payload: b"ab".to_vec() };
        write_data_frame(&mut out, fragment, |_| {}).await.unwrap();
        let rest = OutFrame { opcode: OP_CONTINUATION, fin: true, tag: None, payload: b"c".to_vec() };
        write_data_frame(&mut out, rest, |_| {}).await.unwrap();
        assert_eq!(out, [0x01, 2, b'a', b'b', 0x80, 1, b'c']);

        let mut roomy = Vec::with_capacity(3 + HEADER_ROOM);
        roomy.extend_from_slice(b"abc");
        let mut out = Vec::new();
        write_data_frame(&mut out, OutFrame::tagged([0, 0, 0, 0, 7], roomy), |_| {}).await.unwrap();
        assert_eq!(out, [0x82, 8, 0, 0, 0, 0, 7, b'a', b'b', b'c']);
        let mut out = Vec::new();
        write_frames(&mut out, &mut [OutFrame::tagged([0x11, 0, 0, 0, 9], Vec::new())], |_| {}).await.unwrap();
        assert_eq!(out, [0x82, 5, 0x11, 0, 0, 0, 9]);
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
