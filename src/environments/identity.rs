//! The self-issued Ed25519 identity of a voxa home (docs/PROTOCOL.md, "Environments"): `identity.key` holds the 32-byte
//! seed as hex (0600); the public key in hex is the home's **envKey**.

use anyhow::{anyhow, Result};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rand::TryRngCore;

use crate::error::ConfigError;
use crate::secret::{is_lower_hex, Secret};
use crate::state::{check_private, read_text_if_exists, Home};

/// File holding the identity seed.
pub const IDENTITY_FILE: &str = "identity.key";
/// Length in hex characters of an envKey (an Ed25519 public key).
pub const ENV_KEY_HEX_LEN: usize = 64;
/// Shortest and longest nonce, in hex characters, an environment signs.
pub const NONCE_HEX_LEN: std::ops::RangeInclusive<usize> = 32..=128;
/// Prefix of every signed hello: the key signs nothing but voxa environment hellos.
const HELLO_CONTEXT: &[u8] = b"voxa-env-hello/2\n";
/// Prefix of a signed sealed hello (protocol 3), which also covers the session's handshake hash.
const SEALED_HELLO_CONTEXT: &[u8] = b"voxa-env-hello/3\n";
/// The role label in what the environment signs: the signature answers a host, never the reverse.
pub const ENVIRONMENT_ROLE: &str = "environment";

/// What an environment's hello signature covers: the pairing (the hash of the relay code the
/// hello arrived on), both nonces and the direction. A signature made for one pairing proves
/// nothing on another, so someone holding two codes of one environment cannot relay its answer
/// from one to the other (docs/PROTOCOL.md, "Environments").
#[derive(Clone, Copy, Debug)]
pub struct HelloBinding<'a> {
    /// [`code_hash`] of the pairing's relay code.
    pub code_hash: &'a [u8; 32],
    /// The host's nonce, from its hello.
    pub host_nonce: &'a str,
    /// The environment's nonce, sent beside the signature.
    pub env_nonce: &'a str,
    /// A sealed session's Noise handshake hash (protocol 3): the signature then proves that
    /// this environment holds the far end of exactly this channel, so no one in between (a
    /// relay running two handshakes) can pass it on. `None` for a protocol-2 hello.
    pub handshake: Option<&'a [u8; 32]>,
}

/// SHA-256 of a pairing's relay code, as both sides put it in [`HelloBinding`].
pub fn code_hash(code: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(code.as_bytes()).into()
}

/// This home's signing key. `Debug` never shows the seed.
pub struct Identity {
    key: SigningKey,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identity({})", self.env_key())
    }
}

impl Identity {
    /// A fresh identity from the OS CSPRNG.
    pub fn generate() -> Result<Self> {
        let mut seed = [0u8; 32];
        rand::rngs::OsRng
            .try_fill_bytes(&mut seed)
            .map_err(|err| anyhow!("the OS random number generator failed: {err}"))?;
        let key = SigningKey::from_bytes(&seed);
        seed.fill(0);
        Ok(Identity { key })
    }

    /// The identity of `home`, if it has one.
    pub fn load(home: &Home) -> Result<Option<Self>> {
        let path = home.path(IDENTITY_FILE);
        let Some(text) = read_text_if_exists(&path)? else { return Ok(None) };
        check_private(&path, false)?;
        let text = text.trim();
        let mut seed = [0u8; 32];
        if text.len() != 64 || !is_lower_hex(text) || hex::decode_to_slice(text, &mut seed).is_err() {
            return Err(ConfigError::new(format!(
                "{} is not a voxa identity (expected 64 hex characters); remove it to create a new identity \
                 (hosts paired with this machine must then be paired again)",
                path.display()
            ))
            .into());
        }
        let key = SigningKey::from_bytes(&seed);
        seed.fill(0);
        Ok(Some(Identity { key }))
    }

    /// The identity of `home`, created (0600) on first need.
    pub fn load_or_create(home: &Home) -> Result<Self> {
        home.ensure()?;
        if let Some(identity) = Self::load(home)? {
            return Ok(identity);
        }
        let identity = Self::generate()?;
        let mut text = hex::encode(identity.key.to_bytes());
        text.push('\n');
        home.write_atomic(IDENTITY_FILE, text.as_bytes())?;
        text.replace_range(.., &"0".repeat(text.len()));
        Ok(identity)
    }

    /// The envKey: the public key as 64 lowercase hex characters.
    pub fn env_key(&self) -> String {
        hex::encode(self.key.verifying_key().to_bytes())
    }

    /// Signs the answer to a host's hello; the signature is 128 hex characters.
    pub fn sign_hello(&self, binding: &HelloBinding<'_>) -> String {
        hex::encode(self.key.sign(&hello_message(binding)).to_bytes())
    }
}

/// `voxa-env-hello/2\n` `role=environment\n` `code=<64 hex>\n` `host=<nonce>\n` `env=<nonce>\n`;
/// a sealed hello is `voxa-env-hello/3\n`, the same lines and `hash=<64 hex>\n`.
fn hello_message(binding: &HelloBinding<'_>) -> Vec<u8> {
    let mut message =
        Vec::with_capacity(SEALED_HELLO_CONTEXT.len() + 200 + binding.host_nonce.len() + binding.env_nonce.len());
    let hash = binding.handshake.map(hex::encode);
    message.extend_from_slice(if hash.is_some() { SEALED_HELLO_CONTEXT } else { HELLO_CONTEXT });
    let code = hex::encode(binding.code_hash);
    let lines = [
        ("role", Some(ENVIRONMENT_ROLE)),
        ("code", Some(code.as_str())),
        ("host", Some(binding.host_nonce)),
        ("env", Some(binding.env_nonce)),
        ("hash", hash.as_deref()),
    ];
    for (label, value) in lines.into_iter().filter_map(|(label, value)| Some((label, value?))) {
        message.extend_from_slice(label.as_bytes());
        message.push(b'=');
        message.extend_from_slice(value.as_bytes());
        message.push(b'\n');
    }
    message
}

/// The Noise pre-shared key's input on a pairing: the hash of the pairing's bearer, which the
/// host holds and the environment stored, and a relay that knows the pairing's code does not.
pub fn pairing_psk_input(bearer_hash: &[u8; 32]) -> Secret {
    Secret::from_string(hex::encode(bearer_hash))
}

/// True when `nonce` has the shape an environment agrees to sign.
pub fn is_valid_nonce(nonce: &str) -> bool {
    NONCE_HEX_LEN.contains(&nonce.len()) && is_lower_hex(nonce)
}

/// Parses an envKey: 64 lowercase hex characters that encode a valid Ed25519 public key.
pub fn parse_env_key(text: &str) -> Option<VerifyingKey> {
    if text.len() != ENV_KEY_HEX_LEN || !is_lower_hex(text) {
        return None;
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(text, &mut bytes).ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// True when `signature` (hex) is `env_key`'s hello signature for exactly `binding`.
pub fn verify_hello(env_key: &str, binding: &HelloBinding<'_>, signature: &str) -> bool {
    let Some(key) = parse_env_key(env_key) else { return false };
    let mut bytes = [0u8; 64];
    if !is_valid_nonce(binding.host_nonce)
        || !is_valid_nonce(binding.env_nonce)
        || signature.len() != 128
        || hex::decode_to_slice(signature, &mut bytes).is_err()
    {
        return false;
    }
    key.verify_strict(&hello_message(binding), &Signature::from_bytes(&bytes)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn identity_is_created_private_once_and_signs_nonces() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        assert!(Identity::load(&home).unwrap().is_none());
        let first = Identity::load_or_create(&home).unwrap();
        let mode = fs::metadata(home.path(IDENTITY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = Identity::load_or_create(&home).unwrap();
        assert_eq!(first.env_key(), again.env_key());
        assert!(parse_env_key(&first.env_key()).is_some());
        assert!(!format!("{first:?}").contains(&hex::encode(first.key.to_bytes())));

        let (host, env) = (crate::protocol::new_nonce().unwrap(), crate::protocol::new_nonce().unwrap());
        assert!(is_valid_nonce(&host));
        let code = code_hash(&"0".repeat(32));
        let binding = HelloBinding { code_hash: &code, host_nonce: &host, env_nonce: &env, handshake: None };
        let signature = first.sign_hello(&binding);
        assert!(verify_hello(&first.env_key(), &binding, &signature));
        let other = Identity::generate().unwrap();
        assert!(!verify_hello(&other.env_key(), &binding, &signature));
        assert!(!verify_hello(&first.env_key(), &binding, "00"));
        assert!(!verify_hello("zz", &binding, &signature));
    }

    #[test]
    fn a_hello_signature_holds_only_for_its_pairing_and_nonces() {
        let identity = Identity::generate().unwrap();
        let key = identity.env_key();
        let (host, env) = ("a".repeat(32), "b".repeat(32));
        let (code, other_code) = (code_hash(&"0".repeat(32)), code_hash(&"1".repeat(32)));
        let signed = HelloBinding { code_hash: &code, host_nonce: &host, env_nonce: &env, handshake: None };
        let signature = identity.sign_hello(&signed);
        assert!(verify_hello(&key, &signed, &signature));
        let elsewhere = [
            HelloBinding { code_hash: &other_code, ..signed },
            HelloBinding { host_nonce: &env, ..signed },
            HelloBinding { env_nonce: &host, ..signed },
            // The two nonces swapped: the direction is part of what is signed.
            HelloBinding { host_nonce: &env, env_nonce: &host, ..signed },
        ];
        for binding in elsewhere {
            assert!(!verify_hello(&key, &binding, &signature), "{binding:?}");
        }
        assert!(!verify_hello(&key, &HelloBinding { env_nonce: "", ..signed }, &signature));
    }

    #[test]
    fn a_loose_or_corrupt_identity_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        Identity::load_or_create(&home).unwrap();
        let path = home.path(IDENTITY_FILE);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        assert!(format!("{:#}", Identity::load(&home).unwrap_err()).contains("chmod 600"));
        home.write_atomic(IDENTITY_FILE, b"not a key").unwrap();
        assert!(format!("{:#}", Identity::load(&home).unwrap_err()).contains("not a voxa identity"));
    }

    #[test]
    fn nonces_must_be_hex_of_sane_length() {
        assert!(!is_valid_nonce(""));
        assert!(!is_valid_nonce(&"a".repeat(31)));
        assert!(!is_valid_nonce(&"A".repeat(32)));
        assert!(!is_valid_nonce(&"a".repeat(129)));
        assert!(is_valid_nonce(&"a".repeat(128)));
    }
}
