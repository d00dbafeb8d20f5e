//! Who gets in before any hello: the pairing link keeps its secrets where a server never sees
//! them, the loopback socket answers only to requests addressed to exactly itself, and a stranger
//! who holds the relay code never locks the owner's phone out: it is closed when it says no good
//! hello in time, holds at most 64 KiB of the agent before it, and a relay that takes
//! `voxa-relay.3` hears which phones proved the token.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use rand::Rng;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use voxa::net::dial::{ClientSocket, DialOptions};
use voxa::protocol::relay::{self as relay_framing, Kind};

use crate::support::harness::*;
use crate::support::run::fresh_home;
use crate::support::voxa;

/// Every `http(s)://…` link in `text`.
fn links(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("http") {
        let tail = &rest[start..];
        let end = tail.find(|c: char| c.is_whitespace() || c == '"').unwrap_or(tail.len());
        if tail.starts_with("http://") || tail.starts_with("https://") {
            found.push(&tail[..end]);
        }
        rest = &tail[end.max(4)..];
    }
    found
}

/// The request target a browser sends for `link`: path and query, never the fragment.
fn request_target(link: &str) -> String {
    let url = url::Url::parse(link).unwrap();
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_printed_pairing_link_has_a_secret_before_its_fragment() {
    let relay = TestRelay::start().await;
    let (_dir, home) = fresh_home();
    let relay_url = relay.url().to_string();
    let json = voxa(&home, &["pair", "--json", "--relay", &relay_url]);
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
    let paired: Value = serde_json::from_slice(&json.stdout).unwrap();
    let (code, token) = (paired["code"].as_str().unwrap(), paired["token"].as_str().unwrap());
    let human = voxa(&home, &["pair", "--relay", &relay_url]);
    assert!(human.status.success());
    let printed = format!("{}{}", String::from_utf8_lossy(&human.stdout), paired["url"].as_str().unwrap());
    assert!(!printed.contains(token), "the links carry a ticket, never the token: {printed}");

    let found: Vec<&str> = links(&printed).into_iter().filter(|link| link.contains(code)).collect();
    assert_eq!(found.len(), 2, "one pairing link in the text, one in the JSON: {printed}");
    for link in found {
        let ticket = link.rsplit("&ticket=").next().unwrap();
        assert_eq!(link, format!("{relay_url}/#code={code}&ticket={ticket}"));
        assert!(voxa::secret::Secret::parse_hex128(ticket).is_ok(), "{link}");
        let fragment = link.find('#').unwrap();
        for secret in [code, ticket] {
            assert!(link.find(secret).unwrap() > fragment, "a secret before the fragment: {link}");
        }
        // What the relay receives when a browser opens the link: the page, and no secret.
        let target = request_target(link);
        assert_eq!(target, "/");
        let (status, body) =
            http(relay.addr, &format!("GET {target} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")).await;
        assert_eq!(status, 200);
        assert!(body.contains("<html") || body.contains("<!doctype") || body.contains("<!DOCTYPE"), "{body}");
    }
}

/// Sends a raw upgrade to the loopback socket with these header lines and returns the status.
async fn upgrade_status(port: u16, headers: &str) -> u16 {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\n{headers}Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(STEP, tcp.read(&mut buf)).await.unwrap().unwrap();
    parse_response(&buf[..n]).0
}

#[tokio::test]
async fn the_loopback_socket_takes_exactly_one_host_naming_itself() {
    let agent = TestAgent::start(None).await;
    let port = agent.agent.loopback.port();
    for good in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("LocalHost:{port}")] {
        assert_eq!(upgrade_status(port, &format!("Host: {good}\r\n")).await, 101, "{good}");
    }
    let refused = [
        // Read as 127.0.0.1 by a lenient parser, as evil.example by a URL parser.
        format!("Host: 127.0.0.1:{port}@evil.example\r\n"),
        format!("Host: 127.0.0.1:{port}\r\nHost: evil.example\r\n"),
        format!("Host: evil.example\r\nHost: 127.0.0.1:{port}\r\n"),
        format!("Host: 127.0.0.1:{port}\r\nHost: 127.0.0.1:{port}\r\n"),
        format!("Host: 127.0.0.1:{}\r\n", port.wrapping_add(1)),
        format!("Host: app.localhost:{port}\r\n"),
        format!("Host: 127.0.0.1:{port}/\r\n"),
        "Host: localhost\r\n".to_owned(),
        String::new(),
    ];
    for headers in refused {
        assert_eq!(upgrade_status(port, &headers).await, 403, "{headers:?}");
    }
}

#[tokio::test]
async fn the_loopback_socket_takes_only_its_own_origin_or_none() {
    let agent = TestAgent::start(None).await;
    let port = agent.agent.loopback.port();
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    for origin in
        ["".to_owned(), format!("Origin: http://127.0.0.1:{port}\r\n"), format!("Origin: http://localhost:{port}\r\n")]
    {
        assert_eq!(upgrade_status(port, &format!("{host}{origin}")).await, 101, "{origin:?}");
    }
    let other = port.wrapping_add(1);
    for origin in [
        format!("Origin: http://127.0.0.1:{other}\r\n"),
        format!("Origin: http://localhost:{other}\r\n"),
        "Origin: http://127.0.0.1\r\n".to_owned(),
        format!("Origin: http://voxa.localhost:{port}\r\n"),
        format!("Origin: http://evil.localhost:{port}\r\n"),
        format!("Origin: https://127.0.0.1:{port}\r\n"),
        format!("Origin: http://127.0.0.1:{port}\r\nOrigin: https://evil.example\r\n"),
        "Origin: null\r\n".to_owned(),
    ] {
        assert_eq!(upgrade_status(port, &format!("{host}{origin}")).await, 403, "{origin:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// No lockout by a code holder (docs/PROTOCOL.md, "Relay" and "Refusals")

/// How a stranger who holds the relay code (not the token) behaves.
#[derive(Clone, Copy, Debug)]
enum Stranger {
    /// Connects and never says hello.
    Silent,
    /// Answers the challenge with a wrong proof, and connects again whenever it is closed.
    BadHello,
    /// Connects, stays silent for a second, hangs up and connects again.
    Reconnecting,
}

/// Eight strangers on `url` behaving as `kind` until `stop`; `seen` counts the connections that
/// were answered (a challenge or a close).
fn strangers(
    url: &str,
    kind: Stranger,
    stop: &tokio_util::sync::CancellationToken,
    seen: &Arc<AtomicUsize>,
) -> tokio::task::JoinSet<()> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (url, stop, seen) = (url.to_owned(), stop.clone(), seen.clone());
        set.spawn(async move {
            loop {
                let Ok(mut socket) = voxa::net::dial::connect(&url, &DialOptions::default()).await else { return };
                let challenge = tokio::select! {
                    _ = stop.cancelled() => return,
                    challenge = first_challenge(&mut socket) => challenge,
                };
                seen.fetch_add(1, Ordering::SeqCst);
                match (kind, challenge) {
                    (Stranger::BadHello, Some(challenge)) => {
                        let wrong = format!("{:032x}", rand::rng().random::<u128>());
                        let _ = socket.send(Message::text(hello_for(&wrong, &challenge).to_string())).await;
                    }
                    (Stranger::Reconnecting, _) => {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                        let _ = socket.close(None).await;
                        continue;
                    }
                    _ => {}
                }
                // Hold the socket until the relay or the agent closes it.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = async { while let Some(Ok(_)) = socket.next().await {} } => {}
                }
                if matches!(kind, Stranger::Silent) {
                    return;
                }
            }
        });
    }
    set
}

/// The agent's challenge, or `None` when the socket is closed first (a full code: 4003).
async fn first_challenge(socket: &mut ClientSocket) -> Option<String> {
    while let Some(Ok(message)) = socket.next().await {
        if let Message::Text(text) = message {
            let value: Value = serde_json::from_str(text.trim_start_matches('\u{1}')).unwrap_or_default();
            if value["type"] == "challenge" {
                return value["nonce"].as_str().map(str::to_owned);
            }
        }
    }
    None
}

/// How long the owner's phone takes, from its first try, to open a sealed session and run a call
/// while the code holders do their worst; it tries again at once when it is turned away.
async fn owner_gets_in(agent: &TestAgent, url: &str) -> Duration {
    let token = voxa::secret::Secret::from_string(agent.token().to_owned());
    let started = std::time::Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(30), "the owner never got in");
        let Ok(mut phone) = voxa::net::dial::connect(url, &DialOptions::default()).await else { continue };
        let hello = tokio::time::timeout(STEP, voxa::net::client::hello(&mut phone, &token, "owner/1")).await;
        if !matches!(hello, Ok(Ok(_))) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        send(&mut phone, json!({"type":"tool_call","id":"owner","name":"list_dir","args":{}})).await;
        assert_eq!(recv_result(&mut phone, "owner").await["ok"], true);
        let took = started.elapsed();
        let _ = phone.close(None).await;
        return took;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_holders_silent_refused_or_reconnecting_never_lock_the_owners_phone_out() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let url = format!("ws://{}/ws?code={}", relay.addr, agent.code());
    // The owner's phone that was there first: proven, so never the one that makes room. It is
    // used all along, as a phone on screen is (a sealed session nobody reads stalls in 25 s).
    let kept = agent.phone(&relay).await;
    let kept_stop = tokio_util::sync::CancellationToken::new();
    let kept_in_use = tokio::spawn(keep_using(kept, kept_stop.clone()));
    let mut took = Vec::new();
    for kind in [Stranger::Silent, Stranger::BadHello, Stranger::Reconnecting] {
        let (stop, seen) = (tokio_util::sync::CancellationToken::new(), Arc::new(AtomicUsize::new(0)));
        let mut set = strangers(&url, kind, &stop, &seen);
        eventually("the strangers hold the code", || seen.load(Ordering::SeqCst) >= 8).await;
        if matches!(kind, Stranger::Reconnecting) {
            // Let them turn over once: the code is full of fresh strangers.
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let owner = owner_gets_in(&agent, &url).await;
        eprintln!("{kind:?} strangers: the owner's phone was in after {owner:?}");
        took.push((kind, owner));
        stop.cancel();
        while set.join_next().await.is_some() {}
    }
    for (kind, owner) in &took {
        assert!(*owner < Duration::from_secs(2), "with {kind:?} strangers the owner waited {owner:?}");
    }
    // The phone that was there first was never closed to make room: it was answered throughout.
    kept_stop.cancel();
    let answered = kept_in_use.await.expect("the first phone was answered every time");
    assert!(answered >= 2, "the first phone was answered {answered} times");
}

/// Asks for the status on `phone` every second, and once more after `stop`, waiting for each
/// answer; how many came. Panics if the phone is closed or answered with an error.
async fn keep_using(mut phone: ClientSocket, stop: tokio_util::sync::CancellationToken) -> usize {
    let mut answered = 0;
    loop {
        send(&mut phone, json!({"type":"status"})).await;
        assert_eq!(recv_type(&mut phone, "status").await["type"], "status");
        answered += 1;
        if stop.is_cancelled() {
            return answered;
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_that_send_more_than_64_kib_before_a_hello_are_closed_1009_and_the_owner_gets_in() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let url = format!("ws://{}/ws?code={}", relay.addr, agent.code());
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = url.clone();
        set.spawn(async move {
            let mut socket = connect(&url).await;
            first_challenge(&mut socket).await.expect("a challenge");
            // 1 MiB in one frame: the relay passes it on in parts as it reads it.
            let big = format!("{{\"type\":\"hello\",\"pad\":\"{}\"}}", "x".repeat(1 << 20));
            let _ = socket.send(Message::text(big)).await;
            recv_close(&mut socket).await
        });
    }
    while let Some(closed) = set.join_next().await {
        assert_eq!(closed.unwrap(), (1009, "too much data before the hello".to_owned()));
    }
    assert!(owner_gets_in(&agent, &url).await < Duration::from_secs(2));
}

/// A relay of the test's own that answers the agent's upgrade choosing `framing` and hands the
/// agent's socket over; anything else it is asked (the agent's page check) gets nothing.
async fn framing_relay(
    framing: &'static str,
) -> (voxa::config::RelayUrl, tokio::sync::mpsc::Receiver<(Option<String>, WebSocketStream<TcpStream>)>) {
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = voxa::config::RelayUrl::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut offered = None;
                #[allow(clippy::result_large_err)]
                let choose = |request: &Request, mut response: Response| {
                    offered = request.headers().get("sec-websocket-protocol").map(|v| v.to_str().unwrap().to_owned());
                    response.headers_mut().insert("sec-websocket-protocol", framing.parse().unwrap());
                    Ok(response)
                };
                if let Ok(socket) = tokio_tungstenite::accept_hdr_async(tcp, choose).await {
                    let _ = tx.send((offered, socket)).await;
                }
            });
        }
    });
    (url, rx)
}

/// What the agent sent about `peer`, kinds and payloads, until `quiet` passes with nothing more.
async fn agent_said(socket: &mut WebSocketStream<TcpStream>, peer: u32, quiet: Duration) -> Vec<(Kind, Vec<u8>)> {
    let mut said = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(quiet, socket.next()).await {
        if let Message::Binary(data) = message {
            if let Some((kind, to, payload)) = relay_framing::split(&data) {
                if to == peer {
                    said.push((kind, payload.to_vec()));
                }
            }
        }
    }
    said
}

#[tokio::test]
async fn the_agent_tells_a_relay_that_chose_voxa_relay_3_which_phones_proved_the_token_and_an_older_relay_nothing() {
    for (framing, tells) in [("voxa-relay.3", true), ("voxa-relay.2", false)] {
        let (url, mut sockets) = framing_relay(framing).await;
        let agent = TestAgent::start(Some(url)).await;
        let (offered, mut relay) = tokio::time::timeout(STEP, sockets.recv()).await.unwrap().unwrap();
        assert_eq!(offered.as_deref(), Some("voxa-relay.3, voxa-relay.2"), "the agent offers both, newest first");
        let token = voxa::secret::Secret::from_string(agent.token().to_owned());
        // Peer 1 proves the token; peer 2 does not.
        for peer in [1u32, 2] {
            relay.send(Message::binary(relay_framing::header(Kind::Joined, peer).to_vec())).await.unwrap();
            let said = agent_said(&mut relay, peer, Duration::from_millis(500)).await;
            let challenge: Value = serde_json::from_slice(&said[0].1).unwrap();
            let nonce = challenge["nonce"].as_str().unwrap();
            let hello = if peer == 1 {
                let (_, one) = voxa::seal::Initiator::start(&token, nonce).unwrap();
                json!({"type":"hello","protocol":3,"noise": base64::engine::general_purpose::STANDARD.encode(one)})
            } else {
                hello_for(&"f".repeat(32), nonce)
            };
            let framed = relay_framing::message(Kind::Text, peer, hello.to_string().as_bytes());
            relay.send(Message::binary(framed)).await.unwrap();
            let said = agent_said(&mut relay, peer, Duration::from_millis(500)).await;
            let kinds: Vec<Kind> = said.iter().map(|(kind, _)| *kind).collect();
            let proven = kinds.contains(&Kind::Proven);
            if peer == 1 {
                assert!(kinds.contains(&Kind::Text), "hello_ok: {kinds:?}");
                assert_eq!(proven, tells, "{framing}: {kinds:?}");
            } else {
                assert!(!proven, "a refused peer is never proven: {kinds:?}");
                let (_, close) = said.iter().find(|(kind, _)| *kind == Kind::ClosePeer).expect("closed");
                // An unsealed hello, refused as every one is through the relay by default.
                assert_eq!(relay_framing::parse_close_peer(close), Some((1008, "sealed-session-required")));
            }
        }
        agent.agent.stop().await;
    }
}
