//! The relay (docs/PROTOCOL.md, "Relay") on 127.0.0.1:0, driven by real WebSocket clients as the laptop and the
//! phones would drive it, plus raw TCP clients where a misbehaving peer is the point. The laptop's side speaks
//! the relay framing (`voxa-relay.2`); limits, metrics and memory are in `relay_limits`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::{SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;
use voxa::protocol::relay::{self as relay_framing, Kind, Presence, MAX_PHONES_PER_CODE, SUBPROTOCOL};
use voxa::protocol::{PeerRole, PeerState};
use voxa::relay::RelayConfig;

use crate::support::harness::{bare_upgrade_request, http, upgrade_request, TestRelay, STEP as WAIT};
use voxa::secret::Secret;

pub(crate) fn new_code() -> String {
    Secret::generate().unwrap().expose().to_owned()
}

pub(crate) type Client<S = TcpStream> = WebSocketStream<S>;

fn client_config() -> WebSocketConfig {
    WebSocketConfig::default().max_message_size(None).max_frame_size(None)
}

/// A WebSocket over `stream`; a request for `/agent` offers the relay framing, as agents do.
pub(crate) async fn connect_over<S>(stream: S, url: &str, token: Option<&str>) -> Result<Client<S>, tungstenite::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut request = url.into_client_request()?;
    if let Some(token) = token {
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    if request.uri().path() == "/agent" {
        request.headers_mut().insert("sec-websocket-protocol", SUBPROTOCOL.parse().unwrap());
    }
    let (ws, _) = timeout(WAIT, tokio_tungstenite::client_async_with_config(request, stream, Some(client_config())))
        .await
        .expect("handshake in time")?;
    Ok(ws)
}

pub(crate) async fn try_connect(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<Client, tungstenite::Error> {
    let tcp = TcpStream::connect(addr).await?;
    connect_over(tcp, &format!("ws://{addr}{path}"), token).await
}

pub(crate) async fn agent(relay: &TestRelay, code: &str) -> Client {
    try_connect(relay.addr, &format!("/agent?code={code}"), None).await.unwrap()
}

pub(crate) async fn phone(relay: &TestRelay, code: &str) -> Client {
    try_connect(relay.addr, &format!("/ws?code={code}"), None).await.unwrap()
}

/// The next message, pings and pongs included, failing the test on timeout, end or error.
pub(crate) async fn next_any<S>(ws: &mut S) -> Message
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    timeout(WAIT, ws.next()).await.expect("a message in time").expect("stream still open").expect("no error")
}

/// The next data or close message (the client answers the relay's pings by itself).
pub(crate) async fn next<S>(ws: &mut S) -> Message
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    loop {
        match next_any(ws).await {
            Message::Ping(_) | Message::Pong(_) => continue,
            message => return message,
        }
    }
}

pub(crate) async fn expect_text<S>(ws: &mut S, expected: &str)
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    match next(ws).await {
        Message::Text(text) => assert_eq!(text.as_str(), expected),
        other => panic!("expected text {expected:?}, got {other:?}"),
    }
}

/// The relay's notice to a phone that the agent joined or left.
pub(crate) fn presence(state: PeerState) -> String {
    Presence::new(PeerRole::Agent, state).to_text()
}

pub(crate) async fn expect_presence<S>(ws: &mut S, state: PeerState)
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    expect_text(ws, &presence(state)).await;
}

/// What an agent reads on its socket, a phone's parts put together.
#[derive(Debug, PartialEq)]
pub(crate) enum FromRelay {
    Joined(u32),
    Left(u32),
    Frame(u32, Message),
}

/// The next thing the relay tells an agent: a phone joining or leaving, or a phone's frame
/// (its `PART`s put together, each part checked to come in the relay's framing).
pub(crate) async fn relayed<S>(ws: &mut S) -> FromRelay
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    let mut parts: HashMap<u32, Vec<u8>> = HashMap::new();
    loop {
        let data = match next(ws).await {
            Message::Binary(data) => data,
            other => panic!("an agent gets binary messages only, got {other:?}"),
        };
        let (kind, peer, payload) = relay_framing::split(&data).expect("a relay-framed message");
        let mut whole = || {
            let mut whole = parts.remove(&peer).unwrap_or_default();
            whole.extend_from_slice(payload);
            whole
        };
        return match kind {
            Kind::Joined => FromRelay::Joined(peer),
            Kind::Left => FromRelay::Left(peer),
            Kind::Part => {
                parts.entry(peer).or_default().extend_from_slice(payload);
                continue;
            }
            Kind::Text => FromRelay::Frame(peer, Message::text(String::from_utf8(whole()).expect("UTF-8 text"))),
            Kind::Binary => FromRelay::Frame(peer, Message::binary(whole())),
            // No test here sends push receipts (tests/it/push.rs does).
            Kind::Receipt => continue,
            Kind::ClosePeer | Kind::Proven => panic!("the relay never sends what only agents send"),
        };
    }
}

/// Waits for a phone to join; its peer id.
pub(crate) async fn expect_joined<S>(ws: &mut S) -> u32
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    match relayed(ws).await {
        FromRelay::Joined(peer) => peer,
        other => panic!("expected a phone to join, got {other:?}"),
    }
}

pub(crate) async fn expect_left<S>(ws: &mut S, peer: u32)
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    assert_eq!(relayed(ws).await, FromRelay::Left(peer));
}

/// Waits for `expected` from phone `peer`.
pub(crate) async fn expect_from<S>(ws: &mut S, peer: u32, expected: Message)
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    assert_eq!(relayed(ws).await, FromRelay::Frame(peer, expected));
}

/// A frame for phone `peer`, as the agent sends it.
pub(crate) fn to(peer: u32, message: Message) -> Message {
    match message {
        Message::Text(text) => Message::binary(relay_framing::message(Kind::Text, peer, text.as_bytes())),
        Message::Binary(data) => Message::binary(relay_framing::message(Kind::Binary, peer, &data)),
        other => other,
    }
}

/// Reads until the close frame and returns its code; other messages are counted.
pub(crate) async fn expect_close<S>(ws: &mut S) -> (u16, usize)
where
    S: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
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

pub(crate) async fn send<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>, message: Message) {
    timeout(WAIT, ws.send(message)).await.expect("send in time").expect("send works");
}

/// Connects an agent and a phone on a fresh code and reads the notices; the phone's peer id.
pub(crate) async fn pair(relay: &TestRelay) -> (Client, Client, String, u32) {
    let code = new_code();
    let mut laptop = agent(relay, &code).await;
    let mut handset = phone(relay, &code).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    (laptop, handset, code, peer)
}

fn numbered_frame(from: &str, i: usize) -> Message {
    if i % 2 == 0 {
        Message::text(format!("{from} {i} ünïcode"))
    } else {
        Message::binary((0..i % 700).map(|b| (b + i) as u8).collect::<Vec<u8>>())
    }
}

/// The value of one sample (`name{labels}`) in a scrape; absent samples fail the test.
pub(crate) fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

#[tokio::test]
async fn copies_text_and_binary_both_ways_unchanged_and_in_order() {
    const FRAMES: usize = 1000;
    let relay = TestRelay::start().await;
    let (laptop, handset, _, peer) = pair(&relay).await;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();
    let (mut handset_tx, mut handset_rx) = handset.split();
    let laptop_sends = async {
        for i in 0..FRAMES {
            laptop_tx.feed(to(peer, numbered_frame("agent", i))).await.unwrap();
        }
        timeout(WAIT, laptop_tx.flush()).await.unwrap().unwrap();
    };
    let handset_sends = async {
        for i in 0..FRAMES {
            handset_tx.feed(numbered_frame("phone", i)).await.unwrap();
        }
        timeout(WAIT, handset_tx.flush()).await.unwrap().unwrap();
    };
    let handset_gets = async {
        for i in 0..FRAMES {
            assert_eq!(next(&mut handset_rx).await, numbered_frame("agent", i), "frame {i} from the agent");
        }
    };
    let laptop_gets = async {
        for i in 0..FRAMES {
            assert_eq!(relayed(&mut laptop_rx).await, FromRelay::Frame(peer, numbered_frame("phone", i)), "frame {i}");
        }
    };
    tokio::join!(laptop_sends, handset_sends, handset_gets, laptop_gets);
    relay.shut_down(WAIT).await;
}

#[tokio::test]
async fn each_side_hears_when_the_other_joins_and_leaves() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    // A phone arriving second hears about the agent already there, and the agent about it.
    let mut handset = phone(&relay, &code).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    let first = expect_joined(&mut laptop).await;

    handset.close(None).await.unwrap();
    expect_left(&mut laptop, first).await;

    let mut handset = phone(&relay, &code).await;
    let second = expect_joined(&mut laptop).await;
    assert_ne!(first, second, "a peer id is never reused");
    expect_presence(&mut handset, PeerState::Joined).await;

    // A vanished TCP connection (no close frame) counts as leaving too.
    drop(laptop);
    expect_presence(&mut handset, PeerState::Left).await;

    // Codes are independent: another pair never hears about this one.
    let (mut other_laptop, _other_handset, _, other_peer) = pair(&relay).await;
    let mut laptop = agent(&relay, &code).await;
    let peer = expect_joined(&mut laptop).await;
    assert_eq!(peer, second, "a new agent hears of the phone already there, by its id");
    expect_presence(&mut handset, PeerState::Joined).await;
    send(&mut other_laptop, to(other_peer, Message::text("only mine"))).await;
    send(&mut other_laptop, to(peer, Message::text("not even with its id"))).await;
    send(&mut laptop, to(peer, Message::text("for this phone"))).await;
    expect_text(&mut handset, "for this phone").await;
}

#[tokio::test]
async fn several_phones_share_a_code_each_with_its_own_frames_up_to_the_limit() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    let mut phones = Vec::new();
    for _ in 0..MAX_PHONES_PER_CODE {
        let mut handset = phone(&relay, &code).await;
        expect_presence(&mut handset, PeerState::Joined).await;
        phones.push((expect_joined(&mut laptop).await, handset));
    }
    // One more is refused: closed 4003 right after its upgrade; the others are undisturbed.
    let mut ninth = phone(&relay, &code).await;
    assert_eq!(expect_close(&mut ninth).await, (relay_framing::close::TOO_MANY_PHONES, 0));

    for (n, (peer, handset)) in phones.iter_mut().enumerate() {
        send(handset, Message::text(format!("from phone {n}"))).await;
        expect_from(&mut laptop, *peer, Message::text(format!("from phone {n}"))).await;
        send(&mut laptop, to(*peer, Message::binary(vec![n as u8; 3]))).await;
    }
    for (n, (_, handset)) in phones.iter_mut().enumerate() {
        assert_eq!(next(handset).await, Message::binary(vec![n as u8; 3]), "only its own frame");
    }
    // The agent closes one phone with a code and reason of its choosing.
    let (closed_peer, mut closed) = phones.remove(0);
    send(&mut laptop, Message::binary(relay_framing::close_peer(closed_peer, 1008, "executor-unauthenticated"))).await;
    match timeout(WAIT, closed.next()).await.unwrap() {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!((u16::from(frame.code), frame.reason.as_str()), (1008, "executor-unauthenticated"))
        }
        other => panic!("expected the agent's close, got {other:?}"),
    }
    expect_left(&mut laptop, closed_peer).await;
    // Its place is free again.
    let mut again = phone(&relay, &code).await;
    expect_presence(&mut again, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    send(&mut laptop, to(peer, Message::text("welcome"))).await;
    expect_text(&mut again, "welcome").await;
}

#[tokio::test]
async fn an_agent_without_the_relay_framing_is_refused_with_a_sentence() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let (status, body) = http(relay.addr, &bare_upgrade_request(&format!("/agent?code={code}"), "")).await;
    assert_eq!((status, body.as_str()), (426, relay_framing::OLD_AGENT_REFUSAL));
    assert!(body.contains("newer voxa agent"), "{body}");
    let older = "Sec-WebSocket-Protocol: voxa-relay.1\r\n";
    assert_eq!(http(relay.addr, &bare_upgrade_request(&format!("/agent?code={code}"), older)).await.0, 426);
    // A phone needs no subprotocol, and an agent offering it is told it was chosen.
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(upgrade_request(&format!("/agent?code={code}"), "").as_bytes()).await.unwrap();
    let mut head = vec![0u8; 512];
    let n = timeout(WAIT, tcp.read(&mut head)).await.unwrap().unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 101") && head.contains("sec-websocket-protocol: voxa-relay.2"), "{head}");
}

#[tokio::test]
async fn notices_cannot_be_forged_and_any_other_text_goes_through() {
    let relay = TestRelay::start().await;
    let (mut laptop, mut handset, _, peer) = pair(&relay).await;
    // An agent's text frame starting with U+0001 would be a notice to the phone: dropped.
    send(&mut laptop, to(peer, Message::text(presence(PeerState::Left)))).await;
    // A phone's is data to the agent, wrapped like every frame it sends: it cannot pose as the relay.
    send(&mut handset, Message::text(presence(PeerState::Left))).await;
    expect_from(&mut laptop, peer, Message::text(presence(PeerState::Left))).await;
    // JSON presence of old is an ordinary frame now, and so is text that is not JSON at all.
    for text in [r#"{"type":"__peer","peer":"agent","state":"left"}"#, r"C:\users\me", r#"{"path":"C:\users\me"}"#] {
        send(&mut handset, Message::text(text)).await;
        expect_from(&mut laptop, peer, Message::text(text)).await;
        send(&mut laptop, to(peer, Message::text(text))).await;
        expect_text(&mut handset, text).await;
    }
    // The same bytes in a binary frame are data both ways.
    send(&mut laptop, to(peer, Message::binary(presence(PeerState::Left).into_bytes()))).await;
    assert_eq!(next(&mut handset).await, Message::binary(presence(PeerState::Left).into_bytes()));
}

#[tokio::test]
async fn a_newer_agent_replaces_the_older_one_with_4001() {
    let relay = TestRelay::start().await;
    let (mut old_laptop, mut handset, code, peer) = pair(&relay).await;
    let mut new_laptop = agent(&relay, &code).await;

    let (code_seen, _) = expect_close(&mut old_laptop).await;
    assert_eq!(code_seen, 4001);
    assert_eq!(expect_joined(&mut new_laptop).await, peer);
    expect_presence(&mut handset, PeerState::Left).await;
    expect_presence(&mut handset, PeerState::Joined).await;

    send(&mut handset, Message::text("to the new laptop")).await;
    expect_from(&mut new_laptop, peer, Message::text("to the new laptop")).await;
    send(&mut new_laptop, to(peer, Message::text("from the new laptop"))).await;
    expect_text(&mut handset, "from the new laptop").await;

    // Phones do not replace each other: a second one joins beside the first.
    let mut second = phone(&relay, &code).await;
    expect_presence(&mut second, PeerState::Joined).await;
    let second_peer = expect_joined(&mut new_laptop).await;
    send(&mut new_laptop, to(peer, Message::text("still for the first"))).await;
    expect_text(&mut handset, "still for the first").await;
    send(&mut new_laptop, to(second_peer, Message::text("for the second"))).await;
    expect_text(&mut second, "for the second").await;
}

#[tokio::test]
async fn frames_without_a_peer_are_dropped_not_delivered_later() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    send(&mut laptop, to(1, Message::text("nobody hears this"))).await;
    send(&mut laptop, to(1, Message::binary(vec![1, 2, 3]))).await;
    // Round trip through the relay so both frames were surely read before the phone arrives.
    send(&mut laptop, Message::Ping(b"sync".to_vec().into())).await;
    assert_eq!(next_any(&mut laptop).await, Message::Pong(b"sync".to_vec().into()));

    let mut handset = phone(&relay, &code).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    send(&mut laptop, to(peer, Message::text("now heard"))).await;
    expect_text(&mut handset, "now heard").await;
}

/// Issue 30: with 256 KiB frames, a phone that took the place of one that left received part of
/// what the agent had sent the one before. Every frame is for one peer id now.
#[tokio::test]
async fn frames_for_a_phone_that_left_never_reach_the_phone_after_it() {
    const FRAME: usize = 256 << 10;
    const FRAMES: usize = 32;
    let relay = TestRelay::start().await;
    let (laptop, mut first, code, first_peer) = pair(&relay).await;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();
    // The first phone reads one frame, then the agent floods it while it leaves.
    laptop_tx.send(to(first_peer, Message::binary(vec![1u8; FRAME]))).await.unwrap();
    assert_eq!(next(&mut first).await, Message::binary(vec![1u8; FRAME]));
    let flood = tokio::spawn(async move {
        for _ in 0..FRAMES {
            if laptop_tx.send(to(first_peer, Message::binary(vec![1u8; FRAME]))).await.is_err() {
                break;
            }
        }
        laptop_tx
    });
    drop(first);
    let mut second = phone(&relay, &code).await;
    expect_presence(&mut second, PeerState::Joined).await;
    let second_peer = loop {
        match relayed(&mut laptop_rx).await {
            FromRelay::Left(peer) => assert_eq!(peer, first_peer),
            FromRelay::Joined(peer) => break peer,
            other => panic!("{other:?}"),
        }
    };
    let mut laptop_tx = timeout(WAIT, flood).await.unwrap().unwrap();
    laptop_tx.send(to(second_peer, Message::text("yours"))).await.unwrap();
    // The first thing the new phone gets is its own frame: none of the flood.
    assert_eq!(next(&mut second).await, Message::text("yours"));
}

#[tokio::test]
async fn every_ping_is_answered_even_ten_in_a_row() {
    let relay = TestRelay::start().await;
    let (mut laptop, mut handset, _, _) = pair(&relay).await;
    // Ten pings in one write, before the relay could answer any (Autobahn 2.10 and 2.11).
    for socket in [&mut handset, &mut laptop] {
        for n in 0..10u8 {
            socket.feed(Message::Ping(vec![n; 10].into())).await.unwrap();
        }
        socket.flush().await.unwrap();
        for n in 0..10u8 {
            assert_eq!(next_any(socket).await, Message::Pong(vec![n; 10].into()), "pong {n}");
        }
    }
}

/// A raw socket, upgraded, that writes whatever bytes the test gives it.
pub(crate) async fn raw_upgraded(addr: SocketAddr, path: &str) -> TcpStream {
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

/// The header of a masked frame of `len` bytes with a zero mask (payload sent as is).
pub(crate) fn frame_header(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
    let mut header = vec![if fin { 0x80 } else { 0 } | opcode, 0x80 | 127];
    header.extend_from_slice(&(len as u64).to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]);
    header
}

/// One server frame: FIN, opcode, payload.
pub(crate) type ServerFrame = (bool, u8, Vec<u8>);

/// The first complete server frame of `bytes` (server frames are unmasked) and the bytes it took,
/// or `None` while it is incomplete.
pub(crate) fn parse_server_frame(bytes: &[u8]) -> Option<(ServerFrame, usize)> {
    let (&b0, &b1) = (bytes.first()?, bytes.get(1)?);
    let (len, at) = match b1 & 0x7F {
        126 => (u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?) as usize, 4),
        127 => (u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize, 10),
        short => (short as usize, 2),
    };
    let payload = bytes.get(at..at + len)?;
    Some(((b0 & 0x80 != 0, b0 & 0x0F, payload.to_vec()), at + len))
}

/// Reads the relay's frames on a raw socket until `enough` says so, or the connection ends.
pub(crate) async fn read_server_frames(
    tcp: &mut TcpStream,
    mut enough: impl FnMut(&[ServerFrame]) -> bool,
) -> Vec<ServerFrame> {
    let (mut bytes, mut frames) = (Vec::new(), Vec::new());
    let mut chunk = vec![0u8; 64 << 10];
    while !enough(&frames) {
        let n = timeout(WAIT, tcp.read(&mut chunk)).await.expect("frames in time").unwrap_or(0);
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
        while let Some((frame, used)) = parse_server_frame(&bytes) {
            frames.push(frame);
            bytes.drain(..used);
        }
    }
    frames
}

/// Issue 30: the relay held whole messages. A phone's message now reaches the agent in parts as
/// it arrives, and a phone that dies in the middle of one is `LEFT` for the agent.
#[tokio::test]
async fn a_phones_message_goes_on_in_parts_as_it_arrives_and_a_phone_dying_mid_message_leaves() {
    const MESSAGE: usize = 1 << 20;
    const SENT: usize = 200 << 10;
    let config = RelayConfig::default();
    let metrics = Arc::clone(&config.metrics);
    let relay = TestRelay::with_config(config).await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    let mut handset = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
    let peer = expect_joined(&mut laptop).await;
    let payload: Vec<u8> = (0..SENT).map(|i| (i % 251) as u8).collect();
    handset.write_all(&frame_header(true, 0x2, MESSAGE)).await.unwrap();
    handset.write_all(&payload).await.unwrap();

    // Long before the message is complete, its first 200 KiB are at the agent, in parts.
    let mut got = Vec::new();
    while got.len() < SENT {
        let Message::Binary(data) = next(&mut laptop).await else { panic!("binary messages only") };
        let (kind, from, part) = relay_framing::split(&data).unwrap();
        assert_eq!((kind, from), (Kind::Part, peer));
        assert!(part.len() <= 16 << 10, "a part of {} bytes", part.len());
        got.extend_from_slice(part);
    }
    assert_eq!(got, payload);
    let held = sample(&metrics.encode(), "voxa_relay_buffered_bytes");
    assert!(held <= (64 << 10) as f64, "the relay holds {held} bytes of a message it forwards");

    // The phone's connection dies mid-message: the agent hears it left, and drops the part.
    drop(handset);
    expect_left(&mut laptop, peer).await;
}

/// And the other way: an agent's message reaches the phone as WebSocket fragments as it arrives;
/// an agent that dies in the middle of one closes the phone 4004 (the rest will never come).
#[tokio::test]
async fn an_agents_message_reaches_the_phone_in_fragments_and_an_agent_dying_mid_message_closes_it() {
    const MESSAGE: usize = 1 << 20;
    const SENT: usize = 200 << 10;
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = raw_upgraded(relay.addr, &format!("/agent?code={code}")).await;
    let mut handset = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
    // The phone hears the agent (a whole text frame), and its peer id arrives at the agent.
    let notice = read_server_frames(&mut handset, |frames| !frames.is_empty()).await;
    assert_eq!(notice, vec![(true, 0x1, presence(PeerState::Joined).into_bytes())]);
    let joined = read_server_frames(&mut laptop, |frames| !frames.is_empty()).await;
    let (kind, peer, _) = relay_framing::split(&joined[0].2).unwrap();
    assert_eq!(kind, Kind::Joined);

    let payload: Vec<u8> = (0..SENT).map(|i| (i % 251) as u8).collect();
    laptop.write_all(&frame_header(true, 0x2, relay_framing::HEADER_LEN + MESSAGE)).await.unwrap();
    laptop.write_all(&relay_framing::header(Kind::Binary, peer)).await.unwrap();
    laptop.write_all(&payload).await.unwrap();
    let received = |frames: &[ServerFrame]| frames.iter().map(|(_, _, data)| data.len()).sum::<usize>();
    let frames = read_server_frames(&mut handset, |frames| received(frames) >= SENT).await;
    assert_eq!(frames[0].1, 0x2, "the first fragment says binary");
    assert!(frames.iter().all(|(fin, _, _)| !fin), "no fragment ends a message that has not ended");
    assert!(frames[1..].iter().all(|(_, opcode, _)| *opcode == 0x0), "the rest are continuations");
    assert_eq!(frames.iter().flat_map(|(_, _, data)| data.clone()).collect::<Vec<u8>>(), payload);

    drop(laptop);
    let rest = read_server_frames(&mut handset, |frames| frames.iter().any(|(_, opcode, _)| *opcode == 0x8)).await;
    let close = rest.iter().find(|(_, opcode, _)| *opcode == 0x8).expect("a close frame");
    assert_eq!(u16::from_be_bytes([close.2[0], close.2[1]]), relay_framing::close::PEER_GONE_MID_MESSAGE);
}

/// A phone that starts a message before the agent arrives: the agent never sees its tail as a
/// frame of its own.
#[tokio::test]
async fn a_message_begun_before_the_agent_came_is_not_delivered_in_half() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut handset = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
    handset.write_all(&frame_header(false, 0x1, 5)).await.unwrap();
    handset.write_all(b"{\"hal").await.unwrap();
    // A ping answered means the relay has read the first part.
    handset.write_all(&[0x89, 0x80, 0, 0, 0, 0]).await.unwrap();
    read_server_frames(&mut handset, |frames| frames.iter().any(|(_, opcode, _)| *opcode == 0xA)).await;
    let mut laptop = agent(&relay, &code).await;
    let peer = expect_joined(&mut laptop).await;
    handset.write_all(&frame_header(true, 0x0, 4)).await.unwrap();
    handset.write_all(b"f\":1").await.unwrap();
    handset.write_all(&frame_header(true, 0x1, 6)).await.unwrap();
    handset.write_all(b"whole!").await.unwrap();
    expect_from(&mut laptop, peer, Message::text("whole!")).await;
}
