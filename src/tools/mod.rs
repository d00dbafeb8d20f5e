//! The tools (docs/PROTOCOL.md, "Tools"): [`spec`] is the one table that names them and
//! describes their arguments, [`declare`] builds Gemini's declarations from it, [`dispatch`] is
//! the one way a call runs, and [`Toolbox`] runs this machine's tools under the workspace.
//!
//! Every call goes through the same gate, in this order: where it runs (another environment, or
//! else a name the table lacks → `unknown-tool`); policy (deny list, allow list, read-only) →
//! `denied-by-policy`; on this machine the agent-wide concurrency limit → `busy` at once, never
//! queued, and argument checks against the table → `invalid-args` naming the field; then the
//! tool. Each call, refused or not, leaves one line in the audit trail.

pub(crate) mod args;
mod beneath;
pub(crate) mod coding_agent;
mod command;
pub mod declare;
pub mod dispatch;
mod entries;
mod files;
pub(crate) mod output;
pub mod policy;
mod screenshot;
mod sees;
pub mod spec;
pub(crate) mod supervise;
mod upload;
mod workspace;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

pub use coding_agent::{default_claude, CODING_AGENT_TIMEOUT, DEFAULT_AGENT, MAX_PROMPT_LEN};
pub use command::{MAX_COMMAND_LEN, MAX_COMMAND_TIMEOUT, SHELL};
pub use declare::{gemini_declarations, ENV_ARG};
pub use dispatch::{AgentSessions, Dispatcher, EnvRouter, Terminals};
pub use entries::MAX_TRASH_ITEMS;
pub use files::{MAX_DIR_ENTRIES, MAX_WRITE_LEN};
pub use screenshot::{MAX_SCREENSHOT_LEN, SCREENSHOT_TIMEOUT};
pub use sees::coding_agents_seen;
pub use spec::{Effect, ParamSpec, ParamType, Runs, ToolKind, ToolSpec, FLEET_TOOL, TOOLS};
pub use upload::{MAX_UPLOAD_CHUNK, MAX_UPLOAD_LEN};

use crate::approvals::{self, Broker, BrokerOptions};
use crate::audit::Audit;
use crate::config::Config;
use crate::error::ConfigError;
use crate::protocol::{AgentMessage, ErrorCode, ToolCall, ToolError, DEFAULT_COMMAND_TIMEOUT};
use args::{check_text, invalid, Args};
use workspace::Workspace;

/// Tool calls running at once across the agent when `max_concurrent_calls` is not set.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = crate::protocol::MAX_CALLS_IN_FLIGHT;
/// Environment variables of this agent never passed on to the programs tools start.
/// (`voxa` removes them from its own environment at start too; a library user may not.)
pub const PRIVATE_ENV: [&str; 2] = crate::secret::SECRET_ENV;

/// How to build a [`Toolbox`].
#[derive(Clone, Default)]
pub struct ToolboxOptions {
    /// Root every path argument resolves inside.
    pub workspace: PathBuf,
    /// Directories no path argument may resolve into (`protected-path`): the voxa home.
    pub protected: Vec<PathBuf>,
    /// Policy, coding agents, concurrency.
    pub config: Config,
    /// Where every call is recorded; `None` records nothing (benchmarks).
    pub audit: Option<Audit>,
    /// Environment of the programs tools start, and where `PATH` and `DISPLAY` are looked up;
    /// `None` takes this process's. [`PRIVATE_ENV`] is removed either way.
    pub env: Option<Vec<(OsString, OsString)>>,
    /// File that keeps the open approvals across a restart (`approvals.json` in the home).
    pub approvals_store: Option<PathBuf>,
    /// Directory deleted files are moved to (`trash/` in the home); `None` refuses `delete_file`.
    pub trash: Option<PathBuf>,
}

impl std::fmt::Debug for ToolboxOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Variable names only: values can be secrets.
        let env_names = self.env.as_ref().map(|env| env.iter().map(|(key, _)| key).collect::<Vec<_>>());
        f.debug_struct("ToolboxOptions")
            .field("workspace", &self.workspace)
            .field("protected", &self.protected)
            .field("config", &self.config)
            .field("audit", &self.audit)
            .field("env", &env_names)
            .field("approvals_store", &self.approvals_store)
            .field("trash", &self.trash)
            .finish()
    }
}

/// One call to run, as the dispatcher takes it.
#[derive(Debug)]
pub struct ToolRequest {
    pub id: String,
    /// The name on the wire; the dispatcher parses it into a [`ToolKind`] once.
    pub name: String,
    pub args: Value,
    /// Environment to run it on (`tool_call.env`); `None` for this machine.
    pub env: Option<String>,
    /// Who asked: `phone`, `loopback`, `gemini`, `host:<envKey>` (audit only).
    pub caller: String,
    /// Output chunks as they happen (`tool_progress`); `None` when nobody listens. Best effort:
    /// when the channel is full, chunks are merged and sent later, never waited for.
    pub progress: Option<mpsc::Sender<String>>,
    /// Cancelled by `cancel`, the session ending, or Gemini's `toolCallCancellation`.
    pub cancel: CancellationToken,
    /// Where a terminal this call opens or attaches sends its output: the session's socket queue.
    /// `None` for callers that watch no terminal (the voice model reads one with `term_screen`).
    pub viewer: Option<mpsc::Sender<crate::protocol::Frame>>,
}

impl ToolRequest {
    /// The request for a `tool_call` (or a voice model's function call) from `caller`.
    pub fn from_call(
        call: ToolCall,
        caller: impl Into<String>,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
    ) -> Self {
        let ToolCall { id, name, args, env, caller: _ } = call;
        ToolRequest { id, name, args, env, caller: caller.into(), progress, cancel, viewer: None }
    }

    /// The same request, a terminal it opens or attaches sending its output to `viewer`.
    pub fn with_viewer(mut self, viewer: mpsc::Sender<crate::protocol::Frame>) -> Self {
        self.viewer = Some(viewer);
        self
    }
}

/// What a successful call returns.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub result: Value,
    /// A screenshot, sent to the phone only as an `image` frame.
    pub image: Option<Screenshot>,
}

/// An encoded screenshot.
#[derive(Clone)]
pub struct Screenshot {
    pub mime: String,
    pub width: u32,
    pub height: u32,
    pub bytes: Vec<u8>,
}

impl Screenshot {
    /// The `image` frame that carries this screenshot to the phone.
    pub fn image_frame(&self, id: &str) -> AgentMessage {
        use base64::Engine as _;
        AgentMessage::Image(crate::protocol::Image {
            id: id.to_owned(),
            mime: self.mime.clone(),
            width: self.width,
            height: self.height,
            data: base64::engine::general_purpose::STANDARD.encode(&self.bytes),
        })
    }
}

impl std::fmt::Debug for Screenshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screenshot")
            .field("mime", &self.mime)
            .field("width", &self.width)
            .field("height", &self.height)
            .finish()
    }
}

/// The tools of this machine.
#[derive(Clone)]
pub struct Toolbox {
    inner: Arc<Inner>,
}

struct Inner {
    workspace: Workspace,
    config: Config,
    audit: Option<Audit>,
    approvals: Broker,
    trash: Option<entries::Trash>,
    env: Arc<[(OsString, OsString)]>,
    calls: Arc<Semaphore>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox").field("workspace", &self.inner.workspace.root()).finish_non_exhaustive()
    }
}

impl Toolbox {
    /// Checks the workspace (canonicalised; it must be an existing directory) and the settings.
    pub fn new(options: ToolboxOptions) -> anyhow::Result<Self> {
        let workspace = Workspace::new(&options.workspace, &options.protected)?;
        let max_calls = options.config.max_concurrent_calls.unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS);
        if max_calls == 0 {
            return Err(ConfigError::new("max_concurrent_calls must be at least 1").into());
        }
        let mut env = options.env.unwrap_or_else(|| std::env::vars_os().collect());
        env.retain(|(key, _)| !PRIVATE_ENV.iter().any(|private| key == private));
        let approvals = Broker::new(BrokerOptions {
            timeout: Duration::from_secs(options.config.approvals.timeout_secs),
            audit: options.audit.clone(),
            store: options.approvals_store,
        });
        Ok(Toolbox {
            inner: Arc::new(Inner {
                workspace,
                config: options.config,
                audit: options.audit,
                approvals,
                trash: options.trash.map(entries::Trash::new),
                env: env.into(),
                calls: Arc::new(Semaphore::new(max_calls)),
            }),
        })
    }

    /// The environment of the programs tools start ([`PRIVATE_ENV`] removed).
    pub(crate) fn child_env(&self) -> Arc<[(OsString, OsString)]> {
        self.inner.env.clone()
    }

    /// The settings this toolbox runs under.
    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The canonical workspace root.
    pub fn workspace(&self) -> &Path {
        self.inner.workspace.root()
    }

    /// Tool calls that may run at once (`max_concurrent_calls`, else
    /// [`DEFAULT_MAX_CONCURRENT_CALLS`]); more are answered `busy`.
    pub fn max_calls_in_flight(&self) -> usize {
        self.inner.config.max_concurrent_calls.unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS)
    }

    /// Tool calls running right now.
    pub fn calls_in_flight(&self) -> usize {
        self.max_calls_in_flight().saturating_sub(self.inner.calls.available_permits())
    }

    /// The approval broker every call under `ask`, and every coding agent's prompt, waits in.
    pub fn approvals(&self) -> &Broker {
        &self.inner.approvals
    }

    /// The audit trail; only the dispatcher writes to it.
    pub(super) fn audit(&self) -> Option<&Audit> {
        self.inner.audit.as_ref()
    }

    /// Runs a call the dispatcher resolved to this machine and the policy allowed: the
    /// agent-wide concurrency limit (`busy` at once, never queued), the argument checks, the tool.
    pub(crate) async fn run(
        &self,
        kind: ToolKind,
        args: Value,
        caller: &str,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let Ok(_permit) = self.inner.calls.clone().try_acquire_owned() else {
            return Err(ToolError::new(ErrorCode::Busy, "too many tool calls are running; try again shortly"));
        };
        let args = Args::check(kind.spec(), &args)?;
        if cancel.is_cancelled() {
            return Err(ToolError::new(ErrorCode::Cancelled, "cancelled before it started"));
        }
        self.execute(kind, &args, caller, progress, cancel).await
    }

    async fn execute(
        &self,
        kind: ToolKind,
        args: &Args<'_>,
        caller: &str,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let inner = &self.inner;
        match kind {
            ToolKind::RunCommand => {
                let request = self.command_request(args)?;
                command::run_command(request, inner.env.clone(), progress, cancel).await.map(plain)
            }
            ToolKind::ReadFile => {
                let request = files::ReadRequest {
                    path: args.str("path").unwrap_or_default().to_owned(),
                    max_bytes: args.u64("max_bytes"),
                    offset: args.u64("offset").unwrap_or(0),
                    base64: args.str("encoding").map(files::Encoding::parse).transpose()?
                        == Some(files::Encoding::Base64),
                };
                self.blocking(cancel, move |ws| files::read_file(ws, &request)).await.map(plain)
            }
            ToolKind::WriteFile => {
                let request = files::WriteRequest {
                    path: args.str("path").unwrap_or_default().to_owned(),
                    content: args.str("content").unwrap_or_default().to_owned(),
                    create_dirs: args.bool("create_dirs").unwrap_or(false),
                    encoding: args
                        .str("encoding")
                        .map(files::Encoding::parse)
                        .transpose()?
                        .unwrap_or(files::Encoding::Utf8),
                    expected: files::Expected::parse(args.str("version")),
                };
                self.committing(cancel, move |ws, cancel| files::write_file(ws, &request, cancel)).await
            }
            ToolKind::UploadFile => {
                let request = upload::UploadRequest {
                    path: args.str("path").unwrap_or_default().to_owned(),
                    data: args.str("data").unwrap_or_default().to_owned(),
                    offset: args.u64("offset").unwrap_or(0),
                    done: args.bool("done").unwrap_or(false),
                    expected: files::Expected::parse(args.str("version")),
                };
                self.committing(cancel, move |ws, cancel| upload::upload_file(ws, &request, cancel)).await
            }
            ToolKind::MoveFile => {
                let from = args.str("from").unwrap_or_default().to_owned();
                let to = args.str("to").unwrap_or_default().to_owned();
                self.committing(cancel, move |ws, _| entries::move_file(ws, &from, &to)).await
            }
            ToolKind::DeleteFile => {
                let path = args.str("path").unwrap_or_default().to_owned();
                let trash = self.trash()?;
                self.committing(cancel, move |ws, _| trash.delete(ws, &path)).await
            }
            ToolKind::ListTrash => {
                let trash = self.trash()?;
                self.blocking(cancel, move |_| trash.list()).await.map(plain)
            }
            ToolKind::RestoreFile => {
                let id = args.str("id").unwrap_or_default().to_owned();
                let to = args.str("to").map(str::to_owned);
                let trash = self.trash()?;
                self.committing(cancel, move |ws, _| trash.restore(ws, &id, to.as_deref())).await
            }
            ToolKind::ListDir => {
                let path = args.str("path").map(str::to_owned);
                self.blocking(cancel, move |ws| files::list_dir(ws, path.as_deref())).await.map(plain)
            }
            ToolKind::Screenshot => {
                let display = args.str("display").map(str::to_owned);
                let env_display = self.env_var("DISPLAY").map(|value| value.to_string_lossy().into_owned());
                let shot = screenshot::take(display, env_display, cancel).await?;
                let result =
                    json!({ "width": shot.width, "height": shot.height, "mime": shot.mime, "bytes": shot.bytes.len() });
                Ok(ToolOutput { result, image: Some(shot) })
            }
            ToolKind::CodingAgent => {
                let request = self.agent_request(args)?;
                coding_agent::run(request, inner.env.clone(), progress, cancel).await.map(plain)
            }
            ToolKind::Approve => {
                let approve = approvals::approve_from_args(&inner.approvals, &args.value())?;
                approvals::answer(&inner.approvals, approve, caller).map(|()| plain(json!({})))
            }
            ToolKind::Approvals => Ok(plain(json!({ "approvals": inner.approvals.open() }))),
            // The dispatcher sends router and session tools where they run; one reaching here has none.
            ToolKind::Fleet
            | ToolKind::AgentStart
            | ToolKind::AgentSend
            | ToolKind::AgentInterrupt
            | ToolKind::AgentStop
            | ToolKind::AgentSessions
            | ToolKind::AgentLog
            | ToolKind::Brief
            | ToolKind::TermOpen
            | ToolKind::TermAttach
            | ToolKind::TermInput
            | ToolKind::TermResize
            | ToolKind::TermClose
            | ToolKind::TermList
            | ToolKind::TermScreen => Err(dispatch::unknown_tool(kind.name())),
        }
    }

    /// A `run_command` call's checked command, directory and timeout.
    fn command_request(&self, args: &Args<'_>) -> Result<command::CommandRequest, ToolError> {
        let command = args.str("command").unwrap_or_default();
        check_text("command", command, MAX_COMMAND_LEN)?;
        let timeout = match args.u64("timeout_ms") {
            None => DEFAULT_COMMAND_TIMEOUT,
            Some(ms) if (1..=MAX_COMMAND_TIMEOUT.as_millis() as u64).contains(&ms) => Duration::from_millis(ms),
            Some(_) => {
                return Err(invalid(format!(
                    "field `timeout_ms` must be between 1 and {}",
                    MAX_COMMAND_TIMEOUT.as_millis()
                )))
            }
        };
        let cwd = self.directory(args.str("cwd"))?;
        Ok(command::CommandRequest {
            command: command.to_owned(),
            cwd,
            timeout,
            limits: self.inner.config.limits.clone(),
        })
    }

    /// A `coding_agent` call's checked prompt and directory, with the agent's command and program.
    fn agent_request(&self, args: &Args<'_>) -> Result<coding_agent::AgentRequest, ToolError> {
        let prompt = args.str("prompt").unwrap_or_default();
        check_text("prompt", prompt, MAX_PROMPT_LEN)?;
        let agent = args.str("agent").unwrap_or(DEFAULT_AGENT);
        let command = coding_agent::agent_command(&self.inner.config, agent)?;
        coding_agent::check_prompt_is_not_an_option(agent, &command, prompt)?;
        let cwd = self.directory(args.str("cwd"))?;
        let program = coding_agent::find_program(&command.program, self.env_var("PATH")).ok_or_else(|| {
            ToolError::new(
                ErrorCode::Unavailable,
                format!(
                    "coding agent {agent:?} is not available: `{}` is not installed or not on PATH",
                    command.program
                ),
            )
        })?;
        Ok(coding_agent::AgentRequest {
            prompt: prompt.to_owned(),
            agent: agent.to_owned(),
            cwd,
            command,
            program,
            limits: self.inner.config.limits.clone(),
        })
    }

    /// Runs a file tool off the async threads; a cancel answers at once (the file operation
    /// itself is short and bounded, and finishes on its own).
    async fn blocking<F>(&self, cancel: CancellationToken, work: F) -> Result<Value, ToolError>
    where
        F: FnOnce(&Workspace) -> Result<Value, ToolError> + Send + 'static,
    {
        let inner = self.inner.clone();
        let task = tokio::task::spawn_blocking(move || work(&inner.workspace));
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ToolError::new(ErrorCode::Cancelled, "cancelled")),
            joined = task => joined
                .unwrap_or_else(|err| Err(ToolError::new(ErrorCode::Internal, format!("tool failed: {err}")))),
        }
    }

    /// Runs a file tool that changes the workspace off the async threads. Not answered early on
    /// cancel: such a tool looks at the token before it commits (or is one short step), so the
    /// answer always tells whether anything changed.
    async fn committing<F>(&self, cancel: CancellationToken, work: F) -> Result<ToolOutput, ToolError>
    where
        F: FnOnce(&Workspace, &CancellationToken) -> Result<Value, ToolError> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || work(&inner.workspace, &cancel))
            .await
            .unwrap_or_else(|err| Err(ToolError::new(ErrorCode::Internal, format!("tool failed: {err}"))))
            .map(plain)
    }

    /// The trash `delete_file` moves entries to.
    fn trash(&self) -> Result<entries::Trash, ToolError> {
        self.inner
            .trash
            .clone()
            .ok_or_else(|| ToolError::new(ErrorCode::Unavailable, "this agent keeps no trash, so it deletes nothing"))
    }

    /// An existing directory inside the workspace; the root when `path` is absent.
    pub(crate) fn directory(&self, path: Option<&str>) -> Result<PathBuf, ToolError> {
        let Some(path) = path else { return Ok(self.inner.workspace.root().to_path_buf()) };
        let resolved = self.inner.workspace.resolve(path)?;
        if !resolved.exists {
            return Err(ToolError::new(ErrorCode::NotFound, format!("directory {path} does not exist")));
        }
        if !resolved.real.is_dir() {
            return Err(invalid(format!("field `cwd`: {path} is not a directory")));
        }
        Ok(resolved.real)
    }

    pub(crate) fn env_var(&self, name: &str) -> Option<&OsStr> {
        self.inner.env.iter().rev().find(|(key, _)| key == name).map(|(_, value)| value.as_os_str())
    }
}

fn plain(result: Value) -> ToolOutput {
    ToolOutput { result, image: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(config: Config) -> (tempfile::TempDir, Toolbox) {
        let tmp = tempfile::tempdir().unwrap();
        let toolbox = Toolbox::new(ToolboxOptions {
            workspace: tmp.path().to_path_buf(),
            config,
            audit: None,
            env: Some(vec![("GEMINI_API_KEY".into(), "secret".into()), ("PATH".into(), "/usr/bin:/bin".into())]),
            ..Default::default()
        })
        .unwrap();
        (tmp, toolbox)
    }

    #[test]
    fn arguments_are_checked_against_the_table() {
        let spec = ToolKind::RunCommand.spec();
        let message = |args: Value| Args::check(spec, &args).err().map(|err| err.message);
        assert_eq!(message(json!({})).unwrap(), "missing string field `command`");
        assert_eq!(message(json!({"command": null})).unwrap(), "missing string field `command`");
        assert_eq!(message(json!({"command": 1})).unwrap(), "field `command` must be a string");
        assert_eq!(
            message(json!({"command": "x", "timeout_ms": "5"})).unwrap(),
            "field `timeout_ms` must be a non-negative integer"
        );
        assert_eq!(
            message(json!({"command": "x", "timeout_ms": -5})).unwrap(),
            "field `timeout_ms` must be a non-negative integer"
        );
        assert!(message(json!({"command": "x", "cmd": "y"})).unwrap().starts_with("unknown field `cmd`"));
        assert!(message(json!(["x"])).unwrap().contains("JSON object"));
        assert!(message(json!({"command": "x", "timeout_ms": 5000.0, "cwd": null})).is_none());
        let list = ToolKind::ListDir.spec();
        assert!(Args::check(list, &Value::Null).is_ok());
    }

    #[test]
    fn private_variables_never_reach_tools_and_options_debug_hides_values() {
        let (_tmp, toolbox) = make(Config::default());
        assert!(toolbox.env_var("GEMINI_API_KEY").is_none());
        assert_eq!(toolbox.env_var("PATH").unwrap(), "/usr/bin:/bin");
        let options = ToolboxOptions { env: Some(vec![("TOKEN".into(), "hunter2".into())]), ..Default::default() };
        let shown = format!("{options:?}");
        assert!(shown.contains("TOKEN") && !shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn the_toolbox_is_shared_across_tasks() {
        fn shareable<T: Clone + Send + Sync + 'static>() {}
        shareable::<Toolbox>();
    }

    #[test]
    fn zero_concurrency_and_missing_workspaces_are_configuration_errors() {
        let config = Config { max_concurrent_calls: Some(0), ..Default::default() };
        let tmp = tempfile::tempdir().unwrap();
        let options = ToolboxOptions { workspace: tmp.path().into(), config, ..Default::default() };
        assert!(Toolbox::new(options).is_err());
        let options = ToolboxOptions { workspace: tmp.path().join("missing"), ..Default::default() };
        let err = Toolbox::new(options).unwrap_err();
        assert!(format!("{err:#}").contains("missing"), "{err:#}");
    }
}
