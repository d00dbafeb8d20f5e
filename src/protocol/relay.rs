//! The relay's wire (docs/PROTOCOL.md, "Relay"): what the relay adds around the session frames
//! it carries, so it never has to read one. The relay and the agent's relay link both speak it
//! from here.
//!
//! - The sides of a pairing ([`PeerRole`]) and the subprotocols each side offers in its upgrade:
//!   an agent relay framing ([`SUBPROTOCOL`], [`SUBPROTOCOL_3`]), a browser [`PHONE_SUBPROTOCOL`]
//!   and perhaps the relay token ([`TOKEN_PROTOCOL_PREFIX`]).
//! - Toward a phone (`/ws`), the relay's presence notices are text frames starting with U+0001
//!   and a JSON object ([`Presence`]); no endpoint sends such a frame (JSON frames start with `{`).
//! - On the agent's socket (`/agent`) every message is binary and starts with a
//!   [`HEADER_LEN`]-byte header: a [`Kind`] and the phone's peer id (u32, big endian). Several
//!   phones share one agent socket that way.
//! - The close codes the relay ends a phone with ([`close`]).

use serde::{Deserialize, Serialize};

/// Relay framing 2, the subprotocol every agent offers on `/agent`; a relay refuses agents that
/// offer no relay framing it knows.
pub const SUBPROTOCOL: &str = "voxa-relay.2";
/// Relay framing 3: framing 2 and [`Kind::Proven`]. A relay that knows it picks it when an agent
/// offers it; only then does the agent send `PROVEN`.
pub const SUBPROTOCOL_3: &str = "voxa-relay.3";
/// What an agent offers on `/agent`, best first; a relay names the one it picked in its `101`.
pub const AGENT_SUBPROTOCOLS: &str = "voxa-relay.3, voxa-relay.2";
/// The body of the `426` a relay answers an agent that offers no relay framing it knows.
pub const OLD_AGENT_REFUSAL: &str = "this relay needs a newer voxa agent (relay framing 2)";
/// The subprotocol a phone may offer, and the relay then names in its `101`: a browser that
/// offers [`TOKEN_PROTOCOL_PREFIX`] must offer a real one beside it, as the relay never echoes
/// the token.
pub const PHONE_SUBPROTOCOL: &str = "voxa.1";
/// A `Sec-WebSocket-Protocol` value `voxa-relay-token.<base64url of the relay token>` carries the
/// relay token from a browser, whose WebSocket cannot send `Authorization`.
pub const TOKEN_PROTOCOL_PREFIX: &str = "voxa-relay-token.";
/// Bytes of the header of every message on the agent's socket.
pub const HEADER_LEN: usize = 5;
/// Phones one relay code pairs with its agent at once. One more takes the place of the oldest
/// phone the agent has not marked [`Kind::Proven`], or, when every one is proven, is closed 4003
/// `too-many-phones` right after its upgrade.
pub const MAX_PHONES_PER_CODE: usize = 8;
/// Longest close reason of a [`Kind::ClosePeer`] (a close frame's payload is 125 bytes).
pub const MAX_CLOSE_REASON: usize = 123;

/// A version of the relay framing, agreed in the agent's upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Framing {
    /// [`SUBPROTOCOL`]: every kind but [`Kind::Proven`].
    V2,
    /// [`SUBPROTOCOL_3`]: framing 2 and [`Kind::Proven`].
    V3,
}

impl Framing {
    /// The subprotocol that names it.
    pub fn subprotocol(self) -> &'static str {
        match self {
            Framing::V2 => SUBPROTOCOL,
            Framing::V3 => SUBPROTOCOL_3,
        }
    }

    /// The newest framing among the subprotocols offered; `None` when none is a relay framing.
    pub fn pick<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<Framing> {
        offered
            .into_iter()
            .filter_map(|protocol| match protocol {
                SUBPROTOCOL => Some(Framing::V2),
                SUBPROTOCOL_3 => Some(Framing::V3),
                _ => None,
            })
            .max()
    }

    /// True when an agent may send `kind` under this framing.
    pub fn agent_sends(self, kind: Kind) -> bool {
        match kind {
            Kind::Text | Kind::Binary | Kind::ClosePeer => true,
            Kind::Proven => self == Framing::V3,
            Kind::Part | Kind::Joined | Kind::Left | Kind::Receipt => false,
        }
    }
}

/// Close codes the relay ends a phone socket with, beside RFC 6455's (and
/// `protocol::close::REPLACED` for an agent).
pub mod close {
    /// The code already has `MAX_PHONES_PER_CODE` phones: a newcomer when every phone is proven
    /// (reason [`TOO_MANY_PHONES_REASON`]), or the oldest unproven phone, which made room for a
    /// newcomer (reason [`MADE_ROOM_REASON`]).
    pub const TOO_MANY_PHONES: u16 = 4003;
    /// The reason of a newcomer closed [`TOO_MANY_PHONES`].
    pub const TOO_MANY_PHONES_REASON: &str = "too-many-phones";
    /// The reason of an unproven phone closed [`TOO_MANY_PHONES`] to seat a newcomer.
    pub const MADE_ROOM_REASON: &str = "made-room-for-a-new-phone";
    /// The agent left (or was replaced) in the middle of a message to this phone: the rest of
    /// it will never come.
    pub const PEER_GONE_MID_MESSAGE: u16 = 4004;
}

/// Which side of a relay pairing a socket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerRole {
    Agent,
    Phone,
}

impl PeerRole {
    /// The role's name on the wire (`agent`, `phone`).
    pub fn as_str(self) -> &'static str {
        match self {
            PeerRole::Agent => "agent",
            PeerRole::Phone => "phone",
        }
    }
}

/// Presence change reported by the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerState {
    Joined,
    Left,
}

/// First character of a relay notice toward a phone.
pub const NOTICE_MARK: char = '\u{1}';

/// A presence notice toward a phone: `U+0001{"type":"presence","peer":…,"state":…}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Presence {
    pub peer: PeerRole,
    pub state: PeerState,
}

#[derive(Serialize, Deserialize)]
struct PresenceJson {
    #[serde(rename = "type")]
    kind: String,
    peer: PeerRole,
    state: PeerState,
}

/// `type` of a presence notice's JSON.
const PRESENCE_TYPE: &str = "presence";

impl Presence {
    pub fn new(peer: PeerRole, state: PeerState) -> Self {
        Presence { peer, state }
    }

    /// The notice as a text frame.
    pub fn to_text(self) -> String {
        let json = PresenceJson { kind: PRESENCE_TYPE.into(), peer: self.peer, state: self.state };
        format!("{NOTICE_MARK}{}", serde_json::to_string(&json).unwrap_or_default())
    }

    /// The notice a text frame carries, if it is one (it starts with [`NOTICE_MARK`]).
    pub fn parse(text: &str) -> Option<Presence> {
        let json: PresenceJson = serde_json::from_str(text.strip_prefix(NOTICE_MARK)?).ok()?;
        (json.kind == PRESENCE_TYPE).then_some(Presence { peer: json.peer, state: json.state })
    }
}

/// True when a text frame is a relay notice (its first byte is U+0001): only the relay sends one.
pub fn is_notice(text: &[u8]) -> bool {
    text.first() == Some(&(NOTICE_MARK as u8))
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
    /// That phone proved the pairing's token (agent to relay, framing 3 only; empty payload): a
    /// relay whose code is full makes room for a new phone by closing the oldest peer not proven,
    /// never a proven one.
    Proven,
    /// A push receipt (relay to agent; peer 0): the body of a `POST /ack?code=…` to the agent's
    /// code, passed on unread ([`MAX_RECEIPT_LEN`] bytes at most). Agents that do not know the
    /// kind drop it, as they drop every kind they do not know.
    Receipt,
}

/// The largest body of a `POST /ack` the relay passes on as a [`Kind::Receipt`].
pub const MAX_RECEIPT_LEN: usize = 256;

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
            Kind::Receipt => 0x14,
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
            0x14 => Kind::Receipt,
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
        for kind in [
            Kind::Text,
            Kind::Binary,
            Kind::Part,
            Kind::Joined,
            Kind::Left,
            Kind::ClosePeer,
            Kind::Proven,
            Kind::Receipt,
        ] {
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

    #[test]
    fn presence_notices_start_with_u0001_and_nothing_else_parses_as_one() {
        let notice = Presence::new(PeerRole::Agent, PeerState::Joined);
        let text = notice.to_text();
        assert_eq!(text, "\u{1}{\"type\":\"presence\",\"peer\":\"agent\",\"state\":\"joined\"}");
        assert!(is_notice(text.as_bytes()));
        assert_eq!(Presence::parse(&text), Some(notice));
        let left = Presence::new(PeerRole::Phone, PeerState::Left);
        assert_eq!(Presence::parse(&left.to_text()), Some(left));
        for other in [
            r#"{"type":"presence","peer":"agent","state":"joined"}"#,
            r#"{"type":"__peer","peer":"agent","state":"joined"}"#,
            "\u{1}not json",
            "\u{1}{\"type\":\"say\",\"peer\":\"agent\",\"state\":\"joined\"}",
            r"C:\users\me",
        ] {
            assert_eq!(Presence::parse(other), None, "{other}");
        }
        assert!(!is_notice(br"C:\users\me") && !is_notice(b"") && !is_notice(b"{}"));
    }

    #[test]
    fn an_agent_gets_the_newest_framing_it_offers_and_proven_only_under_3() {
        let offered = |text: &'static str| Framing::pick(text.split(',').map(str::trim));
        assert_eq!(offered(AGENT_SUBPROTOCOLS), Some(Framing::V3));
        assert_eq!(offered("voxa-relay.2, voxa-relay.3"), Some(Framing::V3));
        assert_eq!(offered("other, voxa-relay.2"), Some(Framing::V2));
        assert_eq!(offered("voxa-relay.1"), None);
        assert_eq!(offered(""), None);
        assert_eq!(Framing::V3.subprotocol(), SUBPROTOCOL_3);
        assert!(Framing::V3.agent_sends(Kind::Proven) && !Framing::V2.agent_sends(Kind::Proven));
        for kind in [Kind::Part, Kind::Joined, Kind::Left] {
            assert!(!Framing::V3.agent_sends(kind), "{kind:?}");
        }
    }
}
