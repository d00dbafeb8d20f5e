//! The tools (docs/PROTOCOL.md, "Tools"): [`spec`] is the one table that names them, describes
//! their arguments and says which code runs each; [`declare`] builds Gemini's declarations from
//! it; [`policy`] is the one policy boundary every door asks; [`dispatch`] is the one way a call
//! runs; and [`Toolbox`] runs this machine's tools under the workspace, each group of tools in a
//! file of its own that parses its arguments and runs them ([`files`], [`command`],
//! [`screenshot`], [`coding_agent`]; [`approve`] runs on the agent's approval broker).
//!
//! Every call goes through the same gate, in this order: where it runs (another environment, or
//! else a name the table lacks → `unknown-tool`); policy (deny list, allow list, read-only, and
//! `[policy.hosted]` for a relay-hosted voice call) → `denied-by-policy`, or under `ask` a wait
//! for the user's decision; on this machine the agent-wide concurrency limit → `busy` at once,
//! never queued, and argument checks against the table → `invalid-args` naming the field; then
//! the tool. Each call, refused or not, leaves one line in the audit trail.

mod approve;
pub(crate) mod args;
mod beneath;
mod brief_machines;
pub(crate) mod coding_agent;
mod command;
pub mod declare;
pub mod dispatch;
mod files;
pub(crate) mod output;
pub mod policy;
mod screenshot;
mod sees;
pub mod spec;
mod workspace;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

pub use coding_agent::{default_claude, CODING_AGENT_TIMEOUT, DEFAULT_AGENT, MAX_PROMPT_LEN};
pub use command::{MAX_COMMAND_LEN, MAX_COMMAND_TIMEOUT, SHELL};
pub use declare::{gemini_declarations, ENV_ARG};
pub use dispatch::{AgentSessions, Dispatcher, EnvRouter, FollowScope, Terminals};
pub use files::{MAX_DIR_ENTRIES, MAX_TRASH_ITEMS, MAX_UPLOAD_CHUNK, MAX_UPLOAD_LEN, MAX_WRITE_LEN};
pub use policy::{Family, FrameAction, Verdict};
pub use screenshot::{MAX_SCREENSHOT_LEN, SCREENSHOT_TIMEOUT};
pub use sees::coding_agents_seen;
pub use spec::{
    ApprovalTool, Effect, FileTool, Local, ParamSpec, ParamType, Runs, ToolKind, ToolSpec, FLEET_TOOL, TOOLS,
};

use crate::config::Config;
use crate::error::ConfigError;
use crate::protocol::{AgentMessage, ErrorCode, ToolCall, ToolError};
use args::{invalid, Args};
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
    /// Environment of the programs tools start, and where `PATH` and `DISPLAY` are looked up;
    /// `None` takes this process's. [`PRIVATE_ENV`] is removed either way.
    pub env: Option<Vec<(OsString, OsString)>>,
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
            .field("env", &env_names)
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
    /// Who asked: `phone`, `loopback`, `gemini`, `gemini-hosted`, `host:<envKey>`. The audit
    /// records it; the policy judges a `gemini-hosted` call by `[policy.hosted]` too.
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
    trash: Option<files::entries::Trash>,
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
        Ok(Toolbox {
            inner: Arc::new(Inner {
                workspace,
                config: options.config,
                trash: options.trash.map(files::entries::Trash::new),
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

    /// Runs a call of one of this machine's tools that the dispatcher resolved and the policy
    /// allowed: the agent-wide concurrency limit (`busy` at once, never queued), the argument
    /// checks, then the tool's own file parses its arguments and runs it. A tool that runs
    /// elsewhere (an approval, session, terminal or router tool) is `unknown-tool` here.
    pub async fn run(
        &self,
        kind: ToolKind,
        args: Value,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let Runs::Toolbox(local) = kind.spec().runs else { return Err(dispatch::unknown_tool(kind.name())) };
        let Ok(_permit) = self.inner.calls.clone().try_acquire_owned() else {
            return Err(ToolError::new(ErrorCode::Busy, "too many tool calls are running; try again shortly"));
        };
        let args = Args::check(kind.spec(), &args)?;
        if cancel.is_cancelled() {
            return Err(ToolError::new(ErrorCode::Cancelled, "cancelled before it started"));
        }
        LocalCall::parse(local, &args, self)?.run(self, progress, cancel).await
    }

    /// Runs a file tool off the async threads; a cancel answers at once (the file operation
    /// itself is short and bounded, and finishes on its own).
    pub(crate) async fn blocking<F>(&self, cancel: CancellationToken, work: F) -> Result<Value, ToolError>
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
    pub(crate) async fn committing<F>(&self, cancel: CancellationToken, work: F) -> Result<ToolOutput, ToolError>
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
    pub(crate) fn trash(&self) -> Result<files::entries::Trash, ToolError> {
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

pub(crate) fn plain(result: Value) -> ToolOutput {
    ToolOutput { result, image: None }
}

/// One call of this machine's own tools, its arguments read by its group's file: the dispatcher
/// routes, each group parses and runs its own.
enum LocalCall {
    Files(files::FileCall),
    Command(command::CommandRequest),
    Screenshot(screenshot::ScreenshotRequest),
    CodingAgent(coding_agent::AgentRequest),
}

impl LocalCall {
    fn parse(local: Local, args: &Args<'_>, toolbox: &Toolbox) -> Result<Self, ToolError> {
        Ok(match local {
            Local::Files(tool) => LocalCall::Files(files::FileCall::parse(tool, args)?),
            Local::Command => LocalCall::Command(command::CommandRequest::parse(args, toolbox)?),
            Local::Screenshot => LocalCall::Screenshot(screenshot::ScreenshotRequest::parse(args, toolbox)),
            Local::CodingAgent => LocalCall::CodingAgent(coding_agent::AgentRequest::parse(args, toolbox)?),
        })
    }

    async fn run(
        self,
        toolbox: &Toolbox,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let env = toolbox.child_env();
        match self {
            LocalCall::Files(call) => call.run(toolbox, cancel).await,
            LocalCall::Command(request) => command::run_command(request, env, progress, cancel).await.map(plain),
            LocalCall::Screenshot(request) => request.run(cancel).await,
            LocalCall::CodingAgent(request) => coding_agent::run(request, env, progress, cancel).await.map(plain),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn make(config: Config) -> (tempfile::TempDir, Toolbox) {
        let tmp = tempfile::tempdir().unwrap();
        let toolbox = Toolbox::new(ToolboxOptions {
            workspace: tmp.path().to_path_buf(),
            config,
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
