//! What every session of one agent shares: the toolbox, the voice settings, the environment
//! router, the live status `voxa status` shows, and the one task tracker every task the agent
//! spawns goes through (so stopping the agent waits for calls in flight and voice bridges).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::task::TaskTracker;

use super::gate::Admission;
use crate::environments::EnvRouter;
use crate::gemini::{declare_env_argument, GeminiConfig};
use crate::protocol::{self, AgentMessage, AgentStatus, HelloOk};
use crate::sessions::SessionHost;
use crate::tools::Toolbox;

/// Live state shown by `voxa status`.
#[derive(Debug, Default)]
pub struct LiveStatus {
    pub relay: Mutex<String>,
    pub relay_connected: AtomicBool,
    /// True while another agent keeps taking this agent's relay code (close 4001).
    pub relay_replaced: AtomicBool,
    pub phone_present: AtomicBool,
    /// While the relay code replaced by `pair --rotate` is still answered: until when, in Unix
    /// seconds.
    pub retired_code_until: Mutex<Option<u64>>,
    pub calls_in_flight: AtomicUsize,
}

/// What every session of one agent shares.
pub struct AgentContext {
    pub toolbox: Toolbox,
    pub gemini: Option<Arc<GeminiConfig>>,
    pub router: Option<Arc<dyn EnvRouter>>,
    pub status: Arc<LiveStatus>,
    /// Every task of this agent: connections, calls, progress forwarders, voice bridges.
    pub tasks: TaskTracker,
    /// The coding-agent sessions; `None` when their store could not be opened.
    pub sessions: Option<SessionHost>,
}

impl AgentContext {
    /// A context whose tasks go through `tasks`.
    pub fn new(toolbox: Toolbox, tasks: TaskTracker) -> Self {
        AgentContext { toolbox, gemini: None, router: None, status: Arc::default(), tasks, sessions: None }
    }

    /// `"hosted"` or `"self-hosted"`.
    pub fn mode(&self) -> &'static str {
        if self.gemini.is_some() {
            "self-hosted"
        } else {
            "hosted"
        }
    }

    /// The `hello_ok` for an admitted caller.
    pub fn hello_ok(&self, admission: &Admission) -> AgentMessage {
        let mut tools = self.toolbox.names();
        if let Some(router) = &self.router {
            // Listed when some of its uses are allowed; each call is checked again.
            tools.extend(router.tool_names().into_iter().filter(|name| self.toolbox.check_policy(name, false).is_ok()));
        }
        AgentMessage::HelloOk(HelloOk {
            agent: crate::agent_name(),
            mode: self.mode().to_owned(),
            tools,
            protocol: protocol::PROTOCOL_VERSION,
            env_key: admission.env_key.clone(),
            proof: admission.proof.clone(),
            host: host_name(),
        })
    }

    /// Gemini function declarations: this machine's tools and, on a host with environments, an
    /// optional `env` argument on each plus the router's own tools (`fleet`).
    pub fn gemini_declarations(&self) -> Value {
        let mut declarations = match self.toolbox.gemini_declarations() {
            Value::Array(list) => list,
            _ => Vec::new(),
        };
        if let Some(router) = &self.router {
            declare_env_argument(&mut declarations);
            declarations.extend(router.gemini_declarations().into_iter().filter(|declaration| {
                declaration["name"].as_str().is_some_and(|name| self.toolbox.check_policy(name, false).is_ok())
            }));
        }
        Value::Array(declarations)
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
            retired_code_until: self.status.retired_code_until.lock().map(|until| *until).unwrap_or_default(),
            calls_in_flight: self.status.calls_in_flight.load(Ordering::Relaxed),
            workspace: self.toolbox.workspace().display().to_string(),
            sees: Some(self.toolbox.sees()),
        }
    }
}

/// This machine's host name, if it has a printable one.
fn host_name() -> Option<String> {
    let name = rustix::system::uname().nodename().to_string_lossy().trim().to_owned();
    (!name.is_empty() && !name.chars().any(char::is_control)).then_some(name)
}
