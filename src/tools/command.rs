//! `run_command`: one shell command in a pseudo-terminal.
//!
//! Decisions:
//! - The command runs as `/bin/sh -c <command>` with the agent's environment: POSIX syntax the
//!   voice model knows, no login-profile side effects, the same on every machine. `TERM=dumb`,
//!   `PAGER=cat` and `GIT_PAGER=cat` keep programs from drawing progress bars or opening pagers.
//! - Nobody types into a voice-driven terminal: standard input is `/dev/null`, and one `^D` is
//!   queued on the terminal itself for programs that ask through `/dev/tty` (password prompts).
//!   A program that asks a question gets end-of-file and gives up instead of hanging until the
//!   timeout.
//! - The call ends when the shell exits. Whatever it left running in its session is killed then,
//!   as a terminal closing would: no process outlives its call.
//! - A timeout or cancel kills the whole session and answers the `timeout` / `cancelled` error;
//!   the message quotes the last ~2 KiB of output (everything before was streamed as progress).
//! - Output past the cap keeps its first and its last 128 KiB; `omitted_bytes` counts what was
//!   left out between, and a line in `output` says so where it was (see [`super::output`]).

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portable_pty::{Child, CommandBuilder, MasterPty, PtySize};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::args::{check_text, invalid, Args};
use super::output::{last_output, AnsiStripper, Output};
use super::Toolbox;
use crate::config::ProcessLimits;
use crate::process::{drain_done, has_exited, kill_tree, supervise, ulimit_lines, Stop, DRAIN_GRACE, KILL_GRACE};
use crate::protocol::{ErrorCode, ToolError, DEFAULT_COMMAND_TIMEOUT};

/// The shell every command runs in.
pub const SHELL: &str = "/bin/sh";
/// Longest `timeout_ms` accepted.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// Longest command line accepted (Linux refuses single arguments over 128 KiB anyway).
pub const MAX_COMMAND_LEN: usize = 64 << 10;
/// Size of the pseudo-terminal programs see.
const PTY_SIZE: PtySize = PtySize { rows: 40, cols: 120, pixel_width: 0, pixel_height: 0 };
/// How often the reader looks up from the terminal to check for exit or a kill request.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// End-of-transmission: end-of-file for a terminal's reader in canonical mode.
const EOT: u8 = 0x04;

/// A validated `run_command` call.
#[derive(Debug)]
pub(crate) struct CommandRequest {
    pub command: String,
    pub cwd: PathBuf,
    pub timeout: Duration,
    /// Resource limits the shell sets on itself before the command runs.
    pub limits: ProcessLimits,
}

impl CommandRequest {
    /// The checked command, directory and timeout of a `run_command` call.
    pub(crate) fn parse(args: &Args<'_>, toolbox: &Toolbox) -> Result<Self, ToolError> {
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
        let cwd = toolbox.directory(args.str("cwd"))?;
        Ok(CommandRequest { command: command.to_owned(), cwd, timeout, limits: toolbox.config().limits.clone() })
    }
}

/// Runs the command and answers `{exit_code, output, truncated, timed_out, duration_ms}`.
pub(crate) async fn run_command(
    request: CommandRequest,
    env: Arc<[(OsString, OsString)]>,
    progress: Option<mpsc::Sender<String>>,
    cancel: CancellationToken,
) -> Result<Value, ToolError> {
    let started = Instant::now();
    let CommandRequest { command, cwd, timeout, limits } = request;
    let kill = Arc::new(AtomicBool::new(false));
    // Whatever happens to this future from here on (even being dropped), the session is killed.
    let _kill_on_drop = KillOnDrop(kill.clone());
    let mut finished = {
        let kill = kill.clone();
        // Opening the terminal and forking are blocking too: all of it runs off the async threads.
        tokio::task::spawn_blocking(move || {
            let script = format!("{}exec </dev/null\n{command}", ulimit_lines(&limits));
            Pump::start(&script, &cwd, &env, Output::new(progress), kill).map(Pump::run)
        })
    };

    let stopped = match supervise(&mut finished, &cancel, timeout).await {
        Ok(joined) => return answer(joined, started),
        Err(stopped) => stopped,
    };
    kill.store(true, Ordering::Release);
    let outcome = flatten(finished.await)?;
    let message = match stopped {
        Stop::TimedOut => format!("command timed out after {} ms and was stopped", timeout.as_millis()),
        Stop::Cancelled => "command was cancelled and stopped".to_owned(),
    };
    Err(ToolError::new(stopped.code(), format!("{message}{}", last_output(&outcome.output))))
}

type Joined = Result<Result<PumpOutcome, ToolError>, tokio::task::JoinError>;

fn flatten(joined: Joined) -> Result<PumpOutcome, ToolError> {
    joined.map_err(|err| internal(format!("the command reader failed: {err}")))?
}

fn answer(joined: Joined, started: Instant) -> Result<Value, ToolError> {
    let outcome = flatten(joined)?;
    let Some(status) = outcome.status else {
        return Err(internal(format!("lost track of the command{}", last_output(&outcome.output))));
    };
    let (output, omitted) = outcome.output.into_text();
    let mut result = json!({
        "exit_code": status.exit_code(),
        "output": output,
        "truncated": omitted > 0,
        "omitted_bytes": omitted,
        // A command that runs out of time answers the `timeout` error instead of a result.
        "timed_out": false,
        "duration_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    });
    if let Some(signal) = status.signal() {
        result["signal"] = Value::String(signal.to_owned());
    }
    Ok(result)
}

fn internal(message: String) -> ToolError {
    ToolError::new(ErrorCode::Internal, message)
}

/// Sets the kill flag when dropped.
struct KillOnDrop(Arc<AtomicBool>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What the reader thread hands back.
struct PumpOutcome {
    /// `None` only if the shell could not be reaped even after SIGKILL.
    status: Option<portable_pty::ExitStatus>,
    output: Output,
}

/// The blocking side: owns the terminal and the shell, reads output, reaps the shell, kills on
/// request. It always ends: the shell either exits or is killed, and after that only a bounded
/// drain remains, however many escaped processes still hold the terminal open.
struct Pump {
    master: Box<dyn MasterPty + Send>,
    reader: Box<dyn Read + Send>,
    /// Kept open so stdin stays at the queued end-of-file instead of hanging up.
    writer: Box<dyn Write + Send>,
    child: Box<dyn Child + Send + Sync>,
    pid: Option<u32>,
    kill: Arc<AtomicBool>,
    output: Output,
}

impl Pump {
    fn start(
        script: &str,
        cwd: &Path,
        env: &[(OsString, OsString)],
        output: Output,
        kill: Arc<AtomicBool>,
    ) -> Result<Self, ToolError> {
        let pair = portable_pty::native_pty_system()
            .openpty(PTY_SIZE)
            .map_err(|err| internal(format!("could not open a terminal: {err:#}")))?;
        let mut builder = CommandBuilder::new(SHELL);
        // The limits and the redirection run before the command, each on its own line, so the
        // command's own syntax is untouched.
        builder.args(["-c", script]);
        builder.cwd(cwd);
        builder.env_clear();
        for (key, value) in env {
            builder.env(key, value);
        }
        for (key, value) in [("TERM", "dumb"), ("PAGER", "cat"), ("GIT_PAGER", "cat")] {
            builder.env(key, value);
        }
        // Both ends of the reading side exist before the shell does: nothing can fail between
        // starting it and owning it.
        let terminal_error = |err: anyhow::Error| internal(format!("could not set up the terminal: {err:#}"));
        let reader = pair.master.try_clone_reader().map_err(terminal_error)?;
        let writer = pair.master.take_writer().map_err(terminal_error)?;
        let child =
            pair.slave.spawn_command(builder).map_err(|err| internal(format!("could not start {SHELL}: {err:#}")))?;
        // Only the shell holds the terminal's slave side now, so its exit shows as end-of-file.
        drop(pair.slave);
        let pid = child.process_id();
        let mut pump = Pump { master: pair.master, reader, writer, child, pid, kill, output };
        if let Err(err) = pump.writer.write_all(&[EOT]) {
            tracing::debug!(%err, "could not queue end-of-file on the command's input");
        }
        Ok(pump)
    }

    fn run(mut self) -> PumpOutcome {
        let mut stripper = AnsiStripper::new();
        let mut buf = vec![0u8; 16 << 10];
        let mut state = ReadState::default();
        let fd = self.master.as_raw_fd();
        loop {
            if state.killed_at.is_none() && self.kill.load(Ordering::Acquire) {
                self.kill_all();
                state.killed_at = Some(Instant::now());
            }
            match (state.eof, fd) {
                (false, Some(fd)) => self.read_waiting(fd, &mut state, &mut stripper, &mut buf),
                _ => state.wait_for_exit(),
            }
            self.output.flush_progress();
            if state.status.is_none() && !self.note_exit(&mut state) {
                break;
            }
            if state.finished(self.pid) {
                break;
            }
        }
        self.output.push(&stripper.finish());
        self.output.flush_progress();
        PumpOutcome { status: state.status, output: self.output }
    }

    /// Reads what the terminal has waiting, after at most one [`POLL_INTERVAL`].
    fn read_waiting(&mut self, fd: RawFd, state: &mut ReadState, stripper: &mut AnsiStripper, buf: &mut [u8]) {
        let mut poll = [filedescriptor::pollfd { fd, events: filedescriptor::POLLIN, revents: 0 }];
        let after_exit = state.exited_at.is_some();
        match filedescriptor::poll(&mut poll, Some(POLL_INTERVAL)) {
            Ok(0) => state.quiet_since_exit |= after_exit,
            Ok(_) => match self.reader.read(buf) {
                Ok(0) => state.eof = true,
                Ok(n) => self.output.push(&stripper.feed(&buf[..n])),
                Err(err) if matches!(err.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock) => {}
                Err(err) => {
                    tracing::debug!(%err, "command terminal read failed");
                    state.eof = true;
                }
            },
            Err(err) => {
                tracing::warn!(%err, "could not poll the command terminal");
                state.eof = true;
            }
        }
    }

    /// Notes the shell's exit status once it has one. False when the shell cannot be waited for
    /// (everything is killed then, and reading stops).
    fn note_exit(&mut self, state: &mut ReadState) -> bool {
        match self.reap() {
            Ok(Some(exit)) => {
                state.status = Some(exit);
                // The drain starts once the (possibly slow) kill in `reap` is done.
                state.exited_at = Some(Instant::now());
                true
            }
            Ok(None) => true,
            Err(err) => {
                tracing::warn!(%err, "could not wait for the command");
                self.kill_all();
                false
            }
        }
    }

    /// The shell's exit status once it has exited. Whatever it left behind in its session is
    /// killed first, while the shell is a zombie that still holds its pid: after reaping, that pid
    /// (and the group and session named after it) could belong to someone else.
    fn reap(&mut self) -> std::io::Result<Option<portable_pty::ExitStatus>> {
        if let Some(pid) = self.pid {
            if !has_exited(pid)? {
                return Ok(None);
            }
            self.kill_all();
        }
        self.child.try_wait()
    }

    fn kill_all(&self) {
        if let Some(pid) = self.pid {
            kill_tree(pid, true);
        }
    }
}

/// Where the reading of one command stands.
struct ReadState {
    eof: bool,
    status: Option<portable_pty::ExitStatus>,
    exited_at: Option<Instant>,
    /// Whether a look at the terminal begun after the exit found nothing waiting.
    quiet_since_exit: bool,
    killed_at: Option<Instant>,
    /// Once the terminal is closed, the shell's exit status follows within moments: look again
    /// soon, then less often, instead of a full poll interval every time.
    recheck: Duration,
}

impl Default for ReadState {
    fn default() -> Self {
        ReadState {
            eof: false,
            status: None,
            exited_at: None,
            quiet_since_exit: false,
            killed_at: None,
            recheck: Duration::from_micros(100),
        }
    }
}

impl ReadState {
    /// With the terminal closed, waits a moment before the exit status is looked for again.
    fn wait_for_exit(&mut self) {
        std::thread::sleep(self.recheck);
        self.recheck = (self.recheck * 2).min(POLL_INTERVAL);
    }

    /// Whether reading is over: the drain after the exit is done, or a killed shell is given up on.
    fn finished(&self, pid: Option<u32>) -> bool {
        if let Some(exited_at) = self.exited_at {
            return drain_done(self.eof, self.quiet_since_exit, exited_at.elapsed(), DRAIN_GRACE);
        }
        let given_up = self.killed_at.is_some_and(|at| at.elapsed() >= KILL_GRACE);
        if given_up {
            tracing::warn!(?pid, "command did not die after SIGKILL; giving up on it");
        }
        given_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Arc<[(OsString, OsString)]> {
        std::env::vars_os().collect::<Vec<_>>().into()
    }

    fn request(command: &str, timeout: Duration) -> CommandRequest {
        CommandRequest { command: command.into(), cwd: std::env::temp_dir(), timeout, limits: ProcessLimits::default() }
    }

    #[tokio::test]
    async fn output_and_exit_code_come_back_clean() {
        let result = run_command(
            request("printf '\\033[1;32mgreen\\033[0m\\n'; echo \"$TERM\"; exit 3", Duration::from_secs(30)),
            env(),
            None,
            CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(result["output"], "green\ndumb\n");
        assert_eq!(result["exit_code"], 3);
        assert_eq!(result["truncated"], false);
        assert_eq!(result["omitted_bytes"], 0);
    }

    #[tokio::test]
    async fn long_output_keeps_its_head_and_its_tail_and_counts_the_middle() {
        // 600,000 numbered lines' worth: far past the cap, the last line is the one that matters.
        let command = "seq 1 100000; echo the-error-at-the-end";
        let result = run_command(request(command, Duration::from_secs(60)), env(), None, CancellationToken::new())
            .await
            .unwrap();
        let output = result["output"].as_str().unwrap();
        let omitted = result["omitted_bytes"].as_u64().unwrap() as usize;
        assert_eq!(result["truncated"], true);
        assert!(output.starts_with("1\n2\n3\n"), "{}", &output[..20]);
        assert!(output.ends_with("99999\n100000\nthe-error-at-the-end\n"), "{}", &output[output.len() - 40..]);
        assert!(output.contains(&super::super::output::omitted_line(omitted)));
        let printed: usize = (1..=100000).map(|n: usize| n.to_string().len() + 1).sum::<usize>() + 21;
        // The marker line, and a line break before it when the head ended mid-line.
        let kept = output.len() - super::super::output::omitted_line(omitted).len();
        assert!(kept <= crate::protocol::OUTPUT_CAP + 1, "{kept}");
        assert!(
            [printed, printed + 1].contains(&(kept + omitted)),
            "every byte is kept or counted: {kept} + {omitted} vs {printed}"
        );
    }

    #[tokio::test]
    async fn questions_get_end_of_file_instead_of_hanging() {
        let result = run_command(
            request(
                "cat; read answer || echo no-answer; read secret </dev/tty || echo tty-eof; [ -t 1 ] && echo tty-out",
                Duration::from_secs(30),
            ),
            env(),
            None,
            CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(result["output"], "no-answer\ntty-eof\ntty-out\n", "{result}");
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_command() {
        let (tx, mut rx) = mpsc::channel(16);
        let call = tokio::spawn(run_command(
            request("echo pid=$$; exec sleep 300", Duration::from_secs(300)),
            env(),
            Some(tx),
            CancellationToken::new(),
        ));
        let mut seen = String::new();
        let pid = loop {
            seen.push_str(&rx.recv().await.unwrap());
            if let Some(pid) = seen.split("pid=").nth(1).and_then(|rest| rest.split_whitespace().next()) {
                break pid.parse::<u32>().unwrap();
            }
        };
        call.abort();
        let _ = call.await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::process::is_running(pid) {
            assert!(Instant::now() < deadline, "pid {pid} still running after the call was dropped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
