//! The tool registry (docs/PROTOCOL.md, "Tools"): one table that names the tools, describes their arguments (for
//! `hello_ok` and Gemini's function declarations) and runs them under the workspace and policy.
//!
//! Every call goes through the same gate, in this order: unknown tool → `unknown-tool`; policy
//! (deny list, allow list, read-only) → `denied-by-policy`; the agent-wide concurrency limit →
//! `busy` at once, never queued; argument checks against the table → `invalid-args` naming the
//! field; then the tool. Each call, refused or not, leaves one line in the audit trail.

pub(crate) mod args;
mod beneath;
pub(crate) mod coding_agent;
mod command;
mod files;
pub(crate) mod output;
pub mod policy;
mod screenshot;
mod sees;
pub(crate) mod supervise;
mod workspace;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

pub use coding_agent::{default_claude, CODING_AGENT_TIMEOUT, DEFAULT_AGENT, MAX_PROMPT_LEN};
pub use command::{MAX_COMMAND_LEN, MAX_COMMAND_TIMEOUT, SHELL};
pub use files::{MAX_DIR_ENTRIES, MAX_WRITE_LEN};
pub use screenshot::{MAX_SCREENSHOT_LEN, SCREENSHOT_TIMEOUT};
pub use sees::coding_agents_seen;

use crate::approvals::{self, ask_rule, Broker, BrokerOptions, Request as ApprovalRequest};
use crate::audit::{Audit, CallRecord};
use crate::config::Config;
use crate::error::ConfigError;
use crate::protocol::{AgentMessage, ApprovalSource, ErrorCode, ToolError, DEFAULT_COMMAND_TIMEOUT};
use args::{check_text, invalid, Args};
use policy::PolicyRule;
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
            .finish()
    }
}

/// One call to run.
#[derive(Debug)]
pub struct ToolRequest {
    pub id: String,
    pub name: String,
    pub args: Value,
    /// Who asked: `phone`, `loopback`, `gemini`, `host:<envKey>` (audit only).
    pub caller: String,
    /// Output chunks as they happen (`tool_progress`); `None` when nobody listens. Best effort:
    /// when the channel is full, chunks are merged and sent later, never waited for.
    pub progress: Option<mpsc::Sender<String>>,
    /// Cancelled by `cancel`, the session ending, or Gemini's `toolCallCancellation`.
    pub cancel: CancellationToken,
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

/// JSON type of a tool parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    String,
    Integer,
    Boolean,
    /// A JSON object; not declared to Gemini (its schema needs properties).
    Object,
}

impl ParamType {
    /// The OpenAPI type name Gemini expects.
    pub fn gemini_name(self) -> &'static str {
        match self {
            ParamType::String => "STRING",
            ParamType::Integer => "INTEGER",
            ParamType::Boolean => "BOOLEAN",
            ParamType::Object => "OBJECT",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Boolean => "boolean",
            ParamType::Object => "object",
        }
    }
}

/// One parameter of a tool.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// Field name in `args`.
    pub name: &'static str,
    /// JSON type the field must have.
    pub kind: ParamType,
    /// Absent (or `null`) is `invalid-args` when true.
    pub required: bool,
    /// Written for the voice model.
    pub description: &'static str,
}

/// One tool: the single source for `hello_ok`, Gemini's declarations and argument checks.
#[derive(Clone, Copy, Debug)]
pub struct ToolSpec {
    /// Name on the wire, in `hello_ok` and in Gemini's declarations.
    pub name: &'static str,
    /// One line, written for the voice model.
    pub description: &'static str,
    /// Every field the tool accepts; any other is `invalid-args`.
    pub params: &'static [ParamSpec],
    /// True for tools a read-only policy refuses: they can change the machine.
    pub changes_machine: bool,
}

const fn param(name: &'static str, kind: ParamType, required: bool, description: &'static str) -> ParamSpec {
    ParamSpec { name, kind, required, description }
}

/// Every tool, in the order they are listed.
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "run_command",
        description:
            "Run a shell command (/bin/sh) on the user's computer, in the workspace, and return its exit code \
                      and output. Use it for git, builds, tests and quick checks. It cannot answer questions the \
                      command asks: input is empty. Output is capped at 256 KiB.",
        params: &[
            param("command", ParamType::String, true, "The command line to run, for example: git status"),
            param(
                "cwd",
                ParamType::String,
                false,
                "Directory to run in, relative to the workspace. Default: the workspace.",
            ),
            param(
                "timeout_ms",
                ParamType::Integer,
                false,
                "Stop the command after this many milliseconds. Default 120000, at most 3600000.",
            ),
        ],
        changes_machine: true,
    },
    ToolSpec {
        name: "read_file",
        description: "Read a file in the workspace. Returns its text (base64 when the file is binary), its size in \
                      bytes, and whether it was cut short.",
        params: &[
            param("path", ParamType::String, true, "Path of the file, relative to the workspace."),
            param("max_bytes", ParamType::Integer, false, "Read at most this many bytes. Default and maximum 262144."),
        ],
        changes_machine: false,
    },
    ToolSpec {
        name: "write_file",
        description: "Create or replace a file in the workspace with the given content, in one atomic step.",
        params: &[
            param("path", ParamType::String, true, "Path of the file, relative to the workspace."),
            param("content", ParamType::String, true, "The complete new content of the file."),
            param("create_dirs", ParamType::Boolean, false, "Create missing parent directories. Default false."),
            param("encoding", ParamType::String, false, "\"utf-8\" (default) or \"base64\" for binary content."),
        ],
        changes_machine: true,
    },
    ToolSpec {
        name: "list_dir",
        description: "List a directory in the workspace: each entry's name, kind (file, dir or symlink) and size.",
        params: &[param(
            "path",
            ParamType::String,
            false,
            "Directory, relative to the workspace. Default: the workspace.",
        )],
        changes_machine: false,
    },
    ToolSpec {
        name: "screenshot",
        description: "Take a screenshot of the computer's screen. The user sees the image on their phone; you get its \
                      size only.",
        params: &[param("display", ParamType::String, false, "X display such as \":0\". Default: the user's display.")],
        changes_machine: false,
    },
    ToolSpec {
        name: "coding_agent",
        description: "Hand a programming task to a coding agent (Claude Code by default) working in the workspace. It \
                      can read and change code and run commands, may take minutes, and returns its final answer.",
        params: &[
            param(
                "prompt",
                ParamType::String,
                true,
                "The task in full sentences, with everything the agent needs to know.",
            ),
            param("agent", ParamType::String, false, "Which coding agent to use. Default \"claude\"."),
            param(
                "cwd",
                ParamType::String,
                false,
                "Directory to work in, relative to the workspace. Default: the workspace.",
            ),
        ],
        changes_machine: true,
    },
    ToolSpec {
        name: "approve",
        description: "Answer an approval voxa told you about, with the user's own decision. Call it only after you \
                      read the approval's summary to the user and they answered: allow when they said yes to it, deny \
                      when they said no.",
        params: &[
            param("approval", ParamType::String, true, "The approval's id, as given (a-…)."),
            param("decision", ParamType::String, true, "\"allow\" or \"deny\" (\"allow_session\" where offered)."),
            param("message", ParamType::String, false, "The user's reason, told to whoever asked."),
            param("answer", ParamType::String, false, "For a question: the label of the option the user chose."),
            param(
                "answers",
                ParamType::Object,
                false,
                "For questions: each question's text mapped to its chosen label.",
            ),
        ],
        changes_machine: false,
    },
    ToolSpec {
        name: "approvals",
        description: "List the approvals waiting for the user's decision: id, summary, risk and expiry of each.",
        params: &[],
        changes_machine: false,
    },
];

/// The table entry of a tool.
pub fn tool_spec(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|spec| spec.name == name)
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

    /// The approval broker every call under `ask`, and every coding agent's prompt, waits in.
    pub fn approvals(&self) -> &Broker {
        &self.inner.approvals
    }

    /// The tools this policy lets run, in table order.
    pub fn specs(&self) -> impl Iterator<Item = &'static ToolSpec> + '_ {
        TOOLS
            .iter()
            .filter(|spec| policy::refusal(&self.inner.config.policy, spec.name, spec.changes_machine).is_none())
    }

    /// Tool names, as listed in `hello_ok`: the ones the policy allows.
    pub fn names(&self) -> Vec<String> {
        self.specs().map(|spec| spec.name.to_owned()).collect()
    }

    /// Gemini `functionDeclarations` for every tool the policy allows.
    pub fn gemini_declarations(&self) -> Value {
        Value::Array(self.specs().map(gemini_declaration).collect())
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

    /// Runs one call: policy, argument checks, execution, audit.
    pub async fn call(&self, request: ToolRequest) -> Result<ToolOutput, ToolError> {
        let started = Instant::now();
        let ToolRequest { id, name, args, caller, progress, cancel } = request;
        let (result, policy) = self.gate_and_run(&id, &name, &caller, args, progress, cancel).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(err) => err.code.as_str(),
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(
            tool = %crate::text::prefix(&name, 64),
            id = %crate::text::prefix(&id, 64),
            %caller,
            outcome,
            duration_ms,
            "tool call"
        );
        self.record(CallRecord {
            caller,
            tool: name,
            id,
            outcome: outcome.to_owned(),
            duration_ms,
            rule: policy.map(|_| ErrorCode::DeniedByPolicy.as_str().to_owned()),
            policy: policy.map(|rule| rule.as_str().to_owned()),
            env: None,
        });
        result
    }

    /// Applies the policy to a call this toolbox does not run itself: a router tool such as
    /// `fleet`, or a call routed to an environment. `changes_machine` says whether this call can
    /// change something (for a table tool its entry decides; a name the table lacks must say
    /// itself, and counts as changing when unsure), which `read_only` refuses.
    pub fn check_policy(&self, name: &str, changes_machine: bool) -> Result<(), ToolError> {
        let changes_machine = tool_spec(name).map_or(changes_machine, |spec| spec.changes_machine);
        match policy::refusal(&self.inner.config.policy, name, changes_machine) {
            Some(rule) => Err(denied(name, rule)),
            None => Ok(()),
        }
    }

    /// Writes a call to the audit trail, if there is one: the toolbox's own calls, and those it
    /// did not run itself (routed to an environment, or a router tool).
    pub fn record(&self, record: CallRecord) {
        if let Some(audit) = &self.inner.audit {
            if let Err(err) = audit.record_call(&record) {
                tracing::warn!(err = format!("{err:#}"), "could not write the audit trail");
            }
        }
    }

    async fn gate_and_run(
        &self,
        id: &str,
        name: &str,
        caller: &str,
        args: Value,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
    ) -> (Result<ToolOutput, ToolError>, Option<PolicyRule>) {
        let Some(spec) = tool_spec(name) else {
            let shown = crate::text::prefix(name, 64);
            let known = TOOLS.iter().map(|spec| spec.name).collect::<Vec<_>>().join(", ");
            return (
                Err(ToolError::new(ErrorCode::UnknownTool, format!("no tool named {shown:?} (tools: {known})"))),
                None,
            );
        };
        if let Some(rule) = policy::refusal(&self.inner.config.policy, spec.name, spec.changes_machine) {
            return (Err(denied(name, rule)), Some(rule));
        }
        let args = match Args::check(spec, &args) {
            Ok(args) => args,
            Err(err) => return (Err(err), None),
        };
        if let Err(refused) = self.ask(spec, id, &args, &cancel).await {
            return (Err(refused), Some(PolicyRule::Ask));
        }
        let Ok(_permit) = self.inner.calls.clone().try_acquire_owned() else {
            return (Err(ToolError::new(ErrorCode::Busy, "too many tool calls are running; try again shortly")), None);
        };
        let result = if cancel.is_cancelled() {
            Err(ToolError::new(ErrorCode::Cancelled, "cancelled before it started"))
        } else {
            self.execute(spec, &args, caller, progress, cancel).await
        };
        (result, None)
    }

    /// The policy's `ask`: when this call must wait for the user, waits for the decision (without
    /// holding a place among the calls in flight); a denial or the expiry is `denied-by-policy`
    /// with the user's message.
    async fn ask(
        &self,
        spec: &ToolSpec,
        id: &str,
        args: &Args<'_>,
        cancel: &CancellationToken,
    ) -> Result<(), ToolError> {
        let input = args.value();
        let Some(ask) = ask_rule(&self.inner.config, spec.name, &input, self.workspace(), spec.changes_machine) else {
            return Ok(());
        };
        let request = ApprovalRequest {
            source: ApprovalSource::Call(id.to_owned()),
            tool: spec.name.to_owned(),
            input,
            summary: ask.summary,
            risk: ask.risk,
            diff: None,
            questions: None,
            offers_session: false,
        };
        let answer = self.inner.approvals.request(request).wait(cancel).await;
        if answer.decision.allows() {
            return Ok(());
        }
        if cancel.is_cancelled() {
            return Err(ToolError::new(ErrorCode::Cancelled, "cancelled while it waited for approval"));
        }
        Err(ToolError::new(
            ErrorCode::DeniedByPolicy,
            format!("{} was not approved: {}", spec.name, answer.denial_message()),
        ))
    }

    async fn execute(
        &self,
        spec: &ToolSpec,
        args: &Args<'_>,
        caller: &str,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let inner = &self.inner;
        match spec.name {
            "run_command" => {
                let request = self.command_request(args)?;
                command::run_command(request, inner.env.clone(), progress, cancel).await.map(plain)
            }
            "read_file" => {
                let path = args.str("path").unwrap_or_default().to_owned();
                let max_bytes = args.u64("max_bytes");
                self.blocking(cancel, move |ws| files::read_file(ws, &path, max_bytes)).await.map(plain)
            }
            "write_file" => {
                let request = files::WriteRequest {
                    path: args.str("path").unwrap_or_default().to_owned(),
                    content: args.str("content").unwrap_or_default().to_owned(),
                    create_dirs: args.bool("create_dirs").unwrap_or(false),
                    encoding: args
                        .str("encoding")
                        .map(files::Encoding::parse)
                        .transpose()?
                        .unwrap_or(files::Encoding::Utf8),
                };
                // Not answered early on cancel: the write looks at the token before it commits,
                // so the answer always tells whether the file changed.
                let inner = self.inner.clone();
                tokio::task::spawn_blocking(move || files::write_file(&inner.workspace, &request, &cancel))
                    .await
                    .unwrap_or_else(|err| Err(ToolError::new(ErrorCode::Internal, format!("tool failed: {err}"))))
                    .map(plain)
            }
            "list_dir" => {
                let path = args.str("path").map(str::to_owned);
                self.blocking(cancel, move |ws| files::list_dir(ws, path.as_deref())).await.map(plain)
            }
            "screenshot" => {
                let display = args.str("display").map(str::to_owned);
                let env_display = self.env_var("DISPLAY").map(|value| value.to_string_lossy().into_owned());
                let shot = screenshot::take(display, env_display, cancel).await?;
                let result =
                    json!({ "width": shot.width, "height": shot.height, "mime": shot.mime, "bytes": shot.bytes.len() });
                Ok(ToolOutput { result, image: Some(shot) })
            }
            "coding_agent" => {
                let request = self.agent_request(args)?;
                coding_agent::run(request, inner.env.clone(), progress, cancel).await.map(plain)
            }
            "approve" => {
                let approve = approvals::approve_from_args(&inner.approvals, &args.value())?;
                approvals::answer(&inner.approvals, approve, caller).map(|()| plain(json!({})))
            }
            "approvals" => Ok(plain(json!({ "approvals": inner.approvals.open() }))),
            other => Err(ToolError::new(ErrorCode::Internal, format!("tool {other} has no implementation"))),
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

/// The refusal of a call the policy does not allow.
fn denied(name: &str, rule: PolicyRule) -> ToolError {
    let shown = crate::text::prefix(name, 64);
    ToolError::new(ErrorCode::DeniedByPolicy, format!("{shown} is not allowed here: {}", rule.reason()))
}

fn plain(result: Value) -> ToolOutput {
    ToolOutput { result, image: None }
}

/// Gemini function declarations for the tools an agent listed by name (a relay hosting the call
/// knows nothing else of them): the core tools with their arguments, any other name without
/// arguments. Names Gemini would refuse, and repeats, are left out.
pub fn gemini_declarations_named(names: &[String]) -> Value {
    let valid = |name: &str| {
        let mut chars = name.chars();
        name.len() <= 64
            && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    };
    let mut seen = std::collections::HashSet::new();
    let declarations = names
        .iter()
        .filter(|name| valid(name) && seen.insert(name.as_str()))
        .map(|name| match TOOLS.iter().find(|spec| spec.name == name) {
            Some(spec) => gemini_declaration(spec),
            None => json!({ "name": name, "description": format!("The laptop's {name} tool.") }),
        })
        .collect();
    Value::Array(declarations)
}

fn gemini_declaration(spec: &ToolSpec) -> Value {
    let properties: Map<String, Value> = spec
        .params
        .iter()
        .filter(|param| param.kind != ParamType::Object)
        .map(|param| {
            (param.name.to_owned(), json!({ "type": param.kind.gemini_name(), "description": param.description }))
        })
        .collect();
    let required: Vec<&str> = spec
        .params
        .iter()
        .filter(|param| param.required && param.kind != ParamType::Object)
        .map(|param| param.name)
        .collect();
    let mut declaration = json!({ "name": spec.name, "description": spec.description });
    // The service refuses an empty `properties`: a tool without arguments has no `parameters`.
    if !properties.is_empty() {
        let mut parameters = json!({ "type": "OBJECT", "properties": properties });
        if !required.is_empty() {
            parameters["required"] = json!(required);
        }
        declaration["parameters"] = parameters;
    }
    declaration
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;

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
    fn the_table_drives_names_and_gemini_declarations() {
        let (_tmp, toolbox) = make(Config::default());
        assert_eq!(
            toolbox.names(),
            [
                "run_command",
                "read_file",
                "write_file",
                "list_dir",
                "screenshot",
                "coding_agent",
                "approve",
                "approvals"
            ]
        );
        let declarations = toolbox.gemini_declarations();
        let run = &declarations[0];
        assert_eq!(run["name"], "run_command");
        assert_eq!(run["parameters"]["type"], "OBJECT");
        assert_eq!(run["parameters"]["properties"]["command"]["type"], "STRING");
        assert_eq!(run["parameters"]["properties"]["timeout_ms"]["type"], "INTEGER");
        assert_eq!(run["parameters"]["required"], json!(["command"]));
        assert_eq!(declarations[2]["parameters"]["properties"]["create_dirs"]["type"], "BOOLEAN");
        for declaration in declarations.as_array().unwrap() {
            assert!(!declaration["description"].as_str().unwrap().is_empty());
            for (_, property) in declaration["parameters"]["properties"].as_object().into_iter().flatten() {
                assert!(!property["description"].as_str().unwrap().is_empty());
            }
        }
    }

    #[test]
    fn the_policy_hides_what_it_refuses() {
        let config = Config { policy: Policy { read_only: true, ..Default::default() }, ..Default::default() };
        let (_tmp, toolbox) = make(config);
        assert_eq!(toolbox.names(), ["read_file", "list_dir", "screenshot", "approve", "approvals"]);
        assert_eq!(toolbox.gemini_declarations().as_array().unwrap().len(), 5);
        let config = Config {
            policy: Policy {
                allow: vec!["read_file".into(), "list_dir".into()],
                deny: vec!["list_dir".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let (_tmp, allow_and_deny) = make(config);
        assert_eq!(allow_and_deny.names(), ["read_file"]);
    }

    #[test]
    fn arguments_are_checked_against_the_table() {
        let spec = tool_spec("run_command").unwrap();
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
        let list = tool_spec("list_dir").unwrap();
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
