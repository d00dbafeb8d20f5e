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

/// Set (to a descriptor number) in the environment of a voxa that [`reexec_without_secrets`]
/// started: the secret variables wait there, not in the environment.
pub const SECRETS_FD_ENV: &str = "VOXA_SECRETS_FD";
/// Most bytes of secrets handed over to the re-executed process.
const MAX_HANDED_SECRETS: usize = 16 << 10;

/// The kernel keeps the environment a process was started with readable in `/proc/<pid>/environ`
/// for its whole life, whatever the process removes from its own copy. So when that block holds
/// a [`SECRET_ENV`] variable, voxa executes itself again at once (same program, same arguments)
/// with an environment without them, handing their values over through a pipe whose read end is
/// the only descriptor it passes on ([`SECRETS_FD_ENV`] names it). Call it first, while the
/// process has one thread. Returns only when there was nothing to move or the re-execution
/// failed (the caller then goes on with the secrets in the environment, as before); Linux only.
pub fn reexec_without_secrets() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;

        if std::env::var_os(SECRETS_FD_ENV).is_some() {
            return Ok(()); // Already the re-executed process.
        }
        let mut payload = Vec::new();
        for name in SECRET_ENV {
            if let Some(value) = std::env::var_os(name) {
                payload.extend_from_slice(name.as_bytes());
                payload.push(0);
                payload.extend_from_slice(value.as_encoded_bytes());
                payload.push(0);
            }
        }
        if payload.is_empty() {
            return Ok(());
        }
        if payload.len() > MAX_HANDED_SECRETS {
            return Err(std::io::Error::other("the secret variables are too long to hand over"));
        }
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // A pipe holds 64 KiB: the whole payload is written before the exec, which closes this end.
        std::fs::File::from(write).write_all(&payload)?;
        payload.fill(0);
        rustix::io::fcntl_setfd(&read, rustix::io::FdFlags::empty())?;
        let mut args = std::env::args_os();
        let mut command = std::process::Command::new("/proc/self/exe");
        if let Some(arg0) = args.next() {
            command.arg0(arg0);
        }
        command.args(args).env(SECRETS_FD_ENV, read.as_raw_fd().to_string());
        for name in SECRET_ENV {
            command.env_remove(name);
        }
        // Only returns on failure.
        let err = command.exec();
        drop(read);
        return Err(err);
    }
    #[allow(unreachable_code)]
    Ok(())
}

/// In a process [`reexec_without_secrets`] started: reads the handed-over secrets and puts them
/// in this process's own copy of the environment (never in the block `/proc/<pid>/environ`
/// shows), where the command line parser and [`EnvSecrets::take`] find them as before. Call it
/// first, while the process has one thread.
pub fn restore_handed_secrets() -> std::io::Result<()> {
    let Some(fd) = std::env::var_os(SECRETS_FD_ENV) else { return Ok(()) };
    std::env::remove_var(SECRETS_FD_ENV);
    let fd: u32 = fd
        .to_str()
        .and_then(|fd| fd.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("{SECRETS_FD_ENV} is not a descriptor number")))?;
    // Opened again by name: the inherited descriptor stays open but is drained (a pipe whose
    // writer is gone), so whatever inherits it later reads nothing.
    let mut payload = Vec::new();
    {
        use std::io::Read;
        let pipe = std::fs::File::open(format!("/proc/self/fd/{fd}"))?;
        pipe.take(MAX_HANDED_SECRETS as u64 + 1).read_to_end(&mut payload)?;
    }
    if payload.len() > MAX_HANDED_SECRETS {
        payload.fill(0);
        return Err(std::io::Error::other("too many bytes of handed-over secrets"));
    }
    let mut fields = payload.split(|b| *b == 0);
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if let Some(name) = SECRET_ENV.iter().find(|known| known.as_bytes() == name) {
            if let Ok(value) = std::str::from_utf8(value) {
                std::env::set_var(name, value);
            }
        }
    }
    payload.fill(0);
    Ok(())
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
