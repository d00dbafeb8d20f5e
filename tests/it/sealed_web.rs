//! The web client's sealed sessions (docs/PROTOCOL.md, "Sealed sessions (protocol 3)"), in
//! Chromium: its Noise implementation reproduces the published vectors, the page completes a
//! sealed session with the real agent through the real relay and runs a tool (the relay's view of
//! it holds none of the plaintext), and a relay that flips one bit of the page's frames ends the
//! session with nothing run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::agent::LinkEvent;
use voxa::protocol::{ErrorCode, RelayPage};

use crate::support::audit::audit_lines;
use crate::support::browser::{Browser, Scheme};
use crate::support::harness::*;
use crate::support::mitm::{altering_front, altering_front_for, drop_next_up, flip_one_bit, Hook, Mitm, Way};
use crate::support::sealed::{seal_mark, session_counts};

/// Text of the terminal output, as shown.
const TERMINAL: &str = "#commands-out";

/// The page's Noise handshake and transport, both roles, with the vector's fixed keys: every
/// message and the handshake hash as hex.
const VECTOR_RUN: &str = "const [v, done] = arguments;
    import('/js/seal/noise.js').then(async (noise) => {
        const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
        const bytes = (h) => Uint8Array.from(h.match(/../g) || [], (x) => parseInt(x, 16));
        const side = (initiator, p) => noise.Handshake.begin({ initiator, psk: bytes(v[p + '_psks'][0]),
            prologue: bytes(v[p + '_prologue']), ephemeral: bytes(v[p + '_ephemeral']) });
        const [init, resp] = [await side(true, 'init'), await side(false, 'resp')];
        const sent = [], read = [];
        const one = await init.writeMessage(bytes(v.messages[0].payload));
        sent.push(hex(one));
        read.push(hex(await resp.readMessage(one)));
        const two = await resp.writeMessage(bytes(v.messages[1].payload));
        sent.push(hex(two));
        read.push(hex(await init.readMessage(two)));
        const [a, b] = [await init.split(), await resp.split()];
        for (let i = 2; i < v.messages.length; i += 1) {
            const [writer, reader] = i % 2 === 0 ? [a.send, b.receive] : [b.send, a.receive];
            const message = await writer.encrypt(new Uint8Array(0), bytes(v.messages[i].payload));
            sent.push(hex(message));
            read.push(hex(await reader.decrypt(new Uint8Array(0), message)));
        }
        done({ sent, read, hash: hex(a.hash), responderHash: hex(b.hash) });
    }).catch((error) => done({ error: String(error) }));";

/// voxa's layer in the page: the documented key schedule inputs, a frame split at the part limit
/// and joined again, and a flipped bit refused.
const CHANNEL_RUN: &str = "const [token, challenge, done] = arguments;
    Promise.all([import('/js/seal/noise.js'), import('/js/seal/channel.js')]).then(async ([noise, seal]) => {
        const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
        const key = await seal.psk(token);
        const prologue = new TextDecoder().decode(seal.prologue(challenge));
        const hello = await seal.startHello(token, challenge);
        const agent = await noise.Handshake.begin({ initiator: false, psk: key, prologue: seal.prologue(challenge) });
        await agent.readMessage(hello.message);
        const reply = await agent.writeMessage(new TextEncoder().encode('{\"type\":\"hello_ok\"}'));
        const { payload, channel } = await hello.finish(reply);
        const keys = await agent.split();
        const peer = new seal.Channel(keys.send, keys.receive);
        const big = 'x'.repeat(seal.MAX_PART + 1);
        const parts = await Promise.all(channel.sealJson(big));
        const opened = [];
        for (const part of parts) opened.push(await peer.open(part));
        const flipped = (await Promise.all(channel.sealJson('{}')))[0];
        flipped[5] ^= 1;
        const refused = await peer.open(flipped).then(() => 'opened', (e) => e.constructor.name);
        done({ psk: hex(key), prologue, payload, sizes: parts.map((p) => p.length),
            joined: opened[1] && opened[1].text === big, first: opened[0], refused,
            helloLength: hello.message.length });
    }).catch((error) => done({ error: String(error) }));";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_reproduces_the_published_noise_vectors_and_the_documented_framing() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    browser.open(&format!("http://{}/", relay.addr)).await;
    let fixture: Value =
        serde_json::from_str(include_str!("../fixtures/noise/NNpsk0_25519_AESGCM_SHA256.json")).unwrap();
    let vector = &fixture["vectors"][0];
    assert_eq!(vector["protocol_name"], "Noise_NNpsk0_25519_AESGCM_SHA256");
    let ran = browser.client.execute_async(VECTOR_RUN, vec![vector.clone()]).await.unwrap();
    assert_eq!(ran["error"], Value::Null, "{ran}");
    let messages = vector["messages"].as_array().unwrap();
    assert_eq!(ran["sent"].as_array().unwrap().len(), messages.len());
    for (i, message) in messages.iter().enumerate() {
        assert_eq!(ran["sent"][i], message["ciphertext"], "message {i}");
        assert_eq!(ran["read"][i], message["payload"], "message {i} read back");
    }
    assert_eq!(ran["hash"], vector["handshake_hash"]);
    assert_eq!(ran["responderHash"], vector["handshake_hash"]);

    // The values docs/PROTOCOL.md's sealed-session section and src/seal's unit tests use.
    let (token, challenge) = ("00112233445566778899aabbccddeeff", "0123456789abcdef0123456789abcdef");
    let ran = browser.client.execute_async(CHANNEL_RUN, vec![json!(token), json!(challenge)]).await.unwrap();
    assert_eq!(ran["error"], Value::Null, "{ran}");
    assert_eq!(ran["psk"], "fed243563102e6b2b86f65b0221a0a338496766d18898c2ab8ebd6f73ccdf1cb");
    assert_eq!(ran["prologue"], format!("voxa/3\n{challenge}"));
    assert_eq!(ran["helloLength"], 48, "message 1 is the ephemeral key and an empty payload's tag");
    assert_eq!(ran["payload"], r#"{"type":"hello_ok"}"#);
    // 65,519 bytes of JSON: one full part (65,518 + kind + tag = 65,535) and a last part of one byte.
    assert_eq!(ran["sizes"], json!([65_535, 18]));
    assert_eq!((ran["first"].clone(), ran["joined"].clone()), (Value::Null, Value::Bool(true)));
    assert_eq!(ran["refused"], "Broken");
    browser.close().await;
}

/// What a relay saw of a page's session: a `hello_ok` in the clear, then only sealed frames and
/// the relay's own notices, and none of `plaintexts` anywhere.
pub(crate) fn assert_sealed_after_hello(capture: &[(Way, Message)], plaintexts: &[&str]) {
    let mut hello_ok = false;
    for (way, message) in capture {
        let bytes = message.clone().into_data();
        for plain in plaintexts {
            assert!(!bytes.windows(plain.len()).any(|w| w == plain.as_bytes()), "{way:?} frame shows {plain:?}");
        }
        match message {
            Message::Text(text) if hello_ok => {
                assert!(voxa::seal::socket::relay_notice(text).is_some(), "unsealed after the hello: {text}")
            }
            Message::Text(text) => hello_ok = text.contains("\"hello_ok\""),
            _ => {}
        }
    }
    assert!(hello_ok, "the page's hello_ok crossed the relay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_seals_its_session_with_the_real_agent_through_the_real_relay_and_runs_a_tool() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    // A relay that only watches: the page and its socket pass through, every frame is kept.
    let mitm = Mitm::start(relay.addr, agent.code(), Box::new(|_, m| vec![m])).await;
    browser.pair(&format!("http://{}/#code={}&token={}", mitm.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    assert_eq!(seal_mark(&browser).await, "sealed");
    // The page's session and the status client beside it: both sealed, none plain.
    assert_eq!(session_counts(&agent).await, (2, 0));

    let secret = "a-file-only-the-laptop-holds-4e1d";
    std::fs::write(agent.workspace.path().join("private.txt"), secret).unwrap();
    browser.type_into("Command", "cat private.txt; echo; echo typed-on-the-phone-8c2f").await;
    browser.press("Run").await;
    browser
        .wait_text(TERMINAL, "the command's output", |t| t.contains(secret) && t.contains("typed-on-the-phone-8c2f\n"))
        .await;
    eventually("the command audited", || {
        audit_lines(&agent).iter().any(|line| line["tool"] == "run_command" && line["outcome"] == "ok")
    })
    .await;

    let capture = mitm.capture.lock().unwrap().clone();
    assert_sealed_after_hello(
        &capture,
        &[secret, "typed-on-the-phone-8c2f", "run_command", "tool_result", agent.token()],
    );
    let hello = capture.iter().find_map(|(way, m)| match m {
        Message::Text(text) if *way == Way::Up && text.contains("\"hello\"") => Some(text.to_string()),
        _ => None,
    });
    let hello: Value = serde_json::from_str(&hello.expect("the page's hello")).unwrap();
    assert_eq!((hello["protocol"].clone(), hello.get("proof")), (json!(3), None), "{hello}");
    assert!(capture.iter().filter(|(way, m)| *way == Way::Up && m.is_binary()).count() >= 1);

    // The loopback page (`voxa open`) seals its session too.
    let loopback = agent.loopback_url().replace("ws://", "http://");
    browser.open(&format!("{loopback}#token={}", agent.token())).await;
    browser.wait_connection("online").await;
    assert_eq!(seal_mark(&browser).await, "sealed");
    browser.type_into("Command", "echo over-the-loopback-page").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command's output", |t| t.contains("over-the-loopback-page\n")).await;
    browser.close().await;
}

/// A hook that flips one bit of every sealed frame going `way` once `armed`.
fn flip_when(armed: Arc<AtomicBool>, way: Way) -> Hook {
    Box::new(move |through, message| {
        if through == way && message.is_binary() && armed.load(Ordering::SeqCst) {
            vec![flip_one_bit(message)]
        } else {
            vec![message]
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_flips_one_bit_of_the_pages_frames_ends_the_session_and_nothing_runs() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    let mut agent = TestAgent::start(Some(relay.url())).await;
    let workspace = agent.workspace.path().to_path_buf();

    // Toward the laptop: the page's tool call arrives altered; the agent runs nothing of it.
    let armed = Arc::new(AtomicBool::new(false));
    let mitm = Mitm::start(relay.addr, agent.code(), flip_when(armed.clone(), Way::Up)).await;
    browser.pair(&format!("http://{}/#code={}&token={}", mitm.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    assert_eq!(seal_mark(&browser).await, "sealed");
    armed.store(true, Ordering::SeqCst);
    browser.type_into("Command", "echo ran > altered.txt").await;
    browser.press("Run").await;
    agent
        .wait_event("the agent ends the broken session", |event| {
            matches!(event, LinkEvent::PeerRefused { code: ErrorCode::SealedSessionBroken })
        })
        .await;
    let said = browser.wait_connection("altered").await;
    assert!(said.contains("nothing altered ran"), "{said}");
    assert_eq!(seal_mark(&browser).await, "", "no mark on a session that ended");
    browser.control("button", "Reconnect").await;
    assert!(!workspace.join("altered.txt").exists());
    assert!(!audit_lines(&agent).iter().any(|line| line["tool"] == "run_command"), "the altered call was audited");

    // Toward the phone: the agent's answer arrives altered; the page closes the session itself.
    let armed = Arc::new(AtomicBool::new(false));
    let mitm = Mitm::start(relay.addr, agent.code(), flip_when(armed.clone(), Way::Down)).await;
    browser.pair(&format!("http://{}/#code={}&token={}", mitm.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    armed.store(true, Ordering::SeqCst);
    browser.type_into("Command", "echo answered").await;
    browser.press("Run").await;
    browser.wait_connection("altered").await;
    // A browser may close only with 1000 or 3000–4999: 1000, and the reason.
    eventually("the page closes its socket 1000 sealed-session-broken", || {
        mitm.capture.lock().unwrap().iter().any(|(way, m)| {
            *way == Way::Up
                && matches!(m, Message::Close(Some(frame))
                    if u16::from(frame.code) == 1000 && frame.reason == "sealed-session-broken")
        })
    })
    .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_drops_the_pages_cancel_ends_the_session_within_one_tick_and_the_page_says_so() {
    use std::sync::atomic::AtomicUsize;
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    let mut agent = TestAgent::start(Some(relay.url())).await;
    let status = agent.agent.ctx.status.clone();
    let (armed, dropped) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let hook = drop_next_up(armed.clone(), dropped.clone());
    let mitm = Mitm::start(relay.addr, agent.code(), hook).await;
    browser.pair(&format!("http://{}/#code={}&token={}", mitm.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    browser.type_into("Command", "sleep 40").await;
    browser.press("Run").await;
    eventually("the command runs", || status.calls_in_flight.load(Ordering::Relaxed) == 1).await;
    armed.store(true, Ordering::SeqCst);
    let cancelled_at = std::time::Instant::now();
    browser.press("Cancel").await;
    let said = browser.wait_connection("dropped").await;
    let took = cancelled_at.elapsed();
    eprintln!("the page noticed its dropped cancel after {took:?} and says: {said}");
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    assert!(said.contains("may not have reached the laptop"), "{said}");
    let tick = voxa::seal::ticks::TICK_INTERVAL;
    assert!(took > tick - std::time::Duration::from_secs(1), "it was the tick that told: {took:?}");
    // Before the silence that ends a stalled session: the tick, not the wait, found it (a loaded
    // machine may take a few seconds past the tick itself).
    assert!(took < voxa::seal::ticks::STALL_AFTER, "noticed at the tick, before a stall is: {took:?}");
    agent
        .wait_event("the agent ends the session", |event| {
            matches!(event, LinkEvent::PeerRefused { code: ErrorCode::SealedSessionBroken })
        })
        .await;
    // The command's own line says it was not stopped, and it was not.
    browser.wait_text(TERMINAL, "the command's end", |t| t.contains("goes on on the laptop")).await;
    assert_eq!(status.calls_in_flight.load(Ordering::Relaxed), 1, "the dropped cancel stopped nothing");
    browser.press("Reconnect").await;
    browser.wait_connection("online").await;
    assert_eq!(seal_mark(&browser).await, "sealed");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_compares_the_page_the_relay_serves_with_its_own() {
    use voxa::net::page_check::{check, RelayPage};
    let dial = voxa::net::dial::DialOptions::default();
    let relay = TestRelay::start().await;
    let same = check(&relay.url(), &dial).await;
    assert!(matches!(same, RelayPage::Same { files } if files > 10), "{same:?}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = voxa::config::RelayUrl::parse(&format!("http://{closed}")).unwrap();
    assert!(matches!(check(&url, &dial).await, RelayPage::Unchecked { .. }));

    // A relay serving one script altered (the agent's socket passes through it untouched).
    // The page loads it under its hashed name; the finding names the file as in web/.
    let served = voxa::net::web::hashed_path("/js/session.js").expect("a hashed name");
    let front = altering_front(relay.addr, served).await;
    let url = voxa::config::RelayUrl::parse(&format!("http://{front}")).unwrap();
    let altered = RelayPage::Altered { paths: vec!["/js/session.js".into()] };
    assert_eq!(check(&url, &dial).await, altered);
    let mut agent = TestAgent::start(Some(url.clone())).await;
    let event = agent.wait_event("the page compared", |e| matches!(e, LinkEvent::RelayPage { .. })).await;
    assert_eq!(event, LinkEvent::RelayPage { page: altered.clone() });
    let mut local = agent.local_client().await;
    send(&mut local, json!({"type":"status"})).await;
    let status = recv_type(&mut local, "status").await;
    assert_eq!(status["relay_page"], json!({"state": "altered", "paths": ["/js/session.js"]}), "{status}");

    // `doctor` says so too, and fails on it; against the real relay it is fine.
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let doctor = |relay: &str| {
        let out = crate::support::voxa_cmd(&home).args(["--relay", relay, "doctor", "--json"]).output().unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let checks = report["checks"].as_array().unwrap().clone();
        checks
            .into_iter()
            .find(|c| c["check"] == "relay page")
            .unwrap_or_else(|| panic!("no relay page check: {report}"))
    };
    let found = doctor(&format!("http://{front}"));
    assert_eq!(found["status"], "fail", "{found}");
    assert!(found["message"].as_str().unwrap().contains("/js/session.js"), "{found}");
    assert_eq!(doctor(&format!("http://{}", relay.addr))["status"], "ok");
}

/// Whether a request looks like a phone's browser asking for a script (Chromium's `User-Agent` and
/// `Sec-Fetch-Dest`): a page check that announces itself would be shown the genuine page.
fn from_a_browser(head: &str) -> bool {
    head.contains("\r\nsec-fetch-dest: script") && head.contains(" chrome/")
}

/// The page check asks as a phone's Chromium does: a relay that alters a script only for
/// browsers is caught.
#[tokio::test]
async fn a_relay_that_alters_the_page_for_browsers_only_is_caught_by_the_check() {
    use voxa::net::page_check::check;
    let relay = TestRelay::start().await;
    let served = voxa::net::web::hashed_path("/js/app.js").expect("a hashed name");
    let front = altering_front_for(relay.addr, served, from_a_browser).await;
    let url = voxa::config::RelayUrl::parse(&format!("http://{front}")).unwrap();
    let found = check(&url, &voxa::net::dial::DialOptions::default()).await;
    assert_eq!(found, RelayPage::Altered { paths: vec!["/js/app.js".into()] });
}

/// The laptop's finding reaches the phone inside the sealed session: a relay that serves one
/// lazy view altered (the page still loads) gets its page called out above everything, naming
/// the file; a relay that serves the page as it is gets no alarm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_page_is_told_to_the_phone_inside_the_sealed_session() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    let served = voxa::net::web::hashed_path("/js/files/panel.js").expect("a hashed name");
    let front = altering_front(relay.addr, served).await;
    let url = voxa::config::RelayUrl::parse(&format!("http://{front}")).unwrap();
    let mut agent = TestAgent::start(Some(url)).await;
    let found = agent.wait_event("the page compared", |e| matches!(e, LinkEvent::RelayPage { .. })).await;
    assert_eq!(found, LinkEvent::RelayPage { page: RelayPage::Altered { paths: vec!["/js/files/panel.js".into()] } });
    let mitm = Mitm::start(front, agent.code(), Box::new(|_, m| vec![m])).await;
    browser.pair(&format!("http://{}/#code={}&token={}", mitm.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    let alarm = browser.wait_text("#relay-page", "the alarm", |t| !t.is_empty()).await;
    assert!(alarm.starts_with("This relay changed the page. Your laptop compared it with its own copy"), "{alarm}");
    assert!(alarm.contains("(1 file differs: /js/files/panel.js)"), "{alarm}");
    // It came sealed: the relay saw none of it.
    assert_sealed_after_hello(&mitm.capture.lock().unwrap(), &["relay_page", "/js/files/panel.js"]);
    let scratch = tempfile::tempdir().unwrap();
    let out = crate::support::pictures::pictures_dir(scratch.path());
    crate::support::pictures::save_picture(&browser, &out, "web-relay-page.png").await;
    let dark = browser.another(Scheme::Dark).await;
    dark.pair(&format!("http://{}/#code={}&token={}", mitm.addr, agent.code(), agent.token())).await;
    dark.wait_text("#relay-page", "the alarm", |t| !t.is_empty()).await;
    crate::support::pictures::save_picture(&dark, &out, "web-relay-page-dark.png").await;
    dark.close().await;

    // The page as voxa's: no alarm.
    let mut honest = TestAgent::start(Some(relay.url())).await;
    let found = honest.wait_event("the page compared", |e| matches!(e, LinkEvent::RelayPage { .. })).await;
    assert!(matches!(found, LinkEvent::RelayPage { page: RelayPage::Same { .. } }), "{found:?}");
    browser.pair(&format!("http://{}/#code={}&token={}", relay.addr, honest.code(), honest.token())).await;
    browser.wait_connection("online").await;
    browser.press("Status").await;
    browser.wait_text("#facts", "the status", |t| t.contains("voxa/")).await;
    let hidden = "return document.getElementById('relay-page').hidden;";
    assert_eq!(browser.script(hidden, vec![]).await, json!(true));
    browser.close().await;
}

/// `voxa run` says it loudly when the relay's page is altered: a WARNING on lines of its own,
/// even under `--quiet`, and `"alarm": true` on the `relay_page` event of `--json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voxa_run_says_loudly_that_the_relay_serves_an_altered_page() {
    let relay = TestRelay::start().await;
    let served = voxa::net::web::hashed_path("/js/session.js").expect("a hashed name");
    let front = format!("http://{}", altering_front(relay.addr, served).await);
    let (mut run, _home, _dirs) = crate::support::run::start_run_with_env(&["--relay", &front], &[]);
    let event = run.wait_event("relay_page");
    assert_eq!(event, json!({"event": "relay_page", "state": "altered", "paths": ["/js/session.js"], "alarm": true}));
    run.stop();

    let (dir, home) = crate::support::run::fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = crate::support::voxa_cmd(&home);
    cmd.args(["--quiet", "run", "--relay", &front, "--workspace"]).arg(workspace.path());
    let quiet = crate::support::RunningVoxa::spawn(cmd);
    eventually("the warning", || quiet.stdout_so_far().contains("WARNING: the relay serves a web page")).await;
    let said = quiet.stdout_so_far();
    let warning = &said[said.find("WARNING").unwrap()..];
    assert!(
        warning.starts_with(
            "WARNING: the relay serves a web page that is not this voxa's (1 file differs: /js/session.js)."
        ),
        "{said}"
    );
    assert!(warning.contains("Do not open the link on that relay"), "{said}");
    assert!(!said.contains("connected to relay"), "--quiet still quiets the rest: {said}");
    quiet.crash();
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_hosting_voice_leaves_the_pages_session_sealed_and_a_sealed_only_laptop_still_takes_the_call() {
    use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind};
    use voxa::hosted::{Hosting, LiveConfig};
    let scratch = tempfile::tempdir().unwrap();
    let Some(browser) =
        crate::support::browser::browser_with_tone(&scratch, crate::support::browser::Scheme::Light).await
    else {
        return;
    };
    let mut fake = FakeGemini::start(FakeOptions::new("relay-key")).await;
    let live = LiveConfig::new(fake.config("relay-key"));
    let relay = TestRelay::with_config(voxa::relay::RelayConfig {
        service: Some(Hosting::service(live)),
        ..Default::default()
    })
    .await;
    // The relay hosts calls, yet the page's session is `/ws`, sealed: only a call opens `/live`.
    let agent = TestAgent::start(Some(relay.url())).await;
    browser.pair(&format!("http://{}/#code={}&token={}", relay.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    assert_eq!(seal_mark(&browser).await, "sealed");
    assert_eq!(session_counts(&agent).await, (2, 0), "the page's session and the status client");

    // A laptop that serves sealed sessions only (the default) takes a call the relay hosts: the
    // call socket is no session of the pairing, so it asks for nothing unsealed.
    assert!(voxa::config::Config::default().security.require_sealed);
    browser.press("Call").await;
    fake.wait_for("the call's setup", |e| matches!(e.kind, Kind::Setup(_))).await;
    browser.wait_script("the call to start", "return voxaVoice.state === 'live';").await;
    assert_eq!(seal_mark(&browser).await, "sealed", "the session is not lost");
    assert_eq!(session_counts(&agent).await, (2, 0), "the call socket is no session");
    browser.press("End call").await;
    browser.type_into("Command", "echo still-sealed-9d1c").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command's output", |t| t.contains("still-sealed-9d1c\n")).await;
    browser.close().await;
}

/// Pictures of the sealed mark in both schemes (`VOXA_DOCS_SCREENSHOTS=1` writes them to docs/).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pictures_of_the_sealed_mark_light_and_dark() {
    let scratch = tempfile::tempdir().unwrap();
    let out = match std::env::var_os("VOXA_DOCS_SCREENSHOTS") {
        Some(_) => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"),
        None => scratch.path().to_owned(),
    };
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    for (scheme, name) in [(Scheme::Light, "web-sealed.png"), (Scheme::Dark, "web-sealed-dark.png")] {
        let Some(browser) = Browser::start_with(scheme).await else { return };
        browser.pair(&format!("http://{}/#code={}&token={}", relay.addr, agent.code(), agent.token())).await;
        browser.wait_connection("online").await;
        browser.type_into("Command", "echo this session is sealed end to end").await;
        browser.press("Run").await;
        browser.wait_script("the command's end", "return !document.getElementById('run').disabled;").await;
        assert_eq!(seal_mark(&browser).await, "sealed");
        crate::support::pictures::save_picture(&browser, &out, name).await;
        browser.close().await;
    }
}
