//! The agent's VAPID key pair (RFC 8292): a P-256 key made on first use and kept in the home
//! (`vapid_key`, 0600, the 32-byte private scalar as base64url). Its public half, an uncompressed
//! point in base64url, is what `hello_ok` offers as `vapid_public_key` and what the page passes to
//! `PushManager.subscribe` as `applicationServerKey`.

use std::fmt;

use anyhow::{anyhow, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use web_push_native::jwt_simple::algorithms::{ECDSAP256KeyPairLike, ECDSAP256PublicKeyLike, ES256KeyPair};
use web_push_native::jwt_simple::claims::Claims;

use crate::state::{read_text_if_exists, Home};

/// The private key's file in the home.
pub const VAPID_KEY_FILE: &str = "vapid_key";

/// How long a VAPID token is good for (RFC 8292 allows at most 24 hours).
pub const JWT_LIFETIME: std::time::Duration = std::time::Duration::from_secs(12 * 60 * 60);

/// A VAPID key pair. `Debug` shows the public key only.
pub struct VapidKey {
    pair: ES256KeyPair,
    public: String,
}

impl fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VapidKey").field("public", &self.public).finish_non_exhaustive()
    }
}

impl VapidKey {
    /// Reads the home's key, making and saving one (0600) the first time.
    pub fn load_or_create(home: &Home) -> Result<Self> {
        let path = home.path(VAPID_KEY_FILE);
        if let Some(text) = read_text_if_exists(&path)? {
            crate::state::check_private(&path, false)?;
            let bytes = URL_SAFE_NO_PAD
                .decode(text.trim())
                .map_err(|_| anyhow!("{} is not a VAPID key (base64url expected)", path.display()))?;
            return Self::from_private(&bytes).with_context(|| format!("{} is not a VAPID key", path.display()));
        }
        let key = Self::generate();
        home.write_atomic(VAPID_KEY_FILE, format!("{}\n", URL_SAFE_NO_PAD.encode(key.pair.to_bytes())).as_bytes())?;
        Ok(key)
    }

    /// A fresh key pair (not saved).
    pub fn generate() -> Self {
        Self::wrap(ES256KeyPair::generate())
    }

    /// A key from its 32-byte private scalar.
    pub fn from_private(bytes: &[u8]) -> Result<Self> {
        let pair = ES256KeyPair::from_bytes(bytes).map_err(|_| anyhow!("not a P-256 private key"))?;
        Ok(Self::wrap(pair))
    }

    fn wrap(pair: ES256KeyPair) -> Self {
        let public = URL_SAFE_NO_PAD.encode(pair.public_key().public_key().to_bytes_uncompressed());
        VapidKey { pair, public }
    }

    /// The public key as `hello_ok` carries it: base64url (no padding) of the 65-byte point.
    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// `Authorization: vapid t=<JWT>, k=<public key>` for a push service at `origin` (RFC 8292):
    /// an ES256 JWT naming the origin (`aud`), the contact (`sub`) and an expiry [`JWT_LIFETIME`] ahead.
    pub fn authorization(&self, origin: &str, contact: &str) -> Result<String> {
        let claims = Claims::create(JWT_LIFETIME.into()).with_audience(origin).with_subject(contact);
        let token = self.pair.sign(claims).map_err(|err| anyhow!("could not sign the VAPID token: {err}"))?;
        Ok(format!("vapid t={token}, k={}", self.public))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_kept_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        home.ensure().unwrap();
        let first = VapidKey::load_or_create(&home).unwrap();
        let again = VapidKey::load_or_create(&home).unwrap();
        assert_eq!(first.public_key(), again.public_key());
        let bytes = URL_SAFE_NO_PAD.decode(first.public_key()).unwrap();
        assert_eq!(bytes.len(), 65);
        assert_eq!(bytes[0], 0x04, "an uncompressed point");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.path(VAPID_KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let shown = format!("{first:?}");
        let private = std::fs::read_to_string(home.path(VAPID_KEY_FILE)).unwrap();
        assert!(!shown.contains(private.trim()), "Debug never shows the private key");
    }

    #[test]
    fn a_damaged_key_file_is_an_error_that_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        home.ensure().unwrap();
        home.write_atomic(VAPID_KEY_FILE, b"not-a-key!!\n").unwrap();
        let err = VapidKey::load_or_create(&home).unwrap_err();
        assert!(format!("{err:#}").contains(VAPID_KEY_FILE), "{err:#}");
    }
}
