//! `coding_agent`: hands a task to a coding agent running headless in the workspace — Claude Code
//! by default (`claude -p --output-format stream-json --verbose -- <prompt>`), or any agent named
//! in `config.toml` under `[agents.<name>]` (`program`, `args` with a `{prompt}` placeholder,
//! `format` = `stream-json` or `text`).
//!
//! The prompt always travels as one argument, never through a shell. The built-in command puts it
//! after `--`, so a prompt that looks like a flag stays a prompt; a configured command should too,
//! and when its `{prompt}` is not after a `--`, a prompt starting with `-` is refused. Progress is the agent's assistant text as it streams; the answer is the `result` line
//! (or, for `text` agents, everything printed). The agent runs in its own process group, killed
//! whole on cancel, on [`CODING_AGENT_TIMEOUT`], and when it exits.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::args::{check_text, Args};
use super::command::SHELL;
use super::output::{last_output, AnsiStripper, Output};
use super::Toolbox;
use crate::config::{AgentCommand, Config, ProcessLimits};
use crate::process::{
    drain_done, exit_code, exited, output_waiting, read_capped, supervise, ulimit_lines, GroupGuard, LineReader, Stop,
    DRAIN_GRACE, KILL_GRACE,
};
use crate::protocol::{ErrorCode, ToolError, OUTPUT_CAP};
use crate::text::{prefix, suffix};

/// Agent used when the call names none.
pub const DEFAULT_AGENT: &str = "claude";
/// Longest prompt accepted (it is one command-line argument; Linux allows 128 KiB).
pub const MAX_PROMPT_LEN: usize = 100_000;
/// Longest a delegated task may run.
pub const CODING_AGENT_TIMEOUT: Duration = Duration::from_secs(2 * 60 * 60);
/// Placeholder in an agent's `args` replaced by the prompt.
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";
/// Bytes of the agent's stderr kept to explain a failure.
const STDERR_KEEP: usize = 8 << 10;
/// How often the output is looked at again, once the grace after the agent's exit has passed
/// and something was still waiting.
const DRAIN_RECHECK: Duration = Duration::from_millis(20);

/// A validated `coding_agent` call, its program already found.
#[derive(Debug)]
pub(crate) struct AgentRequest {
    pub prompt: String,
    pub agent: String,
    pub cwd: PathBuf,
    pub command: AgentCommand,
    pub program: PathBuf,
    /// Resource limits set before the agent runs.
    pub limits: ProcessLimits,
}

impl AgentRequest {
    /// A `coding_agent` call's checked prompt and directory, with the agent's command and program.
    pub(crate) fn parse(args: &Args<'_>, toolbox: &Toolbox) -> Result<Self, ToolError> {
        let prompt = args.str("prompt").unwrap_or_default();
        check_text("prompt", prompt, MAX_PROMPT_LEN)?;
        let agent = args.str("agent").unwrap_or(DEFAULT_AGENT);
        let command = agent_command(toolbox.config(), agent)?;
        check_prompt_is_not_an_option(agent, &command, prompt)?;
        let cwd = toolbox.directory(args.str("cwd"))?;
        let program = find_program(&command.program, toolbox.env_var("PATH")).ok_or_else(|| {
            ToolError::new(
                ErrorCode::Unavailable,
                format!(
                    "coding agent {agent:?} is not available: `{}` is not installed or not on PATH",
                    command.program
                ),
            )
        })?;
        Ok(AgentRequest {
            prompt: prompt.to_owned(),
            agent: agent.to_owned(),
            cwd,
            command,
            program,
            limits: toolbox.config().limits.clone(),
        })
    }
}

/// The built-in Claude Code command.
pub fn default_claude() -> AgentCommand {
    AgentCommand {
        program: "claude".into(),
        args: ["-p", "--output-format", "stream-json", "--verbose", "--", PROMPT_PLACEHOLDER]
            .map(String::from)
            .to_vec(),
        format: "stream-json".into(),
    }
}

/// The command for `name`: `config.agents` first, then the built-in `claude`.
pub(crate) fn agent_command(config: &Config, name: &str) -> Result<AgentCommand, ToolError> {
    if let Some(command) = config.agents.get(name) {
        if !matches!(command.format.as_str(), "stream-json" | "text") {
            return Err(ToolError::new(
                ErrorCode::Unavailable,
                format!("agent {name:?} has output format {:?}; use \"stream-json\" or \"text\"", command.format),
            ));
        }
        return Ok(command.clone());
    }
    if name == DEFAULT_AGENT {
        return Ok(default_claude());
    }
    let mut known: Vec<&str> = config.agents.keys().map(String::as_str).collect();
    if !known.contains(&DEFAULT_AGENT) {
        known.push(DEFAULT_AGENT);
    }
    Err(ToolError::new(
        ErrorCode::InvalidArgs,
        format!("field `agent`: no coding agent named {name:?} (known: {})", known.join(", ")),
    ))
}

/// Refuses a prompt that the agent would read as an option: one starting with `-`, for a command
/// whose `{prompt}` argument does not come after a `--`.
pub(crate) fn check_prompt_is_not_an_option(name: &str, command: &AgentCommand, prompt: &str) -> Result<(), ToolError> {
    let exposed = command.args.iter().take_while(|arg| arg.as_str() != "--").any(|arg| arg == PROMPT_PLACEHOLDER);
    if exposed && prompt.starts_with('-') {
        return Err(ToolError::new(
            ErrorCode::InvalidArgs,
            format!(
                "field `prompt` starts with \"-\" and coding agent {name:?} has no \"--\" before {PROMPT_PLACEHOLDER} \
                 in its args, so the agent would take the prompt for an option; rephrase the prompt, or add \"--\" \
                 before {PROMPT_PLACEHOLDER} in config.toml"
            ),
        ));
    }
    Ok(())
}

/// Finds `program` the way a shell would, on `path` only. Empty `PATH` entries (the current
/// directory) are skipped: a workspace file must never be run by accident.
pub(crate) fn find_program(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let candidate = PathBuf::from(program);
        return executable(&candidate).then_some(candidate);
    }
    if program.is_empty() {
        return None;
    }
    std::env::split_paths(path?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

/// Starts the agent in its own process group, the prompt in place of [`PROMPT_PLACEHOLDER`].
fn spawn(request: &AgentRequest, env: &[(OsString, OsString)]) -> Result<Child, ToolError> {
    let args = request.command.args.iter().map(|arg| arg.replace(PROMPT_PLACEHOLDER, &request.prompt));
    let limits = ulimit_lines(&request.limits);
    let mut command = if limits.is_empty() {
        Command::new(&request.program)
    } else {
        // The shell lowers its own limits, then becomes the agent: program and arguments travel
        // as `$0` and `$@`, never as shell text.
        let mut shell = Command::new(SHELL);
        shell.arg("-c").arg(format!("{limits}exec \"$0\" \"$@\"")).arg(&request.program);
        shell
    };
    command
        .args(args)
        .current_dir(&request.cwd)
        .env_clear()
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| {
            let code =
                if err.kind() == std::io::ErrorKind::NotFound { ErrorCode::Unavailable } else { ErrorCode::Internal };
            ToolError::new(code, format!("could not start {}: {err}", request.command.program))
        })
}

/// Runs the agent and answers `{agent, text, exit_code}`.
pub(crate) async fn run(
    request: AgentRequest,
    env: Arc<[(OsString, OsString)]>,
    progress: Option<mpsc::Sender<String>>,
    cancel: CancellationToken,
) -> Result<Value, ToolError> {
    let (mut run, stderr) = Running::start(&request, &env, progress)?;
    if let Err(stopped) = supervise(run.pump(DRAIN_GRACE), &cancel, CODING_AGENT_TIMEOUT).await {
        return Err(run.stop(stopped).await);
    }
    let Running { guard, status, mut output, answer, stream_json, .. } = run;
    guard.disarm();
    let status = status
        .unwrap_or_else(|| Err(std::io::Error::other("no exit status")))
        .map_err(|err| ToolError::new(ErrorCode::Internal, format!("could not wait for the coding agent: {err}")))?;
    let stderr = collect_stderr(stderr).await;
    output.flush_progress();

    let exit_code = exit_code(&status);
    let mut text = if stream_json { answer.text() } else { output.text() };
    if text.trim().is_empty() && exit_code != 0 {
        text = suffix(String::from_utf8_lossy(&stderr).trim(), STDERR_KEEP).to_owned();
    }
    let mut result = json!({ "agent": request.agent, "text": text, "exit_code": exit_code });
    if answer.is_error {
        result["is_error"] = Value::Bool(true);
    }
    Ok(result)
}

/// The task reading (and capping) the agent's stderr.
type StderrTask = JoinHandle<Vec<u8>>;

/// What the agent wrote on stderr, if it was all read within [`DRAIN_GRACE`] of its exit.
async fn collect_stderr(stderr: Option<StderrTask>) -> Vec<u8> {
    let Some(mut task) = stderr else { return Vec::new() };
    match tokio::time::timeout(DRAIN_GRACE, &mut task).await {
        Ok(joined) => joined.unwrap_or_default(),
        Err(_) => {
            task.abort();
            Vec::new()
        }
    }
}

/// A started agent and what it said so far.
struct Running {
    child: Child,
    guard: GroupGuard,
    /// `None` once the output ended.
    stdout: Option<LineReader<BufReader<ChildStdout>>>,
    /// Set once the agent has exited.
    status: Option<std::io::Result<std::process::ExitStatus>>,
    output: Output,
    answer: Answer,
    stripper: AnsiStripper,
    stream_json: bool,
}

impl Running {
    /// Starts the agent; its stderr is read (and capped) on a task of its own.
    fn start(
        request: &AgentRequest,
        env: &[(OsString, OsString)],
        progress: Option<mpsc::Sender<String>>,
    ) -> Result<(Self, Option<StderrTask>), ToolError> {
        let mut child = spawn(request, env)?;
        let guard = GroupGuard(child.id());
        let stdout = child.stdout.take().map(|stdout| LineReader::new(BufReader::new(stdout)));
        let stderr = child.stderr.take().map(|stderr| tokio::spawn(read_capped(stderr, STDERR_KEEP)));
        let running = Running {
            child,
            guard,
            stdout,
            status: None,
            output: Output::new(progress),
            answer: Answer::default(),
            stripper: AnsiStripper::new(),
            stream_json: request.command.format == "stream-json",
        };
        Ok((running, stderr))
    }

    /// Kills what is left of a cancelled or timed-out agent and words the error.
    async fn stop(mut self, stopped: Stop) -> ToolError {
        self.guard.kill();
        if self.status.is_some() || tokio::time::timeout(KILL_GRACE, self.child.wait()).await.is_ok() {
            self.guard.disarm();
        }
        let message = match stopped {
            Stop::TimedOut => {
                format!("the coding agent ran for {} minutes and was stopped", CODING_AGENT_TIMEOUT.as_secs() / 60)
            }
            Stop::Cancelled => "the coding agent was cancelled and stopped".to_owned(),
        };
        ToolError::new(stopped.code(), format!("{message}{}", last_output(&self.output)))
    }

    /// Reads the agent's output until it exited and its output ended. After the exit, reading
    /// stops early only once `grace` has passed and a look found nothing left to read (see
    /// [`drain_done`]), so something that escaped its process group and holds the pipe open
    /// cannot keep the call, and a reader that runs late still reads the agent's last words.
    async fn pump(&mut self, grace: Duration) {
        let pid = self.child.id();
        let exit_watch = async move {
            if let Some(pid) = pid {
                exited(pid).await;
            }
        };
        tokio::pin!(exit_watch);
        let look = tokio::time::sleep(Duration::MAX);
        tokio::pin!(look);
        let mut exited_at = None;
        while self.status.is_none() || self.stdout.is_some() {
            tokio::select! {
                biased;
                () = &mut exit_watch, if self.status.is_none() => {
                    // The agent is gone; so is anything it left running in its group, killed
                    // while the agent is still unreaped and its pid (the group's id) cannot be
                    // reused. Then it is reaped.
                    self.guard.kill();
                    self.status = Some(self.child.wait().await);
                    let now = Instant::now();
                    exited_at = Some(now);
                    look.as_mut().reset(now + grace);
                }
                () = &mut look, if exited_at.is_some() => {
                    let since_exit = exited_at.map_or(Duration::ZERO, |at| at.elapsed());
                    if drain_done(false, !self.has_unread_output(), since_exit, grace) {
                        return;
                    }
                    look.as_mut().reset(Instant::now() + DRAIN_RECHECK);
                }
                next = next_line(&mut self.stdout) => match next {
                    Some(line) => self.take_line(&line),
                    None => self.stdout = None,
                },
            }
        }
    }

    /// Whether output is buffered here or waiting in the pipe.
    fn has_unread_output(&self) -> bool {
        self.stdout.as_ref().is_some_and(|reader| {
            !reader.reader.buffer().is_empty() || output_waiting(reader.reader.get_ref().as_raw_fd())
        })
    }

    fn take_line(&mut self, line: &[u8]) {
        if self.stream_json {
            self.answer.stream_json_line(line, &mut self.output);
        } else {
            self.output.push(&self.stripper.feed(line));
            self.output.push("\n");
        }
    }
}

/// The next complete line of the agent's output; pending forever once there is none, so a
/// `select!` arm simply goes quiet.
async fn next_line<R: AsyncBufRead + Unpin>(reader: &mut Option<LineReader<R>>) -> Option<Vec<u8>> {
    match reader {
        Some(reader) => match reader.next().await {
            Ok(line) => line,
            Err(err) => {
                tracing::debug!(%err, "coding agent output ended");
                None
            }
        },
        None => std::future::pending().await,
    }
}

/// What a stream-json run has said so far.
#[derive(Default)]
struct Answer {
    result: Option<String>,
    last_text: String,
    is_error: bool,
}

impl Answer {
    fn stream_json_line(&mut self, line: &[u8], output: &mut Output) {
        let Ok(value) = serde_json::from_slice::<Value>(line) else { return };
        match value.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let Some(items) = value.pointer("/message/content").and_then(Value::as_array) else { return };
                for item in items {
                    if item.get("type").and_then(Value::as_str) != Some("text") {
                        continue;
                    }
                    let Some(text) = item.get("text").and_then(Value::as_str) else { continue };
                    output.push(text);
                    if !text.ends_with('\n') {
                        output.push("\n");
                    }
                    self.last_text = prefix(text, OUTPUT_CAP).to_owned();
                }
            }
            Some("result") => {
                self.result =
                    value.get("result").and_then(Value::as_str).map(|text| prefix(text, OUTPUT_CAP).to_owned());
                self.is_error = value.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            }
            _ => {}
        }
    }

    fn text(&self) -> String {
        self.result.clone().unwrap_or_else(|| self.last_text.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    #[tokio::test]
    async fn a_late_reader_still_reads_what_the_agent_wrote_before_it_exited() {
        let request = AgentRequest {
            prompt: "printf 'first\\nlast words\\n'".into(),
            agent: "sh".into(),
            cwd: std::env::temp_dir(),
            command: AgentCommand {
                program: SHELL.into(),
                args: vec!["-c".into(), PROMPT_PLACEHOLDER.into()],
                format: "text".into(),
            },
            program: SHELL.into(),
            limits: ProcessLimits::default(),
        };
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let (mut run, _stderr) = Running::start(&request, &env, None).unwrap();
        // The agent exits with everything it wrote still unread, before the runtime ever looked
        // at its pipe (this thread is the runtime's only one and does not yield). It is reaped
        // here, so the reader's own wait answers at once.
        while run.child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let grace = Duration::from_millis(20);
        {
            let pump = run.pump(grace);
            tokio::pin!(pump);
            // The reader notices the exit and finds the pipe not known to be ready yet...
            let first = std::future::poll_fn(|cx| std::task::Poll::Ready(pump.as_mut().poll(cx))).await;
            assert!(first.is_pending());
            // ...and gets to run again only well after the grace: the output and the end of the
            // grace are then both ready at once.
            std::thread::sleep(grace * 5);
            pump.await;
        }
        assert_eq!(run.output.text(), "first\nlast words\n");
        assert!(run.status.unwrap().unwrap().success());
    }

    #[test]
    fn stream_json_gives_progress_text_and_the_result() {
        let mut answer = Answer::default();
        let (tx, mut rx) = mpsc::channel(8);
        let mut output = Output::new(Some(tx));
        for line in [
            r#"{"type":"system","subtype":"init","session_id":"s"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Looking."},{"type":"tool_use","name":"Bash","input":{}}]}}"#,
            r#"not json"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"All done."}"#,
        ] {
            answer.stream_json_line(line.as_bytes(), &mut output);
        }
        assert_eq!(rx.try_recv().unwrap(), "Looking.");
        assert_eq!(rx.try_recv().unwrap(), "\n");
        assert_eq!(answer.text(), "All done.");
        assert!(!answer.is_error);
    }

    #[test]
    fn programs_are_found_on_the_given_path_only() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("agent"), "#!/bin/sh\n").unwrap();
        std::fs::write(bin.join("plain"), "not executable").unwrap();
        std::fs::set_permissions(bin.join("agent"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([Path::new("relative"), &bin]).unwrap();
        assert_eq!(find_program("agent", Some(&path)), Some(bin.join("agent")));
        assert_eq!(find_program("plain", Some(&path)), None);
        assert_eq!(find_program("agent", None), None);
        assert_eq!(find_program("", Some(&path)), None);
        let absolute = bin.join("agent");
        assert_eq!(find_program(absolute.to_str().unwrap(), None), Some(absolute));
    }

    #[test]
    fn agents_come_from_config_then_the_default() {
        let mut config = Config::default();
        assert_eq!(agent_command(&config, "claude").unwrap(), default_claude());
        let err = agent_command(&config, "other").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgs);
        assert!(err.message.contains("known: claude"), "{err}");
        config.agents.insert(
            "other".into(),
            AgentCommand { program: "other".into(), args: vec!["{prompt}".into()], format: "text".into() },
        );
        assert_eq!(agent_command(&config, "other").unwrap().program, "other");
        config.agents.get_mut("other").unwrap().format = "xml".into();
        assert_eq!(agent_command(&config, "other").unwrap_err().code, ErrorCode::Unavailable);
    }
}
