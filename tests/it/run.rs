//! `voxa run`, `status` and `call` as separate processes, the way a user runs them.

use serde_json::{json, Value};

use crate::support::harness::*;
use crate::support::run::{fresh_home, start_run_with_env};
use crate::support::{voxa, voxa_bin, voxa_cmd, voxa_cmd_of, RunningVoxa};

/// `voxa run --json` in a fresh home and workspace, waited on until it printed `started`
/// ([`start_run_with_env`] without extra variables).
fn start_run(extra: &[&str]) -> (RunningVoxa, std::path::PathBuf, (tempfile::TempDir, tempfile::TempDir)) {
    start_run_with_env(extra, &[])
}

/// A parameter of the pairing link's fragment (`#code=…&ticket=…`).
fn query(url: &str, name: &str) -> String {
    let url = url::Url::parse(url).unwrap();
    let fragment = url.fragment().unwrap();
    url::form_urlencoded::parse(fragment.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned()).unwrap()
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

    let code = query(&pairing, "code");
    let token = std::fs::read_to_string(home.join("auth_token")).unwrap().trim().to_owned();
    let mut phone = connect(&format!("ws://{relay}/ws?code={code}")).await;
    say_hello(&mut phone, &token).await;
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

#[test]
fn run_says_an_embedded_relay_link_is_for_this_machine_and_how_to_reach_a_phone() {
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--embedded-relay", "--workspace"]).arg(workspace.path());
    let run = RunningVoxa::spawn(cmd);
    // `agent.json` is written once the agent runs, after the pairing block was printed.
    let deadline = std::time::Instant::now() + STEP;
    while !home.join("agent.json").exists() {
        assert!(std::time::Instant::now() < deadline, "voxa run never started: {:?}", run.drain());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (text, _) = run.stop();
    let link = text.lines().find(|line| line.starts_with("http://127.0.0.1:")).unwrap_or_else(|| panic!("{text}"));
    assert!(link.contains("code=") && link.contains("ticket="), "{text}");
    assert!(text.contains("Open this link in a browser on this machine"), "{text}");
    assert!(text.contains("this machine's browser only"), "{text}");
    for way in ["voxa relay --domain <its name>", "tailscale serve --bg 8787", "run by voxa's publisher"] {
        assert!(text.contains(way), "{way:?} missing from {text}");
    }
    assert!(!text.contains("Voxa app") && !text.contains(['▀', '▄', '█']), "{text}");
}

/// `voxa` for `home` in a blocking task, as a second terminal beside a running agent.
async fn beside(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    let (home, args): (std::path::PathBuf, Vec<String>) =
        (home.to_path_buf(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || voxa(&home, &args.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_an_embedded_relay_runs_status_and_pair_speak_of_that_relay_and_save_nothing() {
    // A fresh home: nothing saved, so its settings name the default relay, which no one dials.
    let (mut run, home, _dirs) = start_run(&["--embedded-relay"]);
    let listen = run.wait_event("embedded_relay")["listen"].as_str().unwrap().to_owned();
    let embedded = format!("http://{listen}");
    let printed = run.wait_event("pairing")["url"].as_str().unwrap().to_owned();

    let status = beside(&home, &["status"]).await;
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    let relays: Vec<&str> = text.lines().filter(|line| line.contains("relay:")).collect();
    assert_eq!(relays.len(), 1, "one relay line: {text}");
    assert!(relays[0].starts_with(&format!("relay:   {embedded} (in the running agent")), "{text}");
    assert!(!text.contains(voxa::config::DEFAULT_RELAY), "a relay nobody dials: {text}");
    let json: Value = serde_json::from_slice(&beside(&home, &["status", "--json"]).await.stdout).unwrap();
    assert_eq!(
        (json["relay"].as_str(), json["relay_source"].as_str()),
        (Some(embedded.as_str()), Some("embedded")),
        "{json}"
    );

    // pair prints the link the agent dials, and saves no relay (a relay inside an agent ends with it).
    let pair = beside(&home, &["pair", "--json"]).await;
    assert!(pair.status.success(), "{}", String::from_utf8_lossy(&pair.stderr));
    let paired: Value = serde_json::from_slice(&pair.stdout).unwrap();
    let base = |url: &str| url.split("&ticket=").next().unwrap().to_owned();
    assert_eq!(base(paired["url"].as_str().unwrap()), base(&printed), "the link run printed: {paired}");
    assert_eq!((paired["relay_source"].as_str(), paired["relay_saved"].as_bool()), (Some("embedded"), Some(false)));
    let human = String::from_utf8_lossy(&beside(&home, &["pair", "--no-qr"]).await.stdout).into_owned();
    assert!(human.lines().any(|line| line.starts_with(&base(&printed))), "{human}");
    assert!(human.contains("the link works while that agent runs"), "{human}");
    let config = std::fs::read_to_string(home.join("config.toml")).unwrap_or_default();
    assert!(!config.contains("relay"), "pair saved a relay: {config}");

    // A relay the running agent does not dial gets no link, and changes nothing.
    let other = beside(&home, &["--relay", "https://relay.example.com", "pair"]).await;
    assert_eq!(other.status.code(), Some(2), "{}", String::from_utf8_lossy(&other.stdout));
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(said.contains(&format!("the running agent (pid {}) dials {embedded}", run.child.id())), "{said}");
    assert!(other.stdout.is_empty(), "{}", String::from_utf8_lossy(&other.stdout));
    let config = std::fs::read_to_string(home.join("config.toml")).unwrap_or_default();
    assert!(!config.contains("relay"), "a refused pair saved a relay: {config}");
    run.stop();

    // Once it stopped, pair speaks of the settings' relay again (and saves it, as ever).
    let after: Value = serde_json::from_slice(&voxa(&home, &["pair", "--json"]).stdout).unwrap();
    assert_eq!(
        (after["relay"].as_str(), after["relay_source"].as_str()),
        (Some(voxa::config::DEFAULT_RELAY), Some("default"))
    );
}

#[test]
fn the_embedded_relay_keeps_its_port_across_restarts() {
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let start = || {
        let mut cmd = voxa_cmd(&home);
        cmd.args(["run", "--json", "--embedded-relay", "--workspace"]).arg(workspace.path());
        let mut run = RunningVoxa::start(cmd);
        let listen = run.wait_event("embedded_relay")["listen"].as_str().unwrap().to_owned();
        let pairing = run.wait_event("pairing");
        assert_eq!(pairing["reaches"], "this-machine");
        assert!(pairing["url"].as_str().unwrap().starts_with(&format!("http://{listen}/#code=")), "{pairing}");
        (run, listen)
    };
    let (first, port) = start();
    first.stop();
    let (second, again) = start();
    assert_eq!(again, port, "the same home listens on the same port after a restart");
    second.stop();

    // Taken meanwhile: another port, which the next run keeps.
    let squatter = std::net::TcpListener::bind(&port).unwrap();
    let (third, other) = start();
    assert_ne!(other, port);
    third.stop();
    drop(squatter);
    let (fourth, kept) = start();
    assert_eq!(kept, other, "the port chosen last is the one kept");
    fourth.stop();
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
    let _held = voxa::state::Home::at(&other).lock_agent().unwrap();
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
fn call_takes_each_argument_as_its_declared_type_and_open_ends_its_line() {
    let (_run, home, _dirs) = start_run(&["--relay", "http://127.0.0.1:1"]);
    let stderr = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).to_string();

    // `command=false` is the command `false` (a string), which runs and exits 1: exit 5, not a refusal.
    let refused_before = voxa(&home, &["call", "run_command", "command=false"]);
    assert_eq!(refused_before.status.code(), Some(5), "{}", stderr(&refused_before));
    let ran = voxa(&home, &["call", "run_command", "command=true"]);
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let number = voxa(&home, &["call", "--json", "run_command", "command=echo 42", "timeout_ms=5000"]);
    let value: Value = serde_json::from_slice(&number.stdout).unwrap();
    assert_eq!(value["result"]["output"].as_str().unwrap().trim(), "42", "{value}");
    // A declared integer that is not one is refused by the tool, in its words.
    let wrong = voxa(&home, &["call", "run_command", "command=true", "timeout_ms=soon"]);
    assert_eq!(wrong.status.code(), Some(3), "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("invalid-args"), "{}", stderr(&wrong));

    let open = voxa(&home, &["open", "--no-browser"]);
    assert!(open.status.success(), "{}", stderr(&open));
    let text = String::from_utf8_lossy(&open.stdout);
    assert!(text.ends_with('\n'), "the link ends its line: {text:?}");
    assert!(text.lines().any(|line| line.starts_with("http://127.0.0.1:") && line.contains("/#ticket=")), "{text}");
}

#[test]
fn call_screenshot_saves_the_image_and_prints_its_path() {
    use std::os::unix::fs::PermissionsExt;
    let Some(xvfb) = crate::support::xvfb::Xvfb::start("320x200x24") else { return };
    let (_run, home, _dirs) = start_run_with_env(&["--relay", "http://127.0.0.1:1"], &[("DISPLAY", &xvfb.display)]);
    let here = tempfile::tempdir().unwrap();

    let out = voxa_cmd(&home).current_dir(here.path()).args(["call", "screenshot"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let saved =
        text.trim_end().rsplit_once("saved to ").map(|(_, path)| path.to_owned()).unwrap_or_else(|| panic!("{text}"));
    assert!(saved.starts_with("screenshot-") && saved.ends_with(".png"), "{text}");
    let path = here.path().join(&saved);
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG file");
    let header = png::Decoder::new(std::io::Cursor::new(&bytes)).read_info().unwrap().info().clone();
    assert_eq!((header.width, header.height), (320, 200));
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "a screen can show anything");
    assert!(text.starts_with("screenshot 320x200 image/png"), "{text}");

    // A second one never overwrites the first; `--out` and `--json` say where it went.
    let again = voxa_cmd(&home)
        .current_dir(here.path())
        .args(["call", "--json", "screenshot", "--out", "shot.png"])
        .output()
        .unwrap();
    let value: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(value["saved"], "shot.png", "{value}");
    assert_eq!(
        std::fs::read(here.path().join("shot.png")).unwrap().len() as u64,
        value["result"]["bytes"].as_u64().unwrap()
    );
    let third = voxa_cmd(&home).current_dir(here.path()).args(["call", "screenshot"]).output().unwrap();
    assert!(third.status.success());
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the first file is untouched");
    let pngs = std::fs::read_dir(here.path())
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().extension().is_some_and(|ext| ext == "png"))
        .count();
    assert_eq!(pngs, 3);
}

#[test]
fn plain_http_relay_to_a_public_host_is_refused_before_dialing() {
    let (_dir, home) = fresh_home();
    let out = voxa(&home, &["run", "--relay", "http://example.com"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("https://"));
}

/// A paired home that no agent runs for, and its auth token.
fn paired_home() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let (dir, home) = fresh_home();
    assert!(voxa(&home, &["pair", "--json", "--relay", "http://127.0.0.1:1"]).status.success());
    let token = std::fs::read_to_string(home.join("auth_token")).unwrap().trim().to_owned();
    (dir, home, token)
}

#[test]
fn a_stale_agent_json_sends_no_client_to_whoever_listens_on_its_port() {
    let (_dir, home, _) = paired_home();
    // The agent died without cleaning up; another local process now holds its port, and the
    // recorded pid is alive (here: this test).
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let agent_json = json!({"pid": std::process::id(), "port": port, "version": voxa::VERSION});
    std::fs::write(home.join("agent.json"), agent_json.to_string()).unwrap();

    let status = voxa(&home, &["status", "--json"]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let shown: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(shown["agent"].is_null(), "no agent holds the home's lock, so none runs: {shown}");
    let call = voxa(&home, &["call", "list_dir"]);
    assert_eq!(call.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&call.stderr).contains("voxa run"));
    // Neither even connected: nothing waits in the squatter's backlog.
    squatter.set_nonblocking(true).unwrap();
    let knocked = squatter.accept().map(|(_, peer)| peer).map_err(|err| err.kind());
    assert_eq!(knocked, Err(std::io::ErrorKind::WouldBlock), "a client connected to the squatter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_holding_the_port_learns_nothing_from_status_or_call() {
    let (_dir, home, token) = paired_home();
    // Worst case: the impostor even holds the agent lock, and plays protocol 2 as well as it can
    // without the token.
    let _held = voxa::state::Home::at(&home).lock_agent().unwrap();
    let (port, sessions) = impostor_agent().await;
    let agent_json = json!({"pid": std::process::id(), "port": port, "version": voxa::VERSION});
    std::fs::write(home.join("agent.json"), agent_json.to_string()).unwrap();

    let (status, call) = tokio::task::spawn_blocking({
        let home = home.clone();
        move || (voxa(&home, &["status", "--json"]), voxa(&home, &["call", "run_command", "command=id"]))
    })
    .await
    .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let shown: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(shown["agent"]["error"].as_str().unwrap().contains("this is not your laptop"), "{shown}");
    assert!(shown["agent"]["mode"].is_null(), "{shown}");
    assert_eq!(call.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&call.stderr).contains("this is not your laptop"));

    eventually("both clients to leave the impostor", || sessions.lock().unwrap().len() == 2).await;
    for frames in sessions.lock().unwrap().iter() {
        assert_eq!(frames.len(), 1, "only the hello reached the impostor: {frames:?}");
        let hello: Value = serde_json::from_str(&frames[0]).unwrap();
        assert_eq!(hello["type"], "hello");
        assert!(!frames[0].contains(&token), "the token reached the impostor");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_agent_warns_once_per_episode_and_keeps_its_code() {
    let (mut run, home, _dirs) = start_run(&["--embedded-relay"]);
    let relay = run.wait_event("embedded_relay")["listen"].as_str().unwrap().to_owned();
    let code = query(run.wait_event("pairing")["url"].as_str().unwrap(), "code");
    run.wait_event("relay_connected");
    // Another agent with the code takes it three times; each time this one takes it back.
    for _ in 0..3 {
        let mut impostor = connect(&format!("ws://{relay}/agent?code={code}")).await;
        assert_eq!(recv_close(&mut impostor).await, (4001, "replaced".into()));
    }
    for _ in 0..3 {
        tokio::task::block_in_place(|| run.wait_event("relay_connected"));
    }
    let events = run.events_so_far();
    let named = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    assert_eq!(named("replaced"), 1, "one loud warning per episode: {events:?}");
    assert_eq!(events.iter().filter(|e| e["event"] == "relay_lost" && e["reason"] == "replaced").count(), 2);
    let status = tokio::task::spawn_blocking(move || voxa(&home, &["status", "--json"])).await.unwrap();
    let shown: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(shown["agent"]["relay_replaced"], true, "{shown}");
}

#[test]
fn a_second_agent_for_the_same_home_is_refused() {
    let (run, home, _dirs) = start_run(&["--embedded-relay"]);
    let second = voxa(&home, &["run", "--embedded-relay"]);
    assert_eq!(second.status.code(), Some(1));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("already running") && err.contains(&run.child.id().to_string()), "{err}");
}

#[test]
fn another_users_process_on_the_recorded_pid_is_not_the_agent() {
    use std::os::unix::process::CommandExt;
    const NOBODY: u32 = 65534;
    if !rustix::process::getuid().is_root() {
        // Running voxa as a second user needs root.
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("skipped: needs root to run voxa as another user");
        return;
    }
    let (dir, home, _) = paired_home();
    // Even with the agent lock held, a pid that belongs to another user (here root's, this test)
    // is not this user's agent.
    let held = voxa::state::Home::at(&home).lock_agent().unwrap();
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let agent_json = json!({"pid": std::process::id(), "port": port, "version": voxa::VERSION});
    std::fs::write(home.join("agent.json"), agent_json.to_string()).unwrap();
    for path in [dir.path().to_owned(), home.clone()]
        .into_iter()
        .chain(std::fs::read_dir(&home).unwrap().map(|entry| entry.unwrap().path()))
    {
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    // A copy the other user can reach, wherever this checkout lives (a private directory too).
    let program = dir.path().join("voxa-program");
    std::fs::copy(voxa_bin(), &program).unwrap();
    let as_nobody = |args: &[&str]| voxa_cmd_of(&program, &home).args(args).uid(NOBODY).gid(NOBODY).output().unwrap();
    let status = as_nobody(&["status", "--json"]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let shown: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(shown["agent"].is_null(), "{shown}");
    assert_eq!(as_nobody(&["call", "list_dir"]).status.code(), Some(1));
    squatter.set_nonblocking(true).unwrap();
    let knocked = squatter.accept().map(|(_, peer)| peer).map_err(|err| err.kind());
    assert_eq!(knocked, Err(std::io::ErrorKind::WouldBlock), "a client connected to the squatter");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_pair_rotate_run_answers_the_replaced_code_and_status_says_until_when() {
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let first = voxa(&home, &["--relay", "http://127.0.0.1:1", "--json", "pair"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let old_code = serde_json::from_slice::<Value>(&first.stdout).unwrap()["code"].as_str().unwrap().to_owned();
    let rotated = voxa(&home, &["--json", "pair", "--rotate"]);
    assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
    assert_ne!(serde_json::from_slice::<Value>(&rotated.stdout).unwrap()["code"], old_code.as_str());

    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--json", "--workspace"]).arg(workspace.path());
    let mut run = RunningVoxa::start(cmd);
    let until = run.wait_event("retired_code_answered")["until"].as_u64().unwrap();
    let (status_home, text_home) = (home.clone(), home.clone());
    let json = tokio::task::spawn_blocking(move || voxa(&status_home, &["status", "--json"])).await.unwrap();
    let text = tokio::task::spawn_blocking(move || voxa(&text_home, &["status"])).await.unwrap();
    let (json, text) = (String::from_utf8_lossy(&json.stdout), String::from_utf8_lossy(&text.stdout));
    let value: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["agent"]["retired_code_until"], until, "{json}");
    assert!(text.contains("retired code:    answered until"), "{text}");
    assert!(!json.contains(&old_code) && !text.contains(&old_code), "status shows the retired code");
    run.stop();
}
