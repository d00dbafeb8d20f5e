//! Self-hosted voice (docs/PROTOCOL.md, "Voice"): the laptop holds the Gemini Live session and
//! bridges it to the phone. One actor per call owns the Gemini connection, the running tool calls
//! and the resumption handle; it ends on `call_end`, when the phone's session goes, or on a
//! failure it cannot resume from. The bridge needs only [`VoiceTools`] (declare and run tools)
//! and the phone's frame queue, so whoever holds the phone's socket can host a call.
//!
//! Session handling follows what the service does rather than its schema: transcripts are final
//! at `turnComplete`, `interrupted` or `generationComplete` (the `finished` flag never comes);
//! on `goAway` running tools finish and are answered within `timeLeft`, then the old socket is
//! closed before the session resumes with the newest resumable handle; a stale handle starts a
//! fresh session; the link is dead only after [`HEARTBEAT`]'s 60 s of silence.
//!
//! Bounds: microphone audio waits in the session's queue ([`INPUT_QUEUE`], newest dropped when
//! full) and in the Gemini writer's queue ([`link::SEND_QUEUE`], newest dropped). While a
//! connection is being set up or resumed, audio is held up to [`GAP_AUDIO_BYTES`] (about 2 s;
//! the oldest is dropped first) and sent once `setupComplete` arrives, so speech during a
//! `goAway` reconnect reaches the resumed session.

mod link;
pub mod wire;

pub use self::link::CLOSE_WAIT;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span, warn, Instrument};

use self::link::Link;
pub use self::wire::Usage;
use self::wire::{FunctionCall, ServerEvent};
use crate::net::dial::DialOptions;
use crate::net::liveness::{Heartbeat, Liveness, Pulse};
pub use crate::protocol::CallErrorCode;
use crate::protocol::{
    self, AgentMessage, Bytes, ErrorCode, Frame, ToolActivityState, ToolCall, ToolError, TranscriptRole,
};
use crate::secret::Secret;
use crate::tools::ToolOutput;

/// Public Gemini Live endpoint; `VOXA_GEMINI_URL` overrides it.
pub const GEMINI_LIVE_URL: &str =
    "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";

/// The answer to a voice frame that arrives when no call runs.
pub fn no_call_error() -> AgentMessage {
    AgentMessage::CallError {
        code: CallErrorCode::NoCall,
        message: "no voice call is running; send call_start first".into(),
    }
}

/// Hands `item` to a running call without waiting, so a stalled Gemini link never stalls the
/// session: audio that does not fit is dropped (the service's own voice detection copes), typed
/// text that does not fit is answered with the `busy` error this returns.
pub fn give(input: &mpsc::Sender<VoiceInput>, item: VoiceInput) -> Option<AgentMessage> {
    let is_text = matches!(item, VoiceInput::Text(_));
    (input.try_send(item).is_err() && is_text).then(|| AgentMessage::CallError {
        code: CallErrorCode::Busy,
        message: "the voice call is not keeping up; try again in a moment".into(),
    })
}

/// Name of the argument that routes a Gemini function call to another environment.
pub const ENV_ARG: &str = "env";

/// Adds the optional [`ENV_ARG`] argument to each declaration: the tools of an agent that drives
/// other environments can run on any of them.
pub fn declare_env_argument(declarations: &mut [Value]) {
    let env = serde_json::json!({"type": "STRING", "description": "Name of another machine (from fleet) to run this on; omit for this laptop."});
    for declaration in declarations {
        if declaration.get("parameters").is_none() {
            declaration["parameters"] = serde_json::json!({"type": "OBJECT", "properties": {}});
        }
        if let Some(properties) = declaration.pointer_mut("/parameters/properties").and_then(Value::as_object_mut) {
            properties.insert(ENV_ARG.into(), env.clone());
        }
    }
}

/// What a call writes to the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallLog {
    /// Its own lines (started, resumed, ended, failed) at `info` and `warn`: a self-hosted call.
    Narrated,
    /// Those lines at `debug` only; whoever started the call logs its [`CallSummary`] (a hosted
    /// call at the relay, whose log has one line per call).
    Summarised,
}

/// Logs at `$loud` for a narrated call, at `debug` for a summarised one.
macro_rules! call_note {
    ($log:expr, $loud:ident, $($arg:tt)+) => {
        match $log {
            CallLog::Narrated => tracing::$loud!($($arg)+),
            CallLog::Summarised => tracing::debug!($($arg)+),
        }
    };
}

/// What the voice bridge needs from the agent: the tools to declare to Gemini and a way to run
/// one of Gemini's function calls.
pub trait VoiceTools: Send + Sync {
    /// Gemini function declarations of every tool the caller may use.
    fn declarations(&self) -> Value;
    /// Runs one call wherever it belongs (this machine or an environment).
    fn run(&self, call: ToolCall, cancel: CancellationToken) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;
}

/// Microphone chunks queued from the phone before new ones are dropped (about 1 s of 20 ms chunks).
pub const INPUT_QUEUE: usize = 50;
/// Audio held while Gemini is being (re)connected: 2 s of PCM16 at 16 kHz; the oldest goes first.
pub const GAP_AUDIO_BYTES: usize = 64_000;
/// Typed `say` texts held while Gemini is being (re)connected.
pub const GAP_TEXTS: usize = 16;
/// Largest microphone chunk forwarded (2 s); larger binary frames are dropped.
pub const MAX_AUDIO_CHUNK: usize = 64 << 10;
/// Longest `say` text forwarded; the rest is cut.
pub const MAX_SAY_LEN: usize = 16 << 10;
/// Connection attempts when resuming after `goAway` or a lost connection.
pub const RESUME_ATTEMPTS: u32 = 3;
/// Longest wait for room on the Gemini link before a message is dropped as stalled.
pub const GEMINI_SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Pings on a quiet Gemini socket. The service answers pings 8 to 30 s late, so the link counts
/// as dead only after a full minute without any frame.
pub const HEARTBEAT: Heartbeat = Heartbeat { ping_every: Duration::from_secs(10), dead_after: Duration::from_secs(60) };
/// Time taken off a `goAway`'s `timeLeft`, so the resume starts before the service cuts the socket.
pub const GO_AWAY_MARGIN: Duration = Duration::from_secs(1);
/// Time assumed left after a `goAway` that does not say.
pub const GO_AWAY_DEFAULT: Duration = Duration::from_secs(10);
/// Longest running transcript kept for its final frame; the rest still goes out as partials.
pub const MAX_TRANSCRIPT_LEN: usize = 16 << 10;
/// Tool answers remembered until a newer resumable handle covers them (told to a resumed session).
pub const MAX_UNSETTLED: usize = 32;

/// `VOXA_GEMINI_URL` must be a WebSocket URL without a key in it: the key travels only in the
/// `x-goog-api-key` header. The URL itself is never repeated (it may hold a key).
pub fn check_url(url: &str) -> anyhow::Result<()> {
    let parsed = url::Url::parse(url.trim())
        .map_err(|_| crate::error::ConfigError::new("VOXA_GEMINI_URL is not a valid URL (expected wss://…)"))?;
    if !matches!(parsed.scheme(), "ws" | "wss") {
        return Err(crate::error::ConfigError::new(
            "VOXA_GEMINI_URL must start with wss:// (or ws:// for a loopback host)",
        )
        .into());
    }
    if parsed.query_pairs().any(|(name, _)| name.eq_ignore_ascii_case("key")) {
        return Err(crate::error::ConfigError::new(
            "VOXA_GEMINI_URL must not carry an API key (?key=…): voxa sends GEMINI_API_KEY in a header",
        )
        .into());
    }
    Ok(())
}

/// Where and how to reach Gemini Live.
#[derive(Clone, Debug)]
pub struct GeminiConfig {
    /// Sent only in the `x-goog-api-key` header; `Debug` shows it redacted.
    pub api_key: Secret,
    /// WebSocket endpoint (`VOXA_GEMINI_URL` overrides the public one).
    pub url: String,
    /// Model name; the `models/` prefix is added when missing.
    pub model: String,
    /// Prebuilt voice name (e.g. `Kore`).
    pub voice: String,
    /// Pings on a quiet Gemini socket; one silent for `dead_after` counts as lost (and is resumed).
    pub heartbeat: Heartbeat,
}

impl GeminiConfig {
    /// The settings for `api_key`: the endpoint of [`live_url`], `model` or the default model, the
    /// `Kore` voice and the default heartbeat.
    pub fn new(api_key: Secret, model: Option<String>) -> anyhow::Result<Self> {
        Ok(GeminiConfig {
            api_key,
            url: live_url()?,
            model: model.unwrap_or_else(|| crate::config::DEFAULT_GEMINI_MODEL.to_owned()),
            voice: "Kore".into(),
            heartbeat: HEARTBEAT,
        })
    }
}

/// The Live endpoint to dial: `VOXA_GEMINI_URL` when set (and valid), else [`GEMINI_LIVE_URL`].
pub fn live_url() -> anyhow::Result<String> {
    match std::env::var("VOXA_GEMINI_URL").ok().filter(|url| !url.trim().is_empty()) {
        Some(url) => {
            check_url(&url)?;
            Ok(url.trim().to_owned())
        }
        None => Ok(GEMINI_LIVE_URL.to_owned()),
    }
}

/// Input from the phone during a call.
#[derive(Debug)]
pub enum VoiceInput {
    /// PCM16LE mono 16 kHz, without the 0x01 prefix (a slice of the phone's frame, not a copy).
    Audio(Bytes),
    /// Typed text (`say`).
    Text(String),
    /// The end of a push-to-talk utterance (`audio_end`).
    AudioEnd,
}

/// A running voice call; dropping it ends the call.
pub struct VoiceCall {
    /// Microphone audio and typed text for Gemini (bounded: [`INPUT_QUEUE`]).
    pub input: mpsc::Sender<VoiceInput>,
    /// Cancel to end the call; the bridge cancels it too when the call ends on its own.
    pub end: CancellationToken,
    /// Resolves once the bridge has sent its last frame to the phone: what the call came to.
    pub summary: oneshot::Receiver<CallSummary>,
}

/// What a finished call came to, for its log line.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CallSummary {
    /// Seconds from `call_started` to the end; `None` when the call never started.
    pub duration_s: Option<f64>,
    /// The newest token counts the service reported.
    pub usage: Usage,
    /// Why the call failed, when it did.
    pub failure: Option<CallErrorCode>,
}

impl VoiceCall {
    /// True until the call ended, whoever ended it.
    pub fn is_live(&self) -> bool {
        !self.end.is_cancelled()
    }
}

/// Failures of the transport, worth another attempt when resuming.
fn is_transient(code: CallErrorCode) -> bool {
    matches!(code, CallErrorCode::GeminiUnreachable | CallErrorCode::GeminiClosed)
}

/// Why a call could not start or go on: a stable code and a sentence without the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallFailure {
    pub code: CallErrorCode,
    pub message: String,
    /// The WebSocket close code the service ended with, if it sent one.
    pub close_code: Option<u16>,
}

impl CallFailure {
    /// A failure whose message has every occurrence of `key` removed.
    pub fn new(code: CallErrorCode, message: impl Into<String>, key: &Secret) -> Self {
        CallFailure { code, message: scrub(&message.into(), key), close_code: None }
    }

    /// The same failure, caused by a close with `code`.
    pub fn with_close_code(mut self, code: u16) -> Self {
        self.close_code = Some(code);
        self
    }

    fn to_message(&self) -> AgentMessage {
        AgentMessage::CallError { code: self.code, message: self.message.clone() }
    }
}

/// `text` without any occurrence of the key (a hostile server may echo it).
fn scrub(text: &str, key: &Secret) -> String {
    let key = key.expose();
    if key.is_empty() {
        text.to_owned()
    } else {
        text.replace(key, "<redacted>")
    }
}

/// Starts a call: opens the Gemini session and bridges it to `phone` until `end` is cancelled.
/// The phone gets `call_started` once Gemini answered `setup`, or `call_error`.
/// The bridge runs on `tasks`, so whoever waits for them waits for the call to end.
pub fn start(
    config: Arc<GeminiConfig>,
    tools: Arc<dyn VoiceTools>,
    phone: mpsc::Sender<Frame>,
    tasks: &TaskTracker,
) -> VoiceCall {
    start_logged(CallLog::Narrated, config, tools, phone, tasks)
}

/// [`start`], writing to the log as `log` says.
pub fn start_logged(
    log: CallLog,
    config: Arc<GeminiConfig>,
    tools: Arc<dyn VoiceTools>,
    phone: mpsc::Sender<Frame>,
    tasks: &TaskTracker,
) -> VoiceCall {
    let (input, input_rx) = mpsc::channel(INPUT_QUEUE);
    let (summary_tx, summary) = oneshot::channel();
    let end = CancellationToken::new();
    let dial = DialOptions::default().with_proxy_from_env().unwrap_or_else(|err| {
        call_note!(log, warn, "ignoring the proxy setting for Gemini Live: {err:#}");
        DialOptions::default()
    });
    let heartbeat = config.heartbeat;
    let bridge = Bridge {
        log,
        declarations: tools.declarations(),
        config,
        dial,
        voice_tools: tools,
        phone,
        end: end.clone(),
        handle: None,
        going_away: None,
        context_lost: false,
        liveness: Liveness::new(heartbeat),
        generation: 0,
        started: None,
        gap: VecDeque::new(),
        gap_audio_bytes: 0,
        gap_texts: VecDeque::new(),
        running: HashMap::new(),
        unsettled: VecDeque::new(),
        tools: JoinSet::new(),
        transcripts: [String::new(), String::new()],
        usage: Usage::default(),
        dropped_audio: 0,
        summary: Some(summary_tx),
    };
    tasks.spawn(bridge.run(input_rx).instrument(info_span!("voice_call")));
    VoiceCall { input, end, summary }
}

type Opening = Pin<Box<dyn Future<Output = Result<Link, CallFailure>> + Send>>;

/// The Gemini side of a call: ready, or being opened.
enum Conn {
    Opening {
        attempt: Opening,
        /// The attempt resumes the newest handle.
        resuming: bool,
        tries: u32,
        /// A 1011 was already retried once.
        retried_internal: bool,
    },
    Ready(Link),
}

enum ConnEvent {
    Opened(Result<Link, CallFailure>),
    Frame(Option<Result<Message, tokio_tungstenite::tungstenite::Error>>),
}

impl Conn {
    fn opening(attempt: Opening, resuming: bool) -> Conn {
        Conn::Opening { attempt, resuming, tries: 1, retried_internal: false }
    }

    /// The ready connection, if any.
    fn link(&self) -> Option<&Link> {
        match self {
            Conn::Ready(link) => Some(link),
            Conn::Opening { .. } => None,
        }
    }

    /// The next thing that happens on the connection. Cancel-safe.
    async fn next(&mut self) -> ConnEvent {
        match self {
            Conn::Opening { attempt, .. } => ConnEvent::Opened(attempt.as_mut().await),
            Conn::Ready(link) => {
                use futures_util::StreamExt;
                ConnEvent::Frame(link.stream.next().await)
            }
        }
    }
}

/// A running tool call started by Gemini.
struct Running {
    cancel: CancellationToken,
    /// The connection generation that asked; a later one only hears of the outcome as a note.
    generation: u64,
}

/// A finished tool call.
struct ToolDone {
    id: String,
    name: String,
    outcome: Result<ToolOutput, ToolError>,
}

/// A tool answer the newest resumable handle does not cover yet.
struct Unsettled {
    id: String,
    name: String,
    response: Value,
}

/// Microphone input held while Gemini is being (re)connected.
enum Held {
    Audio(Bytes),
    End,
}

/// How the actor loop ended.
enum Ending {
    /// `call_end`, or the phone's session went away.
    Hangup,
    /// Gemini failed and could not be resumed.
    Failed(CallFailure),
}

struct Bridge {
    log: CallLog,
    config: Arc<GeminiConfig>,
    dial: DialOptions,
    declarations: Value,
    voice_tools: Arc<dyn VoiceTools>,
    phone: mpsc::Sender<Frame>,
    end: CancellationToken,
    /// Newest resumable session handle.
    handle: Option<String>,
    /// After `goAway`: when the old connection must be left at the latest.
    going_away: Option<tokio::time::Instant>,
    /// The next ready connection is a fresh session that must hear its context is gone.
    context_lost: bool,
    /// Pings and silence of the ready connection.
    liveness: Liveness,
    /// Counts connections that became ready.
    generation: u64,
    /// When `call_started` was sent.
    started: Option<Instant>,
    gap: VecDeque<Held>,
    gap_audio_bytes: usize,
    gap_texts: VecDeque<String>,
    running: HashMap<String, Running>,
    /// Answers sent since the newest resumable handle, oldest first.
    unsettled: VecDeque<Unsettled>,
    tools: JoinSet<ToolDone>,
    /// Running transcript text of the user and of the model.
    transcripts: [String; 2],
    /// Newest token counts.
    usage: Usage,
    dropped_audio: u64,
    /// Told what the call came to once it is over.
    summary: Option<oneshot::Sender<CallSummary>>,
}

impl Bridge {
    async fn run(mut self, mut input: mpsc::Receiver<VoiceInput>) {
        let mut conn = Conn::opening(self.open(None, Duration::ZERO, None), false);
        let ending = loop {
            let deadline = self.going_away.filter(|_| conn.link().is_some());
            tokio::select! {
                _ = self.end.cancelled() => break Ending::Hangup,
                pulse = self.liveness.tick() => {
                    if let Conn::Ready(link) = &conn {
                        if let Pulse::Ping = pulse {
                            link.ping();
                        } else {
                            let silent = format!("Gemini Live stopped answering for {:?}", self.config.heartbeat.dead_after);
                            let failure = CallFailure::new(CallErrorCode::GeminiClosed, silent, &self.config.api_key);
                            if let Err(failure) = self.lost(failure, true, &mut conn) {
                                break Ending::Failed(failure);
                            }
                        }
                    }
                }
                _ = crate::net::liveness::sleep_until(deadline) => self.go_away_due(&mut conn),
                item = input.recv() => match item {
                    Some(item) => self.on_input(item, conn.link()).await,
                    None => break Ending::Hangup,
                },
                event = conn.next() => match event {
                    ConnEvent::Opened(Ok(link)) => conn = self.on_ready(link).await,
                    ConnEvent::Opened(Err(failure)) => match self.retry(&conn, failure) {
                        Ok(next) => conn = next,
                        Err(failure) => break Ending::Failed(failure),
                    },
                    ConnEvent::Frame(frame) => {
                        if let Err(failure) = self.on_frame(frame, &mut conn).await {
                            break Ending::Failed(failure);
                        }
                    }
                },
                Some(done) = self.tools.join_next(), if !self.tools.is_empty() => match done {
                    Ok(done) => self.on_tool_done(done, &mut conn).await,
                    Err(err) => warn!(%err, "a tool task failed"),
                },
            }
        };
        self.finish(ending, conn).await;
    }

    /// Opens a connection after `delay`, resuming `handle` if given. An `old` connection is closed
    /// first, and its close awaited: the service refuses a resume while it is still open.
    fn open(&self, handle: Option<String>, delay: Duration, old: Option<Link>) -> Opening {
        let config = self.config.clone();
        let dial = self.dial.clone();
        let declarations = self.declarations.clone();
        Box::pin(async move {
            if let Some(old) = old {
                old.shutdown().await;
            }
            tokio::time::sleep(delay).await;
            link::open(&config, &dial, &declarations, handle.as_deref()).await
        })
    }

    /// A connection is ready: tell the phone (first time), then send what waited for it.
    async fn on_ready(&mut self, link: Link) -> Conn {
        self.generation += 1;
        self.going_away = None;
        self.liveness.heard();
        if self.started.is_none() {
            self.started = Some(Instant::now());
            call_note!(self.log, info, "voice call started");
            self.to_phone(AgentMessage::CallStarted).await;
        } else {
            call_note!(self.log, info, generation = self.generation, "voice call resumed");
        }
        if std::mem::take(&mut self.context_lost) {
            self.to_gemini(&link, wire::text(wire::CONTEXT_LOST)).await;
        }
        // Held input waits for room in Gemini's queue: it is bounded already.
        while let Some(text) = self.gap_texts.pop_front() {
            self.to_gemini(&link, wire::text(&text)).await;
        }
        while let Some(held) = self.gap.pop_front() {
            let message = match held {
                Held::Audio(pcm) => wire::audio(&pcm),
                Held::End => wire::audio_stream_end(),
            };
            self.to_gemini(&link, message).await;
        }
        self.gap_audio_bytes = 0;
        Conn::Ready(link)
    }

    /// After a failed attempt to resume: a fresh session for a stale handle (1008), one more try
    /// after an internal error (1011), a few after transport failures; else the end.
    fn retry(&mut self, conn: &Conn, failure: CallFailure) -> Result<Conn, CallFailure> {
        let Conn::Opening { resuming: true, tries, retried_internal, .. } = conn else { return Err(failure) };
        let (tries, retried_internal) = (*tries, *retried_internal);
        let delay = Duration::from_millis(250) * 2u32.pow(tries.saturating_sub(1).min(4));
        match failure.close_code {
            Some(1008) => {
                call_note!(self.log, info, "the Gemini session could not be resumed; starting a new one");
                self.handle = None;
                self.context_lost = true;
                Ok(Conn::opening(self.open(None, Duration::ZERO, None), false))
            }
            Some(1011) if !retried_internal => {
                debug!("resume refused with 1011; trying once more");
                let attempt = self.open(self.handle.clone(), delay, None);
                Ok(Conn::Opening { attempt, resuming: true, tries: tries + 1, retried_internal: true })
            }
            _ if is_transient(failure.code) && tries < RESUME_ATTEMPTS => {
                debug!(code = failure.code.as_str(), tries, "resume attempt failed; trying again");
                let attempt = self.open(self.handle.clone(), delay, None);
                Ok(Conn::Opening { attempt, resuming: true, tries: tries + 1, retried_internal })
            }
            _ => Err(failure),
        }
    }

    /// Replaces the current connection with one resuming the newest handle. Answers that handle
    /// does not cover are told to the resumed session as notes.
    fn resume(&mut self, conn: &mut Conn) {
        self.going_away = None;
        while let Some(Unsettled { id, name, response }) = self.unsettled.pop_front() {
            self.hold_text(wire::late_outcome(&id, &name, &response));
        }
        let placeholder = Conn::opening(Box::pin(std::future::pending()), true);
        let old = match std::mem::replace(conn, placeholder) {
            Conn::Ready(link) => Some(link),
            Conn::Opening { .. } => None,
        };
        *conn = Conn::opening(self.open(self.handle.clone(), Duration::ZERO, old), true);
        call_note!(self.log, info, "resuming the Gemini session");
    }

    /// After `goAway`: resume once no call is pending and a resumable handle covers every answer.
    fn resume_when_settled(&mut self, conn: &mut Conn) {
        if self.going_away.is_none() || conn.link().is_none() || self.handle.is_none() {
            return;
        }
        let pending = self.running.values().any(|running| running.generation == self.generation);
        if !pending && self.unsettled.is_empty() {
            self.resume(conn);
        }
    }

    /// `goAway`'s time is up: resume with what there is. Without any handle the service's close
    /// ends the call.
    fn go_away_due(&mut self, conn: &mut Conn) {
        self.going_away = None;
        if self.handle.is_some() {
            debug!("goAway's time is up; resuming with the newest handle");
            self.resume(conn);
        } else {
            call_note!(self.log, warn, "goAway's time is up and Gemini sent no resumable handle");
        }
    }

    /// Keeps a note for the next connection (the oldest goes when too many wait).
    fn hold_text(&mut self, text: String) {
        if self.gap_texts.len() == GAP_TEXTS {
            self.gap_texts.pop_front();
        }
        self.gap_texts.push_back(crate::text::prefix(&text, MAX_SAY_LEN).to_owned());
    }

    async fn on_input(&mut self, item: VoiceInput, link: Option<&Link>) {
        match item {
            VoiceInput::Audio(pcm) => {
                if pcm.is_empty() || pcm.len() > MAX_AUDIO_CHUNK {
                    return;
                }
                match link {
                    Some(link) => {
                        if !link.try_send(wire::audio(&pcm)) {
                            self.dropped_audio += 1;
                            if self.dropped_audio.is_power_of_two() {
                                debug!(dropped = self.dropped_audio, "Gemini is behind; microphone audio dropped");
                            }
                        }
                    }
                    None => {
                        self.gap_audio_bytes += pcm.len();
                        self.gap.push_back(Held::Audio(pcm));
                        while self.gap_audio_bytes > GAP_AUDIO_BYTES {
                            let Some(oldest) = self.gap.pop_front() else { break };
                            if let Held::Audio(oldest) = oldest {
                                self.gap_audio_bytes -= oldest.len();
                                self.dropped_audio += 1;
                            }
                        }
                    }
                }
            }
            VoiceInput::AudioEnd => match link {
                Some(link) => self.to_gemini(link, wire::audio_stream_end()).await,
                None => {
                    if !matches!(self.gap.back(), Some(Held::End) | None) {
                        self.gap.push_back(Held::End);
                    }
                }
            },
            VoiceInput::Text(text) => match link {
                Some(link) => self.say(link, &text).await,
                None => self.hold_text(text),
            },
        }
    }

    /// One frame from a ready connection. `Err` ends the call.
    async fn on_frame(
        &mut self,
        frame: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
        conn: &mut Conn,
    ) -> Result<(), CallFailure> {
        let key = &self.config.api_key;
        self.liveness.heard();
        let payload = match frame {
            Some(Ok(Message::Binary(data))) => data,
            Some(Ok(Message::Text(text))) => text.into(),
            Some(Ok(Message::Close(frame))) => {
                let failure = link::close_failure(frame.as_ref(), key);
                let refused = frame.is_some_and(|f| u16::from(f.code) == 1007);
                return self.lost(failure, !refused, conn);
            }
            Some(Ok(_)) => return Ok(()),
            Some(Err(err)) => {
                let failure = CallFailure::new(
                    CallErrorCode::GeminiClosed,
                    format!("the Gemini Live connection failed: {err}"),
                    key,
                );
                return self.lost(failure, true, conn);
            }
            None => {
                let failure = CallFailure::new(CallErrorCode::GeminiClosed, "Gemini Live closed the connection", key);
                return self.lost(failure, true, conn);
            }
        };
        let events = match wire::parse_server(&payload) {
            Ok(events) => events,
            Err(err) => {
                debug!(%err, len = payload.len(), "ignored a malformed message from Gemini");
                return Ok(());
            }
        };
        for event in events {
            self.on_event(event, conn).await;
        }
        Ok(())
    }

    /// The connection ended: resume with the newest handle when there is one and it may help.
    fn lost(&mut self, failure: CallFailure, resumable: bool, conn: &mut Conn) -> Result<(), CallFailure> {
        if resumable && self.handle.is_some() {
            debug!(code = failure.code.as_str(), "Gemini connection lost; resuming");
            self.resume(conn);
            Ok(())
        } else {
            Err(failure)
        }
    }

    async fn on_event(&mut self, event: ServerEvent, conn: &mut Conn) {
        match event {
            ServerEvent::SetupComplete => {}
            ServerEvent::Audio(pcm) => self.play(&pcm).await,
            ServerEvent::Transcript { speaker, text, is_final } => {
                self.on_transcript(speaker, text, is_final).await;
            }
            ServerEvent::Interrupted => {
                self.to_phone(AgentMessage::Interrupted).await;
                self.finish_transcript(TranscriptRole::Model).await;
            }
            ServerEvent::GenerationComplete => self.finish_transcript(TranscriptRole::Model).await,
            ServerEvent::TurnComplete { reason } => self.on_turn_complete(reason).await,
            ServerEvent::ToolCalls(calls) => {
                self.finish_transcript(TranscriptRole::User).await;
                for call in calls {
                    self.start_tool(call, conn.link()).await;
                }
            }
            ServerEvent::ToolCancellation(ids) => {
                for id in ids {
                    // Removed first: a cancelled call gets no toolResponse.
                    if let Some(running) = self.running.remove(&id) {
                        debug!(%id, "Gemini cancelled a tool call");
                        running.cancel.cancel();
                    }
                }
                self.resume_when_settled(conn);
            }
            ServerEvent::Resumable(handle) => {
                // Issued only while no call is pending: it covers every answer sent before it.
                self.handle = Some(handle);
                self.unsettled.clear();
                self.resume_when_settled(conn);
            }
            ServerEvent::GoAway { time_left } => {
                let time_left = time_left.unwrap_or(GO_AWAY_DEFAULT);
                debug!(?time_left, "Gemini is going away");
                self.going_away = Some(tokio::time::Instant::now() + time_left.saturating_sub(GO_AWAY_MARGIN));
                self.resume_when_settled(conn);
            }
            ServerEvent::Usage(usage) => self.usage = usage,
        }
    }

    /// The model's voice, to the phone. The model answers: what the user said is complete.
    async fn play(&mut self, pcm: &[u8]) {
        self.finish_transcript(TranscriptRole::User).await;
        let mut frame = Vec::with_capacity(pcm.len() + 1);
        frame.push(protocol::AUDIO_PREFIX);
        frame.extend_from_slice(pcm);
        // A phone that cannot keep up loses speech rather than stalling the call.
        if self.phone.try_send(Frame::binary(frame)).is_err() {
            debug!("phone is behind; model audio dropped");
        }
    }

    /// The turn is over: both transcripts are final, and the phone hears why a turn gave nothing.
    async fn on_turn_complete(&mut self, reason: Option<wire::TurnReason>) {
        self.finish_transcript(TranscriptRole::User).await;
        self.finish_transcript(TranscriptRole::Model).await;
        if let Some(reason) = &reason {
            call_note!(self.log, info, reason = %reason.code, "Gemini ended a turn without an answer");
        }
        let (reason, message) = reason.map(|r| (r.code, r.message)).unzip();
        self.to_phone(AgentMessage::TurnComplete { reason, message }).await;
    }

    /// A piece of transcript: sent on as a partial, or (`finished`) with the whole utterance.
    async fn on_transcript(&mut self, speaker: TranscriptRole, text: String, finished: bool) {
        if speaker == TranscriptRole::Model {
            self.finish_transcript(TranscriptRole::User).await;
        }
        let running = &mut self.transcripts[speaker as usize];
        let room = MAX_TRANSCRIPT_LEN.saturating_sub(running.len());
        running.push_str(crate::text::prefix(&text, room));
        if finished {
            self.finish_transcript(speaker).await;
        } else if !text.is_empty() {
            self.to_phone(AgentMessage::Transcript { role: speaker, text, is_final: false }).await;
        }
    }

    /// Sends the running transcript of `speaker` as final, if there is one.
    async fn finish_transcript(&mut self, speaker: TranscriptRole) {
        if let Some(last) = self.take_final(speaker) {
            self.to_phone(last).await;
        }
    }

    /// The running transcript of `speaker` as a final frame, if there is one; it starts anew.
    fn take_final(&mut self, speaker: TranscriptRole) -> Option<AgentMessage> {
        let text = std::mem::take(&mut self.transcripts[speaker as usize]);
        (!text.is_empty()).then_some(AgentMessage::Transcript { role: speaker, text, is_final: true })
    }

    /// Runs one of Gemini's function calls at once, beside any others.
    async fn start_tool(&mut self, call: FunctionCall, link: Option<&Link>) {
        let FunctionCall { id, name, args } = call;
        if self.running.contains_key(&id) {
            debug!(%id, "ignored a repeated tool call id that is still running");
            return;
        }
        if self.running.len() >= protocol::MAX_CALLS_IN_FLIGHT {
            let error = ToolError::new(ErrorCode::Busy, "too many tool calls are running; try again shortly");
            if let Some(link) = link {
                self.to_gemini(link, wire::tool_response(&id, &name, wire::tool_result(&Err(error)))).await;
            }
            return;
        }
        let cancel = self.end.child_token();
        self.running.insert(id.clone(), Running { cancel: cancel.clone(), generation: self.generation });
        self.to_phone(AgentMessage::ToolActivity {
            id: id.clone(),
            name: name.clone(),
            state: ToolActivityState::Started,
            ok: None,
        })
        .await;
        let call = self.voice_tools.run(tool_call(id.clone(), name.clone(), args), cancel.clone());
        let span = info_span!("gemini_tool", %id, tool = %name);
        self.tools.spawn(
            async move {
                tokio::pin!(call);
                let outcome = tokio::select! {
                    outcome = &mut call => outcome,
                    _ = cancel.cancelled() => match tokio::time::timeout(protocol::CANCEL_GRACE, &mut call).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(ToolError::new(ErrorCode::Cancelled, "the call was cancelled")),
                    },
                };
                ToolDone { id, name, outcome }
            }
            .instrument(span),
        );
    }

    /// A tool finished: the image to the phone, `tool_activity`, and Gemini's answer unless it
    /// cancelled the call. A call from an earlier connection is told to the current session as a
    /// note (held until one is ready).
    async fn on_tool_done(&mut self, done: ToolDone, conn: &mut Conn) {
        let ToolDone { id, name, outcome } = done;
        if let Ok(ToolOutput { image: Some(shot), .. }) = &outcome {
            self.to_phone(shot.image_frame(&id)).await;
        }
        let ok = outcome.is_ok();
        self.to_phone(AgentMessage::ToolActivity {
            id: id.clone(),
            name: name.clone(),
            state: ToolActivityState::Finished,
            ok: Some(ok),
        })
        .await;
        let Some(running) = self.running.remove(&id) else { return };
        let response = wire::tool_result(&outcome);
        match conn.link() {
            Some(link) if running.generation == self.generation => {
                self.to_gemini(link, wire::tool_response(&id, &name, response.clone())).await;
                if self.unsettled.len() == MAX_UNSETTLED {
                    self.unsettled.pop_front();
                }
                self.unsettled.push_back(Unsettled { id, name, response });
                self.resume_when_settled(conn);
            }
            Some(link) => {
                debug!(%id, "tool finished after its Gemini connection was replaced; told as a note");
                self.say(link, &wire::late_outcome(&id, &name, &response)).await;
            }
            None => self.hold_text(wire::late_outcome(&id, &name, &response)),
        }
    }

    async fn finish(mut self, ending: Ending, conn: Conn) {
        for running in self.running.values() {
            running.cancel.cancel();
        }
        // Cancelled tools wind down on their own (their child processes included).
        self.tools.detach_all();
        if let Conn::Ready(link) = conn {
            link.close();
        }
        if self.dropped_audio > 0 {
            debug!(dropped = self.dropped_audio, "microphone chunks dropped during the call");
        }
        // What was said last is final too: nothing more of it will come.
        for speaker in [TranscriptRole::User, TranscriptRole::Model] {
            if let Some(last) = self.take_final(speaker) {
                self.to_phone_now(last).await;
            }
        }
        if let Ending::Failed(failure) = &ending {
            call_note!(self.log, warn, code = failure.code.as_str(), "voice call failed: {}", failure.message);
            self.to_phone_now(failure.to_message()).await;
        }
        let failure = match &ending {
            Ending::Failed(failure) => Some(failure.code),
            Ending::Hangup => None,
        };
        let mut summary = CallSummary { duration_s: None, usage: self.usage, failure };
        if let Some(started) = self.started {
            let duration_s = started.elapsed().as_millis() as f64 / 1000.0;
            let Usage { prompt_token_count, response_token_count, total_token_count } = self.usage;
            call_note!(
                self.log,
                info,
                duration_s,
                prompt_token_count,
                response_token_count,
                total_token_count,
                "voice call ended"
            );
            self.to_phone_now(AgentMessage::CallEnded { duration_s }).await;
            summary.duration_s = Some(duration_s);
        }
        self.end.cancel();
        if let Some(tx) = self.summary.take() {
            let _ = tx.send(summary);
        }
    }

    /// Sends a control frame to the phone, giving up if the call ends meanwhile.
    async fn to_phone(&self, message: AgentMessage) {
        tokio::select! {
            _ = self.end.cancelled() => {}
            _ = self.phone.send(Frame::from(message)) => {}
        }
    }

    /// Sends a last frame to the phone, bounded in time (the phone may be gone).
    async fn to_phone_now(&self, message: AgentMessage) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.phone.send(Frame::from(message))).await;
    }

    /// Queues a message Gemini must get, giving up if the call ends meanwhile.
    /// Sends text as the user's words, cut to [`MAX_SAY_LEN`] like a held note.
    async fn say(&self, link: &Link, text: &str) {
        self.to_gemini(link, wire::text(crate::text::prefix(text, MAX_SAY_LEN))).await;
    }

    async fn to_gemini(&self, link: &Link, text: String) {
        // A link that takes no message for this long is stalled: drop this one and let the
        // heartbeat notice the silence and resume, instead of freezing the whole bridge.
        tokio::select! {
            _ = self.end.cancelled() => {}
            sent = tokio::time::timeout(GEMINI_SEND_TIMEOUT, link.send(text)) => {
                if sent.is_err() {
                    call_note!(self.log, warn, "Gemini is not taking messages; dropped one");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_redacts_the_key() {
        let config = GeminiConfig {
            api_key: Secret::from_string("AIzaSy-very-secret".into()),
            url: "wss://example.com/ws".into(),
            model: "models/m".into(),
            voice: "Kore".into(),
            heartbeat: Heartbeat::default(),
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn failures_scrub_the_key_and_keep_stable_codes() {
        let key = Secret::from_string("AIzaSy-very-secret".into());
        let failure = CallFailure::new(CallErrorCode::BadKey, "key AIzaSy-very-secret rejected", &key);
        assert_eq!(failure.message, "key <redacted> rejected");
        let codes = [
            CallErrorCode::BadKey,
            CallErrorCode::GeminiRefused,
            CallErrorCode::GeminiNotFound,
            CallErrorCode::GeminiUnavailable,
            CallErrorCode::GeminiUnreachable,
            CallErrorCode::GeminiClosed,
        ];
        let names: Vec<_> = codes.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "bad-key",
                "gemini-refused",
                "gemini-not-found",
                "gemini-unavailable",
                "gemini-unreachable",
                "gemini-closed"
            ]
        );
        let json = failure.to_message().to_json();
        assert_eq!(json, r#"{"type":"call_error","code":"bad-key","message":"key <redacted> rejected"}"#);
    }
}

/// A Gemini function call as a `tool_call` (docs/PROTOCOL.md): an `env` argument routes it to another environment.
fn tool_call(id: String, name: String, mut args: Value) -> protocol::ToolCall {
    let env = match args.as_object_mut().and_then(|map| map.remove(ENV_ARG)) {
        Some(Value::String(env)) if !env.is_empty() => Some(env),
        _ => None,
    };
    protocol::ToolCall { id, name, args, env, caller: None }
}

#[cfg(test)]
mod routing_tests {
    use super::*;

    #[test]
    fn an_env_argument_becomes_the_calls_environment() {
        let call = tool_call("1".into(), "run_command".into(), serde_json::json!({"command": "ls", "env": "devbox"}));
        assert_eq!(call.env.as_deref(), Some("devbox"));
        assert_eq!(call.args, serde_json::json!({"command": "ls"}));
        let call = tool_call("2".into(), "run_command".into(), serde_json::json!({"command": "ls", "env": ""}));
        assert_eq!(call.env, None);
        assert_eq!(call.args, serde_json::json!({"command": "ls"}));
    }
}
