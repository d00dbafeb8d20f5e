//! Multi-environment pairing (docs/PROTOCOL.md, "Environments"): one phone, several machines. The host keeps every remote
//! credential; the phone only names an environment in `tool_call.env`.
//!
//! - [`identity`]: this home's Ed25519 key; its public half in hex is the envKey.
//! - [`line`]: the pasteable pairing line.
//! - [`store`]: `environments.json`, `.pairings.json`, `.host-token`.
//! - [`host`]: a host routes calls over pooled, verified sessions and answers `fleet`.
//!
//! Pairing actions (issue, add, revoke, remove) present the host token: the CLI reads it from
//! `.host-token` (reading that file is the local user's authority), and actions that arrive over
//! a socket (the `fleet` tool's `remove`/`revoke`) must carry it or are refused
//! `host-token-required`. The running agent learns about CLI actions from the files themselves.

pub mod host;
pub mod identity;
pub mod line;
pub mod store;

use anyhow::Result;
use rand::TryRngCore;

pub use host::{HostOptions, HostRouter};
pub use identity::Identity;
pub use line::PairingLine;

use crate::config::RelayUrl;
use crate::error::{ConfigError, Refused};
use crate::net::dial::DialOptions;
use crate::protocol::{ErrorCode, ToolError};
use crate::secret::{is_lower_hex, Secret};
use crate::state::Home;
use store::{IssuedPairing, OutboundPairing, RevokedBearer, SELF_NAME};

/// Routes calls that name another environment; defined beside the dispatcher that calls it.
pub use crate::tools::{EnvRouter, FollowScope};

/// Longest environment name.
pub const MAX_NAME_LEN: usize = 40;

/// Dial options for `relay`: the relay token goes only to the agent's own relay.
pub(crate) fn dial_for(dial: &DialOptions, own_relay: Option<&RelayUrl>, relay: &RelayUrl) -> DialOptions {
    let mut options = dial.clone();
    if own_relay != Some(relay) {
        options.bearer = None;
    }
    options
}

/// A pairing just issued. The bearer is in `line` and nowhere else.
#[derive(Debug)]
pub struct Issued {
    pub pairing: String,
    pub line: PairingLine,
}

/// On an environment: creates a bearer bound to this home's envKey and a relay code for it.
pub fn issue(home: &Home, relay: &RelayUrl, host_token: &str) -> Result<Issued> {
    store::authorize(home, Some(host_token))?;
    let identity = Identity::load_or_create(home)?;
    let env_key = identity.env_key();
    let bearer = line::new_bearer()?;
    let code = Secret::generate()?;
    let pairing = store::update(home, |registry, pairings| {
        registry.set_self(&env_key);
        let taken = |id: &str| {
            pairings.issued.values().flatten().any(|p| p.id == id)
                || pairings.revoked_bearers.values().flatten().any(|r| r.id.as_deref() == Some(id))
        };
        let id = loop {
            let id = new_pairing_id()?;
            if !taken(&id) {
                break id;
            }
        };
        pairings.issued.entry(env_key.clone()).or_default().push(IssuedPairing {
            id: id.clone(),
            bearer_sha256: hex::encode(store::bearer_hash(bearer.expose())),
            relay: relay.as_str().to_owned(),
            code: code.clone(),
            issued_at: store::now(),
        });
        Ok(id)
    })?;
    Ok(Issued { pairing, line: PairingLine { env_key, relay: relay.clone(), code, bearer } })
}

fn new_pairing_id() -> Result<String> {
    let mut bytes = [0u8; 4];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|err| anyhow::anyhow!("the OS random number generator failed: {err}"))?;
    Ok(format!("p_{}", hex::encode(bytes)))
}

/// An environment recorded on the host.
#[derive(Clone, Debug)]
pub struct Added {
    pub env_key: String,
    pub name: String,
    pub relay: String,
    /// True when the environment was already known (paired again).
    pub replaced: bool,
}

/// On the host: records the environment of a pasted line and the bearer to present to it.
pub fn add(home: &Home, text: &str, name: Option<&str>, host_token: &str) -> Result<Added> {
    store::authorize(home, Some(host_token))?;
    let line = PairingLine::parse(text).map_err(|err| ConfigError::new(err.to_string()))?;
    if let Some(name) = name {
        check_name(name)?;
    }
    let own_key = Identity::load_or_create(home)?.env_key();
    if line.env_key == own_key {
        return Err(ConfigError::new(
            "this line was issued by this machine itself; paste it into `voxa env add` on the host",
        )
        .into());
    }
    store::update(home, |registry, pairings| {
        registry.set_self(&own_key);
        let existing = registry.environments.iter().position(|e| e.env_key == line.env_key);
        let chosen = match (name, existing) {
            (Some(name), _) => name.to_owned(),
            (None, Some(index)) => registry.environments[index].name.clone(),
            (None, None) => format!("env-{}", &line.env_key[..8]),
        };
        if registry.environments.iter().any(|e| e.name == chosen && e.env_key != line.env_key) {
            return Err(ConfigError::new(format!(
                "the name {chosen:?} is taken by another environment; choose another with --name"
            ))
            .into());
        }
        let entry = store::EnvEntry {
            env_key: line.env_key.clone(),
            name: chosen.clone(),
            relay: Some(line.relay.as_str().to_owned()),
            added_at: store::now(),
            is_self: false,
        };
        match existing {
            Some(index) => registry.environments[index] = entry,
            None => registry.environments.push(entry),
        }
        pairings.outbound.insert(
            line.env_key.clone(),
            OutboundPairing {
                bearer: line.bearer.clone(),
                relay: line.relay.as_str().to_owned(),
                code: line.code.clone(),
                added_at: store::now(),
            },
        );
        Ok(Added {
            env_key: line.env_key.clone(),
            name: chosen,
            relay: line.relay.as_str().to_owned(),
            replaced: existing.is_some(),
        })
    })
}

fn check_name(name: &str) -> Result<()> {
    let valid_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if name.is_empty() || name.len() > MAX_NAME_LEN || !valid_chars {
        return Err(ConfigError::new(format!(
            "an environment name is 1 to {MAX_NAME_LEN} letters, digits, '.', '_' or '-'"
        ))
        .into());
    }
    if name == SELF_NAME {
        return Err(ConfigError::new(format!("{SELF_NAME:?} names this machine; choose another name")).into());
    }
    if name.len() == identity::ENV_KEY_HEX_LEN && is_lower_hex(name) {
        return Err(ConfigError::new("a name must not look like an envKey").into());
    }
    Ok(())
}

/// Pairings a revocation ended.
#[derive(Clone, Debug)]
pub struct Revoked {
    pub pairings: Vec<String>,
    /// True when the target was revoked before (nothing changed).
    pub already: bool,
}

/// On an environment: revokes the pairing of a bearer, every pairing bound to an envKey, or one
/// pairing by id. The running agent closes their sessions within one poll of the file.
pub fn revoke(home: &Home, target: &str, host_token: &str, caller: &str) -> Result<Revoked> {
    store::authorize(home, Some(host_token))?;
    let by = RevokeTarget::parse(target.trim())?;
    let revoked = store::update(home, |_, pairings| {
        let ended = by.take_issued(pairings);
        if ended.is_empty() {
            if by.already_revoked(pairings) {
                return Ok(Revoked { pairings: Vec::new(), already: true });
            }
            return Err(by.not_found());
        }
        let mut ids = Vec::new();
        for (env_key, pairing) in ended {
            pairings.revoked_bearers.entry(env_key).or_default().push(RevokedBearer {
                id: Some(pairing.id.clone()),
                bearer_sha256: pairing.bearer_sha256,
                revoked_at: store::now(),
            });
            ids.push(pairing.id);
        }
        Ok(Revoked { pairings: ids, already: false })
    })?;
    audit_revocations(home, caller, &revoked.pairings)?;
    Ok(revoked)
}

/// What `revoke` was given: a bearer (kept as its hash), an envKey or a pairing id.
enum RevokeTarget {
    Bearer([u8; 32]),
    EnvKey(String),
    Id(String),
}

impl RevokeTarget {
    fn parse(target: &str) -> Result<Self> {
        if line::looks_like_bearer(target) {
            let bearer = line::parse_bearer(target)
                .ok_or_else(|| ConfigError::new("that is not a bearer (`vbx_` followed by 32 hex characters)"))?;
            Ok(RevokeTarget::Bearer(store::bearer_hash(bearer.expose())))
        } else if identity::parse_env_key(target).is_some() {
            Ok(RevokeTarget::EnvKey(target.to_owned()))
        } else if target.starts_with("p_") {
            Ok(RevokeTarget::Id(target.to_owned()))
        } else {
            Err(ConfigError::new("give the envKey, the bearer (vbx_…) or the pairing id (p_…) to revoke").into())
        }
    }

    fn matches(&self, env_key: &str, pairing: &IssuedPairing) -> bool {
        match self {
            RevokeTarget::Bearer(hash) => bool::from(store::hash_matches(&pairing.bearer_sha256, hash)),
            RevokeTarget::EnvKey(key) => key == env_key,
            RevokeTarget::Id(id) => &pairing.id == id,
        }
    }

    /// Takes the issued pairings this names out of `pairings`, with the envKey each was bound to.
    fn take_issued(&self, pairings: &mut store::Pairings) -> Vec<(String, IssuedPairing)> {
        let mut ended = Vec::new();
        for (env_key, list) in pairings.issued.iter_mut() {
            let (gone, kept): (Vec<_>, Vec<_>) = list.drain(..).partition(|p| self.matches(env_key, p));
            *list = kept;
            ended.extend(gone.into_iter().map(|p| (env_key.clone(), p)));
        }
        pairings.issued.retain(|_, list| !list.is_empty());
        ended
    }

    /// Whether what this names was revoked before.
    fn already_revoked(&self, pairings: &store::Pairings) -> bool {
        match self {
            RevokeTarget::Bearer(hash) => pairings.is_revoked(hash),
            RevokeTarget::EnvKey(key) => pairings.revoked_bearers.contains_key(key),
            RevokeTarget::Id(id) => pairings.revoked_bearers.values().flatten().any(|r| r.id.as_deref() == Some(id)),
        }
    }

    /// The error for a target that names no pairing, issued or revoked.
    fn not_found(&self) -> anyhow::Error {
        match self {
            RevokeTarget::Bearer(_) => Refused {
                code: ErrorCode::BearerRefused,
                message: "no pairing issued by this machine has that bearer".into(),
            }
            .into(),
            RevokeTarget::EnvKey(_) => Refused {
                code: ErrorCode::UnknownEnvironment,
                message: "no pairing issued by this machine is bound to that envKey".into(),
            }
            .into(),
            RevokeTarget::Id(_) => {
                ConfigError::new("no pairing with that id was issued here; `voxa env list` shows them").into()
            }
        }
    }
}

/// One audit record per revoked pairing. A record that cannot be written is logged, not fatal:
/// the revocation itself is already saved.
fn audit_revocations(home: &Home, caller: &str, ids: &[String]) -> Result<()> {
    let audit = crate::audit::Audit::new(home.audit_dir()?);
    for id in ids {
        let record = crate::audit::EventRecord {
            caller: caller.to_owned(),
            event: "revoke".into(),
            outcome: "ok".into(),
            rule: Some(ErrorCode::PairingRevoked.as_str().into()),
            subject: Some(id.clone()),
        };
        if let Err(err) = audit.record_event(&record) {
            tracing::warn!("could not write the audit record of revoking {id}: {err:#}");
        }
    }
    Ok(())
}

/// An environment the host forgot.
#[derive(Clone, Debug)]
pub struct Removed {
    pub env_key: String,
    pub name: String,
}

/// On the host: forgets an environment and its bearer.
pub fn remove(home: &Home, target: &str, host_token: &str) -> Result<Removed> {
    store::authorize(home, Some(host_token))?;
    let target = target.trim();
    store::update(home, |registry, pairings| {
        let Some(entry) = registry.find(target).cloned() else {
            return Err(Refused {
                code: ErrorCode::UnknownEnvironment,
                message: "no environment has that envKey or name".into(),
            }
            .into());
        };
        if entry.is_self {
            return Err(ConfigError::new("this machine's own entry cannot be removed").into());
        }
        registry.environments.retain(|e| e.env_key != entry.env_key);
        pairings.outbound.remove(&entry.env_key);
        pairings.revoked_bearers.remove(&entry.env_key);
        Ok(Removed { env_key: entry.env_key, name: entry.name })
    })
}

/// The contract code and sentence of a failed pairing action, for the `fleet` tool.
pub(crate) fn tool_error_of(err: &anyhow::Error) -> ToolError {
    for cause in err.chain() {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return ToolError::new(refused.code, refused.message.clone());
        }
        if let Some(config) = cause.downcast_ref::<ConfigError>() {
            return ToolError::new(ErrorCode::InvalidArgs, config.0.clone());
        }
    }
    ToolError::new(ErrorCode::Internal, format!("{err:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{exit_for, Exit};
    use std::os::unix::fs::PermissionsExt;

    fn homes() -> (tempfile::TempDir, Home, Home) {
        let tmp = tempfile::tempdir().unwrap();
        let env = Home::at(tmp.path().join("env"));
        let host = Home::at(tmp.path().join("host"));
        (tmp, env, host)
    }

    fn relay() -> RelayUrl {
        RelayUrl::parse("https://relay.example.com").unwrap()
    }

    fn token(home: &Home) -> String {
        store::load_or_create_host_token(home).unwrap().expose().to_owned()
    }

    #[test]
    fn issue_then_add_records_both_sides_privately() {
        let (_tmp, env, host) = homes();
        let issued = issue(&env, &relay(), &token(&env)).unwrap();
        let text = issued.line.encode();
        let env_pairings = store::load_pairings(&env).unwrap();
        let stored = &env_pairings.issued[&issued.line.env_key][0];
        assert_eq!(stored.id, issued.pairing);
        let on_disk = std::fs::read_to_string(env.path(store::PAIRINGS_FILE)).unwrap();
        assert!(!on_disk.contains(issued.line.bearer.expose()), "the environment keeps only the bearer's hash");
        assert_eq!(store::load_registry(&env).unwrap().find(SELF_NAME).unwrap().env_key, issued.line.env_key);

        let added = add(&host, &text, Some("devbox"), &token(&host)).unwrap();
        assert_eq!((added.name.as_str(), added.replaced), ("devbox", false));
        let registry = store::load_registry(&host).unwrap();
        assert_eq!(registry.find("devbox").unwrap().env_key, issued.line.env_key);
        assert!(registry.find(SELF_NAME).unwrap().is_self);
        assert_eq!(store::load_pairings(&host).unwrap().outbound[&issued.line.env_key].bearer, issued.line.bearer);
        for home in [&env, &host] {
            for name in [store::REGISTRY_FILE, store::PAIRINGS_FILE, store::HOST_TOKEN_FILE, identity::IDENTITY_FILE] {
                let mode = std::fs::metadata(home.path(name)).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{name}");
            }
        }
        // Adding again pairs again and keeps the name.
        let again = issue(&env, &relay(), &token(&env)).unwrap();
        let added = add(&host, &again.line.encode(), None, &token(&host)).unwrap();
        assert_eq!((added.name.as_str(), added.replaced), ("devbox", true));
    }

    #[test]
    fn pairing_actions_need_the_host_token() {
        let (_tmp, env, host) = homes();
        let wrong = "00000000000000000000000000000000";
        token(&env);
        let err = issue(&env, &relay(), wrong).unwrap_err();
        assert_eq!(exit_for(&err), Exit::Refused);
        assert!(format!("{err:#}").contains("host-token-required"));
        let issued = issue(&env, &relay(), &token(&env)).unwrap();
        token(&host);
        assert_eq!(exit_for(&add(&host, &issued.line.encode(), None, wrong).unwrap_err()), Exit::Refused);
        assert_eq!(exit_for(&revoke(&env, &issued.pairing, wrong, "test").unwrap_err()), Exit::Refused);
        assert_eq!(exit_for(&remove(&host, "x", wrong).unwrap_err()), Exit::Refused);
    }

    #[test]
    fn add_refuses_bad_lines_names_and_its_own_line() {
        let (_tmp, env, host) = homes();
        let issued = issue(&env, &relay(), &token(&env)).unwrap();
        let text = issued.line.encode();
        let err = add(&host, &text[..text.len() - 20], None, &token(&host)).unwrap_err();
        assert_eq!(exit_for(&err), Exit::Usage);
        assert!(!format!("{err:#}").contains(issued.line.bearer.expose()));
        for bad in ["", "local", "has space", &"a".repeat(64), &"n".repeat(41)] {
            assert_eq!(exit_for(&add(&host, &text, Some(bad), &token(&host)).unwrap_err()), Exit::Usage, "{bad:?}");
        }
        assert_eq!(exit_for(&add(&env, &text, None, &token(&env)).unwrap_err()), Exit::Usage);
        add(&host, &text, Some("one"), &token(&host)).unwrap();
        let (_tmp2, other_env, _) = homes();
        let other = issue(&other_env, &relay(), &token(&other_env)).unwrap();
        let taken = add(&host, &other.line.encode(), Some("one"), &token(&host)).unwrap_err();
        assert!(format!("{taken:#}").contains("taken"));
    }

    #[test]
    fn revoke_by_bearer_env_key_or_id_moves_bearers_and_audits() {
        let (_tmp, env, _) = homes();
        let first = issue(&env, &relay(), &token(&env)).unwrap();
        let second = issue(&env, &relay(), &token(&env)).unwrap();
        let third = issue(&env, &relay(), &token(&env)).unwrap();
        let by_bearer = revoke(&env, first.line.bearer.expose(), &token(&env), "cli").unwrap();
        assert_eq!(by_bearer.pairings, vec![first.pairing.clone()]);
        let pairings = store::load_pairings(&env).unwrap();
        assert!(pairings.is_revoked(&store::bearer_hash(first.line.bearer.expose())));
        assert_eq!(pairings.live_issued().count(), 2);
        assert!(revoke(&env, first.line.bearer.expose(), &token(&env), "cli").unwrap().already);
        let by_id = revoke(&env, &second.pairing, &token(&env), "cli").unwrap();
        assert_eq!(by_id.pairings, vec![second.pairing.clone()]);
        let by_key = revoke(&env, &third.line.env_key, &token(&env), "cli").unwrap();
        assert_eq!(by_key.pairings, vec![third.pairing.clone()]);
        assert_eq!(store::load_pairings(&env).unwrap().live_issued().count(), 0);

        let unknown = revoke(&env, &format!("vbx_{}", "f".repeat(32)), &token(&env), "cli").unwrap_err();
        assert_eq!(exit_for(&unknown), Exit::Refused);
        assert!(format!("{unknown:#}").contains("bearer-refused") && !format!("{unknown:#}").contains("ffff"));
        assert_eq!(exit_for(&revoke(&env, "junk", &token(&env), "cli").unwrap_err()), Exit::Usage);

        let audit: String = std::fs::read_dir(env.audit_dir().unwrap())
            .unwrap()
            .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
            .collect();
        let records: Vec<serde_json::Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(records.len(), 3);
        assert!(records.iter().all(|r| r["rule"] == "pairing-revoked" && r["event"] == "revoke"));
        assert!(!audit.contains(first.line.bearer.expose()) && !audit.contains("vbx_"));
    }

    #[test]
    fn remove_forgets_an_environment_but_never_this_machine() {
        let (_tmp, env, host) = homes();
        let issued = issue(&env, &relay(), &token(&env)).unwrap();
        add(&host, &issued.line.encode(), Some("devbox"), &token(&host)).unwrap();
        let removed = remove(&host, "devbox", &token(&host)).unwrap();
        assert_eq!(removed.env_key, issued.line.env_key);
        assert!(store::load_registry(&host).unwrap().find("devbox").is_none());
        assert!(store::load_pairings(&host).unwrap().outbound.is_empty());
        assert_eq!(exit_for(&remove(&host, "devbox", &token(&host)).unwrap_err()), Exit::Refused);
        assert_eq!(exit_for(&remove(&host, SELF_NAME, &token(&host)).unwrap_err()), Exit::Usage);
    }
}
