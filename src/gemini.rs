//! Self-hosted voice (SPEC §7): the laptop holds the Gemini Live session and bridges it to the
//! phone. (Bridge under construction: calls are refused with `unavailable` until it lands.)

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::secret::Secret;
use crate::tools::Toolbox;

/// Where and how to reach Gemini Live.
#[derive(Clone, Debug)]
pub struct GeminiConfig {
    pub api_key: Secret,
    /// WebSocket endpoint (`VOXA_GEMINI_URL` overrides the public one).
    pub url: String,
    pub model: String,
    pub voice: String,
}

/// Input from the phone during a call.
#[derive(Debug)]
pub enum VoiceInput {
    /// PCM16LE mono 16 kHz, without the 0x01 prefix.
    Audio(Vec<u8>),
    /// Typed text (`say`).
    Text(String),
}

/// A running voice call; dropping it ends the call.
pub struct VoiceCall {
    pub input: mpsc::Sender<VoiceInput>,
    pub end: tokio_util::sync::CancellationToken,
}

/// Starts a call: opens the Gemini session and bridges it to `phone` until `end` is cancelled.
pub fn start(config: Arc<GeminiConfig>, toolbox: Toolbox, phone: mpsc::Sender<Message>) -> VoiceCall {
    let _ = (config, toolbox);
    let (input, _rx) = mpsc::channel(64);
    let end = tokio_util::sync::CancellationToken::new();
    let message = crate::protocol::AgentMessage::CallError {
        code: "unavailable".into(),
        message: "the voice bridge is not available in this build".into(),
    };
    let _ = phone.try_send(Message::text(message.to_json()));
    VoiceCall { input, end }
}
