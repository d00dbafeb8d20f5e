//! The relay's wire lives in `protocol::relay`; this path names the two items hosted voice's
//! session still imports from here, until its rewrite imports them from there.

pub use crate::protocol::relay::{is_notice, Presence};
