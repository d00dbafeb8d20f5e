//! The environment side (docs/PROTOCOL.md, "Environments"): one outbound relay link per live pairing (the agent side of the
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
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info_span, warn, Instrument};

use super::context::AgentContext;
use super::gate::{GateShared, LivePairing, PairingGate};
use super::link::{BackoffPolicy, LinkEvent, LinkEvents, RelayLink};
use crate::config::RelayUrl;
use crate::environments::dial_for;
use crate::environments::identity::{code_hash, Identity};
use crate::environments::store::{self, stamp_of, IssuedPairing, Pairings, Stamp};
use crate::net::dial::DialOptions;
use crate::net::liveness::Heartbeat;
use crate::state::Home;

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
    pub events: LinkEvents,
}

/// Starts the environment side: reads `.pairings.json` now (unsafe permissions stop the agent
/// like any other secret file), then dials every live pairing and keeps watching the file.
pub fn spawn_environment_side(
    options: EnvSideOptions,
    ctx: &Arc<AgentContext>,
    shutdown: CancellationToken,
) -> Result<()> {
    let path = options.home.path(store::PAIRINGS_FILE);
    let stamp = stamp_of(&path);
    let pairings = store::load_pairings(&options.home)?;
    let gate = Arc::new(GateShared::watching(options.home.clone()));
    let mut side = EnvSide {
        options,
        agent: ctx.clone(),
        gate,
        dialers: HashMap::new(),
        tasks: ctx.tasks.clone(),
        shutdown: shutdown.clone(),
    };
    side.apply(&pairings)?;
    ctx.tasks.spawn(side.watch(path, stamp).instrument(info_span!("pairings")));
    Ok(())
}

struct EnvSide {
    options: EnvSideOptions,
    /// The agent whose tools, approvals and audit trail each pairing's sessions share.
    agent: Arc<AgentContext>,
    gate: Arc<GateShared>,
    /// Stop token of each running pairing link, by pairing id.
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
        let revoked_hashes = pairings.revoked_hashes();
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
                    LivePairing {
                        bearer_hash: hash,
                        bound_to: bound_to.clone(),
                        code_hash: code_hash(pairing.code.expose()),
                        revoked: CancellationToken::new(),
                    },
                );
                started.push(pairing.clone());
            }
            ended
        };
        for id in ended {
            if let Some(stop) = self.dialers.remove(&id) {
                stop.cancel();
            }
            let _ = self.options.events.send(LinkEvent::PairingEnded { pairing: id });
        }
        for pairing in started {
            self.start_link(pairing);
        }
        Ok(())
    }

    /// Dials the pairing's relay code for its host, until the pairing ends or the agent stops.
    fn start_link(&mut self, pairing: IssuedPairing) {
        let relay = match RelayUrl::parse(&pairing.relay) {
            Ok(relay) => relay,
            Err(err) => {
                warn!(pairing = %pairing.id, "pairing has an unusable relay: {err}");
                return;
            }
        };
        let stop = self.shutdown.child_token();
        let ctx = self.agent.beside();
        if let Ok(mut shown) = ctx.status.relay.lock() {
            *shown = relay.to_string();
        }
        let link = RelayLink {
            url: relay.socket_url("/agent", pairing.code.expose()),
            dial: dial_for(&self.options.dial, self.options.relay.as_ref(), &relay),
            relay: relay.clone(),
            heartbeat: self.options.heartbeat,
            backoff: self.options.backoff,
            gate: Arc::new(PairingGate { shared: self.gate.clone(), pairing_id: pairing.id.clone() }),
            ctx: Arc::new(ctx),
            // The pairing's connection events are not the phone's; they stay out of `run`'s output.
            events: None,
        };
        self.tasks.spawn(link.run(stop.clone()).instrument(info_span!("pairing", id = %pairing.id)));
        self.dialers.insert(pairing.id.clone(), stop);
        let _ = self.options.events.send(LinkEvent::PairingActive { pairing: pairing.id, relay: relay.to_string() });
    }
}
