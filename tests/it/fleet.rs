//! One phone over every machine (docs/PROTOCOL.md, "Environments"): coding-agent sessions,
//! terminals and approvals on an environment, driven from the phone through the host, with two
//! real agents and a real relay. The environment that runs the real Claude Code CLI (against the
//! stand-in model) is a `voxa run` of its own, so it can be killed and started again.

use std::collections::VecDeque;
use std::path::Path;

use base64::Engine;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use voxa::agent::RunningAgent;
use voxa::environments::{self, store, Identity, Issued};
use voxa::net::dial::ClientSocket;
use voxa::state::{Home, Secrets};

use crate::support::agents::{agent_env, agents_bin, WAIT};
use crate::support::fake_model::{FakeModel, Reply};
use crate::support::harness::*;
use crate::support::{voxa_cmd, RunningVoxa};

/// One voxa home and its workspace.
struct Machine {
    dir: TempDir,
    workspace: TempDir,
    home: Home,
    secrets: Secrets,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("voxa"));
        let (secrets, _) = home.load_or_create_secrets().unwrap();
        Machine { dir, workspace, home, secrets }
    }

    /// `voxa run` of this home in this process.
    async fn start(&self, relay: &TestRelay) -> RunningAgent {
        let (options, _) = options(&self.dir, &self.workspace, Some(relay.url()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        voxa::agent::start(options, listener, CancellationToken::new()).await.unwrap()
    }

    fn host_token(&self) -> String {
        store::load_or_create_host_token(&self.home).unwrap().expose().to_owned()
    }

    fn env_key(&self) -> String {
        Identity::load_or_create(&self.home).unwrap().env_key()
    }

    /// This machine paired as an environment of `host`, named `name` there.
    fn pair_with(&self, host: &Machine, relay: &TestRelay, name: &str) -> Issued {
        let issued = environments::issue(&self.home, &relay.url(), &self.host_token()).unwrap();
        environments::add(&host.home, &issued.line.encode(), Some(name), &host.host_token()).unwrap();
        issued
    }

    fn revoke(&self, issued: &Issued) {
        environments::revoke(&self.home, &issued.pairing, &self.host_token(), "test").unwrap();
    }

    /// The phone of this machine, through the relay, after its hello.
    async fn phone(&self, relay: &TestRelay) -> Phone {
        let mut socket = phone_socket(relay, self.secrets.relay_code.expose()).await;
        say_hello(&mut socket, self.secrets.auth_token.expose()).await;
        Phone { socket, kept: VecDeque::new(), seen: String::new() }
    }
}

/// A phone that keeps the frames it read past while waiting for another, and remembers every
/// frame it got, to prove no credential ever reached it.
struct Phone {
    socket: ClientSocket,
    kept: VecDeque<Value>,
    seen: String,
}

impl Phone {
    async fn send(&mut self, frame: Value) {
        send(&mut self.socket, frame).await;
    }

    /// The next JSON frame, waiting up to [`WAIT`]: a real coding agent on a loaded machine may
    /// take longer than one harness step.
    async fn read(&mut self) -> Value {
        use futures_util::StreamExt;
        use tokio_tungstenite::tungstenite::Message;
        let frame = tokio::time::timeout(WAIT, async {
            loop {
                match self.socket.next().await {
                    Some(Ok(Message::Text(text))) => {
                        break serde_json::from_str::<Value>(text.strip_prefix('\u{1}').unwrap_or(&text)).unwrap()
                    }
                    Some(Ok(_)) => continue,
                    other => panic!("the phone's socket ended: {other:?}"),
                }
            }
        })
        .await
        .expect("a frame in time");
        self.seen.push_str(&frame.to_string());
        frame
    }

    /// The first frame, kept or new, that `check` takes; the others stay kept.
    async fn until(&mut self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.kept.iter().position(&check) {
            return self.kept.remove(at).unwrap();
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.read())
                .await
                .unwrap_or_else(|_| panic!("no {what}; kept: {:?}", self.kept));
            if check(&frame) {
                return frame;
            }
            self.kept.push_back(frame);
        }
    }

    /// A call's result (which must be a success unless `may_fail`).
    async fn call(&mut self, id: &str, name: &str, args: Value, env: &str) -> Value {
        self.send(json!({"type": "tool_call", "id": id, "name": name, "args": args, "env": env})).await;
        self.until(&format!("the result of {id}"), |frame| frame["type"] == "tool_result" && frame["id"] == id).await
    }

    async fn ok(&mut self, id: &str, name: &str, args: Value, env: &str) -> Value {
        let result = self.call(id, name, args, env).await;
        assert_eq!(result["ok"], true, "{name} failed: {result}");
        result["result"].clone()
    }

    /// `agent_event`s of `session` until one matches `check`, each carrying `env`.
    async fn events_until(&mut self, session: &str, env: &str, check: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let frame = self
                .until("an agent_event", |frame| frame["type"] == "agent_event" && frame["session"] == session)
                .await;
            assert_eq!(frame["env"], env, "an environment's event names it: {frame}");
            let done = check(&frame["event"]);
            events.push(frame);
            if done {
                return events;
            }
        }
    }

    fn assert_never_saw(&self, secrets: &[&str]) {
        for secret in secrets {
            assert!(!self.seen.contains(secret), "a credential reached the phone");
        }
    }
}

fn turn_end(event: &Value) -> bool {
    event["kind"] == "turn_end"
}

/// Every seq of `session` in `frames` is the one after the last: no gap, no repeat.
fn assert_numbered(frames: &[Value], session: &str) {
    let seqs: Vec<u64> =
        frames.iter().filter(|f| f["session"] == session).map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "gap or repeat");
}

/// The environment as a `voxa run` of its own, its agents the real CLIs against `model`.
fn run_environment(env: &Machine, relay: &TestRelay, bin: &Path, model: &FakeModel) -> RunningVoxa {
    let mut cmd = voxa_cmd(env.home.dir());
    cmd.args(["run", "--json", "--relay", relay.url().as_str(), "--workspace"]).arg(env.workspace.path());
    cmd.envs(agent_env(bin, &env.dir.path().join("agents"), model));
    cmd.env("RUST_LOG", "voxa=debug");
    RunningVoxa::start(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_on_an_environment_is_started_approved_resumed_and_survives_its_restart() {
    let Some(bin) = agents_bin("claude") else { return };
    let model = FakeModel::start().await;
    let relay = TestRelay::start().await;
    let (host, env) = (Machine::new(), Machine::new());
    let issued = env.pair_with(&host, &relay, "buildbox");
    let key = env.env_key();
    let environment = run_environment(&env, &relay, &bin, &model);
    let agent = host.start(&relay).await;
    let mut phone = host.phone(&relay).await;
    phone.send(json!({"type": "follow"})).await;
    let reachable = |frame: &Value| frame["type"] == "environment" && frame["env"] == key.as_str();
    let first = phone.until("the environment's state", reachable).await;
    assert_eq!(first["name"], "buildbox");

    // Started from the phone on the environment, its Write approved from the phone.
    let target = env.workspace.path().join("hello.txt");
    model.script([
        Reply::tool("Write", json!({"file_path": target.to_str().unwrap(), "content": "hello from the box\n"})),
        Reply::text("I wrote hello.txt."),
    ]);
    let started = phone.ok("s1", "agent_start", json!({"prompt": "Write hello.txt"}), &key).await;
    let session = started["session"].as_str().unwrap().to_owned();
    let approval =
        phone.until("the environment's approval", |f| f["type"] == "approval" && f["env"] == key.as_str()).await;
    assert_eq!(approval["tool"], "Write");
    assert!(!target.exists(), "nothing is written before the answer");
    let id = approval["approval"].as_str().unwrap().to_owned();
    phone.send(json!({"type": "approve", "approval": id, "decision": "allow", "env": key})).await;
    let resolved =
        phone.until("approval_resolved", |f| f["type"] == "approval_resolved" && f["approval"] == id.as_str()).await;
    assert_eq!((resolved["env"].as_str(), resolved["decision"].as_str()), (Some(key.as_str()), Some("allow")));
    let mut seen = phone.events_until(&session, &key, turn_end).await;
    assert_eq!(seen.last().unwrap()["event"]["ok"], true, "{seen:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello from the box\n");
    // An answer to an approval that is gone is refused by the environment, through the host.
    phone.send(json!({"type": "approve", "approval": id, "decision": "allow", "env": key})).await;
    let refused = phone.until("the refusal", |f| f["type"] == "error").await;
    assert_eq!(refused["code"], "not-found", "{refused}");

    // Stopped and resumed, from the phone.
    phone.ok("x1", "agent_stop", json!({"session": session}), &key).await;
    model.script([Reply::text("Yes, hello.txt.")]);
    phone.ok("s2", "agent_send", json!({"session": session, "text": "Which file?"}), &key).await;
    seen.extend(phone.events_until(&session, &key, turn_end).await);

    // The host's `brief` (what a voice call reads out) tells the box's session too, by machine.
    phone.send(json!({"type": "tool_call", "id": "b1", "name": "brief", "args": {}})).await;
    let brief = phone.until("the brief", |f| f["type"] == "tool_result" && f["id"] == "b1").await;
    assert_eq!(brief["ok"], true, "{brief}");
    let digest = brief["result"]["digest"].as_str().unwrap_or_default();
    assert!(digest.contains("On buildbox: Since you last looked"), "{digest}");
    let briefed = brief["result"]["sessions"].as_array().cloned().unwrap_or_default();
    assert!(
        briefed
            .iter()
            .any(|s| s["session"] == session.as_str() && s["machine"] == "buildbox" && s["turns_finished"] == 2),
        "{brief}"
    );

    // The environment goes away: its session shows unreachable, never ended, and comes back.
    environment.crash();
    let gone = phone.until("unreachable", |f| reachable(f) && f["state"] == "unreachable").await;
    assert_eq!(gone["name"], "buildbox");
    let listed = phone.call("l1", "agent_sessions", json!({}), &key).await;
    assert_eq!(listed["error"]["code"], "environment-unreachable", "{listed}");
    let environment = run_environment(&env, &relay, &bin, &model);
    phone.until("reachable again", |f| reachable(f) && f["state"] == "reachable").await;
    let listed = phone.ok("l2", "agent_sessions", json!({}), &key).await;
    assert!(listed["sessions"].as_array().unwrap().iter().any(|s| s["session"] == session.as_str()), "{listed}");
    model.script([Reply::text("Still here.")]);
    phone.ok("s3", "agent_send", json!({"session": session, "text": "Are you there?"}), &key).await;
    seen.extend(phone.events_until(&session, &key, turn_end).await);
    // Whatever the restart cost the phone came back from the environment's log, once each.
    let (mut all, mut kept) = (seen.clone(), std::mem::take(&mut phone.kept));
    all.extend(kept.drain(..).filter(|f| f["type"] == "agent_event" && f["session"] == session.as_str()));
    all.sort_by_key(|f| f["seq"].as_u64());
    assert_numbered(&all, &session);

    // A phone that was away follows from its mark, replayed from the environment exactly.
    let last = all.last().unwrap()["seq"].as_u64().unwrap();
    let mut away = host.phone(&relay).await;
    away.send(json!({"type": "follow", "after": {&key: {&session: 3}}})).await;
    let mut replayed: Vec<Value> = Vec::new();
    while replayed.last().is_none_or(|frame| frame["seq"].as_u64() != Some(last)) {
        let on = |f: &Value| f["type"] == "agent_event" && f["session"] == session.as_str();
        replayed.push(away.until("a replayed event", on).await);
    }
    let seqs: Vec<u64> = replayed.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (4..=last).collect::<Vec<_>>(), "replayed after the mark, once each");
    assert!(replayed.iter().all(|f| f["env"] == key.as_str()));

    // Revoked there: the host is told, and the session is refused `pairing-revoked`.
    env.revoke(&issued);
    phone.until("revoked", |f| reachable(f) && f["state"] == "revoked").await;
    let refused = phone.call("s4", "agent_send", json!({"session": session, "text": "hello?"}), &key).await;
    assert_eq!(refused["error"]["code"], "pairing-revoked", "{refused}");

    // No bearer in anything the phone got, nor in either machine's logs.
    let bearer = issued.line.bearer.expose().to_owned();
    phone.assert_never_saw(&[&bearer, env.secrets.auth_token.expose()]);
    agent.stop().await;
    let (stdout, stderr) = environment.stop();
    assert!(!stdout.contains(&bearer) && !stderr.contains(&bearer), "the bearer is in the environment's log");
}

/// Waits until the environment dials the pairing's code.
async fn wait_dialing(relay: &TestRelay, issued: &Issued) {
    let mut probe = phone_socket(relay, issued.line.code.expose()).await;
    wait_agent_joined(&mut probe).await;
    let _ = futures_util::SinkExt::close(&mut probe).await;
}

/// The bytes of a terminal frame's `data`.
fn data_of(frame: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD.decode(frame["data"].as_str().unwrap()).unwrap();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Phone {
    /// The terminal's frames of `kind`, tagged with `env`, until their text holds `text`.
    async fn term_until(&mut self, term: &str, env: &str, kinds: &[&str], text: &str) -> String {
        let mut got = String::new();
        while !got.contains(text) {
            let frame = self
                .until(&format!("{text:?} from the terminal"), |f| {
                    kinds.contains(&f["type"].as_str().unwrap_or_default()) && f["term"] == term
                })
                .await;
            assert_eq!(frame["env"], env, "{frame}");
            got.push_str(&data_of(&frame));
            if frame["type"] == "term_output" {
                let offset = frame["offset"].as_u64().unwrap() + data_of(&frame).len() as u64;
                self.send(json!({"type": "term_ack", "term": term, "offset": offset, "env": env})).await;
            }
        }
        got
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_on_an_environment_is_typed_into_and_attached_again_from_another_phone() {
    let relay = TestRelay::start().await;
    let (host, env) = (Machine::new(), Machine::new());
    let issued = env.pair_with(&host, &relay, "buildbox");
    let key = env.env_key();
    let environment = env.start(&relay).await;
    wait_dialing(&relay, &issued).await;
    let agent = host.start(&relay).await;
    let mut phone = host.phone(&relay).await;
    let opened = phone.ok("t1", "term_open", json!({"cols": 80, "rows": 24, "command": "sh"}), &key).await;
    let term = opened["term"].as_str().unwrap().to_owned();
    phone.ok("t2", "term_input", json!({"term": term, "data": "echo fleet-$((6*7))\n"}), &key).await;
    phone.term_until(&term, &key, &["term_output"], "fleet-42").await;

    // Another phone attaches: it gets the screen, typed there, then its own typing's output.
    let mut other = host.phone(&relay).await;
    other.ok("t3", "term_attach", json!({"term": term}), &key).await;
    other.term_until(&term, &key, &["term_snapshot"], "fleet-42").await;
    other.ok("t4", "term_input", json!({"term": term, "data": "echo again-$((1+1))\n"}), &key).await;
    other.term_until(&term, &key, &["term_output"], "again-2").await;
    let listed = other.ok("t5", "term_list", json!({}), &key).await;
    assert!(listed["terminals"].as_array().unwrap().iter().any(|t| t["term"] == term.as_str()), "{listed}");
    // The host's own terminals are its own.
    let here = other.ok("t6", "term_list", json!({}), &host.env_key()).await;
    assert!(here["terminals"].as_array().unwrap().is_empty(), "{here}");
    other.ok("t7", "term_input", json!({"term": term, "data": "exit 3\n"}), &key).await;
    let exit = other.until("term_exit", |f| f["type"] == "term_exit" && f["term"] == term.as_str()).await;
    assert_eq!((exit["env"].as_str(), exit["code"].as_i64()), (Some(key.as_str()), Some(3)), "{exit}");
    other.ok("t8", "term_close", json!({"term": term}), &key).await;
    let bearer = issued.line.bearer.expose().to_owned();
    phone.assert_never_saw(&[&bearer]);
    other.assert_never_saw(&[&bearer]);
    agent.stop().await;
    environment.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_both_machines_sessions_and_an_approval_from_the_environment_is_tapped() {
    use crate::support::browser::Browser;
    use crate::support::laptop::Laptop;
    const CONVERSATION: &str = "#agent-conversation";
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start().await else { return };
    let model = FakeModel::start().await;
    let mut laptop = Laptop::start(&bin, &model);
    let listen = laptop.run.wait_event("embedded_relay")["listen"].as_str().unwrap().to_owned();
    let relay = voxa::config::RelayUrl::parse(&format!("http://{listen}")).unwrap();
    // The build box, paired with the laptop over the laptop's relay.
    let env = Machine::new();
    let issued = environments::issue(&env.home, &relay, &env.host_token()).unwrap();
    let laptop_home = Home::at(laptop.home.clone());
    let laptop_token = store::load_or_create_host_token(&laptop_home).unwrap().expose().to_owned();
    environments::add(&laptop_home, &issued.line.encode(), Some("buildbox"), &laptop_token).unwrap();
    let mut cmd = voxa_cmd(env.home.dir());
    cmd.args(["run", "--json", "--relay", relay.as_str(), "--workspace"]).arg(env.workspace.path());
    cmd.envs(agent_env(&bin, &env.dir.path().join("agents"), &model));
    let environment = RunningVoxa::start(cmd);

    browser.pair(&laptop.link).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
    // A session on the laptop, from the page.
    model.script([Reply::text("Noted on the laptop.")]);
    browser.type_into("Prompt", "Say something here").await;
    browser.press("Ask").await;
    browser.wait_text(CONVERSATION, "the laptop's answer", |t| t.contains("Noted on the laptop.")).await;
    browser.press("All sessions").await;

    // One on the build box, started through the laptop; its Write waits for the phone.
    let target = env.workspace.path().join("box.txt");
    model.script([
        Reply::tool("Write", json!({"file_path": target.to_str().unwrap(), "content": "from the phone\n"})),
        Reply::text("Wrote box.txt on the box."),
    ]);
    let home = laptop.home.clone();
    let started = tokio::task::spawn_blocking(move || {
        crate::support::voxa(
            &home,
            &["call", "--env", "buildbox", "agent_start", "prompt=Write box.txt", "title=box job"],
        )
    })
    .await
    .unwrap();
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let list = browser
        .wait_text("#agent-sessions", "both machines' sessions", |t| {
            t.contains("box job") && t.contains("approval waiting")
        })
        .await;
    assert!(list.contains("on buildbox"), "the box's session names its machine: {list}");
    let machines = browser
        .script("return [...document.querySelectorAll('#agent-sessions .session-row')].map((r) => r.dataset.machine).sort();", vec![])
        .await;
    assert_eq!(machines, json!(["buildbox", "this laptop"]), "both machines' sessions, each marked: {list}");
    browser.press("box job").await;
    browser.wait_text(CONVERSATION, "the box's approval", |t| t.contains("write box.txt") && t.contains("Allow")).await;
    // The card names the machine that asks, and the session by its title.
    let from = format!("{CONVERSATION} .approval-card .approval-from");
    browser.wait_text(&from, "the card naming the box", |t| t == "session “box job” on buildbox").await;
    assert!(!target.exists(), "written before anyone allowed it");
    browser.press("Allow").await;
    browser.wait_text(CONVERSATION, "the box's answer", |t| t.contains("Wrote box.txt on the box.")).await;
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "from the phone\n");

    // The Shell lists the terminals of both machines, each named with its machine: one opened on
    // the box beforehand is chosen, typed into, and runs there.
    let home = laptop.home.clone();
    let opened = tokio::task::spawn_blocking(move || {
        crate::support::voxa(
            &home,
            &["call", "--json", "--env", "buildbox", "term_open", "cols=80", "rows=24", "command=sh"],
        )
    })
    .await
    .unwrap();
    assert!(opened.status.success(), "{}", String::from_utf8_lossy(&opened.stderr));
    let opened: Value = serde_json::from_slice(&opened.stdout).expect("term_open's answer as JSON");
    let box_term =
        opened["result"]["term"].as_str().or(opened["term"].as_str()).expect("the box's terminal").to_owned();
    browser.press("Shell").await;
    // The picker names the terminal on screen (the status line then says only news).
    let chosen = "const pick = document.getElementById('shell-pick'); \
        return pick.hidden || !pick.selectedOptions[0] ? '' : pick.selectedOptions[0].textContent;";
    let wait_chosen = |check: String| format!("return (() => {{ {chosen} }})().startsWith({});", json!(check));
    browser.wait_script("a new terminal of the laptop on screen", &wait_chosen("this laptop · t-".into())).await;
    let picker = browser.control("combobox", "Terminal").await;
    let label = format!("buildbox · {box_term}");
    let choices = "return [...document.querySelectorAll('#shell-pick option')].map((o) => o.textContent);";
    let offered_box = format!(
        "return [...document.querySelectorAll('#shell-pick option')].some((o) => o.textContent === {});",
        json!(label)
    );
    browser.wait_script("the box's terminal offered", &offered_box).await;
    let offered = browser.script(choices, vec![]).await;
    let offered: Vec<String> = serde_json::from_value(offered).unwrap();
    assert!(offered.contains(&label), "{offered:?}");
    assert!(
        offered.iter().any(|o| o.starts_with("this laptop · ")),
        "the laptop's own terminal beside it: {offered:?}"
    );
    picker.select_by_label(&label).await.expect("choosing the box's terminal");
    browser.wait_script("the box's terminal on screen", &wait_chosen(label.clone())).await;
    // The picker shows the choice at once; the attach it starts answers a moment later.
    let attached = "return !document.getElementById('shell-status').textContent.startsWith('attaching');";
    browser.wait_script("the box's terminal attached", attached).await;
    let status = browser.script("return document.getElementById('shell-status').hidden;", vec![]).await;
    assert_eq!(status, json!(true), "the status line does not say again what the picker names");
    let input = browser.client.find(fantoccini::Locator::Css("#shell-screen textarea")).await.unwrap();
    input.send_keys("pwd; echo box-$((6*7))\u{E007}").await.unwrap();
    let rows = browser.wait_text("#shell-screen .xterm-rows", "the box's answer", |t| t.contains("box-42")).await;
    let workspace = env.workspace.path().to_str().unwrap().to_owned();
    assert!(rows.contains(&workspace), "it ran in the box's workspace: {rows}");
    // The screen fills the view to the key bar, though the decided approval's card above the tabs
    // was still there when the Shell opened and left after.
    let filled = "const bar = document.getElementById('keybar').getBoundingClientRect(); \
        return bar.bottom <= innerHeight + 1 && bar.bottom > innerHeight - 60;";
    browser.wait_script("the Shell filling the view to its key bar", filled).await;
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        let png = browser.screenshot().await;
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join("web-shell-machines.png"), png).unwrap();
    }
    environment.stop();
    laptop.run.stop();
}
