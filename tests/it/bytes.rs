//! Bytes counted and low data. The real `voxa run` with the real Claude Code CLI (only the model faked), followed by
//! two loopback clients at once while the model writes for a while, one with `low_data`. The
//! low-data one gets the streamed text merged into fewer frames, the whole text intact and the
//! turn's end; the other gets every event of the log, as before. Neither hears the model's
//! thinking. In Chromium at 390×844 the Status tab shows the bytes the page's session moved and
//! the low-data switch, which a reload keeps, and an answer streamed with it on arrives whole.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::agents::{agent_env, agents_bin};
use crate::support::browser::Browser;
use crate::support::fake_model::{FakeModel, Reply};
use crate::support::harness::{connect, recv_json, say_hello, send};
use crate::support::laptop::Laptop;
use crate::support::{voxa_cmd, RunningVoxa};
use voxa::net::dial::ClientSocket;

const CHUNK: &str = "streamed words, ";
const CHUNKS: usize = 60;
const THINKING: &str = "PONDERING-QUIETLY-ABOUT-IT";

/// The `agent_event`s of `session` a client reads until the turn ends (other frames skipped).
async fn events_until_turn_end(socket: &mut ClientSocket, session: &str, early: Vec<Value>) -> Vec<Value> {
    let mut events: Vec<Value> = early.into_iter().filter(|f| f["session"] == session).collect();
    while !events.iter().any(|f| f["event"]["kind"] == "turn_end") {
        let frame = recv_json(socket).await;
        assert!(!frame.to_string().contains(THINKING), "thinking reached a client: {frame}");
        if frame["type"] == "agent_event" && frame["session"] == session {
            events.push(frame);
        }
    }
    events
}

fn partials(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|f| f["event"]["kind"] == "text" && f["event"]["partial"] == true).collect()
}

fn whole_text(events: &[Value]) -> String {
    let whole = events.iter().find(|f| f["event"]["kind"] == "text" && f["event"]["partial"] == false);
    whole.map(|f| f["event"]["text"].as_str().unwrap().to_owned()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_data_merges_streamed_text_and_keeps_the_whole_text_while_the_default_is_unchanged() {
    let Some(bin) = agents_bin("claude") else { return };
    let model = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let mut cmd: Command = voxa_cmd(&home);
    cmd.args(["run", "--json", "--embedded-relay", "--workspace"]).arg(workspace.path());
    cmd.envs(agent_env(&bin, &dir.path().join("agents"), &model));
    let mut voxa = RunningVoxa::start(cmd);
    voxa.wait_event("pairing");
    let token = std::fs::read_to_string(home.join(voxa::state::AUTH_TOKEN_FILE)).unwrap().trim().to_owned();
    let url = format!("ws://127.0.0.1:{}/", voxa.port);
    let (mut plain, mut low) = (connect(&url).await, connect(&url).await);
    say_hello(&mut plain, &token).await;
    say_hello(&mut low, &token).await;
    send(&mut plain, json!({"type": "follow"})).await;
    send(&mut low, json!({"type": "follow", "low_data": true})).await;

    let every = Duration::from_millis(25);
    model.script([Reply::Paced { thinking: THINKING.into(), chunk: CHUNK.into(), count: CHUNKS, every }]);
    send(&mut plain, json!({"type": "tool_call", "id": "bytes-start", "name": "agent_start", "args": {"prompt": "Write for a while"}}))
        .await;
    let mut early = Vec::new();
    let session = loop {
        let frame = recv_json(&mut plain).await;
        if frame["type"] == "tool_result" && frame["id"] == "bytes-start" {
            break frame["result"]["session"].as_str().unwrap().to_owned();
        }
        if frame["type"] == "agent_event" {
            early.push(frame);
        }
    };
    let plain_events = events_until_turn_end(&mut plain, &session, early).await;
    let low_events = events_until_turn_end(&mut low, &session, Vec::new()).await;

    // The log, as `agent_log` reads it.
    send(&mut plain, json!({"type": "tool_call", "id": "bytes-log", "name": "agent_log", "args": {"session": session, "limit": 500}}))
        .await;
    let log = loop {
        let frame = recv_json(&mut plain).await;
        if frame["type"] == "tool_result" && frame["id"] == "bytes-log" {
            break frame["result"]["events"].as_array().unwrap().clone();
        }
    };
    assert!(!Value::Array(log.clone()).to_string().contains(THINKING), "thinking was recorded");
    let expected = CHUNK.repeat(CHUNKS);

    // Off: every event of the log, in order, each once.
    let seqs = |events: &[Value]| events.iter().map(|f| f["seq"].as_u64().unwrap()).collect::<Vec<_>>();
    let upto = plain_events.last().unwrap()["seq"].as_u64().unwrap();
    let logged: Vec<u64> = seqs(&log).into_iter().filter(|seq| *seq <= upto).collect();
    assert_eq!(seqs(&plain_events), logged, "the default follower gets every event");
    assert_eq!(whole_text(&plain_events).trim_end(), expected.trim_end());
    let logged_partials = partials(&log).len();
    assert!(logged_partials >= 4, "the model's text streamed in {logged_partials} pieces");

    // On: fewer frames, the same turn, the whole text whole.
    let merged = partials(&low_events);
    assert!(merged.len() < logged_partials, "{} low-data pieces of {logged_partials}", merged.len());
    let streamed: String = merged.iter().map(|f| f["event"]["text"].as_str().unwrap()).collect();
    assert!(expected.starts_with(&streamed), "the merged pieces are the text so far: {streamed:?}");
    assert_eq!(whole_text(&low_events), whole_text(&plain_events));
    assert!(seqs(&low_events).windows(2).all(|pair| pair[0] < pair[1]), "in order");
    let kinds = |events: &[Value]| {
        events.iter().filter(|f| f["event"]["kind"] != "text").map(|f| f["event"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(kinds(&low_events), kinds(&plain_events), "every event but streamed text is the same");
    let low_bytes: usize = low_events.iter().map(|f| f.to_string().len()).sum();
    let plain_bytes: usize = plain_events.iter().map(|f| f.to_string().len()).sum();
    assert!(low_bytes < plain_bytes, "low data moved {low_bytes} bytes, the default {plain_bytes}");
    voxa.stop();
}

/// The low-data switch's name, as a screen reader says it.
const LOW_DATA: &str = "Low data: the agent's text comes in fewer pieces";

/// Whether the page's low-data switch is on.
async fn switched_on(browser: &Browser) -> bool {
    browser.script("return document.getElementById('low-data').checked;", vec![]).await == Value::Bool(true)
}

/// The bytes the Status tab shows once the session has moved some both ways.
async fn bytes_shown(browser: &Browser) -> String {
    browser
        .wait_text("#bytes", "bytes moved", |t| {
            let moved = |line: &str| line.contains(" in · ") && !line.starts_with("0 B") && !line.contains("· 0 B out");
            t.contains("This session") && t.contains("This hour") && t.lines().filter(|line| moved(line)).count() == 2
        })
        .await
}

/// Writes a screenshot when `VOXA_BYTES_PICTURES` names a directory to look at them in.
async fn picture(browser: &Browser, name: &str) {
    if let Some(dir) = std::env::var_os("VOXA_BYTES_PICTURES") {
        browser.script("document.getElementById('data').scrollIntoView({block: 'start'});", vec![]).await;
        std::fs::write(std::path::Path::new(&dir).join(name), browser.screenshot().await).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_shows_the_bytes_moved_and_a_low_data_switch_that_outlives_a_reload() {
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start().await else { return };
    let model = FakeModel::start().await;
    let laptop = Laptop::start(&bin, &model);
    browser.pair(&laptop.link).await;
    browser.wait_connection("online").await;
    browser.press("Status").await;
    let shown = bytes_shown(&browser).await;
    assert!(shown.contains("out"), "{shown}");
    assert!(!switched_on(&browser).await, "low data is off until the user turns it on");
    browser.control("checkbox", LOW_DATA).await.click().await.unwrap();
    assert!(switched_on(&browser).await);
    picture(&browser, "bytes-light.png").await;

    // A reload keeps the switch, and the page follows with it: an answer streamed meanwhile
    // arrives whole.
    browser.script("location.reload();", vec![]).await;
    browser.wait_connection("online").await;
    browser.press("Status").await;
    bytes_shown(&browser).await;
    assert!(switched_on(&browser).await, "the switch survives a reload");
    model.script([Reply::Paced {
        thinking: THINKING.into(),
        chunk: CHUNK.into(),
        count: 40,
        every: Duration::from_millis(25),
    }]);
    browser.press("Agent").await;
    browser.type_into("Prompt", "Write for a while").await;
    browser.press("Ask").await;
    let expected = CHUNK.repeat(40);
    let said = browser
        .wait_text("#agent-conversation", "the whole answer", |t| {
            t.contains(expected.trim_end()) && t.contains("Done ·")
        })
        .await;
    assert!(!said.contains(THINKING), "{said}");

    // Off again, remembered as off.
    browser.press("Status").await;
    browser.control("checkbox", LOW_DATA).await.click().await.unwrap();
    browser.script("location.reload();", vec![]).await;
    browser.wait_connection("online").await;
    browser.press("Status").await;
    bytes_shown(&browser).await;
    assert!(!switched_on(&browser).await, "switched off, it stays off");

    // The same screen in the dark scheme.
    browser
        .cdp("Emulation.setEmulatedMedia", json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}))
        .await;
    picture(&browser, "bytes-dark.png").await;
    browser.close().await;
}
