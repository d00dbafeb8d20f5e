//! Hosted voice (docs/PROTOCOL.md, "Hosted voice"): a phone at the relay's `/live`, the relay
//! hosting the call against the fake Gemini Live server with the operator's key, and a real agent
//! in hosted mode running the tools.

use std::time::Duration;

use serde_json::{json, Value};
use voxa::agent::LinkEvent;
use voxa::net::dial::DialOptions;
use voxa::relay::{LiveConfig, RelayConfig};
use voxa::secret::Secret;

use crate::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::gemini::{capture_logs, expect_tool_responses, pcm, Phone, KEY};
use crate::harness::*;

/// A relay hosting voice with `KEY` against `fake`, with `tweak` applied to its hosting.
async fn hosting_relay(fake: &FakeGemini, tweak: impl FnOnce(&mut LiveConfig)) -> TestRelay {
    let mut live = LiveConfig::new(fake.config(KEY));
    tweak(&mut live);
    TestRelay::with_config(RelayConfig { live: Some(live), ..Default::default() }).await
}

/// An agent in hosted mode (no Gemini key of its own) linked to `relay`.
async fn hosted_agent(relay: &TestRelay) -> TestAgent {
    let mut agent = TestAgent::start(Some(relay.url())).await;
    agent.wait_event("the relay link", |event| matches!(event, LinkEvent::Connected { .. })).await;
    agent
}

/// A phone at `/live` that completed the hello with the agent through the relay.
async fn live_phone(relay: &TestRelay, agent: &TestAgent) -> (Phone, Value) {
    live_phone_with(relay, agent, DialOptions::default()).await
}

async fn live_phone_with(relay: &TestRelay, agent: &TestAgent, options: DialOptions) -> (Phone, Value) {
    let url = format!("ws://{}/live?code={}", relay.addr, agent.code());
    let mut socket = tokio::time::timeout(STEP, voxa::net::dial::connect(&url, &options)).await.unwrap().unwrap();
    // The agent's proof in hello_ok checks out: the relay passed challenge, hello and hello_ok on unchanged.
    let hello_ok = say_hello(&mut socket, agent.token()).await;
    (Phone::over(socket), hello_ok)
}

/// The next `error` frame, skipping relay notices.
async fn recv_type_or_error(socket: &mut voxa::net::dial::ClientSocket) -> Value {
    loop {
        let value = recv_json(socket).await;
        if value["type"] == "error" {
            return value;
        }
    }
}

/// Starts a hosted call; returns Gemini's connection number and its setup.
async fn start_call(phone: &mut Phone, fake: &mut FakeGemini) -> (usize, Value) {
    phone.send(json!({"type":"call_start"})).await;
    let setup = fake.expect_setup().await;
    phone.expect("call_started").await;
    setup
}

/// A hosted call under way: the test Gemini server, the relay, the agent and the phone, and
/// Gemini's connection number.
struct Call {
    fake: FakeGemini,
    relay: TestRelay,
    agent: TestAgent,
    phone: Phone,
    conn: usize,
}

impl Call {
    async fn start(tweak: impl FnOnce(&mut LiveConfig)) -> Call {
        let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
        let relay = hosting_relay(&fake, tweak).await;
        let agent = hosted_agent(&relay).await;
        let (mut phone, _) = live_phone(&relay, &agent).await;
        let (conn, _) = start_call(&mut phone, &mut fake).await;
        Call { fake, relay, agent, phone, conn }
    }
}

/// Every audit record the agent wrote.
fn audit(agent: &TestAgent) -> Vec<Value> {
    let mut lines = Vec::new();
    if let Ok(entries) = std::fs::read_dir(agent.home.path().join("voxa").join("audit")) {
        for entry in entries {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            lines.extend(text.lines().map(|line| serde_json::from_str::<Value>(line).unwrap()));
        }
    }
    lines
}

/// Every file under `dir` holding `needle`.
fn files_containing(dir: &std::path::Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path).is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(needle)) {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test]
async fn a_hosted_call_runs_the_laptops_tools_and_the_key_stays_at_the_relay() {
    // Current-thread runtime: relay, agent and bridge all log into this subscriber.
    let (logs, _guard) = capture_logs();

    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let agent = hosted_agent(&relay).await;
    let (mut phone, hello_ok) = live_phone(&relay, &agent).await;
    assert_eq!(hello_ok["mode"], "hosted", "the agent's hello_ok passes unchanged: {hello_ok}");

    let (conn, setup) = start_call(&mut phone, &mut fake).await;
    let mut declared: Vec<String> = setup["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|declaration| declaration["name"].as_str().unwrap().to_owned())
        .collect();
    let mut listed: Vec<String> = serde_json::from_value(hello_ok["tools"].clone()).unwrap();
    declared.sort();
    listed.sort();
    assert_eq!(declared, listed, "Gemini is declared exactly the tools of hello_ok");

    phone.send_audio(&pcm(3, 640)).await;
    let (_, heard) = fake.expect_audio(conn).await;
    assert_eq!(heard, pcm(3, 640), "microphone audio reaches Gemini");
    fake.send(conn, FakeGemini::model_audio(&pcm(9, 480)));
    assert_eq!(phone.audio().await, pcm(9, 480), "Gemini's voice reaches the phone");

    std::fs::write(agent.workspace.path().join("notes.txt"), "hi").unwrap();
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"fc-1","name":"list_dir","args":{}}]}}));
    let started = phone.expect("tool_activity").await;
    assert_eq!((started["id"].as_str(), started["state"].as_str()), (Some("fc-1"), Some("started")));
    let finished = phone.expect("tool_activity").await;
    assert_eq!((finished["state"].as_str(), finished["ok"].as_bool()), (Some("finished"), Some(true)));
    let responses = expect_tool_responses(&mut fake, 1).await;
    assert_eq!(responses[0]["id"], "fc-1");
    assert_eq!(responses[0]["response"]["output"]["entries"][0]["name"], "notes.txt", "{}", responses[0]);

    // The phone's own calls pass through, and cannot claim the relay's label or ids.
    phone.send(json!({"type":"tool_call","id":"p1","name":"list_dir","args":{},"caller":"gemini-hosted"})).await;
    let own = recv_result(&mut phone.socket, "p1").await;
    assert_eq!(own["ok"], true, "{own}");
    phone.send(json!({"type":"tool_call","id":"gemini-hosted-1","name":"list_dir","args":{}})).await;
    let refused = recv_result(&mut phone.socket, "gemini-hosted-1").await;
    assert_eq!(refused["error"]["code"], "invalid-args", "{refused}");
    let records = audit(&agent);
    let caller_of = |name: &str| {
        records
            .iter()
            .filter(|r| r["tool"] == name)
            .map(|r| r["caller"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(caller_of("list_dir"), ["gemini-hosted", "phone"], "{records:?}");

    phone.send(json!({"type":"say","text":"thanks"})).await;
    fake.wait_for("the typed text", |e| e.kind == Kind::Text("thanks".into())).await;
    let usage = json!({"promptTokenCount":100,"responseTokenCount":50,"totalTokenCount":150});
    fake.send(conn, json!({"usageMetadata": usage, "serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    phone.send(json!({"type":"call_end"})).await;
    phone.expect("call_ended").await;
    fake.expect_closed(conn).await;
    phone.send(json!({"type":"call_end"})).await;
    assert_eq!(phone.expect("call_error").await["code"], "no-call");

    // The key: in no frame the phone saw, no file on the laptop's side, no log line.
    for frame in &phone.raw {
        assert!(!String::from_utf8_lossy(frame).contains(KEY), "a phone frame carries the key");
    }
    for dir in [agent.home.path(), agent.workspace.path()] {
        assert_eq!(files_containing(dir, KEY), Vec::<std::path::PathBuf>::new());
    }
    let tag = voxa::relay::code_tag(agent.code());
    let mut summary = None;
    for _ in 0..200 {
        let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
        if let Some(line) = text.lines().find(|line| line.contains("hosted call") && line.contains("total_tokens")) {
            summary = Some(line.to_owned());
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let summary = summary.expect("one log line per hosted call");
    for field in
        [format!("code=\"{tag}\""), "total_tokens=150".into(), "duration_s=".into(), "start=".into(), "end=".into()]
    {
        assert!(summary.contains(&field), "{field} missing from {summary}");
    }
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!logs.contains(KEY), "the logs carry the key");
    assert!(!logs.contains(agent.code()), "the logs carry the relay code");
    assert!(!logs.contains("notes.txt") && !logs.contains("thanks"), "the logs carry results or transcripts");
}

#[tokio::test]
async fn screenshots_of_a_hosted_call_go_to_the_phone_only() {
    let Some(xvfb) = crate::tools::Xvfb::start("320x240x24") else { return };
    let Call { mut fake, relay: _relay, agent: _agent, mut phone, conn } = Call::start(|_| {}).await;
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[{"id":"shot-1","name":"screenshot","args":{"display": xvfb.display}}]}}),
    );
    let image = phone.expect("image").await;
    assert_eq!((image["id"].as_str(), image["width"].as_u64()), (Some("shot-1"), Some(320)), "under Gemini's id");
    let data = image["data"].as_str().unwrap().to_owned();
    let responses = expect_tool_responses(&mut fake, 1).await;
    assert_eq!(responses[0]["response"]["output"]["width"], 320, "Gemini gets the text result: {}", responses[0]);
    let everything = format!("{:?}", fake.received());
    assert!(!everything.contains(&data[..64]) && !everything.contains("iVBORw0KGgo"), "image bytes reached Gemini");
}

#[tokio::test]
async fn calls_over_the_operators_limit_are_refused_at_capacity() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |live| live.max_calls = 1).await;
    let (first, second) = (hosted_agent(&relay).await, hosted_agent(&relay).await);
    let (mut one, _) = live_phone(&relay, &first).await;
    let (mut two, _) = live_phone(&relay, &second).await;
    let (conn, _) = start_call(&mut one, &mut fake).await;
    two.send(json!({"type":"call_start"})).await;
    let refused = two.expect("call_error").await;
    assert_eq!(refused["code"], "at-capacity");
    assert!(refused["message"].as_str().unwrap().contains("the relay is at capacity"), "{refused}");

    one.send(json!({"type":"call_end"})).await;
    one.expect("call_ended").await;
    fake.expect_closed(conn).await;
    // The place comes free once the first call's Gemini session is closed.
    let mut admitted = false;
    for _ in 0..100 {
        two.send(json!({"type":"call_start"})).await;
        let answer = loop {
            if let crate::gemini::Frame::Json(value) = two.next().await {
                if value["type"] == "call_started" || value["type"] == "call_error" {
                    break value;
                }
            }
        };
        if answer["type"] == "call_started" {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(admitted, "a freed place is given to the next call");
}

#[tokio::test]
async fn a_call_needs_the_agents_hello_ok_first() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let agent = hosted_agent(&relay).await;
    let url = format!("ws://{}/live?code={}", relay.addr, agent.code());
    let mut socket = connect(&url).await;
    let challenge = recv_challenge(&mut socket).await;
    send(&mut socket, hello_for(&"0".repeat(32), &challenge)).await;
    assert_eq!(recv_type_or_error(&mut socket).await["code"], "bearer-refused");
    send(&mut socket, json!({"type":"call_start"})).await;
    let mut phone = Phone::over(socket);
    let refused = phone.expect("call_error").await;
    assert_eq!(refused["code"], "unavailable", "{refused}");
    assert!(fake.drain().iter().all(|e| !matches!(e.kind, Kind::Connected { .. })), "no Gemini session was opened");
}

#[tokio::test]
async fn the_agent_leaving_mid_call_is_told_to_the_model_and_answers_pending_calls() {
    let Call { mut fake, relay: _relay, agent, mut phone, conn } = Call::start(|_| {}).await;
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[{"id":"slow","name":"run_command","args":{"command":"sleep 30"}}]}}),
    );
    phone.expect("tool_activity").await;
    agent.agent.stop().await;
    let event = fake
        .wait_for("the note", |e| matches!(&e.kind, Kind::Text(text) if text.contains("laptop went offline")))
        .await;
    assert_eq!(event.conn, conn, "the call goes on");
    // The pending call's answer and the note race to Gemini: either may come first.
    let answered = || {
        fake.received().into_iter().find_map(|e| match e.kind {
            Kind::ToolResponse(response) if response["id"] == "slow" => Some(response),
            _ => None,
        })
    };
    eventually("the pending call's answer", || answered().is_some()).await;
    let response = answered().unwrap();
    assert!(response["response"]["error"]["code"].is_string(), "the pending call is answered: {response}");
    fake.drain();
    // New calls fail at once.
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"after","name":"list_dir","args":{}}]}}));
    let response = expect_tool_responses(&mut fake, 1).await;
    assert_eq!(response[0]["id"], "after");
    assert_eq!(response[0]["response"]["error"]["message"], "the laptop is offline", "{}", response[0]);
}

#[tokio::test]
async fn the_phone_leaving_closes_the_gemini_socket_at_once() {
    let Call { mut fake, relay: _relay, agent: _agent, phone, conn } = Call::start(|_| {}).await;
    drop(phone);
    fake.expect_closed(conn).await;
}

#[tokio::test]
async fn relay_shutdown_ends_calls_with_call_ended() {
    let Call { mut fake, relay, agent: _agent, mut phone, conn } = Call::start(|_| {}).await;
    let stopping = tokio::spawn(relay.shut_down(STEP));
    phone.expect("call_ended").await;
    assert_eq!(recv_close(&mut phone.socket).await.0, 1001);
    fake.expect_closed(conn).await;
    stopping.await.unwrap();
}

#[tokio::test]
async fn calls_end_at_the_operators_time_limit() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |live| live.max_call_time = Duration::from_millis(300)).await;
    let agent = hosted_agent(&relay).await;
    let (mut phone, _) = live_phone(&relay, &agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    phone.expect("call_ended").await;
    fake.expect_closed(conn).await;
}

#[tokio::test]
async fn live_is_gated_by_the_proxy_token_or_else_the_relay_token_and_absent_without_a_key() {
    let fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let code = "0123456789abcdef0123456789abcdef";
    let live = format!("/live?code={code}");

    // No key: no /live, and /config says so.
    let plain = TestRelay::start().await;
    assert_eq!(http(plain.addr, &upgrade_request(&live, "")).await.0, 404);
    let (status, body) = http(plain.addr, "GET /config HTTP/1.1\r\nHost: relay\r\n\r\n").await;
    assert_eq!((status, serde_json::from_str::<Value>(&body).unwrap()["live"].clone()), (200, json!(false)));

    // The relay token gates /live like /ws.
    let mut config = LiveConfig::new(fake.config(KEY));
    let relay_token = Secret::from_string("relay-token-5d2e".into());
    let gated = TestRelay::with_config(RelayConfig {
        token: Some(relay_token.clone()),
        live: Some(config.clone()),
        ..Default::default()
    })
    .await;
    assert_eq!(http(gated.addr, &upgrade_request(&live, "")).await.0, 401);
    assert_eq!(http(gated.addr, &upgrade_request(&live, "Authorization: Bearer relay-token-5d2\r\n")).await.0, 401);
    let (status, body) = http(gated.addr, "GET /config HTTP/1.1\r\nHost: relay\r\n\r\n").await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"version": voxa::VERSION, "live": true}));
    let options = DialOptions { bearer: Some(relay_token.clone()), ..Default::default() };
    let url = format!("ws://{}{live}", gated.addr);
    assert!(voxa::net::dial::connect(&url, &options).await.is_ok(), "the relay token opens /live");

    // A proxy token replaces it for /live.
    config.proxy_token = Some(Secret::from_string("proxy-token-9a1b".into()));
    let proxied = TestRelay::with_config(RelayConfig {
        token: Some(relay_token.clone()),
        live: Some(config),
        ..Default::default()
    })
    .await;
    let (status, body) =
        http(proxied.addr, &upgrade_request(&live, "Authorization: Bearer relay-token-5d2e\r\n")).await;
    assert_eq!(status, 401);
    assert!(!body.contains("proxy-token") && !body.contains("relay-token"), "{body}");
    let url = format!("ws://{}{live}", proxied.addr);
    let options = DialOptions { bearer: Some(Secret::from_string("proxy-token-9a1b".into())), ..Default::default() };
    assert!(voxa::net::dial::connect(&url, &options).await.is_ok(), "the proxy token opens /live");
    let ws = format!("ws://{}/ws?code={code}", proxied.addr);
    assert!(voxa::net::dial::connect(&ws, &options).await.is_err(), "the proxy token opens nothing else");
}

#[tokio::test]
async fn voxa_relay_hosts_calls_with_a_key_file_and_logs_one_line_per_call() {
    use crate::support::{voxa_bin, RunningVoxa};
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("gemini.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let private = |path: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    private(&key_file);
    let relay_cmd = |key_file: &std::path::Path| {
        let mut cmd = std::process::Command::new(voxa_bin());
        cmd.env("RUST_LOG", "info").env("VOXA_GEMINI_URL", fake.url());
        for name in ["VOXA_RELAY_TOKEN", "VOXA_PROXY_TOKEN", "GEMINI_API_KEY"] {
            cmd.env_remove(name);
        }
        cmd.args(["relay", "--json", "--listen", "127.0.0.1:0", "--gemini-key-file"]).arg(key_file);
        cmd
    };

    // An empty key file is a usage error that names the file, not its content.
    let empty = dir.path().join("empty.key");
    std::fs::write(&empty, "\n").unwrap();
    private(&empty);
    let refused = relay_cmd(&empty).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("empty.key"), "{refused:?}");
    // So is one that others can read; the error does not quote it.
    let open = dir.path().join("open.key");
    std::fs::write(&open, KEY).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let refused = relay_cmd(&open).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(!String::from_utf8_lossy(&refused.stderr).contains(KEY), "{refused:?}");

    let mut child = RunningVoxa::spawn(relay_cmd(&key_file));
    let listening = child.wait_event("relay_listening");
    assert_eq!(listening["live"], true, "{listening}");
    let addr: std::net::SocketAddr = listening["listen"].as_str().unwrap().parse().unwrap();
    // The child's address in the harness's shape; nothing runs in this process.
    let relay = TestRelay { addr, stop: Default::default(), task: tokio::spawn(async {}) };
    let agent = hosted_agent(&relay).await;
    let (mut phone, _) = live_phone(&relay, &agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"fc-1","name":"list_dir","args":{}}]}}));
    expect_tool_responses(&mut fake, 1).await;
    let usage = json!({"promptTokenCount":7,"responseTokenCount":5,"totalTokenCount":12});
    fake.send(conn, json!({"usageMetadata": usage, "serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    phone.send(json!({"type":"call_end"})).await;
    phone.expect("call_ended").await;
    fake.expect_closed(conn).await;
    drop(phone);
    let (_, stderr) = child.stop();
    let stderr = without_colours(&stderr);
    let tag = voxa::relay::code_tag(agent.code());
    let lines: Vec<_> = stderr.lines().filter(|line| line.contains("hosted call") && line.contains(&tag)).collect();
    assert_eq!(lines.len(), 1, "one line per call: {stderr}");
    assert!(lines[0].contains("total_tokens=12") && lines[0].contains("duration_s="), "{}", lines[0]);
    assert!(!stderr.contains(KEY) && !stderr.contains(agent.code()), "the key or the code reached the log: {stderr}");
}

/// `text` without terminal colour sequences.
fn without_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_hosted_calls_stream_audio_at_once() {
    const CALLS: usize = 100;
    const FRAMES: u8 = 5;
    let fake = FakeGemini::start(FakeOptions { echo_audio: true, ..FakeOptions::new(KEY) }).await;
    // Every laptop and phone comes from 127.0.0.1: no per-address limit, as behind a proxy.
    let live = Some(LiveConfig::new(fake.config(KEY)));
    let relay = TestRelay::with_config(RelayConfig { live, max_connections_per_ip: 0, ..Default::default() }).await;
    let mut agents = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        agents.push(hosted_agent(&relay).await);
    }
    let calls = agents.iter().enumerate().map(|(n, agent)| {
        let relay = &relay;
        async move {
            let (mut phone, _) = live_phone(relay, agent).await;
            phone.send(json!({"type":"call_start"})).await;
            phone.expect("call_started").await;
            for i in 0..FRAMES {
                let chunk = pcm(i.wrapping_add(n as u8), 640);
                phone.send_audio(&chunk).await;
                assert_eq!(phone.audio().await, chunk, "call {n} hears its own audio back, in order");
            }
            phone.send(json!({"type":"call_end"})).await;
            phone.expect("call_ended").await;
        }
    });
    futures_util::future::join_all(calls).await;
    let setups = fake.received().iter().filter(|e| matches!(e.kind, Kind::Setup(_))).count();
    assert_eq!(setups, CALLS, "one Gemini session per call");
}
