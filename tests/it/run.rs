//! `voxa run`, `status` and `call` as separate processes, the way a user runs them.

use serde_json::{json, Value};

use crate::harness::*;
use crate::support::{voxa, voxa_cmd, RunningVoxa};

/// `voxa run --json` in a fresh home and workspace, waited on until it printed `started`.
fn start_run(extra: &[&str]) -> (RunningVoxa, std::path::PathBuf, (tempfile::TempDir, tempfile::TempDir)) {
    let (dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--json", "--workspace"]).arg(workspace.path()).args(extra);
    (RunningVoxa::start(cmd), home, (dir, workspace))
}

/// A temporary directory and a not-yet-existing voxa home inside it.
fn fresh_home() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    (dir, home)
}

fn query(url: &str, name: &str) -> String {
    let url = url::Url::parse(url).unwrap();
    url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_relay_run_serves_a_phone_and_stops_cleanly_on_sigterm() {
    let (mut run, home, _dirs) = start_run(&["--embedded-relay"]);
    let relay = run.wait_event("embedded_relay")["listen"].as_str().unwrap().to_owned();
    let pairing = run.wait_event("pairing")["url"].as_str().unwrap().to_owned();
    let port = u64::from(run.port);
    assert!(home.join("agent.json").exists());
    let agent_file: Value = serde_json::from_slice(&std::fs::read(home.join("agent.json")).unwrap()).unwrap();
    assert_eq!(agent_file["port"], port);
    assert_eq!(agent_file["pid"], run.child.id());

    let (code, token) = (query(&pairing, "code"), query(&pairing, "token"));
    let mut phone = connect(&format!("ws://{relay}/ws?code={code}")).await;
    wait_agent_joined(&mut phone).await;
    send(&mut phone, json!({"type":"hello","token": token,"client":"test"})).await;
    recv_type(&mut phone, "hello_ok").await;
    send(&mut phone, json!({"type":"tool_call","id":"e1","name":"no_such_tool"})).await;
    assert_eq!(recv_result(&mut phone, "e1").await["error"]["code"], "unknown-tool");

    // status sees the live agent, and never prints a secret.
    let status_home = home.clone();
    let status = tokio::task::spawn_blocking(move || voxa(&status_home, &["status", "--json"])).await.unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let text = String::from_utf8_lossy(&status.stdout).to_string();
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["paired"], true);
    assert_eq!(value["agent"]["port"], port);
    assert_eq!(value["agent"]["relay_connected"], true);
    assert_eq!(value["agent"]["phone_present"], true);
    assert_eq!(value["agent"]["relay"], format!("http://{relay}"), "status names the relay the agent dials");
    assert!(!text.contains(&token) && !text.contains(&code));

    // `stop` fails the test unless SIGTERM ends the process cleanly.
    let (stdout, _) = run.stop();
    assert!(stdout.lines().last().is_some_and(|line| line.contains("\"stopped\"")), "{stdout}");
    assert!(!home.join("agent.json").exists(), "agent.json left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_exit_status_tells_results_from_errors_and_refusals() {
    // An unreachable relay: the loopback socket serves regardless.
    let (run, home, _dirs) = start_run(&["--relay", "http://127.0.0.1:1"]);
    let port = run.port;

    let unknown = voxa(&home, &["call", "no_such_tool"]);
    assert_eq!(unknown.status.code(), Some(3), "{}", String::from_utf8_lossy(&unknown.stderr));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown-tool"));

    let json_out = voxa(&home, &["call", "--json", "no_such_tool", "a=1"]);
    let value: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(value["ok"], false);
    assert_eq!(value["error"]["code"], "unknown-tool");

    let echoed = voxa(&home, &["call", "run_command", "command=echo hi from voxa"]);
    assert_eq!(echoed.status.code(), Some(0), "{}", String::from_utf8_lossy(&echoed.stderr));
    assert!(String::from_utf8_lossy(&echoed.stdout).contains("hi from voxa"));

    let failing = voxa(&home, &["call", "run_command", r#"{"command":"exit 7"}"#]);
    assert_eq!(failing.status.code(), Some(5), "a command that exits non-zero");

    let written = voxa(&home, &["call", "write_file", "path=notes/a.txt", "content=saved", "create_dirs=true"]);
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    let read = voxa(&home, &["call", "read_file", "path=notes/a.txt"]);
    assert_eq!(String::from_utf8_lossy(&read.stdout), "saved\n");
    let escape = voxa(&home, &["call", "read_file", "path=../../etc/passwd"]);
    assert_eq!(escape.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&escape.stderr).contains("outside-workspace"));

    let bad_args = voxa(&home, &["call", "list_dir", "not-a-pair"]);
    assert_eq!(bad_args.status.code(), Some(2));

    // Another home that points at this agent but holds a different token is refused.
    let (_other_dir, other) = fresh_home();
    assert!(voxa(&other, &["pair", "--json", "--relay", "http://127.0.0.1:1"]).status.success());
    let agent_json = json!({"pid": run.child.id(), "port": port, "version": voxa::VERSION});
    std::fs::write(other.join("agent.json"), agent_json.to_string()).unwrap();
    let refused = voxa(&other, &["call", "list_dir"]);
    assert_eq!(refused.status.code(), Some(4), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("bearer-refused"));

    // No agent at all: a plain failure that says what to do.
    let (_idle_dir, idle) = fresh_home();
    assert!(voxa(&idle, &["pair", "--json"]).status.success());
    let missing = voxa(&idle, &["call", "list_dir"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("voxa run"));
    drop(run);
}

#[test]
fn plain_http_relay_to_a_public_host_is_refused_before_dialing() {
    let (_dir, home) = fresh_home();
    let out = voxa(&home, &["run", "--relay", "http://example.com"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("https://"));
}
