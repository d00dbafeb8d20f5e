//! The workspace fence under attack: a local process swapping directories for symlinks while the
//! file tools run, the voxa home inside the workspace, and how files come into being.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use voxa::approvals::Broker;
use voxa::config::{AgentCommand, Config, ProcessLimits};
use voxa::protocol::{ErrorCode, ToolError};
use voxa::tools::{Dispatcher, ToolRequest, Toolbox, ToolboxOptions};

use crate::support::harness::*;

/// Symlink swaps (and file tool rounds) the race test runs at least.
const SWAPS: usize = 3000;

fn toolbox(workspace: &Path, config: Config) -> Toolbox {
    Toolbox::new(ToolboxOptions { workspace: workspace.to_path_buf(), config, ..Default::default() }).unwrap()
}

async fn call(toolbox: &Toolbox, name: &str, args: Value) -> Result<Value, ToolError> {
    call_until(toolbox, name, args, CancellationToken::new()).await
}

async fn call_until(toolbox: &Toolbox, name: &str, args: Value, cancel: CancellationToken) -> Result<Value, ToolError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let request = ToolRequest {
        id: format!("f{}", NEXT.fetch_add(1, Ordering::Relaxed)),
        name: name.into(),
        args,
        env: None,
        caller: "loopback".into(),
        progress: None,
        cancel,
        viewer: None,
    };
    Dispatcher::new(toolbox.clone(), Broker::new(Default::default()), None)
        .dispatch(request)
        .await
        .map(|output| output.result)
}

/// Names in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_swaps_never_lead_read_list_or_write_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, outside) = (tmp.path().join("ws"), tmp.path().join("outside"));
    std::fs::create_dir_all(ws.join("d")).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(ws.join("d/note.txt"), "inside").unwrap();
    std::fs::write(outside.join("note.txt"), "OUTSIDE").unwrap();
    std::fs::write(outside.join("outside-only.txt"), "OUTSIDE").unwrap();
    // `d` and `x` trade places atomically, over and over: `d` is a real directory one moment and a
    // symlink to the outside directory the next.
    symlink(&outside, ws.join("x")).unwrap();
    let toolbox = toolbox(&ws, Config::default());

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, ws) = (stop.clone(), swaps.clone(), ws.clone());
        std::thread::spawn(move || {
            let cwd = rustix::fs::CWD;
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(cwd, ws.join("d"), cwd, ws.join("x"), rustix::fs::RenameFlags::EXCHANGE)
                    .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let (mut reads, mut lists, mut writes, mut rounds) = (0, 0, 0, 0);
    let mut leaks = Vec::new();
    while rounds < SWAPS || swaps.load(Ordering::Relaxed) < SWAPS {
        rounds += 1;
        if let Ok(result) = call(&toolbox, "read_file", json!({"path": "d/note.txt"})).await {
            reads += 1;
            if result["content"] != "inside" {
                leaks.push(format!("read_file returned {}", result["content"]));
            }
        }
        if let Ok(result) = call(&toolbox, "list_dir", json!({"path": "d"})).await {
            lists += 1;
            if result["entries"].as_array().unwrap().iter().any(|entry| entry["name"] == "outside-only.txt") {
                leaks.push("list_dir listed the outside directory".to_owned());
            }
        }
        let written = call(&toolbox, "write_file", json!({"path": format!("d/w{rounds}.txt"), "content": "w"})).await;
        if written.is_ok() {
            writes += 1;
        }
        if leaks.len() > 20 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    let outside_now = names(&outside);
    assert_eq!(outside_now, ["note.txt", "outside-only.txt"], "files appeared outside the workspace");
    assert!(leaks.is_empty(), "{} leaks in {rounds} rounds, first: {:?}", leaks.len(), leaks.first());
    // The race was real: every tool also succeeded while `d` was the directory.
    assert!(reads > 0 && lists > 0 && writes > 0, "reads {reads}, lists {lists}, writes {writes}");
}

#[tokio::test]
async fn the_voxa_home_inside_the_workspace_is_out_of_reach() {
    // The layout of `voxa run` started in the home directory: the state directory is in the
    // workspace.
    let agent = TestAgent::start_with(None, |options| {
        options.workspace = options.home.dir().parent().unwrap().canonicalize().unwrap();
    })
    .await;
    let home = agent.agent.ctx.toolbox().workspace().join("voxa");
    assert!(home.join("auth_token").exists());
    symlink("voxa", agent.agent.ctx.toolbox().workspace().join("innocent")).unwrap();
    let absolute = home.join("relay_code").display().to_string();
    let mut client = agent.local_client().await;
    let calls = [
        json!({"name": "read_file", "args": {"path": "voxa/auth_token"}}),
        json!({"name": "read_file", "args": {"path": "innocent/auth_token"}}),
        json!({"name": "read_file", "args": {"path": absolute}}),
        json!({"name": "read_file", "args": {"path": "voxa/../voxa/config.toml"}}),
        json!({"name": "list_dir", "args": {"path": "voxa"}}),
        json!({"name": "list_dir", "args": {"path": "innocent/audit"}}),
        json!({"name": "write_file", "args": {"path": "voxa/.pairings.json", "content": "{}"}}),
        json!({"name": "write_file", "args": {"path": "innocent/new/x", "content": "x", "create_dirs": true}}),
        json!({"name": "write_file", "args": {"path": "voxa", "content": "x"}}),
        json!({"name": "run_command", "args": {"command": "true", "cwd": "voxa"}}),
    ];
    for (index, call) in calls.iter().enumerate() {
        let id = format!("p{index}");
        send(&mut client, json!({"type": "tool_call", "id": id, "name": call["name"], "args": call["args"]})).await;
        let result = recv_result(&mut client, &id).await;
        assert_eq!(result["error"]["code"], "protected-path", "{call}: {result}");
        assert!(!result.to_string().contains(agent.token()), "{result}");
    }
    assert!(!home.join(".pairings.json").exists() && !home.join("new").exists() && home.is_dir());
    // The rest of the workspace works as ever, and the listing of its root names the home only.
    send(&mut client, json!({"type": "tool_call", "id": "ok", "name": "list_dir", "args": {}})).await;
    let listing = recv_result(&mut client, "ok").await;
    assert_eq!(listing["ok"], true, "{listing}");
}

/// Cancels a `write_file` while it runs, over and over: whenever the answer is `cancelled` the
/// file is untouched, whenever it is a result the file holds the new content. A one-thread blocking
/// pool lets the test wait for the write itself to end, not only for its answer.
#[test]
fn a_cancelled_write_either_did_not_write_or_says_it_wrote() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(1).build().unwrap();
    runtime.block_on(async {
        let tmp = tempfile::tempdir().unwrap();
        let toolbox = toolbox(tmp.path(), Config::default());
        let content = "x".repeat(4 << 20);
        let (mut cancelled, mut written) = (0, 0);
        for round in 0..40 {
            let name = format!("f{round}.txt");
            std::fs::write(tmp.path().join(&name), "old").unwrap();
            let cancel = CancellationToken::new();
            let canceller = tokio::spawn({
                let cancel = cancel.clone();
                async move {
                    for _ in 0..round % 4 {
                        tokio::task::yield_now().await;
                    }
                    cancel.cancel();
                }
            });
            let args = json!({"path": name, "content": content});
            let answer = call_until(&toolbox, "write_file", args, cancel).await;
            canceller.await.unwrap();
            // Queued behind the write on the single blocking thread: runs once it has ended.
            tokio::task::spawn_blocking(|| ()).await.unwrap();
            let now = std::fs::read_to_string(tmp.path().join(&name)).unwrap();
            match answer {
                Ok(result) => {
                    written += 1;
                    assert_eq!(result["bytes_written"], content.len());
                    assert_eq!(now.len(), content.len(), "round {round}: answered written, file unchanged");
                }
                Err(err) => {
                    assert_eq!(err.code, ErrorCode::Cancelled, "{err}");
                    cancelled += 1;
                    let replaced = now != "old";
                    assert!(!replaced, "round {round}: answered cancelled, yet the file now has {} bytes", now.len());
                }
            }
        }
        assert!(cancelled > 0, "no write was cancelled ({written} written)");
        let leftovers = names(tmp.path()).into_iter().filter(|name| name.ends_with(".tmp")).count();
        assert_eq!(leftovers, 0, "temporary files left behind");
    });
}

#[tokio::test]
async fn read_only_covers_every_fleet_action_that_changes_pairings() {
    let agent = TestAgent::start_with(None, |options| options.config.policy.read_only = true).await;
    let home = voxa::state::Home::at(agent.home.path().join("voxa"));
    // Even a caller holding the real host token is refused: read-only speaks first.
    let host_token = voxa::environments::store::load_or_create_host_token(&home).unwrap();
    let mut client = agent.local_client().await;
    for action in ["remove", "revoke", "rename"] {
        let args = json!({"action": action, "target": "devbox", "host_token": host_token.expose()});
        send(&mut client, json!({"type": "tool_call", "id": action, "name": "fleet", "args": args})).await;
        let result = recv_result(&mut client, action).await;
        assert_eq!(result["error"]["code"], "denied-by-policy", "{action}: {result}");
    }
    send(&mut client, json!({"type": "tool_call", "id": "list", "name": "fleet", "args": {"action": "list"}})).await;
    let listed = recv_result(&mut client, "list").await;
    assert_eq!(listed["ok"], true, "{listed}");
    // Routed to an environment, `fleet` is judged the same way before anything is sent.
    let args = json!({"action": "revoke", "target": "x"});
    send(&mut client, json!({"type": "tool_call", "id": "routed", "name": "fleet", "args": args, "env": "devbox"}))
        .await;
    assert_eq!(recv_result(&mut client, "routed").await["error"]["code"], "denied-by-policy");
}

#[tokio::test]
async fn a_prompt_that_looks_like_an_option_needs_a_double_dash_in_the_agent_args() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    // `echo` takes `-e`, `-n`… as options; after `--`… it does not know `--` either, so a shell
    // script stands in for an agent that parses options the usual way.
    let script = "while [ $# -gt 0 ]; do case $1 in --) shift; break;; -*) echo \"option $1\"; shift;; *) break;; esac; done; echo \"prompt $*\"";
    for (name, double_dash) in [("bare", false), ("guarded", true)] {
        let mut args = vec!["-c".to_owned(), script.to_owned(), "agent".to_owned()];
        if double_dash {
            args.push("--".into());
        }
        args.push("{prompt}".into());
        config.agents.insert(name.into(), AgentCommand { program: "/bin/sh".into(), args, format: "text".into() });
    }
    let toolbox = toolbox(tmp.path(), config);
    let ask = |agent: &'static str, prompt: &'static str| {
        let toolbox = toolbox.clone();
        async move { call(&toolbox, "coding_agent", json!({"agent": agent, "prompt": prompt})).await }
    };
    let refused = ask("bare", "--dangerously-skip-permissions").await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::InvalidArgs, "{refused}");
    assert!(refused.message.contains("--"), "{refused}");
    assert_eq!(ask("bare", "fix the build").await.unwrap()["text"], "prompt fix the build\n");
    let guarded = ask("guarded", "--dangerously-skip-permissions").await.unwrap();
    assert_eq!(guarded["text"], "prompt --dangerously-skip-permissions\n");
}

/// `(soft, hard)` of one line of `/proc/self/limits`, as printed by a tool process.
fn limit(limits: &str, name: &str) -> (String, String) {
    let line = limits.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {limits}"));
    let mut fields = line[name.len()..].split_whitespace();
    (fields.next().unwrap().to_owned(), fields.next().unwrap().to_owned())
}

#[tokio::test]
async fn tool_processes_run_under_the_configured_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config =
        Config { limits: ProcessLimits { max_processes: 321, max_address_space_mb: 1234 }, ..Default::default() };
    config.agents.insert(
        "limits".into(),
        AgentCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "cat /proc/self/limits".into(), "agent".into(), "--".into(), "{prompt}".into()],
            format: "text".into(),
        },
    );
    let toolbox = toolbox(tmp.path(), config);
    let command = call(&toolbox, "run_command", json!({"command": "cat /proc/self/limits"})).await.unwrap();
    let agent = call(&toolbox, "coding_agent", json!({"agent": "limits", "prompt": "x"})).await.unwrap();
    let bytes = (1234u64 << 20).to_string();
    for limits in [command["output"].as_str().unwrap(), agent["text"].as_str().unwrap()] {
        // Soft and hard: a tool process cannot raise them again.
        assert_eq!(limit(limits, "Max processes"), ("321".to_owned(), "321".to_owned()), "{limits}");
        assert_eq!(limit(limits, "Max address space"), (bytes.clone(), bytes.clone()), "{limits}");
    }
    // The defaults apply without any configuration.
    let toolbox = self::toolbox(tmp.path(), Config::default());
    let command = call(&toolbox, "run_command", json!({"command": "cat /proc/self/limits"})).await.unwrap();
    let default_bytes = (voxa::config::DEFAULT_MAX_ADDRESS_SPACE_MB << 20).to_string();
    assert_eq!(limit(command["output"].as_str().unwrap(), "Max address space").1, default_bytes);
}

/// The mode a file is created with is only visible at the system call, so the agent runs under
/// `strace`: every temporary file `write_file` creates must be 0600 from its first byte, before
/// any content is in it, whatever mode the file it replaces has.
#[test]
fn write_file_creates_its_temporary_files_0600() {
    if !crate::support::installed("strace", "strace") {
        return;
    }
    let (dir, home) = crate::support::run::fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let private = workspace.path().join("private.txt");
    std::fs::write(&private, "old").unwrap();
    std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let trace = dir.path().join("trace");
    let wrapper = ["strace", "-f", "-qq", "-e", "trace=openat,openat2", "-o", trace.to_str().unwrap()];
    let mut command = crate::support::voxa_cmd_via(&home, &wrapper);
    command.args(["run", "--json", "--relay", "http://127.0.0.1:1", "--workspace"]).arg(workspace.path());
    let mut run = crate::support::RunningVoxa::start(command);
    let agent_file: Value = serde_json::from_slice(&std::fs::read(home.join("agent.json")).unwrap()).unwrap();
    let agent_pid = agent_file["pid"].as_i64().unwrap();

    for args in ["path=private.txt", "path=public.txt"] {
        let out = crate::support::voxa(&home, &["call", "write_file", args, "content=new"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // Stop the agent itself (strace follows it out and finishes the trace).
    let pid = rustix::process::Pid::from_raw(agent_pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert!(crate::support::wait_with_deadline(&mut run.child, STEP).success());

    let trace = std::fs::read_to_string(trace).unwrap();
    let created: Vec<&str> = trace.lines().filter(|line| line.contains(".voxa-") && line.contains("O_CREAT")).collect();
    assert_eq!(created.len(), 2, "{trace}");
    for line in created {
        assert!(line.contains(", 0600)"), "temporary file not created 0600: {line}");
    }
    assert_eq!(std::fs::read_to_string(&private).unwrap(), "new");
    let mode = std::fs::metadata(&private).unwrap().permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
    assert!(workspace.path().join("public.txt").exists());
    drop(dir);
}
