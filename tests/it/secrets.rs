//! Secrets against the processes around the agent: tools reading its environment, `ps` reading
//! argv, errors and CI logs repeating what was pasted.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Stdio;

use serde_json::Value;
use tokio::net::TcpListener;

use crate::support::harness::*;
use crate::support::run::fresh_home;
use crate::support::{voxa, voxa_bin, voxa_cmd, voxa_cmd_of, RunningVoxa};

const GEMINI_KEY: &str = "AIzaSy-gemini-key-that-must-stay-in-the-agent";
const RELAY_TOKEN: &str = "relay-token-that-must-stay-in-the-agent";
/// The user tool processes run as when the tests run as root: `nobody`.
const UNPRIVILEGED: u32 = 65534;

#[test]
fn tools_cannot_read_the_agents_secrets_and_the_agent_is_not_dumpable() {
    // As root the kernel lets anyone read anything; the agent then runs as `nobody`, as a user's
    // agent would, so what another process of the same user may do is what is tested.
    let root = rustix::process::getuid().is_root();
    let (dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    // `nobody` may not reach the build directory (under /root, say): it runs a copy of its own.
    let program = dir.path().join("voxa-binary");
    if std::fs::hard_link(voxa_bin(), &program).is_err() {
        std::fs::copy(voxa_bin(), &program).unwrap();
    }
    let mut command = voxa_cmd_of(&program, &home);
    command
        .args(["run", "--json", "--relay", "http://127.0.0.1:1", "--workspace"])
        .arg(workspace.path())
        .env("GEMINI_API_KEY", GEMINI_KEY)
        .env("VOXA_RELAY_TOKEN", RELAY_TOKEN);
    if root {
        use std::os::unix::process::CommandExt;
        for owned in [dir.path(), workspace.path()] {
            std::os::unix::fs::chown(owned, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
        }
        command.uid(UNPRIVILEGED).gid(UNPRIVILEGED);
    }
    let run = RunningVoxa::start(command);
    let pid = run.child.id();

    let environ = format!("/proc/{pid}/environ");
    if root {
        // A dumpable process's /proc files belong to its user; a non-dumpable one's to root.
        assert_eq!(std::fs::metadata(format!("/proc/{pid}")).unwrap().uid(), UNPRIVILEGED);
        assert_eq!(std::fs::metadata(&environ).unwrap().uid(), 0, "the agent is dumpable");
    } else {
        let err = std::fs::read(&environ).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "the agent is dumpable");
    }

    let script = "cat /proc/$PPID/environ; echo; env; tr '\\0' ' ' </proc/$PPID/cmdline; echo; echo done";
    let out = voxa(&home, &["call", "run_command", &format!("command={script}")]);
    let shown = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("done") && shown.contains("PATH="), "the command did not run: {shown}");
    assert!(shown.contains("Permission denied"), "reading the agent's environment was not refused: {shown}");
    for secret in [GEMINI_KEY, RELAY_TOKEN] {
        assert!(!shown.contains(secret), "a tool process read a secret: {shown}");
    }
    drop(run);
    drop((dir, workspace));
}

/// The environment block of a running process (`/proc/<pid>/environ`), when this user may read
/// it: voxa is not dumpable, so only root may.
fn environ_of(pid: u32) -> Option<String> {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied && !rustix::process::geteuid().is_root() => None,
        Err(err) => panic!("could not read the environment of {pid}: {err}"),
    }
}

/// A test relay that requires [`RELAY_TOKEN`] from agents.
async fn token_relay() -> TestRelay {
    let config = voxa::relay::RelayConfig {
        token: Some(voxa::secret::Secret::from_string(RELAY_TOKEN.into())),
        ..Default::default()
    };
    TestRelay::start_with(TcpListener::bind("127.0.0.1:0").await.unwrap(), config).await
}

/// An environment block read from `/proc` (none when this user may not read it) holds neither
/// secret nor the names of their variables.
fn assert_holds_no_secret(environ: Option<String>, whose: &str) {
    let Some(environ) = environ else { return };
    assert!(environ.contains("PATH="), "not the environment block: {environ}");
    for secret in [GEMINI_KEY, RELAY_TOKEN, "GEMINI_API_KEY", "VOXA_RELAY_TOKEN"] {
        assert!(!environ.contains(secret), "{secret} is in the environment block of {whose}");
    }
}

/// The secret variables are gone from the block the kernel keeps for `/proc/<pid>/environ` of a
/// running `voxa run` and `voxa relay`, and still do their work: the agent gets through a relay
/// that requires the token, and the relay requires it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_variables_are_not_in_the_environment_block_of_a_running_voxa() {
    let relay = token_relay().await;
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut command = voxa_cmd(&home);
    command
        .args(["run", "--json", "--relay", relay.url().as_str(), "--workspace"])
        .arg(workspace.path())
        .env("GEMINI_API_KEY", GEMINI_KEY)
        .env("VOXA_RELAY_TOKEN", RELAY_TOKEN);
    let (run, environ) = tokio::task::spawn_blocking(move || {
        let mut run = RunningVoxa::start(command);
        run.wait_event("relay_connected");
        let environ = environ_of(run.child.id());
        (run, environ)
    })
    .await
    .unwrap();
    assert_holds_no_secret(environ, "voxa run");
    drop(run);

    let (_dir, home) = fresh_home();
    let mut command = voxa_cmd(&home);
    command
        .args(["relay", "--json", "--listen", "127.0.0.1:0"])
        .env("GEMINI_API_KEY", GEMINI_KEY)
        .env("VOXA_RELAY_TOKEN", RELAY_TOKEN);
    let mut relay = RunningVoxa::spawn(command);
    let listening = relay.wait_event("relay_listening");
    let addr: std::net::SocketAddr = listening["listen"].as_str().unwrap().parse().unwrap();
    assert_holds_no_secret(environ_of(relay.child.id()), "voxa relay");
    // The token still reached the relay: an agent without it is refused, one with it is not.
    let code = "00112233445566778899aabbccddeeff";
    let (status, _) = http(addr, &upgrade_request(&format!("/agent?code={code}"), "")).await;
    assert_eq!(status, 401);
    let with_token = format!("Authorization: Bearer {RELAY_TOKEN}\r\n");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = upgrade_request(&format!("/agent?code={code}"), &with_token);
    tokio::io::AsyncWriteExt::write_all(&mut tcp, request.as_bytes()).await.unwrap();
    let mut head = vec![0u8; 512];
    let n = tokio::time::timeout(STEP, tokio::io::AsyncReadExt::read(&mut tcp, &mut head)).await.unwrap().unwrap();
    assert_ne!(parse_response(&head[..n]).0, 401);
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_token_comes_from_a_private_file() {
    let tmp = tempfile::tempdir().unwrap();
    let token_file = tmp.path().join("relay-token");
    std::fs::write(&token_file, format!("{RELAY_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file_arg = token_file.to_str().unwrap();
    // Others can read it: refused like a secret in the home, with the fix.
    let (_dir, home) = fresh_home();
    let out = voxa(&home, &["relay", "--listen", "127.0.0.1:0", "--relay-token-file", file_arg]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    // A relay that requires the token admits an agent that read it from the file.
    let relay = token_relay().await;
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut command = voxa_cmd(&home);
    command
        .args(["run", "--json", "--relay", relay.url().as_str(), "--relay-token-file", file_arg, "--workspace"])
        .arg(workspace.path());
    let connected = tokio::task::spawn_blocking(move || {
        let mut run = RunningVoxa::start(command);
        let event = run.wait_event("relay_connected");
        (run, event)
    });
    let (run, event) = connected.await.unwrap();
    assert_eq!(event["relay"], relay.url().as_str());
    drop(run);
}

#[test]
fn env_add_reads_the_pasted_line_from_standard_input() {
    let (_env_dir, env_home) = fresh_home();
    let (_host_dir, host_home) = fresh_home();
    let out = voxa(&env_home, &["env", "issue", "--json", "--relay", "http://127.0.0.1:1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let issued: Value = serde_json::from_slice(&out.stdout).unwrap();
    let line = issued["line"].as_str().unwrap();

    let mut child = voxa_cmd(&host_home)
        .args(["env", "add", "-", "--name", "devbox", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{line}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let added: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((added["name"].as_str(), added["envKey"].as_str()), (Some("devbox"), issued["envKey"].as_str()));

    // Nothing on standard input: a usage error, not a hang.
    let out = voxa_cmd(&host_home).args(["env", "add", "-"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_pasted_pairing_link_never_reaches_an_error() {
    let code = "0123456789abcdef0123456789abcdef";
    let token = "fedcba9876543210fedcba9876543210";
    let (_dir, home) = fresh_home();
    for relay in [
        format!("htps://relay.example/?code={code}&token={token}"),
        format!("https://relay example/?code={code}&token={token}"),
        format!("https://relay.example/?code={code}&token={token}"),
        format!("http://relay.example/#code={code}&token={token}"),
    ] {
        let out = voxa(&home, &["pair", "--no-qr", "--relay", &relay]);
        assert_eq!(out.status.code(), Some(2), "{relay}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(token) && !stderr.contains(code), "{stderr}");
        assert!(stderr.contains("relay"), "{stderr}");
    }
}

#[test]
fn run_warns_when_the_workspace_holds_the_voxa_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(".voxa");
    let mut command = voxa_cmd(&home);
    command.args(["run", "--json", "--relay", "http://127.0.0.1:1", "--workspace"]).arg(dir.path());
    let mut run = RunningVoxa::start(command);
    let warning = run.wait_event("warning");
    assert_eq!(warning["warning"], "home-in-workspace", "{warning}");
}

/// `voxa` takes the secret variables out of its environment at start (`EnvSecrets::take`), so a
/// later `std::env::var` of one finds nothing: every reader must use what was taken.
#[test]
fn secret_variables_are_read_only_where_they_are_taken() {
    fn sources(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path);
            }
        }
    }
    let mut files = Vec::new();
    sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut readers = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for name in voxa::secret::SECRET_ENV {
            for call in ["env::var(", "env::var_os("] {
                if text.contains(&format!("{call}\"{name}\")")) {
                    readers.push(format!("{} reads {name}", file.display()));
                }
            }
        }
    }
    assert!(readers.is_empty(), "use Settings::env_secrets instead: {readers:?}");
}
