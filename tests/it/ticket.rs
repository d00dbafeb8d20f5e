//! A pairing link whose secret works once (docs/SECURITY.md, "A link whose secret works once"):
//! `voxa pair` and `voxa open` print a one-time ticket, never the token; the ticket keys one
//! sealed hello, which the agent answers with the token inside the sealed session; a second use,
//! a late one, a relay replaying the first hello and one that made its own hello with the ticket
//! after the phone used it all get nothing. In Chromium, the profile holds the spent ticket in its
//! history and the token only in the origin's storage.

use std::time::{Duration, SystemTime};

use base64::Engine;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::ClientSocket;
use voxa::protocol::ErrorCode;
use voxa::seal::{Initiator, Plain};
use voxa::secret::Secret;
use voxa::state::Home;

use crate::support::harness::*;
use crate::support::{voxa, voxa_cmd};

/// The home of a test agent.
fn home_of(agent: &TestAgent) -> Home {
    Home::at(agent.home.path().join("voxa"))
}

/// What a ticket hello came to.
#[derive(Debug)]
enum Outcome {
    /// Admitted: the inner `hello_ok` and the token the agent handed in its first sealed frame.
    Paired { hello_ok: Value, token: String },
    /// Refused with this error code (an error frame through the relay, the close's reason on the
    /// loopback socket).
    Refused(String),
}

/// Answers the agent's challenge on `socket` with a hello keyed by `ticket`, as the page does;
/// also returns the hello as sent (what a relay sees and could replay).
async fn ticket_hello(socket: &mut ClientSocket, ticket: &str) -> (Outcome, String) {
    let challenge = recv_challenge(socket).await;
    let (initiator, one) = Initiator::start(&Secret::from_string(ticket.to_owned()), &challenge).unwrap();
    let noise = base64::engine::general_purpose::STANDARD.encode(one);
    let hello = json!({"type":"hello","protocol":3,"ticket":true,"noise": noise,"client":"voxa-tests/1"}).to_string();
    socket.send(Message::text(hello.clone())).await.unwrap();
    (answer(socket, Some(initiator)).await, hello)
}

/// Sends `hello` as it was (a relay replaying what it saw) after the agent's next challenge.
async fn replay_hello(socket: &mut ClientSocket, hello: &str) -> Outcome {
    recv_challenge(socket).await;
    socket.send(Message::text(hello.to_owned())).await.unwrap();
    answer(socket, None).await
}

/// The agent's answer to a ticket hello. Without the initiator (a replay), any `hello_ok` is a
/// failure of the test: the agent must not answer one.
async fn answer(socket: &mut ClientSocket, initiator: Option<Initiator>) -> Outcome {
    let mut initiator = initiator;
    let mut keys = None;
    let mut hello_ok = Value::Null;
    loop {
        let frame = tokio::time::timeout(STEP, next_frame(socket)).await.expect("an answer in time");
        match frame {
            Some(Message::Text(text)) if text.starts_with('\u{1}') => continue,
            Some(Message::Text(text)) => {
                let value: Value = serde_json::from_str(&text).unwrap();
                match value["type"].as_str() {
                    Some("error") => return Outcome::Refused(value["code"].as_str().unwrap().to_owned()),
                    Some("hello_ok") => {
                        let initiator = initiator.take().expect("the agent answered a replayed hello");
                        let two =
                            base64::engine::general_purpose::STANDARD.decode(value["noise"].as_str().unwrap()).unwrap();
                        let (opened, payload) = initiator.finish(&two).expect("message 2 keyed by the ticket");
                        hello_ok = serde_json::from_slice(&payload).unwrap();
                        keys = Some(opened);
                    }
                    other => panic!("unexpected {other:?} before the token: {value}"),
                }
            }
            Some(Message::Binary(data)) => {
                let keys = keys.as_mut().expect("a sealed frame before hello_ok");
                let Some(Plain::Json(text)) = keys.opener.open(&data).unwrap() else { panic!("not a JSON frame") };
                let frame: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(frame["type"], "pairing", "the first sealed frame hands the token: {frame}");
                let token = frame["token"].as_str().unwrap().to_owned();
                return Outcome::Paired { hello_ok, token };
            }
            Some(Message::Close(close)) => {
                return Outcome::Refused(close.map(|c| c.reason.to_string()).unwrap_or_default());
            }
            Some(_) => continue,
            None => return Outcome::Refused(String::new()),
        }
    }
}

fn refused(outcome: Outcome) -> String {
    match outcome {
        Outcome::Refused(code) => code,
        paired => panic!("a spent, late or replayed ticket was admitted: {paired:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_pairs_once_through_the_relay_and_a_relay_replaying_it_gets_nothing() {
    let relay = TestRelay::start().await;
    let mut agent = TestAgent::start(Some(relay.url())).await;
    agent.wait_event("the relay link", |e| matches!(e, voxa::agent::LinkEvent::Connected { .. })).await;
    let home = home_of(&agent);
    let ticket = voxa::tickets::issue(&home).unwrap();
    let ticket = ticket.secret.expose().to_owned();

    let mut phone = phone_socket(&relay, agent.code()).await;
    let (outcome, seen) = ticket_hello(&mut phone, &ticket).await;
    let Outcome::Paired { hello_ok, token } = outcome else { panic!("the ticket was refused: {outcome:?}") };
    assert_eq!(token, agent.token(), "the agent hands the pairing's token");
    assert_eq!((hello_ok["type"].as_str(), hello_ok["protocol"].as_u64()), (Some("hello_ok"), Some(3)));
    assert!(!seen.contains(&ticket) && !seen.contains(agent.token()), "the hello carries neither secret: {seen}");
    // The session the ticket opened is the pairing's: it runs tools, sealed.
    drop(phone);
    // Every later session is the token's, as now.
    let mut later = agent.phone(&relay).await;
    drop(later.close(None).await);

    // The relay replays the hello it carried: it answers no new challenge, and nothing is handed.
    let mut replayer = phone_socket(&relay, agent.code()).await;
    assert_eq!(refused(replay_hello(&mut replayer, &seen).await), "ticket-expired");
    // A relay that read the link (it serves the page) makes a hello of its own with the ticket,
    // after the phone used it: refused, told why.
    let mut thief = phone_socket(&relay, agent.code()).await;
    assert_eq!(refused(ticket_hello(&mut thief, &ticket).await.0), "ticket-used");
    // A ticket that was never this laptop's.
    let mut stranger = phone_socket(&relay, agent.code()).await;
    let forged = Secret::generate().unwrap();
    assert_eq!(refused(ticket_hello(&mut stranger, forged.expose()).await.0), "ticket-expired");
    // A ticket in a protocol-2 hello is refused: the token it is traded for travels sealed only.
    let mut plain = phone_socket(&relay, agent.code()).await;
    let challenge = recv_challenge(&mut plain).await;
    let mut hello = hello_for(&ticket, &challenge);
    hello["ticket"] = json!(true);
    send(&mut plain, hello).await;
    assert_eq!(recv_type(&mut plain, "error").await["code"], ErrorCode::BearerRefused.as_str());
    agent.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_ticket_and_one_from_before_a_rotation_open_nothing_on_the_loopback_socket() {
    let agent = TestAgent::start(None).await;
    let home = home_of(&agent);
    let made = SystemTime::now() - voxa::tickets::TICKET_LIFETIME - Duration::from_secs(1);
    let late = voxa::tickets::issue_at(&home, made).unwrap();
    let mut socket = connect(&agent.loopback_url()).await;
    assert_eq!(refused(ticket_hello(&mut socket, late.secret.expose()).await.0), "ticket-expired");

    // On the loopback socket, as through the relay: once, then refused (the close says why).
    let fresh = voxa::tickets::issue(&home).unwrap();
    let mut socket = connect(&agent.loopback_url()).await;
    let Outcome::Paired { token, .. } = ticket_hello(&mut socket, fresh.secret.expose()).await.0 else {
        panic!("the fresh ticket was refused")
    };
    assert_eq!(token, agent.token());
    let mut again = connect(&agent.loopback_url()).await;
    assert_eq!(refused(ticket_hello(&mut again, fresh.secret.expose()).await.0), "ticket-used");

    // `pair --rotate` forgets every ticket printed before it.
    let unused = voxa::tickets::issue(&home).unwrap();
    home.rotate_secrets().unwrap();
    let mut socket = connect(&agent.loopback_url()).await;
    assert_eq!(refused(ticket_hello(&mut socket, unused.secret.expose()).await.0), "ticket-expired");
    agent.agent.stop().await;
}

/// A parameter of a link's fragment.
fn fragment_param(url: &str, name: &str) -> Option<String> {
    let url = url::Url::parse(url).unwrap();
    let fragment = url.fragment().unwrap_or_default().to_owned();
    url::form_urlencoded::parse(fragment.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

#[test]
fn voxa_pair_prints_a_new_ticket_each_time_and_never_the_token_in_its_text() {
    let (_dir, home) = crate::support::run::fresh_home();
    let first: Value = serde_json::from_slice(&voxa(&home, &["pair", "--json"]).stdout).unwrap();
    let again: Value = serde_json::from_slice(&voxa(&home, &["pair", "--json"]).stdout).unwrap();
    let token = first["token"].as_str().unwrap().to_owned();
    assert_eq!(again["token"], token.as_str(), "the token stays");
    for printed in [&first, &again] {
        let url = printed["url"].as_str().unwrap();
        assert_eq!(fragment_param(url, "ticket").as_deref(), printed["ticket"].as_str(), "{printed}");
        assert_eq!(fragment_param(url, "token"), None, "the link carries no token: {url}");
        assert_eq!(fragment_param(url, "code").as_deref(), printed["code"].as_str());
        let expires = humantime::parse_rfc3339(printed["ticket_expires"].as_str().unwrap()).unwrap();
        let left = expires.duration_since(SystemTime::now()).unwrap();
        assert!(left <= voxa::tickets::TICKET_LIFETIME && left > Duration::from_secs(14 * 60), "{left:?}");
    }
    assert_ne!(first["ticket"], again["ticket"], "each pair makes a new ticket");
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(home.join("tickets.json")).unwrap());
    assert_eq!(mode & 0o777, 0o600);

    let text = voxa_cmd(&home).args(["pair", "--no-qr"]).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(!text.contains(&token), "the human text never shows the token: {text}");
    assert!(text.contains("&ticket=") && text.contains("works once, within 15 minutes"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_log_holds_neither_the_ticket_nor_the_token_through_a_use_and_a_refusal() {
    let (dir, home) = crate::support::run::fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = voxa_cmd(&home);
    cmd.env("RUST_LOG", "trace").args(["run", "--json", "--relay", "http://127.0.0.1:1", "--workspace"]);
    cmd.arg(workspace.path());
    let run = crate::support::RunningVoxa::start(cmd);
    let opened = voxa(&home, &["open", "--no-browser", "--json"]);
    assert!(opened.status.success(), "{}", String::from_utf8_lossy(&opened.stderr));
    let url = serde_json::from_slice::<Value>(&opened.stdout).unwrap()["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("http://127.0.0.1:{}/#ticket=", run.port)), "{url}");
    let ticket = fragment_param(&url, "ticket").unwrap();
    let token = std::fs::read_to_string(home.join("auth_token")).unwrap().trim().to_owned();
    let loopback = format!("ws://127.0.0.1:{}/", run.port);
    let mut socket = connect(&loopback).await;
    let Outcome::Paired { token: handed, .. } = ticket_hello(&mut socket, &ticket).await.0 else {
        panic!("voxa open's ticket was refused")
    };
    assert_eq!(handed, token);
    let mut again = connect(&loopback).await;
    assert_eq!(refused(ticket_hello(&mut again, &ticket).await.0), "ticket-used");
    let (stdout, stderr) = run.stop();
    for secret in [&ticket, &token] {
        assert!(!stdout.contains(secret.as_str()) && !stderr.contains(secret.as_str()), "a secret in the log");
    }
    drop(dir);
}

/// The brief's promise in Chromium: opened, a ticket link pairs; after the browser quits, its
/// profile holds the token nowhere but the origin's localStorage (where the page keeps its
/// pairing), and the ticket — spent — in the navigation records only; the ticket used again is
/// refused, and a second browser opening the same link is told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_pairs_from_a_ticket_link_and_its_profile_holds_the_token_only_in_the_origins_storage() {
    use crate::support::profile::{files_holding, history_urls_holding};
    let Some(scene) = crate::support::scene::Scene::start().await else { return };
    let home = Home::at(scene.home.path().join("voxa"));
    let ticket = voxa::tickets::issue(&home).unwrap().secret.expose().to_owned();
    let (code, token) = (scene.code().to_owned(), scene.token().to_owned());
    let link = scene.relay.url().ticket_url(&code, &ticket, None);
    scene.browser.pair(&link).await;
    scene.browser.wait_connection("online").await;
    scene.browser.type_into("Command", "echo paired-by-ticket").await;
    scene.browser.press("Run").await;
    scene.browser.wait_text(crate::support::scene::TERMINAL, "the command", |t| t.contains("paired-by-ticket\n")).await;
    let stored = scene.browser.script("return localStorage.getItem('voxa.pairings')", vec![]).await;
    let stored = stored.as_str().unwrap_or_default();
    assert!(stored.contains(&token) && !stored.contains(&ticket), "the pairing is stored with its token: {stored}");

    // Used again — by a relay that read the link, or by someone reading the history — it opens nothing.
    let mut thief = phone_socket(&scene.relay, &code).await;
    assert_eq!(refused(ticket_hello(&mut thief, &ticket).await.0), "ticket-used");
    // A second browser opening the same link is told it was used, and cannot add the laptop.
    let other = scene.browser.another(crate::support::browser::Scheme::Light).await;
    other.open(&link).await;
    other.control("dialog", "Add this laptop?").await;
    let said = other.wait_text("#new-laptop-state", "the refusal", |t| t.contains("cannot be added")).await;
    assert!(said.contains("this link was used already — run voxa pair for a new one"), "{said}");
    other.close().await;

    let crate::support::scene::Scene { browser, relay, mut agent, .. } = scene;
    let profile = browser.quit().await;
    if let Some(agent) = agent.take() {
        agent.stop().await;
    }
    drop(relay);
    let root = profile.path();
    let holding_token = files_holding(root, &token);
    assert!(!holding_token.is_empty(), "the page keeps its pairing");
    let elsewhere: Vec<&String> =
        holding_token.iter().filter(|path| !path.starts_with("Default/Local Storage/")).collect();
    assert!(elsewhere.is_empty(), "the token is in the profile beyond the origin's storage: {elsewhere:?}");
    // The ticket is where Chromium records what it opened, and it is spent.
    assert_eq!(history_urls_holding(root, &ticket), [(link.clone(), String::new())]);
    let recorded = |path: &String| {
        path == "Default/History"
            || path == "Default/Favicons"
            || path.starts_with("Default/Sessions/")
            || path.starts_with("segmentation_platform/")
    };
    let ticket_elsewhere: Vec<String> = files_holding(root, &ticket).into_iter().filter(|p| !recorded(p)).collect();
    assert!(ticket_elsewhere.is_empty(), "{ticket_elsewhere:?}");
}
