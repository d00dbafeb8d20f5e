//! A pairing with more than one relay (docs/PROTOCOL.md, "More than one relay"): `voxa pair`
//! names up to three in its link, the agent keeps a link to each on the same code, and the page
//! moves to the next relay when the one it uses fails, with no new pairing.

use std::path::Path;

use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::support::browser::Browser;
use crate::support::harness::*;
use crate::support::scene::TERMINAL;
use crate::support::{voxa, voxa_cmd, RunningVoxa};

const A: &str = "http://127.0.0.1:7001";
const B: &str = "http://127.0.0.1:7002";

fn pair(home: &Path, relays: &[&str]) -> std::process::Output {
    let mut args = vec!["pair", "--json", "--no-qr"];
    for relay in relays {
        args.extend(["--relay", relay]);
    }
    voxa(home, &args)
}

fn refusal(home: &Path, relays: &[&str]) -> String {
    let out = pair(home, relays);
    assert_eq!(out.status.code(), Some(2), "{relays:?} was not refused as a usage error");
    assert!(!home.exists(), "a refused pairing left a home behind");
    String::from_utf8(out.stderr).unwrap()
}

/// The link's fragment as the page reads it.
fn fragment(url: &str) -> Vec<(String, String)> {
    let url = url::Url::parse(url).unwrap();
    url::form_urlencoded::parse(url.fragment().unwrap().as_bytes()).into_owned().collect()
}

#[test]
fn pair_names_two_relays_in_the_link_three_at_most_and_each_once() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let out = pair(&home, &[A, B]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["relay"], A);
    assert_eq!(value["relays"], json!([A, B]));
    let url = value["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("{A}/#code=")), "{url}");
    let read = fragment(url);
    let relays: Vec<&str> = read.iter().filter(|(key, _)| key == "relay").map(|(_, value)| value.as_str()).collect();
    assert_eq!(relays, [B], "the link's own relay comes first, the other after it: {url}");
    assert!(!url.contains(value["token"].as_str().unwrap()), "the token stays out of the link");
    // Saved as a list, and the next `pair` (no flag) names both again.
    let config = std::fs::read_to_string(home.join("config.toml")).unwrap();
    assert!(config.contains(&format!("relays = [\n    \"{A}\",\n    \"{B}\",\n]")), "{config}");
    let again: Value = serde_json::from_slice(&pair(&home, &[]).stdout).unwrap();
    assert_eq!(again["relays"], json!([A, B]));
    assert_eq!(again["relay_source"], "saved");
    // The text says what the link holds.
    let text = voxa(&home, &["pair", "--no-qr"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains(&format!("It names 2 relays, {A} and {B}: the page uses the first that answers")), "{text}");

    let fresh = tmp.path().join("fresh");
    let four = [A, B, "http://127.0.0.1:7003", "http://127.0.0.1:7004"];
    let err = refusal(&fresh, &four);
    assert!(err.contains("a pairing names at most 3 relays, and 4 were given"), "{err}");
    let err = refusal(&fresh, &[A, B, &format!("{A}/")]);
    assert!(err.contains(&format!("relay {A} is named twice; name each relay once")), "{err}");
    let err = refusal(&fresh, &[A, "http://relay.example"]);
    assert!(err.contains("not encrypted"), "each relay is validated as one relay is: {err}");
    let three = pair(&fresh, &four[..3]);
    assert_eq!(three.status.code(), Some(0), "three relays are allowed");
}

#[test]
fn voxa_run_dials_every_relay_it_is_given_and_status_says_which_answer() {
    let (first, second) = (RunningVoxa::relay(0, "warn"), RunningVoxa::relay(0, "warn"));
    let (a, b) = (first.relay_url(), second.relay_url());
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--json", "--relay", &a, "--relay", &b, "--workspace"]).arg(tmp.path());
    let mut run = RunningVoxa::start(cmd);
    let pairing = run.wait_event("pairing");
    assert_eq!(pairing["relays"], json!([a, b]), "{pairing}");
    let url = pairing["url"].as_str().unwrap();
    assert!(fragment(url).contains(&("relay".to_owned(), b.clone())), "the first run's link names both: {url}");
    let mut connected: Vec<String> =
        (0..2).map(|_| run.wait_event("relay_connected")["relay"].as_str().unwrap().to_owned()).collect();
    connected.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(connected, both);
    let status = |home: &Path| -> Value { serde_json::from_slice(&voxa(home, &["status", "--json"]).stdout).unwrap() };
    let shown = status(&home);
    assert_eq!(shown["relays"], json!([a, b]), "{shown}");
    let links = json!([
        {"relay": a, "connected": true, "phone_present": false},
        {"relay": b, "connected": true, "phone_present": false},
    ]);
    assert_eq!(shown["agent"]["relays"], links, "{shown}");
    // One relay goes away: the other link stays up, and status says which.
    first.crash();
    run.wait_event("relay_lost");
    let shown = status(&home);
    assert_eq!(shown["agent"]["relays"][0]["connected"], false, "{shown}");
    assert_eq!(shown["agent"]["relays"][1]["connected"], true, "{shown}");
    assert_eq!(shown["agent"]["relay_connected"], true, "{shown}");
    let text = String::from_utf8(voxa(&home, &["status"]).stdout).unwrap();
    assert!(text.contains(&format!("  via {a}: not connected\n  via {b}: connected\n")), "{text}");
    assert!(text.contains(&format!("relays:  {a}, {b} (the page moves to the next when one fails)\n")), "{text}");
    drop(second);
    run.stop();
}

/// Defines `through()`: what the Status panel's "Through" row says.
const THROUGH: &str = "const through = () => {
        const row = [...document.querySelectorAll('#facts dt')].find((dt) => dt.textContent === 'Through');
        return row && row.nextElementSibling ? row.nextElementSibling.textContent : '';
    };";

/// An agent dialing `first` and, on the same code, `second`.
async fn agent_on_two(first: &TestRelay, second: &TestRelay) -> TestAgent {
    let second = second.url();
    let mut agent = TestAgent::start_with(Some(first.url()), |o| o.extra_relays = vec![second]).await;
    for _ in 0..2 {
        agent.wait_event("a relay connected", |e| matches!(e, voxa::agent::LinkEvent::Connected { .. })).await;
    }
    agent
}

#[tokio::test]
async fn an_agent_with_two_relays_is_reached_through_each_and_its_status_says_which_are_up() {
    let (first, second) = (TestRelay::start().await, TestRelay::start().await);
    let agent = agent_on_two(&first, &second).await;
    for (relay, id) in [(&first, "via-first"), (&second, "via-second")] {
        let mut phone = agent.phone(relay).await;
        send(&mut phone, json!({"type":"tool_call","id":id,"name":"run_command","args":{"command":"echo reached"}}))
            .await;
        let result = recv_result(&mut phone, id).await;
        assert_eq!(result["ok"], true, "{result}");
        assert!(result["result"]["output"].as_str().unwrap().contains("reached"), "{result}");
    }
    let urls = [first.url(), second.url()];
    let status = |state: Value| {
        json!([
            {"relay": urls[0].as_str(), "connected": state[0], "phone_present": false},
            {"relay": urls[1].as_str(), "connected": state[1], "phone_present": false},
        ])
    };
    let mut local = agent.local_client().await;
    send(&mut local, json!({"type":"status"})).await;
    let shown = recv_type(&mut local, "status").await;
    assert_eq!(shown["relay"], first.url().as_str());
    assert_eq!(shown["relays"], status(json!([true, true])), "{shown}");
    second.kill().await;
    let ctx = agent.agent.ctx.clone();
    eventually("the second relay's loss is noticed", || ctx.status().relays.iter().any(|l| !l.connected)).await;
    send(&mut local, json!({"type":"status"})).await;
    let shown = recv_type(&mut local, "status").await;
    assert_eq!(shown["relays"], status(json!([true, false])), "{shown}");
    assert_eq!(shown["relay_connected"], true, "one relay is still up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_moves_to_the_other_relay_when_its_own_is_killed_and_its_commands_still_run() {
    let Some(browser) = Browser::start().await else { return };
    let (first, second) = (TestRelay::start().await, TestRelay::start().await);
    let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut options, secrets) = options(&home, &workspace, Some(first.url()));
    options.extra_relays = vec![second.url()];
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = voxa::agent::start(options, listener, CancellationToken::new()).await.unwrap();
    let (code, token) = (secrets.relay_code.expose(), secrets.auth_token.expose());
    let other: String = url::form_urlencoded::byte_serialize(second.url().as_str().as_bytes()).collect();
    browser.pair(&format!("http://{}/#code={code}&token={token}&relay={other}", first.addr)).await;
    browser.wait_connection("online").await;
    assert_eq!(
        browser.script(&format!("{THROUGH} return through();"), vec![]).await,
        json!(format!("relay {}, one of 2", first.addr))
    );
    let stored = browser.script("return localStorage.getItem('voxa.pairings');", vec![]).await;
    assert!(stored.as_str().unwrap().contains(&format!("\"relays\":[\"{}\"]", second.url())), "{stored}");
    browser.type_into("Command", "echo before-the-kill").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the first command", |t| t.contains("before-the-kill\n")).await;

    // The page's own relay goes away mid-session: the page finds the laptop through the other.
    first.kill().await;
    let online_through_second = format!(
        "{THROUGH} return document.getElementById('connection-text').textContent === 'laptop online' \
         && through() === {};",
        json!(format!("relay {}, one of 2", second.addr))
    );
    browser.wait_script("the page online through the second relay", &online_through_second).await;
    browser.type_into("Command", "echo after-the-kill").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command after the kill", |t| t.contains("after-the-kill\n")).await;
    let stored_after = browser.script("return localStorage.getItem('voxa.pairings');", vec![]).await;
    assert_eq!(stored_after, stored, "no new pairing was made");
    agent.stop().await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_naming_a_malformed_or_fourth_relay_is_damaged_and_nothing_is_kept() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    let (code, token) = ("0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210");
    let encoded = |url: &str| -> String { url::form_urlencoded::byte_serialize(url.as_bytes()).collect() };
    let many = ["https://b.example", "https://c.example", "https://d.example"].map(encoded).join("&relay=");
    for others in [
        encoded("http://relay.example"),
        encoded("https://user:secret@b.example"),
        encoded("https://b.example/?code=1"),
        encoded("wss://b.example"),
        "not%20a%20url".to_owned(),
        many,
    ] {
        browser.open("about:blank").await;
        browser.open(&format!("http://{}/#code={code}&token={token}&relay={others}", relay.addr)).await;
        let said = browser.wait_text("#pair-error", "the damaged link", |t| !t.is_empty()).await;
        assert_eq!(said, "This pairing link is damaged: scan the code again.", "relay={others}");
        assert!(!browser.address().await.contains("relay="), "the link left the address bar");
    }
    let stored = browser.script("return localStorage.getItem('voxa.pairings');", vec![]).await;
    assert!(!stored.as_str().unwrap_or_default().contains(code), "{stored}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_whose_own_relay_answers_without_the_laptop_finds_it_on_the_other() {
    let Some(browser) = Browser::start().await else { return };
    let (first, second) = (TestRelay::start().await, TestRelay::start().await);
    // The laptop reaches only the second relay (its link to the first is down).
    let agent = TestAgent::start(Some(second.url())).await;
    let other: String = url::form_urlencoded::byte_serialize(second.url().as_str().as_bytes()).collect();
    browser.pair(&format!("http://{}/#code={}&token={}&relay={other}", first.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    let through = format!("{THROUGH} return through();");
    assert_eq!(browser.script(&through, vec![]).await, json!(format!("relay {}, one of 2", second.addr)));
    browser.type_into("Command", "echo found-it").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command", |t| t.contains("found-it\n")).await;
    browser.close().await;
}
