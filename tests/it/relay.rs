//! The relay (docs/PROTOCOL.md, "Relay") on 127.0.0.1:0, driven by real WebSocket clients as the laptop and the
//! phone would drive it, plus raw TCP clients where a misbehaving peer is the point.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;
use voxa::relay::{Limits, RelayConfig};

use crate::harness::{http, parse_response, upgrade_request, TestRelay, STEP as WAIT};
use voxa::secret::Secret;

fn new_code() -> String {
    Secret::generate().unwrap().expose().to_owned()
}

type Client<S = TcpStream> = WebSocketStream<S>;

fn client_config() -> WebSocketConfig {
    WebSocketConfig::default().max_message_size(None).max_frame_size(None)
}

async fn connect_over<S>(stream: S, url: &str, token: Option<&str>) -> Result<Client<S>, tungstenite::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut request = url.into_client_request()?;
    if let Some(token) = token {
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let (ws, _) = timeout(WAIT, tokio_tungstenite::client_async_with_config(request, stream, Some(client_config())))
        .await
        .expect("handshake in time")?;
    Ok(ws)
}

async fn try_connect(addr: SocketAddr, path: &str, token: Option<&str>) -> Result<Client, tungstenite::Error> {
    let tcp = TcpStream::connect(addr).await?;
    connect_over(tcp, &format!("ws://{addr}{path}"), token).await
}

async fn agent(relay: &TestRelay, code: &str) -> Client {
    try_connect(relay.addr, &format!("/agent?code={code}"), None).await.unwrap()
}

async fn phone(relay: &TestRelay, code: &str) -> Client {
    try_connect(relay.addr, &format!("/ws?code={code}"), None).await.unwrap()
}

/// The next message, pings and pongs included, failing the test on timeout, end or error.
async fn next_any<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>) -> Message {
    timeout(WAIT, ws.next()).await.expect("a message in time").expect("stream still open").expect("no error")
}

/// The next data or close message (the client answers the relay's pings by itself).
async fn next<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>) -> Message {
    loop {
        match next_any(ws).await {
            Message::Ping(_) | Message::Pong(_) => continue,
            message => return message,
        }
    }
}

async fn expect_text<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>, expected: &str) {
    match next(ws).await {
        Message::Text(text) => assert_eq!(text.as_str(), expected),
        other => panic!("expected text {expected:?}, got {other:?}"),
    }
}

fn notice(peer: &str, state: &str) -> String {
    format!(r#"{{"type":"__peer","peer":"{peer}","state":"{state}"}}"#)
}

async fn expect_notice<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>, peer: &str, state: &str) {
    expect_text(ws, &notice(peer, state)).await;
}

/// Reads until the close frame and returns its code; other messages are counted.
async fn expect_close<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>) -> (u16, usize) {
    let mut skipped = 0;
    loop {
        match timeout(WAIT, ws.next()).await.expect("a close frame in time") {
            Some(Ok(Message::Close(Some(frame)))) => return (u16::from(frame.code), skipped),
            Some(Ok(Message::Close(None))) => panic!("close frame without a code"),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Ok(_)) => skipped += 1,
            Some(Err(err)) => panic!("connection failed before a close frame: {err}"),
            None => panic!("connection ended without a close frame"),
        }
    }
}

async fn send<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>, message: Message) {
    timeout(WAIT, ws.send(message)).await.expect("send in time").expect("send works");
}

/// Connects an agent and a phone on a fresh code and reads the `joined` notices.
async fn pair(relay: &TestRelay) -> (Client, Client, String) {
    let code = new_code();
    let mut laptop = agent(relay, &code).await;
    let mut handset = phone(relay, &code).await;
    expect_notice(&mut handset, "agent", "joined").await;
    expect_notice(&mut laptop, "phone", "joined").await;
    (laptop, handset, code)
}

/// Sends a raw HTTP request and returns the status and body.
fn numbered_frame(from: &str, i: usize) -> Message {
    if i % 2 == 0 {
        Message::text(format!("{from} {i} ünïcode"))
    } else {
        Message::binary((0..i % 700).map(|b| (b + i) as u8).collect::<Vec<u8>>())
    }
}

async fn send_numbered(from: &str, count: usize, sink: &mut futures_util::stream::SplitSink<Client, Message>) {
    for i in 0..count {
        sink.feed(numbered_frame(from, i)).await.unwrap();
    }
    timeout(WAIT, sink.flush()).await.unwrap().unwrap();
}

async fn receive_numbered(from: &str, count: usize, stream: &mut futures_util::stream::SplitStream<Client>) {
    for i in 0..count {
        let got = timeout(WAIT, stream.next()).await.expect("frame in time").unwrap().unwrap();
        assert_eq!(got, numbered_frame(from, i), "frame {i} from {from}");
    }
}

#[tokio::test]
async fn copies_text_and_binary_both_ways_unchanged_and_in_order() {
    let relay = TestRelay::start().await;
    let (laptop, handset, _) = pair(&relay).await;
    const FRAMES: usize = 1000;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();
    let (mut handset_tx, mut handset_rx) = handset.split();
    tokio::join!(
        send_numbered("agent", FRAMES, &mut laptop_tx),
        send_numbered("phone", FRAMES, &mut handset_tx),
        receive_numbered("agent", FRAMES, &mut handset_rx),
        receive_numbered("phone", FRAMES, &mut laptop_rx),
    );
    relay.shut_down(WAIT).await;
}

#[tokio::test]
async fn each_side_hears_when_the_other_joins_and_leaves() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    // A phone arriving second hears about the agent already there, and the agent about it.
    let mut handset = phone(&relay, &code).await;
    expect_notice(&mut handset, "agent", "joined").await;
    expect_notice(&mut laptop, "phone", "joined").await;

    handset.close(None).await.unwrap();
    expect_notice(&mut laptop, "phone", "left").await;

    let mut handset = phone(&relay, &code).await;
    expect_notice(&mut laptop, "phone", "joined").await;
    expect_notice(&mut handset, "agent", "joined").await;

    // A vanished TCP connection (no close frame) counts as leaving too.
    drop(laptop);
    expect_notice(&mut handset, "agent", "left").await;

    // Codes are independent: another pair never hears about this one.
    let (mut other_laptop, _other_handset, _) = pair(&relay).await;
    let mut laptop = agent(&relay, &code).await;
    expect_notice(&mut laptop, "phone", "joined").await;
    expect_notice(&mut handset, "agent", "joined").await;
    send(&mut other_laptop, Message::text("only mine")).await;
    send(&mut laptop, Message::text("for this phone")).await;
    expect_text(&mut handset, "for this phone").await;
}

#[tokio::test]
async fn forged_presence_frames_are_dropped_from_either_side() {
    let relay = TestRelay::start().await;
    let (mut laptop, mut handset, _) = pair(&relay).await;
    let forgeries = [
        notice("agent", "left"),
        r#"{ "state":"joined", "peer":"phone", "type" : "__peer" }"#.to_owned(),
        r#"{"type":"__peer"}"#.to_owned(),
    ];
    for forged in &forgeries {
        send(&mut handset, Message::text(forged.clone())).await;
        send(&mut laptop, Message::text(forged.clone())).await;
    }
    // Only text frames are looked into: the same bytes in a binary frame are data.
    send(&mut handset, Message::binary(forgeries[0].clone().into_bytes())).await;
    // Mentioning the marker in a field is fine.
    send(&mut handset, Message::text(r#"{"type":"say","text":"__peer"}"#)).await;
    send(&mut laptop, Message::text("after the forgeries")).await;

    assert_eq!(next(&mut laptop).await, Message::binary(forgeries[0].clone().into_bytes()));
    expect_text(&mut laptop, r#"{"type":"say","text":"__peer"}"#).await;
    expect_text(&mut handset, "after the forgeries").await;
}

#[tokio::test]
async fn a_newer_socket_replaces_the_older_one_with_4001() {
    let relay = TestRelay::start().await;
    let (mut old_laptop, mut handset, code) = pair(&relay).await;
    let mut new_laptop = agent(&relay, &code).await;

    let (code_seen, _) = expect_close(&mut old_laptop).await;
    assert_eq!(code_seen, 4001);
    expect_notice(&mut new_laptop, "phone", "joined").await;
    expect_notice(&mut handset, "agent", "left").await;
    expect_notice(&mut handset, "agent", "joined").await;

    send(&mut handset, Message::text("to the new laptop")).await;
    expect_text(&mut new_laptop, "to the new laptop").await;
    send(&mut new_laptop, Message::text("from the new laptop")).await;
    expect_text(&mut handset, "from the new laptop").await;

    // The same holds for phones.
    let mut new_handset = phone(&relay, &code).await;
    assert_eq!(expect_close(&mut handset).await.0, 4001);
    expect_notice(&mut new_handset, "agent", "joined").await;
    expect_notice(&mut new_laptop, "phone", "left").await;
    expect_notice(&mut new_laptop, "phone", "joined").await;
}

#[tokio::test]
async fn frames_without_a_peer_are_dropped_not_delivered_later() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    send(&mut laptop, Message::text("nobody hears this")).await;
    send(&mut laptop, Message::binary(vec![1, 2, 3])).await;
    // Round trip through the relay so both frames were surely read before the phone arrives.
    send(&mut laptop, Message::Ping(b"sync".to_vec().into())).await;
    assert_eq!(next_any(&mut laptop).await, Message::Pong(b"sync".to_vec().into()));

    let mut handset = phone(&relay, &code).await;
    expect_notice(&mut handset, "agent", "joined").await;
    expect_notice(&mut laptop, "phone", "joined").await;
    send(&mut laptop, Message::text("now heard")).await;
    expect_text(&mut handset, "now heard").await;
}

#[tokio::test]
async fn bad_requests_are_refused_before_any_upgrade() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let addr = relay.addr;

    assert_eq!(http(addr, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n").await, (200, "ok".into()));
    assert_eq!(http(addr, &upgrade_request("/nowhere", "")).await.0, 404);
    assert_eq!(http(addr, "POST /healthz HTTP/1.1\r\ncontent-length: 0\r\n\r\n").await.0, 405);
    let bad_codes = [
        String::new(),
        code.to_uppercase(),
        code[1..].to_owned(),
        format!("{code}0"),
        code.replace(|c: char| c.is_ascii_digit(), "z"),
        format!("%20{}", &code[3..]),
    ];
    for bad in &bad_codes {
        for path in ["/agent", "/ws"] {
            let (status, _) = http(addr, &upgrade_request(&format!("{path}?code={bad}"), "")).await;
            assert_eq!(status, 400, "{path} with code {bad:?}");
        }
    }
    assert_eq!(http(addr, &upgrade_request("/agent", "")).await.0, 400);
    // A plain GET of a socket path asks for the upgrade.
    let plain = format!("GET /ws?code={code} HTTP/1.1\r\nHost: relay\r\n\r\n");
    assert_eq!(http(addr, &plain).await.0, 426);
    // Junk instead of HTTP.
    assert_eq!(http(addr, "\x16\x03\x01 not http\r\n\r\n").await.0, 400);

    // And a real client sees the refusal as an HTTP error, not a socket.
    match try_connect(addr, "/agent?code=nothex", None).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 400),
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn relay_token_is_required_from_both_sides_when_set() {
    let token = "relay-token-4f1c9b";
    let relay =
        TestRelay::with_config(RelayConfig { token: Some(Secret::from_string(token.into())), ..Default::default() })
            .await;
    let code = new_code();
    for path in [format!("/agent?code={code}"), format!("/ws?code={code}")] {
        for presented in [None, Some("wrong"), Some("relay-token-4f1c9"), Some("relay-token-4f1c9bX")] {
            match try_connect(relay.addr, &path, presented).await {
                Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401, "{path} {presented:?}"),
                other => panic!("expected 401 for {presented:?}, got {other:?}"),
            }
        }
    }
    let (status, body) = http(relay.addr, &upgrade_request(&format!("/ws?code={code}"), "")).await;
    assert_eq!(status, 401);
    assert!(!body.contains(token));

    let mut laptop = try_connect(relay.addr, &format!("/agent?code={code}"), Some(token)).await.unwrap();
    let mut handset = try_connect(relay.addr, &format!("/ws?code={code}"), Some(token)).await.unwrap();
    expect_notice(&mut handset, "agent", "joined").await;
    expect_notice(&mut laptop, "phone", "joined").await;
    send(&mut handset, Message::text("authorised")).await;
    expect_text(&mut laptop, "authorised").await;
    // The health check stays open for load balancers.
    assert_eq!(http(relay.addr, "GET /healthz HTTP/1.1\r\n\r\n").await.0, 200);
}

#[tokio::test]
async fn frames_up_to_16_mib_pass_and_larger_ones_close_1009() {
    let relay = TestRelay::start().await;
    let (laptop, mut handset, _) = pair(&relay).await;
    let limit = voxa::protocol::MAX_FRAME_LEN;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();

    let largest: Vec<u8> = (0..limit).map(|i| (i % 251) as u8).collect();
    let sending = tokio::spawn(async move {
        laptop_tx.send(Message::binary(largest)).await.unwrap();
        let _ = laptop_tx.send(Message::binary(vec![0u8; limit + 1])).await;
        laptop_tx
    });
    match next(&mut handset).await {
        Message::Binary(payload) => {
            assert_eq!(payload.len(), limit);
            assert!(payload.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        }
        other => panic!("expected the 16 MiB frame, got {other:?}"),
    }
    let close = loop {
        match timeout(WAIT, laptop_rx.next()).await.expect("close in time") {
            Some(Ok(Message::Close(frame))) => break frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close, Some(CloseCode::Size));
    assert_eq!(u16::from(CloseCode::Size), 1009);
    expect_notice(&mut handset, "agent", "left").await;
    let _ = timeout(WAIT, sending).await;
}

#[tokio::test]
async fn a_reader_that_falls_behind_is_closed_1013_and_its_queue_stays_bounded() {
    const QUEUE: usize = 8;
    const FRAME: usize = 64 << 10;
    const SENT_AT_MOST: usize = 4096;
    let limits = Limits { send_queue_frames: QUEUE, stall_timeout: Duration::from_millis(300), ..Limits::default() };
    let relay = TestRelay::with_config(RelayConfig { limits, ..Default::default() }).await;
    let (laptop, mut handset, code) = pair(&relay).await;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();

    // The phone reads nothing while the laptop floods it.
    let mut sent = 0usize;
    let flood = async {
        while sent < SENT_AT_MOST {
            laptop_tx.send(Message::binary(vec![sent as u8; FRAME])).await.unwrap();
            sent += 1;
        }
    };
    let phone_left = async {
        loop {
            match timeout(WAIT, laptop_rx.next()).await.expect("notice in time") {
                Some(Ok(Message::Text(text))) if text.as_str() == notice("phone", "left") => return,
                Some(Ok(_)) => continue,
                other => panic!("laptop lost its socket: {other:?}"),
            }
        }
    };
    tokio::select! {
        () = flood => panic!("the relay buffered {SENT_AT_MOST} frames of {FRAME} bytes for a reader that reads nothing"),
        () = phone_left => {}
    }

    // Now the phone reads: what it gets is bounded by the queue and the kernel's socket buffers,
    // far below what was sent, and then the close frame.
    let (close, received) = expect_close(&mut handset).await;
    assert_eq!(close, 1013);
    assert!(received <= 512, "phone received {received} frames of {sent} sent: the relay's backlog is not bounded");
    assert!(sent > received + QUEUE, "sent {sent}, received {received}");

    // The laptop's socket is unharmed: a new phone pairs with it.
    let mut new_handset = phone(&relay, &code).await;
    expect_notice(&mut new_handset, "agent", "joined").await;
    timeout(WAIT, laptop_tx.send(Message::text("still here"))).await.unwrap().unwrap();
    loop {
        match next(&mut new_handset).await {
            Message::Text(text) if text.as_str() == "still here" => break,
            Message::Binary(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_dropped_within_the_idle_timeout() {
    let limits = Limits {
        ping_interval: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(800),
        ..Limits::default()
    };
    let relay = TestRelay::with_config(RelayConfig { limits, ..Default::default() }).await;
    let code = new_code();
    let mut handset = phone(&relay, &code).await;

    // The laptop upgrades by hand and then neither reads nor writes anything.
    let mut silent = TcpStream::connect(relay.addr).await.unwrap();
    silent.write_all(upgrade_request(&format!("/agent?code={code}"), "").as_bytes()).await.unwrap();
    expect_notice(&mut handset, "agent", "joined").await;
    // Keep the phone's socket read so it answers pings, while the silent laptop is dropped.
    let dropped = async {
        let mut received = Vec::new();
        timeout(WAIT, silent.read_to_end(&mut received)).await.expect("dropped in time").unwrap();
        received
    };
    let (received, ()) = tokio::join!(dropped, expect_notice(&mut handset, "agent", "left"));
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 101"), "{text:?}");
    let head_len = text.find("\r\n\r\n").unwrap() + 4;
    let frames = server_frames(&received[head_len..]);
    let opcodes: Vec<u8> = frames.iter().map(|(opcode, _)| *opcode).collect();
    // Pinged while silent, and dropped once the idle timeout had passed since it was last heard:
    // a ping goes out each quiet interval, so the count before the close measures the wait.
    let pings = opcodes.iter().filter(|op| **op == 0x9).count();
    let most = (limits.idle_timeout.as_millis() / limits.ping_interval.as_millis()) as usize + 1;
    assert!((2..=most).contains(&pings), "{pings} pings before the drop: {opcodes:?}");
    assert_eq!(
        frames.last().map(|(op, payload)| (*op, payload[..2].to_vec())),
        Some((0x8, 1001u16.to_be_bytes().to_vec()))
    );

    // A phone that answers pings (the client does so while reading) outlives several timeouts.
    let mut laptop = agent(&relay, &code).await;
    expect_notice(&mut handset, "agent", "joined").await;
    expect_notice(&mut laptop, "phone", "joined").await;
    // Twice as many pings as fit in the idle timeout: both sockets outlived it more than once.
    let enough = 2 * most;
    tokio::join!(answer_pings(&mut laptop, enough), answer_pings(&mut handset, enough));
    send(&mut laptop, Message::text("still paired")).await;
    expect_text(&mut handset, "still paired").await;
}

/// Reads `count` pings (the client answers them) and nothing else.
async fn answer_pings<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>, count: usize) {
    for _ in 0..count {
        match next_any(ws).await {
            Message::Ping(_) => {}
            other => panic!("a live socket got {other:?}"),
        }
    }
}

/// Splits what a relay wrote into (opcode, payload) frames; server frames are unmasked.
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while bytes.len() >= 2 {
        let (len, at) = match bytes[1] & 0x7F {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => (u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize, 10),
            short => (short as usize, 2),
        };
        frames.push((bytes[0] & 0x0F, bytes[at..at + len].to_vec()));
        bytes = &bytes[at + len..];
    }
    assert!(bytes.is_empty(), "trailing bytes {bytes:?}");
    frames
}

/// A self-signed certificate for localhost, written as PEM files.
struct TestCert {
    _dir: tempfile::TempDir,
    cert_path: std::path::PathBuf,
    key_path: std::path::PathBuf,
    der: CertificateDer<'static>,
}

fn test_cert() -> TestCert {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("relay.crt");
    let key_path = dir.path().join("relay.key");
    std::fs::write(&cert_path, certified.cert.pem()).unwrap();
    std::fs::write(&key_path, certified.signing_key.serialize_pem()).unwrap();
    TestCert { _dir: dir, cert_path, key_path, der: certified.cert.der().clone() }
}

fn tls_connector(trusted: Option<&CertificateDer<'static>>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(cert) = trusted {
        roots.add(cert.clone()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn connect_tls(
    addr: SocketAddr,
    connector: &tokio_rustls::TlsConnector,
    path: &str,
) -> anyhow::Result<Client<tokio_rustls::client::TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await?;
    let tls = timeout(WAIT, connector.connect(ServerName::try_from("localhost")?, tcp)).await??;
    Ok(connect_over(tls, &format!("wss://localhost:{}{path}", addr.port()), None).await?)
}

#[tokio::test]
async fn tls_relay_pairs_trusting_clients_and_refuses_the_rest() {
    let cert = test_cert();
    let tls = voxa::relay::load_tls(&cert.cert_path, &cert.key_path).unwrap();
    let relay = TestRelay::with_config(RelayConfig { tls: Some(tls), ..Default::default() }).await;
    let code = new_code();
    let trusting = tls_connector(Some(&cert.der));

    let mut laptop = connect_tls(relay.addr, &trusting, &format!("/agent?code={code}")).await.unwrap();
    let mut handset = connect_tls(relay.addr, &trusting, &format!("/ws?code={code}")).await.unwrap();
    expect_notice(&mut handset, "agent", "joined").await;
    expect_notice(&mut laptop, "phone", "joined").await;
    send(&mut handset, Message::text("over wss")).await;
    expect_text(&mut laptop, "over wss").await;
    send(&mut laptop, Message::binary(vec![7u8; 100_000])).await;
    assert_eq!(next(&mut handset).await, Message::binary(vec![7u8; 100_000]));

    let untrusting = tls_connector(None);
    let refused = connect_tls(relay.addr, &untrusting, &format!("/ws?code={code}")).await.unwrap_err();
    assert!(format!("{refused:#}").contains("certificate"), "{refused:#}");
    // Plain WebSocket on the TLS port gets nowhere either.
    assert!(try_connect(relay.addr, &format!("/ws?code={code}"), None).await.is_err());
    // The pair is undisturbed by both attempts.
    send(&mut laptop, Message::text("still secure")).await;
    expect_text(&mut handset, "still secure").await;
    relay.shut_down(WAIT).await;
}

#[tokio::test]
async fn shutdown_closes_every_socket_and_run_returns() {
    let relay = TestRelay::start().await;
    let addr = relay.addr;
    let (mut laptop, mut handset, _) = pair(&relay).await;
    // A connection that never sends its request head must not hold shutdown up either.
    let _idle = TcpStream::connect(addr).await.unwrap();
    let closes = tokio::spawn(async move {
        let (laptop_close, handset_close) = tokio::join!(expect_close(&mut laptop), expect_close(&mut handset));
        (laptop_close.0, handset_close.0)
    });
    let started = Instant::now();
    relay.shut_down(Duration::from_secs(3)).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(timeout(WAIT, closes).await.unwrap().unwrap(), (1001, 1001));
    assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed");
}

#[tokio::test]
async fn a_full_relay_refuses_new_connections() {
    let relay = TestRelay::with_config(RelayConfig { max_connections: 2, ..Default::default() }).await;
    let (mut laptop, mut handset, _) = pair(&relay).await;
    let mut extra = TcpStream::connect(relay.addr).await.unwrap();
    let mut response = Vec::new();
    timeout(WAIT, extra.read_to_end(&mut response)).await.unwrap().unwrap();
    assert_eq!(parse_response(&response).0, 503);
    // The pair keeps working.
    send(&mut laptop, Message::text("unaffected")).await;
    expect_text(&mut handset, "unaffected").await;
    // Once a socket leaves, its place is free again.
    drop(laptop);
    expect_notice(&mut handset, "agent", "left").await;
    let started = Instant::now();
    loop {
        // A refused connection may be reset before its 503 is read: that counts as "not yet".
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").await.unwrap();
        let mut response = Vec::new();
        if let Ok(Ok(_)) = timeout(WAIT, tcp.read_to_end(&mut response)).await {
            if parse_response(&response).0 == 200 {
                break;
            }
        }
        assert!(started.elapsed() < WAIT, "the relay never freed the connection");
        tokio::task::yield_now().await;
    }
}

/// `voxa relay` as a user runs it, in its own process.
struct RelayCommand {
    child: tokio::process::Child,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    addr: SocketAddr,
    /// Where it serves metrics, when started with `--metrics-listen`.
    metrics: Option<SocketAddr>,
    _home: tempfile::TempDir,
}

impl RelayCommand {
    async fn spawn(args: &[&str], envs: &[(&str, &str)]) -> RelayCommand {
        use tokio::io::AsyncBufReadExt;
        let home = tempfile::tempdir().unwrap();
        let mut command = tokio::process::Command::from(crate::support::voxa_cmd(home.path()));
        command.args(["relay", "--listen", "127.0.0.1:0", "--json"]).args(args);
        command.envs(envs.iter().copied());
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = timeout(WAIT, stdout.next_line()).await.unwrap().unwrap().expect("a listening event");
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(event["event"], "relay_listening", "{line}");
        let addr = event["listen"].as_str().unwrap().parse().unwrap();
        let metrics = event["metrics"].as_str().map(|url| {
            url.strip_prefix("http://").and_then(|rest| rest.strip_suffix("/metrics")).unwrap().parse().unwrap()
        });
        RelayCommand { child, stdout, addr, metrics, _home: home }
    }

    /// Sends SIGTERM and returns the exit status, the remaining stdout and all of stderr.
    async fn terminate(mut self) -> (std::process::ExitStatus, String, String) {
        let pid = rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let mut rest = String::new();
        while let Some(line) = timeout(WAIT, self.stdout.next_line()).await.unwrap().unwrap() {
            rest.push_str(&line);
            rest.push('\n');
        }
        let mut stderr = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut stderr).await.unwrap();
        let status = timeout(WAIT, self.child.wait()).await.unwrap().unwrap();
        (status, rest, stderr)
    }
}

#[tokio::test]
async fn relay_command_announces_its_address_relays_and_stops_on_sigterm() {
    let token = "cmd-relay-token-7d2e";
    let relay = RelayCommand::spawn(&[], &[("VOXA_RELAY_TOKEN", token), ("RUST_LOG", "trace")]).await;
    let code = new_code();
    let mut laptop = try_connect(relay.addr, &format!("/agent?code={code}"), Some(token)).await.unwrap();
    let mut handset = try_connect(relay.addr, &format!("/ws?code={code}"), Some(token)).await.unwrap();
    expect_notice(&mut handset, "agent", "joined").await;
    expect_notice(&mut laptop, "phone", "joined").await;
    send(&mut laptop, Message::text("through the binary")).await;
    expect_text(&mut handset, "through the binary").await;
    // Refusals and a forged notice also pass through the log paths.
    let refused = try_connect(relay.addr, &format!("/ws?code={code}"), Some("not-the-token")).await;
    assert!(refused.is_err());
    send(&mut handset, Message::text(notice("agent", "left"))).await;
    assert_eq!(http(relay.addr, &upgrade_request(&format!("/ws?code={}", code.to_uppercase()), "")).await.0, 401);

    let closes = tokio::spawn(async move {
        let (a, b) = tokio::join!(expect_close(&mut laptop), expect_close(&mut handset));
        (a.0, b.0)
    });
    let (status, stdout, stderr) = relay.terminate().await;
    assert!(status.success(), "{status:?} {stderr}");
    assert!(stdout.contains(r#""event":"relay_stopped""#), "{stdout}");
    assert_eq!(timeout(WAIT, closes).await.unwrap().unwrap(), (1001, 1001));
    // Even at trace level the log names connections by number and role only.
    let stderr = strip_ansi(&stderr);
    assert!(stderr.contains("conn=1 role=\"agent\""), "trace logging was on: {stderr}");
    for secret in [code.as_str(), &code.to_uppercase(), token, "not-the-token", "code="] {
        assert!(!stderr.contains(secret), "the log shows {secret:?}:\n{stderr}");
    }
}

/// The log without terminal colour sequences.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn relay_command_serves_wss_from_pem_files_and_refuses_bad_ones() {
    let cert = test_cert();
    let cert_arg = cert.cert_path.to_str().unwrap();
    let key_arg = cert.key_path.to_str().unwrap();
    let relay = RelayCommand::spawn(&["--tls-cert", cert_arg, "--tls-key", key_arg], &[]).await;
    let code = new_code();
    let mut laptop =
        connect_tls(relay.addr, &tls_connector(Some(&cert.der)), &format!("/agent?code={code}")).await.unwrap();
    let mut handset =
        connect_tls(relay.addr, &tls_connector(Some(&cert.der)), &format!("/ws?code={code}")).await.unwrap();
    expect_notice(&mut handset, "agent", "joined").await;
    send(&mut handset, Message::text("wss from the command line")).await;
    expect_notice(&mut laptop, "phone", "joined").await;
    expect_text(&mut laptop, "wss from the command line").await;
    drop((laptop, handset));
    let (status, _, _) = relay.terminate().await;
    assert!(status.success());

    // A missing or mismatched key is a configuration error (exit 2) that names the file.
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("missing.key");
    let output = crate::support::voxa(
        home.path(),
        &["relay", "--listen", "127.0.0.1:0", "--tls-cert", cert_arg, "--tls-key", missing.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing.key"), "{stderr}");
}

#[tokio::test]
async fn a_slow_upload_of_one_large_message_is_not_taken_for_silence() {
    let limits = Limits {
        ping_interval: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(800),
        ..Limits::default()
    };
    let relay = TestRelay::with_config(RelayConfig { limits, ..Default::default() }).await;
    let code = new_code();
    let mut handset = phone(&relay, &code).await;
    let mut laptop = TcpStream::connect(relay.addr).await.unwrap();
    laptop.write_all(upgrade_request(&format!("/agent?code={code}"), "").as_bytes()).await.unwrap();
    expect_notice(&mut handset, "agent", "joined").await;

    // One 20 KiB binary message trickling in over about 2 s, far past the idle timeout, from a
    // client that never reads (so never answers a ping): only the bytes themselves show life.
    let payload: Vec<u8> = (0..20 * 1024).map(|i| (i % 251) as u8).collect();
    let mut frame = vec![0x82, 0x80 | 126];
    frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]); // mask key: zero leaves the payload as it is
    let upload = async {
        laptop.write_all(&frame).await.unwrap();
        for chunk in payload.chunks(1024) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            laptop.write_all(chunk).await.unwrap();
        }
    };
    // The phone keeps reading (and so answers its pings) while the upload goes on.
    let (_, received) = tokio::join!(upload, next(&mut handset));
    match received {
        Message::Binary(received) => assert_eq!(received.as_ref(), &payload[..]),
        other => panic!("expected the uploaded message, got {other:?}"),
    }
}

// ---- metrics and limits under hostile clients ---------------------------------------------------

/// `GET /metrics`, as Prometheus scrapes it.
async fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of one sample (`name{labels}`) in a scrape; absent samples fail the test.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

/// Serves the relay's metrics on a listener of its own.
async fn serve_metrics(metrics: Arc<voxa::relay::metrics::RelayMetrics>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(voxa::relay::metrics::serve(listener, metrics, std::future::pending()));
    addr
}

/// A raw agent socket, upgraded, that writes whatever bytes the test gives it.
async fn raw_upgraded(addr: SocketAddr, path: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(upgrade_request(path, "").as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(timeout(WAIT, tcp.read(&mut byte)).await.unwrap().unwrap(), 1, "upgrade answered");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    tcp
}

/// The header of a masked binary frame of `len` bytes with a zero mask (payload sent as is).
fn binary_header(len: usize) -> Vec<u8> {
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(len as u64).to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]);
    header
}

/// Reads what the relay writes to a raw socket until its close frame, and returns the code.
async fn raw_close_code(tcp: &mut TcpStream) -> u16 {
    raw_close(tcp).await.expect("a close frame before the end of the connection")
}

/// The code of the relay's close frame on a raw socket, or `None` if the connection ends first.
async fn raw_close(tcp: &mut TcpStream) -> Option<u16> {
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = timeout(WAIT, tcp.read(&mut chunk)).await.expect("a close frame in time").unwrap_or(0);
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..n]);
        // Complete frames only: stop at the first close frame.
        let mut at = 0;
        while bytes.len() >= at + 2 {
            let (len, header) = match bytes[at + 1] & 0x7F {
                126 if bytes.len() >= at + 4 => (u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize, 4),
                127 if bytes.len() >= at + 10 => {
                    (u64::from_be_bytes(bytes[at + 2..at + 10].try_into().unwrap()) as usize, 10)
                }
                126 | 127 => break,
                short => (short as usize, 2),
            };
            if bytes.len() < at + header + len {
                break;
            }
            if bytes[at] & 0x0F == 0x8 {
                return Some(u16::from_be_bytes([bytes[at + header], bytes[at + header + 1]]));
            }
            at += header + len;
        }
    }
}

#[tokio::test]
async fn metrics_count_what_clients_did_and_never_show_a_code_or_token() {
    const PAIRS: usize = 12;
    const FRAMES: usize = 40;
    const PHONE_FRAME: usize = 100;
    let token = "metrics-relay-token-5b1f0c";
    let limits = Limits { max_frame_len: 64 << 10, ..Limits::default() };
    let config = RelayConfig { token: Some(Secret::from_string(token.into())), limits, ..Default::default() };
    let metrics_addr = serve_metrics(Arc::clone(&config.metrics)).await;
    let relay = TestRelay::with_config(config).await;
    let connect = |path: String| async move { try_connect(relay.addr, &path, Some(token)).await.unwrap() };

    // Refusals the test causes, one of each.
    let bearer = format!("Authorization: Bearer {token}\r\n");
    assert_eq!(http(relay.addr, &upgrade_request("/agent?code=XYZ", &bearer)).await.0, 400);
    let no_token = http(relay.addr, &upgrade_request(&format!("/ws?code={}", new_code()), "")).await;
    assert_eq!(no_token.0, 401);
    assert_eq!(http(relay.addr, &upgrade_request("/elsewhere", "")).await.0, 404);
    let too_big_code = new_code();
    let mut too_big = connect(format!("/agent?code={too_big_code}")).await;
    send(&mut too_big, Message::binary(vec![0u8; (64 << 10) + 1])).await;
    assert_eq!(expect_close(&mut too_big).await.0, 1009);

    let codes: Vec<String> = (0..PAIRS).map(|_| new_code()).collect();
    let mut sides = Vec::new();
    for code in &codes {
        let mut laptop = connect(format!("/agent?code={code}")).await;
        let mut handset = connect(format!("/ws?code={code}")).await;
        expect_notice(&mut handset, "agent", "joined").await;
        expect_notice(&mut laptop, "phone", "joined").await;
        sides.push((laptop, handset));
    }
    // One agent is replaced by a newer one (4001).
    let mut newer = connect(format!("/agent?code={}", codes[0])).await;
    expect_notice(&mut newer, "phone", "joined").await;
    assert_eq!(expect_close(&mut sides[0].0).await.0, 4001);
    sides[0].0 = newer;
    expect_notice(&mut sides[0].1, "agent", "left").await;
    expect_notice(&mut sides[0].1, "agent", "joined").await;

    // The load: each agent sends text frames of known sizes, each phone binary frames back.
    let text_frame = |pair: usize, i: usize| format!("pair {pair} frame {i} {}", "x".repeat(i));
    let mut load = tokio::task::JoinSet::new();
    for (pair, (laptop, handset)) in sides.into_iter().enumerate() {
        load.spawn(async move {
            let (mut laptop_tx, mut laptop_rx) = laptop.split();
            let (mut handset_tx, mut handset_rx) = handset.split();
            let sending = async {
                for i in 0..FRAMES {
                    laptop_tx.send(Message::text(text_frame(pair, i))).await.unwrap();
                    handset_tx.send(Message::binary(vec![i as u8; PHONE_FRAME])).await.unwrap();
                }
            };
            let receiving = async {
                for i in 0..FRAMES {
                    assert_eq!(next_data(&mut handset_rx).await, Message::text(text_frame(pair, i)));
                    assert_eq!(next_data(&mut laptop_rx).await, Message::binary(vec![i as u8; PHONE_FRAME]));
                }
            };
            tokio::join!(sending, receiving);
            (laptop_tx.reunite(laptop_rx).unwrap(), handset_tx.reunite(handset_rx).unwrap())
        });
    }
    let during = scrape(metrics_addr).await;
    let sides = timeout(WAIT * 3, load.join_all()).await.expect("load done");
    let after = scrape(metrics_addr).await;

    for text in [&during, &after] {
        for secret in codes.iter().chain([&too_big_code]).map(String::as_str).chain([token]) {
            for part in [secret, &secret[..16], &secret[16..]] {
                assert!(!text.contains(part), "a code or token in the metrics:\n{text}");
            }
        }
        assert_eq!(sample(text, "voxa_relay_pairs"), PAIRS as f64);
        assert_eq!(sample(text, r#"voxa_relay_sockets{role="agent"}"#), PAIRS as f64);
        assert_eq!(sample(text, r#"voxa_relay_sockets{role="phone"}"#), PAIRS as f64);
    }
    let text_bytes: usize = (0..PAIRS).flat_map(|pair| (0..FRAMES).map(move |i| text_frame(pair, i).len())).sum();
    let expect = [
        (r#"voxa_relay_frames_forwarded_total{direction="agent_to_phone"}"#, PAIRS * FRAMES),
        (r#"voxa_relay_bytes_forwarded_total{direction="agent_to_phone"}"#, text_bytes),
        (r#"voxa_relay_frames_forwarded_total{direction="phone_to_agent"}"#, PAIRS * FRAMES),
        (r#"voxa_relay_bytes_forwarded_total{direction="phone_to_agent"}"#, PAIRS * FRAMES * PHONE_FRAME),
        (r#"voxa_relay_refusals_total{reason="400"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="401"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="404"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="1009"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="4001"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="503"}"#, 0),
        (r#"voxa_relay_refusals_total{reason="1013"}"#, 0),
        (r#"voxa_relay_limit{limit="max_message_bytes"}"#, 64 << 10),
        (r#"voxa_relay_limit{limit="memory_budget_bytes"}"#, voxa::relay::MEMORY_BUDGET),
    ];
    for (series, value) in expect {
        assert_eq!(sample(&after, series), value as f64, "{series}");
    }
    assert!(after.contains("# TYPE voxa_relay_queue_full_events counter"), "{after}");

    // Sockets leaving show in the gauges.
    drop(sides);
    let deadline = Instant::now() + WAIT;
    while sample(&scrape(metrics_addr).await, r#"voxa_relay_sockets{role="phone"}"#) != 0.0 {
        assert!(Instant::now() < deadline, "sockets never left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let empty = scrape(metrics_addr).await;
    assert_eq!(sample(&empty, "voxa_relay_pairs"), 0.0);
    assert_eq!(sample(&empty, "voxa_relay_buffered_bytes"), 0.0);
}

/// The next data message from a split stream.
async fn next_data(stream: &mut futures_util::stream::SplitStream<Client>) -> Message {
    loop {
        match timeout(WAIT, stream.next()).await.expect("a frame in time").expect("open").expect("no error") {
            Message::Ping(_) | Message::Pong(_) => continue,
            message => return message,
        }
    }
}

/// Waits until the relay holds at least `bytes` against its memory budget.
async fn until_buffered(metrics: &voxa::relay::metrics::RelayMetrics, bytes: usize) {
    let deadline = Instant::now() + WAIT;
    while sample(&metrics.encode(), "voxa_relay_buffered_bytes") < bytes as f64 {
        assert!(Instant::now() < deadline, "the relay never held {bytes} bytes:\n{}", metrics.encode());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn over_the_memory_budget_the_oldest_heavy_socket_is_closed_1013_and_the_rest_go_on() {
    const MESSAGE: usize = 1 << 20;
    let limits = Limits { max_frame_len: MESSAGE, ..Limits::default() };
    let config = RelayConfig { limits, memory_budget: 2 * MESSAGE, ..Default::default() };
    let metrics = Arc::clone(&config.metrics);
    let relay = TestRelay::with_config(config).await;
    let payload: Vec<u8> = (0..MESSAGE).map(|i| (i % 251) as u8).collect();

    // Three agents each start a 1 MiB message and stop part-way; their phones wait for it.
    let mut agents = Vec::new();
    for (sent, held_after) in [(700 << 10, MESSAGE), (700 << 10, 2 * MESSAGE), (100 << 10, 2 * MESSAGE + 1)] {
        let code = new_code();
        let mut laptop = raw_upgraded(relay.addr, &format!("/agent?code={code}")).await;
        let mut handset = phone(&relay, &code).await;
        expect_notice(&mut handset, "agent", "joined").await;
        laptop.write_all(&binary_header(MESSAGE)).await.unwrap();
        laptop.write_all(&payload[..sent]).await.unwrap();
        if held_after <= 2 * MESSAGE {
            until_buffered(&metrics, held_after).await;
        }
        agents.push((laptop, handset, sent));
    }

    // The third pushed the relay over its budget: the oldest socket holding more than its share
    // (the first agent) is closed 1013 and its phone hears it left; nobody else is touched.
    let (mut first, mut first_phone, _) = agents.remove(0);
    assert_eq!(raw_close_code(&mut first).await, 1013);
    expect_notice(&mut first_phone, "agent", "left").await;
    for (mut laptop, mut handset, sent) in agents {
        laptop.write_all(&payload[sent..]).await.unwrap();
        match next(&mut handset).await {
            Message::Binary(got) => assert!(got.as_ref() == &payload[..], "message changed on the way"),
            other => panic!("expected the message, got {other:?}"),
        }
    }
    let text = metrics.encode();
    assert_eq!(sample(&text, r#"voxa_relay_refusals_total{reason="1013"}"#), 1.0, "{text}");
    assert_eq!(sample(&text, "voxa_relay_buffered_bytes"), 0.0, "{text}");
}

#[tokio::test]
async fn a_phone_that_reads_nothing_is_closed_1013_once_its_backlog_passes_the_budget() {
    const MESSAGE: usize = 1 << 20;
    // No stall timeout to rescue the relay: only the memory budget bounds the backlog.
    let limits = Limits { max_frame_len: MESSAGE, stall_timeout: Duration::from_secs(3600), ..Limits::default() };
    let config = RelayConfig { limits, memory_budget: 2 * MESSAGE, ..Default::default() };
    let metrics = Arc::clone(&config.metrics);
    let relay = TestRelay::with_config(config).await;
    let (laptop, mut handset, code) = pair(&relay).await;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();

    let flood = async {
        loop {
            laptop_tx.send(Message::binary(vec![7u8; 256 << 10])).await.unwrap();
        }
    };
    let phone_left = async {
        loop {
            match next_data(&mut laptop_rx).await {
                Message::Text(text) if text.as_str() == notice("phone", "left") => return,
                _ => continue,
            }
        }
    };
    tokio::select! {
        () = flood => unreachable!(),
        () = phone_left => {}
    }
    assert_eq!(expect_close(&mut handset).await.0, 1013);
    assert_eq!(sample(&metrics.encode(), r#"voxa_relay_refusals_total{reason="1013"}"#), 1.0);

    // The flooding agent itself goes on: a new phone pairs and hears from it.
    let mut new_handset = phone(&relay, &code).await;
    expect_notice(&mut new_handset, "agent", "joined").await;
    send_text(&mut laptop_tx, "still here").await;
    loop {
        match next(&mut new_handset).await {
            Message::Text(text) if text.as_str() == "still here" => break,
            Message::Binary(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

async fn send_text(sink: &mut futures_util::stream::SplitSink<Client, Message>, text: &str) {
    timeout(WAIT, sink.send(Message::text(text))).await.expect("send in time").unwrap();
}

#[tokio::test]
async fn one_address_cannot_hold_every_connection() {
    const PER_IP: usize = 3;
    let config = RelayConfig { max_connections_per_ip: PER_IP, ..Default::default() };
    let metrics = Arc::clone(&config.metrics);
    let relay = TestRelay::with_config(config).await;
    // Connections that send nothing at all, as a slot-hoarding client would open them.
    let mut idle = Vec::new();
    for _ in 0..PER_IP {
        idle.push(TcpStream::connect(relay.addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(relay.addr).await.unwrap();
    let mut response = Vec::new();
    timeout(WAIT, extra.read_to_end(&mut response)).await.unwrap().unwrap();
    assert_eq!(parse_response(&response).0, 429);
    assert_eq!(sample(&metrics.encode(), r#"voxa_relay_refusals_total{reason="429"}"#), 1.0);

    // One of them leaves: its place is free for the same address again.
    drop(idle.pop());
    let deadline = Instant::now() + WAIT;
    loop {
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").await.unwrap();
        let mut response = Vec::new();
        if let Ok(Ok(_)) = timeout(WAIT, tcp.read_to_end(&mut response)).await {
            if !response.is_empty() && parse_response(&response).0 == 200 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the relay never freed the address's place");
        tokio::task::yield_now().await;
    }
}

/// Memory of a process, in bytes, from one `/proc/<pid>/status` field (`VmRSS`, `VmData`).
fn proc_memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    kib * 1024
}

#[tokio::test]
async fn announcing_large_messages_costs_the_relay_only_what_arrives() {
    const SOCKETS: usize = 100;
    const ANNOUNCED: usize = 16 << 20;
    let relay = RelayCommand::spawn(&["--max-connections-per-ip", "0", "--metrics-listen", "127.0.0.1:0"], &[]).await;
    let metrics_port = relay.metrics.expect("the relay announces its metrics address");
    let pid = relay.child.id().unwrap();
    let mut sockets = Vec::new();
    for _ in 0..SOCKETS {
        sockets.push(raw_upgraded(relay.addr, &format!("/agent?code={}", new_code())).await);
    }
    let before = proc_memory(pid, "VmData");
    // Each announces the largest message and sends 1 KiB of it.
    for socket in &mut sockets {
        socket.write_all(&binary_header(ANNOUNCED)).await.unwrap();
        socket.write_all(&[1u8; 1024]).await.unwrap();
    }
    // The relay has read them all once it accounts for a first buffer per socket.
    let deadline = Instant::now() + WAIT;
    while sample(&scrape(metrics_port).await, "voxa_relay_buffered_bytes") < (SOCKETS * 1024) as f64 {
        assert!(Instant::now() < deadline, "the relay never read the announcements");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let grown = proc_memory(pid, "VmData").saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "{SOCKETS} announcements of {} MiB took {} MiB of the relay's address space",
        ANNOUNCED >> 20,
        grown >> 20
    );
    drop(sockets);
    let (status, _, _) = relay.terminate().await;
    assert!(status.success());
}

#[tokio::test]
async fn sockets_holding_most_of_a_large_message_cannot_take_the_relay_past_its_budget() {
    const SOCKETS: usize = 16;
    const MESSAGE: usize = 16 << 20;
    const SENT: usize = 15 << 20;
    const BUDGET_MIB: u64 = 64;
    let relay = RelayCommand::spawn(&["--max-connections-per-ip", "0", "--memory-budget", "64"], &[]).await;
    let pid = relay.child.id().unwrap();
    let baseline = proc_memory(pid, "VmRSS");
    let chunk = vec![3u8; 1 << 20];
    let mut flooding = tokio::task::JoinSet::new();
    for _ in 0..SOCKETS {
        let mut socket = raw_upgraded(relay.addr, &format!("/agent?code={}", new_code())).await;
        let chunk = chunk.clone();
        flooding.spawn(async move {
            socket.write_all(&binary_header(MESSAGE)).await.unwrap();
            // A socket the relay closed may still take bytes (it reads and drops them) or fail.
            for _ in 0..SENT / chunk.len() {
                if socket.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            socket
        });
    }
    let sockets = timeout(WAIT * 6, flooding.join_all()).await.expect("floods finish");
    // Every socket has sent all it will: what the relay holds now is its peak.
    let rss = proc_memory(pid, "VmRSS");
    let mut closed = 0;
    for mut socket in sockets {
        socket.shutdown().await.ok();
        match raw_close(&mut socket).await {
            Some(1013) => closed += 1,
            Some(other) => panic!("unexpected close {other}"),
            None => {}
        }
    }
    let held_at_most = (BUDGET_MIB as usize) / (MESSAGE >> 20);
    assert!(closed >= SOCKETS - held_at_most, "only {closed} of {SOCKETS} floods were closed 1013");
    let bound = baseline + ((BUDGET_MIB + 48) << 20);
    assert!(
        rss < bound,
        "{SOCKETS} sockets sending {} MiB each took the relay to {} MiB (bound {} MiB)",
        SENT >> 20,
        rss >> 20,
        bound >> 20
    );
    let (status, _, _) = relay.terminate().await;
    assert!(status.success());
}

#[tokio::test]
async fn a_sharded_relay_pairs_sockets_whichever_shard_accepted_them_and_stops() {
    const PAIRS: usize = 40;
    let first = voxa::relay::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = first.local_addr().unwrap();
    let listeners = vec![first, voxa::relay::bind_shared(addr).unwrap(), voxa::relay::bind_shared(addr).unwrap()];
    let stop = tokio_util::sync::CancellationToken::new();
    let config = RelayConfig { max_connections_per_ip: 0, ..Default::default() };
    let metrics = Arc::clone(&config.metrics);
    let relay = tokio::task::spawn_blocking({
        let stop = stop.clone();
        move || voxa::relay::run_sharded(listeners, config, stop)
    });
    // The kernel spreads these connections over the three listeners; each pair still meets.
    let mut pairs = Vec::new();
    for n in 0..PAIRS {
        let code = new_code();
        let mut laptop = try_connect(addr, &format!("/agent?code={code}"), None).await.unwrap();
        let mut handset = try_connect(addr, &format!("/ws?code={code}"), None).await.unwrap();
        expect_notice(&mut handset, "agent", "joined").await;
        expect_notice(&mut laptop, "phone", "joined").await;
        send(&mut laptop, Message::text(format!("to phone {n}"))).await;
        send(&mut handset, Message::binary(vec![n as u8; 64])).await;
        pairs.push((laptop, handset));
    }
    for (n, (laptop, handset)) in pairs.iter_mut().enumerate() {
        expect_text(handset, &format!("to phone {n}")).await;
        assert_eq!(next(laptop).await, Message::binary(vec![n as u8; 64]));
    }
    assert_eq!(sample(&metrics.encode(), "voxa_relay_pairs"), PAIRS as f64);
    assert_eq!(http(addr, "GET /healthz HTTP/1.1\r\n\r\n").await.0, 200);

    stop.cancel();
    // Every socket is closed 1001 (and answers, so the relay need not wait for it).
    let closes = futures_util::future::join_all(
        pairs
            .iter_mut()
            .flat_map(|(laptop, handset)| [laptop, handset])
            .map(|socket| async move { expect_close(socket).await.0 }),
    );
    assert!(closes.await.iter().all(|code| *code == 1001));
    drop(pairs);
    timeout(WAIT, relay).await.expect("the shards stop").unwrap().unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "every listener is closed");
}
