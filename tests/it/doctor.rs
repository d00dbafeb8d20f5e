//! `voxa doctor` as a user runs it: the binary against a real relay and a real `voxa run`, healthy
//! and broken in the ways people break it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tokio::net::TcpListener;

use crate::support::harness::*;
use crate::support::{voxa_cmd, RunningVoxa};

const RELAY_TOKEN: &str = "relay-token-5f1c9a0e7d3b";

/// The fake `claude` on PATH, so the coding-agent check passes where Claude Code is not installed.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `PATH` with the fixtures (the fake `claude`) first.
fn fixtures_on_path() -> String {
    format!("{}:{}", fixtures().display(), std::env::var("PATH").unwrap_or_default())
}

/// Runs `voxa doctor --json` for `home` with `env` and no display; returns the exit code, the
/// report and everything printed.
fn doctor(home: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let path = fixtures_on_path();
    let out: Output = voxa_cmd(home)
        .args(["doctor", "--json"])
        .args(args)
        .env("PATH", path)
        // A user of its own: the service check must not see this machine's real service.
        .env("HOME", home.parent().unwrap())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let everything = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("not JSON: {everything}"));
    (out.status.code().unwrap(), report, everything)
}

/// The check named `name` in a report.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {report}"))
}

fn status_of(report: &Value, name: &str) -> String {
    check(report, name)["status"].as_str().unwrap().to_owned()
}

/// The secrets of a home, to prove none of them is ever printed.
fn secrets(home: &Path) -> Vec<String> {
    ["auth_token", "relay_code"]
        .iter()
        .map(|f| std::fs::read_to_string(home.join(f)).unwrap().trim().to_owned())
        .collect()
}

fn assert_no_secret(output: &str, secrets: &[String]) {
    for secret in secrets {
        assert!(!output.contains(secret.as_str()), "a secret was printed: {output}");
    }
}

/// `voxa run --json` for `home`, in a workspace of its own, once it printed `started`.
struct Agent {
    run: RunningVoxa,
    home: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Agent {
    fn start(dir: tempfile::TempDir, home: PathBuf, extra: &[&str], env: &[(&str, &str)]) -> Agent {
        let workspace = tempfile::tempdir().unwrap();
        let mut cmd = voxa_cmd(&home);
        // The agent's display and PATH are what doctor reports: none unless the test gives one.
        cmd.env_remove("DISPLAY").env_remove("WAYLAND_DISPLAY");
        cmd.args(["run", "--json", "--workspace"]).arg(workspace.path()).args(extra).envs(env.iter().copied());
        Agent { run: RunningVoxa::start(cmd), home, _dirs: (dir, workspace) }
    }
}

/// A relay requiring [`RELAY_TOKEN`], and `voxa run` dialling it with that token.
async fn healthy_setup() -> (TestRelay, Agent) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = voxa::relay::RelayConfig {
        token: Some(voxa::secret::Secret::from_string(RELAY_TOKEN.to_owned())),
        ..Default::default()
    };
    let relay = TestRelay::start_with(listener, config).await;
    let url = format!("http://{}", relay.addr);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let path = fixtures_on_path();
    let run = Agent::start(dir, home, &["--relay", &url], &[("VOXA_RELAY_TOKEN", RELAY_TOKEN), ("PATH", &path)]);
    (relay, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_setup_passes_and_a_wrong_relay_token_fails_without_being_printed() {
    let (relay, run) = healthy_setup().await;
    let home = run.home.clone();
    let secrets = secrets(&home);

    let (code, report, output) = doctor(&home, &[], &[("VOXA_RELAY_TOKEN", RELAY_TOKEN)]);
    assert_eq!(code, 0, "{output}");
    assert_eq!(report["ok"], true);
    assert_eq!(report["failures"], 0);
    for name in ["home", "permissions", "secrets", "config", "relay", "proxy", "relay tcp", "relay health", "clock"] {
        assert_eq!(status_of(&report, name), "ok", "{name}: {output}");
    }
    assert_eq!(check(&report, "relay")["message"], format!("http://{} (dialed by the running agent)", relay.addr));
    assert_eq!(check(&report, "relay token")["message"], "the relay accepted VOXA_RELAY_TOKEN");
    assert_eq!(status_of(&report, "coding agents"), "ok", "{output}");
    assert_eq!(check(&report, "agent relay")["message"], format!("the agent is connected to http://{}", relay.addr));
    assert_eq!(check(&report, "service")["message"], "not installed (voxa service install runs voxa at login)");
    let agent = check(&report, "agent");
    assert_eq!(agent["status"], "ok", "{output}");
    let message = agent["message"].as_str().unwrap();
    assert!(message.contains(&format!("pid {}", run.run.child.id())), "{message}");
    assert!(message.contains(voxa::VERSION), "{message}");
    // No display in this environment: a warning with its fix, not a failure.
    assert_eq!(status_of(&report, "display"), "warn");
    assert!(check(&report, "display")["fix"].as_str().unwrap().contains("DISPLAY"));
    assert_no_secret(&output, &secrets);
    assert!(!output.contains(RELAY_TOKEN), "{output}");

    let wrong = "wrong-token-0b7e9d24a1c6";
    let (code, report, output) = doctor(&home, &[], &[("VOXA_RELAY_TOKEN", wrong)]);
    assert_eq!(code, 1, "{output}");
    let token = check(&report, "relay token");
    assert_eq!(token["status"], "fail");
    assert_eq!(token["message"], "the relay refused VOXA_RELAY_TOKEN");
    assert!(token["fix"].as_str().unwrap().contains("VOXA_RELAY_TOKEN"));
    assert!(!output.contains(wrong) && !output.contains(RELAY_TOKEN), "{output}");
    assert_no_secret(&output, &secrets);

    let (code, report, output) = doctor(&home, &[], &[]);
    assert_eq!(code, 1, "{output}");
    assert_eq!(check(&report, "relay token")["message"], "the relay requires a token and none is set");

    // The human form: one line per check, the failure with its fix, then a summary.
    let human = voxa_cmd(&home).args(["doctor"]).env("VOXA_RELAY_TOKEN", wrong).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    let line = text.lines().find(|l| l.starts_with("fail  relay token")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("— fix: set VOXA_RELAY_TOKEN"), "{line}");
    assert!(text.lines().any(|l| l.starts_with("ok    relay health")), "{text}");
    assert!(text.trim_end().ends_with("warning(s)"), "{text}");
    drop(run);
    relay.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_agent_on_its_embedded_relay_passes_and_the_relay_nobody_dials_is_not_checked() {
    // A fresh home: its settings name the default relay, which this agent never dials.
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let path = fixtures_on_path();
    let mut agent = Agent::start(dir, home.clone(), &["--embedded-relay"], &[("PATH", &path)]);
    let listen = agent.run.wait_event("embedded_relay")["listen"].as_str().unwrap().to_owned();
    agent.run.wait_event("relay_connected");
    let (code, report, output) = tokio::task::spawn_blocking(move || doctor(&home, &[], &[])).await.unwrap();
    assert_eq!(code, 0, "a healthy, connected agent passes: {output}");
    assert_eq!(check(&report, "relay")["message"], format!("http://{listen} (in the running agent, which dials it)"));
    for name in ["relay tcp", "relay health", "relay token", "agent", "agent relay"] {
        assert_eq!(status_of(&report, name), "ok", "{name}: {output}");
    }
    assert_eq!(check(&report, "agent relay")["message"], format!("the agent is connected to http://{listen}"));
    assert!(!output.contains(voxa::config::DEFAULT_RELAY), "a relay nobody dials was checked: {output}");
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_relay_and_a_stale_agent_file_are_reported_with_their_fixes() {
    let (relay, run) = healthy_setup().await;
    let home = run.home.clone();
    let addr = relay.addr;
    relay.kill().await;

    let (code, report, output) = doctor(&home, &[], &[("VOXA_RELAY_TOKEN", RELAY_TOKEN)]);
    assert_eq!(code, 1, "{output}");
    let tcp = check(&report, "relay tcp");
    assert_eq!(tcp["status"], "fail");
    assert!(
        tcp["message"].as_str().unwrap().contains(&format!("cannot connect to 127.0.0.1:{}", addr.port())),
        "{tcp}"
    );
    assert!(tcp["fix"].as_str().unwrap().contains("relay running"), "{tcp}");
    // Later relay steps are not attempted once the connection fails.
    assert!(report["checks"].as_array().unwrap().iter().all(|c| c["check"] != "relay health"));
    assert_eq!(status_of(&report, "agent"), "ok", "the agent keeps running without its relay: {output}");

    // agent.json pointing at another laptop's agent (it holds a different token): whatever
    // answers must prove it holds this home's token, and learns nothing reusable.
    let agent_file = home.join("agent.json");
    let recorded = std::fs::read(&agent_file).unwrap();
    let other = TestAgent::start(None).await;
    let mut pointed: Value = serde_json::from_slice(&recorded).unwrap();
    pointed["port"] = other.agent.loopback.port().into();
    std::fs::write(&agent_file, pointed.to_string()).unwrap();
    let (code, report, output) = doctor(&home, &[], &[]);
    assert_eq!(code, 1, "{output}");
    let agent = check(&report, "agent");
    assert_eq!(agent["status"], "fail", "{output}");
    let message = agent["message"].as_str().unwrap();
    assert!(message.contains("did not answer as this laptop's agent"), "{agent}");
    assert!(message.contains("bearer-refused"), "the other agent refused this home's proof: {agent}");
    // A process holding the port that plays protocol 2 without the token: "not your laptop",
    // and all it got was a proof it cannot reuse.
    let (port, sessions) = impostor_agent().await;
    pointed["port"] = port.into();
    std::fs::write(&agent_file, pointed.to_string()).unwrap();
    let (code, report, output) = doctor(&home, &[], &[]);
    assert_eq!(code, 1, "{output}");
    let agent = check(&report, "agent");
    assert!(agent["message"].as_str().unwrap().contains("this is not your laptop"), "{agent}");
    eventually("doctor to leave the impostor", || sessions.lock().unwrap().len() == 1).await;
    let frames = sessions.lock().unwrap()[0].clone();
    assert_eq!(frames.len(), 1, "only the hello reached the impostor: {frames:?}");
    // A sealed hello: the first handshake message, which opens only under the token.
    assert!(frames[0].contains("\"noise\"") && frames[0].contains("\"protocol\":3"), "{frames:?}");
    for secret in secrets(&home) {
        assert!(!frames[0].contains(&secret), "a secret reached the impostor");
    }
    std::fs::write(&agent_file, &recorded).unwrap();

    // The agent dies without cleaning up: agent.json stays behind, naming a dead pid.
    let pid = run.run.child.id();
    run.run.crash();
    assert!(agent_file.exists());
    let (_, report, output) = doctor(&home, &[], &[]);
    let agent = check(&report, "agent");
    assert_eq!(agent["status"], "warn", "{output}");
    assert!(agent["message"].as_str().unwrap().contains(&format!("pid {pid} is not running")), "{agent}");
    assert_eq!(agent["fix"], format!("rm {}, then voxa run", agent_file.display()));
    assert!(agent_file.exists(), "doctor changes nothing");

    // Its pid reused by another process, which holds no agent lock: still stale.
    let reused =
        serde_json::json!({"pid": std::process::id(), "port": other.agent.loopback.port(), "version": voxa::VERSION});
    std::fs::write(&agent_file, reused.to_string()).unwrap();
    let (code, report, output) = doctor(&home, &[], &[]);
    let agent = check(&report, "agent");
    assert_eq!(agent["status"], "warn", "{output}");
    assert!(agent["message"].as_str().unwrap().contains("holds no agent lock"), "{agent}");
    assert_eq!(code, 1, "the relay is still down: {output}");
}

#[test]
fn loose_permissions_and_a_missing_home_fail_with_the_chmod_or_command_that_fixes_them() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let (code, report, output) = doctor(&home, &["--relay", "http://127.0.0.1:1"], &[]);
    assert_eq!(code, 1, "{output}");
    assert_eq!(check(&report, "home")["fix"], "voxa pair");
    assert!(!home.exists(), "doctor creates nothing");

    assert!(voxa_cmd(&home).args(["pair", "--json"]).output().unwrap().status.success());
    let secrets = secrets(&home);
    let token = home.join("auth_token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, report, output) = doctor(&home, &["--relay", "http://127.0.0.1:1"], &[]);
    assert_eq!(code, 1, "{output}");
    let permissions = check(&report, "permissions");
    assert_eq!(permissions["status"], "fail");
    assert_eq!(permissions["fix"], format!("chmod 600 {}", token.display()));
    // The secret itself is still well-formed, and still not printed.
    assert_eq!(status_of(&report, "secrets"), "ok");
    assert_no_secret(&output, &secrets);

    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, report, _) = doctor(&home, &["--relay", "http://127.0.0.1:1"], &[]);
    assert_eq!(check(&report, "home")["fix"], format!("chmod 700 {}", home.display()));
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();

    std::fs::write(&token, "not a token").unwrap();
    let (_, report, output) = doctor(&home, &["--relay", "http://127.0.0.1:1"], &[]);
    let check_secrets = check(&report, "secrets");
    assert_eq!(check_secrets["status"], "fail");
    assert!(check_secrets["fix"].as_str().unwrap().starts_with("voxa pair --rotate"));
    assert!(!output.contains("not a token"), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_relay_is_verified_with_the_configured_roots() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, cert) = tls_relay(dir.path()).await;
    let home = dir.path().join("voxa");
    let url = format!("https://localhost:{}", relay.addr.port());
    assert!(voxa_cmd(&home).args(["pair", "--json", "--relay", &url]).output().unwrap().status.success());

    let (code, report, output) = doctor(&home, &[], &[]);
    assert_eq!(code, 1, "{output}");
    let tls = check(&report, "relay tls");
    assert_eq!(tls["status"], "fail", "{output}");
    assert!(tls["fix"].as_str().unwrap().contains("--ca-cert"), "{tls}");

    let (code, report, output) = doctor(&home, &["--ca-cert", cert.to_str().unwrap()], &[]);
    assert_eq!(check(&report, "relay tls")["status"], "ok", "{output}");
    assert_eq!(status_of(&report, "relay health"), "ok", "{output}");
    assert_eq!(check(&report, "relay token")["message"], "the relay needs no token");
    assert_eq!(status_of(&report, "clock"), "ok", "the relay's Date header is read: {output}");
    // Only the missing agent is left, and it is a warning.
    assert_eq!(code, 0, "{output}");
    relay.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_hosted_checks_the_key_shape_without_printing_it_and_reaches_gemini() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    assert!(voxa_cmd(&home)
        .args(["pair", "--json", "--relay", "http://127.0.0.1:1"])
        .output()
        .unwrap()
        .status
        .success());
    let gemini = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gemini_url = format!("ws://127.0.0.1:{}/live", gemini.local_addr().unwrap().port());
    let key = format!("AIza{}", "Sy0123456789abcdefghijklmnopqrst_-X");
    assert_eq!(key.len(), 39);

    let env = [("GEMINI_API_KEY", key.as_str()), ("VOXA_GEMINI_URL", gemini_url.as_str())];
    let (_, report, output) = doctor(&home, &["--self-hosted"], &env);
    let shape = check(&report, "gemini key");
    assert_eq!(shape["status"], "ok", "{output}");
    assert!(shape["message"].as_str().unwrap().contains("plausible"));
    assert_eq!(status_of(&report, "gemini"), "ok", "{output}");
    assert!(!output.contains(&key[4..]), "the key was printed: {output}");

    let odd = "sk-this-is-not-a-google-key-12345";
    let env = [("GEMINI_API_KEY", odd), ("VOXA_GEMINI_URL", gemini_url.as_str())];
    let (_, report, output) = doctor(&home, &["--self-hosted"], &env);
    assert_eq!(status_of(&report, "gemini key"), "warn");
    assert!(!output.contains(odd), "{output}");

    drop(gemini);
    let (code, report, output) = doctor(&home, &["--self-hosted"], &[("VOXA_GEMINI_URL", gemini_url.as_str())]);
    assert_eq!(code, 1);
    assert_eq!(status_of(&report, "gemini key"), "fail", "{output}");
    assert_eq!(status_of(&report, "gemini"), "fail", "nothing listens there any more: {output}");

    // Without --self-hosted, neither is checked.
    let (_, report, _) = doctor(&home, &[], &[]);
    assert!(report["checks"].as_array().unwrap().iter().all(|c| c["check"] != "gemini key"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_token_saved_in_the_home_is_used_by_run_and_by_doctor() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = voxa::relay::RelayConfig {
        token: Some(voxa::secret::Secret::from_string(RELAY_TOKEN.to_owned())),
        ..Default::default()
    };
    let relay = TestRelay::start_with(listener, config).await;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let url = format!("http://{}", relay.addr);
    assert!(voxa_cmd(&home).args(["pair", "--json", "--relay", &url]).output().unwrap().status.success());
    voxa::state::Home::at(&home).save_relay_token(&voxa::secret::Secret::from_string(RELAY_TOKEN.into())).unwrap();
    let saved = home.join("relay_token");
    assert_eq!(std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777, 0o600);

    // No VOXA_RELAY_TOKEN anywhere: `voxa run` reads the saved one and the relay lets it in.
    let mut run = Agent::start(dir, home.clone(), &[], &[]);
    run.run.wait_event("relay_connected");

    let (code, report, output) = doctor(&home, &[], &[]);
    assert_eq!(code, 0, "{output}");
    assert_eq!(
        check(&report, "relay token")["message"],
        format!("the relay accepted the token saved in {}", saved.display())
    );
    assert!(!output.contains(RELAY_TOKEN), "{output}");

    // The environment wins over the file, as for `voxa run`.
    let (code, report, _) = doctor(&home, &[], &[("VOXA_RELAY_TOKEN", "not-the-token")]);
    assert_eq!(code, 1);
    assert_eq!(check(&report, "relay token")["message"], "the relay refused VOXA_RELAY_TOKEN");
    drop(run);
    relay.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_proxy_the_relay_is_reached_as_run_would_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, cert) = tls_relay_named(dir.path(), &["relay.voxa.test", "localhost"]).await;
    let (proxy, mut asked) = connect_proxy(relay.addr).await;
    let home = dir.path().join("voxa");
    // The name only exists behind the proxy: doctor must not resolve it itself.
    let url = format!("https://relay.voxa.test:{}", relay.addr.port());
    assert!(voxa_cmd(&home).args(["pair", "--json", "--relay", &url]).output().unwrap().status.success());

    let proxy_url = format!("http://{proxy}");
    let (code, report, output) =
        doctor(&home, &["--ca-cert", cert.to_str().unwrap()], &[("HTTPS_PROXY", proxy_url.as_str())]);
    assert_eq!(code, 0, "{output}");
    assert_eq!(check(&report, "proxy")["message"], format!("HTTPS_PROXY {proxy} (CONNECT) for TLS relays"));
    assert_eq!(
        check(&report, "relay tcp")["message"],
        format!("relay.voxa.test:{} accepts connections through the proxy", relay.addr.port())
    );
    assert_eq!(status_of(&report, "relay tls"), "ok", "{output}");
    assert_eq!(status_of(&report, "relay health"), "ok", "{output}");
    let request = asked.recv().await.unwrap();
    assert_eq!(request, format!("CONNECT relay.voxa.test:{} HTTP/1.1", relay.addr.port()));

    let (code, report, output) = doctor(&home, &[], &[("HTTPS_PROXY", "socks5://127.0.0.1:1")]);
    assert_eq!(code, 1, "{output}");
    assert_eq!(status_of(&report, "proxy"), "fail");
    relay.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_agents_display_and_path_are_checked_not_this_shells() {
    let relay = TestRelay::start().await;
    let url = format!("http://{}", relay.addr);
    let xvfb = crate::support::xvfb::Xvfb::start("320x200x24");
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    // The agent has claude on its PATH (and a display where Xvfb runs); doctor's own shell has neither.
    let path = fixtures_on_path();
    let mut env = vec![("PATH", path.as_str())];
    if let Some(xvfb) = &xvfb {
        env.push(("DISPLAY", xvfb.display.as_str()));
    }
    let run = Agent::start(dir, home.clone(), &["--relay", &url], &env);
    let bare = "/usr/bin:/bin";
    let (_, report, output) = doctor(&home, &[], &[("PATH", bare)]);
    let agents = check(&report, "coding agents");
    assert_eq!(agents["status"], "ok", "{output}");
    assert_eq!(agents["message"], "on the running agent's PATH: claude", "{output}");
    let display = check(&report, "display");
    match &xvfb {
        Some(xvfb) => {
            assert_eq!(display["status"], "ok", "{output}");
            let message = display["message"].as_str().unwrap();
            assert!(
                message.starts_with(&format!("X display {} (the running agent's DISPLAY) answers", xvfb.display)),
                "{message}"
            );
        }
        None => assert_eq!(display["status"], "warn", "{output}"),
    }
    assert_eq!(check(&report, "agent relay")["message"], format!("the agent is connected to {url}"), "{output}");
    drop(run);

    // The other way round: doctor's shell has claude and a display, the agent neither.
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let run = Agent::start(dir, home.clone(), &["--relay", &url], &[("PATH", bare)]);
    let mut shell = vec![];
    if let Some(xvfb) = &xvfb {
        shell.push(("DISPLAY", xvfb.display.as_str()));
    }
    let (_, report, output) = doctor(&home, &[], &shell);
    let agents = check(&report, "coding agents");
    assert_eq!(agents["status"], "warn", "{output}");
    assert!(agents["message"].as_str().unwrap().starts_with("not on the running agent's PATH: claude"), "{output}");
    assert!(agents["fix"].as_str().unwrap().contains("systemctl --user show-environment"), "{output}");
    let display = check(&report, "display");
    assert_eq!(display["status"], "warn", "{output}");
    assert!(display["message"].as_str().unwrap().contains("in the running agent's environment"), "{output}");
    assert!(display["fix"].as_str().unwrap().contains("import-environment DISPLAY"), "{output}");
    drop(run);

    // No agent: this shell is all there is, and the report says so.
    let (_, report, output) = doctor(&home, &[], &shell);
    assert_eq!(status_of(&report, "agent"), "warn", "{output}");
    let agents = check(&report, "coding agents");
    assert_eq!(agents["message"], "on this shell's PATH: claude (no agent is running)", "{output}");
    assert!(report["checks"].as_array().unwrap().iter().all(|c| c["check"] != "agent relay"), "{output}");
    relay.kill().await;
}
