//! The environment side (SPEC §8): one outbound dialer per live pairing (the agent side of the
//! pairing's relay code), the gate that admits hosts, and a watcher that applies pairings issued
//! or revoked while the agent runs.
//!
//! The CLI (`voxa env issue`, `voxa env revoke`) only writes `.pairings.json`; the running agent
//! stats the file every [`PAIRINGS_POLL`] and, when it changed (inode, size or mtime — every write
//! is an atomic rename, so the inode always changes), reloads it. A revocation therefore reaches
//! live sessions within one poll: the gate's state is updated first (new hellos with that bearer
//! get `pairing-revoked`), then the pairing's token is cancelled (the dialer sends
//! `pairing-revoked` and closes 1008), then its dialer stops.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info_span, warn, Instrument};

use super::identity::{is_valid_nonce, Identity};
use super::store::{self, bearer_hash, Pairings};
use crate::agent::{BackoffPolicy, Dialer, Heartbeat};
use crate::config::RelayUrl;
use crate::dial::DialOptions;
use crate::output::Printer;
use crate::protocol::{AgentMessage, ErrorCode, Hello};
use crate::session::{Admission, AgentContext, Gate, HelloStep};
use crate::state::Home;
use crate::tools::Toolbox;

/// How often the running agent looks at `.pairings.json` for issued or revoked pairings.
pub const PAIRINGS_POLL: Duration = Duration::from_millis(50);

/// What the environment side of a running agent needs.
pub struct EnvSideOptions {
    pub home: Home,
    /// The agent's own relay; the relay token is sent only to it.
    pub relay: Option<RelayUrl>,
    pub dial: DialOptions,
    pub heartbeat: Heartbeat,
    pub backoff: BackoffPolicy,
    pub printer: Printer,
}

/// Starts the environment side: reads `.pairings.json` now (unsafe permissions stop the agent
/// like any other secret file), then dials every live pairing and keeps watching the file.
pub fn spawn_environment_side(
    options: EnvSideOptions,
    ctx: &Arc<AgentContext>,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> Result<()> {
    let path = options.home.path(store::PAIRINGS_FILE);
    let stamp = stamp_of(&path);
    let pairings = store::load_pairings(&options.home)?;
    let mut side = EnvSide {
        options,
        toolbox: ctx.toolbox.clone(),
        gate: Arc::new(GateShared::default()),
        dialers: HashMap::new(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
    };
    side.apply(&pairings)?;
    tasks.spawn(side.watch(path, stamp).instrument(info_span!("pairings")));
    Ok(())
}

/// Identity of a file version: inode, size, mtime.
type Stamp = Option<(u64, u64, i64, i64)>;

fn stamp_of(path: &std::path::Path) -> Stamp {
    std::fs::metadata(path).ok().map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

struct EnvSide {
    options: EnvSideOptions,
    toolbox: Toolbox,
    gate: Arc<GateShared>,
    /// Stop token of each running pairing dialer, by pairing id.
    dialers: HashMap<String, CancellationToken>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl EnvSide {
    async fn watch(mut self, path: std::path::PathBuf, mut stamp: Stamp) {
        let mut warned = false;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                _ = tokio::time::sleep(PAIRINGS_POLL) => {}
            }
            let now = stamp_of(&path);
            if now == stamp {
                continue;
            }
            stamp = now;
            let applied = store::load_pairings(&self.options.home).and_then(|pairings| self.apply(&pairings));
            match applied {
                Ok(()) => warned = false,
                // Keep the last good state (revocations already applied stay applied).
                Err(err) if !warned => {
                    warned = true;
                    warn!("could not apply {}: {err:#}", path.display());
                }
                Err(_) => {}
            }
        }
    }

    /// Brings gate and dialers in line with `pairings`.
    fn apply(&mut self, pairings: &Pairings) -> Result<()> {
        let live: Vec<_> = pairings.live_issued().map(|(key, p)| (key.clone(), p.clone())).collect();
        let mut identity = self.gate.identity();
        if identity.is_none() && !live.is_empty() {
            identity = Some(Arc::new(Identity::load_or_create(&self.options.home)?));
        }
        let revoked_hashes: Vec<[u8; 32]> = pairings
            .revoked_bearers
            .values()
            .flatten()
            .filter_map(|r| {
                let mut hash = [0u8; 32];
                hex::decode_to_slice(&r.bearer_sha256, &mut hash).ok().map(|()| hash)
            })
            .collect();
        let mut started = Vec::new();
        let ended = {
            let mut state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
            state.identity = identity;
            state.revoked = revoked_hashes;
            let ended: Vec<String> =
                state.live.keys().filter(|id| !live.iter().any(|(_, p)| &&p.id == id)).cloned().collect();
            for id in &ended {
                if let Some(pairing) = state.live.remove(id) {
                    pairing.revoked.cancel();
                }
            }
            for (bound_to, pairing) in &live {
                if state.live.contains_key(&pairing.id) {
                    continue;
                }
                let mut hash = [0u8; 32];
                if hex::decode_to_slice(&pairing.bearer_sha256, &mut hash).is_err() {
                    continue;
                }
                state.live.insert(
                    pairing.id.clone(),
                    LivePairing { bearer_hash: hash, bound_to: bound_to.clone(), revoked: CancellationToken::new() },
                );
                started.push(pairing.clone());
            }
            ended
        };
        for id in ended {
            if let Some(stop) = self.dialers.remove(&id) {
                stop.cancel();
            }
            self.options.printer.event(
                "pairing_ended",
                json!({"pairing": id}),
                format!("environment pairing {id} revoked: its sessions were closed and it is no longer dialed"),
            );
        }
        for pairing in started {
            let relay = match RelayUrl::parse(&pairing.relay) {
                Ok(relay) => relay,
                Err(err) => {
                    warn!(pairing = %pairing.id, "pairing has an unusable relay: {err}");
                    continue;
                }
            };
            let stop = self.shutdown.child_token();
            let ctx = AgentContext::new(self.toolbox.clone());
            if let Ok(mut shown) = ctx.status.relay.lock() {
                *shown = relay.to_string();
            }
            let dialer = Dialer {
                url: relay.socket_url("/agent", pairing.code.expose()),
                dial: super::dial_for(&self.options.dial, self.options.relay.as_ref(), &relay),
                relay: relay.clone(),
                heartbeat: self.options.heartbeat,
                backoff: self.options.backoff,
                gate: Arc::new(PairingGate { shared: self.gate.clone(), pairing_id: pairing.id.clone() }),
                ctx: Arc::new(ctx),
                // The pairing's connection events are not the phone's; they stay out of `run`'s output.
                printer: Printer::new(false, true),
            };
            self.tasks.spawn(dialer.run(stop.clone()).instrument(info_span!("pairing", id = %pairing.id)));
            self.dialers.insert(pairing.id.clone(), stop);
            self.options.printer.event(
                "pairing_active",
                json!({"pairing": pairing.id, "relay": relay.as_str()}),
                format!("environment pairing {} active: dialing {relay} for its host", pairing.id),
            );
        }
        Ok(())
    }
}

/// State every pairing gate reads.
#[derive(Default)]
struct GateShared {
    state: Mutex<GateState>,
}

impl GateShared {
    fn identity(&self) -> Option<Arc<Identity>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).identity.clone()
    }
}

#[derive(Default)]
struct GateState {
    identity: Option<Arc<Identity>>,
    live: HashMap<String, LivePairing>,
    revoked: Vec<[u8; 32]>,
}

struct LivePairing {
    bearer_hash: [u8; 32],
    /// The envKey the bearer was issued under.
    bound_to: String,
    /// Cancelled when the pairing is revoked: every session it admitted ends.
    revoked: CancellationToken,
}

/// Admits a host on one pairing's relay code (docs/PROTOCOL.md): the host's hello is answered with this
/// home's signature over the host's nonce, and only then does the host present its bearer.
pub struct PairingGate {
    shared: Arc<GateShared>,
    pairing_id: String,
}

impl Gate for PairingGate {
    fn challenges(&self) -> bool {
        false
    }

    fn admit(&self, hello: &Hello, _challenge: &str) -> Result<HelloStep, ErrorCode> {
        let state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        identify(&state, hello)
    }

    fn admit_bearer(&self, bearer: &str) -> Result<Admission, ErrorCode> {
        let state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        admit_bearer(&state, &self.pairing_id, bearer)
    }

    fn timeout_code(&self) -> ErrorCode {
        ErrorCode::ExecutorUnauthenticated
    }
}

/// The host's hello: the envKey is resolved first, then the nonce is signed.
fn identify(state: &GateState, hello: &Hello) -> Result<HelloStep, ErrorCode> {
    let Some(identity) = &state.identity else { return Err(ErrorCode::UnknownEnvironment) };
    let own_key = identity.env_key();
    if hello.env_key.as_deref() != Some(own_key.as_str()) {
        return Err(ErrorCode::UnknownEnvironment);
    }
    let Some(nonce) = hello.nonce.as_deref().filter(|n| is_valid_nonce(n)) else {
        return Err(ErrorCode::BadFrame);
    };
    Ok(HelloStep::AwaitBearer(AgentMessage::Identity { signature: identity.sign_nonce(nonce), env_key: own_key }))
}

/// The bearer, presented after the host verified this home's signature: revoked first, then right.
fn admit_bearer(state: &GateState, pairing_id: &str, bearer: &str) -> Result<Admission, ErrorCode> {
    let Some(identity) = &state.identity else { return Err(ErrorCode::UnknownEnvironment) };
    let own_key = identity.env_key();
    let presented = bearer_hash(bearer);
    let mut revoked = subtle::Choice::from(0u8);
    for hash in &state.revoked {
        revoked |= hash.ct_eq(&presented);
    }
    if bool::from(revoked) {
        return Err(ErrorCode::PairingRevoked);
    }
    let Some(pairing) = state.live.get(pairing_id) else { return Err(ErrorCode::BearerRefused) };
    if !bool::from(pairing.bearer_hash.ct_eq(&presented)) || pairing.bound_to != own_key {
        return Err(ErrorCode::BearerRefused);
    }
    Ok(Admission {
        caller: format!("host:{}:{pairing_id}", &own_key[..16]),
        env_key: Some(own_key),
        revoked: Some(pairing.revoked.clone()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::identity::verify_nonce;
    use super::*;
    use crate::protocol::new_nonce;

    const BEARER: &str = "vbx_0123456789abcdef0123456789abcdef";

    fn state_with(bearer: &str) -> (GateState, String) {
        let identity = Identity::generate().unwrap();
        let key = identity.env_key();
        let mut state = GateState { identity: Some(Arc::new(identity)), ..Default::default() };
        state.live.insert(
            "p_1".into(),
            LivePairing { bearer_hash: bearer_hash(bearer), bound_to: key.clone(), revoked: CancellationToken::new() },
        );
        (state, key)
    }

    fn hello(key: &str, nonce: Option<&str>) -> Hello {
        Hello {
            protocol: Some(2),
            role: Some("host".into()),
            env_key: Some(key.into()),
            nonce: nonce.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn a_hello_is_answered_with_a_signature_and_the_bearer_then_admits() {
        let (state, key) = state_with(BEARER);
        let nonce = new_nonce().unwrap();
        let Ok(HelloStep::AwaitBearer(AgentMessage::Identity { env_key, signature })) =
            identify(&state, &hello(&key, Some(&nonce)))
        else {
            panic!("no identity answer")
        };
        assert_eq!(env_key, key);
        assert!(verify_nonce(&key, &nonce, &signature));
        let admission = admit_bearer(&state, "p_1", BEARER).unwrap();
        assert_eq!(admission.env_key.as_deref(), Some(key.as_str()));
        assert!(admission.caller.starts_with("host:") && !admission.caller.contains(BEARER));
        let token = admission.revoked.unwrap();
        state.live["p_1"].revoked.cancel();
        assert!(token.is_cancelled());
    }

    #[test]
    fn the_env_key_is_checked_before_anything_is_signed() {
        let (state, _) = state_with(BEARER);
        let other = Identity::generate().unwrap().env_key();
        let nonce = new_nonce().unwrap();
        assert_eq!(identify(&state, &hello(&other, Some(&nonce))).unwrap_err(), ErrorCode::UnknownEnvironment);
        assert_eq!(identify(&state, &Hello::default()).unwrap_err(), ErrorCode::UnknownEnvironment);
        let empty = GateState::default();
        assert_eq!(identify(&empty, &hello(&other, Some(&nonce))).unwrap_err(), ErrorCode::UnknownEnvironment);
        assert_eq!(admit_bearer(&empty, "p_1", BEARER).unwrap_err(), ErrorCode::UnknownEnvironment);
    }

    #[test]
    fn wrong_and_revoked_bearers_and_bad_nonces_get_their_own_codes() {
        let (mut state, key) = state_with(BEARER);
        assert_eq!(
            admit_bearer(&state, "p_1", "vbx_ffffffffffffffffffffffffffffffff").unwrap_err(),
            ErrorCode::BearerRefused
        );
        assert_eq!(admit_bearer(&state, "p_other", BEARER).unwrap_err(), ErrorCode::BearerRefused);
        assert_eq!(identify(&state, &hello(&key, Some("not hex"))).unwrap_err(), ErrorCode::BadFrame);
        assert_eq!(identify(&state, &hello(&key, None)).unwrap_err(), ErrorCode::BadFrame);
        state.revoked.push(bearer_hash(BEARER));
        assert_eq!(admit_bearer(&state, "p_1", BEARER).unwrap_err(), ErrorCode::PairingRevoked);
        assert_eq!(admit_bearer(&state, "p_other", BEARER).unwrap_err(), ErrorCode::PairingRevoked);
    }

    #[test]
    fn a_pairing_bound_to_an_old_identity_is_refused() {
        let (mut state, _) = state_with(BEARER);
        state.identity = Some(Arc::new(Identity::generate().unwrap()));
        assert_eq!(admit_bearer(&state, "p_1", BEARER).unwrap_err(), ErrorCode::BearerRefused);
    }
}
