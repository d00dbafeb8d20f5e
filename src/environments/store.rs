//! The files of multi-environment pairing (docs/PROTOCOL.md, "Environments"), all 0600 and replaced atomically:
//!
//! - `environments.json`: the registry — every environment this home knows, its own included
//!   (envKey, name, relay, when it was added). Nothing secret.
//! - `.pairings.json`: the credentials, keyed by envKey — `issued` (on an environment: pairings it
//!   handed out, with their relay code and the SHA-256 of their bearer, never the bearer itself),
//!   `outbound` (on a host: the bearer, relay and code it presents to each environment) and
//!   `revokedBearers` (SHA-256 of every bearer that must never work again).
//! - `.host-token`: 32 hex; every pairing action (issue, add, revoke, remove) must present it.
//!
//! Read-modify-write goes through [`update`], which holds an exclusive `flock` on
//! `.pairings.lock`, so a CLI command and a running agent never lose each other's changes.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{ConfigError, Refused};
use crate::protocol::ErrorCode;
use crate::secret::Secret;
use crate::state::{check_private, read_if_exists, read_text_if_exists, Home};

/// The registry file.
pub const REGISTRY_FILE: &str = "environments.json";
/// The credentials file.
pub const PAIRINGS_FILE: &str = ".pairings.json";
/// The host token file.
pub const HOST_TOKEN_FILE: &str = ".host-token";
/// Lock taken around every read-modify-write of the two files above.
const LOCK_FILE: &str = ".pairings.lock";
/// Version written into both files.
const FORMAT_VERSION: u32 = 1;

/// `environments.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Registry {
    #[serde(default)]
    pub version: u32,
    #[serde(default)]
    pub environments: Vec<EnvEntry>,
}

/// One known environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvEntry {
    pub env_key: String,
    pub name: String,
    /// Relay the environment dials for this home's pairing; absent for this home itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<String>,
    #[serde(default)]
    pub added_at: String,
    /// True for this home's own entry.
    #[serde(default, rename = "self", skip_serializing_if = "std::ops::Not::not")]
    pub is_self: bool,
}

impl Registry {
    /// The entry whose envKey or name is `target`.
    pub fn find(&self, target: &str) -> Option<&EnvEntry> {
        self.environments
            .iter()
            .find(|e| e.env_key == target)
            .or_else(|| self.environments.iter().find(|e| e.name == target))
    }

    /// Makes sure this home's own entry is present and current.
    pub fn set_self(&mut self, env_key: &str) {
        self.environments.retain(|e| !e.is_self || e.env_key == env_key);
        if !self.environments.iter().any(|e| e.is_self) {
            self.environments.retain(|e| e.env_key != env_key);
            self.environments.insert(
                0,
                EnvEntry {
                    env_key: env_key.to_owned(),
                    name: SELF_NAME.to_owned(),
                    relay: None,
                    added_at: now(),
                    is_self: true,
                },
            );
        }
    }
}

/// Name of this home's own entry.
pub const SELF_NAME: &str = "local";

/// `.pairings.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pairings {
    #[serde(default)]
    pub version: u32,
    /// On an environment: pairings handed out, keyed by the envKey they are bound to (its own).
    #[serde(default)]
    pub issued: BTreeMap<String, Vec<IssuedPairing>>,
    /// On a host: the credential for each environment, keyed by its envKey.
    #[serde(default)]
    pub outbound: BTreeMap<String, OutboundPairing>,
    /// Bearers that never work again, keyed by the envKey they were bound to.
    #[serde(default)]
    pub revoked_bearers: BTreeMap<String, Vec<RevokedBearer>>,
}

/// A pairing this environment issued.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedPairing {
    /// Public handle (`p_` + 8 hex) used in listings, audit and `revoke`.
    pub id: String,
    /// SHA-256 of the bearer, hex. The bearer itself is printed once and never stored here.
    pub bearer_sha256: String,
    pub relay: String,
    #[serde(with = "secret_text")]
    pub code: Secret,
    #[serde(default)]
    pub issued_at: String,
}

/// A credential this host holds for one environment.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundPairing {
    #[serde(with = "secret_text")]
    pub bearer: Secret,
    pub relay: String,
    #[serde(with = "secret_text")]
    pub code: Secret,
    #[serde(default)]
    pub added_at: String,
}

/// A bearer that was revoked.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokedBearer {
    /// The pairing it belonged to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub bearer_sha256: String,
    #[serde(default)]
    pub revoked_at: String,
}

impl Pairings {
    /// True when `hash` is among the revoked bearers (every entry compared in constant time).
    pub fn is_revoked(&self, hash: &[u8; 32]) -> bool {
        let mut found = subtle::Choice::from(0u8);
        for revoked in self.revoked_bearers.values().flatten() {
            found |= hash_matches(&revoked.bearer_sha256, hash);
        }
        found.into()
    }

    /// The SHA-256 of every revoked bearer (entries that are not 64 hex characters are skipped).
    pub fn revoked_hashes(&self) -> Vec<[u8; 32]> {
        self.revoked_bearers
            .values()
            .flatten()
            .filter_map(|r| {
                let mut hash = [0u8; 32];
                hex::decode_to_slice(&r.bearer_sha256, &mut hash).ok().map(|()| hash)
            })
            .collect()
    }

    /// Issued pairings that are not revoked.
    pub fn live_issued(&self) -> impl Iterator<Item = (&String, &IssuedPairing)> {
        self.issued.iter().flat_map(|(key, list)| list.iter().map(move |p| (key, p))).filter(|(_, p)| {
            let mut hash = [0u8; 32];
            hex::decode_to_slice(&p.bearer_sha256, &mut hash).is_ok() && !self.is_revoked(&hash)
        })
    }
}

/// Identity of one version of a file: inode, size and mtime. Every write of the pairing files
/// is an atomic rename, so a new version always has a new inode.
pub type Stamp = Option<(u64, u64, i64, i64)>;

/// The [`Stamp`] of `path` now; `None` when it does not exist.
pub fn stamp_of(path: &std::path::Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// SHA-256 of a bearer. Bearers carry 128 random bits, so an unsalted hash cannot be reversed by
/// guessing; storing only the hash keeps a copied `.pairings.json` of an environment useless.
pub fn bearer_hash(bearer: &str) -> [u8; 32] {
    Sha256::digest(bearer.as_bytes()).into()
}

/// Constant-time comparison of a stored hex hash with a computed one.
pub fn hash_matches(stored_hex: &str, hash: &[u8; 32]) -> subtle::Choice {
    let mut stored = [0u8; 32];
    if hex::decode_to_slice(stored_hex, &mut stored).is_err() {
        return subtle::Choice::from(0u8);
    }
    stored.ct_eq(hash)
}

/// Now, as RFC 3339 UTC seconds.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Reads the registry (empty when absent).
pub fn load_registry(home: &Home) -> Result<Registry> {
    read_json(home, REGISTRY_FILE)
}

/// Reads the credentials (empty when absent).
pub fn load_pairings(home: &Home) -> Result<Pairings> {
    read_json(home, PAIRINGS_FILE)
}

/// Runs `change` on both files under the pairing lock and writes back what it changed.
pub fn update<T>(home: &Home, change: impl FnOnce(&mut Registry, &mut Pairings) -> Result<T>) -> Result<T> {
    home.ensure()?;
    let lock = home.lock_file(LOCK_FILE)?;
    let mut registry = load_registry(home)?;
    let mut pairings = load_pairings(home)?;
    let (registry_before, pairings_before) = (json_of(&registry)?, json_of(&pairings)?);
    let out = change(&mut registry, &mut pairings)?;
    registry.version = FORMAT_VERSION;
    pairings.version = FORMAT_VERSION;
    let (registry_after, pairings_after) = (json_of(&registry)?, json_of(&pairings)?);
    // Credentials first: a crash between the two writes leaves a known environment without a
    // bearer (`environment-not-paired`), never a bearer for an environment nobody knows.
    if pairings_after != pairings_before || !home.path(PAIRINGS_FILE).exists() {
        home.write_atomic(PAIRINGS_FILE, &pairings_after)?;
    }
    if registry_after != registry_before || !home.path(REGISTRY_FILE).exists() {
        home.write_atomic(REGISTRY_FILE, &registry_after)?;
    }
    drop(lock);
    Ok(out)
}

fn json_of<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value).context("could not encode pairing state")?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn read_json<T: DeserializeOwned + Default>(home: &Home, name: &str) -> Result<T> {
    home.check()?;
    let path = home.path(name);
    let Some(bytes) = read_if_exists(&path)? else { return Ok(T::default()) };
    check_private(&path, false)?;
    // serde's messages can quote the offending value (a bearer); report the position only.
    serde_json::from_slice(&bytes).map_err(|err| {
        ConfigError::new(format!(
            "{} is damaged (JSON error at line {}, column {}); restore it or remove it and pair again",
            path.display(),
            err.line(),
            err.column()
        ))
        .into()
    })
}

/// The host token, created (0600) on first need.
pub fn load_or_create_host_token(home: &Home) -> Result<Secret> {
    home.ensure()?;
    if let Some(token) = load_host_token(home)? {
        return Ok(token);
    }
    let token = Secret::generate()?;
    home.write_atomic(HOST_TOKEN_FILE, format!("{}\n", token.expose()).as_bytes())?;
    Ok(token)
}

fn load_host_token(home: &Home) -> Result<Option<Secret>> {
    let path = home.path(HOST_TOKEN_FILE);
    let Some(text) = read_text_if_exists(&path)? else { return Ok(None) };
    check_private(&path, false)?;
    Secret::parse_hex128(&text).map(Some).map_err(|err| {
        ConfigError::new(format!("{} is not a valid host token ({err}); remove it to create a new one", path.display()))
            .into()
    })
}

/// Refuses a pairing action whose host token is missing or wrong (`host-token-required`).
pub fn authorize(home: &Home, presented: Option<&str>) -> Result<()> {
    let refused = || Refused {
        code: ErrorCode::HostTokenRequired,
        message: "pairing actions need this home's host token".into(),
    };
    let Some(presented) = presented else { return Err(refused().into()) };
    match load_host_token(home)? {
        Some(token) if token.matches(presented.trim()) => Ok(()),
        _ => Err(refused().into()),
    }
}

/// Serialises a [`Secret`] as its plain text (only into 0600 files).
mod secret_text {
    use super::*;

    pub fn serialize<S: Serializer>(secret: &Secret, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(secret.expose())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
        String::deserialize(deserializer).map(Secret::from_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn mode(home: &Home, name: &str) -> u32 {
        fs::metadata(home.path(name)).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn updates_write_private_files_and_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        let bearer = Secret::from_string(format!("vbx_{}", "ab".repeat(16)));
        update(&home, |registry, pairings| {
            registry.set_self(&"1".repeat(64));
            pairings.outbound.insert(
                "2".repeat(64),
                OutboundPairing {
                    bearer: bearer.clone(),
                    relay: "https://r.example".into(),
                    code: Secret::generate()?,
                    added_at: now(),
                },
            );
            Ok(())
        })
        .unwrap();
        assert_eq!(mode(&home, REGISTRY_FILE), 0o600);
        assert_eq!(mode(&home, PAIRINGS_FILE), 0o600);
        let registry = load_registry(&home).unwrap();
        assert_eq!(registry.find(SELF_NAME).unwrap().env_key, "1".repeat(64));
        assert_eq!(load_pairings(&home).unwrap().outbound[&"2".repeat(64)].bearer, bearer);
        let shown = format!("{:?}", load_pairings(&home).unwrap());
        assert!(!shown.contains(bearer.expose()), "{shown}");

        fs::set_permissions(home.path(PAIRINGS_FILE), fs::Permissions::from_mode(0o644)).unwrap();
        let err = format!("{:#}", load_pairings(&home).unwrap_err());
        assert!(err.contains("chmod 600"), "{err}");
        assert!(update(&home, |_, _| Ok(())).is_err());
    }

    #[test]
    fn damaged_files_are_reported_without_their_content() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        home.ensure().unwrap();
        home.write_atomic(PAIRINGS_FILE, br#"{"version":"vbx_0123456789abcdef0123456789abcdef"}"#).unwrap();
        let err = format!("{:#}", load_pairings(&home).unwrap_err());
        assert!(err.contains("damaged") && !err.contains("vbx_0123"), "{err}");
    }

    #[test]
    fn revoked_hashes_are_found_and_hide_their_pairing() {
        let mut pairings = Pairings::default();
        let live = bearer_hash("vbx_live");
        let dead = bearer_hash("vbx_dead");
        for (id, hash) in [("p_live", live), ("p_dead", dead)] {
            pairings.issued.entry("k".into()).or_default().push(IssuedPairing {
                id: id.into(),
                bearer_sha256: hex::encode(hash),
                relay: "https://r.example".into(),
                code: Secret::generate().unwrap(),
                issued_at: now(),
            });
        }
        pairings.revoked_bearers.entry("k".into()).or_default().push(RevokedBearer {
            id: Some("p_dead".into()),
            bearer_sha256: hex::encode(dead),
            revoked_at: now(),
        });
        assert!(pairings.is_revoked(&dead));
        assert!(!pairings.is_revoked(&live));
        let live_ids: Vec<_> = pairings.live_issued().map(|(_, p)| p.id.clone()).collect();
        assert_eq!(live_ids, ["p_live"]);
    }

    #[test]
    fn host_token_is_created_once_and_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        home.ensure().unwrap();
        let refused = |r: Result<()>| crate::error::exit_for(&r.unwrap_err()) == crate::error::Exit::Refused;
        assert!(refused(authorize(&home, Some("00000000000000000000000000000000"))));
        let token = load_or_create_host_token(&home).unwrap();
        assert_eq!(load_or_create_host_token(&home).unwrap(), token);
        assert_eq!(mode(&home, HOST_TOKEN_FILE), 0o600);
        authorize(&home, Some(token.expose())).unwrap();
        assert!(refused(authorize(&home, None)));
        let err = authorize(&home, Some("ffffffffffffffffffffffffffffffff")).unwrap_err();
        assert!(format!("{err:#}").contains("host-token-required"));
    }
}
