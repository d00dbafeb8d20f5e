//! Sealed sessions (protocol 3, docs/PROTOCOL.md "Sealed sessions"): a Noise
//! `NNpsk0_25519_AESGCM_SHA256` handshake keyed by the pairing's auth token and bound to the agent's
//! challenge, then every frame of the session as one Noise transport message, so a relay carries
//! ciphertext it can neither read nor forge, replay, reorder or drop unnoticed.
//!
//! - [`handshake`]: the two messages, carried in `hello` and `hello_ok`.
//! - [`transport`]: a session frame ⇄ Noise transport messages (kind byte, parts).
//! - [`socket`]: the client's socket wrapper and the agent's writer and reader, which sit between
//!   the socket and the session so neither the session nor its callers see the seal.
//! - [`ticks`]: the sealed ticks that make a dropped frame or a dead socket noticed.

pub mod handshake;
pub mod socket;
pub mod ticks;
pub mod transport;

use sha2::{Digest, Sha256};

use crate::secret::Secret;

pub use handshake::{Initiator, Responder};
pub use socket::{broken_close, seal_writer, stalled_close, Inbound, Socket};
pub use transport::{Opener, Plain, Sealer};

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_AESGCM_SHA256";
/// Largest Noise message (the Noise Protocol Framework's limit).
pub const MAX_NOISE_MESSAGE: usize = 65_535;
/// AES-GCM tag length.
pub const TAG_LEN: usize = 16;
/// Largest body of one transport message after its kind byte: 65,535 − 16 (tag) − 1 (kind).
pub const MAX_PART: usize = MAX_NOISE_MESSAGE - TAG_LEN - 1;

const PSK_LABEL: &str = "voxa-psk/3\n";
const PROLOGUE_LABEL: &str = "voxa/3\n";

/// The pre-shared key: SHA-256(`voxa-psk/3\n` + T), with T the auth token's 32 lowercase hex
/// characters.
pub fn psk(token: &Secret) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(PSK_LABEL.as_bytes());
    hash.update(token.expose().as_bytes());
    hash.finalize().into()
}

/// The prologue: `voxa/3\n` + the challenge's nonce as sent (lowercase hex).
pub fn prologue(challenge: &str) -> Vec<u8> {
    [PROLOGUE_LABEL.as_bytes(), challenge.as_bytes()].concat()
}

/// A sealed session failed: a frame did not decrypt, came out of order, repeated, was not sealed
/// or could not be read. The session closes `sealed-session-broken` and nothing in it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken(pub &'static str);

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sealed session broken: {}", self.0)
    }
}

impl std::error::Error for Broken {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key schedule inputs of docs/PROTOCOL.md's sealed-session example.
    #[test]
    fn psk_and_prologue_follow_the_documented_encodings() {
        let token = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        assert_eq!(hex::encode(psk(&token)), "fed243563102e6b2b86f65b0221a0a338496766d18898c2ab8ebd6f73ccdf1cb");
        assert_eq!(prologue("0123456789abcdef0123456789abcdef"), b"voxa/3\n0123456789abcdef0123456789abcdef");
        assert_eq!(MAX_PART, 65_518);
    }
}
