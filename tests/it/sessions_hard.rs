//! Coding-agent sessions the hard way: the real `voxa run` binary with the real Claude Code CLI
//! (only the model faked), driven over its sockets as phones would. voxa killed with SIGKILL and
//! started again replays the log 1..n and resumes the session with its context; an interrupt ends
//! a slow turn; two phones through the relay and a loopback client see the same events; a flood
//! of 100,000 event lines keeps voxa's memory bounded.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;

use crate::support::fake_model::{user_text, FakeModel, Reply};
use voxa::net::dial::ClientSocket;

use crate::support::agents::{agent_env, agents_bin};
use crate::support::harness::{connect, recv_json, recv_json_within, say_hello, send, STEP};
use crate::support::{voxa_cmd, RunningVoxa};

/// A laptop's home and workspace that outlive one `voxa run`.
struct Laptop {
    dir: TempDir,
    workspace: TempDir,
    env: Vec<(String, String)>,
}

/// One `voxa run --embedded-relay` of a [`Laptop`], with its pairing.
struct Run {
    voxa: RunningVoxa,
    relay: String,
    code: String,
    token: String,
}

impl Laptop {
    fn new(bin: &Path, model: &FakeModel) -> Laptop {
        let dir = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let env = agent_env(bin, &dir.path().join("agents"), model)
            .into_iter()
            .map(|(key, value)| (key.to_string_lossy().into_owned(), value.to_string_lossy().into_owned()))
            .collect();
        Laptop { dir, workspace, env }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("voxa")
    }

    /// Starts `voxa run`; `token` is the pairing's, once a run made it.
    fn run(&self, token: Option<&str>) -> Run {
        let mut cmd: Command = voxa_cmd(&self.home());
        cmd.args(["run", "--json", "--embedded-relay", "--workspace"]).arg(self.workspace.path());
        cmd.envs(self.env.iter().map(|(key, value)| (key, value)));
        let mut voxa = RunningVoxa::start(cmd);
        let relay = voxa.wait_event("embedded_relay")["listen"].as_str().unwrap().to_owned();
        let pairing = voxa.wait_event("pairing")["url"].as_str().unwrap().to_owned();
        let url = url::Url::parse(&pairing).unwrap();
        let field = |name: &str| {
            url::form_urlencoded::parse(url.fragment().unwrap_or_default().as_bytes())
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.into_owned())
                .unwrap()
        };
        // The link carries a one-time ticket; the pairing's token is the home's.
        let paired = std::fs::read_to_string(self.home().join(voxa::state::AUTH_TOKEN_FILE)).unwrap().trim().to_owned();
        let code = field("code");
        if let Some(token) = token {
            assert_eq!(paired, token, "the restarted laptop keeps its pairing");
        }
        Run { voxa, relay, code, token: paired }
    }
}

impl Run {
    async fn loopback(&self) -> Client {
        self.client(&format!("ws://127.0.0.1:{}/", self.voxa.port)).await
    }

    async fn phone(&self) -> Client {
        self.client(&format!("ws://{}/ws?code={}", self.relay, self.code)).await
    }

    async fn client(&self, url: &str) -> Client {
        let mut socket = connect(url).await;
        say_hello(&mut socket, &self.token).await;
        Client { socket, events: VecDeque::new() }
    }
}

/// A client socket that keeps the `agent_event`s it reads past while waiting for a result.
struct Client {
    socket: ClientSocket,
    events: VecDeque<Value>,
}

impl Client {
    async fn call(&mut self, id: &str, name: &str, args: Value) -> Value {
        send(&mut self.socket, json!({"type": "tool_call", "id": id, "name": name, "args": args})).await;
        loop {
            let frame = recv_json(&mut self.socket).await;
            match frame["type"].as_str() {
                Some("agent_event") => self.events.push_back(frame),
                Some("tool_result") if frame["id"] == id => {
                    assert!(frame.get("error").is_none_or(Value::is_null), "{name} failed: {frame}");
                    return frame["result"].clone();
                }
                _ => {}
            }
        }
    }

    async fn send(&mut self, frame: Value) {
        send(&mut self.socket, frame).await;
    }

    /// `agent_event`s of `session` until one matches `until`.
    async fn events_until(&mut self, session: &str, until: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.events_until_within(session, until, STEP).await
    }

    /// As [`Client::events_until`], each frame waited for up to `gap` instead of the usual step.
    async fn events_until_within(
        &mut self,
        session: &str,
        until: impl Fn(&Value) -> bool,
        gap: Duration,
    ) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let frame = match self.events.pop_front() {
                Some(frame) => frame,
                None => recv_json_within(&mut self.socket, gap).await,
            };
            if frame["type"] != "agent_event" || frame["session"] != session {
                continue;
            }
            let done = until(&frame["event"]);
            events.push(frame);
            if done {
                return events;
            }
        }
    }
}

fn turn_end(event: &Value) -> bool {
    event["kind"] == "turn_end"
}

/// The session's whole log through `agent_log`, checked to be numbered 1..n.
async fn whole_log(client: &mut Client, session: &str) -> Vec<Value> {
    // A call id names one call of the pairing: read again under an id already used, the log
    // would be that first call's answer (docs/PROTOCOL.md, "Receipts").
    static READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut events: Vec<Value> = Vec::new();
    loop {
        let read = READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let args = json!({"session": session, "after": events.len(), "limit": 500});
        let result = client.call(&format!("log-{read}"), "agent_log", args).await;
        let got = result["events"].as_array().unwrap().clone();
        if got.is_empty() {
            break;
        }
        events.extend(got);
    }
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], index as u64 + 1, "gap or repeat at {index}");
    }
    events
}

/// A laptop whose `claude` is the real CLI against a fresh fake model, running.
async fn claude_laptop() -> Option<(FakeModel, Laptop, Run)> {
    let bin = agents_bin("claude")?;
    let model = FakeModel::start().await;
    let laptop = Laptop::new(&bin, &model);
    let run = laptop.run(None);
    Some((model, laptop, run))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voxa_killed_mid_session_replays_the_log_exactly_and_resumes_the_session_with_its_context() {
    let Some((model, laptop, run)) = claude_laptop().await else { return };
    let mut phone = run.loopback().await;
    phone.send(json!({"type": "follow"})).await;
    model.script([Reply::text("Noted: PAPAYA.")]);
    let started = phone.call("s1", "agent_start", json!({"prompt": "Remember the word PAPAYA"})).await;
    let session = started["session"].as_str().unwrap().to_owned();
    let mut seen = phone.events_until(&session, turn_end).await;

    // A slow turn, interrupted: the turn ends, not the session.
    model.script([Reply::Stall("Let me think about this for a long".into())]);
    phone.call("s2", "agent_send", json!({"session": session, "text": "Think hard"})).await;
    seen.extend(phone.events_until(&session, |e| e["kind"] == "text").await);
    phone.call("i1", "agent_interrupt", json!({"session": session})).await;
    let interrupted = phone.events_until(&session, turn_end).await;
    assert_eq!(interrupted.last().unwrap()["event"]["ok"], false, "{interrupted:?}");
    seen.extend(interrupted);
    seen.extend(phone.events_until(&session, |e| e["kind"] == "state" && e["state"] == "idle").await);

    // A crash: no chance to save anything.
    let Run { voxa, token, .. } = run;
    voxa.crash();
    let run = laptop.run(Some(&token));
    let mut phone = run.loopback().await;
    let last = seen.last().unwrap()["seq"].as_u64().unwrap();
    let log = whole_log(&mut phone, &session).await;
    assert!(log.len() as u64 >= last, "{} events kept of {last}", log.len());
    assert_eq!(&log[..seen.len()], &seen[..], "the log after the crash is what the phone saw");

    // A phone that was away replays from its mark, then the resumed session goes on.
    phone.send(json!({"type": "follow", "after": {&session: 2}})).await;
    let replayed = phone.events_until(&session, |e| e["kind"] == "state" && e["state"] == "ended").await;
    let seqs: Vec<u64> = replayed.iter().map(|frame| frame["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (3..=seqs.len() as u64 + 2).collect::<Vec<_>>(), "no gap, no repeat");
    model.script([Reply::text("The word was PAPAYA.")]);
    phone.call("s3", "agent_send", json!({"session": session, "text": "Which word did I ask you to remember?"})).await;
    let resumed = phone.events_until(&session, turn_end).await;
    assert_eq!(resumed.last().unwrap()["event"]["ok"], true, "{resumed:?}");
    let context = user_text(&model.turn_requests().pop().unwrap());
    assert!(context.contains("Remember the word PAPAYA"), "the resumed agent lost its context: {context}");
    let after = whole_log(&mut phone, &session).await;
    assert_eq!(&after[..log.len()], &log[..]);
    assert_eq!(&after[log.len()..log.len() + resumed.len()], &resumed[..], "the resumed turn is in the log");
    run.voxa.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_phones_through_the_relay_and_a_loopback_client_see_the_same_events() {
    let Some((model, laptop, run)) = claude_laptop().await else { return };
    let (mut first, mut second, mut local) = (run.phone().await, run.phone().await, run.loopback().await);
    for client in [&mut first, &mut second, &mut local] {
        client.send(json!({"type": "follow"})).await;
    }
    let target = laptop.workspace.path().join("both.txt");
    model.script([
        Reply::tool("Write", json!({"file_path": target.to_str().unwrap(), "content": "seen twice\n"})),
        Reply::text("Both of you saw it."),
    ]);
    let started = first.call("s1", "agent_start", json!({"prompt": "Write both.txt"})).await;
    let session = started["session"].as_str().unwrap().to_owned();
    let asked = second.events_until(&session, |e| e["kind"] == "approval").await;
    let approval = asked.last().unwrap()["event"]["approval"].as_str().unwrap().to_owned();
    second.send(json!({"type": "approve", "approval": approval, "decision": "allow"})).await;
    let mut seen = vec![asked];
    seen[0].extend(second.events_until(&session, turn_end).await);
    seen.push(first.events_until(&session, turn_end).await);
    seen.push(local.events_until(&session, turn_end).await);
    assert_eq!(seen[0], seen[1], "the two phones saw different events");
    assert_eq!(seen[0], seen[2], "the phone and the laptop saw different events");
    assert!(seen[0].iter().any(|e| e["event"]["kind"] == "approval_resolved"), "{:?}", seen[0]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "seen twice\n");
    let seqs: Vec<u64> = seen[0].iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    run.voxa.stop();
}

/// The largest resident set the process has had, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_event_lines_keeps_voxas_memory_bounded() {
    let model = FakeModel::start().await;
    let laptop = Laptop::new(Path::new("/usr/bin"), &model);
    // 100,000 stream-json lines of 2 KiB of text each (some 200 MB), then the turn's result.
    let chunk = "x".repeat(2048);
    let line = json!({"type": "stream_event", "event": {"delta": {"type": "text_delta", "text": chunk}}});
    let result = json!({"type": "result", "subtype": "success", "is_error": false, "result": "flooded"});
    let script = format!("yes '{line}' | head -n 100000; echo '{result}'");
    let config = format!(
        "[agents.flood]\nprogram = \"/bin/sh\"\nargs = [\"-c\", {}, \"{{prompt}}\"]\nformat = \"stream-json\"\n",
        toml::Value::String(script)
    );
    crate::support::harness::write_home_config(&laptop.home(), &config);
    let run = laptop.run(None);
    let mut phone = run.loopback().await;
    // One follower reads everything; one never reads at all.
    let mut stalled = run.loopback().await;
    stalled.send(json!({"type": "follow"})).await;
    phone.send(json!({"type": "follow"})).await;
    let baseline = peak_rss_kib(run.voxa.child.id());
    let started = phone.call("s1", "agent_start", json!({"prompt": "go", "agent": "flood"})).await;
    let session = started["session"].as_str().unwrap().to_owned();
    // Past the cap the agent reads the rest of the flood and drops it, sending nothing for a
    // while: seconds on a quiet machine, more on a busy one.
    let events = phone.events_until_within(&session, turn_end, Duration::from_secs(60)).await;
    let end = &events.last().unwrap()["event"];
    assert_eq!((end["ok"].clone(), end["result"].clone()), (json!(true), json!("flooded")), "{end}");
    let text: usize = events.iter().filter_map(|e| e["event"]["text"].as_str()).map(str::len).sum();
    assert!(text >= 16 << 20, "the text up to the turn's cap reached the phone: {text} bytes");
    assert!(
        events.iter().any(|e| e["event"]["kind"] == "error" && e["event"]["code"] == "too-large"),
        "the cut is said"
    );
    let peak = peak_rss_kib(run.voxa.child.id());
    eprintln!("voxa's peak RSS: {baseline} KiB before the flood, {peak} KiB after");
    assert!(peak < 128 << 10, "voxa's peak RSS reached {peak} KiB for a 200 MB flood");
    drop(stalled);
    run.voxa.stop();
}
