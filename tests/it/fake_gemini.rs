//! A local Gemini Live (BidiGenerateContent) server for tests and benchmarks, faithful to
//! /work/shared/gemini-live.md: the key only in `x-goog-api-key` (a wrong one closes 1007 after
//! `setup`, a key in the URL is refused), `setup` first and then nothing until `setupComplete`,
//! server messages as JSON in binary frames, 1007 on unknown or misplaced fields and on
//! `mediaChunks`. It records everything it receives; tests script the rest (`send`, `close`, …).
//! Self-contained (only `voxa` and dev-dependencies) so the benchmark can include it too.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
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
}

impl FakeOptions {
    pub fn new(key: &str) -> Self {
        FakeOptions { key: key.into(), echo_audio: false, refuse_http: None, setup_reply: SetupReply::Complete }
    }
}

/// What the fake saw, on which connection (numbered from 1), and when.
#[derive(Clone, Debug)]
pub struct Event {
    pub conn: usize,
    pub at: Instant,
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
    /// One entry of `toolResponse.functionResponses`.
    ToolResponse(Value),
    /// Another well-formed client message.
    Message(Value),
    /// The fake closed the socket for this reason.
    Rejected { code: u16, reason: String },
    /// A WebSocket ping (the client's heartbeat), answered automatically.
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
    stop: CancellationToken,
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
    stop: CancellationToken,
}

impl Shared {
    fn record(&self, conn: usize, kind: Kind) {
        let event = Event { conn, at: Instant::now(), kind };
        if let Ok(mut log) = self.log.lock() {
            log.push(event.clone());
        }
        let _ = self.events.send(event);
    }
}

impl FakeGemini {
    pub async fn start(options: FakeOptions) -> FakeGemini {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake Gemini");
        let addr = listener.local_addr().expect("fake Gemini address");
        let (events_tx, events) = mpsc::unbounded_channel();
        let shared = Shared {
            options: options.clone(),
            events: events_tx,
            log: Arc::default(),
            conns: Arc::default(),
            stop: CancellationToken::new(),
        };
        let fake = FakeGemini {
            addr,
            options,
            events,
            log: shared.log.clone(),
            conns: shared.conns.clone(),
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
            model: "models/gemini-2.5-flash-native-audio-preview-12-2025".into(),
            voice: "Kore".into(),
            heartbeat: voxa::net::liveness::Heartbeat::default(),
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

    /// Skips events until one matches.
    pub async fn wait_for(&mut self, what: &str, matches: impl Fn(&Event) -> bool) -> Event {
        let deadline = tokio::time::Instant::now() + WAIT;
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

    /// Sends a server message as JSON in a binary frame (as the service does).
    pub fn send(&self, conn: usize, message: Value) {
        self.command(conn, Command::Send(Message::binary(message.to_string().into_bytes())));
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

    /// Stops reading and answering on `conn`, as a half-open socket would.
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

async fn serve(mut stream: TcpStream, conn: usize, shared: Shared) {
    let Ok((head, leftover)) = voxa::net::http::read_head(&mut stream).await else { return };
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
    loop {
        tokio::select! {
            _ = shared.stop.cancelled() => break,
            command = commands.recv() => match command {
                Some(Command::Send(frame)) => { let _ = socket.send(frame).await; }
                Some(Command::CompleteSetup) => {
                    state = State::Live;
                    let _ = socket.send(setup_complete()).await;
                }
                Some(Command::Close(code, reason)) => {
                    reject(&mut socket, conn, &shared, code, &reason).await;
                    break;
                }
                Some(Command::Drop) | None => break,
                Some(Command::Freeze) => {
                    // A half-open socket: nothing read, nothing answered (pings included).
                    shared.stop.cancelled().await;
                    break;
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
                        shared.record(conn, Kind::Closed);
                        break;
                    }
                };
                match on_client_message(&payload, &mut state, key_ok, conn, &shared) {
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

fn setup_complete() -> Message {
    Message::binary(json!({"setupComplete":{}}).to_string().into_bytes())
}

fn invalid(detail: impl std::fmt::Display) -> Reply {
    Reply::Reject(1007, format!("Invalid JSON payload received. {detail}"))
}

fn on_client_message(payload: &[u8], state: &mut State, key_ok: bool, conn: usize, shared: &Shared) -> Reply {
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
        shared.record(conn, Kind::Setup(body));
        if !key_ok {
            return Reply::Reject(1007, BAD_KEY_REASON.into());
        }
        return match &shared.options.setup_reply {
            SetupReply::Complete => {
                *state = State::Live;
                Reply::Send(vec![setup_complete()])
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
            return Reply::Send(vec![Message::binary(echo.to_string().into_bytes())]);
        }
        return Reply::Nothing;
    }
    if let Some(text) = fields.get("text") {
        let Some(text) = text.as_str() else { return invalid("realtimeInput.text must be a string.") };
        shared.record(conn, Kind::Text(text.to_owned()));
        return Reply::Nothing;
    }
    if fields.contains_key("audioStreamEnd")
        || fields.contains_key("activityStart")
        || fields.contains_key("activityEnd")
    {
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
        for tool in tools {
            if let Some(declarations) = tool.get("functionDeclarations") {
                let declarations = declarations.as_array().ok_or("functionDeclarations must be a list")?;
                if declarations.iter().any(|d| d.get("name").and_then(Value::as_str).is_none()) {
                    return Err("every function declaration needs a name".into());
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

async fn reject(
    socket: &mut tokio_tungstenite::WebSocketStream<TcpStream>,
    conn: usize,
    shared: &Shared,
    code: u16,
    reason: &str,
) {
    shared.record(conn, Kind::Rejected { code, reason: reason.to_owned() });
    let frame = CloseFrame { code: CloseCode::from(code), reason: reason.to_owned().into() };
    let _ = socket.send(Message::Close(Some(frame))).await;
    // Let the client answer the close; never wait long.
    let _ =
        tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = socket.next().await {} }).await;
}
