//! What every session of one agent shares: the approval broker and the audit trail, the tool
//! dispatcher (this machine's tools and the router to environments, under the one policy), the
//! voice settings, the live status `voxa status` shows, and the one task tracker every task the
//! agent spawns goes through (so stopping the agent waits for calls in flight and voice bridges).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::calls::{CallBoards, ListenerId};
use super::gate::Admission;
use super::start::SessionCounts;
use crate::approvals::Broker;
use crate::audit::Audit;
use crate::gemini::GeminiConfig;
use crate::protocol::{self, AgentMessage, AgentStatus, ConnectedClient, HelloOk, RelayLinkStatus, RelayPage};
use crate::push::Notifier;
use crate::sessions::SessionHost;
use crate::terminal::TerminalHost;
use crate::tools::{Dispatcher, Toolbox};

/// Live state shown by `voxa status`.
#[derive(Debug, Default)]
pub struct LiveStatus {
    pub relay: Mutex<String>,
    pub relay_connected: AtomicBool,
    /// True while another agent keeps taking this agent's relay code (close 4001).
    pub relay_replaced: AtomicBool,
    pub phone_present: AtomicBool,
    /// Each relay link's state, when the agent dials relays; `relay_connected` and
    /// `phone_present` are whether any of them is.
    pub relays: Mutex<Vec<RelayLinkStatus>>,
    /// While the relay code replaced by `pair --rotate` is still answered: until when, in Unix
    /// seconds.
    pub retired_code_until: Mutex<Option<u64>>,
    pub calls_in_flight: AtomicUsize,
    /// Clients following (`follow`) right now; notifications go out only while it is 0.
    pub followers: AtomicUsize,
    /// Open sessions, sealed (protocol 3) and plain (protocol 2).
    pub sessions: Arc<SessionCounts>,
    /// Who has a session open, by session, in the order they came.
    pub connected: Mutex<BTreeMap<ListenerId, ConnectedClient>>,
    /// What the last comparison of the relay's page with this voxa's found; followers hear each
    /// new finding (`relay_page` frames).
    pub relay_page: tokio::sync::watch::Sender<Option<RelayPage>>,
    /// A comparison is running.
    pub relay_page_checking: AtomicBool,
    /// The sleep inhibitor (`agent/awake.rs`).
    pub awake: Arc<super::power::AwakeShown>,
}

impl LiveStatus {
    /// What one relay link (on `relay`) now is: connected, a phone present. A status that lists
    /// its relays keeps the link's entry and says whether any link is; one that does not (an
    /// environment pairing's, a retired code's) is this link's alone.
    pub fn set_link(&self, relay: &str, connected: Option<bool>, phone_present: Option<bool>) {
        let Ok(mut links) = self.relays.lock() else { return };
        let Some(link) = links.iter_mut().find(|link| link.relay == relay) else {
            drop(links);
            if let Some(connected) = connected {
                self.relay_connected.store(connected, Ordering::Relaxed);
            }
            if let Some(present) = phone_present {
                self.phone_present.store(present, Ordering::Relaxed);
            }
            return;
        };
        link.connected = connected.unwrap_or(link.connected);
        link.phone_present = phone_present.unwrap_or(link.phone_present);
        self.relay_connected.store(links.iter().any(|link| link.connected), Ordering::Relaxed);
        self.phone_present.store(links.iter().any(|link| link.phone_present), Ordering::Relaxed);
    }
}

/// What every session of one agent shares.
pub struct AgentContext {
    /// Every action that waits for the user: calls under `ask`, the coding agents' prompts.
    pub approvals: Broker,
    /// Where every call, approval and refused frame is recorded; `None` records nothing.
    pub audit: Option<Audit>,
    /// Every tool call of every session goes through it.
    pub dispatcher: Dispatcher,
    pub gemini: Option<Arc<GeminiConfig>>,
    pub status: Arc<LiveStatus>,
    /// Every task of this agent: connections, calls, progress forwarders, voice bridges.
    pub tasks: TaskTracker,
    /// Web Push to the phones that turned notifications on (none in tests that do not ask).
    pub notifier: Option<Notifier>,
    /// The coding-agent sessions; `None` when their store could not be opened.
    pub sessions: Option<SessionHost>,
    /// Every pairing's tool calls, which outlive the sessions that started them.
    pub calls: CallBoards,
    /// Cancelled when the agent stops: it ends the calls still running.
    pub shutdown: CancellationToken,
    /// The interactive terminals (`term_*`); `None` where the agent runs none.
    pub terminals: Option<TerminalHost>,
}

impl AgentContext {
    /// A context for this machine's tools only, waiting in `approvals`, recording to `audit`,
    /// whose tasks go through `tasks`.
    pub fn new(toolbox: Toolbox, approvals: Broker, audit: Option<Audit>, tasks: TaskTracker) -> Self {
        AgentContext {
            dispatcher: Dispatcher::new(toolbox, approvals.clone(), audit.clone()),
            approvals,
            audit,
            gemini: None,
            status: Arc::default(),
            tasks,
            notifier: None,
            sessions: None,
            calls: CallBoards::default(),
            shutdown: CancellationToken::new(),
            terminals: None,
        }
    }

    /// A context for another link of the same agent (an environment pairing, a retired relay
    /// code): the same tools, broker, audit trail and tasks, a status of its own.
    /// Its sessions and terminals are this machine's, so a host driving it as an environment
    /// starts, follows and answers them (docs/PROTOCOL.md, "Environments"); it routes to no
    /// environment of its own.
    pub fn beside(&self) -> Self {
        let mut ctx =
            AgentContext::new(self.toolbox().clone(), self.approvals.clone(), self.audit.clone(), self.tasks.clone());
        ctx.dispatcher = self.dispatcher.without_router();
        ctx.sessions = self.sessions.clone();
        ctx.terminals = self.terminals.clone();
        ctx.shutdown = self.shutdown.clone();
        ctx
    }

    /// This machine's tools.
    pub fn toolbox(&self) -> &Toolbox {
        self.dispatcher.toolbox()
    }

    /// Who hosts voice calls (`hello_ok`'s `mode`): `"self-hosted"` when this laptop does,
    /// `"hosted"` otherwise — a relay's `/live`, if it offers one (docs/PROTOCOL.md).
    pub fn mode(&self) -> &'static str {
        if self.gemini.is_some() {
            "self-hosted"
        } else {
            "hosted"
        }
    }

    /// The `hello_ok` for an admitted caller.
    pub fn hello_ok(&self, admission: &Admission) -> AgentMessage {
        AgentMessage::HelloOk(HelloOk {
            agent: crate::agent_name(),
            mode: self.mode().to_owned(),
            tools: self.dispatcher.tool_names(),
            protocol: protocol::PROTOCOL_VERSION,
            env_key: admission.env_key.clone(),
            proof: admission.proof.clone(),
            host: host_name(),
            vapid_public_key: self.notifier.as_ref().map(|n| n.public_key().to_owned()),
            noise: None,
        })
    }

    /// A snapshot for `status`.
    pub fn status(&self) -> AgentStatus {
        AgentStatus {
            pid: std::process::id(),
            version: crate::VERSION.to_owned(),
            mode: self.mode().to_owned(),
            relay: self.status.relay.lock().map(|r| r.clone()).unwrap_or_default(),
            relay_connected: self.status.relay_connected.load(Ordering::Relaxed),
            relay_replaced: self.status.relay_replaced.load(Ordering::Relaxed),
            phone_present: self.status.phone_present.load(Ordering::Relaxed),
            relays: self.status.relays.lock().map(|links| links.clone()).unwrap_or_default(),
            retired_code_until: self.status.retired_code_until.lock().map(|until| *until).unwrap_or_default(),
            calls_in_flight: self.status.calls_in_flight.load(Ordering::Relaxed),
            connected: self.status.connected.lock().map(|c| c.values().cloned().collect()).unwrap_or_default(),
            sealed_sessions: self.status.sessions.sealed(),
            plain_sessions: self.status.sessions.plain(),
            relay_page: self.status.relay_page.borrow().clone(),
            workspace: self.toolbox().workspace().display().to_string(),
            sees: Some(self.toolbox().sees()),
            awake: Some(Box::new(self.status.awake.snapshot())),
            push: self.notifier.as_ref().and_then(|notifier| notifier.last_push()).map(Box::new),
        }
    }
}

/// This machine's host name, if it has a printable one.
fn host_name() -> Option<String> {
    let name = rustix::system::uname().nodename().to_string_lossy().trim().to_owned();
    (!name.is_empty() && !name.chars().any(char::is_control)).then_some(name)
}
