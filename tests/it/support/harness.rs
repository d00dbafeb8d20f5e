//! In-process relay, agent and phone for the network tests: everything on 127.0.0.1:0.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use voxa::agent::{link_events, AgentOptions, BackoffPolicy, LinkEvent, RunningAgent};
use voxa::config::{Config, RelayUrl};
use voxa::net::dial::{ClientSocket, DialOptions};
use voxa::net::liveness::Heartbeat;
use voxa::state::{Home, Secrets};

/// Creates the home `home` (0700) holding `config` as its `config.toml` (0600), the modes voxa
/// asks of files that may hold secrets.
pub fn write_home_config(home: &std::path::Path, config: &str) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().mode(0o700).create(home).unwrap();
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(home.join("config.toml")).unwrap();
    std::io::Write::write_all(&mut file, config.as_bytes()).unwrap();
}

/// Longest any single step of a test may take before it fails.
pub const STEP: Duration = Duration::from_secs(10);

/// A relay running in this process; dropping it aborts the relay.
pub struct TestRelay {
    pub addr: SocketAddr,
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

impl TestRelay {
    pub async fn start() -> TestRelay {
        Self::with_config(voxa::relay::RelayConfig::default()).await
    }

    /// A relay with `config` on a free loopback port, bound before `run` starts so clients can
    /// connect at once.
    pub async fn with_config(config: voxa::relay::RelayConfig) -> TestRelay {
        Self::start_with(TcpListener::bind("127.0.0.1:0").await.unwrap(), config).await
    }

    pub async fn start_with(listener: TcpListener, config: voxa::relay::RelayConfig) -> TestRelay {
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let shutdown = stop.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            voxa::relay::run(listener, config, shutdown).await.unwrap();
        });
        TestRelay { addr, stop, task }
    }

    pub fn url(&self) -> RelayUrl {
        RelayUrl::parse(&format!("http://{}", self.addr)).unwrap()
    }

    /// Stops the relay and waits until its listener is closed.
    pub async fn kill(self) {
        self.shut_down(STEP).await;
    }

    /// Asks the relay to stop and waits up to `within` for `run` to return.
    pub async fn shut_down(mut self, within: Duration) {
        self.stop.cancel();
        tokio::time::timeout(within, &mut self.task).await.expect("run returns promptly after shutdown").unwrap();
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A relay serving TLS with a fresh self-signed certificate for `localhost`; returns the relay
/// and the certificate's PEM file.
pub async fn tls_relay(dir: &std::path::Path) -> (TestRelay, std::path::PathBuf) {
    tls_relay_named(dir, &["localhost"]).await
}

/// A TLS relay whose self-signed certificate names `names`; returns it and the certificate file.
pub async fn tls_relay_named(dir: &std::path::Path, names: &[&str]) -> (TestRelay, std::path::PathBuf) {
    let names = names.iter().map(|name| name.to_string()).collect::<Vec<_>>();
    let certified = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = dir.join("relay.crt");
    let key = dir.join("relay.key");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let config =
        voxa::relay::RelayConfig { tls: Some(voxa::relay::load_tls(&cert, &key).unwrap()), ..Default::default() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    (TestRelay::start_with(listener, config).await, cert)
}

/// A minimal HTTP CONNECT proxy that sends every tunnel to `target` and records what was asked.
pub async fn connect_proxy(
    target: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (asked_tx, asked_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let asked_tx = asked_tx.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let request_line = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_owned();
                let _ = asked_tx.send(request_line);
                let mut upstream = tokio::net::TcpStream::connect(target).await.unwrap();
                client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (addr, asked_rx)
}

/// A loopback WebSocket server playing protocol 2 as well as it can without the token: a
/// challenge, then a `hello_ok` with a made-up proof. Returns its port and, per connection, the
/// text frames it received.
pub async fn impostor_agent() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let sessions: std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>> = Default::default();
    let recorded = sessions.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(tcp).await else { return };
                let challenge = "00000000000000000000000000000000";
                let _ = socket
                    .send(Message::text(json!({"type":"challenge","protocol":2,"nonce": challenge}).to_string()))
                    .await;
                let mut frames = Vec::new();
                while let Some(Ok(frame)) = socket.next().await {
                    let Message::Text(text) = frame else { continue };
                    let value: Value = serde_json::from_str(&text).unwrap_or_default();
                    if value["type"] == "hello" {
                        let ok = json!({"type":"hello_ok","protocol":2,"agent":"voxa/0","mode":"hosted","tools":[],"proof":"ab".repeat(32)});
                        let _ = socket.send(Message::text(ok.to_string())).await;
                    }
                    frames.push(text.to_string());
                }
                recorded.lock().unwrap().push(frames);
            });
        }
    });
    (port, sessions)
}

/// An agent running in this process with its own home and workspace.
pub struct TestAgent {
    pub home: TempDir,
    pub workspace: TempDir,
    pub secrets: Secrets,
    pub agent: RunningAgent,
    /// What the agent's relay link reports, from its start.
    pub events: broadcast::Receiver<LinkEvent>,
}

/// Short timings so reconnect tests finish quickly.
pub fn fast_backoff() -> BackoffPolicy {
    BackoffPolicy {
        base: Duration::from_millis(100),
        cap: Duration::from_millis(500),
        healthy_after: Duration::from_millis(200),
    }
}

pub fn options(home: &TempDir, workspace: &TempDir, relay: Option<RelayUrl>) -> (AgentOptions, Secrets) {
    let home = Home::at(home.path().join("voxa"));
    let (secrets, _) = home.load_or_create_secrets().unwrap();
    let options = AgentOptions {
        home,
        secrets: secrets.clone(),
        relay,
        extra_relays: Vec::new(),
        workspace: workspace.path().canonicalize().unwrap(),
        config: Config::default(),
        dial: DialOptions::default(),
        heartbeat: Heartbeat::default(),
        backoff: fast_backoff(),
        gemini: None,
        events: link_events(),
        retired_window: voxa::agent::retired::RETIRED_CODE_WINDOW,
        // A test holds no inhibitor unless it asks (tests/it/reach.rs gives it a test logind).
        awake: voxa::agent::awake::AwakeOptions { inhibitor: voxa::agent::awake::Inhibitor::Off, ..Default::default() },
    };
    (options, secrets)
}

impl TestAgent {
    pub async fn start(relay: Option<RelayUrl>) -> TestAgent {
        Self::start_with(relay, |_| {}).await
    }

    pub async fn start_with(relay: Option<RelayUrl>, tweak: impl FnOnce(&mut AgentOptions)) -> TestAgent {
        let home = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let (mut options, secrets) = options(&home, &workspace, relay);
        tweak(&mut options);
        let events = options.events.subscribe();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent = voxa::agent::start(options, listener, CancellationToken::new()).await.unwrap();
        TestAgent { home, workspace, secrets, agent, events }
    }

    /// Skips the agent's link events until one matches; fails the test after [`STEP`].
    pub async fn wait_event(&mut self, what: &str, matches: impl Fn(&LinkEvent) -> bool) -> LinkEvent {
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) if matches(&event) => return event,
                Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(broadcast::error::RecvError::Closed)) => panic!("the agent's links ended before {what}"),
                Err(_) => panic!("the agent did not report {what} in time"),
            }
        }
    }

    pub fn token(&self) -> &str {
        self.secrets.auth_token.expose()
    }

    pub fn code(&self) -> &str {
        self.secrets.relay_code.expose()
    }

    pub fn loopback_url(&self) -> String {
        format!("ws://{}/", self.agent.loopback)
    }

    /// A local client that has completed the hello.
    pub async fn local_client(&self) -> ClientSocket {
        let mut socket = connect(&self.loopback_url()).await;
        let ok = say_hello(&mut socket, self.token()).await;
        assert_eq!(ok["agent"], format!("voxa/{}", voxa::VERSION));
        socket
    }

    /// A phone through `relay` that has seen the agent and completed the hello.
    pub async fn phone(&self, relay: &TestRelay) -> ClientSocket {
        let mut socket = phone_socket(relay, self.code()).await;
        say_hello(&mut socket, self.token()).await;
        socket
    }
}

/// The session start every client does: answers the agent's challenge with a proof of `token`
/// and checks the agent's proof in `hello_ok` (returned) before anything else is sent.
pub async fn say_hello(socket: &mut ClientSocket, token: &str) -> Value {
    let token = voxa::secret::Secret::from_string(token.to_owned());
    let ok = tokio::time::timeout(STEP, voxa::net::client::hello(socket, &token, "voxa-tests/1"))
        .await
        .expect("hello_ok in time")
        .expect("the agent accepts the hello and proves itself");
    serde_json::to_value(ok).unwrap()
}

/// [`say_hello`] in protocol 2 (unsealed): what hosted voice and older clients speak.
pub async fn say_hello_plain(socket: &mut ClientSocket, token: &str) -> Value {
    let token = voxa::secret::Secret::from_string(token.to_owned());
    let ok = tokio::time::timeout(STEP, voxa::net::client::hello_plain(socket, &token, "voxa-tests/1"))
        .await
        .expect("hello_ok in time")
        .expect("the agent accepts the plain hello and proves itself");
    serde_json::to_value(ok).unwrap()
}

/// Waits for the agent's `challenge` (skipping relay notices) and returns its nonce.
pub async fn recv_challenge(socket: &mut ClientSocket) -> String {
    let challenge = recv_type(socket, "challenge").await;
    assert_eq!(challenge["protocol"], 2);
    challenge["nonce"].as_str().unwrap().to_owned()
}

/// A protocol-2 hello answering `challenge`, proving `token` (a wrong token makes a wrong proof).
pub fn hello_for(token: &str, challenge: &str) -> Value {
    let nonce = voxa::protocol::new_nonce().unwrap();
    let token = voxa::secret::Secret::from_string(token.to_owned());
    let proof = voxa::protocol::client_proof(&token, challenge, &nonce);
    json!({"type":"hello","protocol":2,"nonce": nonce,"proof": proof,"client":"voxa-tests/1"})
}

/// Opens a WebSocket. A socket at a relay's `/agent` is seen through [`agent_view`].
pub async fn connect(url: &str) -> ClientSocket {
    if url.contains("/agent?") {
        return agent_view(url).await;
    }
    tokio::time::timeout(STEP, voxa::net::dial::connect(url, &DialOptions::default()))
        .await
        .expect("connect in time")
        .unwrap()
}

/// An agent's socket at a relay, seen as a test playing a one-phone agent sees it: the phone's
/// frames as they are (its parts put together), `JOINED` and `LEFT` as JSON
/// `{"type":"presence","peer":"phone","state":…}` text frames, and what the test sends going to
/// the phone that joined last. The relay framing itself is exercised in `relay`; here a task
/// translates between it and an in-memory socket the test holds.
pub async fn agent_view(url: &str) -> ClientSocket {
    let options = DialOptions { subprotocol: Some(voxa::protocol::relay::SUBPROTOCOL), ..Default::default() };
    let relay =
        tokio::time::timeout(STEP, voxa::net::dial::connect(url, &options)).await.expect("connect in time").unwrap();
    agent_view_of(relay).await
}

/// [`agent_view`] of an agent socket already open (with the relay framing) to a relay.
pub async fn agent_view_of(relay: ClientSocket) -> ClientSocket {
    use tokio_tungstenite::tungstenite::protocol::Role;
    use tokio_tungstenite::WebSocketStream;
    let (test_io, bridge_io) = tokio::io::duplex(1 << 20);
    let config = voxa::net::http::websocket_config();
    let test_io: Box<dyn voxa::net::dial::Io> = Box::new(test_io);
    let test_side = WebSocketStream::from_raw_socket(test_io, Role::Client, Some(config)).await;
    let bridge_side = WebSocketStream::from_raw_socket(bridge_io, Role::Server, Some(config)).await;
    tokio::spawn(bridge_agent_view(relay, bridge_side));
    voxa::seal::Socket::plain(test_side)
}

async fn bridge_agent_view<T>(relay: ClientSocket, test: tokio_tungstenite::WebSocketStream<T>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use voxa::protocol::relay::{self as relay_framing, Kind};
    let (mut relay_tx, mut relay_rx) = relay.split();
    let (mut test_tx, mut test_rx) = test.split();
    let (mut current, mut partial) = (None::<u32>, Vec::new());
    // What the test sent before the relay's JOINED reached this task: it goes to that phone.
    let mut early: Vec<Message> = Vec::new();
    let presence = |state: &str| Message::text(json!({"type":"presence","peer":"phone","state":state}).to_string());
    loop {
        tokio::select! {
            from_relay = relay_rx.next() => {
                let data = match from_relay {
                    Some(Ok(Message::Binary(data))) => data,
                    Some(Ok(Message::Close(frame))) => {
                        let _ = test_tx.send(Message::Close(frame)).await;
                        return;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => return,
                };
                let Some((kind, peer, payload)) = relay_framing::split(&data) else { return };
                let message = match kind {
                    Kind::Joined => {
                        current = Some(peer);
                        partial.clear();
                        for message in early.drain(..) {
                            let framed = match message {
                                Message::Text(text) => relay_framing::message(Kind::Text, peer, text.as_bytes()),
                                Message::Binary(data) => relay_framing::message(Kind::Binary, peer, &data),
                                _ => continue,
                            };
                            if relay_tx.send(Message::binary(framed)).await.is_err() {
                                return;
                            }
                        }
                        presence("joined")
                    }
                    Kind::Left => {
                        if current == Some(peer) {
                            current = None;
                        }
                        presence("left")
                    }
                    Kind::Part => {
                        partial.extend_from_slice(payload);
                        continue;
                    }
                    Kind::Text | Kind::Binary => {
                        let mut whole = std::mem::take(&mut partial);
                        whole.extend_from_slice(payload);
                        match kind {
                            Kind::Text => Message::text(String::from_utf8_lossy(&whole).into_owned()),
                            _ => Message::binary(whole),
                        }
                    }
                    Kind::ClosePeer | Kind::Proven | Kind::Receipt => continue,
                };
                if test_tx.send(message).await.is_err() {
                    return;
                }
            }
            from_test = test_rx.next() => {
                let framed = match from_test {
                    Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) if current.is_none() => {
                        if early.len() < 256 {
                            early.push(message);
                        }
                        continue;
                    }
                    Some(Ok(Message::Text(text))) => current.map(|peer| relay_framing::message(Kind::Text, peer, text.as_bytes())),
                    Some(Ok(Message::Binary(data))) => current.map(|peer| relay_framing::message(Kind::Binary, peer, &data)),
                    Some(Ok(Message::Close(frame))) => {
                        let _ = relay_tx.send(Message::Close(frame)).await;
                        continue;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => return,
                };
                if let Some(framed) = framed {
                    if relay_tx.send(Message::binary(framed)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// The phone's socket at the relay for `code`.
pub async fn phone_socket(relay: &TestRelay, code: &str) -> ClientSocket {
    connect(&format!("ws://{}/ws?code={code}", relay.addr)).await
}

pub async fn send(socket: &mut ClientSocket, value: Value) {
    socket.send(Message::text(value.to_string())).await.unwrap();
}

/// Next frame that is not a ping/pong, within [`STEP`].
pub async fn next_frame(socket: &mut ClientSocket) -> Option<Message> {
    next_frame_within(socket, STEP).await
}

/// Next frame that is not a ping/pong, within `wait`.
pub async fn next_frame_within(socket: &mut ClientSocket, wait: Duration) -> Option<Message> {
    tokio::time::timeout(wait, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(message)) => return Some(message),
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("a frame in time")
}

/// Next JSON text frame. A relay notice (U+0001 and a JSON object) comes as its JSON object,
/// whose `type` is `presence`.
pub async fn recv_json(socket: &mut ClientSocket) -> Value {
    recv_json_within(socket, STEP).await
}

/// [`recv_json`], each frame waited for up to `wait`.
pub async fn recv_json_within(socket: &mut ClientSocket, wait: Duration) -> Value {
    loop {
        match next_frame_within(socket, wait).await {
            Some(Message::Text(text)) => {
                return serde_json::from_str(text.strip_prefix('\u{1}').unwrap_or(&text)).unwrap()
            }
            Some(Message::Binary(_)) => continue,
            other => panic!("expected a JSON frame, got {other:?}"),
        }
    }
}

/// Skips frames until one of `kind` arrives.
pub async fn recv_type(socket: &mut ClientSocket, kind: &str) -> Value {
    loop {
        let value = recv_json(socket).await;
        if value["type"] == kind {
            return value;
        }
        assert_ne!(value["type"], "error", "unexpected error while waiting for {kind}: {value}");
    }
}

/// The tool_result of `id`, skipping progress and other frames.
pub async fn recv_result(socket: &mut ClientSocket, id: &str) -> Value {
    loop {
        let value = recv_json(socket).await;
        if value["type"] == "tool_result" && value["id"] == id {
            return value;
        }
    }
}

/// Waits for the relay's notice that the agent joined.
pub async fn wait_agent_joined(socket: &mut ClientSocket) {
    loop {
        let value = recv_json(socket).await;
        if value["type"] == "presence" && value["peer"] == "agent" && value["state"] == "joined" {
            return;
        }
    }
}

/// Asserts that nothing but pings arrives for `quiet`.
pub async fn assert_silent(socket: &mut ClientSocket, quiet: Duration) {
    let got = tokio::time::timeout(quiet, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => return other,
            }
        }
    })
    .await;
    if let Ok(frame) = got {
        panic!("expected silence, got {frame:?}");
    }
}

/// Close code and reason of the next close frame.
pub async fn recv_close(socket: &mut ClientSocket) -> (u16, String) {
    loop {
        match next_frame(socket).await {
            Some(Message::Close(Some(frame))) => return (u16::from(frame.code), frame.reason.to_string()),
            Some(Message::Close(None)) | None => panic!("closed without a close frame"),
            Some(_) => continue,
        }
    }
}

/// Polls `check` until it holds or [`STEP`] passes.
pub async fn eventually(what: &str, check: impl FnMut() -> bool) {
    eventually_within(what, STEP, check).await;
}

/// Polls `check` until it holds or `limit` passes.
pub async fn eventually_within(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A TCP proxy that can silently swallow the traffic of the connections it already carries,
/// the way a dead Wi-Fi network or a sleeping NAT does, while new connections still pass.
pub struct BlackholeProxy {
    pub addr: SocketAddr,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl BlackholeProxy {
    pub async fn start(target: SocketAddr) -> BlackholeProxy {
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let generation = std::sync::Arc::new(AtomicU64::new(0));
        let shared = generation.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(target).await else { continue };
                let born = shared.load(Ordering::SeqCst);
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                for (mut from, mut to) in [(cr, sw), (sr, cw)].map(|(r, w)| (r, w)) {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 16 << 10];
                        loop {
                            let n = match from.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if shared.load(Ordering::SeqCst) != born {
                                continue; // Swallowed: neither delivered nor refused.
                            }
                            if to.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        // Keep a swallowed connection open, as a half-open socket would be.
                        if shared.load(Ordering::SeqCst) != born {
                            std::future::pending::<()>().await;
                        }
                    });
                }
            }
        });
        BlackholeProxy { addr, generation }
    }

    /// From now on, traffic of existing connections goes nowhere.
    pub fn blackhole_existing(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn url(&self) -> RelayUrl {
        RelayUrl::parse(&format!("http://{}", self.addr)).unwrap()
    }
}

impl TestAgent {
    /// A phone over `wss://localhost` to a TLS relay whose certificate is in `ca`, after the hello.
    pub async fn phone_tls(&self, relay: &TestRelay, ca: &std::path::Path) -> ClientSocket {
        let options = DialOptions::default().trust_pem_file(ca).unwrap();
        let url = format!("wss://localhost:{}/ws?code={}", relay.addr.port(), self.code());
        let mut socket = tokio::time::timeout(STEP, voxa::net::dial::connect(&url, &options)).await.unwrap().unwrap();
        say_hello(&mut socket, self.token()).await;
        socket
    }
}

/// Sends a raw request and reads the whole plain-HTTP answer: status and body.
pub async fn http(addr: SocketAddr, request: &str) -> (u16, String) {
    use tokio::io::AsyncWriteExt;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let response = tokio::time::timeout(STEP, read_response(&mut tcp)).await.expect("response in time");
    parse_response(&response)
}

/// Reads one answer, head and body: `Content-Length` bytes of body, else up to the close (a
/// kept-alive connection stays open after its answer).
pub async fn read_response<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut response = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n").map(|at| at + 4) {
            let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map(|v| v.trim().parse::<usize>().unwrap());
            if length.is_some_and(|length| response.len() >= end + length) {
                response.truncate(end + length.unwrap_or_default());
                return response;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return response,
            Ok(n) => response.extend_from_slice(&chunk[..n]),
        }
    }
}

pub fn parse_response(response: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(response);
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

/// A WebSocket upgrade request for `path` with `extra` header lines.
///
/// A request for `/agent` offers the relay framing, as every voxa agent does; see
/// [`bare_upgrade_request`] for one that does not.
pub fn upgrade_request(path: &str, extra: &str) -> String {
    if path.starts_with("/agent") {
        let offer = format!("Sec-WebSocket-Protocol: {}\r\n{extra}", voxa::protocol::relay::SUBPROTOCOL);
        return bare_upgrade_request(path, &offer);
    }
    bare_upgrade_request(path, extra)
}

/// A WebSocket upgrade request with only the headers given in `extra`.
pub fn bare_upgrade_request(path: &str, extra: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}
