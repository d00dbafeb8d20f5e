//! Clients of a relay for the relay's tests (docs/PROTOCOL.md, "Relay"): WebSocket clients as the
//! laptop (in the relay framing, `voxa-relay.2`) and the phones, what the relay tells each, raw
//! TCP clients where a misbehaving peer is the point, a metrics scrape's samples, and
//! `voxa relay` as a user runs it ([`RelayCommand`]).

use std::collections::HashMap;
use std::net::SocketAddr;

use futures_util::{SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;
use voxa::protocol::relay::{self as relay_framing, Kind, Presence, SUBPROTOCOL};
use voxa::protocol::{PeerRole, PeerState};
use voxa::secret::Secret;

use crate::support::harness::{upgrade_request, TestRelay, STEP as WAIT};

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
            // No relay test sends push receipts (tests/it/push.rs does).
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

/// The value of one sample (`name{labels}`) in a scrape; absent samples fail the test.
pub(crate) fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
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

/// `voxa relay` as a user runs it, in its own process.
pub(crate) struct RelayCommand {
    pub child: tokio::process::Child,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    pub addr: SocketAddr,
    _home: tempfile::TempDir,
}

impl RelayCommand {
    pub async fn spawn(args: &[&str], envs: &[(&str, &str)]) -> RelayCommand {
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
        RelayCommand { child, stdout, addr, _home: home }
    }

    /// Sends SIGTERM and returns the exit status, the remaining stdout and all of stderr.
    pub async fn terminate(mut self) -> (std::process::ExitStatus, String, String) {
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
