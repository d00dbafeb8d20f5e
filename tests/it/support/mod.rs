//! The helpers the test files share, one module per concern; a test file imports from here and
//! never from another test file (`layers::no_test_file_names_another`). This file itself: the
//! `voxa` binary, and a `voxa run` or `voxa relay` child process whose JSON events are read with a
//! deadline.
#![allow(dead_code)]

pub mod agents;
pub mod audit;
pub mod browser;
pub mod fake_gemini;
pub mod fake_model;
pub mod harness;
pub mod laptop;
pub mod live;
pub mod logs;
pub mod mitm;
pub mod phone;
pub mod pictures;
pub mod profile;
pub mod push;
pub mod relay;
pub mod run;
pub mod scene;
pub mod sealed;
pub mod terminal;
pub mod xvfb;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::harness::STEP;

/// Path of the built `voxa` binary.
pub fn voxa_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_voxa"))
}

/// Runs `voxa` with `VOXA_HOME=home` and no inherited voxa variables.
pub fn voxa(home: &Path, args: &[&str]) -> Output {
    voxa_cmd(home).args(args).output().expect("voxa binary runs")
}

/// A `voxa` command with a clean environment for the given home.
pub fn voxa_cmd(home: &Path) -> Command {
    voxa_cmd_via(home, &[])
}

/// Like [`voxa_cmd`], started through `wrapper` (a program and its arguments, such as `strace`).
pub fn voxa_cmd_via(home: &Path, wrapper: &[&str]) -> Command {
    let cmd = match wrapper {
        [] => Command::new(voxa_bin()),
        [program, args @ ..] => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(voxa_bin());
            cmd
        }
    };
    clean_env(cmd, home)
}

/// Like [`voxa_cmd`], running a copy of the binary at `program`.
pub fn voxa_cmd_of(program: &Path, home: &Path) -> Command {
    clean_env(Command::new(program), home)
}

fn clean_env(mut cmd: Command, home: &Path) -> Command {
    for var in ["VOXA_RELAY", "VOXA_RELAY_TOKEN", "GEMINI_API_KEY", "VOXA_GEMINI_URL", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    cmd.env("VOXA_HOME", home);
    cmd
}

/// Raises the soft open-file limit to the hard limit and fails the test if it stays below `needed`.
pub fn raise_open_file_limit(needed: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if limit.current.is_some_and(|current| current < want) {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: Some(want), maximum: limit.maximum });
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(now >= needed, "this test needs {needed} open files; the limit is {now}");
}

/// Waits for a child with a deadline; kills it if the deadline passes.
pub fn wait_with_deadline(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not exit within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `voxa run --json` or `voxa relay --json` as a child process: its stdout events on a channel,
/// all output collected.
pub struct RunningVoxa {
    pub child: Child,
    events: mpsc::Receiver<Value>,
    /// Events received while waiting for another.
    pending: std::collections::VecDeque<Value>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// The loopback port (`run`) or the listening port (`relay`).
    pub port: u16,
}

impl RunningVoxa {
    /// Starts `voxa run` and waits for its `started` event.
    pub fn start(cmd: Command) -> RunningVoxa {
        let mut running = Self::spawn(cmd);
        let started = running.wait_event("started");
        running.port = started["port"].as_u64().unwrap() as u16;
        running
    }

    /// Starts `voxa relay --json --listen 127.0.0.1:<port>` (0: any) and waits until it listens.
    pub fn relay(port: u16, log: &str) -> RunningVoxa {
        let mut cmd = Command::new(voxa_bin());
        cmd.env("RUST_LOG", log).env_remove("VOXA_RELAY_TOKEN");
        cmd.args(["relay", "--json", "--listen", &format!("127.0.0.1:{port}")]);
        let mut running = Self::spawn(cmd);
        let listening = running.wait_event("relay_listening");
        let addr: std::net::SocketAddr = listening["listen"].as_str().unwrap().parse().unwrap();
        running.port = addr.port();
        running
    }

    pub fn spawn(mut cmd: Command) -> RunningVoxa {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null()).spawn().unwrap();
        let (tx, events) = mpsc::channel();
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (out, all_out) = (child.stdout.take().unwrap(), stdout.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                all_out.lock().unwrap().push_str(&format!("{line}\n"));
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(value);
                }
            }
        });
        let (mut err, all_err) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                all_err.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        RunningVoxa { child, events, pending: Default::default(), stdout, stderr, port: 0 }
    }

    pub fn relay_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The earliest event named `name` not returned yet, waiting up to [`STEP`] for it.
    pub fn wait_event(&mut self, name: &str) -> Value {
        self.wait_event_within(&[name], STEP)
    }

    /// The earliest event named one of `names` not returned yet, waiting up to `limit` for it.
    pub fn wait_event_within(&mut self, names: &[&str], limit: Duration) -> Value {
        let named = |event: &Value| names.iter().any(|name| event["event"] == *name);
        let name = names.join(" or ");
        if let Some(at) = self.pending.iter().position(named) {
            return self.pending.remove(at).unwrap();
        }
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(event) if named(&event) => return event,
                Ok(event) => self.pending.push_back(event),
                Err(_) => panic!("no {name} event from voxa; stderr:\n{}", tail(&self.stderr.lock().unwrap(), 2000)),
            }
        }
    }

    /// Every event received and not returned yet, without waiting.
    pub fn events_so_far(&mut self) -> Vec<Value> {
        let mut events: Vec<Value> = self.pending.drain(..).collect();
        events.extend(self.events.try_iter());
        events
    }

    pub fn signal(&self, signal: rustix::process::Signal) {
        rustix::process::kill_process(rustix::process::Pid::from_child(&self.child), signal).unwrap();
    }

    /// SIGTERM, then the exit status; the process must stop cleanly. Returns stdout and stderr.
    pub fn stop(mut self) -> (String, String) {
        self.signal(rustix::process::Signal::TERM);
        let status = wait_with_deadline(&mut self.child, STEP);
        assert!(status.success(), "voxa exited with {status} after SIGTERM");
        self.drain()
    }

    /// SIGKILL: a crash. Returns once the process is gone.
    pub fn crash(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What the process printed on stdout so far, while it runs.
    pub fn stdout_so_far(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Output collected so far, once the reader threads saw the end of both pipes.
    pub fn drain(&self) -> (String, String) {
        let deadline = Instant::now() + STEP;
        while Arc::strong_count(&self.stdout) + Arc::strong_count(&self.stderr) > 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let stdout = self.stdout.lock().unwrap().clone();
        let stderr = self.stderr.lock().unwrap().clone();
        (stdout, stderr)
    }
}

impl Drop for RunningVoxa {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn tail(text: &str, n: usize) -> &str {
    let start = text.len().saturating_sub(n);
    let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
    &text[start..]
}

/// Where `program` is not installed: outside CI a note and `false` (the test skips), under CI a
/// failure, since `.ci/run` installs it.
pub fn installed(program: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    if !found {
        let advice =
            format!("{program} is not installed: install {package} (apt-get install {package}) to run this test");
        assert!(std::env::var_os("CI").is_none(), "{advice}");
        eprintln!("skipped: {advice}");
    }
    found
}
