//! The host side (docs/PROTOCOL.md, "Environments"): calls that name an environment go over one pooled, verified session
//! per environment — the host joins the pairing's relay code as the phone side, sends the host
//! hello with its bearer and a fresh nonce, and checks the environment's signature against the
//! envKey before anything else is sent. The `fleet` tool is `fleet.rs`, the
//! handshake `handshake.rs`, one environment's session `session.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span, warn, Instrument};

use super::identity::{code_hash, verify_hello, HelloBinding};
use super::store::{self, EnvEntry};
use super::{EnvRouter, FollowScope};
use crate::config::RelayUrl;
use crate::net::client::{self, AnswerStep, HelloCredential, HelloError, Opening};
use crate::net::dial::{self, ClientSocket, DialOptions};
use crate::net::liveness::{sleep_until, Heartbeat, Liveness, Pulse};
use crate::protocol::{
    self, AgentMessage, BearerFrame, ClientMessage, ErrorCode, Frame, Hello, PeerRole, ToolCall, ToolError, HOST_ROLE,
};
use crate::secret::Secret;
use crate::state::Home;
use crate::tools::{ToolKind, Toolbox};

mod feed;
mod fleet;
mod handshake;
mod session;
#[cfg(test)]
mod tests;

use handshake::handshake;
use session::{Link, LinkActor, LinkCommand};

/// Time to reach an environment's relay (TCP, TLS, upgrade).
pub const ENV_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time the environment has to be present at its relay code once the host joined.
pub const ENV_JOIN_TIMEOUT: Duration = Duration::from_secs(4);
/// Time the environment has to answer the host's hello.
pub const ENV_HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// A call is written at once only on a session that has calls in flight and was heard from this
/// recently; otherwise one `status` round trip goes first, so a notice that the environment left,
/// already on its way, is read before the call is sent, and the call goes on a fresh session
/// instead of being lost. Costs one relay round trip on a call after a pause.
pub const LINK_FRESH: Duration = Duration::from_millis(200);
/// Time the environment has to answer that check.
pub const LINK_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one environment's reachability check in `fleet`.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(8);
pub use crate::tools::FLEET_TOOL;

/// What a host router needs.
#[derive(Clone)]
pub struct HostOptions {
    pub home: Home,
    pub dial: DialOptions,
    /// The agent's own relay; the relay token is sent only to it.
    pub relay: Option<RelayUrl>,
    /// Runs calls addressed to this home's own envKey or name.
    pub toolbox: Option<Toolbox>,
    /// Environment sessions run here, so the agent waits for them when it stops.
    pub tasks: TaskTracker,
    pub shutdown: CancellationToken,
}

/// Routes calls to environments and answers `fleet` (the host side of docs/PROTOCOL.md, "Environments").
#[derive(Clone)]
pub struct HostRouter {
    inner: Arc<Inner>,
}

struct Inner {
    options: HostOptions,
    /// One slot per envKey; its lock is held while connecting, so concurrent calls share one
    /// connection attempt.
    pool: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Link>>>>>,
    /// The follow of each environment some client of this host follows, by envKey (`feed.rs`).
    feeds: Mutex<HashMap<String, Arc<feed::Feed>>>,
    next_id: AtomicU64,
}

/// Where and how to reach one environment. `Debug` shows no credential.
struct Target {
    env_key: String,
    relay: RelayUrl,
    code: Secret,
    bearer: Secret,
}

impl Target {
    /// Changes whenever the environment is paired again (new code, bearer or relay).
    fn fingerprint(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        for part in [self.relay.as_str(), self.code.expose(), self.bearer.expose()] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hasher.finalize().into()
    }
}

enum Resolved {
    Local,
    Remote(Target),
}

type Outcome = Result<Value, ToolError>;

/// What became of a call handed to a session.
enum Delivery {
    /// The environment answered, or the session ended after the call was sent.
    Done(Outcome),
    /// The session ended before the call was written: the environment never saw it.
    NotSent,
}

fn refusal(code: ErrorCode, message: impl Into<String>) -> ToolError {
    ToolError::new(code, message)
}

fn unreachable(message: impl Into<String>) -> ToolError {
    refusal(ErrorCode::EnvironmentUnreachable, message)
}

/// A user-supplied environment reference, shortened for messages.
fn shown(env: &str) -> String {
    let mut text: String = env.chars().take(64).collect();
    if text.len() < env.len() {
        text.push('…');
    }
    text
}

impl HostRouter {
    /// A router that reads the registry and credentials of `options.home` on every call, so
    /// `voxa env add`/`remove` take effect on a running agent at once.
    pub fn new(options: HostOptions) -> Self {
        HostRouter {
            inner: Arc::new(Inner {
                options,
                pool: Mutex::default(),
                feeds: Mutex::default(),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// The `fleet` listing: every known environment and its state; with `probe`, each remote one
    /// is connected (or its refusal recorded) first.
    pub async fn fleet_list(&self, probe: bool) -> Result<Value, ToolError> {
        self.inner.clone().fleet_list(probe).await
    }
}

impl EnvRouter for HostRouter {
    fn route(
        &self,
        env: String,
        call: ToolCall,
        progress: mpsc::Sender<String>,
        viewer: Option<mpsc::Sender<Frame>>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.inner.clone().route(env, call, progress, viewer, cancel).boxed()
    }

    fn follow(
        &self,
        after: HashMap<String, HashMap<String, u64>>,
        scope: FollowScope,
        out: mpsc::Sender<Frame>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        self.inner.clone().follow(after, scope, out, cancel).boxed()
    }

    fn pass(&self, env: String, frame: ClientMessage) -> BoxFuture<'static, Result<(), ToolError>> {
        self.inner.clone().pass(env, frame).boxed()
    }

    fn is_local(&self, env: &str) -> bool {
        matches!(self.inner.resolve(env), Ok((_, Resolved::Local)))
    }

    fn run_tool(&self, kind: ToolKind, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        match kind {
            ToolKind::Fleet => self.inner.clone().fleet(args).boxed(),
            other => std::future::ready(Err(crate::tools::dispatch::unknown_tool(other.name()))).boxed(),
        }
    }
}

impl Inner {
    fn home(&self) -> &Home {
        &self.options.home
    }

    fn resolve(&self, env: &str) -> Result<(EnvEntry, Resolved), ToolError> {
        let internal = |err: anyhow::Error| refusal(ErrorCode::Internal, format!("{err:#}"));
        let registry = store::load_registry(self.home()).map_err(internal)?;
        let Some(entry) = registry.find(env).cloned() else {
            return Err(refusal(
                ErrorCode::UnknownEnvironment,
                format!("no environment has the envKey or name {:?}; `voxa env list` shows them", shown(env)),
            ));
        };
        if entry.is_self {
            return Ok((entry, Resolved::Local));
        }
        let pairings = store::load_pairings(self.home()).map_err(internal)?;
        let Some(outbound) = pairings.outbound.get(&entry.env_key) else {
            if pairings.revoked_bearers.contains_key(&entry.env_key) {
                return Err(refusal(
                    ErrorCode::PairingRevoked,
                    format!("{} revoked this host's pairing; pair again with `voxa env issue` there", entry.name),
                ));
            }
            return Err(refusal(
                ErrorCode::EnvironmentNotPaired,
                format!(
                    "this host holds no bearer for {}; pair with `voxa env issue` there and `voxa env add` here",
                    entry.name
                ),
            ));
        };
        let relay = RelayUrl::parse(&outbound.relay).map_err(|err| refusal(ErrorCode::Internal, err.0))?;
        let target = Target {
            env_key: entry.env_key.clone(),
            relay,
            code: outbound.code.clone(),
            bearer: outbound.bearer.clone(),
        };
        Ok((entry, Resolved::Remote(target)))
    }

    async fn route(
        self: Arc<Self>,
        env: String,
        call: ToolCall,
        progress: mpsc::Sender<String>,
        viewer: Option<mpsc::Sender<Frame>>,
        cancel: CancellationToken,
    ) -> Result<Value, ToolError> {
        let cancelled = || refusal(ErrorCode::Cancelled, "cancelled before the environment answered");
        // A call that provably never left this host (its session ended first) is sent once more
        // on a fresh session; anything the environment may have seen is never repeated.
        for _attempt in 0..2 {
            let (_, resolved) = self.resolve(&env)?;
            let target = match resolved {
                Resolved::Local => return self.run_local(call, progress, cancel).await,
                Resolved::Remote(target) => target,
            };
            let commands = tokio::select! {
                _ = cancel.cancelled() => return Err(cancelled()),
                link = self.link(&target) => link?,
            };
            let id = format!("h{}", self.next_id.fetch_add(1, Ordering::Relaxed));
            let (reply, mut answer) = oneshot::channel();
            let command = LinkCommand::Call {
                id: id.clone(),
                name: call.name.clone(),
                args: call.args.clone(),
                progress: progress.clone(),
                viewer: viewer.clone(),
                reply,
            };
            if commands.send(command).await.is_err() {
                continue;
            }
            let delivery = tokio::select! {
                delivery = &mut answer => delivery,
                _ = cancel.cancelled() => {
                    let _ = commands.send(LinkCommand::Cancel { id }).await;
                    return match tokio::time::timeout(protocol::CANCEL_GRACE, answer).await {
                        Ok(Ok(Delivery::Done(outcome))) => outcome,
                        _ => Err(refusal(ErrorCode::Cancelled, "cancelled")),
                    };
                }
            };
            match delivery {
                Ok(Delivery::Done(outcome)) => return outcome,
                Ok(Delivery::NotSent) => continue,
                Err(_) => return Err(unreachable("the session with the environment ended before the result")),
            }
        }
        Err(unreachable("the session with the environment ended before the call could be sent"))
    }

    async fn run_local(
        &self,
        call: ToolCall,
        progress: mpsc::Sender<String>,
        cancel: CancellationToken,
    ) -> Result<Value, ToolError> {
        let Some(toolbox) = &self.options.toolbox else {
            return Err(refusal(ErrorCode::Unavailable, "this process runs no tools"));
        };
        // The dispatcher checked the policy and audits the call; this machine only runs it.
        let Some(kind) = ToolKind::parse(&call.name) else {
            return Err(crate::tools::dispatch::unknown_tool(&call.name));
        };
        Ok(toolbox.run(kind, call.args, Some(progress), cancel).await?.result)
    }

    fn slot(&self, env_key: &str) -> Arc<tokio::sync::Mutex<Option<Link>>> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        pool.entry(env_key.to_owned()).or_default().clone()
    }

    fn forget(&self, env_key: &str) {
        let slot = self.pool.lock().unwrap_or_else(|p| p.into_inner()).remove(env_key);
        if let Some(slot) = slot {
            if let Ok(guard) = slot.try_lock() {
                if let Some(link) = guard.as_ref() {
                    link.alive.cancel();
                }
            }
        }
    }

    /// The live session with `target`, opened (and verified) if there is none.
    async fn link(&self, target: &Target) -> Result<mpsc::Sender<LinkCommand>, ToolError> {
        let slot = self.slot(&target.env_key);
        let mut guard = slot.lock().await;
        let fingerprint = target.fingerprint();
        if let Some(link) = guard.as_ref() {
            if !link.alive.is_cancelled() && link.fingerprint == fingerprint {
                return Ok(link.commands.clone());
            }
            link.alive.cancel();
        }
        *guard = None;
        let dial = super::dial_for(&self.options.dial, self.options.relay.as_ref(), &target.relay);
        let (socket, tools) = handshake(target, &dial).await?;
        let (commands, receiver) = mpsc::channel(protocol::SEND_QUEUE_FRAMES);
        let alive = self.options.shutdown.child_token();
        let actor = LinkActor::new(self.options.home.clone(), target.env_key.clone(), fingerprint, alive.clone());
        let span = info_span!("environment", env = %&target.env_key[..16]);
        self.options.tasks.spawn(actor.run(socket, receiver).instrument(span));
        *guard = Some(Link { commands: commands.clone(), alive, fingerprint, tools });
        Ok(commands)
    }

    /// State of an environment's pooled session: `Some(tools)` when connected.
    fn connected(&self, env_key: &str) -> Option<Vec<String>> {
        let slot = self.pool.lock().ok()?.get(env_key).cloned()?;
        let guard = slot.try_lock().ok()?;
        guard.as_ref().filter(|link| !link.alive.is_cancelled()).map(|link| link.tools.clone())
    }
}
