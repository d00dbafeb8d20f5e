//! The agent as the phone and local clients see it: hello, refusals, the loopback socket's gate,
//! and the relay path with reconnects.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::SinkExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::support::harness::*;
use voxa::agent::LinkEvent;

#[tokio::test]
async fn loopback_hello_answers_hello_ok_and_status() {
    let agent = TestAgent::start(None).await;
    let mut client = connect(&agent.loopback_url()).await;
    let ok = say_hello(&mut client, agent.token()).await;
    assert_eq!(ok["mode"], "hosted");
    assert_eq!(ok["protocol"], 3, "every voxa client seals its session");
    assert!(ok["tools"].is_array());
    send(&mut client, json!({"type":"status"})).await;
    let status = recv_type(&mut client, "status").await;
    assert_eq!(status["pid"], std::process::id());
    assert_eq!(status["relay_connected"], false);
    let shown = status.to_string();
    assert!(!shown.contains(agent.token()) && !shown.contains(agent.code()), "status leaks a secret");
}

#[tokio::test]
async fn loopback_bearer_header_is_refused_even_with_the_right_token() {
    let agent = TestAgent::start(None).await;
    for token in [agent.token(), "ffffffffffffffffffffffffffffffff"] {
        let options = voxa::net::dial::DialOptions {
            bearer: Some(voxa::secret::Secret::from_string(token.to_owned())),
            ..Default::default()
        };
        let err =
            voxa::net::dial::connect(&agent.loopback_url(), &options).await.err().expect("refused before upgrade");
        assert!(format!("{err:#}").contains("403"), "{err:#}");
    }
}

#[tokio::test]
async fn loopback_wrong_proof_or_raw_token_is_closed_1008_at_once() {
    let agent = TestAgent::start(None).await;
    let mut client = connect(&agent.loopback_url()).await;
    let challenge = recv_challenge(&mut client).await;
    send(&mut client, hello_for("00000000000000000000000000000000", &challenge)).await;
    assert_eq!(recv_close(&mut client).await, (1008, "bearer-refused".into()));

    // The protocol 1 hello, raw token and all, is refused even with the right token.
    let mut client = connect(&agent.loopback_url()).await;
    recv_challenge(&mut client).await;
    send(&mut client, json!({"type":"hello","token": agent.token(),"client":"old/1"})).await;
    assert_eq!(recv_close(&mut client).await, (1008, "bearer-refused".into()));
}

#[tokio::test]
async fn loopback_silence_or_a_non_hello_is_closed_unauthenticated() {
    let agent = TestAgent::start(None).await;
    let mut client = connect(&agent.loopback_url()).await;
    send(&mut client, json!({"type":"tool_call","id":"c1","name":"list_dir"})).await;
    assert_eq!(recv_close(&mut client).await, (1008, "unauthenticated-call".into()));

    let mut silent = connect(&agent.loopback_url()).await;
    let started = std::time::Instant::now();
    assert_eq!(recv_close(&mut silent).await, (1008, "unauthenticated-call".into()));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(4), "closed too early: {waited:?}");
}

/// Sends a raw upgrade request and returns the status line.
async fn raw_upgrade(addr: std::net::SocketAddr, extra_headers: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra_headers}\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(STEP, tcp.read(&mut buf)).await.unwrap().unwrap();
    String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn loopback_refuses_foreign_origins_before_upgrade() {
    let agent = TestAgent::start(None).await;
    let addr = agent.agent.loopback;
    assert!(raw_upgrade(addr, "Origin: https://evil.example\r\n").await.contains("403"));
    assert!(raw_upgrade(addr, "Origin: null\r\n").await.contains("403"));
    // Another port is another server (a dev server, another user's page): refused too.
    assert!(raw_upgrade(addr, "Origin: http://localhost:5173\r\n").await.contains("403"));
    let own = format!("Origin: http://127.0.0.1:{}\r\n", addr.port());
    assert!(raw_upgrade(addr, &own).await.contains("101"));
    assert!(raw_upgrade(addr, "").await.contains("101"));
}

#[tokio::test]
async fn junk_frames_get_bad_frame_and_the_session_goes_on() {
    let agent = TestAgent::start(None).await;
    let mut client = agent.local_client().await;
    for junk in ["not json", "{\"type\":\"no_such_type\"}", "[1,2]", "{\"type\":\"tool_call\",\"id\":5}"] {
        client.send(Message::text(junk)).await.unwrap();
        let error = recv_json(&mut client).await;
        assert_eq!(error["type"], "error", "{junk}");
        assert_eq!(error["code"], "bad-frame", "{junk}");
    }
    send(&mut client, json!({"type":"tool_call","id":"c1","name":"no_such_tool"})).await;
    let result = recv_result(&mut client, "c1").await;
    assert_eq!(result["ok"], false);
    assert_eq!(result["error"]["code"], "unknown-tool");
}

#[tokio::test]
async fn phone_pairs_through_the_relay() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let mut phone = phone_socket(&relay, agent.code()).await;
    let ok = say_hello(&mut phone, agent.token()).await;
    assert_eq!(ok["agent"], format!("voxa/{}", voxa::VERSION));
    eventually("phone present", || agent.agent.ctx.status.phone_present.load(Ordering::Relaxed)).await;
    send(&mut phone, json!({"type":"tool_call","id":"x1","name":"no_such_tool"})).await;
    let result = recv_result(&mut phone, "x1").await;
    assert_eq!(result["error"]["code"], "unknown-tool");
}

#[tokio::test]
async fn wrong_token_through_the_relay_is_refused_and_nothing_runs() {
    let relay = TestRelay::start().await;
    // Protocol 2 through the relay, as an operator serving old clients allows.
    let agent = TestAgent::start_with(Some(relay.url()), |o| o.config.security.require_sealed = false).await;
    let mut phone = phone_socket(&relay, agent.code()).await;
    let challenge = recv_challenge(&mut phone).await;
    // Before any hello, calls are ignored.
    send(&mut phone, json!({"type":"tool_call","id":"early","name":"list_dir"})).await;
    send(&mut phone, hello_for("0123456789abcdef0123456789abcdef", &challenge)).await;
    let refused = recv_json(&mut phone).await;
    assert_eq!(refused, json!({"type":"error","code":"bearer-refused"}));
    // Then the agent has the relay close it: a refused phone keeps no seat on the code.
    let _ = phone.send(Message::text(json!({"type":"tool_call","id":"late","name":"list_dir"}).to_string())).await;
    let _ = phone.send(Message::text(hello_for(agent.token(), &challenge).to_string())).await;
    assert_eq!(recv_close(&mut phone).await, (1008, "bearer-refused".into()));

    // A new connection with the right token works.
    let mut phone = agent.phone(&relay).await;
    send(&mut phone, json!({"type":"tool_call","id":"ok","name":"no_such_tool"})).await;
    assert_eq!(recv_result(&mut phone, "ok").await["error"]["code"], "unknown-tool");
}

#[tokio::test]
async fn frames_before_the_hello_are_ignored() {
    let relay = TestRelay::start().await;
    // Protocol 2 through the relay, as an operator serving old clients allows.
    let agent = TestAgent::start_with(Some(relay.url()), |o| o.config.security.require_sealed = false).await;
    let mut phone = phone_socket(&relay, agent.code()).await;
    let challenge = recv_challenge(&mut phone).await;
    send(&mut phone, json!({"type":"tool_call","id":"early","name":"no_such_tool"})).await;
    send(&mut phone, json!({"type":"status"})).await;
    send(&mut phone, hello_for(agent.token(), &challenge)).await;
    // The first answer is the hello_ok: the early frames produced nothing.
    assert_eq!(recv_json(&mut phone).await["type"], "hello_ok");
}

#[tokio::test]
async fn phone_that_never_says_hello_is_told_so_and_closed() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let mut phone = phone_socket(&relay, agent.code()).await;
    recv_challenge(&mut phone).await;
    let error = recv_json(&mut phone).await;
    assert_eq!(error["type"], "error");
    assert_eq!(error["code"], "unauthenticated-call");
    let started = std::time::Instant::now();
    // A stranger that says nothing keeps no seat on the code (docs/PROTOCOL.md, "Refusals").
    assert_eq!(recv_close(&mut phone).await, (1008, "unauthenticated-call".into()));
    assert!(started.elapsed() < Duration::from_secs(1), "closed right after the refusal");
}

#[tokio::test]
async fn agent_is_back_after_the_relay_restarts_on_the_same_port() {
    let relay = TestRelay::start().await;
    let addr = relay.addr;
    let agent = TestAgent::start(Some(relay.url())).await;
    let _phone = agent.phone(&relay).await;
    relay.kill().await;
    eventually("relay loss noticed", || !agent.agent.ctx.status.relay_connected.load(Ordering::Relaxed)).await;

    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let relay = TestRelay::start_with(listener, voxa::relay::RelayConfig::default()).await;
    // The agent redials on its own: the phone finds it at the new relay.
    let mut phone = agent.phone(&relay).await;
    send(&mut phone, json!({"type":"tool_call","id":"again","name":"no_such_tool"})).await;
    assert_eq!(recv_result(&mut phone, "again").await["error"]["code"], "unknown-tool");
}

/// Dial timings for the replacement tests: quick retries, and an episode that lasts the test.
fn slow_to_trust() -> voxa::agent::BackoffPolicy {
    voxa::agent::BackoffPolicy { healthy_after: Duration::from_secs(60), ..fast_backoff() }
}

#[tokio::test]
async fn a_replaced_agent_says_so_keeps_dialing_and_the_phone_reaches_it_again() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start_with(Some(relay.url()), |options| options.backoff = slow_to_trust()).await;
    let status = agent.agent.ctx.status.clone();
    eventually("agent at the relay", || status.relay_connected.load(Ordering::Relaxed)).await;
    // Someone holding the code takes the agent's place at the relay.
    let mut impostor = connect(&format!("ws://{}/agent?code={}", relay.addr, agent.code())).await;
    eventually("the agent noticed", || status.relay_replaced.load(Ordering::Relaxed)).await;
    // The agent does not give up: it takes its code back (the impostor is replaced in turn) ...
    assert_eq!(recv_close(&mut impostor).await, (4001, "replaced".into()));
    eventually("agent back at the relay", || status.relay_connected.load(Ordering::Relaxed)).await;
    // ... and says what happened to anyone who asks.
    let mut local = agent.local_client().await;
    send(&mut local, json!({"type":"status"})).await;
    let shown = recv_type(&mut local, "status").await;
    assert_eq!((shown["relay_replaced"].as_bool(), shown["relay_connected"].as_bool()), (Some(true), Some(true)));
    // The phone reaches the real agent, which proves itself.
    let mut phone = agent.phone(&relay).await;
    send(&mut phone, json!({"type":"tool_call","id":"back","name":"no_such_tool"})).await;
    assert_eq!(recv_result(&mut phone, "back").await["error"]["code"], "unknown-tool");
}

#[tokio::test]
async fn an_impostor_agent_on_the_code_learns_no_token_and_the_phone_refuses_it() {
    let relay = TestRelay::start().await;
    // The laptop is offline; someone who learnt the code poses as it.
    let home = tempfile::tempdir().unwrap();
    let (secrets, _) = voxa::state::Home::at(home.path().join("voxa")).load_or_create_secrets().unwrap();
    let token = secrets.auth_token.clone();
    let mut impostor = connect(&format!("ws://{}/agent?code={}", relay.addr, secrets.relay_code.expose())).await;
    let mut phone = phone_socket(&relay, secrets.relay_code.expose()).await;
    let phone_side = tokio::spawn(async move {
        let outcome = tokio::time::timeout(STEP, voxa::net::client::hello(&mut phone, &token, "test-phone")).await;
        (outcome.expect("the phone decides in time"), phone)
    });
    // The impostor plays the agent as well as it can: challenge, then a hello_ok whose handshake
    // message it has to make up (here with a token of its own: the phone's message 1 does not
    // open under it, so it answers a handshake of its own).
    recv_type(&mut impostor, "presence").await;
    let challenge = "0123456789abcdef0123456789abcdef";
    send(&mut impostor, json!({"type":"challenge","protocol":2,"protocols":[2,3],"nonce": challenge})).await;
    let hello = recv_type(&mut impostor, "hello").await;
    let guess = voxa::secret::Secret::from_string("ffffffffffffffffffffffffffffffff".into());
    let b64 = base64::engine::general_purpose::STANDARD;
    let one = base64::Engine::decode(&b64, hello["noise"].as_str().unwrap()).unwrap();
    assert!(voxa::seal::Responder::accept(&guess, challenge, &one).is_err());
    let (_, own) = voxa::seal::Initiator::start(&guess, challenge).unwrap();
    let inner = json!({"type":"hello_ok","protocol":3,"agent":"voxa/9","mode":"hosted","tools":["run_command"]});
    let (_, two) =
        voxa::seal::Responder::accept(&guess, challenge, &own).unwrap().finish(inner.to_string().as_bytes()).unwrap();
    send(&mut impostor, json!({"type":"hello_ok","protocol":3,"noise": base64::Engine::encode(&b64, two)})).await;
    let (outcome, _phone) = phone_side.await.unwrap();
    let err = outcome.expect_err("the phone refuses an agent that cannot prove the token");
    assert!(err.downcast_ref::<voxa::net::client::NotYourLaptop>().is_some(), "{err:#}");
    assert!(format!("{err:#}").contains("this is not your laptop"), "{err:#}");
    // What the impostor collected: one hello, with no token in it, and nothing after it.
    assert!(!hello.to_string().contains(secrets.auth_token.expose()), "the token crossed the relay: {hello}");
    assert!(hello.get("token").is_none());
    loop {
        match next_frame(&mut impostor).await {
            Some(Message::Text(text)) => {
                let value: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(value["type"], "presence", "the impostor received {value}");
                if value["state"] == "left" {
                    break;
                }
            }
            None | Some(Message::Close(_)) => break,
            Some(_) => {}
        }
    }
}

#[tokio::test]
async fn a_hello_replayed_from_an_earlier_session_is_refused() {
    let relay = TestRelay::start().await;
    // Protocol 2 through the relay, as an operator serving old clients allows.
    let agent = TestAgent::start_with(Some(relay.url()), |o| o.config.security.require_sealed = false).await;
    // A hello recorded from a session that worked (as the relay, or anyone on the path, sees it).
    let mut first = phone_socket(&relay, agent.code()).await;
    let challenge = recv_challenge(&mut first).await;
    let recorded = hello_for(agent.token(), &challenge);
    send(&mut first, recorded.clone()).await;
    recv_type(&mut first, "hello_ok").await;
    drop(first);
    // Played again on a new session, it answers the wrong challenge.
    let mut replay = phone_socket(&relay, agent.code()).await;
    let fresh = recv_challenge(&mut replay).await;
    assert_ne!(fresh, challenge, "every session has its own nonce");
    send(&mut replay, recorded.clone()).await;
    assert_eq!(recv_json(&mut replay).await, json!({"type":"error","code":"bearer-refused"}));
    // The same on the loopback socket.
    let mut local = connect(&agent.loopback_url()).await;
    recv_challenge(&mut local).await;
    send(&mut local, recorded).await;
    assert_eq!(recv_close(&mut local).await, (1008, "bearer-refused".into()));
}

#[tokio::test]
async fn a_relay_that_stops_answering_is_noticed_and_redialed() {
    let relay = TestRelay::start().await;
    let proxy = BlackholeProxy::start(relay.addr).await;
    let heartbeat =
        voxa::net::liveness::Heartbeat { ping_every: Duration::from_millis(200), dead_after: Duration::from_secs(1) };
    let mut agent = TestAgent::start_with(Some(proxy.url()), |options| options.heartbeat = heartbeat).await;
    let mut phone = agent.phone(&relay).await;

    proxy.blackhole_existing();
    // The agent gives up on the silent socket because it stayed silent (not for any other reason)
    // and dials again; the relay hands the phone the new one.
    agent
        .wait_event(
            "the silent relay given up on",
            |event| matches!(event, LinkEvent::Lost { reason } if reason.starts_with("no answer from the relay")),
        )
        .await;
    wait_agent_joined(&mut phone).await;
    say_hello(&mut phone, agent.token()).await;
    send(&mut phone, json!({"type":"tool_call","id":"h1","name":"no_such_tool"})).await;
    assert_eq!(recv_result(&mut phone, "h1").await["error"]["code"], "unknown-tool");
}

#[tokio::test]
async fn a_command_runs_from_the_phone_through_the_relay_with_progress() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let mut phone = agent.phone(&relay).await;
    send(
        &mut phone,
        json!({"type":"tool_call","id":"r1","name":"run_command","args":{"command":"echo hello; echo world"}}),
    )
    .await;
    let mut progress = String::new();
    let result = loop {
        let frame = recv_json(&mut phone).await;
        match frame["type"].as_str() {
            Some("tool_progress") => {
                assert_eq!(frame["id"], "r1");
                progress.push_str(frame["chunk"].as_str().unwrap());
            }
            Some("tool_result") => break frame,
            other => panic!("unexpected {other:?}: {frame}"),
        }
    };
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["result"]["exit_code"], 0);
    let output = result["result"]["output"].as_str().unwrap();
    assert!(output.contains("hello") && output.contains("world"), "{output:?}");
    assert!(progress.contains("hello"), "progress was {progress:?}");
}

#[tokio::test]
async fn an_id_sent_twice_runs_once_and_cancel_ends_the_call() {
    let agent = TestAgent::start(None).await;
    let mut client = agent.local_client().await;
    let call = json!({"type":"tool_call","id":"d1","name":"run_command","args":{"command":"sleep 30"}});
    send(&mut client, call.clone()).await;
    send(&mut client, call).await;
    eventually("the call runs", || agent.agent.ctx.status.calls_in_flight.load(Ordering::Relaxed) == 1).await;
    let started = std::time::Instant::now();
    send(&mut client, json!({"type":"cancel","id":"d1"})).await;
    // One result: the second frame attached to the running call instead of starting another.
    let cancelled = recv_result(&mut client, "d1").await;
    assert_eq!(cancelled["ok"], false);
    assert_eq!(cancelled["error"]["code"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Sent again after it ended, the id gets that result again and runs nothing.
    send(&mut client, json!({"type":"tool_call","id":"d1","name":"run_command","args":{"command":"true"}})).await;
    let again = recv_result(&mut client, "d1").await;
    assert_eq!(again["error"]["code"], "cancelled", "{again}");
    assert_eq!(agent.agent.ctx.status.calls_in_flight.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn fifty_calls_in_flight_on_one_socket_are_all_answered() {
    let agent = TestAgent::start(None).await;
    let mut client = agent.local_client().await;
    for i in 0..50 {
        let call = json!({"type":"tool_call","id": format!("c{i}"),"name":"run_command","args":{"command": format!("echo n{i}")}});
        send(&mut client, call).await;
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 50 {
        let frame = recv_json(&mut client).await;
        if frame["type"] != "tool_result" {
            continue;
        }
        let id = frame["id"].as_str().unwrap().to_owned();
        assert_eq!(frame["ok"], true, "{frame}");
        let n = id.trim_start_matches('c');
        assert!(frame["result"]["output"].as_str().unwrap().contains(&format!("n{n}")), "{frame}");
        assert!(seen.insert(id), "two results for one id");
    }
}

#[tokio::test]
async fn a_screenshot_reaches_the_client_as_an_image_frame_and_the_result_holds_only_its_size() {
    let Some(xvfb) = crate::support::xvfb::Xvfb::start("320x200x24") else { return };
    let agent = TestAgent::start(None).await;
    let mut client = agent.local_client().await;
    send(&mut client, json!({"type":"tool_call","id":"s1","name":"screenshot","args":{"display": xvfb.display}})).await;
    let image = recv_type(&mut client, "image").await;
    assert_eq!(image["id"], "s1");
    assert_eq!(image["mime"], "image/png");
    assert_eq!((image["width"].as_u64(), image["height"].as_u64()), (Some(320), Some(200)));
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.decode(image["data"].as_str().unwrap()).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let result = recv_result(&mut client, "s1").await;
    assert_eq!(result["ok"], true);
    assert_eq!(result["result"]["bytes"], png.len());
    assert!(result["result"].get("data").is_none(), "the result must not carry the image");
}

#[tokio::test]
async fn results_of_a_departed_phone_never_reach_the_next_one() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let mut first = agent.phone(&relay).await;
    send(
        &mut first,
        json!({"type":"tool_call","id":"late","name":"run_command","args":{"command":"sleep 1; echo late"}}),
    )
    .await;
    recv_type(&mut first, "tool_progress").await.to_string(); // the call is running
    drop(first);
    // Once the agent knows the phone left, nothing of that session may reach the next phone,
    // though the call is still running and will finish.
    eventually("agent saw the phone leave", || !agent.agent.ctx.status.phone_present.load(Ordering::Relaxed)).await;
    let mut second = phone_socket(&relay, agent.code()).await;
    // Until it says hello, the new phone hears only presence frames, its own session's
    // challenge, and no one else's results.
    let quiet_until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout_at(quiet_until, futures_util::StreamExt::next(&mut second)).await
    {
        if let Message::Text(text) = frame {
            // The relay's notices are U+0001 and a JSON object.
            let value: serde_json::Value = serde_json::from_str(text.trim_start_matches('\u{1}')).unwrap();
            assert!(
                value["type"] == "presence" || value["type"] == "challenge",
                "leaked to an unauthenticated phone: {value}"
            );
        }
    }
}

#[tokio::test]
async fn the_agent_dials_a_tls_relay_it_was_told_to_trust_and_refuses_one_it_was_not() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, cert) = tls_relay(dir.path()).await;
    let url = voxa::config::RelayUrl::parse(&format!("https://localhost:{}", relay.addr.port())).unwrap();

    let mut untrusting = TestAgent::start(Some(url.clone())).await;
    let trusting = TestAgent::start_with(Some(url), |options| {
        options.dial = voxa::net::dial::DialOptions::default().trust_pem_file(&cert).unwrap();
    })
    .await;
    eventually("trusting agent connected", || trusting.agent.ctx.status.relay_connected.load(Ordering::Relaxed)).await;
    // The untrusting agent's dial fails on the certificate, and it never connects.
    let refused = untrusting.wait_event("a failed dial", |event| matches!(event, LinkEvent::Unreachable { .. })).await;
    assert!(format!("{refused:?}").contains("certificate"), "{refused:?}");
    assert!(!untrusting.agent.ctx.status.relay_connected.load(Ordering::Relaxed));

    // A phone that trusts the certificate pairs with the trusting agent over wss.
    let phone_options = voxa::net::dial::DialOptions::default().trust_pem_file(&cert).unwrap();
    let phone_url = format!("wss://localhost:{}/ws?code={}", relay.addr.port(), trusting.code());
    let mut phone = voxa::net::dial::connect(&phone_url, &phone_options).await.unwrap();
    say_hello(&mut phone, trusting.token()).await;
}

#[tokio::test]
async fn a_relay_token_is_sent_when_set_and_its_absence_is_refused() {
    let token = voxa::secret::Secret::from_string("relay-token-for-tests".into());
    let config = voxa::relay::RelayConfig { token: Some(token.clone()), ..Default::default() };
    let relay = TestRelay::start_with(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(), config).await;

    let mut without = TestAgent::start(Some(relay.url())).await;
    let with = TestAgent::start_with(Some(relay.url()), |options| options.dial.bearer = Some(token.clone())).await;
    eventually("agent with the token connected", || with.agent.ctx.status.relay_connected.load(Ordering::Relaxed))
        .await;
    without.wait_event("a refused dial", |event| matches!(event, LinkEvent::Unreachable { .. })).await;
    assert!(!without.agent.ctx.status.relay_connected.load(Ordering::Relaxed));

    // Without the token the upgrade is refused with 401 before any WebSocket exists.
    let err = voxa::net::dial::connect(&format!("ws://{}/ws?code={}", relay.addr, with.code()), &Default::default())
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("401"), "{err:#}");
}

#[tokio::test]
async fn the_agent_reaches_a_tls_relay_through_an_http_connect_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, cert) = tls_relay_named(dir.path(), &["relay.voxa.test", "localhost"]).await;
    let (proxy, mut asked) = connect_proxy(relay.addr).await;

    // The name only exists behind the proxy: the agent must not resolve it itself.
    let url = voxa::config::RelayUrl::parse(&format!("https://relay.voxa.test:{}", relay.addr.port())).unwrap();
    let agent = TestAgent::start_with(Some(url), |options| {
        let mut dial = voxa::net::dial::DialOptions::default().trust_pem_file(&cert).unwrap();
        dial.proxy = Some(voxa::net::proxy::Proxy::parse(&format!("http://{proxy}")).unwrap());
        options.dial = dial;
    })
    .await;
    let request = tokio::time::timeout(STEP, asked.recv()).await.unwrap().unwrap();
    assert_eq!(request, format!("CONNECT relay.voxa.test:{} HTTP/1.1", relay.addr.port()));
    eventually("connected through the proxy", || agent.agent.ctx.status.relay_connected.load(Ordering::Relaxed)).await;
    let mut phone = agent.phone_tls(&relay, &cert).await;
    send(&mut phone, json!({"type":"tool_call","id":"p1","name":"no_such_tool"})).await;
    assert_eq!(recv_result(&mut phone, "p1").await["error"]["code"], "unknown-tool");
}

#[tokio::test]
async fn a_late_arrival_of_the_agents_own_abandoned_dial_does_not_stop_it() {
    // The first dials fail (nothing listens yet), as they would against a frozen relay.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = voxa::config::RelayUrl::parse(&format!("http://{addr}")).unwrap();
    // Its phone says a protocol-2 hello through the relay, as an operator serving old clients allows.
    let mut agent = TestAgent::start_with(Some(url), |o| o.config.security.require_sealed = false).await;
    // Its first dial is made at once and refused before the relay appears.
    agent.wait_event("a refused dial", |event| matches!(event, LinkEvent::Unreachable { .. })).await;
    let relay = TestRelay::start_with(tokio::net::TcpListener::bind(addr).await.unwrap(), Default::default()).await;
    let mut phone = agent.phone(&relay).await;

    // A stale request for the same code takes over, as an abandoned dial would on arrival, and
    // then goes away.
    let stale = connect(&format!("ws://{addr}/agent?code={}", agent.code())).await;
    drop(stale);
    // The agent does not give up: the phone sees it come back and can talk to it again. (A hello
    // sent while the stale socket held the code is lost; the next `joined` is the agent.)
    loop {
        let frame = recv_json(&mut phone).await;
        if frame["type"] == "challenge" {
            send(&mut phone, hello_for(agent.token(), frame["nonce"].as_str().unwrap())).await;
        }
        if frame["type"] == "hello_ok" {
            break;
        }
    }
    eventually("agent connected again", || agent.agent.ctx.status.relay_connected.load(Ordering::Relaxed)).await;
}

#[tokio::test]
async fn a_frame_over_8_kib_before_the_hello_closes_the_loopback_socket_1009() {
    let agent = TestAgent::start(None).await;
    for size in [voxa::protocol::MAX_PREAUTH_LEN + 1024, 16 << 20] {
        let mut client = connect(&agent.loopback_url()).await;
        recv_challenge(&mut client).await;
        // Sent from a task: the agent stops reading long before a large frame is through.
        let (mut sink, mut stream) = futures_util::StreamExt::split(client);
        let sending = tokio::spawn(async move {
            let _ = sink.send(Message::binary(vec![0u8; size])).await;
            sink
        });
        let closed = loop {
            match tokio::time::timeout(STEP, futures_util::StreamExt::next(&mut stream)).await.expect("closed in time")
            {
                Some(Ok(Message::Close(frame))) => break frame.map(|f| (u16::from(f.code), f.reason.to_string())),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => break None,
            }
        };
        assert_eq!(closed, Some((1009, "too much data before the hello".into())), "{size} bytes");
        sending.abort();
    }
    // A hello within the limit is still welcome.
    let mut client = agent.local_client().await;
    send(&mut client, json!({"type":"tool_call","id":"ok","name":"no_such_tool"})).await;
    assert_eq!(recv_result(&mut client, "ok").await["error"]["code"], "unknown-tool");
}

#[tokio::test]
async fn idle_unauthenticated_sockets_are_capped_and_the_owner_still_gets_in() {
    let agent = TestAgent::start(None).await;
    let flood = voxa::agent::loopback::MAX_UNAUTHENTICATED * 3;
    let mut idle = Vec::new();
    for _ in 0..flood {
        idle.push(TcpStream::connect(agent.agent.loopback).await.unwrap());
    }
    // The owner arrives last and is served at once.
    let mut owner = agent.local_client().await;
    send(&mut owner, json!({"type":"tool_call","id":"mine","name":"list_dir"})).await;
    assert_eq!(recv_result(&mut owner, "mine").await["ok"], true);
    // To make room, the oldest strangers were closed without a word (a timed-out request head
    // would have been answered 408); at most the cap of them is still open.
    let mut evicted = 0;
    for mut socket in idle.drain(..flood - voxa::agent::loopback::MAX_UNAUTHENTICATED) {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(STEP, socket.read(&mut buf)).await.expect("closed in time");
        if matches!(read, Ok(0) | Err(_)) {
            evicted += 1;
        }
    }
    assert_eq!(evicted, flood - voxa::agent::loopback::MAX_UNAUTHENTICATED);
}

#[tokio::test]
async fn the_loopback_socket_answers_only_to_a_loopback_host() {
    let agent = TestAgent::start(None).await;
    let port = agent.agent.loopback.port();
    let upgrade = |host: String| async move {
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 512];
        let n = tokio::time::timeout(STEP, tcp.read(&mut buf)).await.unwrap().unwrap();
        String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_owned()
    };
    // A page on a rebound name (evil.example resolving to 127.0.0.1) still says its own name.
    assert!(upgrade(format!("evil.example:{port}")).await.contains("403"));
    assert!(upgrade(format!("127.0.0.1.evil.example:{port}")).await.contains("403"));
    // Without a port, a Host names port 80, not this socket.
    assert!(upgrade("localhost".to_owned()).await.contains("403"));
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        assert!(upgrade(host.clone()).await.contains("101"), "{host}");
    }
}

#[tokio::test]
async fn stopping_the_agent_waits_for_the_calls_in_flight_to_end() {
    let agent = TestAgent::start(None).await;
    let mut client = agent.local_client().await;
    let marker = agent.workspace.path().join("still-running");
    let escaped = agent.workspace.path().join("escaped.pid");
    // A process that left the command's session and keeps writing holds its terminal open, so
    // once the command is killed the call goes on reading well after its socket has closed: only
    // the task tracker makes `stop` wait for it (spawned untracked, this test fails).
    let command = format!(
        "setsid sh -c 'echo $$ > {0}; exec yes' & while [ ! -s {0} ]; do :; done; echo started; sleep 30; touch {1}",
        escaped.display(),
        marker.display()
    );
    send(&mut client, json!({"type":"tool_call","id":"long","name":"run_command","args":{"command": command}})).await;
    recv_type(&mut client, "tool_progress").await; // the call is running
    let TestAgent { agent: running, workspace, .. } = agent;
    let ctx = running.ctx.clone();
    assert_eq!(ctx.status.calls_in_flight.load(Ordering::Relaxed), 1);
    let stopped = tokio::time::timeout(STEP, running.stop()).await;
    // `stop` returned only once the call had ended (its command killed, its task finished).
    let in_flight = ctx.status.calls_in_flight.load(Ordering::Relaxed);
    if let Some(pid) = std::fs::read_to_string(&escaped).ok().and_then(|pid| pid.trim().parse::<i32>().ok()) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    stopped.expect("the agent stops");
    assert_eq!(in_flight, 0, "stop returned while a call was still running");
    assert!(!workspace.path().join("still-running").exists());
}

/// Starts an agent whose home was rotated (`pair --rotate`) just before, answering the replaced
/// code for `window` after the rotation. Returns the agent (whose `secrets` are the replaced
/// ones) and the current secrets.
async fn rotated_agent(relay: &TestRelay, window: Duration) -> (TestAgent, voxa::state::Secrets) {
    let mut current = None;
    let agent = TestAgent::start_with(Some(relay.url()), |options| {
        let rotated = options.home.rotate_secrets().unwrap();
        options.secrets = rotated.clone();
        options.retired_window = window;
        current = Some(rotated);
    })
    .await;
    (agent, current.unwrap())
}

/// The next `error` frame, skipping relay notices.
async fn recv_error(socket: &mut voxa::net::dial::ClientSocket) -> serde_json::Value {
    loop {
        let value = recv_json(socket).await;
        if value["type"] == "error" {
            return value;
        }
    }
}

#[tokio::test]
async fn the_code_replaced_by_rotation_challenges_and_refuses_the_old_and_the_new_token() {
    let relay = TestRelay::start().await;
    let (mut agent, current) = rotated_agent(&relay, voxa::agent::retired::RETIRED_CODE_WINDOW).await;
    let old = agent.secrets.clone();
    let answered =
        agent.wait_event("the retired code answered", |e| matches!(e, LinkEvent::RetiredCodeAnswered { .. })).await;
    let LinkEvent::RetiredCodeAnswered { until } = answered else { unreachable!() };
    let week_from_now = voxa::agent::retired::unix_seconds(std::time::SystemTime::now()) + 7 * 24 * 3600;
    assert!(until <= week_from_now && until + 3600 > week_from_now, "{until} vs {week_from_now}");
    assert_eq!(agent.agent.ctx.status().retired_code_until, Some(until));

    let marker = agent.workspace.path().join("ran");
    for token in [old.auth_token.expose(), current.auth_token.expose()] {
        let mut phone = phone_socket(&relay, old.relay_code.expose()).await;
        let challenge = recv_challenge(&mut phone).await;
        // A call before the hello is ignored, and no hello opens a session on this code.
        let call = json!({"type":"tool_call","id":"r1","name":"run_command","args":{"command":"touch ran"}});
        send(&mut phone, call.clone()).await;
        send(&mut phone, hello_for(token, &challenge)).await;
        let refused = recv_error(&mut phone).await;
        assert_eq!(refused["code"], "bearer-refused", "{refused}");
        let _ = phone.send(Message::text(call.to_string())).await;
        let _ = phone.send(Message::text(hello_for(token, &challenge).to_string())).await;
        assert_eq!(recv_close(&mut phone).await, (1008, "bearer-refused".into()), "closed, not kept");
    }
    assert!(!marker.exists(), "a tool ran on the retired code");

    // The current code and token are the working door.
    let mut phone = phone_socket(&relay, current.relay_code.expose()).await;
    let ok = say_hello(&mut phone, current.auth_token.expose()).await;
    assert_eq!(ok["protocol"], 3);
    send(&mut phone, json!({"type":"status"})).await;
    let status = recv_type(&mut phone, "status").await;
    assert_eq!(status["retired_code_until"], until);
    let shown = status.to_string();
    assert!(!shown.contains(old.relay_code.expose()) && !shown.contains(current.relay_code.expose()));
    agent.agent.stop().await;
}

#[tokio::test]
async fn after_its_window_the_replaced_code_is_no_longer_dialled() {
    let relay = TestRelay::start().await;
    // The rotation time is kept to the second: the window ends one to two seconds from now.
    let (mut agent, _) = rotated_agent(&relay, Duration::from_secs(2)).await;
    let old = agent.secrets.clone();
    assert!(agent.agent.ctx.status().retired_code_until.is_some());
    agent.wait_event("the retired code's window ending", |e| *e == LinkEvent::RetiredCodeEnded).await;
    assert_eq!(agent.agent.ctx.status().retired_code_until, None);
    // Nobody holds the old code now: a laptop taking it is not replaced by a redial, and a phone
    // there hears of that laptop only.
    let mut laptop = connect(&format!("ws://{}/agent?code={}", relay.addr, old.relay_code.expose())).await;
    let mut phone = phone_socket(&relay, old.relay_code.expose()).await;
    wait_agent_joined(&mut phone).await;
    assert_eq!(recv_json(&mut laptop).await["state"], "joined");
    assert_silent(&mut laptop, Duration::from_millis(1500)).await;

    // A window already over at start: the code is not dialled at all.
    let (late, _) = rotated_agent(&relay, Duration::ZERO).await;
    assert_eq!(late.agent.ctx.status().retired_code_until, None);
    agent.agent.stop().await;
    late.agent.stop().await;
}
