//! Voice that supervises (docs/GUIDE.md, "What you can say"), against the fake Gemini Live server
//! with real agents running configured coding agents: the model is told when a session's turn
//! ends or fails and of each approval (never while the user speaks), `[voice] narrate` chooses how
//! much; an `approve` from the model counts only with the user's own yes since the approval was
//! read; `brief` names the sessions; `agent_send` and `agent_interrupt` steer them. A call the
//! relay hosts does the same through the page's sealed session, and its model never approves.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use voxa::config::{AgentCommand, Narrate};

use crate::support::audit::audit_lines;
use crate::support::fake_gemini::{Event, FakeGemini, FakeOptions, Kind};
use crate::support::harness::*;
use crate::support::live::{hosting_relay, start_call, Page};
use crate::support::phone::{Phone, KEY};

/// Configured agents: one that answers every turn with the same line, one that fails, one slow.
fn with_agents(config: &mut voxa::config::Config) {
    let agent = |script: &str| AgentCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into(), "{prompt}".into()],
        format: "text".into(),
    };
    config.agents.insert("tidy".into(), agent("echo 'all 3 tests pass'"));
    config.agents.insert("broken".into(), agent("echo 'cannot find the repo' >&2; exit 3"));
    config.agents.insert("slow".into(), agent("sleep 30; echo 'too late'"));
}

/// A laptop hosting its own calls against `fake`, with the agents above, `run_command` under
/// `ask`, and `narrate`.
async fn self_hosted(fake: &FakeGemini, narrate: Narrate) -> TestAgent {
    let config = fake.config(KEY);
    TestAgent::start_with(None, |options| {
        options.gemini = Some(config);
        with_agents(&mut options.config);
        options.config.policy.ask = vec!["run_command".into()];
        options.config.voice.narrate = narrate;
    })
    .await
}

/// A phone on the loopback socket that follows (approvals, session events) and is in a call.
async fn in_a_call(agent: &TestAgent, fake: &mut FakeGemini) -> (Phone, usize, Value) {
    let mut phone = Phone::over(agent.local_client().await);
    phone.send(json!({"type": "follow"})).await;
    phone.send(json!({"type": "call_start"})).await;
    let (conn, setup) = fake.expect_setup().await;
    phone.expect("call_started").await;
    (phone, conn, setup)
}

fn is_text_with(event: &Event, words: &[&str]) -> bool {
    matches!(&event.kind, Kind::Text(text) if words.iter().all(|w| text.contains(w)))
}

/// Waits until the model was sent a text turn containing every one of `words`.
async fn told(fake: &mut FakeGemini, what: &str, words: &[&str]) -> Event {
    fake.wait_for(what, |e| is_text_with(e, words)).await
}

fn start(id: &str, agent: &str, title: &str) -> Value {
    json!({"type": "tool_call", "id": id, "name": "agent_start",
           "args": {"prompt": "go", "agent": agent, "title": title}})
}

/// Starts a session from `phone` and waits for its turn to end; returns its id.
async fn session_with_a_turn(phone: &mut Phone, id: &str, agent: &str, title: &str) -> String {
    phone.send(start(id, agent, title)).await;
    let started = recv_result(&mut phone.socket, id).await;
    let session = started["result"]["session"].as_str().unwrap_or_else(|| panic!("{started}")).to_owned();
    loop {
        let event = phone.expect("agent_event").await;
        if event["session"] == session.as_str() && event["event"]["kind"] == "turn_end" {
            return session;
        }
    }
}

/// Gemini's function call `name` as call `id` on `conn`, and the answer Gemini got.
async fn model_calls(fake: &mut FakeGemini, conn: usize, id: &str, name: &str, args: Value) -> Value {
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id": id, "name": name, "args": args}]}}));
    let answered = fake.wait_for("the answer", |e| matches!(&e.kind, Kind::ToolResponse(r) if r["id"] == id)).await;
    let Kind::ToolResponse(response) = answered.kind else { unreachable!() };
    response
}

fn declared(setup: &Value) -> Vec<String> {
    setup["tools"][0]["functionDeclarations"]
        .as_array()
        .map(|list| list.iter().filter_map(|d| d["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_self_hosted_call_is_told_when_a_session_turn_ends_or_fails_and_steers_and_briefs() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted(&fake, Narrate::Changes).await;
    let (mut phone, conn, setup) = in_a_call(&agent, &mut fake).await;
    for name in ["agent_send", "agent_interrupt", "brief", "approve"] {
        assert!(declared(&setup).iter().any(|d| d == name), "{name} is declared: {:?}", declared(&setup));
    }

    let tidy = session_with_a_turn(&mut phone, "s1", "tidy", "Tidy the tests").await;
    let note = told(&mut fake, "the ended turn", &["Tidy the tests", "finished its turn"]).await;
    let Kind::Text(text) = note.kind else { unreachable!() };
    assert!(text.starts_with("[voxa] ") && text.contains("all 3 tests pass") && text.len() < 400, "{text}");
    session_with_a_turn(&mut phone, "s2", "broken", "Build it").await;
    told(&mut fake, "the failed turn", &["Build it", "without finishing", "agent_log"]).await;

    // "Tell it to use SQLite": the session gets the user's words through the model.
    let sent =
        model_calls(&mut fake, conn, "fc-send", "agent_send", json!({"session": tidy, "text": "use SQLite"})).await;
    assert!(sent["response"]["error"].is_null(), "{sent}");
    let log = model_calls(&mut fake, conn, "fc-log", "agent_log", json!({"session": tidy})).await;
    let events = log["response"]["output"]["events"].as_array().unwrap().clone();
    assert!(
        events.iter().any(|e| e["event"]["kind"] == "user"
            && e["event"]["text"] == "use SQLite"
            && e["event"]["by"] == "gemini"),
        "{events:?}"
    );
    // "Stop it": a slow turn is interrupted.
    phone.send(start("s3", "slow", "Take forever")).await;
    let slow = recv_result(&mut phone.socket, "s3").await["result"]["session"].as_str().unwrap().to_owned();
    let stopped = model_calls(&mut fake, conn, "fc-stop", "agent_interrupt", json!({"session": slow})).await;
    assert!(stopped["response"]["error"].is_null(), "{stopped}");
    let started = Instant::now();
    loop {
        let event = phone.expect("agent_event").await;
        if event["session"] == slow.as_str() && event["event"]["kind"] == "turn_end" {
            assert_eq!(event["event"]["ok"], false, "{event}");
            break;
        }
    }
    assert!(started.elapsed() < Duration::from_secs(20), "the turn ran on");

    // "What did I miss?": every session since the user last looked, by name.
    let brief = model_calls(&mut fake, conn, "fc-brief", "brief", json!({})).await;
    let digest = brief["response"]["output"]["digest"].as_str().unwrap_or_else(|| panic!("{brief}"));
    for part in ["\"Tidy the tests\" (tidy) finished 2 turns", "\"Build it\" (broken) finished 1 turn", "hit a failure"]
    {
        assert!(digest.contains(part), "{part:?} missing from {digest}");
    }
    assert_eq!(brief["response"]["output"]["sessions"].as_array().unwrap().len(), 3, "{brief}");
    agent.agent.stop().await;
}

#[tokio::test]
async fn narration_waits_while_the_user_speaks_and_comes_when_their_turn_ends() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted(&fake, Narrate::Changes).await;
    let (mut phone, conn, _) = in_a_call(&agent, &mut fake).await;
    // The user is speaking: a piece of their words came, their turn has not ended.
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"so what I want is"}}}));
    phone.expect("transcript").await;
    session_with_a_turn(&mut phone, "s1", "tidy", "Tidy the tests").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !fake.received().iter().any(|e| is_text_with(e, &["finished its turn"])),
        "narrated while the user spoke: {:?}",
        fake.received()
    );
    let turn_over = Instant::now();
    fake.send(conn, json!({"serverContent":{"turnComplete":true}}));
    let note = told(&mut fake, "the held note", &["Tidy the tests", "finished its turn"]).await;
    assert!(note.at >= turn_over, "the note came before the user's turn ended");
    agent.agent.stop().await;
}

#[tokio::test]
async fn narrate_approvals_tells_approvals_only_and_off_tells_nothing() {
    for narrate in [Narrate::Approvals, Narrate::Off] {
        let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
        let agent = self_hosted(&fake, narrate).await;
        let (mut phone, conn, _) = in_a_call(&agent, &mut fake).await;
        session_with_a_turn(&mut phone, "s1", "tidy", "Tidy the tests").await;
        fake.send(
            conn,
            json!({"toolCall":{"functionCalls":[{"id":"fc-1","name":"run_command","args":{"command":"echo hi"}}]}}),
        );
        let approval = phone.expect("approval").await["approval"].as_str().unwrap().to_owned();
        let read_back = |e: &Event| is_text_with(e, &[&approval]);
        if narrate == Narrate::Approvals {
            fake.wait_for("the approval read back", read_back).await;
        } else {
            tokio::time::sleep(Duration::from_millis(800)).await;
            assert!(!fake.received().iter().any(read_back), "{narrate:?} read the approval");
        }
        assert!(!fake.received().iter().any(|e| is_text_with(e, &["finished its turn"])), "{narrate:?} told a turn");
        agent.agent.stop().await;
    }
}

/// What the model gets for `approve` allowing `approval`, after the user said `said`.
async fn approve_after(
    fake: &mut FakeGemini,
    phone: &mut Phone,
    conn: usize,
    id: &str,
    approval: &str,
    said: &str,
) -> Value {
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text": said}}}));
    fake.send(conn, json!({"serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    model_calls(fake, conn, id, "approve", json!({"approval": approval, "decision": "allow"})).await
}

#[tokio::test]
async fn the_model_allows_an_approval_only_after_the_users_own_yes_and_refusals_let_nothing_run() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted(&fake, Narrate::Changes).await;
    let broker = agent.agent.ctx.approvals.clone();
    let (mut phone, conn, _) = in_a_call(&agent, &mut fake).await;
    let cases = [
        ("yes — wait", false),
        ("no, go ahead", false),
        ("don't stop", false),
        ("okay, wait, don't run that", false),
        ("Sure, but not now", false),
        ("I was thinking about lunch", false),
        ("yeah do it", true),
        ("sure", true),
    ];
    for (n, (said, allows)) in cases.into_iter().enumerate() {
        let marker = format!("ran-{n}.txt");
        let command = format!("echo ran > {marker}");
        fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":format!("fc-{n}"),"name":"run_command","args":{"command":command}}]}}));
        let approval = phone.expect("approval").await["approval"].as_str().unwrap().to_owned();
        let read = told(&mut fake, "the approval read back", &[&approval, &command]).await;
        let Kind::Text(read) = read.kind else { unreachable!() };
        assert!(read.contains("(exec)"), "{read}");
        // The model may not take the words from before the read-back, nor its own.
        let early = model_calls(
            &mut fake,
            conn,
            &format!("early-{n}"),
            "approve",
            json!({"approval": approval, "decision": "allow"}),
        )
        .await;
        assert_eq!(early["response"]["error"]["code"], "no-spoken-consent", "{said:?}: {early}");

        let answer = approve_after(&mut fake, &mut phone, conn, &format!("ap-{n}"), &approval, said).await;
        let ran = agent.workspace.path().join(&marker);
        if allows {
            assert!(answer["response"]["error"].is_null(), "{said:?} should allow: {answer}");
            let result = fake
                .wait_for(
                    "the command's answer",
                    |e| matches!(&e.kind, Kind::ToolResponse(r) if r["id"] == format!("fc-{n}")),
                )
                .await;
            let Kind::ToolResponse(result) = result.kind else { unreachable!() };
            assert_eq!(result["response"]["output"]["exit_code"], 0, "{result}");
            assert!(ran.exists(), "{said:?}: the command did not run");
        } else {
            assert_eq!(answer["response"]["error"]["code"], "no-spoken-consent", "{said:?}: {answer}");
            let failed = loop {
                let activity = phone.expect("tool_activity").await;
                if activity["id"] == format!("ap-{n}") && activity["state"] == "finished" {
                    break activity;
                }
            };
            assert_eq!(
                (failed["code"].as_str(), failed["approval"].as_str()),
                (Some("no-spoken-consent"), Some(approval.as_str()))
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!ran.exists(), "{said:?}: the command ran");
            assert!(broker.get(&approval).is_some(), "{said:?}: the approval did not stay open");
            // It stays for a tap; the phone says no.
            phone.send(json!({"type":"approve","approval": approval,"decision":"deny"})).await;
            phone.expect("approval_resolved").await;
        }
    }
    // Risky actions are allowed once only by voice, whatever was said.
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[{"id":"fc-s","name":"run_command","args":{"command":"echo session"}}]}}),
    );
    let approval = phone.expect("approval").await["approval"].as_str().unwrap().to_owned();
    told(&mut fake, "the approval read back", &[&approval]).await;
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"yes, for the whole session"}}}));
    fake.send(conn, json!({"serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    let session =
        model_calls(&mut fake, conn, "ap-s", "approve", json!({"approval": approval, "decision": "allow_session"}))
            .await;
    assert!(session["response"]["error"]["code"].is_string(), "{session}");
    assert!(broker.get(&approval).is_some());
    agent.agent.stop().await;
}

/// Answers, from the page's session, an approval that opens within `within` (a hosted call's tool
/// that `[policy] hosted` asks about), if one does.
async fn tap_if_asked(page: &mut Page, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(frame) = tokio::time::timeout_at(deadline, recv_json(&mut page.session)).await {
        if frame["type"] == "approval" {
            send(&mut page.session, json!({"type":"approve","approval":frame["approval"],"decision":"allow"})).await;
            return;
        }
    }
}

#[tokio::test]
async fn a_call_the_relay_hosts_is_told_steers_and_briefs_through_the_page_and_its_model_never_approves() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let relay = hosting_relay(&fake, |_| {}).await;
    let mut agent = TestAgent::start_with(Some(relay.url()), |options| {
        with_agents(&mut options.config);
        options.config.policy.ask = vec!["run_command".into()];
    })
    .await;
    agent.wait_event("the relay link", |event| matches!(event, voxa::agent::LinkEvent::Connected { .. })).await;
    let mut page = Page::open(&relay, &agent).await;
    send(&mut page.session, json!({"type":"follow"})).await;
    // A turn that ended before the call is not news.
    send(&mut page.session, start("s0", "tidy", "Earlier work")).await;
    while recv_type(&mut page.session, "agent_event").await["event"]["kind"] != "turn_end" {}
    let (conn, setup) = start_call(&mut page.live, &mut fake).await;
    assert!(!declared(&setup).iter().any(|d| d == "approve"), "a hosted model is never offered approve");
    for name in ["agent_send", "agent_interrupt", "brief"] {
        assert!(declared(&setup).iter().any(|d| d == name), "{name}: {:?}", declared(&setup));
    }

    send(&mut page.session, start("s1", "tidy", "Tidy the tests")).await;
    let session = recv_result(&mut page.session, "s1").await["result"]["session"].as_str().unwrap().to_owned();
    told(&mut fake, "the ended turn", &["Tidy the tests", "finished its turn", "all 3 tests pass"]).await;
    let earlier = fake.received().into_iter().filter(|e| is_text_with(e, &["Earlier work"]));
    assert_eq!(earlier.count(), 0, "only what ended during the call is told");

    // The model's run_command waits for the page's tap; the model is told to ask for it.
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[{"id":"fc-run","name":"run_command","args":{"command":"echo tapped"}}]}}),
    );
    let approval = recv_type(&mut page.session, "approval").await["approval"].as_str().unwrap().to_owned();
    let read = told(&mut fake, "the read-back", &["Run: echo tapped", "tap Allow or Deny"]).await;
    let Kind::Text(read) = read.kind else { unreachable!() };
    assert!(!read.contains(&approval), "the relay's model is not given the approval's id: {read}");
    // An `approve` the relay's model makes anyway reaches nothing.
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"yes, do it"}}}));
    let approve =
        model_calls(&mut fake, conn, "fc-ap", "approve", json!({"approval": approval, "decision": "allow"})).await;
    assert!(approve["response"]["error"]["code"].is_string(), "{approve}");
    send(&mut page.session, json!({"type":"approve","approval": approval,"decision":"allow"})).await;
    let ran = fake
        .wait_for("the command's answer", |e| matches!(&e.kind, Kind::ToolResponse(r) if r["id"] == "fc-run"))
        .await;
    let Kind::ToolResponse(ran) = ran.kind else { unreachable!() };
    assert!(ran["response"]["output"]["output"].as_str().is_some_and(|o| o.contains("tapped")), "{ran}");

    // Steering and the brief go through the page too.
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"fc-send","name":"agent_send","args":{"session": session, "text": "use SQLite"}}]}}));
    tap_if_asked(&mut page, Duration::from_secs(2)).await;
    let sent =
        fake.wait_for("the send's answer", |e| matches!(&e.kind, Kind::ToolResponse(r) if r["id"] == "fc-send")).await;
    let Kind::ToolResponse(sent) = sent.kind else { unreachable!() };
    assert!(sent["response"]["error"].is_null(), "{sent}");
    let brief = model_calls(&mut fake, conn, "fc-brief", "brief", json!({})).await;
    let digest = brief["response"]["output"]["digest"].as_str().unwrap_or_else(|| panic!("{brief}"));
    assert!(digest.contains("\"Tidy the tests\" (tidy)"), "{digest}");
    let records = audit_lines(&agent);
    assert!(records.iter().any(|r| r["tool"] == "brief" && r["caller"] == "gemini-hosted"), "{records:?}");
    agent.agent.stop().await;
}
