//! A call the relay hosts beside the page's sealed session (docs/PROTOCOL.md, "Hosted voice" and
//! "Sealed sessions"): the page's session stays on `/ws`, sealed, and the call speaks on a second
//! socket to `/live` only while it runs. A tool under `ask` that hosted voice calls waits for the
//! page's approval over the sealed session, runs after the tap, and its result reaches Gemini,
//! while a passive capture of `/ws` holds none of it. The relay's call ids never meet a call an
//! earlier `/live` session left running on the laptop.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::Notify;

use crate::gemini::{expect_tool_responses, KEY};
use crate::live::{audit, hosted_agent, hosting_relay, live_phone, start_call};
use crate::sealed::{Mitm, Way};
use crate::sealed_web::{assert_sealed_after_hello, seal_mark, session_counts};
use crate::support::browser::Scheme;
use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::support::harness::*;
use crate::web_voice::browser_with_tone;

/// The audited calls of `tool` that hosted voice made, as (id, outcome).
fn hosted_runs(agent: &TestAgent, tool: &str) -> Vec<(String, String)> {
    audit(agent)
        .into_iter()
        .filter(|line| line["tool"] == tool && line["caller"] == "gemini-hosted" && line.get("id").is_some())
        .map(|line| (line["id"].as_str().unwrap().to_owned(), line["outcome"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_an_earlier_live_session_left_running_does_not_collide_with_the_next_sessions_calls() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let agent = hosted_agent(&relay).await;

    // The first session's first call runs on the laptop until `go` exists.
    let (mut first, _) = live_phone(&relay, &agent).await;
    let (conn, _) = start_call(&mut first, &mut fake).await;
    let slow = json!({"command": "while [ ! -e go ]; do sleep 0.05; done; echo first-done"});
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"fc-slow","name":"run_command","args":slow}]}}));
    assert_eq!(first.expect("tool_activity").await["state"], "started");
    // The phone leaves: its call ends, the laptop's call goes on (calls outlive the connection).
    drop(first);
    fake.expect_closed(conn).await;

    // The next session's first call is answered by the laptop, not refused as a duplicate id.
    std::fs::write(agent.workspace.path().join("notes.txt"), "hi").unwrap();
    let (mut second, _) = live_phone(&relay, &agent).await;
    let (next, _) = start_call(&mut second, &mut fake).await;
    fake.send(next, json!({"toolCall":{"functionCalls":[{"id":"fc-2","name":"list_dir","args":{}}]}}));
    let answered =
        fake.wait_for("the laptop's answer", |e| matches!(&e.kind, Kind::ToolResponse(r) if r["id"] == "fc-2")).await;
    let Kind::ToolResponse(response) = answered.kind else { unreachable!() };
    assert!(response["response"]["error"].is_null(), "the second session's call was refused: {response}");
    assert!(response["response"]["output"]["entries"].as_array().is_some_and(|e| !e.is_empty()), "{response}");

    std::fs::write(agent.workspace.path().join("go"), "").unwrap();
    eventually("both calls audited", || {
        hosted_runs(&agent, "run_command").len() == 1 && hosted_runs(&agent, "list_dir").len() == 1
    })
    .await;
    let (slow_id, slow_outcome) = hosted_runs(&agent, "run_command").remove(0);
    let (list_id, list_outcome) = hosted_runs(&agent, "list_dir").remove(0);
    assert_eq!((slow_outcome.as_str(), list_outcome.as_str()), ("ok", "ok"));
    assert!(slow_id.starts_with("gemini-hosted-") && list_id.starts_with("gemini-hosted-"), "{slow_id} {list_id}");
    let session_part = |id: &str| id.rsplit_once('-').map(|(start, _)| start.to_owned()).unwrap();
    assert_ne!(session_part(&slow_id), session_part(&list_id), "two sessions, one id space: {slow_id} {list_id}");
    send(&mut second.socket, json!({"type":"call_end"})).await;
    fake.expect_closed(next).await;
}

/// The page's clients as the agent's `status` lists them: (client name, sealed).
async fn connected(agent: &TestAgent) -> Vec<(String, bool)> {
    let mut local = agent.local_client().await;
    send(&mut local, json!({"type":"status"})).await;
    let status = recv_type(&mut local, "status").await;
    let mut clients: Vec<(String, bool)> = status["connected"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["via"] == "relay")
        .map(|c| (c["client"].as_str().unwrap_or_default().to_owned(), c["sealed"] == true))
        .collect();
    clients.sort();
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_calls_tool_under_ask_waits_for_the_pages_approval_over_its_sealed_session() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(browser) = browser_with_tone(&scratch, Scheme::Light).await else { return };
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let agent = TestAgent::start_with(Some(relay.url()), |options| {
        options.config.policy.ask = vec!["run_command".into()];
    })
    .await;
    // A relay that only watches `/ws`: every frame of the page's session is kept. `/live` and the
    // page's files pass through it untouched.
    let mitm = Mitm::start(relay.addr, agent.code(), Box::new(|_, m| vec![m])).await;
    browser.pair(&format!("http://{}/#code={}&token={}", mitm.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    assert_eq!(seal_mark(&browser).await, "sealed");
    assert_eq!(session_counts(&agent).await, (2, 0), "the page's session and the status client, both sealed");

    // The call: a second socket, protocol 2, beside the sealed session; the page says who hears it.
    browser.press("Call").await;
    let (conn, _) = fake.expect_setup().await;
    browser.wait_script("the call to start", "return voxaVoice.state === 'live';").await;
    let host = browser.wait_text("#call-host", "where the call runs", |t| !t.is_empty()).await;
    assert_eq!(host, "the relay runs the model and hears this call");
    assert_eq!(seal_mark(&browser).await, "sealed", "the session beside the call stays sealed");
    assert_eq!(session_counts(&agent).await, (2, 1), "the call socket is the one plain session");
    let clients = connected(&agent).await;
    assert_eq!(clients, [("voxa-web/1".to_owned(), true), ("voxa-web/1 hosted-call".to_owned(), false)]);

    // Gemini asks for a tool under `ask`: it waits for the page's tap.
    let secret = "hosted-output-5b7e";
    let command = format!("echo {secret} > asked.txt && cat asked.txt");
    let call = json!({"id":"fc-ask","name":"run_command","args":{"command": command}});
    fake.send(conn, json!({"toolCall":{"functionCalls":[call]}}));
    let card = browser.wait_text(".approval-card", "the approval", |t| t.contains("Allow")).await;
    assert!(card.contains(&command), "{card}");
    assert!(!agent.workspace.path().join("asked.txt").exists(), "the tool ran before the tap");
    assert!(!fake.received().iter().any(|e| matches!(e.kind, Kind::ToolResponse(_))), "answered before the tap");
    browser.press("Allow").await;
    let response = expect_tool_responses(&mut fake, 1).await.remove(0);
    assert_eq!(response["id"], "fc-ask", "{response}");
    assert!(response["response"]["output"]["output"].as_str().is_some_and(|o| o.contains(secret)), "{response}");
    assert_eq!(std::fs::read_to_string(agent.workspace.path().join("asked.txt")).unwrap(), format!("{secret}\n"));
    // Audited as hosted voice's call, allowed on the phone for that call.
    let is_run = |line: &serde_json::Value| line["tool"] == "run_command" && line.get("caller").is_some();
    eventually("the call audited", || audit(&agent).iter().any(is_run)).await;
    let audited = audit(&agent);
    let ran = audited.iter().find(|line| is_run(line)).unwrap();
    assert_eq!((ran["caller"].as_str(), ran["outcome"].as_str()), (Some("gemini-hosted"), Some("ok")), "{ran}");
    let allowed = audited.iter().find(|line| line["decision"] == "allow").expect("the approval audited");
    assert_eq!(allowed["by"], "phone", "{allowed}");
    assert_eq!(allowed["source"], format!("call:{}", ran["id"].as_str().unwrap()), "{allowed}");

    // "End call" closes the call socket; the sealed session goes on alone.
    browser.press("End call").await;
    fake.expect_closed(conn).await;
    counts_become(&agent, (2, 0)).await;
    assert_eq!(seal_mark(&browser).await, "sealed");

    // The relay's view of `/ws`: none of the call's tool, its approval or its output.
    let capture = mitm.capture.lock().unwrap().clone();
    assert_sealed_after_hello(&capture, &[secret, "asked.txt", "run_command", "approval", "fc-ask", agent.token()]);
    let down = capture.iter().filter(|(way, m)| *way == Way::Down && m.is_binary()).count();
    assert!(down >= 2, "the approval and its end came sealed: {down} sealed frames down");
    browser.close().await;
}

/// Waits until the agent counts `want` (sealed, plain) sessions.
async fn counts_become(agent: &TestAgent, want: (u64, u64)) {
    for _ in 0..200 {
        if session_counts(agent).await == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(session_counts(agent).await, want);
}

/// A front for a relay that passes everything on, and cuts every `/live` connection through it
/// once `cut` is notified.
async fn cutting_front(relay: std::net::SocketAddr, cut: Arc<Notify>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let cut = cut.clone();
            tokio::spawn(async move {
                let Ok(mut upstream) = tokio::net::TcpStream::connect(relay).await else { return };
                let mut head = [0u8; 10];
                let live = loop {
                    match tcp.peek(&mut head).await {
                        Ok(n) if n == head.len() => break &head == b"GET /live?",
                        Ok(0) | Err(_) => return,
                        Ok(_) => tokio::task::yield_now().await,
                    }
                };
                let pass = tokio::io::copy_bidirectional(&mut tcp, &mut upstream);
                if live {
                    tokio::select! {
                        _ = pass => {}
                        () = cut.notified() => {}
                    }
                } else {
                    let _ = pass.await;
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_socket_that_closes_ends_the_call_with_its_sentence_and_the_sealed_session_goes_on() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(browser) = browser_with_tone(&scratch, Scheme::Light).await else { return };
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let agent = hosted_agent(&relay).await;
    let cut = Arc::new(Notify::new());
    let front = cutting_front(relay.addr, cut.clone()).await;
    browser.pair(&format!("http://{front}/#code={}&token={}", agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    browser.press("Call").await;
    let (conn, _) = fake.expect_setup().await;
    browser.wait_script("the call to start", "return voxaVoice.state === 'live';").await;

    // The call socket is cut: the relay ends the call, the page says why, the session is still on.
    cut.notify_waiters();
    fake.expect_closed(conn).await;
    let said = browser.wait_text("#call-error", "why the call ended", |t| !t.is_empty()).await;
    assert!(said.starts_with("The relay's socket for this call did not open, or closed"), "{said}");
    assert!(said.ends_with("The relay closed it. (call-socket)"), "{said}");
    browser.control("button", "Call").await;
    assert_eq!(seal_mark(&browser).await, "sealed");
    counts_become(&agent, (2, 0)).await;
    browser.type_into("Command", "echo after-the-call-3e8a").await;
    browser.press("Run").await;
    browser.wait_text("#commands-out", "the command's output", |t| t.contains("after-the-call-3e8a\n")).await;
    browser.close().await;
}
