//! Grants against the real Claude Code CLI, only the model faked: "Allow for session" on a Write
//! makes a grant that answers the session's next Write itself (Claude is never told to remember a
//! rule), another session still asks, and a revoked grant asks again.

use std::collections::HashMap;

use serde_json::json;
use voxa::config::Config;
use voxa::protocol::{DecidedBy, Decision, Event, GrantScope};
use voxa::sessions::StartRequest;

use crate::support::agents::{approval_id, is_approval, is_turn_end, until, whole_log, Rig};
use crate::support::fake_model::Reply;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_for_session_is_a_grant_that_answers_later_prompts_until_it_is_revoked() {
    let Some(rig) = Rig::for_agent(Config::default(), "claude").await else { return };
    let file = |name: &str| rig.workspace.path().join(name).to_str().unwrap().to_owned();
    rig.model
        .script([Reply::tool("Write", json!({"file_path": file("a.txt"), "content": "a\n"})), Reply::text("Wrote a.")]);
    let mut follower = rig.host.follow(&HashMap::new());
    let request = StartRequest { prompt: "Write a.txt".into(), by: "phone".into(), ..Default::default() };
    let session = rig.host.start(request).await.unwrap().session;
    let asked = until(&mut follower, &session, "the first Write", is_approval("Write")).await;
    let frame = rig.host.approvals().get(&approval_id(&asked)).unwrap();
    assert!(frame.allow_session, "{frame:?}");
    assert_eq!(
        frame.grant_allows.as_deref(),
        Some("every Write in this session, of any file"),
        "the card says what it lets through"
    );
    rig.answer(&approval_id(&asked), Decision::AllowSession, None, None);
    until(&mut follower, &session, "the first turn's end", is_turn_end).await;
    let grants = rig.host.approvals().grants();
    assert_eq!(grants.len(), 1, "{grants:?}");
    let grant = grants[0].clone();
    assert_eq!(
        (grant.session.as_str(), grant.tool.as_str(), grant.scope),
        (session.as_str(), "Write", GrantScope::Tool)
    );

    rig.model
        .script([Reply::tool("Write", json!({"file_path": file("b.txt"), "content": "b\n"})), Reply::text("Wrote b.")]);
    rig.host.send(&session, "Write b.txt", "phone").await.unwrap();
    let end = until(&mut follower, &session, "the second turn's end", is_turn_end).await;
    assert!(matches!(end.event, Event::TurnEnd { ok: true, .. }), "{end:?}");
    assert_eq!(std::fs::read_to_string(file("b.txt")).unwrap(), "b\n");
    let log = whole_log(&rig.host, &session);
    let by_grant = log
        .iter()
        .filter(|e| matches!(&e.event, Event::ApprovalResolved { decision: Decision::Allow, by: DecidedBy::Grant, .. }))
        .count();
    assert_eq!(by_grant, 1, "the grant answered the second Write, and the record says so: {log:#?}");
    assert!(rig.host.approvals().open().is_empty());

    // Revoked, the same Write asks again.
    assert!(rig.host.approvals().revoke(&grant.grant));
    assert!(!rig.host.approvals().revoke(&grant.grant), "a grant ends once");
    assert!(rig.host.approvals().grants().is_empty());
    rig.model.script([
        Reply::tool("Write", json!({"file_path": file("c.txt"), "content": "c\n"})),
        Reply::text("Did not write c."),
    ]);
    rig.host.send(&session, "Write c.txt", "phone").await.unwrap();
    let again = until(&mut follower, &session, "the Write asked again", is_approval("Write")).await;
    rig.answer(&approval_id(&again), Decision::Deny, Some("not now"), None);
    until(&mut follower, &session, "the third turn's end", is_turn_end).await;
    assert!(!std::path::Path::new(&file("c.txt")).exists(), "written after the grant was revoked");
    rig.stop().await;
}
