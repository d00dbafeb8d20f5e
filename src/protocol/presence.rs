//! The sides of a relay pairing and their presence (docs/PROTOCOL.md, "Relay"). The relay's own
//! framing of the notices is `net::relay_framing`.

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
