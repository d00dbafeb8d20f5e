//! Coding-agent sessions against the real Codex CLI (`codex app-server`, pinned in tests/agents/),
//! only the model faked: the fake model speaks the Responses API and Codex reaches it through a
//! model provider in `CODEX_HOME/config.toml`. A command approved runs and one denied does not, an
//! edit carries its diff, an interrupt ends a slow turn, and a stopped session resumes its thread.

use std::collections::HashMap;

use serde_json::json;
use voxa::config::Config;
use voxa::protocol::{Decision, Risk};
use voxa::protocol::{Event, SessionState};
use voxa::sessions::StartRequest;

use crate::support::agents::{approval_id, is_approval, is_turn_end, streamed_text, until, whole_log, Rig};
use crate::support::fake_model::{tool_results, user_text, Reply};

/// Codex's shell tool as 0.171 offers it to the model.
fn shell(command: &str) -> Reply {
    Reply::tool("exec_command", json!({ "cmd": command }))
}

async fn start(rig: &Rig, prompt: &str) -> String {
    let request =
        StartRequest { prompt: prompt.into(), agent: Some("codex".into()), by: "phone".into(), ..Default::default() };
    let info = rig.host.start(request).await.unwrap();
    assert_eq!(info.agent, "codex");
    info.session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_command_approved_runs_one_denied_does_not_and_an_edit_shows_its_diff() {
    let Some(rig) = Rig::for_agent(Config::default(), "codex").await else { return };
    let made = rig.workspace.path().join("made.txt");
    rig.model.script([shell(&format!("touch {}", made.display())), Reply::text("I made the file.")]);
    let mut follower = rig.host.follow(&HashMap::new());
    let session = start(&rig, "Make a file").await;

    let asked = until(&mut follower, &session, "command approval", is_approval("Bash")).await;
    let Event::Approval { summary, risk, .. } = &asked.event else { unreachable!() };
    assert!(summary.starts_with("touch ") && summary.contains("made.txt"), "{summary}");
    assert_eq!(*risk, Risk::Exec);
    assert_eq!(rig.host.info(&session).unwrap().state, SessionState::Waiting);
    assert!(!made.exists(), "the command ran before it was approved");
    rig.answer(&approval_id(&asked), Decision::Allow, None, None);
    let end = until(&mut follower, &session, "turn end", is_turn_end).await;
    let Event::TurnEnd { ok, result, .. } = &end.event else { unreachable!() };
    assert!(*ok && result == "I made the file.", "{end:?}");
    assert!(made.exists(), "an approved command did not run: {:#?}", whole_log(&rig.host, &session));

    let denied = rig.workspace.path().join("denied.txt");
    rig.model.script([shell(&format!("touch {}", denied.display())), Reply::text("I left it.")]);
    rig.host.send(&session, "Now make denied.txt", "phone").await.unwrap();
    let asked = until(&mut follower, &session, "second approval", is_approval("Bash")).await;
    rig.answer(&approval_id(&asked), Decision::Deny, Some("not here"), None);
    until(&mut follower, &session, "turn end", is_turn_end).await;
    assert!(!denied.exists(), "a denied command ran");
    let last = rig.model.turn_requests().pop().unwrap();
    assert!(!tool_results(&last).is_empty(), "the model heard nothing of the declined command");

    // An edit, as the model writes it: a patch through the shell tool, which Codex applies itself.
    let patch =
        "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: notes.txt\n+written by codex\n*** End Patch\nEOF\n";
    rig.model.script([shell(patch), Reply::text("Notes written.")]);
    rig.host.send(&session, "Write notes.txt", "phone").await.unwrap();
    let asked = until(&mut follower, &session, "edit approval", is_approval("Edit")).await;
    let Event::Approval { summary, risk, .. } = &asked.event else { unreachable!() };
    assert_eq!((summary.as_str(), *risk), ("edit notes.txt", Risk::Write));
    rig.answer(&approval_id(&asked), Decision::Allow, None, None);
    let end = until(&mut follower, &session, "turn end", is_turn_end).await;
    assert!(matches!(&end.event, Event::TurnEnd { ok: true, .. }), "{end:?}");
    assert_eq!(std::fs::read_to_string(rig.workspace.path().join("notes.txt")).unwrap(), "written by codex\n");

    let log = whole_log(&rig.host, &session);
    let diff = log.iter().find_map(|e| match &e.event {
        Event::ToolUse { name, diff, .. } if name == "Edit" => diff.clone(),
        _ => None,
    });
    assert!(diff.expect("the edit's tool_use carries a diff").contains("+written by codex\n"));
    let streamed = streamed_text(&log);
    assert!(streamed.contains("I made the file."), "text streamed: {streamed:?}");
    assert!(log.iter().any(|e| matches!(&e.event, Event::ToolResult { ok: true, .. })), "{log:#?}");
    assert!(log.iter().any(|e| matches!(&e.event, Event::ToolResult { ok: false, .. })), "{log:#?}");
    let info = rig.host.info(&session).unwrap();
    assert_eq!((info.turns, info.pending), (3, 0));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_turn_is_interrupted_and_a_stopped_session_resumes_its_thread() {
    let Some(rig) = Rig::for_agent(Config::default(), "codex").await else { return };
    rig.model.script([Reply::Stall("Let me think about this for a long".into())]);
    let mut follower = rig.host.follow(&HashMap::new());
    let session = start(&rig, "Remember the word PAPAYA, then think hard").await;
    until(&mut follower, &session, "streamed text", |e| matches!(e, Event::Text { partial: true, .. })).await;
    rig.model.script([Reply::text("Back again.")]);
    assert!(rig.host.send(&session, "Then answer briefly", "phone").await.unwrap(), "queued behind the running turn");
    rig.host.interrupt(&session).await.unwrap();
    let end = until(&mut follower, &session, "interrupted turn end", is_turn_end).await;
    assert!(matches!(&end.event, Event::TurnEnd { ok: false, .. }), "{end:?}");
    let next = until(&mut follower, &session, "next turn end", is_turn_end).await;
    assert!(matches!(&next.event, Event::TurnEnd { ok: true, result, .. } if result == "Back again."), "{next:?}");

    rig.host.stop(&session).await.unwrap();
    until(&mut follower, &session, "ended", |e| matches!(e, Event::State { state: SessionState::Ended })).await;
    rig.model.script([Reply::text("The word was PAPAYA.")]);
    rig.host.send(&session, "Which word was it?", "phone").await.unwrap();
    let end = until(&mut follower, &session, "resumed turn end", is_turn_end).await;
    assert!(matches!(&end.event, Event::TurnEnd { ok: true, .. }), "{end:?}");
    let context = user_text(&rig.model.turn_requests().pop().unwrap());
    assert!(context.contains("Remember the word PAPAYA"), "the resumed thread lost its context: {context}");
    assert!(!whole_log(&rig.host, &session).iter().any(|e| matches!(&e.event, Event::Error { .. })));
    rig.stop().await;
}
