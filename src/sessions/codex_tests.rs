//! The Codex adapter line by line, in the app-server's own words (0.171).

use serde_json::{json, Value};

use super::*;
use crate::protocol::DecidedBy;

fn codex() -> Codex {
    Codex::new("codex".into(), "s-1".into(), "/work".into())
}

fn feed(adapter: &mut Codex, value: Value) -> Vec<Output> {
    adapter.on_line(value.to_string().as_bytes())
}

fn parsed(lines: &[String]) -> Vec<Value> {
    lines.iter().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// A started thread and a running turn `t1`.
fn running() -> Codex {
    let mut adapter = codex();
    adapter.hello(None);
    feed(&mut adapter, json!({"id": 2, "result": {"thread": {"id": "th-1"}}}));
    adapter.turn("go");
    feed(&mut adapter, json!({"id": 3, "result": {"turn": {"id": "t1", "status": "inProgress"}}}));
    adapter
}

#[test]
fn the_handshake_starts_or_resumes_a_thread_and_turns_wait_for_it() {
    let mut adapter = codex();
    assert_eq!(adapter.launch(None, None).args, ["app-server"]);
    let hello = parsed(&adapter.hello(None));
    assert_eq!(hello[0]["method"], "initialize");
    assert_eq!(hello[1], json!({"method": "initialized"}));
    assert_eq!(hello[2]["method"], "thread/start");
    assert_eq!(hello[2]["params"]["approvalPolicy"], "untrusted");
    assert_eq!(hello[2]["params"]["cwd"], "/work");
    assert!(!adapter.ready());
    let started = feed(&mut adapter, json!({"id": hello[2]["id"], "result": {"thread": {"id": "th-1", "new": 1}}}));
    assert_eq!(started, [Output::ResumeId("th-1".into())]);
    assert!(adapter.ready());
    let turn = parsed(&adapter.turn("fix it"));
    assert_eq!(turn[0]["method"], "turn/start");
    assert_eq!(turn[0]["params"], json!({"threadId": "th-1", "input": [{"type": "text", "text": "fix it"}]}));

    let mut resumed = codex();
    let hello = parsed(&resumed.hello(Some("th-1")));
    assert_eq!(
        (hello[2]["method"].as_str(), hello[2]["params"]["threadId"].as_str()),
        (Some("thread/resume"), Some("th-1"))
    );
    // An unknown thread: said, and a new one started.
    let out =
        feed(&mut resumed, json!({"id": hello[2]["id"], "error": {"code": -32600, "message": "no rollout found"}}));
    assert!(matches!(&out[0], Output::Event(Event::Error { message, .. }) if message.contains("no rollout found")));
    let Output::Write(lines) = &out[1] else { panic!("{out:?}") };
    assert_eq!(parsed(lines)[0]["method"], "thread/start");
}

#[test]
fn a_failed_start_fails_the_session() {
    let mut adapter = codex();
    let hello = parsed(&adapter.hello(None));
    let out = feed(&mut adapter, json!({"id": hello[0]["id"], "error": {"code": 1, "message": "bad config"}}));
    assert!(matches!(&out[0], Output::Event(Event::Error { code, .. }) if code == "unavailable"), "{out:?}");
    assert_eq!(out[1], Output::Fail);
}

#[test]
fn text_tools_and_the_turns_end_become_events() {
    let mut adapter = running();
    let delta = json!({"method": "item/agentMessage/delta", "params": {"threadId": "th-1", "turnId": "t1", "itemId": "m", "delta": "Hel"}});
    assert_eq!(feed(&mut adapter, delta), [Output::Event(Event::Text { text: "Hel".into(), partial: true })]);
    let command = json!({"type": "commandExecution", "id": "call_1", "command": "/bin/bash -lc 'npm test'",
        "cwd": "/work", "status": "inProgress", "commandActions": [{"type": "unknown", "command": "npm test"}]});
    let out = feed(&mut adapter, json!({"method": "item/started", "params": {"item": command}}));
    let [Output::Event(Event::ToolUse { tool_use_id, name, summary, .. })] = out.as_slice() else { panic!("{out:?}") };
    assert_eq!((tool_use_id.as_str(), name.as_str(), summary.as_str()), ("call_1", "Bash", "npm test (in /work)"));
    let mut done = command.clone();
    done["status"] = json!("completed");
    done["exitCode"] = json!(1);
    done["aggregatedOutput"] = json!("1 failing");
    let out = feed(&mut adapter, json!({"method": "item/completed", "params": {"item": done}}));
    assert_eq!(
        out,
        [Output::Event(Event::ToolResult { tool_use_id: "call_1".into(), ok: false, output: "1 failing".into() })]
    );
    let change = json!({"type": "fileChange", "id": "call_2", "status": "inProgress", "changes": [
        {"path": "/work/new.txt", "kind": {"type": "add"}, "diff": "hi\n"},
        {"path": "/work/a.rs", "kind": {"type": "update", "move_path": null}, "diff": "@@ -1 +1 @@\n-a\n+b\n"}]});
    let out = feed(&mut adapter, json!({"method": "item/started", "params": {"item": change}}));
    let [Output::Event(Event::ToolUse { name, summary, diff: Some(diff), input, .. })] = out.as_slice() else {
        panic!("{out:?}")
    };
    assert_eq!((name.as_str(), summary.as_str()), ("Edit", "edit new.txt, a.rs"));
    assert!(diff.contains("+++ b//work/new.txt") && diff.contains("+hi\n"), "{diff}");
    assert!(diff.contains("--- a//work/a.rs\n+++ b//work/a.rs\n@@ -1 +1 @@\n-a\n+b\n"), "{diff}");
    assert_eq!(input["changes"][1], json!({"path": "/work/a.rs", "kind": "update"}));
    let message = json!({"type": "agentMessage", "id": "m", "text": "Hello"});
    assert_eq!(
        feed(&mut adapter, json!({"method": "item/completed", "params": {"item": message}})),
        [Output::Event(Event::Text { text: "Hello".into(), partial: false })]
    );
    let end = feed(
        &mut adapter,
        json!({"method": "turn/completed", "params": {"threadId": "th-1", "turn": {"id": "t1", "status": "completed", "durationMs": 142, "items": []}}}),
    );
    assert_eq!(
        end,
        [
            Output::Event(Event::TurnEnd {
                ok: true,
                result: "Hello".into(),
                cost_usd: None,
                duration_ms: 142,
                interrupted: false
            }),
            Output::TurnEnded
        ]
    );
    assert!(feed(&mut adapter, json!({"method": "thread/tokenUsage/updated", "params": {}})).is_empty());
    assert!(adapter.on_line(b"WARNING: not json").is_empty());
}

#[test]
fn approvals_are_asked_and_answered_in_the_servers_words() {
    let mut adapter = running();
    let change = json!({"type": "fileChange", "id": "call_2", "status": "inProgress",
        "changes": [{"path": "/etc/hosts", "kind": {"type": "update"}, "diff": "@@ -1 +1 @@\n-a\n+b\n"}]});
    feed(&mut adapter, json!({"method": "item/started", "params": {"item": change}}));
    let asked = feed(
        &mut adapter,
        json!({"method": "item/fileChange/requestApproval", "id": 7,
        "params": {"threadId": "th-1", "turnId": "t1", "itemId": "call_2", "startedAtMs": 1, "reason": null}}),
    );
    let [Output::Ask { ask, request }] = asked.as_slice() else { panic!("{asked:?}") };
    assert_eq!((request.tool.as_str(), request.risk, ask.id.as_str()), ("Edit", Risk::Outside, "7"));
    assert!(request.diff.as_ref().unwrap().contains("+b\n"));
    let allow = Answer { decision: Decision::AllowSession, message: None, answers: None, by: DecidedBy::Phone };
    assert_eq!(parsed(&adapter.answer(ask, &allow))[0], json!({"id": 7, "result": {"decision": "accept"}}));

    let asked = feed(
        &mut adapter,
        json!({"method": "item/commandExecution/requestApproval", "id": 8,
        "params": {"threadId": "th-1", "turnId": "t1", "itemId": "call_3", "startedAtMs": 1,
                   "command": "/bin/bash -lc 'curl https://example.com'", "cwd": "/work",
                   "commandActions": [{"type": "unknown", "command": "curl https://example.com"}]}}),
    );
    let [Output::Ask { ask, request }] = asked.as_slice() else { panic!("{asked:?}") };
    assert_eq!((request.risk, request.summary.as_str()), (Risk::Network, "curl https://example.com (in /work)"));
    let deny = Answer { decision: Decision::Deny, message: Some("no".into()), answers: None, by: DecidedBy::Cli };
    assert_eq!(parsed(&adapter.answer(ask, &deny))[0], json!({"id": 8, "result": {"decision": "decline"}}));
    assert_eq!(
        feed(&mut adapter, json!({"method": "serverRequest/resolved", "params": {"threadId": "th-1", "requestId": 8}})),
        [Output::Withdrawn("8".into())]
    );
    // What voxa does not handle is refused, so Codex never waits.
    let out = feed(&mut adapter, json!({"method": "item/tool/requestUserInput", "id": "x", "params": {}}));
    let [Output::Write(lines)] = out.as_slice() else { panic!("{out:?}") };
    assert_eq!(parsed(lines)[0]["id"], "x");
    assert_eq!(parsed(lines)[0]["error"]["code"], -32601);
}

#[test]
fn an_interrupt_names_the_turn_even_before_codex_did() {
    let mut adapter = running();
    let interrupt = parsed(&adapter.interrupt());
    assert_eq!(interrupt[0]["method"], "turn/interrupt");
    assert_eq!(interrupt[0]["params"], json!({"threadId": "th-1", "turnId": "t1"}));

    let mut early = codex();
    early.hello(None);
    feed(&mut early, json!({"id": 2, "result": {"thread": {"id": "th-1"}}}));
    early.turn("go");
    assert!(early.interrupt().is_empty(), "no turn id yet");
    let out = feed(&mut early, json!({"method": "turn/started", "params": {"turn": {"id": "t9"}}}));
    let [Output::Write(lines)] = out.as_slice() else { panic!("{out:?}") };
    assert_eq!(parsed(lines)[0]["params"]["turnId"], "t9");
    let end = feed(
        &mut early,
        json!({"method": "turn/completed", "params": {"turn": {"id": "t9", "status": "interrupted"}}}),
    );
    assert!(
        matches!(&end[0], Output::Event(Event::TurnEnd { ok: false, result, .. }) if result == "interrupted"),
        "{end:?}"
    );
}
