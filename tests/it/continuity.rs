//! Work survives the phone: a tool call belongs to the pairing, not to the socket that asked for
//! it. A reload, a second device, a relay restart: the real relay, the real agent and a real
//! Chromium at the phone's viewport (docs/PROTOCOL.md, "Calls outlive the connection").

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::support::harness::*;
use crate::support::scene::{Scene, TERMINAL};

/// Waits until the agent runs exactly `n` calls.
async fn calls_running(scene: &Scene, n: usize) {
    let status = scene.agent.as_ref().expect("the agent runs").ctx.status.clone();
    eventually("the calls in flight", || status.calls_in_flight.load(Ordering::Relaxed) == n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_mid_command_leaves_it_running_and_its_output_is_shown_after() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    let command = "sleep 8; echo finished > survived; cat survived";
    browser.type_into("Command", command).await;
    browser.press("Run").await;
    calls_running(&scene, 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    browser.client.refresh().await.unwrap();
    browser.wait_connection("online").await;
    // The new page is told of the command and shows its end when it comes.
    let shown = browser.wait_text(TERMINAL, "the surviving command's end", |t| t.contains("exit 0")).await;
    assert!(shown.contains(&format!("$ {command}\nfinished")), "{shown}");
    let written = std::fs::read_to_string(scene.workspace().join("survived")).unwrap();
    assert_eq!(written, "finished\n");
    // Once seen, a finished call is not shown again by the next reload.
    browser.client.refresh().await.unwrap();
    browser.wait_connection("online").await;
    browser.type_into("Command", "echo after-the-second-reload").await;
    browser.press("Run").await;
    let after = browser.wait_text(TERMINAL, "the next command", |t| t.contains("exit 0")).await;
    assert!(!after.contains("sleep 8"), "a call already seen was shown again: {after}");
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pages_on_one_link_both_stay_online_and_both_see_a_command() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    let first = browser.client.window().await.unwrap();
    let second = browser.client.new_window(true).await.unwrap().handle;
    browser.client.switch_to_window(second.clone()).await.unwrap();
    // The same browser knows the laptop now: its link asks nothing.
    browser.open(&scene.link()).await;
    browser.wait_connection("online").await;
    browser.type_into("Command", "echo begun; sleep 2; echo from-the-second-page").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command's end", |t| t.contains("exit 0")).await;

    browser.client.switch_to_window(first).await.unwrap();
    browser.wait_connection("online").await;
    let shown = browser.wait_text(TERMINAL, "the other page's command", |t| t.contains("exit 0")).await;
    assert!(shown.contains("$ echo begun; sleep 2; echo from-the-second-page\nbegun\nfrom-the-second-page"), "{shown}");
    // Both pages are connected, and the Status panel says so.
    browser.press("Status").await;
    let connected =
        browser.wait_text("#connected", "both pages listed", |t| t.matches("phone or browser").count() == 2).await;
    assert!(connected.lines().all(|line| line.contains("since")), "{connected}");
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_restart_mid_command_loses_nothing() {
    let Some(mut scene) = Scene::start().await else { return };
    scene.open_online().await;
    let command = "echo before; sleep 3; echo after-the-restart";
    scene.browser.type_into("Command", command).await;
    scene.browser.press("Run").await;
    scene.browser.wait_text(TERMINAL, "the first line", |t| t.contains("before\n")).await;
    let addr = scene.relay.addr;
    let stand_in = TestRelay::start().await;
    std::mem::replace(&mut scene.relay, stand_in).kill().await;
    // The same port again, as a restarted relay on the same address.
    let restarted = TestRelay::start_with(TcpListener::bind(addr).await.unwrap(), Default::default()).await;
    std::mem::replace(&mut scene.relay, restarted).kill().await;
    scene.browser.wait_connection("online").await;
    let shown = scene.browser.wait_text(TERMINAL, "the command's end", |t| t.contains("exit 0")).await;
    assert!(shown.contains(&format!("$ {command}\nbefore\nafter-the-restart")), "{shown}");
    scene.close().await;
}

/// Starts `command` on `socket` as call `id`.
async fn start_command(socket: &mut voxa::net::dial::ClientSocket, id: &str, command: &str) {
    send(socket, json!({"type":"tool_call","id": id,"name":"run_command","args":{"command": command}})).await;
}

/// Reads frames until the `calls` answer.
async fn recv_calls(socket: &mut voxa::net::dial::ClientSocket) -> Value {
    recv_type(socket, "calls").await
}

fn ids(list: &Value) -> Vec<&str> {
    list.as_array().unwrap().iter().map(|entry| entry["id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_call_left_behind_is_named_to_the_next_session_and_cancel_still_cancels() {
    let agent = TestAgent::start(None).await;
    let mut first = agent.local_client().await;
    start_command(&mut first, "left-behind", "echo started; sleep 30").await;
    let progress = recv_type(&mut first, "tool_progress").await;
    assert_eq!(progress["chunk"], "started\n");
    drop(first);

    let mut next = agent.local_client().await;
    send(&mut next, json!({"type":"calls"})).await;
    let calls = recv_calls(&mut next).await;
    assert_eq!(ids(&calls["running"]), ["left-behind"], "{calls}");
    assert_eq!(calls["running"][0]["args"]["command"], "echo started; sleep 30");
    // The output so far comes first, then the call goes on until it is cancelled.
    let replay = recv_type(&mut next, "tool_progress").await;
    assert_eq!((replay["id"].as_str(), replay["chunk"].as_str()), (Some("left-behind"), Some("started\n")));
    send(&mut next, json!({"type":"cancel","id":"left-behind"})).await;
    let result = recv_result(&mut next, "left-behind").await;
    assert_eq!(result["error"]["code"], "cancelled", "{result}");
    assert_eq!(agent.agent.ctx.status.calls_in_flight.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn stop_everything_cancels_every_call_of_the_pairing() {
    let agent = TestAgent::start(None).await;
    let mut one = agent.local_client().await;
    let mut other = agent.local_client().await;
    send(&mut other, json!({"type":"calls"})).await;
    assert_eq!(recv_calls(&mut other).await["running"], json!([]));
    start_command(&mut one, "a", "sleep 30").await;
    start_command(&mut one, "b", "sleep 30").await;
    // The other session hears of both calls as they start.
    for id in ["a", "b"] {
        let named = recv_calls(&mut other).await;
        assert_eq!(ids(&named["running"]), [id]);
    }
    send(&mut other, json!({"type":"cancel_all"})).await;
    // Both sessions get both results (the one that asked for every call too), in any order.
    for socket in [&mut one, &mut other] {
        let mut ended = Vec::new();
        while ended.len() < 2 {
            let frame = recv_json(socket).await;
            if frame["type"] == "tool_result" {
                assert_eq!(frame["error"]["code"], "cancelled", "{frame}");
                ended.push(frame["id"].as_str().unwrap().to_owned());
            }
        }
        ended.sort();
        assert_eq!(ended, ["a", "b"]);
    }
}

#[tokio::test]
async fn finished_calls_are_kept_bounded_and_named_until_seen() {
    let agent = TestAgent::start(None).await;
    let mut first = agent.local_client().await;
    let total = voxa::agent::calls::KEPT_CALLS + 3;
    for n in 0..total {
        start_command(&mut first, &format!("c{n}"), &format!("echo {n}")).await;
        recv_result(&mut first, &format!("c{n}")).await;
    }
    drop(first);
    let mut next = agent.local_client().await;
    send(&mut next, json!({"type":"calls","seen":[format!("c{}", total - 1)]})).await;
    let calls = recv_calls(&mut next).await;
    let finished = ids(&calls["finished"]);
    // The oldest were dropped (and counted); the one named seen is not named again.
    assert_eq!(calls["dropped"], 3, "{calls}");
    let expected: Vec<String> = (3..total - 1).map(|n| format!("c{n}")).collect();
    assert_eq!(finished, expected.iter().map(String::as_str).collect::<Vec<_>>());
    // Each named call's result follows, in order.
    for id in &expected {
        let result = recv_result(&mut next, id).await;
        assert_eq!(result["ok"], true, "{result}");
    }
}

/// Runs the voxa CLI on `home` and reads the one JSON line it printed.
async fn cli_json(home: &std::path::Path, args: &[&str]) -> Value {
    let mut cmd = crate::support::voxa_cmd(home);
    cmd.args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "voxa {args:?}: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_with_the_page_open_cuts_it_off_and_the_cli_works_at_once() {
    let Some(browser) = crate::support::browser::Browser::start().await else { return };
    let relay = crate::support::RunningVoxa::relay(0, "warn");
    let relay_url = format!("http://127.0.0.1:{}", relay.port);
    let (_dir, home) = crate::support::run::fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let paired = cli_json(&home, &["pair", "--json", "--relay", &relay_url]).await;
    let mut cmd = crate::support::voxa_cmd(&home);
    cmd.args(["run", "--json", "--relay", &relay_url, "--workspace"]).arg(workspace.path());
    let run = tokio::task::spawn_blocking(move || crate::support::RunningVoxa::start(cmd)).await.unwrap();
    browser.pair(paired["url"].as_str().unwrap()).await;
    browser.wait_connection("online").await;

    let rotated = cli_json(&home, &["pair", "--rotate", "--json", "--relay", &relay_url]).await;
    assert_eq!(rotated["rotated"]["picked_up"], true, "{rotated}");
    assert_eq!(rotated["rotated"]["agent"], run.child.id());
    // The open page was proven with the old token: it is told, and stops trying.
    browser.wait_connection("scan the new code").await;
    // The local CLI proves the new token at once.
    let status = cli_json(&home, &["status", "--json"]).await;
    assert!(status["agent"]["error"].is_null(), "{status}");
    assert_eq!(status["agent"]["mode"], "hosted", "{status}");
    // The relay link moved: the new link opens the laptop.
    browser.pair(rotated["url"].as_str().unwrap()).await;
    browser.wait_connection("online").await;
    browser.close().await;
    run.stop();
    relay.stop();
}

// ---- back fast (docs/PROTOCOL.md, "Back fast") ------------------------------------------------

/// The seconds the page's countdown says are left ("reconnecting in N s"), if it shows one.
fn countdown(text: &str) -> Option<u64> {
    let rest = text.split("reconnecting in ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_coming_back_is_not_waited_out() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    browser.set_online(false).await;
    // Offline, the page leaves the session at once and keeps trying, backing off further each time.
    let region = browser.control("status", "Connection").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let left = loop {
        let text = browser.text(&region).await;
        match countdown(&text) {
            Some(seconds) if seconds >= 5 => break seconds,
            _ => assert!(tokio::time::Instant::now() < deadline, "the backoff never grew: {text:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let back = tokio::time::Instant::now();
    browser.set_online(true).await;
    browser.wait_connection("laptop online").await;
    // Online well before the countdown would have let it try again.
    assert!(
        back.elapsed() < Duration::from_secs(left - 2),
        "back after {:?}, the countdown said {left} s",
        back.elapsed()
    );
    browser.type_into("Command", "echo back").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command after the network returned", |t| t.contains("exit 0")).await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_dead_across_a_network_change_is_left_at_once_for_a_new_one() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    let proxy = BlackholeProxy::start(scene.relay.addr).await;
    let link = scene.link().replace(&scene.relay.addr.to_string(), &proxy.addr.to_string());
    browser.pair(&link).await;
    browser.wait_connection("laptop online").await;
    let sessions = "return performance.getEntriesByName('voxa:online').length;";
    assert_eq!(browser.script(sessions, vec![]).await, json!(1));
    // The phone moved to another network: the old socket goes nowhere, and the browser says
    // it is online (again).
    proxy.blackhole_existing();
    browser.script("dispatchEvent(new Event('online'));", vec![]).await;
    // A new session, long before a stalled one would be noticed (25 s without a sealed frame).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while browser.script(sessions, vec![]).await != json!(2) {
        assert!(tokio::time::Instant::now() < deadline, "the dead socket was kept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.type_into("Command", "echo on-the-new-network").await;
    browser.press("Run").await;
    let shown = browser.wait_text(TERMINAL, "the command on the new socket", |t| t.contains("exit 0")).await;
    assert!(shown.contains("on-the-new-network"), "{shown}");
    scene.close().await;
}
