//! The agent: what `voxa run` starts. The loopback server for local clients, the relay link that
//! keeps this machine reachable from the phone, one link per environment pairing, and the
//! sessions they all serve.
//!
//! Inside: [`context`] (what sessions share, with the one task tracker), [`gate`] (who a hello
//! admits), [`start`] (the one sans-IO session start both drivers run), [`session`] (one
//! session's frames), [`calls`] (each pairing's tool calls, which
//! outlive its sessions), [`outbox`] (a socket's writer), [`link`]
//! (the reconnect actor), [`peers`] (the phones on one relay connection), [`loopback`] (the local
//! server), [`env_side`] (environment pairings) and [`awake`] (the sleep inhibitor).

pub mod awake;
pub mod calls;
pub mod context;
pub mod env_side;
pub mod gate;
pub mod link;
pub mod loopback;
pub mod notify;
pub mod outbox;
pub mod peers;
pub mod power;
pub mod retired;
pub mod session;
pub mod start;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info_span, warn, Instrument};

pub use context::{AgentContext, LiveStatus};
pub use gate::{Admission, Gate, TokenGate};
pub use link::{link_events, BackoffPolicy, LinkEvent, LinkEvents, RelayLink};
pub use session::Session;

use crate::approvals::{Broker, BrokerOptions};
use crate::config::{Config, RelayUrl};
use crate::environments::{HostOptions, HostRouter};
use crate::gemini::GeminiConfig;
use crate::net::dial::DialOptions;
use crate::net::liveness::Heartbeat;
use crate::protocol::RelayLinkStatus;
use crate::push::Notifier;
use crate::sessions::{SessionHost, SessionHostOptions, SESSIONS_DIR};
use crate::state::{Home, Secrets};
use crate::tools::{Toolbox, ToolboxOptions};

/// Everything a running agent needs, validated.
pub struct AgentOptions {
    pub home: Home,
    pub secrets: Secrets,
    /// The pairing's first relay; `None`: loopback only (no relay).
    pub relay: Option<RelayUrl>,
    /// The pairing's other relays, each dialed on the same code by a link of its own.
    pub extra_relays: Vec<RelayUrl>,
    pub workspace: PathBuf,
    pub config: Config,
    pub dial: DialOptions,
    pub heartbeat: Heartbeat,
    pub backoff: BackoffPolicy,
    pub gemini: Option<GeminiConfig>,
    /// Where the relay link and the environment side report what happens.
    pub events: LinkEvents,
    /// How long after `pair --rotate` the replaced relay code is still answered (and refused);
    /// [`retired::RETIRED_CODE_WINDOW`] in `voxa run`.
    pub retired_window: Duration,
    /// The sleep inhibitor held while the agent works.
    pub awake: awake::AwakeOptions,
}

/// A started agent: its loopback address, shared state and shutdown handle.
pub struct RunningAgent {
    pub loopback: SocketAddr,
    pub ctx: Arc<AgentContext>,
    shutdown: CancellationToken,
}

impl RunningAgent {
    /// Stops every task and waits for them, calls in flight and voice bridges included.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.wait().await;
    }

    /// Waits until the agent stops (its shutdown token was cancelled) and its tasks ended.
    pub async fn wait(&self) {
        self.shutdown.cancelled().await;
        self.ctx.tasks.close();
        self.ctx.tasks.wait().await;
    }
}

/// Starts the loopback server on `listener` and, with a relay, the relay link.
pub async fn start(options: AgentOptions, listener: TcpListener, shutdown: CancellationToken) -> Result<RunningAgent> {
    let loopback = listener.local_addr().context("loopback listener has no address")?;
    let ctx = Arc::new(build_context(&options, &shutdown)?);
    let environment_side = env_side::EnvSideOptions {
        home: options.home.clone(),
        relay: options.relay.clone(),
        dial: options.dial.clone(),
        heartbeat: options.heartbeat,
        backoff: options.backoff,
        events: options.events.clone(),
    };
    env_side::spawn_environment_side(environment_side, &ctx, shutdown.clone())?;
    // `pair --rotate` swaps the token under both gates while the agent runs.
    // Protocol 2 stays open to local scripts; through the relay `[security] require_sealed` decides.
    let loopback_gate = Arc::new(retired::CurrentToken::new(token_gate(&options, "loopback", false)));
    let sealed_only = options.config.security.require_sealed;
    let phone_gate = Arc::new(retired::CurrentToken::new(token_gate(&options, "phone", sealed_only)));
    let gate: Arc<dyn Gate> = loopback_gate.clone();
    ctx.tasks.spawn({
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        async move {
            if let Err(err) = loopback::run(listener, ctx, gate, shutdown).await {
                warn!("loopback server stopped: {err:#}");
            }
        }
    });
    let rotation = retired::Rotation {
        home: options.home.clone(),
        gates: vec![loopback_gate, phone_gate.clone()],
        links: Vec::new(),
        window: options.retired_window,
        token: options.secrets.auth_token.clone(),
        code: options.secrets.relay_code.clone(),
    };
    ctx.tasks.spawn(awake::watch(ctx.clone(), options.awake.clone(), shutdown.clone()));
    let links = spawn_relay_links(options, phone_gate, &ctx, &shutdown);
    retired::Rotation { links, ..rotation }.spawn(&ctx, &shutdown);
    Ok(RunningAgent { loopback, ctx, shutdown })
}

/// The gate of this home's auth token and pairing tickets, refusing protocol 2 when `sealed_only`.
fn token_gate(options: &AgentOptions, caller: &'static str, sealed_only: bool) -> TokenGate {
    TokenGate::new(options.secrets.auth_token.clone(), caller, sealed_only).with_tickets(options.home.clone())
}

/// What the agent's sessions share: the toolbox (its tools kept out of the home), the voice
/// settings, the relay shown in status, and the router to environments.
fn build_context(options: &AgentOptions, shutdown: &CancellationToken) -> Result<AgentContext> {
    if let Some(advice) = crate::tools::policy::exec_advice(&options.config.policy) {
        warn!("{advice}");
    }
    let audit = crate::audit::Audit::new(options.home.audit_dir()?);
    let toolbox = Toolbox::new(ToolboxOptions {
        workspace: options.workspace.clone(),
        // The secrets, pairings and settings stay out of the tools' reach even when the workspace
        // holds the home (as it does when `run` starts in the home directory).
        protected: vec![options.home.dir().to_path_buf()],
        config: options.config.clone(),
        env: None,
        trash: Some(options.home.path("trash")),
    })?;
    let approvals = Broker::new(BrokerOptions {
        timeout: Duration::from_secs(options.config.approvals.timeout_secs),
        audit: Some(audit.clone()),
        store: Some(options.home.path(crate::approvals::STORE_FILE)),
        grants: Some(options.home.path(crate::approvals::GRANTS_FILE)),
    });
    // Approvals open when the agent stops are ended by the stop and reported after the restart.
    approvals.stop_with(shutdown.clone());
    let tasks = TaskTracker::new();
    let mut ctx = AgentContext::new(toolbox, approvals, Some(audit), tasks.clone());
    ctx.shutdown = shutdown.clone();
    ctx.gemini = options.gemini.clone().map(Arc::new);
    // Notifications: a home whose VAPID key cannot be made or read still runs, without them.
    let pairing = crate::push::pairing_id(&options.secrets.relay_code);
    let push = options.config.push.clone();
    match Notifier::new(&options.home, pairing, options.config.notifications.clone(), push, options.dial.clone()) {
        Ok((notifier, queue)) => {
            // Through a relay, a service worker can say the push arrived (`POST /ack`).
            if options.relay.is_some() {
                notifier.ask_receipts(options.secrets.relay_code.expose());
            }
            tasks.spawn(queue.run(notifier.clone(), shutdown.clone()));
            tasks.spawn(notify::watch_approvals(
                ctx.approvals.clone(),
                notifier.clone(),
                ctx.status.clone(),
                shutdown.clone(),
            ));
            ctx.notifier = Some(notifier);
        }
        Err(err) => warn!("notifications are off: {err:#}"),
    }
    if let Some(relay) = &options.relay {
        if let Ok(mut shown) = ctx.status.relay.lock() {
            *shown = relay.to_string();
        }
        if let Ok(mut links) = ctx.status.relays.lock() {
            let relays = std::iter::once(relay).chain(&options.extra_relays);
            *links = relays.map(|relay| RelayLinkStatus { relay: relay.to_string(), ..Default::default() }).collect();
        }
    }
    // The sessions' processes end with the agent (they stay resumable); a store that cannot be
    // opened costs the sessions only.
    let sessions = SessionHost::open(SessionHostOptions {
        store_dir: options.home.path(SESSIONS_DIR),
        toolbox: ctx.toolbox().clone(),
        approvals: ctx.approvals.clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
    });
    match sessions {
        Ok(host) => {
            ctx.dispatcher = ctx.dispatcher.clone().with_sessions(Arc::new(host.clone()));
            if let Some(notifier) = &ctx.notifier {
                let watch =
                    notify::watch_sessions(host.clone(), notifier.clone(), ctx.status.clone(), shutdown.clone());
                tasks.spawn(watch);
            }
            ctx.sessions = Some(host);
        }
        Err(err) => warn!("coding-agent sessions are unavailable: {err:#}"),
    }
    let terminals = crate::terminal::TerminalHost::new(crate::terminal::TerminalHostOptions {
        toolbox: ctx.toolbox().clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
    });
    ctx.dispatcher = ctx.dispatcher.clone().with_terminals(Arc::new(terminals.clone()));
    ctx.terminals = Some(terminals);
    let router = HostRouter::new(HostOptions {
        home: options.home.clone(),
        dial: options.dial.clone(),
        relay: options.relay.clone(),
        toolbox: Some(ctx.toolbox().clone()),
        tasks,
        shutdown: shutdown.clone(),
    });
    let router: Arc<dyn crate::tools::EnvRouter> = Arc::new(router);
    if let Some(notifier) = &ctx.notifier {
        let watch = notify::watch_env_approvals(router.clone(), notifier.clone(), ctx.status.clone(), shutdown.clone());
        ctx.tasks.spawn(watch);
    }
    ctx.dispatcher = ctx.dispatcher.clone().with_router(router);
    Ok(ctx)
}

/// A relay link on this home's code for each of the pairing's relays (returned with the tokens
/// that stop them, for a rotation to move) and, for a while after `pair --rotate`, one on the code
/// it replaced. Does nothing without a relay.
fn spawn_relay_links(
    options: AgentOptions,
    phone_gate: Arc<retired::CurrentToken>,
    ctx: &Arc<AgentContext>,
    shutdown: &CancellationToken,
) -> Vec<(RelayLink, CancellationToken)> {
    let Some(first) = options.relay.clone() else { return Vec::new() };
    let retired_gate = token_gate(&options, "phone", options.config.security.require_sealed);
    // A code the home no longer trusts must not stop the agent; it is only left unanswered.
    let retired = match options.home.retired_code() {
        Ok(retired) => retired,
        Err(err) => {
            warn!("the relay code replaced by `pair --rotate` is not answered: {err:#}");
            None
        }
    };
    let retired_gate: Arc<dyn Gate> = Arc::new(retired::RetiredGate { current: retired_gate });
    let relays = std::iter::once(first).chain(options.extra_relays.iter().cloned());
    let mut links = Vec::new();
    for (index, relay) in relays.enumerate() {
        let link = RelayLink {
            url: relay.socket_url("/agent", options.secrets.relay_code.expose()),
            relay,
            dial: options.dial.clone(),
            heartbeat: options.heartbeat,
            backoff: options.backoff,
            gate: phone_gate.clone(),
            ctx: ctx.clone(),
            events: Some(options.events.clone()),
        };
        if let Some(retired) = &retired {
            // The retired code's window is told once, by the first relay's link.
            let events = link.events.clone().filter(|_| index == 0);
            let answering = RelayLink { gate: retired_gate.clone(), events, ..link.clone() };
            retired::spawn_retired_link(&answering, retired.clone(), options.retired_window, ctx, shutdown);
        }
        let stop = shutdown.child_token();
        let span = info_span!("relay_link", relay = %link.relay);
        ctx.tasks.spawn(link.clone().run(stop.clone()).instrument(span));
        links.push((link, stop));
    }
    links
}
