//! `voxa run`: the loopback server plus the relay dialer, a small reconnect actor that keeps one
//! outbound connection alive through sleep, roaming and relay restarts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::StreamExt;
use rand::Rng;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info_span, warn, Instrument};

use crate::cli::{RunArgs, Settings};
use crate::config::{Config, RelayUrl, DEFAULT_GEMINI_MODEL};
use crate::dial::{self, DialOptions};
use crate::error::ConfigError;
use crate::gemini::GeminiConfig;
use crate::output::Printer;
use crate::protocol::{self, close, AgentMessage, ErrorCode, PeerNotice, PeerRole, PeerState};
use crate::secret::Secret;
use crate::session::{self, AgentContext, Gate, HelloStep, Session, TokenGate};
use crate::state::{Home, Secrets};
use crate::tools::{Toolbox, ToolboxOptions};
use crate::writer::Writer;

/// Public Gemini Live endpoint (SPEC §7).
pub const GEMINI_LIVE_URL: &str =
    "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";

/// A 4001 this soon after an abandoned dial is taken for that dial arriving late, not for
/// another agent: the dialer dials again without warning that its code is in use.
pub const STALE_DIAL_WINDOW: Duration = Duration::from_secs(2 * dial::CONNECT_TIMEOUT.as_secs());

/// How the dialer notices a dead relay connection.
#[derive(Clone, Copy, Debug)]
pub struct Heartbeat {
    /// Ping the relay when nothing was sent for this long.
    pub ping_every: Duration,
    /// Give the connection up when nothing arrived for this long.
    pub dead_after: Duration,
}

impl Default for Heartbeat {
    fn default() -> Self {
        // A half-open socket is noticed within 25 s when idle (goal: 30 s).
        Heartbeat { ping_every: Duration::from_secs(10), dead_after: Duration::from_secs(25) }
    }
}

/// Exponential backoff with full jitter.
#[derive(Clone, Copy, Debug)]
pub struct BackoffPolicy {
    /// Ceiling of the first delay.
    pub base: Duration,
    /// Largest delay.
    pub cap: Duration,
    /// A connection that stayed up this long proved healthy and resets the backoff.
    pub healthy_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
            healthy_after: Duration::from_secs(10),
        }
    }
}

/// Delays between reconnect attempts.
#[derive(Debug)]
pub struct Backoff {
    policy: BackoffPolicy,
    attempt: u32,
}

impl Backoff {
    pub fn new(policy: BackoffPolicy) -> Self {
        Backoff { policy, attempt: 0 }
    }

    /// The next delay: uniform in `[0, min(cap, base·2^attempt)]`.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(16)).unwrap_or(u32::MAX);
        let ceiling = self.policy.base.saturating_mul(factor).min(self.policy.cap);
        self.attempt = self.attempt.saturating_add(1);
        ceiling.mul_f64(rand::rng().random::<f64>())
    }

    /// Attempts since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Everything a running agent needs, validated.
pub struct AgentOptions {
    pub home: Home,
    pub secrets: Secrets,
    /// `None`: loopback only (no relay).
    pub relay: Option<RelayUrl>,
    pub workspace: PathBuf,
    pub config: Config,
    pub dial: DialOptions,
    pub heartbeat: Heartbeat,
    pub backoff: BackoffPolicy,
    pub gemini: Option<GeminiConfig>,
    pub printer: Printer,
}

/// A started agent: its loopback address, shared state and shutdown handle.
pub struct RunningAgent {
    pub loopback: SocketAddr,
    pub ctx: Arc<AgentContext>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl RunningAgent {
    /// Stops every task and waits for them.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Waits until the agent stops (its shutdown token was cancelled).
    pub async fn wait(&self) {
        self.shutdown.cancelled().await;
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Starts the loopback server on `listener` and, with a relay, the dialer.
pub async fn start(options: AgentOptions, listener: TcpListener, shutdown: CancellationToken) -> Result<RunningAgent> {
    let loopback = listener.local_addr().context("loopback listener has no address")?;
    let audit = crate::audit::Audit::new(options.home.audit_dir()?);
    let toolbox = Toolbox::new(ToolboxOptions {
        workspace: options.workspace.clone(),
        config: options.config.clone(),
        audit: Some(audit),
        env: None,
    })?;
    let mut ctx = AgentContext::new(toolbox);
    ctx.gemini = options.gemini.map(Arc::new);
    if let Some(relay) = &options.relay {
        if let Ok(mut shown) = ctx.status.relay.lock() {
            *shown = relay.to_string();
        }
    }
    let tasks = TaskTracker::new();
    ctx.router = Some(Arc::new(crate::environments::HostRouter::new(crate::environments::HostOptions {
        home: options.home.clone(),
        dial: options.dial.clone(),
        relay: options.relay.clone(),
        toolbox: Some(ctx.toolbox.clone()),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
    })));
    let ctx = Arc::new(ctx);
    let environment_side = crate::environments::EnvSideOptions {
        home: options.home.clone(),
        relay: options.relay.clone(),
        dial: options.dial.clone(),
        heartbeat: options.heartbeat,
        backoff: options.backoff,
        printer: options.printer,
    };
    crate::environments::spawn_environment_side(environment_side, &ctx, &tasks, shutdown.clone())?;
    let gate: Arc<dyn Gate> = Arc::new(TokenGate { token: options.secrets.auth_token.clone(), caller: "loopback" });
    tasks.spawn({
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        async move {
            if let Err(err) = crate::loopback::run(listener, ctx, gate, shutdown).await {
                warn!("loopback server stopped: {err:#}");
            }
        }
    });
    if let Some(relay) = options.relay {
        let dialer = Dialer {
            url: relay.socket_url("/agent", options.secrets.relay_code.expose()),
            relay,
            dial: options.dial,
            heartbeat: options.heartbeat,
            backoff: options.backoff,
            gate: Arc::new(TokenGate { token: options.secrets.auth_token.clone(), caller: "phone" }),
            ctx: ctx.clone(),
            printer: options.printer,
        };
        tasks.spawn(dialer.run(shutdown.clone()).instrument(info_span!("dialer")));
    }
    Ok(RunningAgent { loopback, ctx, shutdown, tasks })
}

/// `voxa run`.
pub async fn command(settings: &Settings, args: RunArgs) -> Result<()> {
    let home = &settings.home;
    let printer = settings.printer;
    let gemini = if settings.self_hosted { Some(gemini_config(&args)?) } else { None };
    home.ensure()?;
    // Held until this process ends: while it is, `agent.json` speaks for this agent.
    let _agent_lock = home.lock_agent()?;
    // Room for the loopback socket's connections; it keeps a reserve for the agent's own files.
    crate::relay::raise_fd_limit();
    let mut config = home.load_config()?;
    let gemini = gemini.map(|gemini| with_saved_voice(gemini, &args, &config));
    let mut dial = DialOptions::default().with_proxy_from_env()?;
    if let Some(path) = &args.ca_cert {
        dial = dial.trust_pem_file(path)?;
    }
    dial.bearer = args.relay_token.clone().filter(|t| !t.is_empty()).map(Secret::from_string);
    let workspace = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("could not read the current directory")?,
    };
    let workspace = workspace
        .canonicalize()
        .map_err(|err| ConfigError::new(format!("workspace {} is not usable: {err}", workspace.display())))?;
    let shutdown = crate::shutdown::on_signal();
    let tasks = TaskTracker::new();
    // The embedded relay stands in for a remote one: nothing about it is saved.
    let relay = match &args.embedded_relay {
        Some(addr) => {
            let listener = bind_loopback_addr(addr).await?;
            let local = listener.local_addr()?;
            printer.event("embedded_relay", json!({"listen": local.to_string()}), format!("embedded relay on {local}"));
            let stop = shutdown.clone();
            tasks.spawn(async move {
                if let Err(err) =
                    crate::relay::run(listener, crate::relay::RelayConfig::default(), stop.cancelled_owned()).await
                {
                    warn!("embedded relay stopped: {err:#}");
                }
            });
            RelayUrl::parse(&format!("http://{local}"))?
        }
        None => settings.relay(&config)?,
    };
    let (secrets, created) = home.load_or_create_secrets()?;
    if args.embedded_relay.is_none() {
        crate::pair::save_relay(home, &mut config, &relay)?;
    }
    if created || args.embedded_relay.is_some() {
        if printer.is_json() {
            let url = relay.pairing_url(secrets.relay_code.expose(), secrets.auth_token.expose());
            printer.event("pairing", json!({"url": url, "relay": relay.as_str()}), "");
        } else {
            let text = crate::pair::pairing_text(&relay, &secrets, true, printer.is_terminal())?;
            printer.event("pairing", json!({}), text.trim_end());
        }
    }
    let listener = TcpListener::bind(("127.0.0.1", args.port))
        .await
        .with_context(|| format!("could not listen on 127.0.0.1:{}", args.port))?;
    let port = listener.local_addr()?.port();
    let options = AgentOptions {
        home: home.clone(),
        secrets,
        relay: Some(relay.clone()),
        workspace: workspace.clone(),
        config,
        dial,
        heartbeat: Heartbeat::default(),
        backoff: BackoffPolicy::default(),
        gemini,
        printer,
    };
    let agent = start(options, listener, shutdown.clone()).await?;
    home.write_agent_file(port)?;
    printer.event(
        "started",
        json!({"port": port, "pid": std::process::id(), "workspace": workspace.display().to_string(), "mode": agent.ctx.mode(), "relay": relay.as_str()}),
        format!("voxa {} running ({} mode), workspace {}, local port {port}", crate::VERSION, agent.ctx.mode(), workspace.display()),
    );
    agent.wait().await;
    tasks.close();
    tasks.wait().await;
    home.remove_agent_file();
    printer.event("stopped", json!({}), "stopped");
    Ok(())
}

async fn bind_loopback_addr(addr: &str) -> Result<TcpListener> {
    let parsed: SocketAddr = addr
        .parse()
        .map_err(|_| ConfigError::new(format!("--embedded-relay {addr:?} is not an address like 127.0.0.1:8787")))?;
    if !parsed.ip().is_loopback() {
        return Err(ConfigError::new("--embedded-relay must listen on a loopback address").into());
    }
    TcpListener::bind(parsed).await.with_context(|| format!("could not listen on {parsed}"))
}

/// Self-hosted settings from the environment; a missing key is a usage error.
fn gemini_config(args: &RunArgs) -> Result<GeminiConfig> {
    let key = std::env::var("GEMINI_API_KEY").unwrap_or_default();
    if key.trim().is_empty() {
        return Err(ConfigError::new(
            "--self-hosted needs your Gemini API key: set GEMINI_API_KEY (nothing was started)",
        )
        .into());
    }
    let url = std::env::var("VOXA_GEMINI_URL").ok().filter(|u| !u.trim().is_empty());
    if let Some(url) = &url {
        check_gemini_url(url)?;
    }
    Ok(GeminiConfig {
        api_key: Secret::from_string(key.trim().to_owned()),
        url: url.map(|u| u.trim().to_owned()).unwrap_or_else(|| GEMINI_LIVE_URL.to_owned()),
        model: args.model.clone().unwrap_or_else(|| DEFAULT_GEMINI_MODEL.to_owned()),
        voice: "Kore".into(),
        heartbeat: crate::gemini::HEARTBEAT,
    })
}

/// Model (unless `--model` was given) and voice saved in `config.toml`.
fn with_saved_voice(mut gemini: GeminiConfig, args: &RunArgs, config: &Config) -> GeminiConfig {
    if let (None, Some(model)) = (&args.model, &config.gemini.model) {
        gemini.model = model.clone();
    }
    if let Some(voice) = &config.gemini.voice {
        gemini.voice = voice.clone();
    }
    gemini
}

/// `VOXA_GEMINI_URL` must be a WebSocket URL without a key in it: the key travels only in the
/// `x-goog-api-key` header. The URL itself is never repeated (it may hold a key).
fn check_gemini_url(url: &str) -> Result<()> {
    let parsed = url::Url::parse(url.trim())
        .map_err(|_| ConfigError::new("VOXA_GEMINI_URL is not a valid URL (expected wss://…)"))?;
    if !matches!(parsed.scheme(), "ws" | "wss") {
        return Err(ConfigError::new("VOXA_GEMINI_URL must start with wss:// (or ws:// for a loopback host)").into());
    }
    if parsed.query_pairs().any(|(name, _)| name.eq_ignore_ascii_case("key")) {
        return Err(ConfigError::new(
            "VOXA_GEMINI_URL must not carry an API key (?key=…): voxa sends GEMINI_API_KEY in a header",
        )
        .into());
    }
    Ok(())
}

/// Why one relay connection ended.
#[derive(Debug)]
enum Ended {
    /// Closed or lost; try again.
    Lost(String),
    /// Another agent with this code took over (close 4001).
    Replaced,
    /// Shutting down.
    Shutdown,
}

/// The reconnect actor.
#[derive(Clone)]
pub struct Dialer {
    pub url: String,
    pub relay: RelayUrl,
    pub dial: DialOptions,
    pub heartbeat: Heartbeat,
    pub backoff: BackoffPolicy,
    pub gate: Arc<dyn Gate>,
    pub ctx: Arc<AgentContext>,
    pub printer: Printer,
}

impl Dialer {
    /// Dials until `shutdown`, serving each connection while it lasts. Never stops for good:
    /// when another agent takes this code (close 4001) it warns once per episode and dials
    /// again with backoff.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new(self.backoff);
        // When this agent gave up on a dial, its request may still reach the relay later (a relay
        // that was frozen, a slow network) and take the code over from the live connection.
        let mut last_abandoned_dial: Option<Instant> = None;
        loop {
            let connected = tokio::select! {
                _ = shutdown.cancelled() => return,
                result = dial::connect(&self.url, &self.dial) => result,
            };
            match connected {
                Ok(socket) => {
                    self.ctx.status.relay_connected.store(true, Ordering::Relaxed);
                    self.printer.event(
                        "relay_connected",
                        json!({"relay": self.relay.as_str()}),
                        format!("connected to relay {}", self.relay),
                    );
                    let since = Instant::now();
                    // A connection runs in its own task: should anything in it panic, the dialer
                    // notices, reports it and dials again instead of going silent for good.
                    let mut connection = tokio::spawn({
                        let dialer = self.clone();
                        let shutdown = shutdown.clone();
                        async move { dialer.serve(socket, &shutdown).await }
                    });
                    let joined = tokio::select! {
                        joined = &mut connection => joined,
                        _ = tokio::time::sleep(self.backoff.healthy_after) => {
                            // Held the code long enough: whoever took it before is gone.
                            self.end_replaced_episode();
                            connection.await
                        }
                    };
                    let ended = joined.unwrap_or_else(|err| {
                        warn!(%err, "relay connection task failed");
                        Ended::Lost("internal error".into())
                    });
                    self.ctx.status.relay_connected.store(false, Ordering::Relaxed);
                    self.ctx.status.phone_present.store(false, Ordering::Relaxed);
                    if since.elapsed() >= self.backoff.healthy_after {
                        backoff.reset();
                    }
                    match ended {
                        Ended::Shutdown => return,
                        Ended::Replaced if last_abandoned_dial.is_some_and(|at| at.elapsed() < STALE_DIAL_WINDOW) => {
                            // Most likely our own abandoned dial arriving late: it is dead, so dial again.
                            last_abandoned_dial = None;
                            self.printer.event(
                                "relay_lost",
                                json!({"reason": "replaced, probably by a late dial of this agent"}),
                                "relay connection replaced, probably by a late dial of this agent",
                            );
                        }
                        Ended::Replaced => self.on_replaced(),
                        Ended::Lost(reason) => self.printer.event(
                            "relay_lost",
                            json!({"reason": reason}),
                            format!("relay connection lost: {reason}"),
                        ),
                    }
                }
                Err(err) => {
                    last_abandoned_dial = Some(Instant::now());
                    let reason = format!("{err:#}");
                    self.printer.event(
                        "relay_unreachable",
                        json!({"reason": reason}),
                        format!("relay unreachable: {reason}"),
                    );
                }
            }
            let delay = backoff.next_delay();
            let attempt = backoff.attempt();
            self.printer.event(
                "reconnecting",
                json!({"in_ms": delay.as_millis() as u64, "attempt": attempt}),
                format!("reconnecting in {:.1} s (attempt {attempt})", delay.as_secs_f64()),
            );
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Another agent took this code: loud once per episode, quiet after that.
    fn on_replaced(&self) {
        if self.ctx.status.relay_replaced.swap(true, Ordering::Relaxed) {
            self.printer.event("relay_lost", json!({"reason": "replaced"}), "relay connection replaced again");
            return;
        }
        let warning = "another voxa agent is using this relay code (the relay replaced this connection, close \
                       4001). If it is not yours, someone holds your code: run `voxa pair --rotate`. This agent \
                       keeps dialing to take the code back.";
        warn!("{warning}");
        self.printer.event("replaced", json!({"keeps_dialing": true}), format!("WARNING: {warning}"));
    }

    /// This agent held its code for a healthy while: the replacement episode is over.
    fn end_replaced_episode(&self) {
        if self.ctx.status.relay_replaced.swap(false, Ordering::Relaxed) {
            self.printer.event("relay_recovered", json!({}), "this agent holds its relay code again");
        }
    }

    async fn serve(&self, socket: dial::ClientSocket, shutdown: &CancellationToken) -> Ended {
        let (sink, mut stream) = socket.split();
        let writer = Writer::spawn(sink);
        let out_tx = writer.frames.clone();
        let mut phone = Phone::Absent;
        let mut last_heard = Instant::now();
        let mut ticker = tokio::time::interval(self.heartbeat.ping_every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            let deadline = phone.hello_deadline();
            let revoked = phone.revoked();
            tokio::select! {
                // A revocation outranks a shutdown that arrives with it: the host must hear why.
                biased;
                _ = cancelled(revoked) => {
                    send(&out_tx, AgentMessage::error(ErrorCode::PairingRevoked)).await;
                    let _ = out_tx.try_send(close_message(CloseCode::Policy, ErrorCode::PairingRevoked.as_str()));
                    break Ended::Lost("pairing revoked".into());
                }
                _ = shutdown.cancelled() => {
                    let _ = out_tx.try_send(close_message(CloseCode::Away, "agent shutting down"));
                    break Ended::Shutdown;
                }
                _ = ticker.tick() => {
                    if last_heard.elapsed() >= self.heartbeat.dead_after {
                        break Ended::Lost(format!("no answer from the relay for {} s", last_heard.elapsed().as_secs()));
                    }
                    let _ = out_tx.try_send(Message::Ping(Default::default()));
                }
                _ = sleep_until(deadline) => {
                    let code = self.gate.timeout_code();
                    send(&out_tx, AgentMessage::Error { code, message: Some("no hello in time".into()) }).await;
                    phone = Phone::Refused;
                    if code == ErrorCode::ExecutorUnauthenticated {
                        // A peer on a pairing's code that does not prove itself is closed out;
                        // the dialer comes back for the next host.
                        let _ = out_tx.try_send(close_message(CloseCode::Policy, code.as_str()));
                        break Ended::Lost("a peer on the pairing's code did not authenticate in time".into());
                    }
                }
                frame = stream.next() => {
                    let Some(frame) = frame else { break Ended::Lost("relay closed the connection".into()) };
                    let frame = match frame {
                        Ok(frame) => frame,
                        Err(err) => break Ended::Lost(format!("{err}")),
                    };
                    last_heard = Instant::now();
                    match frame {
                        Message::Text(text) => {
                            if let Some(notice) = PeerNotice::parse(&text) {
                                phone = self.on_notice(notice, phone, &writer).await;
                            } else {
                                phone = self.on_text(phone, &text, &writer).await;
                            }
                        }
                        Message::Binary(data) => {
                            if let Phone::Ready { session, .. } = &mut phone {
                                session.on_binary(&data).await;
                            }
                        }
                        Message::Close(frame) => {
                            if frame.as_ref().is_some_and(|f| u16::from(f.code) == close::REPLACED) {
                                break Ended::Replaced;
                            }
                            break Ended::Lost("relay closed the connection".into());
                        }
                        _ => {}
                    }
                }
            }
        };
        drop(phone);
        drop(out_tx);
        writer.finish().await;
        ended
    }

    async fn on_notice(&self, notice: PeerNotice, phone: Phone, writer: &Writer) -> Phone {
        if notice.peer != PeerRole::Phone {
            return phone;
        }
        // Any earlier session ends here: its calls are cancelled and its unsent output dropped.
        drop(phone);
        writer.end_session().await;
        match notice.state {
            PeerState::Joined => {
                self.ctx.status.phone_present.store(true, Ordering::Relaxed);
                self.printer.event("phone_connected", json!({}), "phone connected");
                let deadline = tokio::time::Instant::now() + protocol::HELLO_TIMEOUT;
                if !self.gate.challenges() {
                    return Phone::AwaitingHello { deadline, challenge: String::new() };
                }
                match protocol::new_nonce() {
                    Ok(challenge) => {
                        send(&writer.frames, AgentMessage::challenge(&challenge)).await;
                        Phone::AwaitingHello { deadline, challenge }
                    }
                    Err(err) => {
                        warn!("cannot challenge the phone: {err:#}");
                        Phone::Refused
                    }
                }
            }
            PeerState::Left => {
                self.ctx.status.phone_present.store(false, Ordering::Relaxed);
                self.printer.event("phone_disconnected", json!({}), "phone disconnected");
                Phone::Absent
            }
        }
    }

    async fn on_text(&self, phone: Phone, text: &str, writer: &Writer) -> Phone {
        let out = &writer.frames;
        let admitted = match phone {
            Phone::AwaitingHello { deadline, challenge } => {
                match session::admit_hello(self.gate.as_ref(), text, &challenge) {
                    Ok(HelloStep::Admitted(admission)) => Ok(admission),
                    Ok(HelloStep::AwaitBearer(answer)) => {
                        send(out, answer).await;
                        return Phone::AwaitingBearer { deadline };
                    }
                    // Anything but a hello is ignored until a good hello arrives.
                    Err(ErrorCode::UnauthenticatedCall) => return Phone::AwaitingHello { deadline, challenge },
                    Err(code) => Err(code),
                }
            }
            Phone::AwaitingBearer { deadline } => match session::admit_bearer(self.gate.as_ref(), text) {
                Ok(admission) => Ok(admission),
                Err(ErrorCode::UnauthenticatedCall) => return Phone::AwaitingBearer { deadline },
                Err(code) => Err(code),
            },
            Phone::Ready { mut session, revoked } => {
                session.on_text(text).await;
                return Phone::Ready { session, revoked };
            }
            other => return other,
        };
        match admitted {
            Ok(admission) => {
                send(out, self.ctx.hello_ok(&admission)).await;
                self.printer.event("phone_authenticated", json!({}), "phone authenticated");
                let session_out = writer.begin_session().await;
                let revoked = admission.revoked.clone();
                let session = Session::new(self.ctx.clone(), admission.caller, session_out);
                Phone::Ready { session: Box::new(session), revoked }
            }
            Err(code) => {
                send(out, AgentMessage::error(code)).await;
                self.printer.event("phone_refused", json!({"code": code.as_str()}), format!("phone refused: {code}"));
                Phone::Refused
            }
        }
    }
}

/// The phone side of the current relay connection.
enum Phone {
    Absent,
    /// Challenged (with this nonce, empty on a pairing); waiting for the hello.
    AwaitingHello {
        deadline: tokio::time::Instant,
        challenge: String,
    },
    /// A host's hello was answered with this environment's signature; waiting for its bearer.
    AwaitingBearer {
        deadline: tokio::time::Instant,
    },
    Refused,
    Ready {
        session: Box<Session>,
        revoked: Option<CancellationToken>,
    },
}

impl Phone {
    fn hello_deadline(&self) -> Option<tokio::time::Instant> {
        match self {
            Phone::AwaitingHello { deadline, .. } | Phone::AwaitingBearer { deadline } => Some(*deadline),
            _ => None,
        }
    }

    fn revoked(&self) -> Option<CancellationToken> {
        match self {
            Phone::Ready { revoked, .. } => revoked.clone(),
            _ => None,
        }
    }
}

/// Sleeps until `deadline`, or forever without one (a disabled `select!` arm).
pub(crate) async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Resolves when `token` is cancelled, never without one.
pub(crate) async fn cancelled(token: Option<CancellationToken>) {
    match token {
        Some(token) => token.cancelled_owned().await,
        None => std::future::pending().await,
    }
}

async fn send(out: &mpsc::Sender<Message>, message: AgentMessage) {
    let _ = out.send(Message::text(message.to_json())).await;
}

/// A close frame with a code and reason.
pub fn close_message(code: CloseCode, reason: &str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.to_owned().into() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_with_jitter_and_resets() {
        let policy =
            BackoffPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(30), healthy_after: Duration::ZERO };
        let mut backoff = Backoff::new(policy);
        let first = backoff.next_delay();
        assert!(first <= Duration::from_secs(1));
        let delays: Vec<_> = (0..20).map(|_| backoff.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(30)));
        // Full jitter: later delays are spread, not all equal to the cap.
        let distinct: std::collections::BTreeSet<_> = delays.iter().map(|d| d.as_millis()).collect();
        assert!(distinct.len() > 5);
        backoff.reset();
        assert_eq!(backoff.attempt(), 0);
        assert!(backoff.next_delay() <= Duration::from_secs(1));
    }
}
