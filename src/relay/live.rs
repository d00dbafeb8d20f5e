//! Hosted voice (docs/PROTOCOL.md, "Hosted voice"): `GET /live?code=` is a phone socket with voice
//! added. The relay joins the pairing as the phone side and passes the session through unchanged
//! (the agent's challenge, the phone's hello, the agent's `hello_ok`: the relay never learns the
//! token), except the voice frames (`call_start`, microphone audio, `say`, `audio_end`,
//! `call_end`), which it answers itself by hosting the Gemini Live session with the operator's
//! key. Gemini's function calls go to the agent as ordinary `tool_call` frames labelled
//! [`HOSTED_CALLER`], so the laptop's policy and audit decide and record them.
//!
//! Decisions:
//! - A call starts only after the agent's `hello_ok` in the current session, so only a phone
//!   that proved the token to the laptop spends the operator's key.
//! - Gemini is declared exactly the tools the agent listed in that `hello_ok`.
//! - The relay's own calls use ids starting with [`CALL_ID_PREFIX`]. The phone may not use that
//!   prefix (its `tool_call` is refused, its `cancel` dropped), and any `caller` field the phone
//!   sends is removed, so the label on the laptop's audit is the relay's word alone.
//! - Results, progress and images for those ids stay at the relay: the image goes to the phone
//!   under Gemini's id (as in self-hosted mode), Gemini gets the text result, progress is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::future::{BoxFuture, FusedFuture, FutureExt};
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, info_span};

use super::codec::{self, FrameReader, OutFrame};
use super::hub::{Action, End, Outbox, Push, Slot};
use super::metrics::RelayMetrics;
use super::socket::{forward, read_side, write_side, Deliver, Membership, RelayStream};
use super::{Limits, Route, NOT_FOUND};
use crate::gemini::{self, CallLog, GeminiConfig, VoiceCall, VoiceInput, VoiceTools};
use crate::net::http::RequestHead;
use crate::protocol::{
    self, AgentMessage, CallErrorCode, ClientMessage, ErrorCode, Frame, PeerRole, ToolCall, ToolError, ToolResult,
    HOSTED_CALLER,
};
use crate::secret::Secret;
use crate::tools::{gemini_declarations, ToolOutput};

/// Hosted calls one relay runs at once unless its operator says otherwise.
pub const DEFAULT_MAX_CALLS: usize = 100;
/// Longest hosted call unless its operator says otherwise.
pub const DEFAULT_MAX_CALL_TIME: Duration = Duration::from_secs(30 * 60);
/// Start of the ids of the tool calls the relay makes for Gemini; the phone may not use it.
pub const CALL_ID_PREFIX: &str = "gemini-hosted-";
/// Characters of the code's SHA-256 (hex) that name a call in the log.
pub const CODE_TAG_LEN: usize = 12;
/// Most tool names of a `hello_ok` declared to Gemini; the rest are left out.
pub const MAX_DECLARED_TOOLS: usize = 128;
/// Frames from the phone waiting for the session; while they wait the phone is not read.
const PHONE_QUEUE: usize = 64;
/// Frames from the voice bridge waiting for the phone.
const BRIDGE_QUEUE: usize = 64;
/// `tool_call` and `cancel` frames waiting to go to the agent.
const TO_AGENT_QUEUE: usize = 64;
/// Time a call gets to send its last frames when the relay shuts down (within the relay's grace).
const WIND_DOWN: Duration = Duration::from_secs(3);
/// What the model hears when the laptop leaves during a call.
const LAPTOP_OFFLINE_NOTE: &str = "(voxa) The laptop went offline: its tools cannot run until it reconnects. \
                                   Tell the user briefly.";
/// The error of every tool call the laptop can no longer answer.
const LAPTOP_OFFLINE: &str = "the laptop is offline";

/// What the relay needs to host voice calls.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// The operator's Gemini settings; the key never leaves the relay but in its header to Gemini.
    pub gemini: Arc<GeminiConfig>,
    /// Calls hosted at once; `call_start` beyond it gets `call_error` `at-capacity`.
    pub max_calls: usize,
    /// Longest call; it then ends with `call_ended`.
    pub max_call_time: Duration,
    /// Token `/live` requires instead of the relay token (`Authorization: Bearer`).
    pub proxy_token: Option<Secret>,
}

impl LiveConfig {
    /// Hosting with `gemini` and the default limits.
    pub fn new(gemini: GeminiConfig) -> Self {
        LiveConfig {
            gemini: Arc::new(gemini),
            max_calls: DEFAULT_MAX_CALLS,
            max_call_time: DEFAULT_MAX_CALL_TIME,
            proxy_token: None,
        }
    }
}

/// A relay's hosting: its settings and the calls it runs.
pub(super) struct Hosting {
    config: LiveConfig,
    running: Arc<AtomicUsize>,
    metrics: Arc<RelayMetrics>,
}

impl Hosting {
    pub(super) fn new(config: LiveConfig, metrics: Arc<RelayMetrics>) -> Self {
        Hosting { config, running: Arc::default(), metrics }
    }

    /// A place for one more call, if the operator's limit allows it.
    fn admit(&self) -> Option<CallGuard> {
        let previous = self.running.fetch_add(1, Ordering::AcqRel);
        if previous >= self.config.max_calls {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.metrics.hosted_call(1);
        Some(CallGuard { running: Arc::clone(&self.running), metrics: Arc::clone(&self.metrics) })
    }
}

/// Counts a call against the limit (and in the metrics) until its Gemini session is closed.
struct CallGuard {
    running: Arc<AtomicUsize>,
    metrics: Arc<RelayMetrics>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.metrics.hosted_call(-1);
    }
}

/// The route for `/live`; `None` for every other path. Without hosting `/live` does not exist. It
/// takes the proxy token when one is set, else the relay token, as `/ws` does.
pub(super) fn route(head: &RequestHead, hosting: Option<&Hosting>, relay_token: Option<&Secret>) -> Option<Route> {
    match head.path.as_str() {
        "/live" => Some(match hosting {
            None => Route::Refuse(NOT_FOUND),
            Some(hosting) => {
                let token = hosting.config.proxy_token.as_ref().or(relay_token);
                match super::join_route(head, PeerRole::Phone, token) {
                    Route::Join { code, .. } => Route::Live { code },
                    other => other,
                }
            }
        }),
        _ => None,
    }
}

/// A code as the log names it: the first [`CODE_TAG_LEN`] hex characters of its SHA-256.
pub fn code_tag(code: &str) -> String {
    let digest = Sha256::digest(code.as_bytes());
    hex::encode(digest)[..CODE_TAG_LEN].to_owned()
}

/// Serves an upgraded `/live` socket until the phone leaves, is replaced, or the relay stops.
pub(super) async fn serve<S: RelayStream>(
    mut stream: S,
    leftover: Vec<u8>,
    member: Membership,
    limits: &Limits,
    hosting: &Hosting,
    cancel: &CancellationToken,
) {
    let phone = member.outbox(limits);
    // What the agent sends the phone side lands here, for the session to pass on or answer.
    let inbox = member.outbox(limits);
    let (mut read_half, mut write_half) = stream.halves();
    let frames = FrameReader::new(limits.max_frame_len, &leftover);
    drop(leftover);
    let slot = member.join(&inbox);
    debug!("joined for hosted voice");
    let (phone_tx, phone_rx) = mpsc::channel(PHONE_QUEUE);
    let session = LiveSession::new(hosting, &member, &slot, limits, Arc::clone(&phone), Arc::clone(&inbox));

    let reader = read_side(&mut read_half, frames, &member, &phone, limits, ToSession(phone_tx)).fuse();
    let writer = write_side(&mut write_half, &phone).fuse();
    let actor = session.run(phone_rx, cancel).fuse();
    tokio::pin!(reader, writer, actor);
    let calls = loop {
        tokio::select! {
            calls = &mut actor => break calls,
            () = &mut reader, if !reader.is_terminated() => {}
            result = &mut writer, if !writer.is_terminated() => {
                if let Err(err) = result {
                    debug!(%err, "write failed");
                }
                phone.end(End::Abort);
            }
        }
    };
    member.leave(&slot);
    inbox.end(End::Abort);
    phone.end(End::Abort);
    debug!(end = ?phone.ended(), "left");
    super::socket::wind_down(&mut writer, &mut reader).await;
    // The call ends on its own once the session is gone; waiting for it here lets the relay's
    // shutdown see its log line written, unless Gemini is slower to close than the relay's
    // shutdown grace.
    if timeout(WIND_DOWN, calls.wait()).await.is_err() {
        debug!("hosted call still ending; leaving it");
    }
}

/// The phone's frames go to the session; once the phone stops, the channel closes.
struct ToSession(mpsc::Sender<OutFrame>);

impl Deliver for ToSession {
    async fn deliver(&mut self, frame: OutFrame) {
        let _ = self.0.send(frame).await;
    }
}

/// One `/live` socket's session: passes frames through and hosts its voice call.
struct LiveSession<'a> {
    hosting: &'a Hosting,
    code_tag: String,
    slot: Arc<Slot>,
    member: &'a Membership,
    stall_timeout: Duration,
    phone: Arc<Outbox>,
    inbox: Arc<Outbox>,
    /// How far the current session's hello has come.
    handshake: Handshake,
    agent: Arc<AgentLink>,
    call: Option<Call>,
    bridge_tx: mpsc::Sender<Frame>,
    bridge_rx: mpsc::Receiver<Frame>,
    agent_rx: mpsc::Receiver<String>,
    /// The bridge and the call's log line.
    tasks: TaskTracker,
}

/// The running call.
struct Call {
    input: mpsc::Sender<VoiceInput>,
    end: CancellationToken,
    deadline: Instant,
}

/// How far a session's hello has come, as far as the relay can tell: it cannot check the proofs
/// (it never holds the token), only that the frames came in their order, each from its side.
#[derive(Debug, PartialEq)]
enum Handshake {
    /// No challenge from the current agent socket yet, or the last hello went wrong.
    Waiting,
    /// The agent's challenge went to the phone.
    Challenged,
    /// The phone answered it with a well-formed protocol-2 hello.
    HelloSent,
    /// The agent accepted that hello: `hello_ok` with a proof, listing these tools.
    Accepted(Vec<String>),
}

impl Handshake {
    /// After an agent frame of `kind` (`hello_ok` parsed as `hello_ok`).
    fn on_agent(&mut self, kind: &str, hello_ok: Option<&protocol::HelloOk>) {
        *self = match (std::mem::replace(self, Handshake::Waiting), kind, hello_ok) {
            (_, "challenge", _) => Handshake::Challenged,
            (Handshake::HelloSent, "hello_ok", Some(ok))
                if ok.proof.as_deref().is_some_and(protocol::is_hello_proof) =>
            {
                Handshake::Accepted(ok.tools.clone())
            }
            (Handshake::HelloSent, "hello_ok" | "error", _) => Handshake::Waiting,
            (state, _, _) => state,
        };
    }

    /// After the phone's `hello`.
    fn on_phone_hello(&mut self, hello: &Map<String, Value>) {
        let text = |field: &str| hello.get(field).and_then(Value::as_str);
        let well_formed = hello.get("protocol").and_then(Value::as_u64) == Some(u64::from(protocol::PROTOCOL_VERSION))
            && text("nonce").is_some_and(protocol::is_hello_nonce)
            && text("proof").is_some_and(protocol::is_hello_proof)
            && !hello.contains_key("token");
        *self = match self {
            Handshake::Challenged if well_formed => Handshake::HelloSent,
            _ => Handshake::Waiting,
        };
    }

    /// The tools of the accepted `hello_ok`.
    fn tools(&self) -> Option<&[String]> {
        match self {
            Handshake::Accepted(tools) => Some(tools),
            _ => None,
        }
    }
}

/// Gemini's declarations for the tools of a `hello_ok` (at most [`MAX_DECLARED_TOOLS`]), built as
/// a self-hosted call builds them: an agent that lists `fleet` gets the `env` argument on the rest.
fn hosted_declarations(tools: &[String]) -> Value {
    gemini_declarations(&tools[..tools.len().min(MAX_DECLARED_TOOLS)])
}

/// Why the session ended.
enum Ending {
    /// The phone left or was replaced: the call ends at once.
    PhoneGone,
    /// The relay shuts down: the call ends with `call_ended` and the socket with 1001.
    Shutdown,
}

impl<'a> LiveSession<'a> {
    fn new(
        hosting: &'a Hosting,
        member: &'a Membership,
        slot: &Arc<Slot>,
        limits: &Limits,
        phone: Arc<Outbox>,
        inbox: Arc<Outbox>,
    ) -> Self {
        let (bridge_tx, bridge_rx) = mpsc::channel(BRIDGE_QUEUE);
        let (agent_tx, agent_rx) = mpsc::channel(TO_AGENT_QUEUE);
        LiveSession {
            hosting,
            code_tag: code_tag(&format!("{:032x}", member.code)),
            slot: Arc::clone(slot),
            member,
            stall_timeout: limits.stall_timeout,
            phone,
            inbox,
            handshake: Handshake::Waiting,
            agent: Arc::new(AgentLink { state: Mutex::default(), next_id: AtomicU64::new(1), to_agent: agent_tx }),
            call: None,
            bridge_tx,
            bridge_rx,
            agent_rx,
            tasks: TaskTracker::new(),
        }
    }

    /// Runs the session until the phone or the relay ends it; returns the tasks of its call.
    async fn run(mut self, mut from_phone: mpsc::Receiver<OutFrame>, cancel: &CancellationToken) -> TaskTracker {
        let ending = loop {
            let deadline = self.call.as_ref().map(|call| call.deadline);
            let call_end = self.call.as_ref().map(|call| call.end.clone());
            tokio::select! {
                biased;
                () = cancel.cancelled() => break Ending::Shutdown,
                () = self.phone.ending() => break Ending::PhoneGone,
                frame = from_phone.recv() => match frame {
                    Some(frame) => self.on_phone_frame(frame).await,
                    None => break Ending::PhoneGone,
                },
                Some(message) = self.bridge_rx.recv() => self.bridge_to_phone(message).await,
                action = self.inbox.next() => match action {
                    Action::Frame(frame) => self.on_agent_frame(frame).await,
                    Action::Close(end) => {
                        // Replaced by a newer phone (4001) or too slow a reader: the phone hears why.
                        self.phone.end(end);
                        break Ending::PhoneGone;
                    }
                    Action::Ping | Action::Pong(_) => {}
                },
                Some(text) = self.agent_rx.recv() => {
                    forward(&self.slot, self.member, &self.inbox, OutFrame::text(text), self.stall_timeout).await;
                }
                () = crate::net::liveness::cancelled(call_end) => {
                    self.call = None;
                }
                () = crate::net::liveness::sleep_until(deadline) => {
                    debug!("hosted call reached the operator's time limit");
                    if let Some(call) = self.call.take() {
                        call.end.cancel();
                    }
                }
            }
        };
        self.finish(ending).await
    }

    async fn finish(mut self, ending: Ending) -> TaskTracker {
        self.laptop_offline();
        if let Some(call) = self.call.take() {
            call.end.cancel();
        }
        self.tasks.close();
        if let Ending::Shutdown = ending {
            // The bridge says `call_ended`; the phone gets it before the socket closes.
            let drain = async {
                loop {
                    tokio::select! {
                        Some(message) = self.bridge_rx.recv() => self.bridge_to_phone(message).await,
                        () = self.tasks.wait() => break,
                    }
                }
                while let Ok(message) = self.bridge_rx.try_recv() {
                    self.bridge_to_phone(message).await;
                }
                self.phone.drained().await;
            };
            let _ = timeout(WIND_DOWN, drain).await;
            self.phone.end(End::Close { code: codec::close::GOING_AWAY, reason: "relay shutting down" });
        }
        // The bridge closes Gemini's socket on its own once its call ended; the log line waits for it.
        self.tasks
    }

    async fn on_phone_frame(&mut self, frame: OutFrame) {
        if frame.opcode == codec::OP_BINARY {
            if let (Some(call), Some(&protocol::AUDIO_PREFIX)) = (&self.call, frame.payload.first()) {
                // A full queue means Gemini is behind; dropping 20 ms of audio beats growing memory.
                let pcm = protocol::Bytes::from(frame.payload).slice(1..);
                let _ = call.input.try_send(VoiceInput::Audio(pcm));
            }
            return;
        }
        let Ok(mut map) = serde_json::from_slice::<Map<String, Value>>(&frame.payload) else {
            // Not an object: the agent answers `bad-frame`.
            return self.to_agent(frame).await;
        };
        let kind = map.get("type").and_then(Value::as_str).unwrap_or_default();
        let id = map.get("id").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "hello" => {
                self.handshake.on_phone_hello(&map);
                self.to_agent(frame).await;
            }
            "call_start" => self.start_call().await,
            "say" => {
                let text = map.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
                self.give_call(VoiceInput::Text(text)).await;
            }
            "audio_end" => self.give_call(VoiceInput::AudioEnd).await,
            "call_end" => match self.call.take() {
                Some(call) => call.end.cancel(),
                None => self.to_phone_message(gemini::no_call_error()).await,
            },
            "tool_call" if id.starts_with(CALL_ID_PREFIX) => {
                let error = ToolError::new(
                    ErrorCode::InvalidArgs,
                    format!("ids starting with {CALL_ID_PREFIX} are the relay's"),
                );
                let refused = ToolResult::failure(crate::text::prefix(id, protocol::MAX_CALL_ID_LEN).to_owned(), error);
                self.to_phone_message(AgentMessage::ToolResult(refused)).await;
            }
            "cancel" if id.starts_with(CALL_ID_PREFIX) => debug!("dropped a phone's cancel of a relay call"),
            "tool_call" if map.contains_key("caller") => {
                map.remove("caller");
                self.to_agent(OutFrame::text(Value::Object(map).to_string())).await;
            }
            _ => self.to_agent(frame).await,
        }
    }

    /// `say` or `audio_end` for the running call, or `no-call`.
    async fn give_call(&mut self, input: VoiceInput) {
        let answer = match &self.call {
            Some(call) => gemini::give(&call.input, input),
            None => Some(gemini::no_call_error()),
        };
        if let Some(answer) = answer {
            self.to_phone_message(answer).await;
        }
    }

    async fn start_call(&mut self) {
        if let Some(previous) = self.call.take() {
            previous.end.cancel();
        }
        let Some(tools) = self.handshake.tools() else {
            let message = "the laptop has not accepted this session (it is offline, or the hello was refused)";
            let refused = AgentMessage::CallError { code: CallErrorCode::Unavailable, message: message.into() };
            return self.to_phone_message(refused).await;
        };
        let Some(guard) = self.hosting.admit() else {
            debug!("hosted call refused: at capacity");
            let refused = AgentMessage::CallError {
                code: CallErrorCode::AtCapacity,
                message: "the relay is at capacity; try again later".into(),
            };
            return self.to_phone_message(refused).await;
        };
        let voice_tools =
            Arc::new(HostedTools { agent: Arc::clone(&self.agent), declarations: hosted_declarations(tools) });
        let span = info_span!("hosted_call", code = %self.code_tag);
        let VoiceCall { input, end, summary } = span.in_scope(|| {
            let config = self.hosting.config.gemini.clone();
            gemini::start_logged(CallLog::Summarised, config, voice_tools, self.bridge_tx.clone(), &self.tasks)
        });
        let code = self.code_tag.clone();
        let started = SystemTime::now();
        self.tasks.spawn(async move {
            // A bridge that ended without its summary (a panic) is logged as such, not as a clean call.
            let (summary, failure) = match summary.await {
                Ok(summary) => {
                    let failure = summary.failure.map_or("none", |code| code.as_str());
                    (summary, failure)
                }
                Err(_) => (gemini::CallSummary::default(), "internal"),
            };
            drop(guard);
            log_call(&code, started, &summary, failure);
        });
        let deadline = Instant::now() + self.hosting.config.max_call_time;
        self.call = Some(Call { input, end, deadline });
    }

    async fn on_agent_frame(&mut self, frame: OutFrame) {
        if frame.opcode != codec::OP_TEXT {
            return self.to_phone(frame).await;
        }
        let Ok(peek) = serde_json::from_slice::<Peek>(&frame.payload) else {
            return self.to_phone(frame).await;
        };
        let own = peek.id.as_deref().is_some_and(|id| id.starts_with(CALL_ID_PREFIX));
        match peek.kind.as_str() {
            protocol::PEER_TYPE if peek.peer.as_deref() == Some("agent") => {
                // A new agent socket starts a new session: a new hello, a new `hello_ok`.
                self.handshake = Handshake::Waiting;
                self.laptop_offline();
                self.phone.push_notice(frame);
            }
            protocol::PEER_TYPE => self.phone.push_notice(frame),
            "hello_ok" => {
                let hello_ok = match serde_json::from_slice::<AgentMessage>(&frame.payload) {
                    Ok(AgentMessage::HelloOk(hello_ok)) => Some(hello_ok),
                    _ => None,
                };
                self.handshake.on_agent("hello_ok", hello_ok.as_ref());
                if self.handshake.tools().is_some() {
                    self.agent.state().present = true;
                }
                self.to_phone(frame).await;
            }
            kind @ ("challenge" | "error") => {
                self.handshake.on_agent(kind, None);
                self.to_phone(frame).await;
            }
            "tool_result" if own => {
                if let Ok(AgentMessage::ToolResult(result)) = serde_json::from_slice::<AgentMessage>(&frame.payload) {
                    self.agent.answer(result);
                }
            }
            "image" if own => {
                let Ok(AgentMessage::Image(mut image)) = serde_json::from_slice::<AgentMessage>(&frame.payload) else {
                    return;
                };
                let Some(gemini_id) = self.agent.gemini_id(&image.id) else { return };
                image.id = gemini_id;
                self.to_phone_message(AgentMessage::Image(image)).await;
            }
            "tool_progress" if own => {}
            _ => self.to_phone(frame).await,
        }
    }

    /// The agent is gone (or starts anew): calls in flight are answered with that, and a running
    /// voice call's model is told.
    fn laptop_offline(&mut self) {
        if let (true, Some(call)) = (self.agent.offline(), &self.call) {
            let _ = call.input.try_send(VoiceInput::Text(LAPTOP_OFFLINE_NOTE.into()));
        }
    }

    async fn bridge_to_phone(&self, frame: Frame) {
        let frame = match frame {
            Frame::Text(text) => OutFrame::text(text.to_string()),
            Frame::Binary(data) => {
                // Model speech: a phone that cannot keep up loses speech rather than stalling the call.
                if let Push::Full(_) = self.phone.push(OutFrame::binary(Vec::from(data))) {
                    debug!("phone is behind; model audio dropped");
                }
                return;
            }
        };
        self.to_phone(frame).await;
    }

    async fn to_phone_message(&self, message: AgentMessage) {
        self.to_phone(OutFrame::text(message.to_json())).await;
    }

    /// Queues a frame for the phone. While its queue is full the session waits; a phone that
    /// reads nothing for the stall timeout is closed 1013.
    async fn to_phone(&self, mut frame: OutFrame) {
        loop {
            match self.phone.push(frame) {
                Push::Queued | Push::Dropped => return,
                Push::Full(back) => frame = back,
            }
            if !self.phone.room_or_stall(frame.payload.len(), self.stall_timeout).await {
                debug!("the phone stopped reading; closed it");
                return;
            }
        }
    }

    async fn to_agent(&self, frame: OutFrame) {
        forward(&self.slot, self.member, &self.inbox, frame, self.stall_timeout).await;
    }
}

/// The one log line of a hosted call.
fn log_call(code: &str, started: SystemTime, summary: &gemini::CallSummary, failure: &str) {
    let usage = summary.usage;
    info!(
        code,
        start = %humantime::format_rfc3339_seconds(started),
        end = %humantime::format_rfc3339_seconds(SystemTime::now()),
        duration_s = summary.duration_s.unwrap_or(0.0),
        prompt_tokens = usage.prompt_token_count,
        response_tokens = usage.response_token_count,
        total_tokens = usage.total_token_count,
        failure,
        "hosted call"
    );
}

/// What the session reads of an agent frame to decide where it goes.
#[derive(Deserialize)]
struct Peek {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    peer: Option<String>,
}

/// The agent as the voice bridge's tools see it: tool calls out, answers matched by id.
struct AgentLink {
    state: Mutex<AgentState>,
    next_id: AtomicU64,
    to_agent: mpsc::Sender<String>,
}

#[derive(Default)]
struct AgentState {
    /// The agent answered `hello_ok` and has not left since.
    present: bool,
    pending: HashMap<String, Pending>,
}

/// A tool call sent to the agent and not answered yet.
struct Pending {
    gemini_id: String,
    answer: oneshot::Sender<Result<ToolOutput, ToolError>>,
}

impl AgentLink {
    fn state(&self) -> std::sync::MutexGuard<'_, AgentState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends one of Gemini's calls to the agent and waits for its `tool_result`.
    async fn call(&self, call: ToolCall, cancel: CancellationToken) -> Result<ToolOutput, ToolError> {
        let id = format!("{CALL_ID_PREFIX}{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (answer, answered) = oneshot::channel();
        {
            let mut state = self.state();
            if !state.present {
                return Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE));
            }
            state.pending.insert(id.clone(), Pending { gemini_id: call.id.clone(), answer });
        }
        let frame = ClientMessage::ToolCall(ToolCall { id: id.clone(), caller: Some(HOSTED_CALLER.into()), ..call });
        if self.to_agent.send(frame.to_json()).await.is_err() {
            self.state().pending.remove(&id);
            return Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE));
        }
        tokio::pin!(answered);
        let gone = || Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE));
        tokio::select! {
            outcome = &mut answered => return outcome.unwrap_or_else(|_| gone()),
            () = cancel.cancelled() => {}
        }
        // The agent answers a cancelled call with `cancelled`; the bridge bounds the wait.
        let _ = self.to_agent.try_send(ClientMessage::Cancel { id }.to_json());
        answered.await.unwrap_or_else(|_| gone())
    }

    /// The agent is gone: every call in flight is answered [`LAPTOP_OFFLINE`], new ones fail at
    /// once. True if it was there until now.
    fn offline(&self) -> bool {
        let (was_present, pending) = {
            let mut state = self.state();
            (std::mem::take(&mut state.present), std::mem::take(&mut state.pending))
        };
        for (_, pending) in pending {
            let _ = pending.answer.send(Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE)));
        }
        was_present
    }

    /// Hands the agent's answer to the call waiting for it.
    fn answer(&self, result: ToolResult) {
        let Some(pending) = self.state().pending.remove(&result.id) else { return };
        let outcome = if result.ok {
            Ok(ToolOutput { result: result.result.unwrap_or(Value::Null), image: None })
        } else {
            Err(result.error.unwrap_or_else(|| ToolError::new(ErrorCode::Internal, "the laptop gave no reason")))
        };
        let _ = pending.answer.send(outcome);
    }

    /// Gemini's id of a call in flight.
    fn gemini_id(&self, id: &str) -> Option<String> {
        self.state().pending.get(id).map(|pending| pending.gemini_id.clone())
    }
}

/// The voice bridge's tools on a hosted call: the agent's, run on the laptop.
struct HostedTools {
    agent: Arc<AgentLink>,
    declarations: Value,
}

impl VoiceTools for HostedTools {
    fn declarations(&self) -> Value {
        self.declarations.clone()
    }

    fn run(&self, call: ToolCall, cancel: CancellationToken) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let agent = Arc::clone(&self.agent);
        Box::pin(async move { agent.call(call, cancel).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_tags_are_short_sha256_prefixes() {
        let code = "0123456789abcdef0123456789abcdef";
        let tag = code_tag(code);
        assert_eq!(tag.len(), CODE_TAG_LEN);
        assert_eq!(tag, hex::encode(Sha256::digest(code.as_bytes()))[..CODE_TAG_LEN]);
        assert!(!code.contains(&tag));
    }

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "run_command".into(), args: serde_json::json!({}), env: None, caller: None }
    }

    #[tokio::test]
    async fn calls_go_out_labelled_and_are_answered_offline_when_the_laptop_leaves() {
        let (to_agent, mut sent) = mpsc::channel(4);
        let link = Arc::new(AgentLink { state: Mutex::default(), next_id: AtomicU64::new(1), to_agent });
        let refused = link.call(call("g0"), CancellationToken::new()).await.unwrap_err();
        assert_eq!((refused.code, refused.message.as_str()), (ErrorCode::Unavailable, LAPTOP_OFFLINE));

        link.state().present = true;
        let running = tokio::spawn({
            let link = Arc::clone(&link);
            async move { link.call(call("g1"), CancellationToken::new()).await }
        });
        let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(frame["type"], "tool_call");
        assert_eq!(frame["caller"], HOSTED_CALLER);
        let id = frame["id"].as_str().unwrap();
        assert!(id.starts_with(CALL_ID_PREFIX) && id != "g1", "{frame}");
        assert_eq!(link.gemini_id(id).as_deref(), Some("g1"));

        assert!(link.offline(), "the laptop was there");
        let error = running.await.unwrap().unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (ErrorCode::Unavailable, LAPTOP_OFFLINE));
        assert!(!link.offline(), "told once");
    }

    #[tokio::test]
    async fn a_cancelled_call_asks_the_agent_to_cancel_and_takes_its_answer() {
        let (to_agent, mut sent) = mpsc::channel(4);
        let link = Arc::new(AgentLink { state: Mutex::default(), next_id: AtomicU64::new(1), to_agent });
        link.state().present = true;
        let cancel = CancellationToken::new();
        let running = tokio::spawn({
            let (link, cancel) = (Arc::clone(&link), cancel.clone());
            async move { link.call(call("g1"), cancel).await }
        });
        let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        let id = frame["id"].as_str().unwrap().to_owned();
        cancel.cancel();
        let cancel_frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(cancel_frame, serde_json::json!({"type":"cancel","id": id}));
        let error = ToolError::new(ErrorCode::Cancelled, "the call was cancelled");
        link.answer(ToolResult::failure(id, error));
        assert_eq!(running.await.unwrap().unwrap_err().code, ErrorCode::Cancelled);
    }

    #[test]
    fn an_agent_with_the_router_gets_env_on_its_tools_and_fleet_declared() {
        let names = |tools: &[&str]| tools.iter().map(|name| name.to_string()).collect::<Vec<_>>();
        let plain = hosted_declarations(&names(&["list_dir", "run_command"]));
        assert!(plain.as_array().unwrap().iter().all(|d| d.pointer("/parameters/properties/env").is_none()));
        let host = hosted_declarations(&names(&["list_dir", "fleet", "run_command"]));
        let host = host.as_array().unwrap();
        assert_eq!(host.len(), 3);
        for declaration in host.iter().filter(|d| d["name"] != "fleet") {
            assert_eq!(declaration.pointer("/parameters/properties/env/type"), Some(&Value::from("STRING")));
        }
        let fleet = host.iter().find(|d| d["name"] == "fleet").unwrap();
        assert_eq!(fleet, &gemini_declarations(&["fleet"])[0], "fleet as a self-hosted call declares it");
        let many: Vec<String> = (0..MAX_DECLARED_TOOLS + 10).map(|n| format!("tool_{n}")).collect();
        assert_eq!(hosted_declarations(&many).as_array().unwrap().len(), MAX_DECLARED_TOOLS);
    }

    #[test]
    fn only_challenge_hello_and_a_proven_hello_ok_in_that_order_accept_a_session() {
        let hello = |fields: Value| fields.as_object().unwrap().clone();
        let good =
            hello(serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32),"proof":"a".repeat(64)}));
        let ok = |proof: Option<&str>| protocol::HelloOk {
            agent: "voxa/0".into(),
            mode: "hosted".into(),
            tools: vec!["list_dir".into()],
            protocol: 2,
            proof: proof.map(str::to_owned),
            env_key: None,
            host: None,
            noise: None,
        };
        let proven = ok(Some(&"b".repeat(64)));

        let mut handshake = Handshake::Waiting;
        handshake.on_agent("hello_ok", Some(&proven));
        assert_eq!(handshake, Handshake::Waiting, "no challenge, no hello");
        handshake.on_agent("challenge", None);
        handshake.on_phone_hello(&good);
        handshake.on_agent("hello_ok", Some(&ok(None)));
        assert_eq!(handshake, Handshake::Waiting, "no agent proof");
        for bad in [
            hello(serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32)})),
            hello(serde_json::json!({"type":"hello","protocol":1,"nonce":"1".repeat(32),"proof":"a".repeat(64)})),
            hello(serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32),"proof":"A".repeat(64)})),
            hello(
                serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32),"proof":"a".repeat(64),"token":"t"}),
            ),
        ] {
            handshake.on_agent("challenge", None);
            handshake.on_phone_hello(&bad);
            handshake.on_agent("hello_ok", Some(&proven));
            assert_eq!(handshake, Handshake::Waiting, "{bad:?}");
        }
        handshake.on_agent("challenge", None);
        handshake.on_phone_hello(&good);
        handshake.on_agent("error", None);
        handshake.on_agent("hello_ok", Some(&proven));
        assert_eq!(handshake, Handshake::Waiting, "a refused hello");

        handshake.on_agent("challenge", None);
        handshake.on_phone_hello(&good);
        handshake.on_agent("hello_ok", Some(&proven));
        assert_eq!(handshake.tools(), Some(&["list_dir".to_owned()][..]));
        handshake.on_agent("error", None);
        assert!(handshake.tools().is_some(), "a later error (a bad frame) keeps the session");
        handshake.on_phone_hello(&good);
        assert_eq!(handshake, Handshake::Waiting, "a hello that answers no challenge");
    }

    #[test]
    fn the_call_limit_admits_up_to_its_maximum_and_frees_on_drop() {
        let gemini = GeminiConfig {
            api_key: Secret::from_string("k".into()),
            url: "ws://127.0.0.1:1".into(),
            model: "m".into(),
            voice: "Kore".into(),
            heartbeat: gemini::HEARTBEAT,
        };
        let metrics = Arc::new(RelayMetrics::new());
        let hosting = Hosting::new(LiveConfig { max_calls: 2, ..LiveConfig::new(gemini) }, Arc::clone(&metrics));
        let first = hosting.admit().unwrap();
        let _second = hosting.admit().unwrap();
        assert!(hosting.admit().is_none());
        assert!(metrics.encode().contains("voxa_relay_hosted_calls 2"), "{}", metrics.encode());
        drop(first);
        let _third = hosting.admit().expect("the freed place");
        assert!(metrics.encode().contains("voxa_relay_hosted_calls 2"), "{}", metrics.encode());
    }
}
