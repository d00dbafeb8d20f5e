//! Secrets: 128-bit values kept as 32 lowercase hex, redacted whenever printed, compared in
//! constant time.

use std::fmt;

use rand::TryRngCore;
use subtle::ConstantTimeEq;

/// Length in hex characters of a relay code or auth token.
pub const SECRET_HEX_LEN: usize = 32;

/// A secret string. `Debug` and `Display` never show it; only [`Secret::expose`] does.
#[derive(Clone)]
pub struct Secret(String);

/// Why a string is not a valid 128-bit hex secret. Carries no part of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretFormatError {
    WrongLength(usize),
    NotLowercaseHex,
}

impl fmt::Display for SecretFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretFormatError::WrongLength(len) => {
                write!(f, "expected {SECRET_HEX_LEN} hex characters, found {len}")
            }
            SecretFormatError::NotLowercaseHex => f.write_str("expected only lowercase hex characters"),
        }
    }
}

impl std::error::Error for SecretFormatError {}

impl Secret {
    /// 128 fresh bits from the OS CSPRNG.
    pub fn generate() -> anyhow::Result<Self> {
        let mut bytes = [0u8; SECRET_HEX_LEN / 2];
        rand::rngs::OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|err| anyhow::anyhow!("the OS random number generator failed: {err}"))?;
        Ok(Secret(hex::encode(bytes)))
    }

    /// Accepts exactly 32 lowercase hex characters (surrounding whitespace ignored).
    pub fn parse_hex128(text: &str) -> Result<Self, SecretFormatError> {
        let text = text.trim();
        if text.len() != SECRET_HEX_LEN {
            return Err(SecretFormatError::WrongLength(text.chars().count()));
        }
        if !is_lower_hex(text) {
            return Err(SecretFormatError::NotLowercaseHex);
        }
        Ok(Secret(text.to_owned()))
    }

    /// Wraps any string (relay tokens, bearers) without checking its format.
    pub fn from_string(value: String) -> Self {
        Secret(value)
    }

    /// The value itself, for the few places that must send or store it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison with a candidate presented by a peer.
    pub fn matches(&self, candidate: &str) -> bool {
        // Length is not secret (always 32 for tokens); the bytes are.
        self.0.as_bytes().ct_eq(candidate.as_bytes()).into()
    }
}

/// True when `text` is only `0-9a-f`.
pub fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.matches(&other.0)
    }
}

impl Eq for Secret {}

impl Drop for Secret {
    fn drop(&mut self) {
        // Best effort: overwrite the bytes we own before the allocation is freed.
        let bytes = std::mem::take(&mut self.0).into_bytes();
        let mut bytes = bytes;
        bytes.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&bytes);
    }
}

/// Environment variables that hold secrets. They are read once at start and removed from the
/// environment before any thread exists, so nothing started later inherits or lists them.
pub const SECRET_ENV: [&str; 2] = ["GEMINI_API_KEY", "VOXA_RELAY_TOKEN"];

/// Secrets this process was given in its environment, taken out of it.
#[derive(Clone, Debug, Default)]
pub struct EnvSecrets {
    /// `GEMINI_API_KEY`.
    pub gemini_api_key: Option<Secret>,
    /// `VOXA_RELAY_TOKEN`.
    pub relay_token: Option<Secret>,
}

impl EnvSecrets {
    /// Reads every [`SECRET_ENV`] variable and removes it from this process's environment. Call it
    /// while the process has one thread: changing the environment races with threads reading it.
    pub fn take() -> Self {
        let take = |name: &str| {
            let value = std::env::var_os(name)?;
            std::env::remove_var(name);
            value.into_string().ok().map(|value| value.trim().to_owned()).filter(|value| !value.is_empty())
        };
        let [gemini, relay] = SECRET_ENV;
        EnvSecrets {
            gemini_api_key: take(gemini).map(Secret::from_string),
            relay_token: take(relay).map(Secret::from_string),
        }
    }
}

/// Keeps other processes of this user — including the ones the tools start — out of this one:
/// not dumpable, so `/proc/<pid>/environ`, `/proc/<pid>/mem` and `ptrace` need privileges the
/// tools do not have. Linux only; elsewhere nothing changes.
pub fn protect_process() -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_are_32_lowercase_hex_and_distinct() {
        let a = Secret::generate().unwrap();
        let b = Secret::generate().unwrap();
        assert_eq!(a.expose().len(), 32);
        assert!(is_lower_hex(a.expose()));
        assert_ne!(a.expose(), b.expose());
    }

    #[test]
    fn debug_and_display_never_show_the_value() {
        let secret = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        assert!(!format!("{secret:?}").contains("0011"));
        assert!(!format!("{secret}").contains("0011"));
        assert!(!format!("{:?}", Some(&secret)).contains("0011"));
    }

    #[test]
    fn parse_rejects_bad_shapes_without_echoing_them() {
        assert_eq!(Secret::parse_hex128("abc").unwrap_err(), SecretFormatError::WrongLength(3));
        let upper = "00112233445566778899AABBCCDDEEFF";
        let err = Secret::parse_hex128(upper).unwrap_err();
        assert_eq!(err, SecretFormatError::NotLowercaseHex);
        assert!(!err.to_string().contains("AABB"));
        assert!(Secret::parse_hex128(" 00112233445566778899aabbccddeeff\n").is_ok());
    }

    #[test]
    fn matches_compares_whole_values() {
        let secret = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        assert!(secret.matches("00112233445566778899aabbccddeeff"));
        assert!(!secret.matches("00112233445566778899aabbccddeefe"));
        assert!(!secret.matches("00112233445566778899aabbccddeef"));
        assert!(!secret.matches(""));
    }
}
