//! Coding-agent sessions (docs/PROTOCOL.md, "Coding-agent sessions"): a coding agent that lives in voxa beyond any call or phone,
//! started, followed, answered, interrupted, left and resumed.
//!
//! Inside: [`host`](SessionHost) (the sessions by id and the tools' entry points), [`runner`]
//! (one actor per session owning its process), [`adapter`] (the trait each agent's protocol sits
//! behind: [`claude`], [`codex`], [`plain`] for configured agents), [`process`] (start, write, read, end),
//! [`store`] (the log on disk), [`follow`] (replay then live) and [`describe`] (summaries, risks
//! and diffs). Prompts go to the approval broker (`crate::approvals`).

pub mod adapter;
pub mod brief;
pub mod claude;
pub mod codex;
pub mod describe;
pub mod event;
pub mod follow;
pub mod plain;
pub mod process;
pub mod runner;
pub mod store;
pub mod tools;
pub mod voice;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use serde::Serialize;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

pub use follow::Follower;

use crate::approvals::Broker;
use crate::config::{AgentCommand, ProcessLimits};
use crate::protocol::{ErrorCode, Event, SessionEvent, SessionState, ToolError};
use crate::tools::coding_agent::{check_prompt_is_not_an_option, find_program, DEFAULT_AGENT, MAX_PROMPT_LEN};
use crate::tools::Toolbox;
use adapter::Adapter;
use runner::{Command, Runner, RunnerHandle};
use store::{SessionRow, Store};

/// The directory of the sessions' store in the home.
pub const SESSIONS_DIR: &str = "sessions";
/// Longest title kept.
pub const MAX_TITLE_LEN: usize = 120;
/// How often a turn is tried again when the session's actor ended just as it arrived.
const SEND_ATTEMPTS: usize = 3;

/// How to build a [`SessionHost`].
pub struct SessionHostOptions {
    /// Where the log lives (`<home>/sessions`).
    pub store_dir: PathBuf,
    /// Workspace, agents, limits and environment come from here.
    pub toolbox: Toolbox,
    /// The agent's broker, where the coding agents' permission prompts and questions wait.
    pub approvals: Broker,
    pub tasks: TaskTracker,
    /// Stops every session's process (they stay resumable).
    pub shutdown: CancellationToken,
}

/// What every session's actor shares.
pub struct Shared {
    store: Arc<Store>,
    live: broadcast::Sender<SessionEvent>,
    approvals: Broker,
    env: Arc<[(OsString, OsString)]>,
    limits: ProcessLimits,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    runners: Mutex<HashMap<String, RunnerHandle>>,
    generation: AtomicU64,
    /// How long an agent's process with nothing to do is kept (`[sessions] idle_secs`).
    idle_stop: std::time::Duration,
    /// When clients followed the sessions: where `brief` starts.
    looks: Arc<Mutex<brief::Looks>>,
}

impl Shared {
    /// Stores an event, then tells followers.
    fn record(&self, session: &str, event: Event) {
        match self.store.append(session, &event) {
            Ok(stored) => {
                let _ = self.live.send(stored);
            }
            Err(err) => warn!(session, "could not record an event: {err:#}"),
        }
    }

    fn runner_ended(&self, session: &str, generation: u64) {
        if let Ok(mut runners) = self.runners.lock() {
            if runners.get(session).is_some_and(|handle| handle.generation == generation) {
                runners.remove(session);
            }
        }
    }
}

/// A session as `agent_sessions` lists it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SessionInfo {
    pub session: String,
    pub agent: String,
    pub title: String,
    pub state: SessionState,
    pub cwd: String,
    pub started_at: u64,
    pub last_event_at: u64,
    pub turns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Open approvals and questions.
    pub pending: usize,
    /// The seq of its last event: a client that follows from here gets only what comes next.
    pub last_seq: u64,
}

/// An `agent_start`.
#[derive(Clone, Debug, Default)]
pub struct StartRequest {
    pub prompt: String,
    /// Default `claude`.
    pub agent: Option<String>,
    /// Relative to the workspace; default the workspace.
    pub cwd: Option<String>,
    pub title: Option<String>,
    /// Who started it (`phone`, `loopback`, `gemini`, …).
    pub by: String,
}

/// Every session of this agent.
#[derive(Clone)]
pub struct SessionHost {
    shared: Arc<Shared>,
    toolbox: Toolbox,
}

impl std::fmt::Debug for SessionHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHost").field("store", &self.shared.store).finish_non_exhaustive()
    }
}

impl SessionHost {
    /// Opens the log (sessions left live by a previous agent are marked ended) and starts
    /// pruning it every [`store::PRUNE_EVERY`].
    pub fn open(options: SessionHostOptions) -> Result<Self> {
        let store = Arc::new(Store::open(&options.store_dir)?);
        let (live, _) = broadcast::channel(follow::LIVE_BUFFER);
        let shared = Arc::new(Shared {
            store,
            live,
            approvals: options.approvals,
            env: options.toolbox.child_env(),
            limits: options.toolbox.config().limits.clone(),
            tasks: options.tasks,
            shutdown: options.shutdown,
            runners: Mutex::default(),
            generation: AtomicU64::new(0),
            idle_stop: std::time::Duration::from_secs(options.toolbox.config().sessions.idle_secs.max(1)),
            looks: brief::Looks::new(),
        });
        let host = SessionHost { shared, toolbox: options.toolbox };
        host.spawn_pruning();
        Ok(host)
    }

    fn spawn_pruning(&self) {
        let shared = self.shared.clone();
        self.shared.tasks.spawn(async move {
            let mut every = tokio::time::interval(store::PRUNE_EVERY);
            every.tick().await;
            loop {
                tokio::select! {
                    () = shared.shutdown.cancelled() => return,
                    _ = every.tick() => {}
                }
                let live: HashSet<String> =
                    shared.runners.lock().map(|r| r.keys().cloned().collect()).unwrap_or_default();
                if let Err(err) = shared.store.prune(&live, store::MAX_AGE, store::MAX_BYTES) {
                    warn!("could not prune the session store: {err:#}");
                }
            }
        });
    }

    /// Starts a session and hands it its first turn.
    pub async fn start(&self, request: StartRequest) -> Result<SessionInfo, ToolError> {
        check_turn("prompt", &request.prompt)?;
        let agent = request.agent.clone().unwrap_or_else(|| DEFAULT_AGENT.to_owned());
        let cwd = self.toolbox.directory(request.cwd.as_deref())?;
        let id = format!("s-{}", hex::encode(rand::random::<[u8; 8]>()));
        let adapter = self.adapter(&agent, &id, &cwd, Some(&request.prompt))?;
        let title = request.title.as_deref().unwrap_or_else(|| request.prompt.lines().next().unwrap_or_default());
        let now = event::now_ms();
        let row = SessionRow {
            id: id.clone(),
            agent,
            title: crate::text::prefix(title.trim(), MAX_TITLE_LEN).to_owned(),
            cwd,
            resume: None,
            state: SessionState::Starting,
            started_at: now,
            last_event_at: now,
            last_seq: 0,
            turns: 0,
            cost_usd: None,
        };
        self.shared.store.create(&row).map_err(internal)?;
        self.shared.record(&id, Event::State { state: SessionState::Starting });
        self.spawn_runner(&row, adapter);
        self.send(&id, &request.prompt, &request.by).await?;
        self.info(&id)
    }

    /// Sends a turn: queued (`true`) while one runs; an ended session is resumed first.
    pub async fn send(&self, session: &str, text: &str, by: &str) -> Result<bool, ToolError> {
        check_turn("text", text)?;
        let row = self.row(session)?;
        if let Some(command) = self.toolbox.config().agents.get(&row.agent) {
            check_prompt_is_not_an_option(&row.agent, command, text)?;
        }
        for _ in 0..SEND_ATTEMPTS {
            let handle = self.runner(session)?;
            let (reply, answer) = oneshot::channel();
            let command = Command::Send { text: text.to_owned(), by: by.to_owned(), reply };
            if handle.commands.send(command).await.is_err() {
                self.shared.runner_ended(session, handle.generation);
                continue;
            }
            match answer.await {
                Ok(result) => return result,
                // The actor ended before it took the turn: the next one takes it.
                Err(_) => self.shared.runner_ended(session, handle.generation),
            }
        }
        Err(ToolError::new(ErrorCode::Internal, "the session could not take the turn; try again"))
    }

    /// Interrupts the running turn, if any; the session stays.
    pub async fn interrupt(&self, session: &str) -> Result<(), ToolError> {
        self.row(session)?;
        let Some(handle) = self.running(session) else { return Ok(()) };
        let (reply, answer) = oneshot::channel();
        if handle.commands.send(Command::Interrupt { reply }).await.is_err() {
            return Ok(());
        }
        answer.await.unwrap_or(Ok(()))
    }

    /// Ends the session's process; the session stays listed, resumable.
    pub async fn stop(&self, session: &str) -> Result<(), ToolError> {
        self.row(session)?;
        let Some(handle) = self.running(session) else { return Ok(()) };
        let (reply, answer) = oneshot::channel();
        if handle.commands.send(Command::Stop { reply }).await.is_ok() {
            let _ = answer.await;
        }
        Ok(())
    }

    /// Every session, the most recently active first.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>, ToolError> {
        let rows = self.shared.store.sessions().map_err(internal)?;
        Ok(rows.into_iter().map(|row| self.info_of(row)).collect())
    }

    /// One session.
    pub fn info(&self, session: &str) -> Result<SessionInfo, ToolError> {
        Ok(self.info_of(self.row(session)?))
    }

    /// Up to `limit` events after `after`, and the `after` of the next page.
    pub fn log(&self, session: &str, after: u64, limit: usize) -> Result<(Vec<SessionEvent>, u64), ToolError> {
        self.row(session)?;
        let events = self.shared.store.events(session, after, limit).map_err(internal)?;
        let next = events.last().map_or(after, |event| event.seq);
        Ok((events, next))
    }

    /// Follows every session from `after`; while the follower lives the user counts as looking
    /// (`brief` tells what happened since they last did).
    pub fn follow(&self, after: &HashMap<String, u64>) -> Follower {
        let look = brief::Look::begin(&self.shared.looks);
        Follower::new(self.shared.store.clone(), self.shared.live.subscribe(), after).watched(look)
    }

    /// Events as they are recorded, from now on (no replay; a slow receiver skips some): what
    /// notifications watch.
    pub fn live_events(&self) -> tokio::sync::broadcast::Receiver<SessionEvent> {
        self.shared.live.subscribe()
    }

    /// Where this host's prompts go.
    pub fn approvals(&self) -> &Broker {
        &self.shared.approvals
    }

    /// Stops every session's process and waits until each has ended. (Cancelling the shutdown
    /// token given at open does the same without waiting.)
    pub async fn stop_all(&self) {
        let handles: Vec<RunnerHandle> =
            self.shared.runners.lock().map(|runners| runners.values().cloned().collect()).unwrap_or_default();
        for handle in handles {
            let (reply, answer) = oneshot::channel();
            if handle.commands.send(Command::Stop { reply }).await.is_ok() {
                let _ = answer.await;
            }
        }
    }

    fn row(&self, session: &str) -> Result<SessionRow, ToolError> {
        self.shared.store.session(session).map_err(internal)?.ok_or_else(|| {
            let shown = crate::text::prefix(session, 64);
            ToolError::new(ErrorCode::NotFound, format!("no session {shown:?}"))
        })
    }

    fn info_of(&self, row: SessionRow) -> SessionInfo {
        let pending = self.running(&row.id).map_or(0, |handle| handle.pending.load(Ordering::Relaxed));
        SessionInfo {
            session: row.id,
            agent: row.agent,
            title: row.title,
            state: row.state,
            cwd: row.cwd.display().to_string(),
            started_at: row.started_at,
            last_event_at: row.last_event_at,
            turns: row.turns,
            cost_usd: row.cost_usd,
            pending,
            last_seq: row.last_seq,
        }
    }

    fn running(&self, session: &str) -> Option<RunnerHandle> {
        self.shared.runners.lock().ok()?.get(session).cloned()
    }

    /// The session's actor, started (to resume it) when it has none.
    fn runner(&self, session: &str) -> Result<RunnerHandle, ToolError> {
        if let Some(handle) = self.running(session) {
            return Ok(handle);
        }
        let row = self.row(session)?;
        let adapter = self.adapter(&row.agent, &row.id, &row.cwd, None)?;
        Ok(self.spawn_runner(&row, adapter))
    }

    fn spawn_runner(&self, row: &SessionRow, adapter: Box<dyn Adapter>) -> RunnerHandle {
        // Nothing panics while holding the table; were it poisoned, its contents are still whole.
        let mut runners = self.shared.runners.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(handle) = runners.get(&row.id) {
            return handle.clone();
        }
        let generation = self.shared.generation.fetch_add(1, Ordering::Relaxed);
        let handle = Runner::spawn(
            self.shared.clone(),
            row.id.clone(),
            adapter,
            row.cwd.clone(),
            row.resume.clone(),
            row.state,
            generation,
        );
        runners.insert(row.id.clone(), handle.clone());
        handle
    }

    /// The agents a session can start with (`agent_sessions` lists them for a new session's
    /// choice): the configured ones and the built-in `claude` and `codex`, each whose program is
    /// installed; the default first.
    pub fn agents(&self) -> Vec<String> {
        let config = self.toolbox.config();
        let path = self.toolbox.env_var("PATH");
        let mut names: Vec<String> = Vec::new();
        for name in [DEFAULT_AGENT, codex::CODEX_AGENT].into_iter().chain(config.agents.keys().map(String::as_str)) {
            let program = config.agents.get(name).map_or(name, |command| command.program.as_str());
            if !names.iter().any(|known| known == name) && find_program(program, path).is_some() {
                names.push(name.to_owned());
            }
        }
        names
    }

    /// The adapter of agent `name`: a configured one first, then the built-in `claude` and `codex`.
    fn adapter(
        &self,
        name: &str,
        session: &str,
        cwd: &std::path::Path,
        prompt: Option<&str>,
    ) -> Result<Box<dyn Adapter>, ToolError> {
        let config = self.toolbox.config();
        let configured: Option<&AgentCommand> = config.agents.get(name);
        let program_name = match (configured, name) {
            (Some(command), _) => command.program.clone(),
            (None, DEFAULT_AGENT | codex::CODEX_AGENT) => name.to_owned(),
            (None, _) => {
                let mut known: Vec<&str> = config.agents.keys().map(String::as_str).collect();
                known.extend([DEFAULT_AGENT, codex::CODEX_AGENT]);
                return Err(ToolError::new(
                    ErrorCode::InvalidArgs,
                    format!("field `agent`: no coding agent named {name:?} (known: {})", known.join(", ")),
                ));
            }
        };
        let program = find_program(&program_name, self.toolbox.env_var("PATH")).ok_or_else(|| {
            ToolError::new(
                ErrorCode::Unavailable,
                format!("coding agent {name:?} is not available: `{program_name}` is not installed or not on PATH"),
            )
        })?;
        match configured {
            Some(command) => {
                if !matches!(command.format.as_str(), "stream-json" | "text") {
                    return Err(ToolError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "agent {name:?} has output format {:?}; use \"stream-json\" or \"text\"",
                            command.format
                        ),
                    ));
                }
                if let Some(prompt) = prompt {
                    check_prompt_is_not_an_option(name, command, prompt)?;
                }
                Ok(Box::new(plain::Plain::new(program, command.clone(), session.to_owned(), cwd.to_path_buf())))
            }
            None if name == codex::CODEX_AGENT => {
                Ok(Box::new(codex::Codex::new(program, session.to_owned(), cwd.to_path_buf())))
            }
            None => Ok(Box::new(claude::Claude::new(program, session.to_owned(), cwd.to_path_buf()))),
        }
    }
}

fn check_turn(field: &str, text: &str) -> Result<(), ToolError> {
    crate::tools::args::check_text(field, text, MAX_PROMPT_LEN)
}

fn internal(err: anyhow::Error) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("{err:#}"))
}
