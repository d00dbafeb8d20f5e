use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;

fn request(tool: &str) -> Request {
    Request {
        source: ApprovalSource::Call("c1".into()),
        tool: tool.into(),
        input: json!({"command": "npm test"}),
        summary: "Run: npm test".into(),
        risk: Risk::Exec,
        diff: None,
        questions: None,
        offers_session: false,
    }
}

fn broker(timeout: Duration) -> Broker {
    Broker::new(BrokerOptions { timeout, ..Default::default() })
}

fn audit_lines(dir: &std::path::Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flat_map(|entry| {
            std::fs::read_to_string(entry.unwrap().path()).unwrap().lines().map(str::to_owned).collect::<Vec<_>>()
        })
        .map(|line| serde_json::from_str(&line).unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_approval_is_denied_at_its_expiry() {
    let broker = broker(Duration::from_secs(600));
    let (_, mut notices) = broker.follow();
    let pending = broker.request(request("run_command"));
    let id = pending.id().to_owned();
    let waiting = tokio::spawn(async move { pending.wait(&CancellationToken::new()).await });
    let Ok(AgentMessage::Approval(frame)) = notices.recv().await else { panic!("no approval notice") };
    assert_eq!(frame.approval, id);
    assert!(id.starts_with("a-") && id.len() == 18, "{id}");
    // Just before the expiry it still waits; the paused clock then jumps past it.
    tokio::time::sleep(Duration::from_secs(599)).await;
    assert_eq!(broker.open().len(), 1);
    let answer = waiting.await.unwrap();
    assert_eq!(answer.decision, Decision::Deny);
    assert_eq!(answer.by, DecidedBy::Timeout);
    assert_eq!(answer.message.as_deref(), Some(EXPIRED_MESSAGE));
    let Ok(AgentMessage::ApprovalResolved(resolved)) = notices.recv().await else { panic!("no resolved notice") };
    assert_eq!((resolved.approval.as_str(), resolved.by), (id.as_str(), DecidedBy::Timeout));
    assert!(broker.open().is_empty());
    assert_eq!(broker.decide(&id, Decision::Allow, None, None, DecidedBy::Phone), Err(DecideError::NotFound));
}

#[tokio::test(start_paused = true)]
async fn the_first_answer_wins_and_every_follower_is_told() {
    let broker = broker(Duration::from_secs(60));
    let (_, mut first) = broker.follow();
    let pending = broker.request(request("run_command"));
    let id = pending.id().to_owned();
    let (snapshot, mut second) = broker.follow();
    assert!(matches!(&snapshot[..], [AgentMessage::Approval(frame)] if frame.approval == id));
    broker.decide(&id, Decision::Allow, None, None, DecidedBy::Phone).unwrap();
    assert_eq!(broker.decide(&id, Decision::Deny, None, None, DecidedBy::Cli), Err(DecideError::NotFound));
    let answer = pending.wait(&CancellationToken::new()).await;
    assert_eq!((answer.decision, answer.by), (Decision::Allow, DecidedBy::Phone));
    assert!(matches!(first.recv().await, Ok(AgentMessage::Approval(_))));
    for notices in [&mut first, &mut second] {
        let Ok(AgentMessage::ApprovalResolved(resolved)) = notices.recv().await else { panic!("not resolved") };
        assert_eq!((resolved.decision, resolved.by), (Decision::Allow, DecidedBy::Phone));
        assert!(notices.try_recv().is_err(), "told twice");
    }
}

#[tokio::test(start_paused = true)]
async fn a_deny_carries_the_message_and_a_cancel_withdraws() {
    let broker = broker(Duration::from_secs(60));
    let pending = broker.request(request("run_command"));
    broker.decide(pending.id(), Decision::Deny, Some("not on main".into()), None, DecidedBy::Phone).unwrap();
    let answer = pending.wait(&CancellationToken::new()).await;
    assert_eq!(answer.denial_message(), "not on main");

    let cancel = CancellationToken::new();
    let pending = broker.request(request("run_command"));
    cancel.cancel();
    let answer = pending.wait(&cancel).await;
    assert_eq!((answer.decision, answer.by), (Decision::Deny, DecidedBy::Withdrawn));
    // Dropping a pending approval withdraws it too.
    drop(broker.request(request("write_file")));
    assert!(broker.open().is_empty());
}

#[tokio::test(start_paused = true)]
async fn allow_for_the_session_only_where_offered_and_never_by_voice_for_risky_actions() {
    let broker = broker(Duration::from_secs(60));
    let pending = broker.request(request("run_command"));
    let id = pending.id().to_owned();
    assert_eq!(
        broker.decide(&id, Decision::AllowSession, None, None, DecidedBy::Phone),
        Err(DecideError::SessionNotOffered)
    );
    let offered = broker.request(Request { offers_session: true, ..request("Bash") });
    let offered_id = offered.id().to_owned();
    assert_eq!(
        broker.decide(&offered_id, Decision::AllowSession, None, None, DecidedBy::Voice),
        Err(DecideError::NeedsExplicitAllow)
    );
    let edit = broker.request(Request { offers_session: true, risk: Risk::Write, ..request("Edit") });
    broker.decide(edit.id(), Decision::AllowSession, None, None, DecidedBy::Voice).unwrap();
    broker.decide(&offered_id, Decision::AllowSession, None, Some(json!({"q": "a"})), DecidedBy::Phone).unwrap();
    let answer = offered.wait(&CancellationToken::new()).await;
    assert_eq!((answer.decision, answer.answers), (Decision::AllowSession, Some(json!({"q": "a"}))));
    assert_eq!(broker.open().len(), 1, "the refused decisions left the first one open");
    drop(pending);
}

#[tokio::test(start_paused = true)]
async fn open_approvals_are_bounded() {
    let broker = broker(Duration::from_secs(60));
    let held: Vec<_> = (0..MAX_OPEN_APPROVALS).map(|_| broker.request(request("run_command"))).collect();
    let refused = broker.request(request("run_command")).wait(&CancellationToken::new()).await;
    assert_eq!(refused.decision, Decision::Deny);
    assert!(refused.denial_message().contains("already waiting"));
    assert_eq!(broker.open().len(), MAX_OPEN_APPROVALS);
    drop(held);
    assert!(broker.open().is_empty());
}

#[tokio::test(start_paused = true)]
async fn summaries_are_redacted_and_inputs_bounded() {
    let broker = broker(Duration::from_secs(60));
    let summary = "Run: TOKEN=0123456789abcdef0123456789abcdef deploy\nnow".into();
    let input = json!({"content": "x".repeat(MAX_INPUT_LEN + 1)});
    let pending = broker.request(Request { summary, input, ..request("run_command") });
    let frame = broker.get(pending.id()).unwrap();
    assert_eq!(frame.summary, "Run: TOKEN=… deploy now");
    assert!(frame.input["omitted"].as_str().unwrap().contains("too large"));
}

#[tokio::test(start_paused = true)]
async fn a_restart_ends_open_approvals_as_denied_and_says_so() {
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join("approvals.json");
    let audit_dir = home.path().join("audit");
    let options = BrokerOptions {
        timeout: Duration::from_secs(60),
        audit: Some(Audit::new(&audit_dir)),
        store: Some(store.clone()),
        grants: None,
    };
    let first = Broker::new(options.clone());
    let pending = first.request(request("run_command"));
    let id = pending.id().to_owned();
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&store).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let kept = std::fs::read_to_string(&store).unwrap();
    assert!(kept.contains(&id) && !kept.contains("npm test\"}"), "the input is not kept: {kept}");
    // The process dies with the approval open: nothing resolves it.
    std::mem::forget(pending);
    drop(first);

    let second = Broker::new(options);
    assert!(second.open().is_empty());
    assert!(!store.exists());
    let (snapshot, _) = second.follow();
    let [AgentMessage::ApprovalResolved(resolved)] = &snapshot[..] else { panic!("{snapshot:?}") };
    assert_eq!(
        (resolved.approval.as_str(), resolved.decision, resolved.by),
        (id.as_str(), Decision::Deny, DecidedBy::Restart)
    );
    assert_eq!(resolved.message.as_deref(), Some(RESTART_MESSAGE));
    let lines = audit_lines(&audit_dir);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!((lines[0]["decision"].as_str(), lines[0]["source"].as_str()), (Some("requested"), Some("call:c1")));
    assert_eq!((lines[1]["decision"].as_str(), lines[1]["by"].as_str()), (Some("deny"), Some("restart")));
    assert_eq!(lines[1]["summary"], "Run: npm test");
    assert!(lines.iter().all(|line| line.get("input").is_none() && line["time"].is_string()));
}

#[tokio::test(start_paused = true)]
async fn a_damaged_store_is_set_aside_not_fatal() {
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join("approvals.json");
    std::fs::write(&store, b"{not json").unwrap();
    let broker = Broker::new(BrokerOptions { store: Some(store.clone()), ..Default::default() });
    assert!(broker.follow().0.is_empty());
    assert!(!store.exists());
}

#[tokio::test(start_paused = true)]
async fn a_follower_that_falls_behind_gets_the_open_list_again() {
    let broker = broker(Duration::from_secs(60));
    let (out, mut received) = mpsc::channel::<AgentMessage>(1);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(forward(broker.clone(), out, cancel.clone(), Some));
    // The forwarder follows before anything opens, so all that follows reaches it as notices.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let keep = broker.request(request("run_command"));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    for _ in 0..(NOTICE_QUEUE + 10) {
        drop(broker.request(request("write_file")));
    }
    let mut seen_keep = 0;
    while let Ok(Some(notice)) = tokio::time::timeout(Duration::from_secs(1), received.recv()).await {
        if matches!(&notice, AgentMessage::Approval(frame) if frame.approval == keep.id()) {
            seen_keep += 1;
        }
    }
    // Once as it opened, once more in the open list sent after the client fell behind.
    assert!(seen_keep >= 2, "the open approval was not sent again: seen {seen_keep} times");
    cancel.cancel();
    task.await.unwrap();
}

#[test]
fn voice_prompts_name_the_id_and_the_care_a_risk_needs() {
    let frame = ApprovalFrame {
        approval: "a-1".into(),
        source: ApprovalSource::Call("c1".into()),
        tool: "run_command".into(),
        input: json!({}),
        summary: "Run: git push".into(),
        risk: Risk::Network,
        diff: None,
        questions: None,
        allow_session: false,
        grant_allows: None,
        expires_at: 0,
    };
    let prompt = voice_prompt(&frame);
    assert!(
        prompt.contains("Run: git push") && prompt.contains("\"a-1\"") && prompt.contains("explicit yes"),
        "{prompt}"
    );
    let plain = voice_prompt(&ApprovalFrame { risk: Risk::Write, ..frame });
    assert!(!plain.contains("explicit"), "{plain}");
}

#[tokio::test(start_paused = true)]
async fn what_the_stop_withdraws_is_ended_by_the_restart_and_kept_for_the_next_start() {
    let home = tempfile::tempdir().unwrap();
    let options = BrokerOptions { store: Some(home.path().join("approvals.json")), ..Default::default() };
    let first = Broker::new(options.clone());
    let shutdown = CancellationToken::new();
    first.stop_with(shutdown.clone());
    let pending = first.request(request("run_command"));
    let id = pending.id().to_owned();
    shutdown.cancel();
    let answer = pending.wait(&shutdown).await;
    assert_eq!((answer.decision, answer.by), (Decision::Deny, DecidedBy::Restart));
    let second = Broker::new(options);
    let (snapshot, _) = second.follow();
    assert!(
        matches!(&snapshot[..], [AgentMessage::ApprovalResolved(r)] if r.approval == id && r.by == DecidedBy::Restart)
    );
}
