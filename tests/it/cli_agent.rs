//! `voxa agent` as a user runs it, against `voxa run` with the real Claude Code CLI (tests/agents)
//! and only the model faked: a session started and followed to its end, a turn streamed as JSON
//! lines and interrupted from a second terminal, an approval answered with `voxa approve` while
//! `send` waits, the log numbered once, the list, stop, and the exit status of each outcome.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::agents::agents_bin;
use crate::support::fake_model::{FakeModel, Reply};
use crate::support::laptop::Laptop;
use crate::support::voxa_cmd;

/// Longest wait for one line of a real agent's turn.
const WAIT: Duration = Duration::from_secs(90);

fn agent(home: &Path, args: &[&str]) -> Output {
    voxa_cmd(home).arg("agent").args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The JSON lines of `output`, each checked to be one.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line:?}"))).collect()
}

/// `voxa agent ARGS` running, its stdout lines as they come.
struct Streaming {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Streaming {
    fn start(home: &Path, args: &[&str]) -> Streaming {
        let mut child = voxa_cmd(home).arg("agent").args(args).stdout(Stdio::piped()).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Streaming { child, lines, seen: Vec::new() }
    }

    /// The first line (after those seen) that `check` accepts; panics after [`WAIT`].
    fn until(&mut self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self.lines.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no {what}; so far {:#?}", self.seen));
            self.seen.push(line.clone());
            let value: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line:?}"));
            if check(&value) {
                return value;
            }
        }
    }

    /// The exit status and every line.
    fn finish(mut self) -> (Option<i32>, Vec<Value>) {
        let status = crate::support::wait_with_deadline(&mut self.child, WAIT);
        self.seen.extend(self.lines.iter());
        (status.code(), self.seen.iter().map(|line| serde_json::from_str(line).unwrap()).collect())
    }
}

fn kind_is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |line| line["type"] == "agent_event" && line["event"]["kind"] == kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voxa_agent_starts_follows_streams_interrupts_answers_and_exits_by_outcome() {
    let Some(bin) = agents_bin("claude") else { return };
    let model = FakeModel::start().await;
    let laptop = Laptop::start(&bin, &model);
    let (home, workspace) = (laptop.home.clone(), laptop.workspace.clone());
    let scripted = model.clone();
    tokio::task::spawn_blocking(move || flow(&home, &workspace, &scripted)).await.unwrap();
    laptop.run.stop();
}

fn flow(home: &Path, workspace: &Path, model: &FakeModel) {
    // start: human lines, the answer once, exit 0 when the turn ends well.
    model.script([Reply::text("Hello from the agent.")]);
    let started = agent(home, &["start", "Say hello"]);
    let said = stdout(&started);
    assert_eq!(started.status.code(), Some(0), "{said}\n{}", String::from_utf8_lossy(&started.stderr));
    let session = said.lines().next().and_then(|l| l.strip_prefix("session ")).unwrap().split(' ').next().unwrap();
    let session = session.to_owned();
    assert!(session.starts_with("s-"), "{said}");
    assert!(said.contains("> Say hello\n"), "{said}");
    assert_eq!(said.matches("Hello from the agent.").count(), 1, "{said}");
    assert!(said.contains("— done, "), "{said}");

    // list --json: the session, idle after one turn, with its last seq.
    let listed = agent(home, &["list", "--json"]);
    assert_eq!(listed.status.code(), Some(0));
    let body: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let row = body["sessions"].as_array().unwrap().iter().find(|s| s["session"] == session.as_str()).unwrap().clone();
    assert_eq!((row["state"].clone(), row["turns"].clone()), (json!("idle"), json!(1)), "{row}");
    let after_first = row["last_seq"].as_u64().unwrap();
    assert!(after_first > 3, "{row}");

    // send --json streams: its result, then only the new events, live; an interrupt from a
    // second terminal ends the turn, and send exits 5.
    model.script([Reply::Stall("Working on the second step".into())]);
    let mut send = Streaming::start(home, &["--json", "send", &session, "Second step"]);
    let first = send.until("the send's result", |_| true);
    assert_eq!(first["ok"], true, "{first}");
    assert_eq!(first["result"]["queued"], false, "{first}");
    send.until("streamed text", |l| kind_is("text")(l) && l["event"]["partial"] == true);
    let interrupted = agent(home, &["interrupt", &session]);
    assert_eq!(interrupted.status.code(), Some(0), "{}", String::from_utf8_lossy(&interrupted.stderr));
    assert_eq!(stdout(&interrupted), format!("{session} interrupted\n"));
    let (code, lines) = send.finish();
    assert_eq!(code, Some(5), "an interrupted turn exits 5: {lines:#?}");
    let events: Vec<&Value> = lines.iter().filter(|l| l["type"] == "agent_event").collect();
    assert!(events.iter().all(|e| e["session"] == session.as_str()), "{events:#?}");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (after_first + 1..=after_first + seqs.len() as u64).collect::<Vec<_>>(), "new events, once");
    assert_eq!(events[0]["event"]["kind"], "user", "{events:#?}");
    let end = events.iter().find(|e| e["event"]["kind"] == "turn_end").unwrap();
    assert_eq!(end["event"]["ok"], false, "{end}");

    // An approval while send waits: `voxa approve` allows it, the file is written, exit 0.
    let notes = workspace.join("notes.md");
    model.script([
        Reply::tool("Write", json!({"file_path": notes.to_str().unwrap(), "content": "from the cli\n"})),
        Reply::text("Wrote it."),
    ]);
    let mut send = Streaming::start(home, &["--json", "send", &session, "Write the notes"]);
    let asked = send.until("the approval", kind_is("approval"));
    assert!(!notes.exists());
    let approval = asked["event"]["approval"].as_str().unwrap();
    let allowed = voxa_cmd(home).args(["approve", approval, "allow"]).output().unwrap();
    assert_eq!(allowed.status.code(), Some(0), "{}", String::from_utf8_lossy(&allowed.stderr));
    let (code, lines) = send.finish();
    assert_eq!(code, Some(0), "{lines:#?}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "from the cli\n");
    assert!(lines.iter().any(|l| kind_is("approval_resolved")(l) && l["event"]["by"] == "cli"), "{lines:#?}");

    // log --json: every event of the session, numbered from 1, each once.
    let log = agent(home, &["log", &session, "--json"]);
    assert_eq!(log.status.code(), Some(0));
    let logged = json_lines(&stdout(&log));
    let seqs: Vec<u64> = logged.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(logged.iter().filter(|e| e["event"]["kind"] == "turn_end").count() == 3, "{logged:#?}");
    let tail = agent(home, &["log", &session, "--after", &after_first.to_string()]);
    let tail = stdout(&tail);
    assert!(tail.starts_with("> Second step\n") && !tail.contains("Say hello"), "{tail}");
    assert!(tail.contains("• Write: write notes.md\n") && tail.contains("+from the cli"), "{tail}");

    // Failures: an unknown session is a failed tool (3), in JSON too.
    let unknown = agent(home, &["send", "s-0000000000000000", "hello"]);
    assert_eq!(unknown.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("(not-found)"));
    let unknown = agent(home, &["--json", "stop", "s-0000000000000000"]);
    assert_eq!(unknown.status.code(), Some(3));
    assert_eq!(json_lines(&stdout(&unknown))[0]["error"]["code"], "not-found");

    // stop: the session stays listed, ended.
    let stopped = agent(home, &["stop", &session]);
    assert_eq!(stopped.status.code(), Some(0), "{}", String::from_utf8_lossy(&stopped.stderr));
    let listed = stdout(&agent(home, &["list"]));
    assert!(listed.lines().any(|l| l.starts_with(session.as_str()) && l.contains("ended")), "{listed}");
}

#[test]
fn voxa_agent_without_a_running_agent_says_so_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    assert!(voxa_cmd(&home).arg("pair").arg("--json").output().unwrap().status.success());
    let listed = agent(&home, &["list"]);
    assert_eq!(listed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&listed.stderr).contains("voxa run"), "{listed:?}");
}
