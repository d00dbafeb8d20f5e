//! A voice call is told of the coding-agent sessions while it runs: a turn that ends reaches the
//! model as a text turn, in a self-hosted call (the agent's own bridge) and in a call the relay
//! hosts (which sees the `agent_event`s pass to the phone), against the fake Gemini Live server.

use serde_json::json;
use voxa::agent::LinkEvent;
use voxa::config::AgentCommand;
use voxa::hosted::{Hosting, LiveConfig};
use voxa::relay::RelayConfig;

use crate::gemini::{Phone, KEY};
use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::support::harness::{say_hello_plain, TestAgent, TestRelay, STEP};

/// A configured agent that answers every turn with the same line, or fails it.
fn with_agents(config: &mut voxa::config::Config) {
    let agent = |script: &str| AgentCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into(), "{prompt}".into()],
        format: "text".into(),
    };
    config.agents.insert("tidy".into(), agent("echo 'all 3 tests pass'"));
    config.agents.insert("broken".into(), agent("echo 'cannot find the repo' >&2; exit 3"));
}

/// Waits until the model was sent a text turn containing every one of `words`.
async fn told(fake: &mut FakeGemini, what: &str, words: &[&str]) -> String {
    let event =
        fake.wait_for(what, |e| matches!(&e.kind, Kind::Text(text) if words.iter().all(|w| text.contains(w)))).await;
    let Kind::Text(text) = event.kind else { unreachable!() };
    text
}

fn start(id: &str, agent: &str, title: &str) -> serde_json::Value {
    json!({"type": "tool_call", "id": id, "name": "agent_start",
           "args": {"prompt": "go", "agent": agent, "title": title}})
}

#[tokio::test]
async fn a_self_hosted_call_is_told_when_a_session_turn_ends_or_fails() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let config = fake.config(KEY);
    let agent = TestAgent::start_with(None, |options| {
        options.gemini = Some(config);
        with_agents(&mut options.config);
    })
    .await;
    let mut phone = Phone::over(agent.local_client().await);
    phone.send(json!({"type": "call_start"})).await;
    fake.expect_setup().await;
    phone.expect("call_started").await;

    phone.send(start("s1", "tidy", "Tidy the tests")).await;
    let text = told(&mut fake, "the ended turn", &["Tidy the tests", "finished its turn"]).await;
    assert!(text.starts_with("[voxa] ") && text.contains("all 3 tests pass"), "{text}");
    phone.send(start("s2", "broken", "Build it")).await;
    let text = told(&mut fake, "the failed turn", &["Build it", "without finishing"]).await;
    assert!(text.contains("agent_log"), "{text}");
    agent.agent.stop().await;
}

#[tokio::test]
async fn a_call_the_relay_hosts_is_told_when_a_session_turn_ends() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let live = LiveConfig::new(fake.config(KEY));
    let relay =
        TestRelay::with_config(RelayConfig { service: Some(Hosting::service(live)), ..Default::default() }).await;
    let mut agent = TestAgent::start_with(Some(relay.url()), |options| with_agents(&mut options.config)).await;
    agent.wait_event("the relay link", |event| matches!(event, LinkEvent::Connected { .. })).await;
    let url = format!("ws://{}/live?code={}", relay.addr, agent.code());
    let mut socket =
        tokio::time::timeout(STEP, voxa::net::dial::connect(&url, &Default::default())).await.unwrap().unwrap();
    say_hello_plain(&mut socket, agent.token()).await;
    let mut phone = Phone::over(socket);
    // An ended turn from before the call is not news.
    phone.send(json!({"type": "follow"})).await;
    phone.send(start("s0", "tidy", "Earlier work")).await;
    while phone.expect("agent_event").await["event"]["kind"] != "turn_end" {}
    phone.send(json!({"type": "call_start"})).await;
    fake.expect_setup().await;
    phone.expect("call_started").await;

    phone.send(start("s1", "tidy", "Tidy the tests")).await;
    let text = told(&mut fake, "the ended turn", &["finished its turn", "all 3 tests pass"]).await;
    assert!(text.starts_with("[voxa] Coding session s-"), "{text}");
    let earlier = fake.received().into_iter().filter(|e| matches!(&e.kind, Kind::Text(t) if t.contains("finished")));
    assert_eq!(earlier.count(), 1, "only the turn that ended during the call is told");
    agent.agent.stop().await;
}
