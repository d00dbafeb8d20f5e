//! The tools, called through the `Dispatcher` as a session would call them: each happy path next to the
//! attacks on it.

use std::ffi::OsString;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use voxa::approvals::Broker;
use voxa::audit::Audit;
use voxa::config::{AgentCommand, Config, Policy};
use voxa::protocol::{ErrorCode, ToolError, OUTPUT_CAP};
use voxa::tools::{Dispatcher, ToolOutput, ToolRequest, Toolbox, ToolboxOptions};

use crate::support::xvfb::Xvfb;

/// A workspace inside a temporary directory, a sibling directory outside it, and the dispatcher
/// of a toolbox there.
struct Fixture {
    tmp: tempfile::TempDir,
    tools: Dispatcher,
}

impl Fixture {
    fn new() -> Self {
        Self::with(Config::default(), test_env(None, None))
    }

    fn with_config(config: Config) -> Self {
        Self::with(config, test_env(None, None))
    }

    fn with(config: Config, env: Vec<(OsString, OsString)>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret.txt"), "outside secret").unwrap();
        let toolbox = Toolbox::new(ToolboxOptions {
            workspace: tmp.path().join("ws"),
            config,
            env: Some(env),
            ..Default::default()
        })
        .unwrap();
        let audit = Some(Audit::new(tmp.path().join("audit")));
        Fixture { tmp, tools: Dispatcher::new(toolbox, Broker::new(Default::default()), audit) }
    }

    fn ws(&self) -> PathBuf {
        self.tmp.path().join("ws")
    }

    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }

    async fn call(&self, name: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.tools.dispatch(request(name, args)).await
    }

    async fn ok(&self, name: &str, args: Value) -> Value {
        match self.call(name, args.clone()).await {
            Ok(output) => output.result,
            Err(err) => panic!("{name} {args} failed: {err}"),
        }
    }

    async fn err(&self, name: &str, args: Value) -> ToolError {
        match self.call(name, args.clone()).await {
            Ok(output) => panic!("{name} {args} should fail, got {}", output.result),
            Err(err) => err,
        }
    }

    /// Every audit line written so far, and the raw text.
    fn audit(&self) -> (Vec<Value>, String) {
        let mut text = String::new();
        if let Ok(entries) = std::fs::read_dir(self.tmp.path().join("audit")) {
            for entry in entries {
                text.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
            }
        }
        let lines = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        (lines, text)
    }
}

/// This process's environment with `PATH` replaced (when given) and `DISPLAY` set or removed.
fn test_env(path: Option<&Path>, display: Option<&str>) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(key, _)| key != "DISPLAY" && (path.is_none() || key != "PATH")).collect();
    if let Some(path) = path {
        let system = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
        let mut dirs = vec![path.to_path_buf()];
        dirs.extend(std::env::split_paths(&system));
        env.push(("PATH".into(), std::env::join_paths(dirs).unwrap()));
    }
    if let Some(display) = display {
        env.push(("DISPLAY".into(), display.into()));
    }
    env
}

fn request(name: &str, args: Value) -> ToolRequest {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    ToolRequest {
        id: format!("c{}", NEXT.fetch_add(1, Ordering::Relaxed)),
        name: name.into(),
        args,
        env: None,
        caller: "loopback".into(),
        progress: None,
        cancel: CancellationToken::new(),
        viewer: None,
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// True while the process exists and is not a zombie.
fn is_running(pid: u32) -> bool {
    let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else { return false };
    if rustix::process::test_kill_process(raw).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// Waits (bounded) for every pid to be gone; killing is asynchronous, reaping by init too.
async fn assert_all_gone(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for &pid in pids {
        while is_running(pid) {
            assert!(Instant::now() < deadline, "process {pid} is still running");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Reads progress until every `<key><pid>` appears; returns the pids in order.
async fn pids_from_progress(progress: &mut mpsc::Receiver<String>, keys: &[&str]) -> Vec<u32> {
    let mut seen = String::new();
    loop {
        let pids: Vec<u32> = keys
            .iter()
            .filter_map(|key| {
                let rest = seen.split(key).nth(1)?;
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if rest.len() > digits.len() {
                    digits.parse().ok()
                } else {
                    None
                }
            })
            .collect();
        if pids.len() == keys.len() {
            return pids;
        }
        match tokio::time::timeout(Duration::from_secs(30), progress.recv()).await {
            Ok(Some(chunk)) => seen.push_str(&chunk),
            other => panic!("progress ended before {keys:?} appeared ({other:?}); saw {seen:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Registry, policy, concurrency, audit

#[tokio::test]
async fn unknown_tools_and_bad_arguments_are_named() {
    let fx = Fixture::new();
    let err = fx.err("format_disk", json!({})).await;
    assert_eq!(err.code, ErrorCode::UnknownTool);
    assert!(err.message.contains("format_disk"), "{err}");

    let err = fx.err("run_command", json!({})).await;
    assert_eq!(err.code, ErrorCode::InvalidArgs);
    assert_eq!(err.message, "missing string field `command`");
    let err = fx.err("read_file", json!({"path": 7})).await;
    assert_eq!((err.code, err.message.as_str()), (ErrorCode::InvalidArgs, "field `path` must be a string"));
    let err = fx.err("run_command", json!({"command": "true", "timeout_ms": 0})).await;
    assert!(err.message.contains("`timeout_ms`"), "{err}");
    let err = fx.err("write_file", json!({"path": "a", "content": "b", "mode": "0777"})).await;
    assert!(err.message.starts_with("unknown field `mode`"), "{err}");
    let err = fx.err("run_command", json!({"command": "   "})).await;
    assert_eq!(err.code, ErrorCode::InvalidArgs);
    let err = fx.err("run_command", json!({"command": "x".repeat(voxa::tools::MAX_COMMAND_LEN + 1)})).await;
    assert_eq!(err.code, ErrorCode::TooLarge);

    let (lines, _) = fx.audit();
    assert_eq!(lines.len(), 7, "one audit line per call");
    assert_eq!(lines[0]["outcome"], "unknown-tool");
    assert_eq!(lines[1]["outcome"], "invalid-args");
    assert_eq!(lines[1]["tool"], "run_command");
    assert_eq!(lines[1]["caller"], "loopback");
}

#[tokio::test]
async fn policy_refusals_are_audited_with_their_rule() {
    let read_only =
        Fixture::with_config(Config { policy: Policy { read_only: true, ..Default::default() }, ..Default::default() });
    for (tool, args) in [
        ("write_file", json!({"path": "a.txt", "content": "x"})),
        ("run_command", json!({"command": "touch pwned"})),
        ("coding_agent", json!({"prompt": "delete everything"})),
    ] {
        let err = read_only.err(tool, args).await;
        assert_eq!(err.code, ErrorCode::DeniedByPolicy, "{tool}");
        assert!(err.message.contains("read-only"), "{err}");
    }
    assert!(!read_only.ws().join("a.txt").exists());
    assert!(!read_only.ws().join("pwned").exists());
    read_only.ok("list_dir", json!({})).await;
    let (lines, _) = read_only.audit();
    assert_eq!(lines.len(), 4);
    for line in &lines[..3] {
        assert_eq!(line["outcome"], "denied-by-policy");
        assert_eq!(line["rule"], "denied-by-policy");
        assert_eq!(line["policy"], "read_only");
    }
    assert_eq!(lines[3]["outcome"], "ok");
    assert!(lines[3].get("rule").is_none());

    let allow = Fixture::with_config(Config {
        policy: Policy { allow: vec!["read_file".into()], ..Default::default() },
        ..Default::default()
    });
    assert_eq!(allow.err("list_dir", json!({})).await.code, ErrorCode::DeniedByPolicy);
    assert_eq!(allow.err("read_file", json!({"path": "missing"})).await.code, ErrorCode::NotFound);
    assert_eq!(allow.audit().0[0]["policy"], "allow");

    let deny = Fixture::with_config(Config {
        policy: Policy { deny: vec!["run_command".into()], ..Default::default() },
        ..Default::default()
    });
    // Refused before its arguments are even looked at.
    assert_eq!(deny.err("run_command", json!({"nonsense": true})).await.code, ErrorCode::DeniedByPolicy);
    assert_eq!(deny.audit().0[0]["policy"], "deny");
    assert!(!deny.tools.tool_names().contains(&"run_command".to_owned()));
}

#[tokio::test]
async fn the_audit_trail_never_holds_contents_or_output() {
    let fx = Fixture::new();
    fx.ok("write_file", json!({"path": "notes.txt", "content": "CONTENT-7f3a9"})).await;
    fx.ok("read_file", json!({"path": "notes.txt"})).await;
    let result = fx.ok("run_command", json!({"command": "echo OUTPUT-$((6000 + 1234))"})).await;
    assert_eq!(result["output"], "OUTPUT-7234\n");
    fx.err("read_file", json!({"path": "../outside/secret.txt"})).await;
    let (lines, text) = fx.audit();
    assert_eq!(lines.len(), 4);
    for needle in ["CONTENT-7f3a9", "OUTPUT-7234", "notes.txt", "outside secret", "secret.txt"] {
        assert!(!text.contains(needle), "audit trail contains {needle:?}:\n{text}");
    }
    for line in &lines {
        let keys: Vec<&str> = line.as_object().unwrap().keys().map(String::as_str).collect();
        for key in &keys {
            assert!(
                ["time", "caller", "tool", "id", "outcome", "duration_ms", "rule", "policy"].contains(key),
                "unexpected audit field {key}"
            );
        }
    }
    assert_eq!(lines[3]["outcome"], "outside-workspace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_commands_are_all_answered() {
    let fx = Fixture::new();
    let calls = (0..50).map(|i| {
        let tools = fx.tools.clone();
        tokio::spawn(async move {
            tools.dispatch(request("run_command", json!({"command": format!("echo call-{i}")}))).await
        })
    });
    let results = futures_util::future::join_all(calls).await;
    for (i, result) in results.into_iter().enumerate() {
        let output = result.unwrap().unwrap_or_else(|err| panic!("call {i}: {err}"));
        assert_eq!(output.result["output"], format!("call-{i}\n"));
        assert_eq!(output.result["exit_code"], 0);
    }
    assert_eq!(fx.audit().0.len(), 50);
    assert_eq!(fx.tools.toolbox().calls_in_flight(), 0);
}

#[tokio::test]
async fn calls_over_the_limit_are_busy_at_once() {
    let fx = Fixture::with_config(Config { max_concurrent_calls: Some(1), ..Default::default() });
    let (tx, mut progress) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let mut first = request("run_command", json!({"command": "echo started; exec sleep 60"}));
    first.progress = Some(tx);
    first.cancel = cancel.clone();
    let tools = fx.tools.clone();
    let running = tokio::spawn(async move { tools.dispatch(first).await });
    assert_eq!(progress.recv().await.unwrap(), "started\n");

    let started = Instant::now();
    let err = fx.err("read_file", json!({"path": "x"})).await;
    assert_eq!(err.code, ErrorCode::Busy);
    assert!(started.elapsed() < Duration::from_secs(5), "busy must not wait for a slot");

    cancel.cancel();
    assert_eq!(running.await.unwrap().unwrap_err().code, ErrorCode::Cancelled);
    assert_eq!(fx.err("read_file", json!({"path": "x"})).await.code, ErrorCode::NotFound);
}

// ---------------------------------------------------------------------------------------------
// Files

#[tokio::test]
async fn files_are_written_read_and_listed() {
    let fx = Fixture::new();
    let written =
        fx.ok("write_file", json!({"path": "src/lib.rs", "content": "pub fn f() {}\n", "create_dirs": true})).await;
    assert_eq!((written["path"].as_str(), written["bytes_written"].as_u64()), (Some("src/lib.rs"), Some(14)));
    assert_eq!(written["size"], 14);
    assert_eq!(std::fs::read_to_string(fx.ws().join("src/lib.rs")).unwrap(), "pub fn f() {}\n");

    let read = fx.ok("read_file", json!({"path": "src/lib.rs"})).await;
    assert_eq!(read["content"], "pub fn f() {}\n");
    assert_eq!(read["size"], 14);
    assert_eq!(read["truncated"], false);
    assert_eq!(read["encoding"], "utf-8");
    let absolute = fx.ws().join("src/lib.rs");
    assert_eq!(fx.ok("read_file", json!({"path": absolute})).await["path"], "src/lib.rs");

    fx.ok("write_file", json!({"path": "src/lib.rs", "content": "replaced"})).await;
    assert_eq!(std::fs::read_to_string(fx.ws().join("src/lib.rs")).unwrap(), "replaced");

    symlink("src/lib.rs", fx.ws().join("link")).unwrap();
    std::fs::create_dir(fx.ws().join("empty")).unwrap();
    let listed = fx.ok("list_dir", json!({})).await;
    assert_eq!(
        listed["entries"],
        json!([
            {"name": "empty", "kind": "dir", "size": 0},
            {"name": "link", "kind": "symlink", "size": 0},
            {"name": "src", "kind": "dir", "size": 0},
        ])
    );
    let listed = fx.ok("list_dir", json!({"path": "src"})).await;
    assert_eq!(listed["entries"], json!([{"name": "lib.rs", "kind": "file", "size": 8}]));

    // Writing through a symlink inside the workspace changes its target, not the link.
    fx.ok("write_file", json!({"path": "link", "content": "via link"})).await;
    assert_eq!(std::fs::read_to_string(fx.ws().join("src/lib.rs")).unwrap(), "via link");
    assert!(std::fs::symlink_metadata(fx.ws().join("link")).unwrap().file_type().is_symlink());
}

#[tokio::test]
async fn missing_things_are_not_found() {
    let fx = Fixture::new();
    assert_eq!(fx.err("read_file", json!({"path": "nope.txt"})).await.code, ErrorCode::NotFound);
    assert_eq!(fx.err("list_dir", json!({"path": "nope"})).await.code, ErrorCode::NotFound);
    let err = fx.err("write_file", json!({"path": "new/dir/file.txt", "content": "x"})).await;
    assert_eq!(err.code, ErrorCode::NotFound);
    assert!(err.message.contains("create_dirs"), "{err}");
    assert!(!fx.ws().join("new").exists());
    assert_eq!(fx.err("run_command", json!({"command": "true", "cwd": "nope"})).await.code, ErrorCode::NotFound);
    assert_eq!(fx.err("read_file", json!({"path": "."})).await.code, ErrorCode::InvalidArgs);
}

#[tokio::test]
async fn huge_files_are_read_only_up_to_the_cap() {
    let fx = Fixture::new();
    let file = std::fs::File::create(fx.ws().join("huge.log")).unwrap();
    file.set_len(4 << 30).unwrap(); // sparse: 4 GiB that take no disk
    let read = fx.ok("read_file", json!({"path": "huge.log"})).await;
    assert_eq!(read["size"], 4u64 << 30);
    assert_eq!(read["truncated"], true);
    assert_eq!(read["content"].as_str().unwrap().len(), OUTPUT_CAP);

    std::fs::write(fx.ws().join("small.txt"), "0123456789").unwrap();
    let read = fx.ok("read_file", json!({"path": "small.txt", "max_bytes": 4})).await;
    assert_eq!((read["content"].as_str(), read["truncated"].as_bool()), (Some("0123"), Some(true)));
    let read = fx.ok("read_file", json!({"path": "small.txt", "max_bytes": 10_000_000_000u64})).await;
    assert_eq!((read["content"].as_str(), read["truncated"].as_bool()), (Some("0123456789"), Some(false)));
}

#[tokio::test]
async fn binary_files_travel_as_base64_both_ways() {
    let fx = Fixture::new();
    std::fs::write(fx.ws().join("blob.bin"), [0u8, 159, 146, 150, 255]).unwrap();
    let read = fx.ok("read_file", json!({"path": "blob.bin"})).await;
    assert_eq!(read["encoding"], "base64");
    assert_eq!(read["content"], "AJ+Slv8=");
    fx.ok("write_file", json!({"path": "copy.bin", "content": "AJ+Slv8=", "encoding": "base64"})).await;
    assert_eq!(std::fs::read(fx.ws().join("copy.bin")).unwrap(), [0u8, 159, 146, 150, 255]);
    let err = fx.err("write_file", json!({"path": "x", "content": "***", "encoding": "base64"})).await;
    assert_eq!(err.code, ErrorCode::InvalidArgs);
}

#[tokio::test]
async fn oversized_writes_are_too_large() {
    let fx = Fixture::new();
    let content = "x".repeat(voxa::tools::MAX_WRITE_LEN + 1);
    assert_eq!(fx.err("write_file", json!({"path": "big", "content": content})).await.code, ErrorCode::TooLarge);
    assert!(!fx.ws().join("big").exists());
}

#[tokio::test]
async fn dot_dot_and_absolute_paths_cannot_leave_the_workspace() {
    let fx = Fixture::new();
    let outside_file = fx.outside().join("secret.txt");
    let attempts = [
        ("read_file", json!({"path": "../outside/secret.txt"})),
        ("read_file", json!({"path": outside_file})),
        ("read_file", json!({"path": "/etc/passwd"})),
        ("list_dir", json!({"path": ".."})),
        ("list_dir", json!({"path": "/"})),
        ("write_file", json!({"path": "../outside/secret.txt", "content": "pwned"})),
        ("write_file", json!({"path": "../outside/new.txt", "content": "pwned"})),
        ("write_file", json!({"path": "a/../../outside/new.txt", "content": "pwned", "create_dirs": true})),
        ("run_command", json!({"command": "true", "cwd": ".."})),
        ("coding_agent", json!({"prompt": "hi", "cwd": "/tmp"})),
    ];
    for (tool, args) in attempts {
        let err = fx.err(tool, args.clone()).await;
        assert_eq!(err.code, ErrorCode::OutsideWorkspace, "{tool} {args}: {err}");
    }
    assert_eq!(std::fs::read_to_string(&outside_file).unwrap(), "outside secret");
    assert!(!fx.outside().join("new.txt").exists());
    assert!(!fx.ws().join("a").exists());
}

#[tokio::test]
async fn symlinks_cannot_lead_outside_the_workspace() {
    let fx = Fixture::new();
    let ws = fx.ws();
    symlink(fx.outside(), ws.join("out_dir")).unwrap();
    symlink(fx.outside().join("secret.txt"), ws.join("out_file")).unwrap();
    symlink(fx.outside().join("planted.txt"), ws.join("out_dangling")).unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    symlink("../../outside", ws.join("sub/relative_out")).unwrap();
    let attempts = [
        ("read_file", json!({"path": "out_file"})),
        ("read_file", json!({"path": "out_dir/secret.txt"})),
        ("read_file", json!({"path": "sub/relative_out/secret.txt"})),
        ("list_dir", json!({"path": "out_dir"})),
        ("write_file", json!({"path": "out_file", "content": "pwned"})),
        ("write_file", json!({"path": "out_dir/secret.txt", "content": "pwned"})),
        ("write_file", json!({"path": "out_dir/new.txt", "content": "pwned"})),
        ("write_file", json!({"path": "out_dangling", "content": "pwned"})),
        ("write_file", json!({"path": "out_dir/deep/new.txt", "content": "pwned", "create_dirs": true})),
        ("run_command", json!({"command": "touch pwned", "cwd": "out_dir"})),
        // Backing out of a missing directory must not skip the link check that follows.
        ("write_file", json!({"path": "missing/../out_dir/new.txt", "content": "pwned"})),
        ("write_file", json!({"path": "a/b/../../out_dir/deep/new.txt", "content": "pwned", "create_dirs": true})),
        ("read_file", json!({"path": "missing/../out_file"})),
        ("list_dir", json!({"path": "missing/../out_dir"})),
    ];
    for (tool, args) in attempts {
        let err = fx.err(tool, args.clone()).await;
        assert_eq!(err.code, ErrorCode::OutsideWorkspace, "{tool} {args}: {err}");
    }
    assert_eq!(std::fs::read_to_string(fx.outside().join("secret.txt")).unwrap(), "outside secret");
    let outside: Vec<_> = std::fs::read_dir(fx.outside()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(outside, ["secret.txt"], "something was created outside the workspace");
    // The links themselves are still listed, as links.
    let listed = fx.ok("list_dir", json!({})).await;
    assert_eq!(listed["entries"][0], json!({"name": "out_dangling", "kind": "symlink", "size": 0}));
}

// ---------------------------------------------------------------------------------------------
// run_command

#[tokio::test]
async fn commands_run_in_a_terminal_in_the_workspace() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.ws().join("sub")).unwrap();
    let result = fx.ok("run_command", json!({"command": "pwd; [ -t 1 ] && echo tty; exit 7", "cwd": "sub"})).await;
    let real = std::fs::canonicalize(fx.ws().join("sub")).unwrap();
    assert_eq!(result["output"], format!("{}\ntty\n", real.display()));
    assert_eq!(result["exit_code"], 7);
    assert_eq!(result["truncated"], false);
    assert_eq!(result["timed_out"], false);
    assert!(result["duration_ms"].is_u64());
}

#[tokio::test]
async fn ansi_escapes_are_stripped_from_output_and_progress() {
    let fx = Fixture::new();
    let (tx, mut progress) = mpsc::channel(64);
    let mut call = request(
        "run_command",
        json!({"command": "printf '\\033[1;31mred\\033[0m \\033]0;title\\007plain\\n'; printf '\\033[2K\\033[1Gdone\\n'"}),
    );
    call.progress = Some(tx);
    let output = fx.tools.dispatch(call).await.unwrap();
    assert_eq!(output.result["output"], "red plain\ndone\n");
    let mut streamed = String::new();
    while let Ok(chunk) = progress.try_recv() {
        streamed.push_str(&chunk);
    }
    assert_eq!(streamed, "red plain\ndone\n");
}

#[tokio::test]
async fn output_is_capped_while_the_command_runs_to_the_end() {
    let fx = Fixture::new();
    // 3 MiB through the terminal: far past the cap, and the command must not block on a full pipe.
    let result = fx
        .ok(
            "run_command",
            json!({"command": "head -c 3145728 /dev/zero | tr '\\0' a; echo; echo finished >&2; exit 4"}),
        )
        .await;
    assert_eq!(result["truncated"], true);
    assert_eq!(result["exit_code"], 4);
    // The first and the last 128 KiB, with the line that counts what was left out between.
    let output = result["output"].as_str().unwrap();
    let omitted = result["omitted_bytes"].as_u64().unwrap() as usize;
    let marker = format!("\n[\u{2026} {omitted} bytes left out \u{2026}]\n");
    let (head, tail) = output.split_once(&marker).unwrap();
    assert_eq!((head.len(), tail.len()), (OUTPUT_CAP / 2, OUTPUT_CAP / 2));
    assert!(head.bytes().all(|b| b == b'a'));
    // The end is what a build log's reader needs: here the line the command wrote last.
    let tail = tail.strip_suffix("\nfinished\n").unwrap();
    assert!(tail.bytes().all(|b| b == b'a'));
    assert_eq!(OUTPUT_CAP + omitted, 3145728 + "\nfinished\n".len(), "every byte is kept or counted");
}

#[tokio::test]
async fn private_variables_are_not_passed_to_commands() {
    let mut env = test_env(None, None);
    env.push(("VOXA_RELAY_TOKEN".into(), "relay-token-value".into()));
    env.push(("GEMINI_API_KEY".into(), "gemini-key-value".into()));
    env.push(("VISIBLE".into(), "yes".into()));
    let fx = Fixture::with(Config::default(), env);
    let result =
        fx.ok("run_command", json!({"command": "echo \"[$VOXA_RELAY_TOKEN][$GEMINI_API_KEY][$VISIBLE]\""})).await;
    assert_eq!(result["output"], "[][][yes]\n");
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let fx = Fixture::new();
    let (tx, mut progress) = mpsc::channel(64);
    let mut call = request(
        "run_command",
        // Deaf to SIGHUP, so only a real kill stops them.
        json!({"command": "trap '' HUP; sleep 300 & echo child=$! shell=$$; wait", "timeout_ms": 5000}),
    );
    call.progress = Some(tx);
    let tools = fx.tools.clone();
    let running = tokio::spawn(async move { tools.dispatch(call).await });
    let pids = pids_from_progress(&mut progress, &["child=", "shell="]).await;
    let err = running.await.unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout);
    assert!(err.message.contains("5000 ms"), "{err}");
    assert!(err.message.contains("child="), "the message quotes the last output: {err}");
    assert_all_gone(&pids).await;
    assert_eq!(fx.audit().0[0]["outcome"], "timeout");
}

#[tokio::test]
async fn cancel_kills_the_whole_session_even_jobs_in_other_groups() {
    let fx = Fixture::new();
    let (tx, mut progress) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    // `set -m` puts the background job in a process group of its own.
    let mut call =
        request("run_command", json!({"command": "trap '' HUP; set -m; sleep 300 & echo job=$! shell=$$; sleep 301"}));
    call.progress = Some(tx);
    call.cancel = cancel.clone();
    let tools = fx.tools.clone();
    let started = Instant::now();
    let running = tokio::spawn(async move { tools.dispatch(call).await });
    let pids = pids_from_progress(&mut progress, &["job=", "shell="]).await;
    cancel.cancel();
    let err = running.await.unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_all_gone(&pids).await;
    assert_eq!(fx.audit().0[0]["outcome"], "cancelled");
}

#[tokio::test]
async fn background_processes_do_not_outlive_their_command() {
    let fx = Fixture::new();
    // Ignoring SIGHUP (inherited by the job) means the terminal hanging up cannot be what stops it.
    let result = fx.ok("run_command", json!({"command": "trap '' HUP; sleep 300 & echo left=$!"})).await;
    let left: u32 = result["output"].as_str().unwrap().trim().trim_start_matches("left=").parse().unwrap();
    assert_all_gone(&[left]).await;
}

#[tokio::test]
async fn a_process_that_escapes_the_session_cannot_hold_the_call_open() {
    let fx = Fixture::new();
    // `setsid` leaves the session (out of any agent's reach) but keeps the terminal open. The shell
    // waits until the escape is done, so the kill at its exit cannot win the race.
    let started = Instant::now();
    let command = "setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' & \
                   while [ ! -s escaped.pid ]; do :; done; echo escaped=$(cat escaped.pid)";
    let result = fx.ok("run_command", json!({ "command": command })).await;
    let elapsed = started.elapsed();
    let escaped: u32 = result["output"].as_str().unwrap().trim().trim_start_matches("escaped=").parse().unwrap();
    assert!(is_running(escaped), "the escaped process should still be running (it is not ours to kill)");
    if let Some(pid) = rustix::process::Pid::from_raw(escaped as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    assert_eq!(result["exit_code"], 0);
    assert!(elapsed < Duration::from_secs(30), "the call waited {elapsed:?} for a process it does not own");
}

// ---------------------------------------------------------------------------------------------
// coding_agent

fn agent_fixture() -> Fixture {
    Fixture::with(Config::default(), test_env(Some(&fixtures()), None))
}

#[tokio::test]
async fn the_coding_agent_streams_progress_and_returns_its_answer() {
    let fx = agent_fixture();
    std::fs::create_dir(fx.ws().join("app")).unwrap();
    let (tx, mut progress) = mpsc::channel(64);
    let mut call =
        request("coding_agent", json!({"prompt": "--dangerously-skip-permissions fix the build", "cwd": "app"}));
    call.progress = Some(tx);
    let output = fx.tools.dispatch(call).await.unwrap();
    // A prompt that looks like a flag arrives as the prompt.
    assert_eq!(output.result["text"], "Done: --dangerously-skip-permissions fix the build");
    assert_eq!(output.result["exit_code"], 0);
    let mut streamed = String::new();
    while let Ok(chunk) = progress.try_recv() {
        streamed.push_str(&chunk);
    }
    let real = std::fs::canonicalize(fx.ws().join("app")).unwrap();
    assert_eq!(streamed, format!("I will look at the workspace first.\nWorking in {}.\n", real.display()));
    let (lines, text) = fx.audit();
    assert_eq!(lines[0]["outcome"], "ok");
    assert!(!text.contains("fix the build"));
}

#[tokio::test]
async fn a_failing_coding_agent_explains_itself() {
    let fx = agent_fixture();
    let result = fx.ok("coding_agent", json!({"prompt": "this will fail"})).await;
    assert_eq!(result["exit_code"], 1);
    assert!(result["text"].as_str().unwrap().contains("Invalid API key"), "{result}");
}

#[tokio::test]
async fn a_missing_coding_agent_is_unavailable() {
    let empty = tempfile::tempdir().unwrap();
    let mut env = test_env(None, None);
    env.retain(|(key, _)| key != "PATH");
    env.push(("PATH".into(), empty.path().into()));
    let fx = Fixture::with(Config::default(), env);
    let err = fx.err("coding_agent", json!({"prompt": "hello"})).await;
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("claude"), "{err}");
    let err = fx.err("coding_agent", json!({"prompt": "hello", "agent": "nobody"})).await;
    assert_eq!(err.code, ErrorCode::InvalidArgs);
}

#[tokio::test]
async fn cancel_stops_the_coding_agent_and_its_children() {
    let fx = agent_fixture();
    let (tx, mut progress) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let mut call = request("coding_agent", json!({"prompt": "a slow task"}));
    call.progress = Some(tx);
    call.cancel = cancel.clone();
    let tools = fx.tools.clone();
    let running = tokio::spawn(async move { tools.dispatch(call).await });
    let pids = pids_from_progress(&mut progress, &["pid ", "helper "]).await;
    cancel.cancel();
    assert_eq!(running.await.unwrap().unwrap_err().code, ErrorCode::Cancelled);
    assert_all_gone(&pids).await;
}

#[tokio::test]
async fn configured_text_agents_run_with_the_prompt_in_place() {
    let mut config = Config::default();
    config.agents.insert(
        "echo".into(),
        AgentCommand {
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "printf '\\033[1manswer\\033[0m: %s\\n' \"$1\"".into(),
                "sh".into(),
                "{prompt}".into(),
            ],
            format: "text".into(),
        },
    );
    let fx = Fixture::with_config(config);
    let result = fx.ok("coding_agent", json!({"prompt": "$(touch pwned)", "agent": "echo"})).await;
    assert_eq!(result["text"], "answer: $(touch pwned)\n");
    assert_eq!(result["agent"], "echo");
    assert!(!fx.ws().join("pwned").exists());
}

// ---------------------------------------------------------------------------------------------
// screenshot

fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(frame.color_type, png::ColorType::Rgb);
    pixels.truncate(frame.buffer_size());
    (frame.width, frame.height, pixels)
}

async fn check_screenshot(screen: &str, width: u32, height: u32) {
    let Some(xvfb) = Xvfb::start(screen) else { return };
    let painted = xvfb.paint("#ff0000");
    // The display comes from the environment here, as it would in a desktop session.
    let fx = Fixture::with(Config::default(), test_env(None, Some(&xvfb.display)));
    let output = fx.tools.dispatch(request("screenshot", json!({}))).await.unwrap();
    let image = output.image.expect("the screenshot travels as an image");
    assert_eq!((image.width, image.height, image.mime.as_str()), (width, height, "image/png"));
    assert_eq!(
        output.result,
        json!({"width": width, "height": height, "mime": "image/png", "bytes": image.bytes.len()})
    );
    let (png_width, png_height, pixels) = decode_png(&image.bytes);
    assert_eq!((png_width, png_height), (width, height));
    if painted {
        let centre = ((height / 2 * width + width / 2) * 3) as usize;
        assert_eq!(&pixels[centre..centre + 3], [255, 0, 0], "the root window was painted red");
        assert!(pixels.chunks_exact(3).all(|pixel| pixel == [255, 0, 0]));
    }
    // And by argument, without DISPLAY.
    let fx = Fixture::new();
    let output = fx.tools.dispatch(request("screenshot", json!({"display": xvfb.display}))).await.unwrap();
    assert_eq!(output.image.unwrap().width, width);
}

#[tokio::test]
async fn screenshots_of_a_24_bit_display() {
    check_screenshot("640x480x24", 640, 480).await;
}

#[tokio::test]
async fn screenshots_of_a_16_bit_display_convert_colours_honestly() {
    check_screenshot("320x240x16", 320, 240).await;
}

#[tokio::test]
async fn no_display_means_unavailable() {
    let fx = Fixture::new();
    let err = fx.err("screenshot", json!({})).await;
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("DISPLAY"), "{err}");
    let err = fx.err("screenshot", json!({"display": "attacker.example:0"})).await;
    assert_eq!(err.code, ErrorCode::InvalidArgs);
    // A display nobody serves.
    let err = fx.err("screenshot", json!({"display": ":9999"})).await;
    assert_eq!(err.code, ErrorCode::Unavailable);
}

#[tokio::test]
async fn a_missing_directory_and_dot_dot_cannot_smuggle_a_write_through_a_link() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.outside().join("sub")).unwrap();
    symlink(fx.outside(), fx.ws().join("link")).unwrap();
    for args in [
        json!({"path": "nope/../link/sub/pwned.txt", "content": "pwned"}),
        json!({"path": "nope/../link/newdir/pwned.txt", "content": "pwned", "create_dirs": true}),
    ] {
        let err = fx.err("write_file", args.clone()).await;
        assert_eq!(err.code, ErrorCode::OutsideWorkspace, "{args}: {err}");
    }
    assert!(!fx.outside().join("sub/pwned.txt").exists());
    assert!(!fx.outside().join("newdir").exists());
}
