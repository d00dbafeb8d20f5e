//! The self-issued Ed25519 identity of a voxa home (docs/PROTOCOL.md, "Environments"): `identity.key` holds the 32-byte
//! seed as hex (0600); the public key in hex is the home's **envKey**.

use anyhow::{anyhow, Result};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rand::TryRngCore;

use crate::error::ConfigError;
use crate::secret::is_lower_hex;
use crate::state::{check_private, read_text_if_exists, Home};

/// File holding the identity seed.
pub const IDENTITY_FILE: &str = "identity.key";
/// Length in hex characters of an envKey (an Ed25519 public key).
pub const ENV_KEY_HEX_LEN: usize = 64;
/// Shortest and longest nonce, in hex characters, an environment signs.
pub const NONCE_HEX_LEN: std::ops::RangeInclusive<usize> = 32..=128;
/// Prefix of every signed hello nonce: the key signs nothing but voxa hellos.
const NONCE_CONTEXT: &[u8] = b"voxa-env-hello/1\n";

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

    /// Signs a host's hello nonce; the answer is 128 hex characters.
    pub fn sign_nonce(&self, nonce: &str) -> String {
        hex::encode(self.key.sign(&nonce_message(nonce)).to_bytes())
    }
}

fn nonce_message(nonce: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(NONCE_CONTEXT.len() + nonce.len());
    message.extend_from_slice(NONCE_CONTEXT);
    message.extend_from_slice(nonce.as_bytes());
    message
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

/// True when `signature` (hex) is `env_key`'s signature over the hello `nonce`.
pub fn verify_nonce(env_key: &str, nonce: &str, signature: &str) -> bool {
    let Some(key) = parse_env_key(env_key) else { return false };
    let mut bytes = [0u8; 64];
    if signature.len() != 128 || hex::decode_to_slice(signature, &mut bytes).is_err() {
        return false;
    }
    key.verify_strict(&nonce_message(nonce), &Signature::from_bytes(&bytes)).is_ok()
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

        let nonce = crate::protocol::new_nonce().unwrap();
        assert!(is_valid_nonce(&nonce));
        let signature = first.sign_nonce(&nonce);
        assert!(verify_nonce(&first.env_key(), &nonce, &signature));
        assert!(!verify_nonce(&first.env_key(), &crate::protocol::new_nonce().unwrap(), &signature));
        let other = Identity::generate().unwrap();
        assert!(!verify_nonce(&other.env_key(), &nonce, &signature));
        assert!(!verify_nonce(&first.env_key(), &nonce, "00"));
        assert!(!verify_nonce("zz", &nonce, &signature));
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
