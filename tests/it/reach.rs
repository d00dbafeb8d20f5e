//! A laptop that stays awake while it works: the agent holds logind's sleep inhibitor while a
//! command runs or an approval waits, and closes it when idle. logind here is a test one on a
//! private `dbus-daemon`, written from logind's published interface
//! (`org.freedesktop.login1.Manager.Inhibit(what, who, why, mode) → h`), which records when the
//! descriptor it handed out is held and when its last copy is closed.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use crate::support::harness::*;
use voxa::agent::awake::{AwakeOptions, Inhibitor};
use voxa::net::dial::ClientSocket;

/// One `Inhibit` call the test logind answered.
#[derive(Clone, Debug)]
struct Inhibition {
    what: String,
    who: String,
    why: String,
    mode: String,
    /// The lock's last copy was closed.
    released: bool,
}

type Record = Arc<Mutex<Vec<Inhibition>>>;

struct Manager {
    record: Record,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    /// As logind does: the caller holds the returned descriptor; the lock ends when it is closed.
    async fn inhibit(
        &self,
        what: String,
        who: String,
        why: String,
        mode: String,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        let (reader, writer) = rustix::pipe::pipe().map_err(|err| zbus::fdo::Error::Failed(err.to_string()))?;
        let index = {
            let mut record = self.record.lock().unwrap();
            record.push(Inhibition { what, who, why, mode, released: false });
            record.len() - 1
        };
        let record = self.record.clone();
        tokio::spawn(async move {
            // End of file once every copy of the write end is closed.
            let mut reader = tokio::net::unix::pipe::Receiver::from_owned_fd(reader).unwrap();
            let mut byte = [0u8; 1];
            while reader.read(&mut byte).await.map(|n| n > 0).unwrap_or(false) {}
            record.lock().unwrap()[index].released = true;
        });
        Ok(zbus::zvariant::OwnedFd::from(writer))
    }
}

/// A private `dbus-daemon` with a test logind on it, both ended when dropped.
struct TestLogind {
    address: String,
    record: Record,
    daemon: Child,
    _connection: zbus::Connection,
    _dir: tempfile::TempDir,
}

impl TestLogind {
    async fn start() -> TestLogind {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("bus.conf");
        let socket = dir.path().join("bus");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon runs (Debian package dbus-daemon)");
        // It prints its address once it listens.
        let stdout = daemon.stdout.take().unwrap();
        let address = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
            line.trim().to_owned()
        })
        .await
        .unwrap();
        assert!(address.starts_with("unix:"), "dbus-daemon printed {address:?}");
        let record = Record::default();
        let connection = zbus::connection::Builder::address(address.as_str())
            .unwrap()
            .name("org.freedesktop.login1")
            .unwrap()
            .serve_at("/org/freedesktop/login1", Manager { record: record.clone() })
            .unwrap()
            .build()
            .await
            .expect("the test logind takes its name on the bus");
        TestLogind { address, record, daemon, _connection: connection, _dir: dir }
    }

    fn inhibitions(&self) -> Vec<Inhibition> {
        self.record.lock().unwrap().clone()
    }

    fn held(&self) -> usize {
        self.inhibitions().iter().filter(|i| !i.released).count()
    }
}

impl Drop for TestLogind {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

async fn awake_agent(inhibitor: Inhibitor, config: Option<&str>) -> TestAgent {
    TestAgent::start_with(None, |options| {
        options.awake = AwakeOptions { inhibitor, interval: Duration::from_millis(50), ..AwakeOptions::default() };
        if let Some(config) = config {
            options.config = toml::from_str(config).unwrap();
        }
    })
    .await
}

async fn status(client: &mut ClientSocket) -> Value {
    send(client, json!({"type":"status"})).await;
    recv_type(client, "status").await["awake"].clone()
}

/// A command that runs until the test creates `go` in the workspace.
fn waiting_command(id: &str) -> Value {
    json!({"type":"tool_call","id": id,"name":"run_command","args":{"command":"while [ ! -e go ]; do sleep 0.05; done; echo done"}})
}

#[tokio::test]
async fn the_laptop_stays_awake_while_a_command_runs_and_may_sleep_after() {
    let logind = TestLogind::start().await;
    let agent = awake_agent(Inhibitor::Bus(logind.address.clone()), None).await;
    let mut client = agent.local_client().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(logind.inhibitions().is_empty(), "an idle agent holds no inhibitor");
    assert_eq!(status(&mut client).await["held"], false);

    send(&mut client, waiting_command("w1")).await;
    eventually("the inhibitor held", || logind.held() == 1).await;
    let taken = &logind.inhibitions()[0];
    assert_eq!((taken.what.as_str(), taken.who.as_str(), taken.mode.as_str()), ("sleep", "voxa", "block"));
    assert_eq!(taken.why, "a command runs");
    let shown = status(&mut client).await;
    assert_eq!(shown["held"], true, "{shown}");
    assert_eq!(shown["how"], "logind");
    assert_eq!(shown["why"], "a command runs");
    assert!(shown["since"].as_u64().is_some(), "{shown}");
    // Held for as long as the command runs, taken once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((logind.held(), logind.inhibitions().len()), (1, 1));

    std::fs::write(agent.workspace.path().join("go"), b"").unwrap();
    assert_eq!(recv_result(&mut client, "w1").await["ok"], true);
    eventually("the inhibitor released", || logind.held() == 0).await;
    let shown = status(&mut client).await;
    assert_eq!(shown["held"], false, "{shown}");
    assert!(shown.get("why").is_none(), "{shown}");
    assert_eq!(logind.inhibitions().len(), 1);
    agent.agent.stop().await;
}

#[tokio::test]
async fn an_approval_that_waits_keeps_the_laptop_awake_and_stopping_lets_it_go() {
    let logind = TestLogind::start().await;
    let config = "[policy]\nask = [\"run_command\"]\n";
    let agent = awake_agent(Inhibitor::Bus(logind.address.clone()), Some(config)).await;
    let mut client = agent.local_client().await;
    send(&mut client, json!({"type":"tool_call","id":"a1","name":"run_command","args":{"command":"touch made"}})).await;
    eventually("the inhibitor held", || logind.held() == 1).await;
    assert!(logind.inhibitions()[0].why.contains("an approval waits"), "{:?}", logind.inhibitions());
    // The agent stops with the approval open: the lock goes with it.
    agent.agent.stop().await;
    eventually("the inhibitor released", || logind.held() == 0).await;
}

#[tokio::test]
async fn without_logind_the_agent_says_why_and_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = format!("unix:path={}", dir.path().join("no-bus").display());
    let agent = awake_agent(Inhibitor::Bus(nowhere), None).await;
    let mut client = agent.local_client().await;
    send(&mut client, waiting_command("n1")).await;
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown = status(&mut client).await;
        if shown.get("unavailable").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(shown["held"], false, "{shown}");
    assert!(shown["unavailable"].as_str().unwrap().contains("D-Bus"), "{shown}");
    std::fs::write(agent.workspace.path().join("go"), b"").unwrap();
    assert_eq!(recv_result(&mut client, "n1").await["ok"], true, "the command ran all the same");
    agent.agent.stop().await;
}
