//! Nothing typed is lost or applied twice (docs/PROTOCOL.md, "Receipts"): a frame the page sends
//! again after a reconnect — a `tool_call` it may have sent before the socket died, an `approve`,
//! a `cancel` — is answered again by the agent and never re-run. The real agent, real sessions.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::audit::audit_lines;
use crate::support::harness::*;

/// Audit lines of call `id`: one per run.
fn runs(agent: &TestAgent, id: &str) -> usize {
    audit_lines(agent).iter().filter(|line| line["id"] == id && line["tool"] == "run_command").count()
}

fn command(id: &str, command: &str) -> Value {
    json!({"type":"tool_call","id":id,"name":"run_command","args":{"command":command}})
}

#[tokio::test]
async fn a_finished_call_sent_again_on_a_new_session_gets_its_result_and_runs_once() {
    let agent = TestAgent::start(None).await;
    let mut first = agent.local_client().await;
    send(&mut first, command("o1", "echo ran >> ran.txt; cat ran.txt")).await;
    let result = recv_result(&mut first, "o1").await;
    assert_eq!(result["ok"], true, "{result}");
    drop(first);
    // The page did not see the result (its socket died first) and sends the call again.
    let mut next = agent.local_client().await;
    send(&mut next, command("o1", "echo ran >> ran.txt; cat ran.txt")).await;
    let again = recv_result(&mut next, "o1").await;
    assert_eq!(again, result);
    assert_eq!(std::fs::read_to_string(agent.workspace.path().join("ran.txt")).unwrap(), "ran\n");
    eventually("the call's audit line", || runs(&agent, "o1") == 1).await;
    assert_eq!(runs(&agent, "o1"), 1);
}

#[tokio::test]
async fn a_running_call_sent_again_attaches_to_it() {
    let agent = TestAgent::start(None).await;
    let mut first = agent.local_client().await;
    let call = command("o2", "echo begun; echo ran >> ran.txt; sleep 2; echo ended");
    send(&mut first, call.clone()).await;
    assert_eq!(recv_type(&mut first, "tool_progress").await["chunk"], "begun\n");
    drop(first);
    let mut next = agent.local_client().await;
    send(&mut next, call).await;
    // What it printed so far, then the rest, then its one result.
    let replay = recv_type(&mut next, "tool_progress").await;
    assert_eq!(replay["id"], "o2");
    assert!(replay["chunk"].as_str().unwrap().starts_with("begun\n"), "{replay}");
    let result = recv_result(&mut next, "o2").await;
    assert_eq!(result["ok"], true, "{result}");
    assert!(result["result"]["output"].as_str().unwrap().contains("ended"), "{result}");
    assert_eq!(std::fs::read_to_string(agent.workspace.path().join("ran.txt")).unwrap(), "ran\n");
    eventually("the call's audit line", || runs(&agent, "o2") == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runs(&agent, "o2"), 1);
}

#[tokio::test]
async fn a_call_whose_result_is_no_longer_kept_is_refused_not_rerun() {
    let agent = TestAgent::start(None).await;
    let mut client = agent.local_client().await;
    send(&mut client, command("old", "echo ran >> ran.txt")).await;
    recv_result(&mut client, "old").await;
    // Enough calls after it that its frames are no longer kept; its id still is.
    for n in 0..voxa::agent::calls::KEPT_CALLS {
        send(&mut client, command(&format!("f{n}"), "true")).await;
        recv_result(&mut client, &format!("f{n}")).await;
    }
    send(&mut client, command("old", "echo ran >> ran.txt")).await;
    let refused = recv_result(&mut client, "old").await;
    assert_eq!(refused["error"]["code"], "duplicate-id", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("already ran"), "{refused}");
    assert_eq!(std::fs::read_to_string(agent.workspace.path().join("ran.txt")).unwrap(), "ran\n");
}

/// An agent where every `run_command` asks the phone.
async fn asking_agent() -> TestAgent {
    TestAgent::start_with(None, |options| {
        options.config.policy.ask = vec!["run_command".into()];
        options.config.approvals.timeout_secs = 600;
    })
    .await
}

#[tokio::test]
async fn an_approve_sent_again_gets_the_same_receipt_and_decides_nothing_more() {
    let agent = asking_agent().await;
    let mut phone = agent.local_client().await;
    send(&mut phone, json!({"type":"follow"})).await;
    send(&mut phone, command("a1", "echo ran >> ran.txt")).await;
    let approval = recv_type(&mut phone, "approval").await["approval"].as_str().unwrap().to_owned();
    let approve = json!({"type":"approve","approval":approval,"decision":"allow","receipt":"r-approve"});
    send(&mut phone, approve.clone()).await;
    let receipt = recv_type(&mut phone, "receipt").await;
    assert_eq!(receipt, json!({"type":"receipt","id":"r-approve","ok":true}));
    assert_eq!(recv_result(&mut phone, "a1").await["ok"], true);
    drop(phone);
    // Sent again from the outbox on a new session: the same receipt, no "not-found" error.
    let mut again = agent.local_client().await;
    send(&mut again, approve).await;
    let repeated = recv_json(&mut again).await;
    assert_eq!(repeated, receipt);
    // A new receipt id for the same approval is a second answer: it finds nothing to decide.
    send(&mut again, json!({"type":"approve","approval":approval,"decision":"deny","receipt":"r-late"})).await;
    let late = recv_type(&mut again, "receipt").await;
    assert_eq!((late["ok"].as_bool(), late["error"]["code"].as_str()), (Some(false), Some("not-found")), "{late}");
    assert_eq!(std::fs::read_to_string(agent.workspace.path().join("ran.txt")).unwrap(), "ran\n");
}

#[tokio::test]
async fn a_cancel_sent_again_gets_the_same_receipt() {
    let agent = TestAgent::start(None).await;
    let mut client = agent.local_client().await;
    send(&mut client, command("c1", "sleep 30")).await;
    eventually("the call runs", || {
        agent.agent.ctx.status.calls_in_flight.load(std::sync::atomic::Ordering::Relaxed) == 1
    })
    .await;
    let cancel = json!({"type":"cancel","id":"c1","receipt":"r-cancel"});
    send(&mut client, cancel.clone()).await;
    assert_eq!(recv_type(&mut client, "receipt").await, json!({"type":"receipt","id":"r-cancel","ok":true}));
    assert_eq!(recv_result(&mut client, "c1").await["error"]["code"], "cancelled");
    send(&mut client, cancel).await;
    assert_eq!(recv_json(&mut client).await, json!({"type":"receipt","id":"r-cancel","ok":true}));
    // A cancel of nothing says so.
    send(&mut client, json!({"type":"cancel","id":"none","receipt":"r-none"})).await;
    let none = recv_type(&mut client, "receipt").await;
    assert_eq!(none["error"]["code"], "not-found", "{none}");
}

// ---- the page's outbox, in Chromium at the phone's size ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_typed_offline_wait_are_sent_once_when_back_and_say_so() {
    use crate::support::scene::{Scene, TERMINAL};
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    browser.set_online(false).await;
    browser.wait_connection("reconnecting").await;
    browser.type_into("Command", "echo typed-on-the-train >> train.txt; cat train.txt").await;
    browser.press("Run").await;
    // It waits, and says so quietly next to the connection line.
    let queued = browser.wait_text("#outbox", "the queued command", |t| t.contains("queued")).await;
    assert!(queued.contains("run_command: echo typed-on-the-train"), "{queued}");
    assert!(!scene.workspace().join("train.txt").exists());
    // It survives a reload while offline (the tab's storage).
    browser.client.refresh().await.unwrap();
    browser.wait_text("#outbox", "the queued command after a reload", |t| t.contains("queued")).await;
    browser.set_online(true).await;
    browser.wait_connection("laptop online").await;
    browser.wait_text("#outbox", "the command applied", |t| t.contains("applied")).await;
    assert_eq!(std::fs::read_to_string(scene.workspace().join("train.txt")).unwrap(), "typed-on-the-train\n");
    // Another reconnect sends nothing again.
    browser.set_online(false).await;
    browser.wait_connection("reconnecting").await;
    browser.set_online(true).await;
    browser.wait_connection("laptop online").await;
    // A block already on the page may say "exit 0": wait for one more.
    let ended = browser.wait_text(TERMINAL, "the output so far", |_| true).await.matches("exit 0").count();
    browser.type_into("Command", "echo after").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the next command", |t| t.matches("exit 0").count() > ended).await;
    assert_eq!(std::fs::read_to_string(scene.workspace().join("train.txt")).unwrap(), "typed-on-the-train\n");
    // The audit: one run of the command typed offline, one of the next (its line is written as
    // the call ends, which may be a moment after the page shows its result).
    let audit = scene.home.path().join("voxa").join("audit");
    let runs = || {
        let mut runs = Vec::new();
        for entry in std::fs::read_dir(&audit).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            let lines = text.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok());
            runs.extend(lines.filter(|line| line["tool"] == "run_command"));
        }
        runs
    };
    eventually("the second command's audit line", || runs().len() >= 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let runs = runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_ne!(runs[0]["id"], runs[1]["id"], "{runs:?}");
    scene.close().await;
}

/// A view the person opens while offline says it could not load in the header, where it covers
/// nothing: a command typed meanwhile still goes into the outbox, the notice can be dismissed, and
/// the view loads by itself once the network is back. A view loaded ahead (the Agent tab's, as
/// the page comes online) that fails says nothing and is tried again when the network returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_that_cannot_load_offline_says_so_in_the_header_and_comes_when_back() {
    use crate::support::browser::Scheme;
    let scratch = tempfile::tempdir().unwrap();
    for (scheme, picture) in [(Scheme::Light, "web-notice.png"), (Scheme::Dark, "web-notice-dark.png")] {
        view_offline_then_back(scheme, &scratch, picture).await;
    }
}

async fn view_offline_then_back(scheme: crate::support::browser::Scheme, scratch: &tempfile::TempDir, picture: &str) {
    use crate::support::pictures::{pictures_dir, save_picture};
    use crate::support::scene::Scene;
    let Some(scene) = Scene::start_with(scheme).await else { return };
    let browser = &scene.browser;
    std::fs::write(scene.workspace().join("on-the-laptop.txt"), "x").unwrap();
    // The page's own requests (not the service worker's copies); the Agent view's module fails.
    browser.cdp("Network.enable", json!({})).await;
    browser.cdp("Network.setBypassServiceWorker", json!({"bypass": true})).await;
    browser.cdp("Network.setBlockedURLs", json!({"urls": ["*/js/agent/panel*"]})).await;
    scene.open_online().await;
    const IMPORT_AGENT: &str = "const done = arguments[arguments.length - 1]; \
        import('/js/agent/panel.js').then(() => done('loaded'), () => done('failed'));";
    assert_eq!(browser.client.execute_async(IMPORT_AGENT, vec![]).await.unwrap(), "failed");
    let notice_shown = "return !document.getElementById('notice').hidden;";
    assert_eq!(browser.script(notice_shown, vec![]).await, false, "a view loaded ahead failed aloud");
    let agent_built = "return document.getElementById('agent-sessions').children.length > 0;";
    assert_eq!(browser.script(agent_built, vec![]).await, false);

    browser.set_online(false).await;
    browser.wait_connection("reconnecting").await;
    browser.press("Files").await;
    let said = browser.wait_text("#notice", "the notice", |t| t.contains("could not be loaded")).await;
    assert!(said.contains("Dismiss"), "{said}");
    // In the header, under the connection line.
    let inside = browser
        .script(
            "const n = document.getElementById('notice').getBoundingClientRect(); \
             const bar = document.getElementById('bar').getBoundingClientRect(); \
             return n.height > 0 && n.top >= bar.top && n.bottom <= bar.bottom;",
            vec![],
        )
        .await;
    assert_eq!(inside, true, "the notice is in the header");
    // Nothing is covered: the command typed now waits in the outbox.
    browser.press("Terminal").await;
    browser.type_into("Command", "echo typed-under-a-notice >> notice.txt").await;
    browser.press("Run").await;
    browser.wait_text("#outbox", "the queued command", |t| t.contains("queued")).await;
    save_picture(browser, &pictures_dir(scratch.path()), picture).await;
    browser.press("Dismiss").await;
    assert_eq!(browser.script(notice_shown, vec![]).await, false, "dismissed");
    browser.press("Files").await;
    browser.wait_text("#notice", "the notice again", |t| t.contains("could not be loaded")).await;

    // Back: the notice goes, the Files view loads on the tab still shown, the Agent view is tried
    // again, and the command runs once.
    browser.cdp("Network.setBlockedURLs", json!({"urls": []})).await;
    browser.set_online(true).await;
    browser.wait_connection("laptop online").await;
    browser.wait_text("#files-list", "the folder", |t| t.contains("on-the-laptop.txt")).await;
    browser.wait_script("the Agent view", agent_built).await;
    assert_eq!(browser.script(notice_shown, vec![]).await, false, "the notice outlived the connection's return");
    browser.wait_text("#outbox", "the command applied", |t| t.contains("applied")).await;
    assert_eq!(std::fs::read_to_string(scene.workspace().join("notice.txt")).unwrap(), "typed-under-a-notice\n");
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_laptop_answers_at_once_is_never_listed_so_typing_does_not_move_the_page() {
    use crate::support::scene::{Scene, TERMINAL};
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    // Every line the list ever shows is counted, however briefly.
    browser
        .script(
            "window.voxaListed = 0; new MutationObserver((changes) => { for (const c of changes) \
             window.voxaListed += c.addedNodes.length; }).observe(document.getElementById('outbox'), { childList: true });",
            vec![],
        )
        .await;
    for n in 0..3 {
        browser.type_into("Command", &format!("echo quick-{n}")).await;
        browser.press("Run").await;
        browser.wait_text(TERMINAL, "the command's end", |t| t.matches("exit 0").count() == n + 1).await;
    }
    let listed = browser.script("return window.voxaListed;", vec![]).await;
    assert_eq!(listed, json!(0), "commands answered at once were listed");
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_whose_socket_died_under_it_is_sent_again_and_runs_once() {
    use crate::support::scene::{Scene, TERMINAL};
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    let proxy = BlackholeProxy::start(scene.relay.addr).await;
    let link = scene.link().replace(&scene.relay.addr.to_string(), &proxy.addr.to_string());
    browser.pair(&link).await;
    browser.wait_connection("laptop online").await;
    // The socket goes nowhere now, and the page does not know yet: the command goes into the void.
    proxy.blackhole_existing();
    browser.type_into("Command", "echo once >> once.txt; cat once.txt").await;
    browser.press("Run").await;
    browser.wait_text("#outbox", "the command sent", |t| t.contains("sent")).await;
    // The phone finds a network again: the page replaces the socket and sends the command again.
    browser.script("dispatchEvent(new Event('online'));", vec![]).await;
    let shown = browser.wait_text(TERMINAL, "the command's end", |t| t.contains("exit 0")).await;
    assert!(shown.contains("once"), "{shown}");
    browser.wait_text("#outbox", "the command applied", |t| t.contains("applied")).await;
    assert_eq!(std::fs::read_to_string(scene.workspace().join("once.txt")).unwrap(), "once\n");
    scene.close().await;
}
