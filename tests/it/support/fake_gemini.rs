//! A local Gemini Live (BidiGenerateContent) server for tests and benchmarks that behaves like
//! the service (see docs/GUIDE.md, "Self-hosted mode"): the key only in `x-goog-api-key` (a wrong
//! one closes 1007 after `setup`, a key in the URL is refused), `setup` first and then nothing
//! until `setupComplete` (which carries a `sessionId`), server messages as pretty-printed JSON in
//! binary frames, 1007 on unknown or misplaced fields, on `mediaChunks` and on function schemas
//! outside the OpenAPI subset (empty `properties`, `required` naming unlisted ones). Like the
//! service it answers pings late ([`FakeOptions::pong_delay`]), never sets `finished` on a
//! transcription, issues resumable handles only while no function call is pending, closes 1011
//! "Deadline expired" when a `goAway`'s time runs out, 1011 for a resume while the session's old
//! socket is still open and 1008 "session not found" for a handle it never issued. It records
//! everything it receives; tests script the rest (`send`, `end_turn`, `close`, …).
//! Self-contained (only `voxa` and dev-dependencies) so the benchmark can include it too.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use voxa::gemini::GeminiConfig;
use voxa::secret::Secret;

/// Path of the Live endpoint.
pub const LIVE_PATH: &str = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";
/// The service's close reason for a bad key (close 1007).
pub const BAD_KEY_REASON: &str = "API key not valid. Please pass a valid API key.";
/// Longest wait for any one event.
pub const WAIT: Duration = Duration::from_secs(10);
/// The close reason when a `goAway`'s time is up (close 1011).
pub const DEADLINE_REASON: &str = "Deadline expired before operation could complete.";
/// The close reason for a resumption handle the service does not know (close 1008).
pub const NOT_FOUND_REASON: &str = "session not found";
/// The close reason for a resume while the session's old socket is still open (close 1011).
pub const STILL_OPEN_REASON: &str = "Internal error encountered.";
/// Slowest pong measured from the service.
pub const MAX_PONG_DELAY: Duration = Duration::from_secs(30);

/// How the fake answers `setup`.
#[derive(Clone, Debug, PartialEq)]
pub enum SetupReply {
    /// `setupComplete` at once.
    Complete,
    /// Nothing until the test calls [`FakeGemini::complete_setup`].
    Hold,
    /// Close with this code and reason instead.
    Close(u16, String),
}

/// Behaviour of a fake server.
#[derive(Clone, Debug)]
pub struct FakeOptions {
    /// The only key accepted.
    pub key: String,
    /// Send every microphone chunk straight back as model audio.
    pub echo_audio: bool,
    /// Refuse every upgrade with this HTTP status (e.g. 429).
    pub refuse_http: Option<u16>,
    pub setup_reply: SetupReply,
    /// How late pongs answer pings (at most [`MAX_PONG_DELAY`]; the service took 8 to 30 s).
    pub pong_delay: Duration,
    /// How long a socket the client closed still counts as open (the service is not instant).
    pub close_linger: Duration,
}

impl FakeOptions {
    pub fn new(key: &str) -> Self {
        FakeOptions {
            key: key.into(),
            echo_audio: false,
            refuse_http: None,
            setup_reply: SetupReply::Complete,
            pong_delay: Duration::from_secs(8),
            close_linger: Duration::from_millis(100),
        }
    }
}

/// What the fake saw, on which connection (numbered from 1), and when.
#[derive(Clone, Debug)]
pub struct Event {
    pub conn: usize,
    pub at: Instant,
    /// The same moment on the system clock, for a benchmark that compares it with a browser's.
    pub wall: std::time::SystemTime,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// An upgrade request and its `x-goog-api-key` header.
    Connected { key: Option<String> },
    /// An upgrade refused with this HTTP status.
    Refused { status: u16 },
    /// A well-formed `setup` (the key is checked after it, as the service does).
    Setup(Value),
    /// `realtimeInput.audio`, decoded.
    Audio { mime: String, pcm: Vec<u8> },
    /// `realtimeInput.text`.
    Text(String),
    /// `realtimeInput.audioStreamEnd`.
    AudioStreamEnd,
    /// One entry of `toolResponse.functionResponses`.
    ToolResponse(Value),
    /// Another well-formed client message.
    Message(Value),
    /// The fake closed the socket for this reason.
    Rejected { code: u16, reason: String },
    /// A WebSocket ping (the client's heartbeat), answered [`FakeOptions::pong_delay`] later.
    Ping,
    /// The client closed the socket or it dropped.
    Closed,
}

enum Command {
    Send(Message),
    CompleteSetup,
    Close(u16, String),
    Drop,
    Freeze,
}

/// A running fake Gemini Live server on 127.0.0.1.
pub struct FakeGemini {
    pub addr: SocketAddr,
    pub options: FakeOptions,
    events: mpsc::UnboundedReceiver<Event>,
    log: Arc<Mutex<Vec<Event>>>,
    conns: Arc<Mutex<HashMap<usize, mpsc::UnboundedSender<Command>>>>,
    sessions: Arc<Mutex<Sessions>>,
    stop: CancellationToken,
}

/// Sessions as the service keeps them: handles it issued, and which socket serves which session.
#[derive(Default)]
struct Sessions {
    /// Handle → session.
    handles: HashMap<String, usize>,
    /// Closes for the next resume attempts, in order (scripted service failures).
    resume_refusals: VecDeque<(u16, String)>,
    /// Open connection → its session (from `setup` until the socket closes).
    open: HashMap<usize, usize>,
}

impl Drop for FakeGemini {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Clone)]
struct Shared {
    options: FakeOptions,
    events: mpsc::UnboundedSender<Event>,
    log: Arc<Mutex<Vec<Event>>>,
    conns: Arc<Mutex<HashMap<usize, mpsc::UnboundedSender<Command>>>>,
    sessions: Arc<Mutex<Sessions>>,
    stop: CancellationToken,
}

impl Shared {
    /// `conn` no longer serves its session (called before the client can see it close).
    fn closing(&self, conn: usize) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.open.remove(&conn);
        }
    }

    fn session_of(&self, conn: usize) -> Option<usize> {
        self.sessions.lock().ok().and_then(|sessions| sessions.open.get(&conn).copied())
    }

    fn record(&self, conn: usize, kind: Kind) {
        let event = Event { conn, at: Instant::now(), wall: std::time::SystemTime::now(), kind };
        if let Ok(mut log) = self.log.lock() {
            log.push(event.clone());
        }
        let _ = self.events.send(event);
    }
}

impl FakeGemini {
    pub async fn start(options: FakeOptions) -> FakeGemini {
        assert!(options.pong_delay <= MAX_PONG_DELAY, "the service answers pings within 30 s");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake Gemini");
        let addr = listener.local_addr().expect("fake Gemini address");
        let (events_tx, events) = mpsc::unbounded_channel();
        let shared = Shared {
            options: options.clone(),
            events: events_tx,
            log: Arc::default(),
            conns: Arc::default(),
            sessions: Arc::default(),
            stop: CancellationToken::new(),
        };
        let fake = FakeGemini {
            addr,
            options,
            events,
            log: shared.log.clone(),
            conns: shared.conns.clone(),
            sessions: shared.sessions.clone(),
            stop: shared.stop.clone(),
        };
        tokio::spawn(accept_loop(listener, shared));
        fake
    }

    /// The endpoint, as `VOXA_GEMINI_URL` would name it.
    pub fn url(&self) -> String {
        format!("ws://{}{LIVE_PATH}", self.addr)
    }

    /// Agent settings pointing at this fake with `key`.
    pub fn config(&self, key: &str) -> GeminiConfig {
        GeminiConfig {
            api_key: Secret::from_string(key.to_owned()),
            url: self.url(),
            model: voxa::config::DEFAULT_GEMINI_MODEL.into(),
            voice: "Kore".into(),
            heartbeat: voxa::gemini::HEARTBEAT,
        }
    }

    /// Everything recorded so far.
    pub fn received(&self) -> Vec<Event> {
        self.log.lock().map(|log| log.clone()).unwrap_or_default()
    }

    /// The next event, failing the test after [`WAIT`].
    pub async fn next_event(&mut self) -> Event {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("the fake Gemini saw something in time")
            .expect("the fake Gemini is running")
    }

    /// Forgets every handle it issued, as the service does after about two hours.
    pub fn forget_handles(&self) {
        self.sessions.lock().unwrap().handles.clear();
    }

    /// Closes the next resume attempt with `code` and `reason` instead of answering it.
    pub fn refuse_next_resume(&self, code: u16, reason: &str) {
        self.sessions.lock().unwrap().resume_refusals.push_back((code, reason.to_owned()));
    }

    /// Skips events until one matches.
    pub async fn wait_for(&mut self, what: &str, matches: impl Fn(&Event) -> bool) -> Event {
        self.wait_for_within(what, WAIT, matches).await
    }

    /// Skips events until one matches, failing the test after `within`.
    pub async fn wait_for_within(&mut self, what: &str, within: Duration, matches: impl Fn(&Event) -> bool) -> Event {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("the fake Gemini did not see {what} in time"))
                .expect("the fake Gemini is running");
            if matches(&event) {
                return event;
            }
        }
    }

    /// The next `setup`: its connection and content.
    pub async fn expect_setup(&mut self) -> (usize, Value) {
        let event = self.wait_for("a setup", |e| matches!(e.kind, Kind::Setup(_))).await;
        let Kind::Setup(setup) = event.kind else { unreachable!() };
        (event.conn, setup)
    }

    /// The next audio chunk on `conn`.
    pub async fn expect_audio(&mut self, conn: usize) -> (String, Vec<u8>) {
        let event = self.wait_for("audio", |e| e.conn == conn && matches!(e.kind, Kind::Audio { .. })).await;
        let Kind::Audio { mime, pcm } = event.kind else { unreachable!() };
        (mime, pcm)
    }

    /// Waits until `conn` is closed by the client.
    pub async fn expect_closed(&mut self, conn: usize) {
        self.wait_for("the socket closed", |e| e.conn == conn && e.kind == Kind::Closed).await;
    }

    /// Events already queued, without waiting.
    pub fn drain(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events
    }

    fn command(&self, conn: usize, command: Command) {
        let sender = self.conns.lock().ok().and_then(|conns| conns.get(&conn).cloned());
        assert!(sender.expect("connection is open").send(command).is_ok(), "connection task is running");
    }

    /// Sends a server message as pretty-printed JSON in a binary frame (as the service does).
    /// The service never sets `finished` on a transcription: a script that does is a mistake
    /// (use [`FakeGemini::send_raw`] to send one anyway).
    pub fn send(&self, conn: usize, message: Value) {
        for transcription in ["inputTranscription", "outputTranscription"] {
            let finished = message.pointer(&format!("/serverContent/{transcription}/finished"));
            assert!(finished.is_none(), "the service never sends `finished` on {transcription}");
        }
        self.command(conn, Command::Send(pretty(&message)));
    }

    /// Ends a model turn as the service does: `generationComplete`, then `turnComplete` with
    /// `usageMetadata`.
    pub fn end_turn(&self, conn: usize) {
        self.send(conn, json!({"serverContent":{"generationComplete":true}}));
        self.send(
            conn,
            json!({"serverContent":{"turnComplete":true},
                "usageMetadata":{"promptTokenCount":120,"responseTokenCount":30,"totalTokenCount":150}}),
        );
    }

    /// Sends any frame (junk included).
    pub fn send_raw(&self, conn: usize, frame: Message) {
        self.command(conn, Command::Send(frame));
    }

    /// Answers a held `setup`.
    pub fn complete_setup(&self, conn: usize) {
        self.command(conn, Command::CompleteSetup);
    }

    /// Closes `conn` with a code and reason.
    pub fn close(&self, conn: usize, code: u16, reason: &str) {
        self.command(conn, Command::Close(code, reason.into()));
    }

    /// Stops answering on `conn`, as a half-open socket would: nothing the fake sends arrives
    /// (pongs included) and nothing the client sends is acted on, but the client closing its
    /// TCP connection still ends it.
    pub fn freeze(&self, conn: usize) {
        self.command(conn, Command::Freeze);
    }

    /// Drops `conn`'s TCP connection without a close frame.
    pub fn drop_conn(&self, conn: usize) {
        self.command(conn, Command::Drop);
    }

    /// Model audio (PCM16LE 24 kHz) as the service sends it.
    pub fn model_audio(pcm: &[u8]) -> Value {
        let data = base64::engine::general_purpose::STANDARD.encode(pcm);
        json!({"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":data}}]}}})
    }
}

async fn accept_loop(listener: TcpListener, shared: Shared) {
    let mut next = 0;
    loop {
        let stream = tokio::select! {
            _ = shared.stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        next += 1;
        tokio::spawn(serve(stream, next, shared.clone()));
    }
}

/// Pretty-printed JSON in a binary frame.
fn pretty(message: &Value) -> Message {
    Message::binary(serde_json::to_vec_pretty(message).unwrap_or_default())
}

async fn serve(mut stream: TcpStream, conn: usize, shared: Shared) {
    let Ok((head, leftover)) = voxa::net::http::read_head(&mut stream, voxa::net::http::HEAD_TIMEOUT).await else {
        return;
    };
    let key = head.header("x-goog-api-key").map(str::to_owned);
    if head.path != LIVE_PATH {
        let _ = voxa::net::http::respond(&mut stream, 404, "Not Found", "not found\n").await;
        return shared.record(conn, Kind::Refused { status: 404 });
    }
    if head.query_param("key").is_some() {
        // Faithful enough: the service would accept it, but voxa must never put the key in a URL.
        let _ = voxa::net::http::respond(&mut stream, 400, "Bad Request", "API key in the URL\n").await;
        return shared.record(conn, Kind::Refused { status: 400 });
    }
    if let Some(status) = shared.options.refuse_http {
        let _ = voxa::net::http::respond(&mut stream, status, "Refused", "refused\n").await;
        return shared.record(conn, Kind::Refused { status });
    }
    if !head.is_websocket_upgrade() {
        let _ = voxa::net::http::respond(&mut stream, 400, "Bad Request", "not a WebSocket upgrade\n").await;
        return shared.record(conn, Kind::Refused { status: 400 });
    }
    // Like any real-time server: no Nagle delay on small frames.
    let _ = stream.set_nodelay(true);
    let stream = LatePongs::new(stream, shared.options.pong_delay);
    let Ok(mut socket) =
        voxa::net::http::accept_websocket(stream, &head, leftover, voxa::net::http::websocket_config()).await
    else {
        return;
    };
    shared.record(conn, Kind::Connected { key: key.clone() });
    let (commands_tx, mut commands) = mpsc::unbounded_channel();
    if let Ok(mut conns) = shared.conns.lock() {
        conns.insert(conn, commands_tx);
    }
    let key_ok = key.as_deref() == Some(shared.options.key.as_str());
    let mut state = State::AwaitingSetup;
    // Function calls sent and not yet answered or cancelled: no resumable handle meanwhile.
    let mut pending: HashSet<String> = HashSet::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut frozen = false;
    loop {
        tokio::select! {
            _ = shared.stop.cancelled() => break,
            _ = sleep_until(deadline) => {
                reject(&mut socket, conn, &shared, 1011, DEADLINE_REASON).await;
                break;
            }
            command = commands.recv() => match command {
                Some(Command::Send(frame)) => {
                    let (frame, time_left) = on_server_message(frame, conn, &shared, &mut pending);
                    if let Some(time_left) = time_left {
                        deadline = Some(tokio::time::Instant::now() + time_left);
                    }
                    let _ = socket.send(frame).await;
                }
                Some(Command::CompleteSetup) => {
                    state = State::Live;
                    let _ = socket.send(setup_complete(conn)).await;
                }
                Some(Command::Close(code, reason)) => {
                    reject(&mut socket, conn, &shared, code, &reason).await;
                    break;
                }
                Some(Command::Drop) | None => break,
                Some(Command::Freeze) => {
                    frozen = true;
                    socket.get_mut().blackhole = true;
                }
            },
            frame = socket.next() => {
                let payload = match frame {
                    Some(Ok(Message::Text(text))) => text.as_bytes().to_vec(),
                    Some(Ok(Message::Binary(data))) => data.to_vec(),
                    Some(Ok(Message::Ping(_))) => {
                        shared.record(conn, Kind::Ping);
                        continue;
                    }
                    Some(Ok(Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                        // Nothing answers the close until the service has let the socket go.
                        tokio::time::sleep(shared.options.close_linger).await;
                        shared.closing(conn);
                        shared.record(conn, Kind::Closed);
                        break;
                    }
                };
                if frozen {
                    continue;
                }
                match on_client_message(&payload, &mut state, key_ok, conn, &shared, &mut pending) {
                    Reply::Nothing => {}
                    Reply::Send(frames) => {
                        for frame in frames {
                            let _ = socket.send(frame).await;
                        }
                    }
                    Reply::Reject(code, reason) => {
                        reject(&mut socket, conn, &shared, code, &reason).await;
                        break;
                    }
                }
            }
        }
    }
    shared.closing(conn);
    if let Ok(mut conns) = shared.conns.lock() {
        conns.remove(&conn);
    }
}

#[derive(PartialEq)]
enum State {
    AwaitingSetup,
    /// `setup` received, `setupComplete` held back.
    Held,
    Live,
}

enum Reply {
    Nothing,
    Send(Vec<Message>),
    Reject(u16, String),
}

fn setup_complete(conn: usize) -> Message {
    pretty(&json!({"setupComplete":{"sessionId": format!("fake-session-{conn}")}}))
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// What the service does around a message it sends: a resumable handle is issued (and
/// remembered) only while no function call is pending, and a `goAway` starts the clock.
fn on_server_message(
    frame: Message,
    conn: usize,
    shared: &Shared,
    pending: &mut HashSet<String>,
) -> (Message, Option<Duration>) {
    let Ok(mut message) = serde_json::from_slice::<Value>(&frame.clone().into_data()) else { return (frame, None) };
    let ids = |value: Option<&Value>| -> Vec<String> {
        value.and_then(Value::as_array).into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
    };
    if let Some(calls) = message.pointer("/toolCall/functionCalls").and_then(Value::as_array) {
        pending.extend(calls.iter().filter_map(|call| call["id"].as_str().map(str::to_owned)));
    }
    for id in ids(message.pointer("/toolCallCancellation/ids")) {
        pending.remove(&id);
    }
    let mut changed = false;
    if let Some(update) = message.get_mut("sessionResumptionUpdate") {
        let resumable = update["resumable"] == true;
        if resumable && !pending.is_empty() {
            update["resumable"] = json!(false);
            changed = true;
        } else if let (true, Some(handle)) = (resumable, update["newHandle"].as_str()) {
            if let (Some(session), Ok(mut sessions)) = (shared.session_of(conn), shared.sessions.lock()) {
                sessions.handles.insert(handle.to_owned(), session);
            }
        }
    }
    let time_left =
        message.pointer("/goAway/timeLeft").and_then(Value::as_str).and_then(voxa::gemini::wire::parse_duration);
    (if changed { pretty(&message) } else { frame }, time_left)
}

fn invalid(detail: impl std::fmt::Display) -> Reply {
    Reply::Reject(1007, format!("Invalid JSON payload received. {detail}"))
}

fn on_client_message(
    payload: &[u8],
    state: &mut State,
    key_ok: bool,
    conn: usize,
    shared: &Shared,
    pending: &mut HashSet<String>,
) -> Reply {
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(payload) else {
        return invalid("Expected a JSON object.");
    };
    if message.len() != 1 {
        return invalid("Exactly one of setup, clientContent, realtimeInput, toolResponse must be set.");
    }
    let (name, body) = message.into_iter().next().unwrap_or_default();
    if *state == State::AwaitingSetup {
        if name != "setup" {
            return invalid("The first message must be setup.");
        }
        if let Err(reason) = check_setup(&body) {
            return invalid(reason);
        }
        let handle = body.pointer("/sessionResumption/handle").and_then(Value::as_str).map(str::to_owned);
        shared.record(conn, Kind::Setup(body));
        if !key_ok {
            return Reply::Reject(1007, BAD_KEY_REASON.into());
        }
        if let Err((code, reason)) = join_session(conn, handle.as_deref(), shared) {
            return Reply::Reject(code, reason);
        }
        return match &shared.options.setup_reply {
            SetupReply::Complete => {
                *state = State::Live;
                Reply::Send(vec![setup_complete(conn)])
            }
            SetupReply::Hold => {
                *state = State::Held;
                Reply::Nothing
            }
            SetupReply::Close(code, reason) => Reply::Reject(*code, reason.clone()),
        };
    }
    if *state == State::Held {
        return invalid(format!("{name} sent before setupComplete."));
    }
    match name.as_str() {
        "setup" => invalid("setup may be sent only once."),
        "realtimeInput" => on_realtime_input(body, conn, shared),
        "toolResponse" => {
            let Some(responses) = body.get("functionResponses").and_then(Value::as_array) else {
                return invalid("toolResponse.functionResponses must be a list.");
            };
            for response in responses {
                let has_id = response.get("id").and_then(Value::as_str).is_some_and(|id| !id.is_empty());
                let shaped = response
                    .get("response")
                    .and_then(Value::as_object)
                    .is_some_and(|r| r.len() == 1 && (r.contains_key("output") || r.contains_key("error")));
                if !has_id || !shaped {
                    return invalid("functionResponses need an id and a response with output or error.");
                }
                if let Some(id) = response["id"].as_str() {
                    pending.remove(id);
                }
                shared.record(conn, Kind::ToolResponse(response.clone()));
            }
            Reply::Nothing
        }
        "clientContent" => {
            shared.record(conn, Kind::Message(json!({ name: body })));
            Reply::Nothing
        }
        other => invalid(format!("Unknown name \"{other}\": Cannot find field.")),
    }
}

fn on_realtime_input(body: Value, conn: usize, shared: &Shared) -> Reply {
    let Value::Object(fields) = body else { return invalid("realtimeInput must be an object.") };
    if fields.contains_key("mediaChunks") {
        return invalid("realtimeInput.mediaChunks is deprecated; use realtimeInput.audio.");
    }
    if fields.len() != 1 {
        return invalid("realtimeInput takes exactly one field.");
    }
    if let Some(audio) = fields.get("audio") {
        let mime = audio.get("mimeType").and_then(Value::as_str).unwrap_or_default().to_owned();
        let data = audio.get("data").and_then(Value::as_str).unwrap_or_default();
        if !mime.starts_with("audio/pcm") {
            return invalid(format!("Unsupported audio mimeType {mime:?}."));
        }
        let Ok(pcm) = base64::engine::general_purpose::STANDARD.decode(data) else {
            return invalid("realtimeInput.audio.data is not base64.");
        };
        shared.record(conn, Kind::Audio { mime, pcm: pcm.clone() });
        if shared.options.echo_audio {
            let echo = FakeGemini::model_audio(&pcm);
            return Reply::Send(vec![pretty(&echo)]);
        }
        return Reply::Nothing;
    }
    if let Some(text) = fields.get("text") {
        let Some(text) = text.as_str() else { return invalid("realtimeInput.text must be a string.") };
        shared.record(conn, Kind::Text(text.to_owned()));
        return Reply::Nothing;
    }
    if let Some(end) = fields.get("audioStreamEnd") {
        if end != &Value::Bool(true) {
            return invalid("realtimeInput.audioStreamEnd must be true.");
        }
        shared.record(conn, Kind::AudioStreamEnd);
        return Reply::Nothing;
    }
    if fields.contains_key("activityStart") || fields.contains_key("activityEnd") {
        shared.record(conn, Kind::Message(json!({ "realtimeInput": fields })));
        return Reply::Nothing;
    }
    invalid("Unknown realtimeInput field.")
}

/// What the service checks in `setup`: known fields only, in their places.
fn check_setup(setup: &Value) -> Result<(), String> {
    const SETUP_FIELDS: &[&str] = &[
        "model",
        "generationConfig",
        "systemInstruction",
        "tools",
        "realtimeInputConfig",
        "sessionResumption",
        "contextWindowCompression",
        "inputAudioTranscription",
        "outputAudioTranscription",
        "proactivity",
    ];
    const GENERATION_FIELDS: &[&str] = &[
        "responseModalities",
        "speechConfig",
        "temperature",
        "topP",
        "topK",
        "maxOutputTokens",
        "candidateCount",
        "presencePenalty",
        "frequencyPenalty",
        "mediaResolution",
        "seed",
        "thinkingConfig",
        "enableAffectiveDialog",
    ];
    let setup = setup.as_object().ok_or("setup must be an object")?;
    if let Some(unknown) = setup.keys().find(|k| !SETUP_FIELDS.contains(&k.as_str())) {
        return Err(format!("Unknown name \"{unknown}\" at 'setup': Cannot find field."));
    }
    let model = setup.get("model").and_then(Value::as_str).ok_or("setup.model is required")?;
    if !model.starts_with("models/") {
        return Err(format!("model {model:?} must be of the form models/…"));
    }
    if let Some(generation) = setup.get("generationConfig") {
        let generation = generation.as_object().ok_or("generationConfig must be an object")?;
        if let Some(unknown) = generation.keys().find(|k| !GENERATION_FIELDS.contains(&k.as_str())) {
            return Err(format!("Unknown name \"{unknown}\" at 'setup.generation_config': Cannot find field."));
        }
    }
    for transcription in ["inputAudioTranscription", "outputAudioTranscription"] {
        if setup.get(transcription).is_some_and(|t| !t.is_object()) {
            return Err(format!("{transcription} must be an object"));
        }
    }
    if let Some(tools) = setup.get("tools") {
        let tools = tools.as_array().ok_or("tools must be a list")?;
        for (t, tool) in tools.iter().enumerate() {
            if let Some(declarations) = tool.get("functionDeclarations") {
                let declarations = declarations.as_array().ok_or("functionDeclarations must be a list")?;
                for (d, declaration) in declarations.iter().enumerate() {
                    check_declaration(declaration, &format!("setup.tools[{t}].function_declarations[{d}]"))?;
                }
            }
        }
    }
    if let Some(resumption) = setup.get("sessionResumption") {
        let resumption = resumption.as_object().ok_or("sessionResumption must be an object")?;
        if resumption.get("handle").is_some_and(|h| !h.is_string()) {
            return Err("sessionResumption.handle must be a string".into());
        }
    }
    Ok(())
}

/// Puts `conn` in a session: a new one, or the one `handle` resumes.
fn join_session(conn: usize, handle: Option<&str>, shared: &Shared) -> Result<(), (u16, String)> {
    let Ok(mut sessions) = shared.sessions.lock() else { return Err((1011, STILL_OPEN_REASON.to_owned())) };
    let session = match handle {
        None => conn,
        Some(handle) => {
            if let Some((code, reason)) = sessions.resume_refusals.pop_front() {
                return Err((code, reason));
            }
            let session = *sessions.handles.get(handle).ok_or((1008, NOT_FOUND_REASON.to_owned()))?;
            if sessions.open.values().any(|open| *open == session) {
                return Err((1011, STILL_OPEN_REASON.to_owned()));
            }
            session
        }
    };
    sessions.open.insert(conn, session);
    Ok(())
}

/// A function declaration as the service checks it.
fn check_declaration(declaration: &Value, at: &str) -> Result<(), String> {
    const FIELDS: &[&str] =
        &["name", "description", "parameters", "parametersJsonSchema", "behavior", "response", "responseJsonSchema"];
    let declaration = declaration.as_object().ok_or(format!("{at} must be an object"))?;
    if let Some(unknown) = declaration.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("Unknown name \"{unknown}\" at '{at}': Cannot find field."));
    }
    let name = declaration.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(format!("* {at}.name: Invalid function name."));
    }
    if let Some(behavior) = declaration.get("behavior") {
        if !["BLOCKING", "NON_BLOCKING", "UNSPECIFIED"].contains(&behavior.as_str().unwrap_or_default()) {
            return Err(format!("Invalid value at '{at}.behavior'"));
        }
    }
    if declaration.contains_key("parameters") && declaration.contains_key("parametersJsonSchema") {
        return Err(format!("* {at}: parameters and parameters_json_schema are mutually exclusive"));
    }
    match declaration.get("parameters") {
        Some(schema) => check_schema(schema, &format!("{at}.parameters")),
        None => Ok(()),
    }
}

/// A schema within the OpenAPI subset: upper-case types, no empty `properties`, `required`
/// naming only listed properties.
fn check_schema(schema: &Value, at: &str) -> Result<(), String> {
    const TYPES: &[&str] = &["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"];
    let schema = schema.as_object().ok_or(format!("{at} must be an object"))?;
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("TYPE_UNSPECIFIED");
    if !TYPES.contains(&kind) {
        return Err(format!("Invalid value at '{at}.type', \"{kind}\""));
    }
    let properties = match schema.get("properties") {
        None => None,
        Some(Value::Object(properties)) => Some(properties),
        Some(_) => return Err(format!("{at}.properties must be an object")),
    };
    if kind == "OBJECT" && properties.is_some_and(|p| p.is_empty()) {
        return Err(format!("* {at}.properties: should be non-empty for OBJECT type"));
    }
    for (name, property) in properties.into_iter().flatten() {
        check_schema(property, &format!("{at}.properties[{name}]"))?;
    }
    if let Some(required) = schema.get("required") {
        let required = required.as_array().ok_or(format!("{at}.required must be a list"))?;
        for name in required {
            let name = name.as_str().unwrap_or_default();
            if !properties.is_some_and(|p| p.contains_key(name)) {
                return Err(format!("* {at}.required[{name}]: property is not defined"));
            }
        }
    }
    if let Some(items) = schema.get("items") {
        check_schema(items, &format!("{at}.items"))?;
    }
    Ok(())
}

/// The fake's side of a TCP connection. Pong frames it writes are held back for `delay`, as the
/// service answers pings late; every other frame passes at once and in order (frames stay whole,
/// so a held pong never splits another). The HTTP upgrade before the first frame passes as is.
/// Held pongs go out from `poll_read`, which the connection's task polls all the time.
struct LatePongs {
    inner: TcpStream,
    delay: Duration,
    /// Everything written from now on is lost, as on a dead network path.
    blackhole: bool,
    /// Wakes the reading task when the oldest held pong is due.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The upgrade response has gone; bytes are WebSocket frames now.
    framing: bool,
    /// Bytes of the frame being written, until it is whole.
    partial: Vec<u8>,
    /// Whole frames ready for the socket.
    out: Vec<u8>,
    held: VecDeque<(tokio::time::Instant, Vec<u8>)>,
}

impl LatePongs {
    fn new(inner: TcpStream, delay: Duration) -> Self {
        LatePongs {
            inner,
            delay,
            blackhole: false,
            timer: None,
            framing: false,
            partial: Vec::new(),
            out: Vec::new(),
            held: VecDeque::new(),
        }
    }

    /// Sends the pongs that are due and arms the timer for the next one.
    fn poll_held(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        loop {
            self.release_due();
            if let Poll::Ready(Err(err)) = self.poll_out(cx) {
                return Err(err);
            }
            let Some((due, _)) = self.held.front() else {
                self.timer = None;
                return Ok(());
            };
            let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(*due)));
            timer.as_mut().reset(*due);
            if timer.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
        }
    }

    fn split(&mut self) {
        if !self.framing {
            let Some(end) = self.partial.windows(4).position(|w| w == b"\r\n\r\n") else { return };
            self.out.extend(self.partial.drain(..end + 4));
            self.framing = true;
        }
        while let Some(len) = frame_len(&self.partial) {
            let frame: Vec<u8> = self.partial.drain(..len).collect();
            let pong = frame[0] & 0x0f == 0x0a;
            if pong && !self.delay.is_zero() {
                self.held.push_back((tokio::time::Instant::now() + self.delay, frame));
            } else {
                self.out.extend(frame);
            }
        }
    }

    fn release_due(&mut self) {
        let now = tokio::time::Instant::now();
        while self.held.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, pong)) = self.held.pop_front() {
                self.out.extend(pong);
            }
        }
    }

    fn poll_out(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.out.is_empty() {
            let written = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out))?;
            if written == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.out.drain(..written);
        }
        Poll::Ready(Ok(()))
    }
}

/// Length of the WebSocket frame at the start of `bytes`, once it is all there.
fn frame_len(bytes: &[u8]) -> Option<usize> {
    let second = *bytes.get(1)?;
    let (header, payload) = match second & 0x7f {
        126 => (4, u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?) as usize),
        127 => (10, u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize),
        short => (2, short as usize),
    };
    let mask = if second & 0x80 != 0 { 4 } else { 0 };
    let total = header + mask + payload;
    (bytes.len() >= total).then_some(total)
}

impl AsyncRead for LatePongs {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.poll_held(cx)?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for LatePongs {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.blackhole {
            this.held.clear();
            return Poll::Ready(Ok(buf.len()));
        }
        this.partial.extend_from_slice(buf);
        this.split();
        this.release_due();
        // Taken in full: what the socket does not take now goes out on the next write or flush.
        if let Poll::Ready(Err(err)) = this.poll_out(cx) {
            return Poll::Ready(Err(err));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.release_due();
        ready!(this.poll_out(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_out(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

async fn reject(
    socket: &mut tokio_tungstenite::WebSocketStream<LatePongs>,
    conn: usize,
    shared: &Shared,
    code: u16,
    reason: &str,
) {
    // A close frame's reason holds at most 123 bytes: longer ones are cut, as any server must.
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = &reason[..end];
    shared.closing(conn);
    shared.record(conn, Kind::Rejected { code, reason: reason.to_owned() });
    let frame = CloseFrame { code: CloseCode::from(code), reason: reason.to_owned().into() };
    let _ = socket.send(Message::Close(Some(frame))).await;
    // Let the client answer the close; never wait long.
    let _ =
        tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = socket.next().await {} }).await;
}
