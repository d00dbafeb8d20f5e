//! The pairing line `voxa env issue` prints and `voxa env add` reads:
//!
//! `voxa-env:1:<envKey>:<relay as base64url>:<code>:<bearer>:<check>`
//!
//! `<check>` is the first 8 hex characters of SHA-256 over everything before it, so a mistyped,
//! altered or cut line is refused with a sentence instead of pairing with the wrong machine.
//! Whitespace anywhere is ignored (terminals wrap long lines when they are copied).

use std::fmt;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::identity::parse_env_key;
use crate::config::RelayUrl;
use crate::secret::{is_lower_hex, Secret, SECRET_HEX_LEN};

/// First field of every line.
pub const LINE_TAG: &str = "voxa-env";
/// Version of the line format.
pub const LINE_VERSION: &str = "1";
/// Prefix of every pairing bearer.
pub const BEARER_PREFIX: &str = "vbx_";
/// Hex characters of the checksum.
const CHECK_HEX_LEN: usize = 8;
/// Fields of a version-1 line, tag and version included.
const FIELDS: usize = 7;

/// Everything a host needs to reach and authenticate to one environment.
#[derive(Clone)]
pub struct PairingLine {
    pub env_key: String,
    pub relay: RelayUrl,
    pub code: Secret,
    pub bearer: Secret,
}

impl fmt::Debug for PairingLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PairingLine")
            .field("env_key", &self.env_key)
            .field("relay", &self.relay.as_str())
            .finish_non_exhaustive()
    }
}

/// Why a pasted line was refused. Never carries any part of the code or bearer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineError {
    NotALine,
    UnsupportedVersion(String),
    Truncated { found: usize },
    TooManyFields { found: usize },
    BadCheck,
    Altered,
    BadEnvKey,
    BadRelay(String),
    BadCode,
    BadBearer,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineError::NotALine => {
                write!(f, "this is not a pairing line: it should start with `{LINE_TAG}:{LINE_VERSION}:` (copy the whole line `voxa env issue` printed)")
            }
            LineError::UnsupportedVersion(version) => {
                let shown: String = version.chars().take(8).collect();
                write!(f, "pairing line version {shown:?} is not supported by this voxa (it reads version {LINE_VERSION}); update voxa on this machine")
            }
            LineError::Truncated { found } => {
                write!(f, "the pairing line is cut short ({found} of {FIELDS} fields); copy the whole line")
            }
            LineError::TooManyFields { found } => {
                write!(f, "the pairing line has {found} fields, expected {FIELDS}; copy exactly one line")
            }
            LineError::BadCheck => {
                write!(
                    f,
                    "the pairing line's checksum (its last {CHECK_HEX_LEN} characters) is damaged; copy the whole line"
                )
            }
            LineError::Altered => {
                f.write_str("the pairing line does not match its checksum: it was altered or mistyped; copy it again")
            }
            LineError::BadEnvKey => f.write_str("the pairing line's envKey is not a valid Ed25519 public key"),
            LineError::BadRelay(why) => write!(f, "the pairing line's relay is not usable: {why}"),
            LineError::BadCode => write!(f, "the pairing line's relay code is not {SECRET_HEX_LEN} hex characters"),
            LineError::BadBearer => {
                write!(
                    f,
                    "the pairing line's bearer is not `{BEARER_PREFIX}` followed by {SECRET_HEX_LEN} hex characters"
                )
            }
        }
    }
}

impl std::error::Error for LineError {}

impl PairingLine {
    /// The line to print.
    pub fn encode(&self) -> String {
        let relay = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.relay.as_str());
        let body = format!(
            "{LINE_TAG}:{LINE_VERSION}:{}:{relay}:{}:{}",
            self.env_key,
            self.code.expose(),
            self.bearer.expose()
        );
        let check = checksum(&body);
        format!("{body}:{check}")
    }

    /// Parses a pasted line.
    pub fn parse(text: &str) -> Result<Self, LineError> {
        let line: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() != Some(&LINE_TAG) {
            return Err(LineError::NotALine);
        }
        match fields.get(1) {
            Some(&LINE_VERSION) => {}
            Some(other) if !other.is_empty() => return Err(LineError::UnsupportedVersion((*other).to_owned())),
            _ => return Err(LineError::Truncated { found: fields.len() }),
        }
        if fields.len() < FIELDS {
            return Err(LineError::Truncated { found: fields.len() });
        }
        if fields.len() > FIELDS {
            return Err(LineError::TooManyFields { found: fields.len() });
        }
        let check = fields[6];
        if check.len() != CHECK_HEX_LEN || !is_lower_hex(check) {
            return Err(LineError::BadCheck);
        }
        let body_len = line.len() - check.len() - 1;
        if checksum(&line[..body_len]) != check {
            return Err(LineError::Altered);
        }
        let env_key = fields[2];
        if parse_env_key(env_key).is_none() {
            return Err(LineError::BadEnvKey);
        }
        let relay = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(fields[3])
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| LineError::BadRelay("not base64url text".into()))?;
        let relay = RelayUrl::parse(&relay).map_err(|err| LineError::BadRelay(err.0))?;
        let code = Secret::parse_hex128(fields[4]).map_err(|_| LineError::BadCode)?;
        let bearer = parse_bearer(fields[5]).ok_or(LineError::BadBearer)?;
        Ok(PairingLine { env_key: env_key.to_owned(), relay, code, bearer })
    }
}

/// A bearer in its exact form: `vbx_` and 32 lowercase hex characters.
pub fn parse_bearer(text: &str) -> Option<Secret> {
    let hex = text.strip_prefix(BEARER_PREFIX)?;
    (hex.len() == SECRET_HEX_LEN && is_lower_hex(hex)).then(|| Secret::from_string(text.to_owned()))
}

/// True when `text` looks like a bearer (used to pick what `revoke` was given, never to accept one).
pub fn looks_like_bearer(text: &str) -> bool {
    text.starts_with(BEARER_PREFIX)
}

/// A fresh bearer: `vbx_` and 128 bits from the OS CSPRNG.
pub fn new_bearer() -> anyhow::Result<Secret> {
    let random = Secret::generate()?;
    Ok(Secret::from_string(format!("{BEARER_PREFIX}{}", random.expose())))
}

fn checksum(body: &str) -> String {
    let digest = Sha256::digest(body.as_bytes());
    hex::encode(&digest[..CHECK_HEX_LEN / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::identity::Identity;

    fn sample() -> PairingLine {
        PairingLine {
            env_key: Identity::generate().unwrap().env_key(),
            relay: RelayUrl::parse("https://relay.example.com:8443/base").unwrap(),
            code: Secret::generate().unwrap(),
            bearer: new_bearer().unwrap(),
        }
    }

    #[test]
    fn a_line_round_trips_and_survives_wrapping() {
        let line = sample();
        let text = line.encode();
        assert!(text.starts_with("voxa-env:1:"));
        assert!(!text.contains(' '));
        let back = PairingLine::parse(&text).unwrap();
        assert_eq!(back.env_key, line.env_key);
        assert_eq!(back.relay, line.relay);
        assert_eq!(back.code, line.code);
        assert_eq!(back.bearer, line.bearer);
        let wrapped = format!("  {}\n{}  \r\n", &text[..40], &text[40..]);
        assert_eq!(PairingLine::parse(&wrapped).unwrap().bearer, line.bearer);
    }

    #[test]
    fn every_altered_character_is_refused() {
        let text = sample().encode();
        for index in 0..text.len() {
            let original = text.as_bytes()[index];
            let replacement = if original == b'a' { b'b' } else { b'a' };
            let mut bytes = text.clone().into_bytes();
            bytes[index] = replacement;
            let altered = String::from_utf8(bytes).unwrap();
            assert!(PairingLine::parse(&altered).is_err(), "altering byte {index} was accepted");
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let text = sample().encode();
        for end in 0..text.len() {
            assert!(PairingLine::parse(&text[..end]).is_err(), "cut at {end} was accepted");
        }
        assert_eq!(PairingLine::parse(&text[..text.len() - 12]).unwrap_err(), LineError::Truncated { found: 6 });
        assert_eq!(PairingLine::parse(&text[..text.len() - 3]).unwrap_err(), LineError::BadCheck);
    }

    #[test]
    fn refusals_say_what_is_wrong_without_echoing_secrets() {
        let line = sample();
        let text = line.encode();
        assert_eq!(PairingLine::parse("https://relay/?code=x").unwrap_err(), LineError::NotALine);
        assert_eq!(
            PairingLine::parse(&text.replacen(":1:", ":2:", 1)).unwrap_err(),
            LineError::UnsupportedVersion("2".into())
        );
        assert_eq!(PairingLine::parse(&format!("{text}:extra")).unwrap_err(), LineError::TooManyFields { found: 8 });
        let mut flipped = text.clone();
        let last = flipped.pop().unwrap();
        flipped.push(if last == '0' { '1' } else { '0' });
        let err = PairingLine::parse(&flipped).unwrap_err();
        assert_eq!(err, LineError::Altered);
        for err in [err, LineError::BadBearer, LineError::BadCode, LineError::Truncated { found: 3 }] {
            let shown = err.to_string();
            assert!(!shown.contains(line.bearer.expose()) && !shown.contains(line.code.expose()), "{shown}");
        }
        assert!(!format!("{line:?}").contains(line.bearer.expose()));
        assert!(!format!("{line:?}").contains(line.code.expose()));
    }

    #[test]
    fn well_checksummed_lines_with_bad_fields_are_refused_by_field() {
        let good = sample();
        let build = |env_key: &str, relay: &str, code: &str, bearer: &str| {
            let relay = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(relay);
            let body = format!("voxa-env:1:{env_key}:{relay}:{code}:{bearer}");
            format!("{body}:{}", checksum(&body))
        };
        let (key, code, bearer) =
            (good.env_key.clone(), good.code.expose().to_owned(), good.bearer.expose().to_owned());
        let relay = "https://relay.example.com";
        assert_eq!(PairingLine::parse(&build(&key, relay, &code, &bearer)).unwrap().env_key, key);
        assert_eq!(
            PairingLine::parse(&build(&"0".repeat(63), relay, &code, &bearer)).unwrap_err(),
            LineError::BadEnvKey
        );
        let upper = key.to_uppercase();
        assert_eq!(PairingLine::parse(&build(&upper, relay, &code, &bearer)).unwrap_err(), LineError::BadEnvKey);
        assert!(matches!(
            PairingLine::parse(&build(&key, "http://relay.example.com", &code, &bearer)).unwrap_err(),
            LineError::BadRelay(_)
        ));
        assert_eq!(PairingLine::parse(&build(&key, relay, "abc", &bearer)).unwrap_err(), LineError::BadCode);
        let no_prefix = bearer.trim_start_matches(BEARER_PREFIX);
        assert_eq!(PairingLine::parse(&build(&key, relay, &code, no_prefix)).unwrap_err(), LineError::BadBearer);
    }

    #[test]
    fn bearers_have_one_exact_shape() {
        let bearer = new_bearer().unwrap();
        assert!(parse_bearer(bearer.expose()).is_some());
        assert!(parse_bearer("vbx_0123").is_none());
        assert!(parse_bearer(&format!("VBX_{}", "a".repeat(32))).is_none());
        assert!(parse_bearer(&format!("vbx_{}", "A".repeat(32))).is_none());
        assert_ne!(new_bearer().unwrap(), bearer);
    }
}
