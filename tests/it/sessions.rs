//! Coding-agent sessions against the real Claude Code CLI (pinned in tests/agents/, installed by
//! `npm ci`), only the model faked ([`crate::support::fake_model`]): approvals that let a write happen and
//! keep a command from running, a question answered, an interrupt, resuming with context, two
//! followers, and a flood that stays bounded.

use std::collections::HashMap;

use serde_json::json;
use voxa::config::{AgentCommand, Config};
use voxa::protocol::{DecidedBy, Decision, Risk};
use voxa::protocol::{Event, SessionState};
use voxa::sessions::StartRequest;

use crate::support::agents::{approval_id, is_approval, is_turn_end, streamed_text, until, whole_log, Rig, WAIT};
use crate::support::fake_model::{tool_results, user_text, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_approved_happens_and_a_command_denied_does_not() {
    let Some(rig) = Rig::new(Config::default()).await else { return };
    let target = rig.workspace.path().join("hello.txt");
    std::fs::write(&target, "old line\n").unwrap();
    rig.model.script([
        Reply::tool("Write", json!({"file_path": target.to_str().unwrap(), "content": "hello from the agent\n"})),
        Reply::text("I wrote hello.txt."),
    ]);
    let mut follower = rig.host.follow(&HashMap::new());
    let session = rig.start("Write a greeting to hello.txt").await;

    let asked = until(&mut follower, &session, "Write approval", is_approval("Write")).await;
    let Event::Approval { summary, risk, .. } = &asked.event else { unreachable!() };
    assert_eq!(summary, "write hello.txt");
    assert_eq!(*risk, Risk::Write);
    assert_eq!(rig.host.info(&session).unwrap().pending, 1);
    assert_eq!(rig.host.info(&session).unwrap().state, SessionState::Waiting);
    rig.answer(&approval_id(&asked), Decision::Allow, None, None);
    let end = until(&mut follower, &session, "turn end", is_turn_end).await;
    let Event::TurnEnd { ok, result, cost_usd, .. } = &end.event else { unreachable!() };
    assert!(*ok, "{end:?}");
    assert_eq!(result, "I wrote hello.txt.");
    assert!(cost_usd.is_some());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello from the agent\n");

    let log = whole_log(&rig.host, &session);
    let diff = log.iter().find_map(|e| match &e.event {
        Event::ToolUse { name, diff, .. } if name == "Write" => diff.clone(),
        _ => None,
    });
    let diff = diff.expect("the write's tool_use carries a diff");
    assert!(diff.contains("-old line\n") && diff.contains("+hello from the agent\n"), "{diff}");
    assert!(log.iter().any(|e| matches!(&e.event, Event::ToolResult { ok: true, .. })), "{log:#?}");
    assert!(log.iter().any(
        |e| matches!(&e.event, Event::ApprovalResolved { decision, by, .. } if *decision == Decision::Allow && *by == DecidedBy::Phone)
    ));
    assert!(matches!(&log[0].event, Event::State { state: SessionState::Starting }));
    assert!(
        matches!(&log[1].event, Event::User { text, by } if text == "Write a greeting to hello.txt" && by == "phone")
    );
    let streamed = streamed_text(&log);
    assert!(streamed.contains("I wrote hello.txt."), "partial text streamed: {streamed:?}");

    let denied = rig.workspace.path().join("denied.txt");
    rig.model.script([
        Reply::tool("Bash", json!({"command": format!("touch {}", denied.display()), "description": "Create a file"})),
        Reply::text("Understood, I did not run it."),
    ]);
    assert!(!rig.host.send(&session, "Now create denied.txt with touch", "phone").await.unwrap());
    let asked = until(&mut follower, &session, "Bash approval", is_approval("Bash")).await;
    let Event::Approval { risk, summary, .. } = &asked.event else { unreachable!() };
    assert_eq!(*risk, Risk::Exec);
    assert!(summary.starts_with("touch "), "{summary}");
    rig.answer(&approval_id(&asked), Decision::Deny, Some("not on this machine"), None);
    until(&mut follower, &session, "turn end", is_turn_end).await;
    until(&mut follower, &session, "idle", |e| matches!(e, Event::State { state: SessionState::Idle })).await;
    assert!(!denied.exists(), "a denied command ran");
    let last = rig.model.turn_requests().pop().unwrap();
    assert!(tool_results(&last).iter().any(|r| r.contains("not on this machine")), "{:?}", tool_results(&last));
    let info = rig.host.info(&session).unwrap();
    assert_eq!((info.turns, info.state, info.pending), (2, SessionState::Idle, 0));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_and_the_agent_reads_the_answer() {
    let Some(rig) = Rig::new(Config::default()).await else { return };
    let question = json!({"questions": [{
        "question": "Which colour should the button be?", "header": "Colour", "multiSelect": false,
        "options": [{"label": "Red", "description": "Warm"}, {"label": "Blue", "description": "Calm"}]
    }]});
    rig.model.script([Reply::tool("AskUserQuestion", question), Reply::text("Blue it is.")]);
    let mut follower = rig.host.follow(&HashMap::new());
    let session = rig.start("Style the button").await;
    let asked = until(&mut follower, &session, "question", is_approval("AskUserQuestion")).await;
    let Event::Approval { questions, .. } = &asked.event else { unreachable!() };
    assert_eq!(questions.as_ref().unwrap()[0]["options"][1]["label"], "Blue");
    rig.answer(
        &approval_id(&asked),
        Decision::Allow,
        None,
        Some(json!({"Which colour should the button be?": "Blue"})),
    );
    let end = until(&mut follower, &session, "turn end", is_turn_end).await;
    assert!(matches!(&end.event, Event::TurnEnd { ok: true, .. }), "{end:?}");
    let last = rig.model.turn_requests().pop().unwrap();
    let results = tool_results(&last);
    assert!(results.iter().any(|r| r.contains("Blue")), "the model never read the answer: {results:?}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_a_slow_turn_and_the_session_takes_the_next() {
    let Some(rig) = Rig::new(Config::default()).await else { return };
    rig.model.script([Reply::Stall("Let me think about this for a long".into())]);
    let mut follower = rig.host.follow(&HashMap::new());
    let session = rig.start("Think hard").await;
    until(&mut follower, &session, "streamed text", |e| matches!(e, Event::Text { partial: true, .. })).await;
    // A turn sent meanwhile waits behind the running one.
    rig.model.script([Reply::text("Back again.")]);
    assert!(rig.host.send(&session, "Then answer briefly", "phone").await.unwrap());
    rig.host.interrupt(&session).await.unwrap();
    let end = until(&mut follower, &session, "interrupted turn end", is_turn_end).await;
    assert!(matches!(&end.event, Event::TurnEnd { ok: false, interrupted: true, .. }), "{end:?}");
    let log = whole_log(&rig.host, &session);
    assert!(!log.iter().any(|e| matches!(&e.event, Event::Error { .. })), "an interrupt is no error: {log:#?}");
    let next = until(&mut follower, &session, "next turn end", is_turn_end).await;
    let Event::TurnEnd { ok, result, .. } = &next.event else { unreachable!() };
    assert!(*ok && result == "Back again.", "{next:?}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_resumes_with_its_context_and_a_reopened_log_replays_exactly() {
    let Some(rig) = Rig::new(Config::default()).await else { return };
    rig.model.script([Reply::text("Noted: PAPAYA.")]);
    let mut follower = rig.host.follow(&HashMap::new());
    let session = rig.start("Remember the word PAPAYA").await;
    until(&mut follower, &session, "turn end", is_turn_end).await;
    rig.host.stop(&session).await.unwrap();
    until(&mut follower, &session, "ended", |e| matches!(e, Event::State { state: SessionState::Ended })).await;
    assert_eq!(rig.host.info(&session).unwrap().state, SessionState::Ended);
    let before = whole_log(&rig.host, &session);

    // A second host on the same home: what a restarted agent sees.
    let reopened = rig.reopen();
    assert_eq!(whole_log(&reopened, &session), before);
    rig.model.script([Reply::text("The word was PAPAYA.")]);
    let mut follower = reopened.follow(&HashMap::from([(session.clone(), before.len() as u64)]));
    assert!(!reopened.send(&session, "Which word did I ask you to remember?", "phone").await.unwrap());
    let first = tokio::time::timeout(WAIT, follower.next()).await.unwrap().unwrap();
    assert_eq!(first.seq, before.len() as u64 + 1, "the follower starts right after its `after`");
    let end = until(&mut follower, &session, "resumed turn end", is_turn_end).await;
    assert!(matches!(&end.event, Event::TurnEnd { ok: true, .. }), "{end:?}");
    let last = rig.model.turn_requests().pop().unwrap();
    let context = user_text(&last);
    assert!(context.contains("Remember the word PAPAYA"), "the resumed agent lost its context: {context}");
    let after = whole_log(&reopened, &session);
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(reopened.info(&session).unwrap().turns, 2);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_followers_see_the_same_events_in_the_same_order() {
    let Some(rig) = Rig::new(Config::default()).await else { return };
    rig.model.script([Reply::text("Hello to you both.")]);
    let mut first = rig.host.follow(&HashMap::new());
    let session = rig.start("Say hello").await;
    let end = until(&mut first, &session, "turn end", is_turn_end).await;
    // The second follows only now and replays what it missed.
    let mut second = rig.host.follow(&HashMap::new());
    let mut seen = Vec::new();
    while seen.len() < end.seq as usize {
        seen.push(tokio::time::timeout(WAIT, second.next()).await.unwrap().unwrap());
    }
    assert_eq!(seen, whole_log(&rig.host, &session)[..end.seq as usize]);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_agent_takes_one_turn_per_process_and_a_flood_stays_bounded() {
    let mut config = Config::default();
    // 100,000 lines of output for one turn, then the turn's own words.
    let script = "yes 'a line of a flooding agent' | head -n 100000; echo \"asked: $0\"";
    config.agents.insert(
        "flood".into(),
        AgentCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into(), "{prompt}".into()],
            format: "text".into(),
        },
    );
    let Some(rig) = Rig::new(config).await else { return };
    let mut follower = rig.host.follow(&HashMap::new());
    let request =
        StartRequest { prompt: "go".into(), agent: Some("flood".into()), by: "cli".into(), ..Default::default() };
    let session = rig.host.start(request).await.unwrap().session;
    let end = until(&mut follower, &session, "turn end", is_turn_end).await;
    let Event::TurnEnd { ok, .. } = &end.event else { unreachable!() };
    assert!(*ok);
    let log = whole_log(&rig.host, &session);
    let text: usize = log
        .iter()
        .map(|e| match &e.event {
            Event::Text { text, .. } => text.matches("a line of a flooding agent").count(),
            _ => 0,
        })
        .sum();
    assert_eq!(text, 100_000, "every line is kept");
    // Gathered into events of a few KiB, not one per line.
    assert!(log.len() < 2_000, "{} events for 100k lines", log.len());
    assert!(log.iter().any(|e| matches!(&e.event, Event::Text { text, .. } if text.contains("asked: go"))));
    assert_eq!(rig.host.info(&session).unwrap().state, SessionState::Idle);
    // The next turn is another process.
    rig.host.send(&session, "again", "cli").await.unwrap();
    until(&mut follower, &session, "second turn end", is_turn_end).await;
    assert_eq!(rig.host.info(&session).unwrap().turns, 2);
    rig.stop().await;
}
