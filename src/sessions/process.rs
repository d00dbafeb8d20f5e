//! A coding agent's process: started in its own process group under the tools' resource limits,
//! written to line by line (each write time-boxed), read line by line (each line bounded), and
//! ended — stdin closed first so the agent can save its session, the whole group killed after a
//! grace.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::adapter::Launch;
use crate::config::ProcessLimits;
use crate::process::{exit_code, exited, read_capped, ulimit_lines, GroupGuard, LineReader, DRAIN_GRACE, KILL_GRACE};
use crate::tools::SHELL;

/// Bytes of the agent's stderr kept to explain a failure.
const STDERR_KEEP: usize = 8 << 10;
/// Longest one write to the agent's stdin may take before the agent is taken for stuck.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// After stdin closed, how long the agent gets to exit by itself.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A running agent.
pub struct Process {
    child: Child,
    guard: Option<GroupGuard>,
    pid: Option<u32>,
    stdin: Option<ChildStdin>,
    stdout: Option<LineReader<BufReader<ChildStdout>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    /// When the process was seen to exit.
    exited_at: Option<Instant>,
    /// When stdin was closed to stop it.
    stopping_since: Option<Instant>,
}

/// How a process ended.
#[derive(Debug)]
pub struct Ended {
    pub exit_code: i32,
    /// The end of what it wrote on stderr.
    pub stderr: String,
}

impl Process {
    /// Starts `launch` in `cwd`, with `env` (plus the launch's own variables) and `limits`.
    pub fn start(
        launch: &Launch,
        cwd: &Path,
        env: &[(OsString, OsString)],
        limits: &ProcessLimits,
    ) -> std::io::Result<Self> {
        let lines = ulimit_lines(limits);
        let mut command = if lines.is_empty() {
            Command::new(&launch.program)
        } else {
            // The shell lowers its own limits, then becomes the agent: program and arguments
            // travel as `$0` and `$@`, never as shell text.
            let mut shell = Command::new(SHELL);
            shell.arg("-c").arg(format!("{lines}exec \"$0\" \"$@\"")).arg(&launch.program);
            shell
        };
        let mut child = command
            .args(&launch.args)
            .current_dir(cwd)
            .env_clear()
            .envs(env.iter().map(|(key, value)| (key, value)))
            .envs(launch.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id();
        let stdout = child.stdout.take().map(|stdout| LineReader::new(BufReader::new(stdout)));
        let stderr = child.stderr.take().map(|stderr| tokio::spawn(read_capped(stderr, STDERR_KEEP)));
        let stdin = child.stdin.take();
        Ok(Process {
            child,
            guard: Some(GroupGuard(pid)),
            pid,
            stdin,
            stdout,
            stderr,
            exited_at: None,
            stopping_since: None,
        })
    }

    /// Writes lines to the agent; an error when it does not take them.
    pub async fn write(&mut self, lines: &[String]) -> std::io::Result<()> {
        let Some(stdin) = &mut self.stdin else { return Err(std::io::Error::other("the agent's input is closed")) };
        for line in lines {
            let mut bytes = line.clone().into_bytes();
            bytes.push(b'\n');
            match tokio::time::timeout(WRITE_TIMEOUT, async {
                stdin.write_all(&bytes).await?;
                stdin.flush().await
            })
            .await
            {
                Ok(result) => result?,
                Err(_) => return Err(std::io::Error::other("the agent stopped reading its input")),
            }
        }
        Ok(())
    }

    /// Closes stdin: the agent ends by itself, or is killed [`STOP_GRACE`] later.
    pub fn close_input(&mut self) {
        self.stdin = None;
        self.stopping_since.get_or_insert_with(Instant::now);
    }

    /// Kills the whole process group now.
    pub fn kill(&mut self) {
        if let Some(guard) = &self.guard {
            guard.kill();
        }
        self.stopping_since.get_or_insert_with(Instant::now);
    }

    /// What happens next: a line of output, or the process's end (then it is reaped).
    pub async fn next(&mut self) -> Step {
        loop {
            let pid = self.pid;
            let drain_until = self.exited_at.map(|at| at + DRAIN_GRACE);
            let kill_at = self.stopping_since.map(|since| since + STOP_GRACE);
            tokio::select! {
                biased;
                line = next_line(&mut self.stdout) => match line {
                    Some(line) => return Step::Line(line),
                    None => self.stdout = None,
                },
                () = async { if let Some(pid) = pid { exited(pid).await } }, if self.exited_at.is_none() => {
                    // Whatever it left in its group goes too, while its pid is still reserved.
                    if let Some(guard) = &self.guard {
                        guard.kill();
                    }
                    self.exited_at = Some(Instant::now());
                }
                () = sleep_until(drain_until), if self.exited_at.is_some() => self.stdout = None,
                () = sleep_until(kill_at), if self.exited_at.is_none() && kill_at.is_some() => {
                    if let Some(guard) = &self.guard {
                        guard.kill();
                    }
                    self.stopping_since = Some(Instant::now() + KILL_GRACE);
                }
            }
            if self.exited_at.is_some() && self.stdout.is_none() {
                return Step::Exited(self.reap().await);
            }
        }
    }

    async fn reap(&mut self) -> Ended {
        let status = tokio::time::timeout(KILL_GRACE, self.child.wait()).await;
        if let Ok(Ok(_)) = &status {
            if let Some(guard) = self.guard.take() {
                guard.disarm();
            }
        }
        let exit_code = match status {
            Ok(Ok(status)) => exit_code(&status),
            _ => -1,
        };
        let stderr = match self.stderr.take() {
            Some(mut task) => match tokio::time::timeout(DRAIN_GRACE, &mut task).await {
                Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).trim().to_owned(),
                Ok(Err(_)) => String::new(),
                Err(_) => {
                    task.abort();
                    String::new()
                }
            },
            None => String::new(),
        };
        Ended { exit_code, stderr }
    }
}

/// One step of a process.
pub enum Step {
    Line(Vec<u8>),
    Exited(Ended),
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn next_line(reader: &mut Option<LineReader<BufReader<ChildStdout>>>) -> Option<Vec<u8>> {
    match reader {
        Some(reader) => reader.next().await.ok().flatten(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(script: &str) -> Launch {
        Launch {
            program: SHELL.into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("GREETING".into(), "hi".into())],
        }
    }

    #[tokio::test]
    async fn lines_go_in_and_come_out_and_the_end_is_reported_with_stderr() {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let script = "read line; echo \"$GREETING $line\"; echo oops >&2; exit 3";
        let mut process = Process::start(&launch(script), Path::new("/"), &env, &ProcessLimits::default()).unwrap();
        process.write(&["there".into()]).await.unwrap();
        let Step::Line(line) = process.next().await else { panic!("no line") };
        assert_eq!(line, b"hi there");
        let Step::Exited(ended) = process.next().await else { panic!("no end") };
        assert_eq!((ended.exit_code, ended.stderr.as_str()), (3, "oops"));
    }

    #[tokio::test]
    async fn closing_input_ends_an_agent_and_one_that_ignores_it_is_killed() {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let mut polite = Process::start(&launch("cat"), Path::new("/"), &env, &ProcessLimits::default()).unwrap();
        polite.close_input();
        let Step::Exited(ended) = polite.next().await else { panic!("no end") };
        assert_eq!(ended.exit_code, 0);
        let mut stubborn = Process::start(
            &launch("trap '' TERM; exec 0<&-; sleep 60"),
            Path::new("/"),
            &env,
            &ProcessLimits::default(),
        )
        .unwrap();
        stubborn.close_input();
        let Step::Exited(ended) = stubborn.next().await else { panic!("no end") };
        assert_eq!(ended.exit_code, 128 + 9);
    }
}
