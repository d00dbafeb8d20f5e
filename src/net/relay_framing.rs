//! The relay's own framing (docs/PROTOCOL.md, "Relay"): what the relay adds around the session
//! frames it carries, so it never has to read one.
//!
//! - Toward a phone (`/ws`), the relay's presence notices are text frames starting with U+0001
//!   and a JSON object; no endpoint sends such a frame (JSON frames start with `{`).
//! - On the agent's socket (`/agent`, subprotocol [`SUBPROTOCOL`]) every message is binary and
//!   starts with a [`HEADER_LEN`]-byte header: a [`Kind`] and the phone's peer id (u32, big
//!   endian). Several phones share one agent socket that way.

pub use crate::protocol::presence::{is_notice, Presence, NOTICE_MARK};

/// The WebSocket subprotocol an agent offers on `/agent`; a relay refuses agents without it.
pub const SUBPROTOCOL: &str = "voxa-relay.2";
/// The body of the `426` a relay answers an agent that does not offer [`SUBPROTOCOL`].
pub const OLD_AGENT_REFUSAL: &str = "this relay needs a newer voxa agent (relay framing 2)";
/// Bytes of the header of every message on the agent's socket.
pub const HEADER_LEN: usize = 5;
/// Phones one relay code pairs with its agent at once; one more is closed 4003
/// `too-many-phones` right after its upgrade.
pub const MAX_PHONES_PER_CODE: usize = 8;
/// Longest close reason of a [`Kind::ClosePeer`] (a close frame's payload is 125 bytes).
pub const MAX_CLOSE_REASON: usize = 123;

/// Close codes the relay ends a phone socket with, beside RFC 6455's.
pub mod close {
    /// The code already has `MAX_PHONES_PER_CODE` phones.
    pub const TOO_MANY_PHONES: u16 = 4003;
    /// The agent left (or was replaced) in the middle of a message to this phone: the rest of
    /// it will never come.
    pub const PEER_GONE_MID_MESSAGE: u16 = 4004;
}

/// What a message on the agent's socket carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The last (or only) part of a text frame to or from that peer.
    Text,
    /// The last (or only) part of a binary frame to or from that peer.
    Binary,
    /// A non-final part of a frame from that peer (relay to agent only): parts concatenate, and
    /// the next `Text` or `Binary` for the same peer ends the frame and says its kind.
    Part,
    /// A phone joined (relay to agent; empty payload).
    Joined,
    /// A phone left (relay to agent; empty payload). A partial frame from it is discarded.
    Left,
    /// Close that phone's socket (agent to relay): u16 close code, then a UTF-8 reason.
    ClosePeer,
    /// That phone proved the pairing's token (agent to relay; empty payload): a relay whose code
    /// is full makes room for a new phone by closing the oldest peer not proven, never a proven one.
    Proven,
}

impl Kind {
    pub fn byte(self) -> u8 {
        match self {
            Kind::Text => 0x00,
            Kind::Binary => 0x01,
            Kind::Part => 0x02,
            Kind::Joined => 0x10,
            Kind::Left => 0x11,
            Kind::ClosePeer => 0x12,
            Kind::Proven => 0x13,
        }
    }

    pub fn from_byte(byte: u8) -> Option<Kind> {
        Some(match byte {
            0x00 => Kind::Text,
            0x01 => Kind::Binary,
            0x02 => Kind::Part,
            0x10 => Kind::Joined,
            0x11 => Kind::Left,
            0x12 => Kind::ClosePeer,
            0x13 => Kind::Proven,
            _ => return None,
        })
    }
}

/// The relay's id of one phone socket: unique for the relay's lifetime, never reused.
pub type PeerId = u32;

/// The header of a message on the agent's socket.
pub fn header(kind: Kind, peer: PeerId) -> [u8; HEADER_LEN] {
    let [a, b, c, d] = peer.to_be_bytes();
    [kind.byte(), a, b, c, d]
}

/// Splits a message of the agent's socket into its kind, peer and payload. `None` for a message
/// shorter than the header or of an unknown kind.
pub fn split(message: &[u8]) -> Option<(Kind, PeerId, &[u8])> {
    let (head, payload) = message.split_first_chunk::<HEADER_LEN>()?;
    let kind = Kind::from_byte(head[0])?;
    Some((kind, u32::from_be_bytes([head[1], head[2], head[3], head[4]]), payload))
}

/// A whole message of the agent's socket: header and payload.
pub fn message(kind: Kind, peer: PeerId, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&header(kind, peer));
    out.extend_from_slice(payload);
    out
}

/// A [`Kind::ClosePeer`] message asking the relay to close `peer` with `code` and `reason`
/// (cut to [`MAX_CLOSE_REASON`] bytes).
pub fn close_peer(peer: PeerId, code: u16, reason: &str) -> Vec<u8> {
    let reason = crate::text::prefix(reason, MAX_CLOSE_REASON);
    let mut payload = Vec::with_capacity(2 + reason.len());
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(reason.as_bytes());
    message(Kind::ClosePeer, peer, &payload)
}

/// The close code and reason of a [`Kind::ClosePeer`] payload; `None` when it is malformed.
pub fn parse_close_peer(payload: &[u8]) -> Option<(u16, &str)> {
    let (code, reason) = payload.split_first_chunk::<2>()?;
    if reason.len() > MAX_CLOSE_REASON {
        return None;
    }
    Some((u16::from_be_bytes(*code), std::str::from_utf8(reason).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_carry_kind_and_peer_and_unknown_kinds_are_refused() {
        let framed = message(Kind::Text, 0x0102_0304, b"{}");
        assert_eq!(framed, [0x00, 1, 2, 3, 4, b'{', b'}']);
        assert_eq!(split(&framed), Some((Kind::Text, 0x0102_0304, &b"{}"[..])));
        assert_eq!(split(&header(Kind::Left, 7)), Some((Kind::Left, 7, &[][..])));
        assert_eq!(split(&[0x00, 1, 2, 3]), None, "shorter than a header");
        assert_eq!(split(&[0x03, 0, 0, 0, 1]), None, "unknown kind");
        for kind in [Kind::Text, Kind::Binary, Kind::Part, Kind::Joined, Kind::Left, Kind::ClosePeer] {
            assert_eq!(Kind::from_byte(kind.byte()), Some(kind));
        }
    }

    #[test]
    fn close_peer_carries_a_code_and_a_short_reason() {
        let framed = close_peer(9, 1008, "executor-unauthenticated");
        let (kind, peer, payload) = split(&framed).unwrap();
        assert_eq!((kind, peer), (Kind::ClosePeer, 9));
        assert_eq!(parse_close_peer(payload), Some((1008, "executor-unauthenticated")));
        let long = close_peer(9, 1000, &"é".repeat(100));
        assert!(parse_close_peer(&long[HEADER_LEN..]).is_some_and(|(_, reason)| reason.len() <= MAX_CLOSE_REASON));
        assert_eq!(parse_close_peer(&[3]), None);
        assert_eq!(parse_close_peer(&[3, 232, 0xff]), None, "a reason that is not UTF-8");
    }
}
