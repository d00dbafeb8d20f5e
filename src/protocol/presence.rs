//! The relay's presence notices (docs/PROTOCOL.md, "Relay"): which side of a pairing joined or left.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Marker type of the relay's presence frames.
pub const PEER_TYPE: &str = "__peer";

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

/// The relay's control frame: `{"type":"__peer","peer":…,"state":…}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerNotice {
    #[serde(rename = "type")]
    pub kind: String,
    pub peer: PeerRole,
    pub state: PeerState,
}

impl PeerNotice {
    pub fn new(peer: PeerRole, state: PeerState) -> Self {
        Self { kind: PEER_TYPE.to_owned(), peer, state }
    }

    /// The notice as a text frame payload.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a text frame as a relay notice, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        if !is_peer_frame(text) {
            return None;
        }
        serde_json::from_str(text).ok()
    }
}

/// True when a text frame is a JSON object whose `type` is `__peer` — the only frames a relay
/// looks into. Decided as the most lenient JSON reader would: escapes are decoded
/// (`"\u005f_peer"` is the marker), any of several `type` members counts, and a frame that
/// mentions the marker but is not JSON serde accepts (a lone surrogate a JavaScript parser takes)
/// counts too. Cheap pre-check first: most frames contain neither the marker nor a `\u` escape.
pub fn is_peer_frame(text: &str) -> bool {
    if !text.contains(PEER_TYPE) && !text.contains("\\u") {
        return false;
    }
    match serde_json::from_str::<PeerMarker>(text) {
        Ok(PeerMarker(found)) => found,
        // Valid JSON that is not an object: no reader sees a `type` in it.
        Err(err) if err.is_data() => false,
        Err(_) => true,
    }
}

/// Whether a JSON object has a top-level `type` member equal to [`PEER_TYPE`].
struct PeerMarker(bool);

impl<'de> Deserialize<'de> for PeerMarker {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = bool;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
                let mut found = false;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "type" {
                        found |= map.next_value::<Value>()?.as_str() == Some(PEER_TYPE);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(found)
            }
        }
        deserializer.deserialize_map(Members).map(PeerMarker)
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::*;

    #[test]
    fn peer_frames_are_recognised_only_by_their_type() {
        assert!(is_peer_frame(r#"{"type":"__peer","peer":"agent","state":"joined"}"#));
        assert!(is_peer_frame(r#"{ "state":"left", "type" : "__peer" }"#));
        assert!(!is_peer_frame(r#"{"type":"say","text":"__peer"}"#));
        assert!(is_peer_frame(r#"{"type":"\u005f_peer","peer":"agent","state":"left"}"#));
        assert!(is_peer_frame(r#"{"type":"say","type":"__peer","peer":"agent","state":"left"}"#));
        assert!(is_peer_frame(r#"{"type":"__peer","peer":"agent","state":"left","x":"\ud800"}"#));
        assert!(!is_peer_frame(r#"["__peer"]"#));
        assert!(is_peer_frame("not json __peer"), "unreadable frames that mention the marker are held back");
        assert!(!is_peer_frame(r#"{"type":"say","text":"\u005f_peer"}"#));
        let notice = PeerNotice::new(PeerRole::Phone, PeerState::Left);
        assert_eq!(PeerNotice::parse(&notice.to_json()), Some(notice));
    }
}
