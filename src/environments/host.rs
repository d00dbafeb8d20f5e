//! The host side (docs/PROTOCOL.md, "Environments"): calls that name an environment go over one pooled, verified session
//! per environment — the host joins the pairing's relay code as the phone side, sends the host
//! hello with its bearer and a fresh nonce, and checks the environment's signature against the
//! envKey before anything else is sent. Also the `fleet` tool.

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
use super::EnvRouter;
use crate::config::RelayUrl;
use crate::net::client::{self, HelloCredential, HelloError, HelloStep, Opening};
use crate::net::dial::{self, ClientSocket, DialOptions};
use crate::net::liveness::{sleep_until, Heartbeat, Liveness, Pulse};
use crate::protocol::{
    self, AgentMessage, BearerFrame, ClientMessage, ErrorCode, Hello, PeerRole, ToolCall, ToolError, HOST_ROLE,
};
use crate::secret::Secret;
use crate::state::Home;
use crate::tools::{ToolKind, Toolbox};

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

/// A verified session with one environment, served by its own task.
struct Link {
    commands: mpsc::Sender<LinkCommand>,
    /// Cancelled when the session ended, or to end it.
    alive: CancellationToken,
    fingerprint: [u8; 32],
    tools: Vec<String>,
}

enum LinkCommand {
    Call { id: String, name: String, args: Value, progress: mpsc::Sender<String>, reply: oneshot::Sender<Delivery> },
    Cancel { id: String },
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
        HostRouter { inner: Arc::new(Inner { options, pool: Mutex::default(), next_id: AtomicU64::new(1) }) }
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
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.inner.clone().route(env, call, progress, cancel).boxed()
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
        Ok(toolbox.run(kind, call.args, "self", Some(progress), cancel).await?.result)
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

    async fn fleet(self: Arc<Self>, args: Value) -> Result<Value, ToolError> {
        let invalid = |message: &str| refusal(ErrorCode::InvalidArgs, message);
        if !args.is_object() {
            return Err(invalid("fleet takes an object: {\"action\":\"list\"|\"remove\"|\"revoke\", …}"));
        }
        let action = match args.get("action") {
            None | Some(Value::Null) => "list",
            Some(Value::String(action)) => action.as_str(),
            Some(_) => return Err(invalid("`action` must be \"list\", \"remove\" or \"revoke\"")),
        };
        if action == "list" {
            let probe = args.get("probe").and_then(Value::as_bool).unwrap_or(true);
            return self.fleet_list(probe).await;
        }
        if action != "remove" && action != "revoke" {
            return Err(invalid("`action` must be \"list\", \"remove\" or \"revoke\""));
        }
        // Pairing actions over a socket must present the host token (the phone never has it).
        let token = args.get("host_token").and_then(Value::as_str);
        store::authorize(self.home(), token).map_err(|_| {
            refusal(ErrorCode::HostTokenRequired, "pairing actions need this home's host token (`.host-token`)")
        })?;
        let Some(target) = args.get("target").and_then(Value::as_str).filter(|t| !t.is_empty()) else {
            return Err(invalid("`target` (envKey or name) is required"));
        };
        let token = token.unwrap_or_default();
        let home = self.home().clone();
        let (target_owned, token_owned) = (target.to_owned(), token.to_owned());
        let outcome = tokio::task::spawn_blocking(move || match action_of(&args) {
            "remove" => super::remove(&home, &target_owned, &token_owned)
                .map(|removed| json!({"removed": {"envKey": removed.env_key, "name": removed.name}})),
            _ => super::revoke(&home, &target_owned, &token_owned, "host-token")
                .map(|revoked| json!({"revoked": revoked.pairings, "alreadyRevoked": revoked.already})),
        })
        .await
        .map_err(|err| refusal(ErrorCode::Internal, format!("pairing action failed: {err}")))?;
        match outcome {
            Ok(value) => {
                if let Some(key) = value.pointer("/removed/envKey").and_then(Value::as_str) {
                    self.forget(key);
                }
                Ok(value)
            }
            Err(err) => Err(super::tool_error_of(&err)),
        }
    }

    async fn fleet_list(self: Arc<Self>, probe: bool) -> Result<Value, ToolError> {
        let internal = |err: anyhow::Error| refusal(ErrorCode::Internal, format!("{err:#}"));
        let registry = store::load_registry(self.home()).map_err(internal)?;
        let checks = registry.environments.iter().map(|entry| {
            let this = self.clone();
            let entry = entry.clone();
            async move { this.describe(entry, probe).await }
        });
        let environments = futures_util::future::join_all(checks).await;
        Ok(json!({ "environments": environments }))
    }

    async fn describe(&self, entry: EnvEntry, probe: bool) -> Value {
        let mut out = json!({"name": entry.name, "envKey": entry.env_key});
        if entry.is_self {
            out["self"] = json!(true);
            out["state"] = json!("this machine");
            out["reachable"] = json!(true);
            return out;
        }
        out["relay"] = json!(entry.relay);
        let state = match self.resolve(&entry.env_key) {
            Err(error) => Err(error),
            Ok((_, Resolved::Local)) => Ok(()),
            Ok((_, Resolved::Remote(target))) if probe => {
                match tokio::time::timeout(PROBE_TIMEOUT, self.link(&target)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(error)) => Err(error),
                    Err(_) => Err(unreachable("no answer in time")),
                }
            }
            Ok(_) => Ok(()),
        };
        let paired = !matches!(&state, Err(e) if e.code == ErrorCode::EnvironmentNotPaired || e.code == ErrorCode::PairingRevoked);
        out["paired"] = json!(paired);
        match (state, self.connected(&entry.env_key)) {
            (Ok(()), Some(tools)) => {
                out["state"] = json!("connected");
                out["reachable"] = json!(true);
                out["connected"] = json!(true);
                out["tools"] = json!(tools);
            }
            (Ok(()), None) => {
                out["state"] = json!("idle");
                out["connected"] = json!(false);
            }
            (Err(error), _) => {
                out["state"] = json!(error.code.as_str());
                out["reachable"] = json!(false);
                out["connected"] = json!(false);
            }
        }
        out
    }
}

fn action_of(args: &Value) -> &str {
    args.get("action").and_then(Value::as_str).unwrap_or("list")
}

/// Opens the session: join the code as the phone side, wait for the environment, say hello,
/// verify the answer. Bounded at every step.
async fn handshake(target: &Target, dial: &DialOptions) -> Result<(ClientSocket, Vec<String>), ToolError> {
    let url = target.relay.socket_url("/ws", target.code.expose());
    let socket = match tokio::time::timeout(ENV_CONNECT_TIMEOUT, dial::connect(&url, dial)).await {
        Ok(Ok(socket)) => socket,
        Ok(Err(err)) => return Err(unreachable(format!("could not reach relay {}: {err:#}", target.relay))),
        Err(_) => return Err(unreachable(format!("relay {} did not answer in time", target.relay))),
    };
    hello_on(socket, target).await
}

/// The handshake on a connected relay socket, the host's [`HostProof`] run by the one client
/// hello. The order is the contract: our nonce, the environment's signature over it, and only
/// then the bearer. An impostor holding the pairing's code learns no bearer.
async fn hello_on(mut socket: ClientSocket, target: &Target) -> Result<(ClientSocket, Vec<String>), ToolError> {
    let mut proof = HostProof { target, bearer_sent: false };
    match client::hello_with(&mut socket, &mut proof).await {
        Ok(ok) => Ok((socket, ok.tools)),
        Err(failure) => Err(hello_failure(failure, target)),
    }
}

/// The host's credential: it names the environment's key, checks the environment's signature
/// over its nonce, and only then presents the pairing's bearer.
struct HostProof<'a> {
    target: &'a Target,
    bearer_sent: bool,
}

impl HelloCredential for HostProof<'_> {
    fn opening(&self) -> Opening {
        Opening::Presence(ENV_JOIN_TIMEOUT)
    }

    fn hello(&self, _challenge: Option<&str>, nonce: &str) -> Hello {
        Hello {
            protocol: Some(protocol::PROTOCOL_VERSION),
            role: Some(HOST_ROLE.to_owned()),
            env_key: Some(self.target.env_key.clone()),
            nonce: Some(nonce.to_owned()),
            client: Some(crate::agent_name()),
            ..Default::default()
        }
    }

    fn answer_limit(&self) -> Option<Duration> {
        Some(ENV_HELLO_TIMEOUT)
    }

    fn answer(&mut self, answer: AgentMessage, _challenge: Option<&str>, nonce: &str) -> HelloStep {
        let env_key = &self.target.env_key;
        match answer {
            AgentMessage::Identity { .. } if self.bearer_sent => HelloStep::Reject(HelloError::Unexpected),
            AgentMessage::Identity { env_key: claimed, nonce: env_nonce, signature } => {
                // The signature must name the code this host dialled: one made on another pairing
                // of the same environment (relayed by whoever holds both codes) does not count.
                let dialled = code_hash(self.target.code.expose());
                let binding = HelloBinding { code_hash: &dialled, host_nonce: nonce, env_nonce: &env_nonce };
                if claimed != *env_key || !verify_hello(env_key, &binding, &signature) {
                    return HelloStep::Reject(HelloError::Impostor);
                }
                self.bearer_sent = true;
                HelloStep::Reply(ClientMessage::Bearer(BearerFrame { bearer: self.target.bearer.expose().to_owned() }))
            }
            AgentMessage::HelloOk(ok) if self.bearer_sent => HelloStep::Accept(ok),
            // A session opened before the environment proved its key is not one to trust.
            AgentMessage::HelloOk(_) => HelloStep::Reject(HelloError::Impostor),
            _ => HelloStep::Ignore,
        }
    }
}

/// The host's wording of a failed hello.
fn hello_failure(failure: HelloError, target: &Target) -> ToolError {
    match failure {
        HelloError::Absent => unreachable(format!(
            "the environment is not connected to relay {} (is `voxa run` running there?)",
            target.relay
        )),
        HelloError::Ended | HelloError::ClosedBy(_) | HelloError::Failed(_) => {
            unreachable("the environment closed the connection during the hello")
        }
        HelloError::SendFailed(_) => unreachable("the relay connection failed during the hello"),
        HelloError::AgentLeft => unreachable("the environment left during the hello"),
        HelloError::Refused { code, .. } => refused_by_environment(code),
        HelloError::TimedOut => unreachable("the environment did not answer the hello in time"),
        HelloError::Impostor => refusal(
            ErrorCode::EnvironmentIdentityMismatch,
            "the machine answering this pairing could not prove it holds the environment's key; nothing was sent to it",
        ),
        HelloError::Restarted | HelloError::Unexpected => {
            unreachable("the environment answered the bearer with something else than hello_ok")
        }
        HelloError::Internal(err) => refusal(ErrorCode::Internal, format!("{err:#}")),
    }
}

/// The host's reading of a refusal the environment sent. Never repeats anything it was sent.
fn refused_by_environment(code: ErrorCode) -> ToolError {
    let message = match code {
        ErrorCode::UnknownEnvironment => {
            "the environment does not hold this envKey (it was re-keyed, or it is another machine); pair again"
        }
        ErrorCode::BearerRefused => "the environment refused this host's bearer; pair again",
        ErrorCode::PairingRevoked => "the environment revoked this host's pairing",
        ErrorCode::UnauthenticatedCall => "the environment did not accept the hello in time",
        _ => "the environment refused the hello",
    };
    refusal(if code.is_refusal() { code } else { ErrorCode::EnvironmentIdentityMismatch }, message)
}

struct Pending {
    progress: mpsc::Sender<String>,
    reply: oneshot::Sender<Delivery>,
}

/// A call waiting for the session check before it is written.
struct Queued {
    id: String,
    frame: Message,
    pending: Pending,
}

/// Serves one verified environment session until it ends.
struct LinkActor {
    home: Home,
    env_key: String,
    fingerprint: [u8; 32],
    alive: CancellationToken,
    pending: HashMap<String, Pending>,
    queued: Vec<Queued>,
    /// Set while a `status` check is outstanding.
    check_deadline: Option<tokio::time::Instant>,
    liveness: Liveness,
}

enum Step {
    Continue,
    End(ToolError),
}

impl LinkActor {
    fn new(home: Home, env_key: String, fingerprint: [u8; 32], alive: CancellationToken) -> Self {
        LinkActor {
            home,
            env_key,
            fingerprint,
            alive,
            pending: HashMap::new(),
            queued: Vec::new(),
            check_deadline: None,
            liveness: Liveness::new(Heartbeat::PROTOCOL),
        }
    }

    async fn run(mut self, socket: ClientSocket, mut commands: mpsc::Receiver<LinkCommand>) {
        let (mut sink, mut stream) = socket.split();
        let end = 'session: loop {
            let check_deadline = self.check_deadline;
            tokio::select! {
                // Frames already received are read before new calls are written.
                biased;
                _ = self.alive.cancelled() => break unreachable("the session with the environment was closed"),
                frame = stream.next() => {
                    self.liveness.heard();
                    let step = match frame {
                        Some(Ok(Message::Text(text))) => self.on_text(&text).await,
                        Some(Ok(Message::Close(_))) | None => Step::End(unreachable("the relay closed the connection")),
                        Some(Err(err)) => {
                            debug!(%err, "environment session failed");
                            Step::End(unreachable("the relay connection failed"))
                        }
                        Some(Ok(_)) => Step::Continue,
                    };
                    if let Step::End(error) = step {
                        break error;
                    }
                    for frame in self.flush_if_checked() {
                        if sink.send(frame).await.is_err() {
                            break 'session unreachable("the relay connection failed");
                        }
                    }
                }
                _ = sleep_until(check_deadline) => break unreachable("the environment stopped answering"),
                command = commands.recv() => {
                    let Some(command) = command else { break unreachable("the host stopped") };
                    if let Some(frame) = self.on_command(command) {
                        if sink.send(frame).await.is_err() {
                            break unreachable("the relay connection failed");
                        }
                    }
                }
                pulse = self.liveness.tick() => match pulse {
                    Pulse::Silent(_) => break unreachable("the environment stopped answering"),
                    Pulse::Ping => { let _ = sink.send(Message::Ping(Default::default())).await; }
                },
            }
        };
        self.alive.cancel();
        commands.close();
        for (_, pending) in self.pending.drain() {
            let _ = pending.reply.send(Delivery::Done(Err(end.clone())));
        }
        for queued in self.queued.drain(..) {
            let _ = queued.pending.reply.send(Delivery::NotSent);
        }
        while let Ok(command) = commands.try_recv() {
            if let LinkCommand::Call { reply, .. } = command {
                let _ = reply.send(Delivery::NotSent);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
    }

    /// The frame to write for a command, if any: the call itself on a fresh session, else a
    /// `status` check with the call queued behind it.
    fn on_command(&mut self, command: LinkCommand) -> Option<Message> {
        match command {
            LinkCommand::Call { id, name, args, progress, reply } => {
                if self.pending.len() + self.queued.len() >= protocol::MAX_CALLS_IN_FLIGHT {
                    let busy = refusal(ErrorCode::Busy, "too many calls in flight to this environment");
                    let _ = reply.send(Delivery::Done(Err(busy)));
                    return None;
                }
                let call = ToolCall { id: id.clone(), name, args, env: None, caller: None };
                let frame = Message::text(ClientMessage::ToolCall(call).to_json());
                let pending = Pending { progress, reply };
                if self.check_deadline.is_some() {
                    self.queued.push(Queued { id, frame, pending });
                    return None;
                }
                // Writing on a session the environment may just have left would lose the call, so an
                // idle session is checked first; only a busy, recently heard one is trusted as is.
                if !self.pending.is_empty() && self.liveness.heard_within(LINK_FRESH) {
                    self.pending.insert(id, pending);
                    return Some(frame);
                }
                self.queued.push(Queued { id, frame, pending });
                self.check_deadline = Some(tokio::time::Instant::now() + LINK_CHECK_TIMEOUT);
                Some(Message::text(ClientMessage::Status.to_json()))
            }
            LinkCommand::Cancel { id } => {
                if let Some(index) = self.queued.iter().position(|q| q.id == id) {
                    let queued = self.queued.remove(index);
                    let cancelled = refusal(ErrorCode::Cancelled, "cancelled before it was sent");
                    let _ = queued.pending.reply.send(Delivery::Done(Err(cancelled)));
                    return None;
                }
                self.pending.contains_key(&id).then(|| Message::text(ClientMessage::Cancel { id }.to_json()))
            }
        }
    }

    /// The queued calls, once the check has been answered.
    fn flush_if_checked(&mut self) -> Vec<Message> {
        if self.check_deadline.is_some() {
            return Vec::new();
        }
        self.queued
            .drain(..)
            .map(|queued| {
                self.pending.insert(queued.id, queued.pending);
                queued.frame
            })
            .collect()
    }

    async fn on_text(&mut self, text: &str) -> Step {
        if let Some(notice) = crate::net::relay_framing::Presence::parse(text) {
            // Any change of the agent side ends the session: whoever is there now has not proven
            // the envKey.
            if notice.peer == PeerRole::Agent {
                return Step::End(unreachable("the environment left"));
            }
            return Step::Continue;
        }
        match serde_json::from_str::<AgentMessage>(text) {
            Ok(AgentMessage::ToolProgress { id, chunk, .. }) => {
                if let Some(pending) = self.pending.get(&id) {
                    // Progress is best effort; the result carries the whole output.
                    let _ = pending.progress.try_send(chunk);
                }
            }
            Ok(AgentMessage::ToolResult(result)) => {
                if let Some(pending) = self.pending.remove(&result.id) {
                    let outcome = if result.ok {
                        Ok(result.result.unwrap_or(Value::Null))
                    } else {
                        Err(result
                            .error
                            .unwrap_or_else(|| refusal(ErrorCode::Internal, "the environment sent no error")))
                    };
                    let _ = pending.reply.send(Delivery::Done(outcome));
                }
            }
            // The answer to the session check: the environment that proved its key is still there.
            Ok(AgentMessage::Status(_)) => self.check_deadline = None,
            Ok(AgentMessage::Error { code: ErrorCode::PairingRevoked, .. }) => {
                self.forget_revoked_bearer().await;
                return Step::End(refused_by_environment(ErrorCode::PairingRevoked));
            }
            Ok(AgentMessage::Error { code, .. }) => debug!(%code, "environment reported an error"),
            // Images stay on the environment side: the host forwards results, not screenshots.
            _ => {}
        }
        Step::Continue
    }

    /// The environment, on a session it proved, said our pairing is revoked: the bearer is
    /// useless, so it moves to this home's `revokedBearers` and later calls get
    /// `pairing-revoked` without dialing.
    async fn forget_revoked_bearer(&self) {
        let (home, env_key, fingerprint) = (self.home.clone(), self.env_key.clone(), self.fingerprint);
        let result = tokio::task::spawn_blocking(move || {
            store::update(&home, |_, pairings| {
                let Some(outbound) = pairings.outbound.get(&env_key) else { return Ok(()) };
                let relay = RelayUrl::parse(&outbound.relay).map_err(anyhow::Error::new)?;
                let current = Target {
                    env_key: env_key.clone(),
                    relay,
                    code: outbound.code.clone(),
                    bearer: outbound.bearer.clone(),
                };
                if current.fingerprint() != fingerprint {
                    return Ok(()); // Paired again meanwhile.
                }
                let hash = hex::encode(store::bearer_hash(outbound.bearer.expose()));
                pairings.outbound.remove(&env_key);
                pairings.revoked_bearers.entry(env_key.clone()).or_default().push(store::RevokedBearer {
                    id: None,
                    bearer_sha256: hash,
                    revoked_at: store::now(),
                });
                Ok(())
            })
        })
        .await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(err)) => warn!("could not record the revoked pairing: {err:#}"),
            Err(err) => warn!("could not record the revoked pairing: {err}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::identity::Identity;
    use super::*;
    use tokio::io::DuplexStream;
    use tokio_tungstenite::WebSocketStream;

    type Relay = WebSocketStream<DuplexStream>;
    /// How a played environment answers a hello.
    type Answer = Box<dyn FnOnce(&Value) -> Option<Value> + Send>;

    /// A host socket and the far end, where the test plays relay and environment.
    async fn sockets() -> (ClientSocket, Relay) {
        let (near, far) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { tokio_tungstenite::accept_async(far).await.unwrap() });
        let near: Box<dyn dial::Io> = Box::new(near);
        let (client, _) = tokio_tungstenite::client_async("ws://relay.test/ws?code=x", near).await.unwrap();
        (crate::seal::Socket::plain(client), server.await.unwrap())
    }

    fn target(identity: &Identity) -> Target {
        Target {
            env_key: identity.env_key(),
            relay: RelayUrl::parse("https://relay.example.com").unwrap(),
            code: Secret::from_string("0".repeat(32)),
            bearer: Secret::from_string(format!("vbx_{}", "1".repeat(32))),
        }
    }

    /// Sends a JSON frame; a JSON string goes as the text it holds (a relay notice).
    async fn send_json(relay: &mut Relay, value: Value) {
        let text = match value {
            Value::String(text) => text,
            value => value.to_string(),
        };
        relay.send(Message::text(text)).await.unwrap();
    }

    /// The relay's notice that the agent side came or went.
    fn presence(state: crate::protocol::PeerState) -> Value {
        Value::String(crate::net::relay_framing::Presence::new(PeerRole::Agent, state).to_text())
    }

    async fn recv_json(relay: &mut Relay) -> Value {
        loop {
            match relay.next().await.unwrap().unwrap() {
                Message::Text(text) => return serde_json::from_str(&text).unwrap(),
                _ => continue,
            }
        }
    }

    fn joined() -> Value {
        presence(crate::protocol::PeerState::Joined)
    }

    /// Runs the handshake against an environment that answers `answer(hello)` and then, should
    /// the host present a bearer, `hello_ok`. Returns the outcome and every frame the host sent.
    async fn handshake_with(
        identity: &Identity,
        answer: impl FnOnce(&Value) -> Option<Value> + Send + 'static,
    ) -> (Result<Vec<String>, ToolError>, Vec<Value>) {
        let (client, mut relay) = sockets().await;
        let environment = tokio::spawn(async move {
            send_json(&mut relay, joined()).await;
            let hello = recv_json(&mut relay).await;
            let mut sent = vec![hello.clone()];
            if let Some(reply) = answer(&hello) {
                send_json(&mut relay, reply).await;
            }
            while let Some(Ok(frame)) = relay.next().await {
                let Message::Text(text) = frame else { continue };
                let value: Value = serde_json::from_str(&text).unwrap();
                if value["type"] == "bearer" {
                    let ok =
                        json!({"type":"hello_ok","agent":"voxa/t","mode":"hosted","tools":["list_dir"],"protocol":2});
                    send_json(&mut relay, ok).await;
                }
                sent.push(value);
            }
            sent
        });
        let outcome = hello_on(client, &target(identity)).await.map(|(_, tools)| tools);
        // The host closed or dropped its socket: the environment's loop ends.
        let sent = tokio::time::timeout(Duration::from_secs(10), environment).await.unwrap().unwrap();
        (outcome, sent)
    }

    /// The identity frame `identity` sends for a hello on a code hashing to `code`.
    fn signed_for(identity: &Identity, code: &[u8; 32], hello: &Value) -> Value {
        let env_nonce = crate::protocol::new_nonce().unwrap();
        let host_nonce = hello["nonce"].as_str().unwrap();
        let binding = HelloBinding { code_hash: code, host_nonce, env_nonce: &env_nonce };
        json!({"type":"identity","envKey": identity.env_key(),"nonce": env_nonce,"signature": identity.sign_hello(&binding)})
    }

    /// The code hash of [`target`]'s code.
    fn dialled() -> [u8; 32] {
        code_hash(&"0".repeat(32))
    }

    fn identity_frame(env_key: &str, signature: &str) -> Value {
        json!({"type":"identity","envKey": env_key,"nonce": "e".repeat(32),"signature": signature})
    }

    #[tokio::test]
    async fn a_proven_environment_gets_the_bearer_and_is_accepted_with_its_tools() {
        let identity = Arc::new(Identity::generate().unwrap());
        let signer = identity.clone();
        let (tools, sent) = handshake_with(&identity, move |hello| {
            assert_eq!((hello["role"].as_str(), hello["protocol"].as_u64()), (Some("host"), Some(2)));
            assert_eq!(hello["envKey"], signer.env_key().as_str());
            assert!(hello.get("bearer").is_none(), "the hello carries no bearer: {hello}");
            Some(signed_for(&signer, &dialled(), hello))
        })
        .await;
        assert_eq!(tools.unwrap(), ["list_dir"]);
        assert_eq!(sent[1]["type"], "bearer");
        assert!(sent[1]["bearer"].as_str().unwrap().starts_with("vbx_"));
    }

    #[tokio::test]
    async fn answers_that_do_not_prove_the_key_are_an_identity_mismatch_and_get_no_bearer() {
        let identity = Arc::new(Identity::generate().unwrap());
        let impostor = Arc::new(Identity::generate().unwrap());
        let key = identity.env_key();
        let cases: Vec<Answer> = vec![
            Box::new({
                let key = key.clone();
                move |_| Some(identity_frame(&key, &"0".repeat(128)))
            }),
            Box::new({
                let impostor = impostor.clone();
                move |hello| Some(signed_for(&impostor, &dialled(), hello))
            }),
            Box::new({
                let identity = identity.clone();
                move |_| Some(signed_for(&identity, &dialled(), &json!({"nonce": "a".repeat(32)})))
            }),
            // Signed for another pairing's code.
            Box::new({
                let identity = identity.clone();
                move |hello| Some(signed_for(&identity, &code_hash(&"1".repeat(32)), hello))
            }),
            // Its own nonce replaced after signing.
            Box::new({
                let identity = identity.clone();
                move |hello| {
                    let mut frame = signed_for(&identity, &dialled(), hello);
                    frame["nonce"] = json!("f".repeat(32));
                    Some(frame)
                }
            }),
            Box::new(|_| Some(json!({"type":"hello_ok","agent":"x","mode":"hosted","tools":[]}))),
        ];
        for answer in cases {
            let (outcome, sent) = handshake_with(&identity, answer).await;
            assert_eq!(outcome.unwrap_err().code, ErrorCode::EnvironmentIdentityMismatch);
            assert_eq!(sent.len(), 1, "only the hello was sent: {sent:?}");
            assert!(!sent.iter().any(|frame| frame.to_string().contains("vbx_")), "{sent:?}");
        }
    }

    /// The relay attack: someone holding two pairing codes of one environment sits on the host's
    /// code as the agent, has the real environment answer the host's hello on the other code, and
    /// hands that answer back. The real gate signs, the real host checks: no bearer leaves.
    #[tokio::test]
    async fn an_answer_relayed_from_another_pairing_of_the_environment_gets_no_bearer() {
        use crate::agent::gate::{Gate, GateShared, GateState, HelloStep, LivePairing, PairingGate};
        let identity = Arc::new(Identity::generate().unwrap());
        let theirs = "1".repeat(32);
        let mut state = GateState { identity: Some(identity.clone()), ..Default::default() };
        for (id, code) in [("p_host", "0".repeat(32)), ("p_theirs", theirs)] {
            let pairing = LivePairing {
                bearer_hash: [7; 32],
                bound_to: identity.env_key(),
                code_hash: code_hash(&code),
                revoked: CancellationToken::new(),
            };
            state.live.insert(id.into(), pairing);
        }
        let shared = Arc::new(GateShared { state: std::sync::Mutex::new(state), ..Default::default() });
        // The environment's gate on the attacker's own pairing, which answers any host hello.
        let gate = PairingGate { shared, pairing_id: "p_theirs".into() };
        let (outcome, sent) = handshake_with(&identity, move |hello| {
            let hello: Hello = serde_json::from_value(hello.clone()).unwrap();
            match gate.admit(&hello, "") {
                Ok(HelloStep::AwaitBearer(answer)) => Some(serde_json::to_value(answer).unwrap()),
                other => panic!("the environment did not sign: {other:?}"),
            }
        })
        .await;
        assert_eq!(outcome.unwrap_err().code, ErrorCode::EnvironmentIdentityMismatch);
        assert_eq!(sent.len(), 1, "only the hello was sent: {sent:?}");
        assert!(!sent.iter().any(|frame| frame.to_string().contains("vbx_")), "the bearer was stolen: {sent:?}");
    }

    #[tokio::test]
    async fn refusals_of_the_environment_keep_their_code_and_never_echo() {
        let identity = Identity::generate().unwrap();
        for code in ["unknown-environment", "bearer-refused", "pairing-revoked"] {
            let (outcome, _) =
                handshake_with(&identity, move |_| Some(json!({"type":"error","code": code,"message":"vbx_echo"})))
                    .await;
            let error = outcome.unwrap_err();
            assert_eq!(error.code.as_str(), code);
            assert!(!error.message.contains("vbx_"), "{}", error.message);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_absent_or_silent_environment_is_unreachable_within_bounds() {
        let identity = Identity::generate().unwrap();
        let (client, relay) = sockets().await;
        let started = tokio::time::Instant::now();
        let error = hello_on(client, &target(&identity)).await.err().unwrap();
        assert_eq!(error.code, ErrorCode::EnvironmentUnreachable);
        assert_eq!(started.elapsed(), ENV_JOIN_TIMEOUT);
        drop(relay);

        let started = tokio::time::Instant::now();
        let error = handshake_with(&identity, |_| None).await.0.unwrap_err();
        assert_eq!(error.code, ErrorCode::EnvironmentUnreachable);
        assert_eq!(started.elapsed(), ENV_HELLO_TIMEOUT);

        let error =
            handshake_with(&identity, |_| Some(presence(crate::protocol::PeerState::Left))).await.0.unwrap_err();
        assert_eq!(error.code, ErrorCode::EnvironmentUnreachable);
    }

    /// A running link actor and the far end of its socket.
    async fn actor() -> (mpsc::Sender<LinkCommand>, Relay, CancellationToken, tempfile::TempDir) {
        let (client, relay) = sockets().await;
        let tmp = tempfile::tempdir().unwrap();
        let alive = CancellationToken::new();
        let actor = LinkActor::new(Home::at(tmp.path().join("h")), "k".repeat(64), [0; 32], alive.clone());
        let (commands, receiver) = mpsc::channel(8);
        tokio::spawn(actor.run(client, receiver));
        (commands, relay, alive, tmp)
    }

    async fn call(commands: &mpsc::Sender<LinkCommand>, id: &str) -> oneshot::Receiver<Delivery> {
        let (reply, answer) = oneshot::channel();
        let (progress, _) = mpsc::channel(1);
        let command = LinkCommand::Call { id: id.into(), name: "list_dir".into(), args: json!({}), progress, reply };
        commands.send(command).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn an_idle_session_is_checked_before_a_call_is_written() {
        let (commands, mut relay, _alive, _tmp) = actor().await;
        let answer = call(&commands, "h1").await;
        assert_eq!(recv_json(&mut relay).await["type"], "status");
        let status = AgentMessage::Status(Default::default());
        relay.send(Message::text(status.to_json())).await.unwrap();
        let written = recv_json(&mut relay).await;
        assert_eq!((written["type"].as_str(), written["id"].as_str()), (Some("tool_call"), Some("h1")));
        send_json(&mut relay, json!({"type":"tool_result","id":"h1","ok":true,"result":{"n":1}})).await;
        match answer.await.unwrap() {
            Delivery::Done(Ok(value)) => assert_eq!(value, json!({"n":1})),
            _ => panic!("expected the result"),
        }
    }

    #[tokio::test]
    async fn a_call_behind_a_check_the_environment_never_answered_is_not_sent() {
        let (commands, mut relay, alive, _tmp) = actor().await;
        let answer = call(&commands, "h1").await;
        assert_eq!(recv_json(&mut relay).await["type"], "status");
        send_json(&mut relay, presence(crate::protocol::PeerState::Left)).await;
        assert!(matches!(answer.await.unwrap(), Delivery::NotSent));
        alive.cancelled().await;
        // Nothing but the check was ever written.
        while let Some(Ok(frame)) = relay.next().await {
            if let Message::Text(text) = frame {
                panic!("unexpected frame after the session ended: {text}");
            }
        }
    }

    #[tokio::test]
    async fn calls_in_flight_end_with_the_reason_the_session_ended() {
        let (commands, mut relay, _alive, tmp) = actor().await;
        let answer = call(&commands, "h1").await;
        assert_eq!(recv_json(&mut relay).await["type"], "status");
        relay.send(Message::text(AgentMessage::Status(Default::default()).to_json())).await.unwrap();
        assert_eq!(recv_json(&mut relay).await["id"], "h1");
        send_json(&mut relay, json!({"type":"error","code":"pairing-revoked"})).await;
        match answer.await.unwrap() {
            Delivery::Done(Err(error)) => assert_eq!(error.code, ErrorCode::PairingRevoked),
            _ => panic!("expected pairing-revoked"),
        }
        drop(tmp);
    }
}
