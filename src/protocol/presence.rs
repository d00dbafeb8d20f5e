//! The sides of a relay pairing and their presence (docs/PROTOCOL.md, "Relay"): the notice the
//! relay sends a phone when its laptop comes or goes. The rest of the relay's own framing is
//! `net::relay_framing`.

use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
