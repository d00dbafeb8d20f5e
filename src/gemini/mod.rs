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
//! full) and in the Gemini writer's queue ([`socket::SEND_QUEUE`], newest dropped). While a
//! connection is being set up or resumed, audio is held up to [`GAP_AUDIO_BYTES`] (about 2 s;
//! the oldest is dropped first) and sent once `setupComplete` arrives, so speech during a
//! `goAway` reconnect reaches the resumed session.
//!
//! Notes for the model (narration, approvals read back: [`VoiceInput::Note`]) wait while the user
//! speaks or the model answers ([`notes`]). An `approve` with `allow` from the model runs only when
//! the user's own words since that approval was read back say yes ([`consent`]); otherwise the
//! model is answered `no-spoken-consent` and the approval stays open for a tap.
//!
//! Inside: [`config`] (where and how to reach the service), [`failure`] (why a call failed, without
//! the key), [`socket`] (one Gemini Live connection), [`bridge`] (the actor of one call), [`calls`]
//! (the model's function calls), [`consent`], [`notes`] and [`wire`] (the service's JSON).

mod bridge;
mod calls;
pub mod config;
pub mod consent;
pub mod failure;
mod notes;
mod socket;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info_span, Instrument};

pub use self::config::{check_url, live_url, GeminiConfig, GEMINI_LIVE_URL, HEARTBEAT};
pub use self::failure::CallFailure;
pub use self::notes::{Note, MAX_HELD_NOTES, TURN_STALE};
pub use self::socket::CLOSE_WAIT;
pub use self::wire::Usage;
pub use crate::protocol::CallErrorCode;
use crate::protocol::{AgentMessage, Bytes, Frame, ToolCall, ToolError};
use crate::tools::ToolOutput;

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

/// What a call writes to the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallLog {
    /// Its own lines (started, resumed, ended, failed) at `info` and `warn`: a self-hosted call.
    Narrated,
    /// Those lines at `debug` only; whoever started the call logs its [`CallSummary`] (a hosted
    /// call at the relay, whose log has one line per call).
    Summarised,
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
/// Time taken off a `goAway`'s `timeLeft`, so the resume starts before the service cuts the socket.
pub const GO_AWAY_MARGIN: Duration = Duration::from_secs(1);
/// Time assumed left after a `goAway` that does not say.
pub const GO_AWAY_DEFAULT: Duration = Duration::from_secs(10);
/// Longest running transcript kept for its final frame; the rest still goes out as partials.
pub const MAX_TRANSCRIPT_LEN: usize = 16 << 10;
/// Tool answers remembered until a newer resumable handle covers them (told to a resumed session).
pub const MAX_UNSETTLED: usize = 32;

/// Input from the phone during a call.
#[derive(Debug)]
pub enum VoiceInput {
    /// PCM16LE mono 16 kHz, without the 0x01 prefix (a slice of the phone's frame, not a copy).
    Audio(Bytes),
    /// Typed text (`say`): the user's own words.
    Text(String),
    /// The end of a push-to-talk utterance (`audio_end`).
    AudioEnd,
    /// A note from voxa for the model, held while the user or the model holds the floor.
    Note(Note),
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
    let bridge = bridge::Bridge::new(log, config, tools, phone, end.clone(), summary_tx);
    tasks.spawn(bridge.run(input_rx).instrument(info_span!("voice_call")));
    VoiceCall { input, end, summary }
}
