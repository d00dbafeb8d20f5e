//! Hosted voice (docs/PROTOCOL.md, "Hosted voice"): a page's call socket at the relay's `/live`,
//! the relay hosting the call against the fake Gemini Live server with the operator's key, and a
//! real agent in hosted mode behind the page's own sealed session. The relay talks to the page
//! only; [`Page`] carries the model's calls into the sealed session as web/js/voice/socket.js does.

use std::time::Duration;

use serde_json::{json, Value};
use voxa::hosted::{Hosting, LiveConfig};
use voxa::net::dial::{ClientSocket, DialOptions};
use voxa::relay::RelayConfig;
use voxa::secret::Secret;

use crate::support::audit::audit_lines;
use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::support::harness::*;
use crate::support::live::{hosted_agent, hosting_relay, live_phone, start_call, Page};
use crate::support::logs::capture_logs;
use crate::support::phone::{expect_tool_responses, pcm, Phone, KEY};

/// A hosted call under way: the test Gemini server, the relay, the agent, the page (its call
/// socket as `phone`, its sealed session as `session`) and Gemini's connection number.
struct Call {
    fake: FakeGemini,
    relay: TestRelay,
    agent: TestAgent,
    phone: Phone,
    session: ClientSocket,
    conn: usize,
}

impl Call {
    async fn start(tweak: impl FnOnce(&mut LiveConfig)) -> Call {
        let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
        let relay = hosting_relay(&fake, tweak).await;
        let agent = hosted_agent(&relay).await;
        let Page { live: mut phone, session, .. } = Page::open(&relay, &agent).await;
        let (conn, _) = start_call(&mut phone, &mut fake).await;
        Call { fake, relay, agent, phone, session, conn }
    }
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
async fn a_hosted_call_runs_the_laptops_tools_through_the_pages_sealed_session_and_the_key_stays_at_the_relay() {
    // Current-thread runtime: relay, agent and bridge all log into this subscriber.
    let (logs, _guard) = capture_logs();

    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let agent = hosted_agent(&relay).await;
    let Page { live: mut phone, mut session, hello_ok } = Page::open(&relay, &agent).await;
    assert_eq!(hello_ok["mode"], "hosted", "{hello_ok}");

    let (conn, setup) = start_call(&mut phone, &mut fake).await;
    let mut declared: Vec<String> = setup["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|declaration| declaration["name"].as_str().unwrap().to_owned())
        .collect();
    let mut listed: Vec<String> = serde_json::from_value(hello_ok["tools"].clone()).unwrap();
    listed.retain(|name| name != "approve");
    declared.sort();
    listed.sort();
    assert_eq!(declared, listed, "Gemini is declared the tools of the sealed hello_ok, but approve");

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
    // The laptop ran it for the page's sealed session, under the relay's id, as hosted voice.
    let carried = recv_type(&mut session, "tool_result").await;
    assert!(carried["id"].as_str().unwrap().starts_with("gemini-hosted-"), "{carried}");

    // The page's own calls are its own; `/live` carries none of the session's frames.
    send(&mut session, json!({"type":"tool_call","id":"p1","name":"list_dir","args":{}})).await;
    assert_eq!(recv_result(&mut session, "p1").await["ok"], true);
    for frame in [
        json!({"type":"tool_call","id":"l1","name":"list_dir","args":{}}),
        json!({"type":"hello","protocol":2,"nonce":"1".repeat(32),"proof":"a".repeat(64)}),
        json!({"type":"calls"}),
        json!({"type":"follow"}),
        json!({"type":"approve","approval":"a-0","decision":"allow"}),
    ] {
        phone.send(frame.clone()).await;
        assert_eq!(phone.expect("error").await["code"], "bad-frame", "{frame}");
    }
    let records = audit_lines(&agent);
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
    // The call's one summary line is checked through the real binary's log
    // (voxa_relay_hosts_calls_with_a_key_file_…): tracing's per-callsite interest cache, shared by
    // every test thread of this process, can hide an event from one thread's capture.
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!logs.contains(KEY), "the logs carry the key");
    assert!(!logs.contains(agent.code()), "the logs carry the relay code");
    assert!(!logs.contains("notes.txt") && !logs.contains("thanks"), "the logs carry results or transcripts");
}

#[tokio::test]
async fn screenshots_of_a_hosted_call_stay_on_the_page() {
    let Some(xvfb) = crate::support::xvfb::Xvfb::start("320x240x24") else { return };
    let Call { mut fake, relay: _relay, agent: _agent, phone: _phone, mut session, conn } = Call::start(|_| {}).await;
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[{"id":"shot-1","name":"screenshot","args":{"display": xvfb.display}}]}}),
    );
    let image = recv_type(&mut session, "image").await;
    assert_eq!(image["width"].as_u64(), Some(320), "the picture reaches the page in its sealed session");
    let data = image["data"].as_str().unwrap().to_owned();
    let responses = expect_tool_responses(&mut fake, 1).await;
    assert_eq!(responses[0]["response"]["output"]["shown_on_phone"], true, "{}", responses[0]);
    let everything = format!("{:?}", fake.received());
    assert!(!everything.contains(&data[..64]) && !everything.contains("iVBORw0KGgo"), "image bytes reached Gemini");
}

#[tokio::test]
async fn calls_over_the_operators_limit_are_refused_at_capacity() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |live| live.max_calls = 1).await;
    let (first, second) = (hosted_agent(&relay).await, hosted_agent(&relay).await);
    let mut one = live_phone(&relay, &first).await;
    let mut two = live_phone(&relay, &second).await;
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
            if let crate::support::phone::Frame::Json(value) = two.next().await {
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

/// The clients the agent has sessions with, as its `status` lists them.
async fn connected_clients(agent: &TestAgent) -> Vec<Value> {
    let mut local = agent.local_client().await;
    send(&mut local, json!({"type":"status"})).await;
    let status = recv_type(&mut local, "status").await;
    status["connected"].as_array().unwrap().iter().filter(|c| c["via"] == "relay").cloned().collect()
}

#[tokio::test]
async fn a_call_is_hosted_only_for_a_laptop_at_the_relay_and_live_is_never_a_session_of_the_pairing() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    // No laptop holds this code here: no call, no Gemini session.
    let stranger = format!("ws://{}/live?code={}", relay.addr, "0".repeat(32));
    let mut nobody = Phone::over(connect(&stranger).await);
    nobody.send(json!({"type":"call_start","tools":["run_command"]})).await;
    let refused = nobody.expect("call_error").await;
    assert_eq!(refused["code"], "unavailable", "{refused}");
    assert!(fake.drain().iter().all(|e| !matches!(e.kind, Kind::Connected { .. })), "no Gemini session was opened");

    // A laptop at the relay: its code's call starts. The laptop never hears of the socket.
    let agent = hosted_agent(&relay).await;
    let mut phone = live_phone(&relay, &agent).await;
    start_call(&mut phone, &mut fake).await;
    assert!(connected_clients(&agent).await.is_empty(), "the agent admitted a session from /live");
    assert_eq!(phone.texts.iter().filter(|t| t["type"] == "challenge").count(), 0, "{:?}", phone.texts);
    // Eight call sockets take none of the code's eight places: the owner's phone still joins.
    let mut many = Vec::new();
    for _ in 0..8 {
        many.push(live_phone(&relay, &agent).await);
    }
    let mut owner = agent.phone(&relay).await;
    send(&mut owner, json!({"type":"status"})).await;
    recv_type(&mut owner, "status").await;
}

#[tokio::test]
async fn the_phone_leaving_closes_the_gemini_socket_at_once() {
    let Call { mut fake, relay: _relay, agent: _agent, phone, conn, .. } = Call::start(|_| {}).await;
    drop(phone);
    fake.expect_closed(conn).await;
}

#[tokio::test]
async fn relay_shutdown_ends_calls_with_call_ended() {
    let Call { mut fake, relay, agent: _agent, mut phone, conn, .. } = Call::start(|_| {}).await;
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
    let mut phone = live_phone(&relay, &agent).await;
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
        service: Some(Hosting::service(config.clone())),
        ..Default::default()
    })
    .await;
    assert_eq!(http(gated.addr, &upgrade_request(&live, "")).await.0, 401);
    assert_eq!(http(gated.addr, &upgrade_request(&live, "Authorization: Bearer relay-token-5d2\r\n")).await.0, 401);
    let (status, body) = http(gated.addr, "GET /config HTTP/1.1\r\nHost: relay\r\n\r\n").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"version": voxa::VERSION, "live": true, "relay_token": true})
    );
    let options = DialOptions { bearer: Some(relay_token.clone()), ..Default::default() };
    let url = format!("ws://{}{live}", gated.addr);
    assert!(voxa::net::dial::connect(&url, &options).await.is_ok(), "the relay token opens /live");

    // A proxy token replaces it for /live.
    config.proxy_token = Some(Secret::from_string("proxy-token-9a1b".into()));
    let proxied = TestRelay::with_config(RelayConfig {
        token: Some(relay_token.clone()),
        service: Some(Hosting::service(config)),
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
async fn voxa_relay_hosts_calls_with_a_key_file_and_its_log_holds_one_line_per_call_and_nothing_said() {
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
    let closed_relay_cmd = |key_file: &std::path::Path| {
        let mut cmd = std::process::Command::new(voxa_bin());
        // The relay counts its daily budget in its home.
        cmd.env("RUST_LOG", "info").env("VOXA_GEMINI_URL", fake.url()).env("VOXA_HOME", dir.path().join("home"));
        for name in ["VOXA_RELAY_TOKEN", "VOXA_PROXY_TOKEN", "GEMINI_API_KEY"] {
            cmd.env_remove(name);
        }
        cmd.args(["relay", "--json", "--listen", "127.0.0.1:0", "--gemini-key-file"]).arg(key_file);
        cmd
    };
    let relay_cmd = |key_file: &std::path::Path| {
        let mut cmd = closed_relay_cmd(key_file);
        cmd.arg("--open-live");
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

    // A key and no token asked of callers: the relay refuses to start rather than open a tap on
    // the key; VOXA_PROXY_TOKEN (or a relay token) or an explicit --open-live is needed.
    let refused = closed_relay_cmd(&key_file).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("VOXA_PROXY_TOKEN") && stderr.contains("--open-live"), "{stderr}");
    assert!(!stderr.contains(KEY), "{stderr}");
    let mut gated = closed_relay_cmd(&key_file);
    gated.env("VOXA_PROXY_TOKEN", "proxy-token-7c2d");
    let mut gated = RunningVoxa::spawn(gated);
    assert_eq!(gated.wait_event("relay_listening")["live"], true);
    gated.crash();

    let mut child = RunningVoxa::spawn(relay_cmd(&key_file));
    let listening = child.wait_event("relay_listening");
    assert_eq!(listening["live"], true, "{listening}");
    let addr: std::net::SocketAddr = listening["listen"].as_str().unwrap().parse().unwrap();
    // The child's address in the harness's shape; nothing runs in this process.
    let relay = TestRelay { addr, stop: Default::default(), task: tokio::spawn(async {}) };
    let agent = hosted_agent(&relay).await;
    let Page { live: mut phone, session, .. } = Page::open(&relay, &agent).await;
    let secrets_of_the_call = full_call(&mut fake, &agent, &mut phone).await;
    drop((phone, session));
    let (_, stderr) = child.stop();
    let stderr = without_colours(&stderr);
    let tag = voxa::hosted::code_tag(agent.code());
    let lines: Vec<_> = stderr.lines().filter(|line| !line.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "the call's summary is the relay's only line: {stderr}");
    for field in [
        format!("code=\"{tag}\""),
        "hosted call".into(),
        "start=".into(),
        "end=".into(),
        "duration_s=".into(),
        "prompt_tokens=7".into(),
        "response_tokens=5".into(),
        "total_tokens=12".into(),
        "failure=\"none\"".into(),
    ] {
        assert!(lines[0].contains(&field), "{field} missing from {}", lines[0]);
    }
    for secret in [KEY, agent.code()].into_iter().chain(secrets_of_the_call.iter().map(String::as_str)) {
        assert!(!stderr.contains(secret), "{secret} reached the relay's log: {stderr}");
    }
}

/// Everything a call carries, end to end: audio both ways, transcripts, typed text, a tool call
/// with arguments and a result, a `goAway` and its resume, token counts. Returns the text of each
/// part that the relay's log must never hold.
async fn full_call(fake: &mut FakeGemini, agent: &TestAgent, phone: &mut Phone) -> Vec<String> {
    let (first, _) = start_call(phone, fake).await;
    let (heard, spoken, typed) = ("heard-5a0c", "spoken-6b1d", "typed-4f2e");
    let (argument, result) = ("argument-7c1e", "result-3b9d");
    std::fs::write(agent.workspace.path().join(format!("{result}.txt")), "").unwrap();
    let microphone = pcm(7, 640);
    phone.send_audio(&microphone).await;
    fake.expect_audio(first).await;
    fake.send(first, json!({"serverContent":{"inputTranscription":{"text": heard}}}));
    fake.send(first, json!({"serverContent":{"outputTranscription":{"text": spoken}}}));
    let voice = pcm(8, 480);
    fake.send(first, FakeGemini::model_audio(&voice));
    assert_eq!(phone.audio().await, voice);
    phone.send(json!({"type":"say","text": typed})).await;
    fake.wait_for("the typed text", |e| e.kind == Kind::Text(typed.into())).await;
    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":"handle-9e","resumable":true}}));
    fake.send(first, json!({"goAway":{"timeLeft":"20s"}}));
    let (second, _) = fake.expect_setup().await;
    let command = format!("ls # {argument}");
    fake.send(
        second,
        json!({"toolCall":{"functionCalls":[{"id":"fc-1","name":"run_command","args":{"command": command}}]}}),
    );
    let answer = expect_tool_responses(fake, 1).await;
    assert!(answer[0].to_string().contains(result), "{}", answer[0]);
    let usage = json!({"promptTokenCount":7,"responseTokenCount":5,"totalTokenCount":12});
    fake.send(second, json!({"usageMetadata": usage, "serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    assert!(phone.texts.iter().any(|t| t["text"] == spoken), "{:?}", phone.texts);
    phone.send(json!({"type":"call_end"})).await;
    phone.expect("call_ended").await;
    fake.expect_closed(second).await;
    let base64 = |pcm: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pcm);
    [heard, spoken, typed, argument, result]
        .map(String::from)
        .into_iter()
        .chain([base64(&microphone), base64(&voice)])
        .collect()
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
    let live =
        Some(LiveConfig { calls_per_address: CALLS, starts_per_minute: CALLS, ..LiveConfig::new(fake.config(KEY)) });
    let relay = TestRelay::with_config(RelayConfig {
        service: live.map(Hosting::service),
        max_connections_per_ip: 0,
        ..Default::default()
    })
    .await;
    let mut agents = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        agents.push(hosted_agent(&relay).await);
    }
    let calls = agents.iter().enumerate().map(|(n, agent)| {
        let relay = &relay;
        async move {
            let mut phone = live_phone(relay, agent).await;
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

/// A hosted call whose first Gemini connection issued the resumable `handle` (the bridge has read
/// it) and then asked for `run_command` call `id`, which runs on the laptop until `gate` exists in
/// its workspace and then prints `done`.
async fn hosted_call_running_a_gated_tool(handle: &str, id: &str, gate: &str) -> Call {
    let mut call = Call::start(|_| {}).await;
    call.fake.send(call.conn, json!({"sessionResumptionUpdate":{"newHandle":handle,"resumable":true}}));
    call.fake.send(call.conn, json!({"serverContent":{"turnComplete":true}}));
    call.phone.expect("turn_complete").await;
    let command = format!("while [ ! -e {gate} ]; do sleep 0.05; done; echo done");
    let function_call = json!({"id":id,"name":"run_command","args":{"command":command}});
    call.fake.send(call.conn, json!({"toolCall":{"functionCalls":[function_call]}}));
    call.phone.expect("tool_activity").await;
    call
}

/// Gemini asks connection `conn` for `list_dir` as call `id`; the laptop's answer, as Gemini got it.
async fn list_dir_on(fake: &mut FakeGemini, conn: usize, id: &str) -> crate::support::fake_gemini::Event {
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":id,"name":"list_dir","args":{}}]}}));
    fake.wait_for("the laptop's answer", |e| matches!(&e.kind, Kind::ToolResponse(r) if r["id"] == id)).await
}

/// The entry names of a `list_dir` answer Gemini got.
fn listed(event: &crate::support::fake_gemini::Event) -> Vec<String> {
    let Kind::ToolResponse(response) = &event.kind else { panic!("not a tool response: {event:?}") };
    let entries = response["response"]["output"]["entries"].as_array().unwrap_or_else(|| panic!("{response}"));
    entries.iter().map(|entry| entry["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_hosted_call_survives_go_away_and_a_dropped_gemini_socket_with_tools_still_answered() {
    let Call { mut fake, relay: _relay, agent, mut phone, conn: first, .. } =
        hosted_call_running_a_gated_tool("before-call", "fc-slow", "go").await;
    std::fs::write(agent.workspace.path().join("notes.txt"), "hi").unwrap();
    // goAway while the laptop runs a call: the connection stays in use until it is answered.
    fake.send(first, json!({"goAway":{"timeLeft":"30s"}}));
    let chunk = pcm(5, 640);
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(first).await.1, chunk, "audio still goes to the old connection");
    std::fs::write(agent.workspace.path().join("go"), "").unwrap();
    let answered = fake.wait_for("the answer", |e| matches!(e.kind, Kind::ToolResponse(_))).await;
    assert_eq!(answered.conn, first, "answered on the connection that asked");
    let Kind::ToolResponse(response) = &answered.kind else { unreachable!() };
    assert!(response["response"]["output"]["output"].as_str().unwrap().contains("done"), "{response}");

    // A handle covering the answer: the session resumes with it, the old socket closed first.
    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":"after-call","resumable":true}}));
    let (second, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({"handle":"after-call"}));
    eventually("the old connection closed", || {
        fake.received().iter().any(|e| e.conn == first && e.kind == Kind::Closed)
    })
    .await;
    assert!(!fake.received().iter().any(|e| matches!(e.kind, Kind::Rejected { .. })), "the service refused nothing");
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(second).await.1, chunk, "audio flows to the resumed session");
    assert!(listed(&list_dir_on(&mut fake, second, "fc-after-go-away").await).contains(&"notes.txt".to_owned()));

    // The resumed socket drops without a close: resumed again with the newest handle.
    fake.send(second, json!({"sessionResumptionUpdate":{"newHandle":"before-drop","resumable":true}}));
    fake.send(second, json!({"serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    fake.drop_conn(second);
    let (third, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({"handle":"before-drop"}));
    let answer = list_dir_on(&mut fake, third, "fc-after-drop").await;
    assert_eq!(answer.conn, third);
    assert!(listed(&answer).contains(&"notes.txt".to_owned()));
    let reply = pcm(4, 960);
    fake.send(third, FakeGemini::model_audio(&reply));
    assert_eq!(phone.audio().await, reply, "the phone hears the resumed session");

    // The phone saw one call throughout, as in self-hosted mode.
    let started = phone.texts.iter().filter(|t| t["type"] == "call_started").count();
    assert_eq!(started, 1, "resuming is invisible to the phone: {:?}", phone.texts);
    assert!(!phone.saw("call_ended") && !phone.saw("call_error"), "{:?}", phone.texts);
    let callers: Vec<_> = audit_lines(&agent).iter().map(|r| r["caller"].as_str().unwrap().to_owned()).collect();
    assert_eq!(callers, ["gemini-hosted"; 3], "every answer came from the laptop");
    phone.send(json!({"type":"call_end"})).await;
    phone.expect("call_ended").await;
    fake.expect_closed(third).await;
}

#[tokio::test]
async fn a_dropped_gemini_socket_without_a_handle_ends_the_hosted_call_as_self_hosted_mode_does() {
    let Call { mut fake, relay: _relay, agent: _agent, mut phone, conn, .. } = Call::start(|_| {}).await;
    fake.drop_conn(conn);
    let error = phone.expect("call_error").await;
    assert_eq!(error["code"], "gemini-closed", "{error}");
    phone.expect("call_ended").await;
    assert_eq!(fake.drain().iter().filter(|e| matches!(e.kind, Kind::Setup(_))).count(), 0, "nothing to resume");
    // The session goes on: the next call starts afresh.
    phone.send(json!({"type":"call_start"})).await;
    let (next, setup) = fake.expect_setup().await;
    assert_ne!(next, conn);
    assert_eq!(setup["sessionResumption"], json!({}));
    phone.expect("call_started").await;
}

#[tokio::test]
async fn a_hosted_call_with_env_runs_on_the_environment() {
    use voxa::environments::{self, store};
    use voxa::state::Home;
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let environment = hosted_agent(&relay).await;
    let host = hosted_agent(&relay).await;
    let home_of = |agent: &TestAgent| Home::at(agent.home.path().join("voxa"));
    let host_token = |home: &Home| store::load_or_create_host_token(home).unwrap().expose().to_owned();
    let (env_home, host_home) = (home_of(&environment), home_of(&host));
    let issued = environments::issue(&env_home, &relay.url(), &host_token(&env_home)).unwrap();
    environments::add(&host_home, &issued.line.encode(), Some("devbox"), &host_token(&host_home)).unwrap();
    let mut probe = phone_socket(&relay, issued.line.code.expose()).await;
    wait_agent_joined(&mut probe).await;
    drop(probe);
    std::fs::write(environment.workspace.path().join("only-on-the-environment.txt"), "x").unwrap();

    let Page { live: mut phone, session: _session, hello_ok } = Page::open(&relay, &host).await;
    assert!(hello_ok["tools"].as_array().unwrap().contains(&json!("fleet")), "{hello_ok}");
    let (conn, setup) = start_call(&mut phone, &mut fake).await;
    // The call starting proves the service's schema check passed (the fake closes 1007 otherwise).
    let declarations = setup["tools"][0]["functionDeclarations"].as_array().unwrap();
    let fleet = declarations.iter().find(|d| d["name"] == "fleet").expect("fleet is declared");
    assert!(fleet["description"].as_str().unwrap().contains("env"), "{fleet}");
    // Every tool an environment can run takes `env`; the router's and the session host's run here.
    let on_environments =
        |name: &serde_json::Value| voxa::tools::TOOLS.iter().any(|spec| spec.name == name && spec.runs.routable());
    for declaration in declarations.iter().filter(|d| on_environments(&d["name"])) {
        assert_eq!(declaration.pointer("/parameters/properties/env/type"), Some(&json!("STRING")), "{declaration}");
    }
    assert!(declarations.iter().filter(|d| on_environments(&d["name"])).count() >= 5, "{declarations:?}");

    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"fc-env","name":"list_dir","args":{"env":"devbox"}}]}}));
    let there = fake.wait_for("the answer", |e| matches!(&e.kind, Kind::ToolResponse(r) if r["id"] == "fc-env")).await;
    assert!(listed(&there).contains(&"only-on-the-environment.txt".to_owned()), "{there:?}");
    let here = list_dir_on(&mut fake, conn, "fc-here").await;
    assert!(!listed(&here).contains(&"only-on-the-environment.txt".to_owned()), "without env it runs on the host");
    let host_records = audit_lines(&host);
    assert!(
        host_records.iter().any(|r| r["caller"] == "gemini-hosted" && r["env"] == "devbox" && r["tool"] == "list_dir"),
        "the host records the routed call: {host_records:?}"
    );
    let env_records = audit_lines(&environment);
    assert!(env_records.iter().any(|r| r["tool"] == "list_dir"), "the environment ran it: {env_records:?}");
}

#[tokio::test]
async fn a_second_live_phone_on_a_code_joins_beside_the_first_with_a_call_of_its_own() {
    let Call { mut fake, relay, agent, mut phone, conn, .. } = Call::start(|_| {}).await;
    let mut second = live_phone(&relay, &agent).await;
    // Each call socket's call is its own.
    let (next, _) = start_call(&mut second, &mut fake).await;
    assert_ne!(next, conn);
    // The first phone's call went on meanwhile: it ends when that phone ends it.
    send(&mut phone.socket, json!({"type":"call_end"})).await;
    fake.expect_closed(conn).await;
    send(&mut second.socket, json!({"type":"call_end"})).await;
    fake.expect_closed(next).await;
}
