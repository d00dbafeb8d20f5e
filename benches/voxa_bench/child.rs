//! A `voxa run --json` child process with its own home and workspace, and a `voxa relay` one, for
//! the sections that measure them as separate processes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A running agent; killed when dropped.
pub struct Agent {
    pub child: Child,
    pub port: u16,
    pub token: String,
    pub code: String,
    /// Address of the relay inside the process (`--embedded-relay`).
    pub embedded_relay: Option<String>,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// The agent's workspace (`--workspace`).
    pub fn workspace(&self) -> std::path::PathBuf {
        self._dir.path().join("ws")
    }

    /// The agent's home (`VOXA_HOME`).
    pub fn home(&self) -> std::path::PathBuf {
        self._dir.path().join("home")
    }
}

/// Starts `voxa <global> run --json --workspace W <run_args>` with `env` set, and returns once it
/// has printed every event named in `wait_for`.
pub fn start_agent(global: &[&str], run_args: &[&str], env: &[(&str, &str)], wait_for: &[&str]) -> Agent {
    start_agent_configured(None, global, run_args, env, wait_for)
}

/// [`start_agent`] with `config` as the home's `config.toml`.
pub fn start_agent_configured(
    config: Option<&str>,
    global: &[&str],
    run_args: &[&str],
    env: &[(&str, &str)],
    wait_for: &[&str],
) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    if let Some(config) = config {
        crate::hosted::harness::write_home_config(&dir.path().join("home"), config);
    }
    start_agent_in(dir, global, run_args, env, wait_for)
}

/// [`start_agent`] in `dir`, whose `home` may hold a home made already.
pub fn start_agent_in(
    dir: tempfile::TempDir,
    global: &[&str],
    run_args: &[&str],
    env: &[(&str, &str)],
    wait_for: &[&str],
) -> Agent {
    let home = dir.path().join("home");
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_voxa"))
        .args(global)
        .args(["run", "--json", "--workspace"])
        .arg(&workspace)
        .args(run_args)
        .envs(env.iter().copied())
        .env("VOXA_HOME", &home)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut port = 0;
    let mut embedded_relay = None;
    let mut waiting: Vec<&str> = wait_for.to_vec();
    while !waiting.is_empty() {
        let mut line = String::new();
        assert!(lines.read_line(&mut line).unwrap() > 0, "agent exited");
        let event: Value = serde_json::from_str(&line).unwrap();
        if event["event"] == "started" {
            port = event["port"].as_u64().unwrap() as u16;
        }
        if event["event"] == "embedded_relay" {
            embedded_relay = event["listen"].as_str().map(str::to_owned);
        }
        waiting.retain(|name| event["event"] != *name);
    }
    // Keep draining events so the agent never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.lines() {});
    let read = |name: &str| std::fs::read_to_string(home.join(name)).unwrap().trim().to_owned();
    Agent { child, port, token: read("auth_token"), code: read("relay_code"), embedded_relay, _dir: dir }
}

/// A running `voxa relay` on a loopback port, with a home of its own; killed when dropped.
pub struct Relay {
    pub child: Child,
    pub addr: SocketAddr,
    /// Its `relay_listening` event.
    pub listening: Value,
    _home: tempfile::TempDir,
}

impl Relay {
    /// Starts `voxa relay --listen 127.0.0.1:0 --json <args>` with `env` set, and returns once it
    /// listens.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Relay {
        let home = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_voxa"))
            .args(["relay", "--listen", "127.0.0.1:0", "--json"])
            .args(args)
            .envs(env.iter().copied())
            .env("VOXA_HOME", home.path().join("home"))
            .env_remove("VOXA_RELAY_TOKEN")
            .env_remove("VOXA_PROXY_TOKEN")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let listening: Value = serde_json::from_str(&line).unwrap();
        let addr = listening["listen"].as_str().unwrap_or_else(|| panic!("no address in {line}")).parse().unwrap();
        Relay { child, addr, listening, _home: home }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The session start of every client: answers the agent's challenge, checks its proof.
pub async fn say_hello(socket: &mut voxa::net::dial::ClientSocket, token: &str) {
    let token = voxa::secret::Secret::from_string(token.to_owned());
    tokio::time::timeout(std::time::Duration::from_secs(30), voxa::net::client::hello(socket, &token, "voxa-bench/1"))
        .await
        .expect("hello_ok in time")
        .expect("the agent accepts the hello and proves itself");
}
