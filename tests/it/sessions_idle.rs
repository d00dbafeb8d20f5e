//! Idle sessions cost nothing, against the real Claude Code CLI: a process with nothing to do
//! for `[sessions] idle_secs` is stopped, the session reads ended (resumable), never failed, and
//! the next message resumes it with its context.

use std::collections::HashMap;

use serde_json::Value;
use voxa::config::{Config, SessionSettings};
use voxa::protocol::{Event, SessionState};
use voxa::sessions::StartRequest;

use crate::support::agents::{is_turn_end, until, whole_log, Rig};
use crate::support::fake_model::{user_text, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_process_is_stopped_and_the_next_message_resumes_it() {
    let config = Config { sessions: SessionSettings { idle_secs: 1 }, ..Default::default() };
    let Some(rig) = Rig::for_agent(config, "claude").await else { return };
    rig.model.script([Reply::text("Noted: MANGO.")]);
    let mut follower = rig.host.follow(&HashMap::new());
    let request = StartRequest { prompt: "Remember the word MANGO".into(), by: "phone".into(), ..Default::default() };
    let session = rig.host.start(request).await.unwrap().session;
    until(&mut follower, &session, "the turn's end", is_turn_end).await;
    until(&mut follower, &session, "the idle stop", |e| matches!(e, Event::State { state: SessionState::Ended })).await;
    assert_eq!(rig.host.info(&session).unwrap().state, SessionState::Ended);
    let log = whole_log(&rig.host, &session);
    assert!(!log.iter().any(|e| matches!(&e.event, Event::Error { .. })), "an idle stop is no error: {log:#?}");

    rig.model.script([Reply::text("The word was MANGO.")]);
    rig.host.send(&session, "Which word?", "phone").await.unwrap();
    let end = until(&mut follower, &session, "the resumed turn's end", is_turn_end).await;
    assert!(matches!(&end.event, Event::TurnEnd { ok: true, .. }), "{end:?}");
    let asked: Vec<Value> = rig.model.turn_requests();
    let last = asked.last().unwrap();
    assert!(user_text(last).contains("Remember the word MANGO"), "resumed with its context: {}", user_text(last));
    rig.stop().await;
}
