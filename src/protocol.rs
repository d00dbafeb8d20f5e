//! The wire protocol (docs/PROTOCOL.md): every JSON frame voxa sends or accepts, and the limits
//! that bound them. One enum per direction, tagged by `type`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::secret::Secret;

/// Version of the application protocol: the challenge–response session start of
/// docs/PROTOCOL.md ("Session start (protocol 2)"), sent in `challenge`, `hello` and `hello_ok`.
pub const PROTOCOL_VERSION: u32 = 2;
/// Version of a sealed session (docs/PROTOCOL.md, "Sealed sessions (protocol 3)").
pub const PROTOCOL_SEALED: u32 = 3;
/// The protocols an agent's `challenge` offers.
pub const PROTOCOLS_OFFERED: [u32; 2] = [PROTOCOL_VERSION, PROTOCOL_SEALED];
/// Length in hex characters of the agent's and the client's hello nonces (128 bits).
pub const NONCE_HEX_LEN: usize = 32;
/// Length in hex characters of a hello proof (HMAC-SHA256).
pub const PROOF_HEX_LEN: usize = 64;
/// Largest WebSocket frame or message accepted anywhere (relay, agent, loopback).
pub const MAX_FRAME_LEN: usize = 16 << 20;
/// Time a client has to send a good `hello` after the session starts.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest frame, and largest total, a loopback client may send before its hello is accepted.
pub const MAX_PREAUTH_LEN: usize = 8 << 10;
/// Output kept per tool call; the rest is dropped and `truncated` set.
pub const OUTPUT_CAP: usize = 256 << 10;
/// Default `run_command` timeout.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// Tool calls in flight before new ones are answered `busy`: per session and per agent (the
/// default of `max_concurrent_calls` in `config.toml`), per voice call and per environment.
pub const MAX_CALLS_IN_FLIGHT: usize = 64;
/// Time a cancelled call gets to end with its own result (a tool stopping, an environment
/// answering `cancelled`) before it is answered `cancelled` without it.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// Longest call id accepted.
pub const MAX_CALL_ID_LEN: usize = 128;
/// Frames queued for one socket's writer before the socket counts as a slow reader.
pub const SEND_QUEUE_FRAMES: usize = 256;
/// Interval of WebSocket pings on an idle socket.
pub const PING_INTERVAL: Duration = Duration::from_secs(15);
/// A socket that shows no sign of life for this long is considered dead.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(45);
/// Marker type of the relay's presence frames.
pub const PEER_TYPE: &str = "__peer";
/// `role` of the hello a host sends to drive an environment.
pub const HOST_ROLE: &str = "host";
/// Binary frame prefix for audio (docs/PROTOCOL.md, "Voice").
pub const AUDIO_PREFIX: u8 = 0x01;

/// Which side of a relay pairing a socket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerRole {
    Agent,
    Phone,
}

impl PeerRole {
    /// The role's name on the wire (`agent`, `phone`).
    pub fn as_str(self) -> &'static str {
        match self {
            PeerRole::Agent => "agent",
            PeerRole::Phone => "phone",
        }
    }
}

/// Presence change reported by the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerState {
    Joined,
    Left,
}

/// The relay's control frame: `{"type":"__peer","peer":…,"state":…}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerNotice {
    #[serde(rename = "type")]
    pub kind: String,
    pub peer: PeerRole,
    pub state: PeerState,
}

impl PeerNotice {
    pub fn new(peer: PeerRole, state: PeerState) -> Self {
        Self { kind: PEER_TYPE.to_owned(), peer, state }
    }

    /// The notice as a text frame payload.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a text frame as a relay notice, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        if !is_peer_frame(text) {
            return None;
        }
        serde_json::from_str(text).ok()
    }
}

/// True when a text frame is a JSON object whose `type` is `__peer` — the only frames a relay
/// looks into. Decided as the most lenient JSON reader would: escapes are decoded
/// (`"\u005f_peer"` is the marker), any of several `type` members counts, and a frame that
/// mentions the marker but is not JSON serde accepts (a lone surrogate a JavaScript parser takes)
/// counts too. Cheap pre-check first: most frames contain neither the marker nor a `\u` escape.
pub fn is_peer_frame(text: &str) -> bool {
    if !text.contains(PEER_TYPE) && !text.contains("\\u") {
        return false;
    }
    match serde_json::from_str::<PeerMarker>(text) {
        Ok(PeerMarker(found)) => found,
        // Valid JSON that is not an object: no reader sees a `type` in it.
        Err(err) if err.is_data() => false,
        Err(_) => true,
    }
}

/// Whether a JSON object has a top-level `type` member equal to [`PEER_TYPE`].
struct PeerMarker(bool);

impl<'de> Deserialize<'de> for PeerMarker {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = bool;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
                let mut found = false;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "type" {
                        found |= map.next_value::<Value>()?.as_str() == Some(PEER_TYPE);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(found)
            }
        }
        deserializer.deserialize_map(Members).map(PeerMarker)
    }
}

/// Frames a phone, local client or host sends to an agent.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    Hello(Hello),
    /// A host's bearer, sent only after it verified the environment's signature (docs/PROTOCOL.md).
    Bearer(BearerFrame),
    ToolCall(ToolCall),
    Cancel {
        id: String,
    },
    /// Asks a running agent for its state (used by `voxa status`).
    Status,
    CallStart,
    CallEnd,
    Say {
        text: String,
    },
    /// The end of a push-to-talk utterance during a voice call.
    AudioEnd,
}

impl ClientMessage {
    /// Serialises to a text frame payload.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The first frame of every session: the answer to the agent's `challenge` (phone and local
/// clients), or a host's hello to an environment.
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Hello {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// A raw auth token: protocol 1. Never sent by voxa; a hello carrying it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// HMAC proof over both nonces ([`client_proof`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Free-form client name and version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// `"host"` when a host drives an environment (docs/PROTOCOL.md, "Environments").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, rename = "envKey", skip_serializing_if = "Option::is_none")]
    pub env_key: Option<String>,
    /// The client's nonce (the host's, on an environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// Protocol 3: base64 of the Noise handshake's message 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
}

/// `{"type":"bearer","bearer":…}`: `Debug` never shows it.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
pub struct BearerFrame {
    pub bearer: String,
}

impl std::fmt::Debug for BearerFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerFrame(<redacted>)")
    }
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redact = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("Hello")
            .field("protocol", &self.protocol)
            .field("token", &redact(&self.token))
            .field("proof", &self.proof)
            .field("client", &self.client)
            .field("role", &self.role)
            .field("env_key", &self.env_key)
            .field("nonce", &self.nonce)
            .field("noise", &self.noise.as_ref().map(|_| "<handshake>"))
            .finish()
    }
}

/// One tool invocation.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(default = "empty_object")]
    pub args: Value,
    /// Environment to route the call to (docs/PROTOCOL.md, "Environments"); absent for this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Who asked, for the laptop's audit: set only by a relay hosting the voice call
    /// ([`HOSTED_CALLER`]); an agent honours it on relayed sessions only (docs/PROTOCOL.md, "Hosted voice").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

/// `caller` of the tool calls a relay makes for the voice call it hosts, and their audit name.
pub const HOSTED_CALLER: &str = "gemini-hosted";

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Frames an agent sends.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// Opens every session: the agent's fresh nonce.
    Challenge {
        protocol: u32,
        nonce: String,
        /// Every protocol the agent accepts (`[2,3]`); absent from agents that speak only 2.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        protocols: Vec<u32>,
    },
    HelloOk(HelloOk),
    /// An environment's answer to a host's hello: its signature over the host's nonce (docs/PROTOCOL.md).
    Identity {
        #[serde(rename = "envKey")]
        env_key: String,
        signature: String,
    },
    ToolProgress {
        id: String,
        chunk: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
    },
    ToolResult(ToolResult),
    Image(Image),
    Error {
        code: ErrorCode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Status(AgentStatus),
    CallStarted,
    CallError {
        code: CallErrorCode,
        message: String,
    },
    Transcript {
        role: TranscriptRole,
        text: String,
        #[serde(rename = "final")]
        is_final: bool,
    },
    /// The model's turn ended; `reason` (the service's code) and `message` say why it produced
    /// nothing, when it did not answer.
    TurnComplete {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Interrupted,
    ToolActivity {
        id: String,
        name: String,
        state: ToolActivityState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<bool>,
    },
    CallEnded {
        duration_s: f64,
    },
}

impl AgentMessage {
    /// Serialises to a text frame payload. Serialising these types cannot fail.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| r#"{"type":"error","code":"internal"}"#.into())
    }

    pub fn error(code: ErrorCode) -> Self {
        AgentMessage::Error { code, message: None }
    }

    /// The challenge that opens a session.
    pub fn challenge(nonce: &str) -> Self {
        AgentMessage::Challenge {
            protocol: PROTOCOL_VERSION,
            nonce: nonce.to_owned(),
            protocols: PROTOCOLS_OFFERED.to_vec(),
        }
    }
}

/// `code` of a `call_error` frame; the phone branches on it:
///
/// | code | cause |
/// |---|---|
/// | `bad-key` | Gemini refused the API key (close 1007 naming the key, HTTP 401/403 at upgrade) |
/// | `gemini-refused` | Gemini refused a request (close 1007, other HTTP 4xx at upgrade) |
/// | `gemini-not-found` | model or session not found, or refused by policy (close 1008, HTTP 404) |
/// | `gemini-unavailable` | quota exhausted or internal error (close 1011/1013/1014, HTTP 429/5xx) |
/// | `gemini-unreachable` | no connection, TLS failure, or no `setupComplete` in time |
/// | `gemini-closed` | the connection ended otherwise and could not be resumed |
/// | `busy` | the voice call is not keeping up with `say` |
/// | `unavailable` | the agent runs in hosted mode and hosts no voice calls |
/// | `no-call` | `say` or `call_end` without a running call |
/// | `at-capacity` | the relay hosting voice runs as many calls as its operator allows |
///
/// A failure before `call_started` sends only `call_error`; one during the call sends
/// `call_error` and then `call_ended`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallErrorCode {
    BadKey,
    GeminiRefused,
    GeminiNotFound,
    GeminiUnavailable,
    GeminiUnreachable,
    GeminiClosed,
    Busy,
    Unavailable,
    NoCall,
    AtCapacity,
}

impl CallErrorCode {
    /// The code as it appears in `call_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallErrorCode::BadKey => "bad-key",
            CallErrorCode::GeminiRefused => "gemini-refused",
            CallErrorCode::GeminiNotFound => "gemini-not-found",
            CallErrorCode::GeminiUnavailable => "gemini-unavailable",
            CallErrorCode::GeminiUnreachable => "gemini-unreachable",
            CallErrorCode::GeminiClosed => "gemini-closed",
            CallErrorCode::Busy => "busy",
            CallErrorCode::Unavailable => "unavailable",
            CallErrorCode::NoCall => "no-call",
            CallErrorCode::AtCapacity => "at-capacity",
        }
    }
}

/// Who spoke, in a `transcript` frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscriptRole {
    User,
    Model,
}

/// Where a tool Gemini asked for stands, in a `tool_activity` frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolActivityState {
    Started,
    Finished,
}

/// Answer to a good hello.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct HelloOk {
    /// Empty in a sealed `hello_ok`, whose fields travel inside `noise`.
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub protocol: u32,
    /// The agent's proof over both nonces ([`agent_proof`]); a client checks it before it sends
    /// anything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Environment answers (docs/PROTOCOL.md, "Environments"): own envKey.
    #[serde(default, rename = "envKey", skip_serializing_if = "Option::is_none")]
    pub env_key: Option<String>,
    /// This machine's host name, so a client can name the pairing (sent only after a good hello).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Protocol 3: base64 of the Noise handshake's message 2, whose payload is this frame's JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
}

/// Outcome of one tool call.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ToolResult {
    pub id: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

impl ToolResult {
    pub fn success(id: String, result: Value) -> Self {
        Self { id, ok: true, result: Some(result), error: None, env: None }
    }

    pub fn failure(id: String, error: ToolError) -> Self {
        Self { id, ok: false, result: None, error: Some(error), env: None }
    }
}

/// A screenshot, sent to the phone only.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
pub struct Image {
    pub id: String,
    pub mime: String,
    pub width: u32,
    pub height: u32,
    /// Base64 of the encoded image.
    pub data: String,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("id", &self.id)
            .field("mime", &self.mime)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// What a running agent reports to `voxa status`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct AgentStatus {
    pub pid: u32,
    pub version: String,
    pub mode: String,
    pub relay: String,
    pub relay_connected: bool,
    /// Another agent is using this agent's relay code; this one keeps dialing to take it back.
    #[serde(default)]
    pub relay_replaced: bool,
    pub phone_present: bool,
    /// While the relay code replaced by `voxa pair --rotate` is still answered (every phone on
    /// it refused): until when, in Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_code_until: Option<u64>,
    pub calls_in_flight: usize,
    /// Open sessions that are sealed (protocol 3) and plain (protocol 2), this one included.
    #[serde(default)]
    pub sealed_sessions: usize,
    #[serde(default)]
    pub plain_sessions: usize,
    pub workspace: String,
}

/// A failed tool call: a stable code and a sentence for people.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

/// Every error and refusal code of the contract (docs/PROTOCOL.md, "Errors and close codes"), spelled as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    UnknownTool,
    InvalidArgs,
    OutsideWorkspace,
    /// A path inside voxa's own state directory.
    ProtectedPath,
    NotFound,
    Timeout,
    Cancelled,
    TooLarge,
    DeniedByPolicy,
    DuplicateId,
    Busy,
    Unavailable,
    Internal,
    BadFrame,
    HostTokenRequired,
    UnknownEnvironment,
    EnvironmentNotPaired,
    PairingRevoked,
    BearerRefused,
    UnauthenticatedCall,
    ExecutorUnauthenticated,
    EnvironmentUnreachable,
    EnvironmentIdentityMismatch,
    /// A sealed session's frame failed to open, came out of order, repeated or was not sealed.
    SealedSessionBroken,
    /// This agent accepts sealed sessions (protocol 3) only.
    SealedSessionRequired,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 25] = [
        ErrorCode::UnknownTool,
        ErrorCode::InvalidArgs,
        ErrorCode::OutsideWorkspace,
        ErrorCode::ProtectedPath,
        ErrorCode::NotFound,
        ErrorCode::Timeout,
        ErrorCode::Cancelled,
        ErrorCode::TooLarge,
        ErrorCode::DeniedByPolicy,
        ErrorCode::DuplicateId,
        ErrorCode::Busy,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
        ErrorCode::BadFrame,
        ErrorCode::HostTokenRequired,
        ErrorCode::UnknownEnvironment,
        ErrorCode::EnvironmentNotPaired,
        ErrorCode::PairingRevoked,
        ErrorCode::BearerRefused,
        ErrorCode::UnauthenticatedCall,
        ErrorCode::ExecutorUnauthenticated,
        ErrorCode::EnvironmentUnreachable,
        ErrorCode::EnvironmentIdentityMismatch,
        ErrorCode::SealedSessionBroken,
        ErrorCode::SealedSessionRequired,
    ];

    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnknownTool => "unknown-tool",
            ErrorCode::InvalidArgs => "invalid-args",
            ErrorCode::OutsideWorkspace => "outside-workspace",
            ErrorCode::ProtectedPath => "protected-path",
            ErrorCode::NotFound => "not-found",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::TooLarge => "too-large",
            ErrorCode::DeniedByPolicy => "denied-by-policy",
            ErrorCode::DuplicateId => "duplicate-id",
            ErrorCode::Busy => "busy",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::BadFrame => "bad-frame",
            ErrorCode::HostTokenRequired => "host-token-required",
            ErrorCode::UnknownEnvironment => "unknown-environment",
            ErrorCode::EnvironmentNotPaired => "environment-not-paired",
            ErrorCode::PairingRevoked => "pairing-revoked",
            ErrorCode::BearerRefused => "bearer-refused",
            ErrorCode::UnauthenticatedCall => "unauthenticated-call",
            ErrorCode::ExecutorUnauthenticated => "executor-unauthenticated",
            ErrorCode::EnvironmentUnreachable => "environment-unreachable",
            ErrorCode::EnvironmentIdentityMismatch => "environment-identity-mismatch",
            ErrorCode::SealedSessionBroken => "sealed-session-broken",
            ErrorCode::SealedSessionRequired => "sealed-session-required",
        }
    }

    /// True for the refusals of authentication and pairing, as opposed to tool errors.
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            ErrorCode::HostTokenRequired
                | ErrorCode::UnknownEnvironment
                | ErrorCode::EnvironmentNotPaired
                | ErrorCode::PairingRevoked
                | ErrorCode::BearerRefused
                | ErrorCode::UnauthenticatedCall
                | ErrorCode::ExecutorUnauthenticated
                | ErrorCode::EnvironmentUnreachable
                | ErrorCode::EnvironmentIdentityMismatch
                | ErrorCode::SealedSessionBroken
                | ErrorCode::SealedSessionRequired
                | ErrorCode::DeniedByPolicy
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// WebSocket close codes voxa uses.
pub mod close {
    /// Policy violation: authentication refused (docs/PROTOCOL.md, "Errors and close codes").
    pub const POLICY: u16 = 1008;
    /// Message too big.
    pub const TOO_BIG: u16 = 1009;
    /// Try again later: the reader fell behind.
    pub const TRY_AGAIN_LATER: u16 = 1013;
    /// A newer connection for the same code and role took over.
    pub const REPLACED: u16 = 4001;
}

/// Parses one client text frame. Errors are answered `bad-frame` and the session goes on.
pub fn parse_client(text: &str) -> Result<ClientMessage, serde_json::Error> {
    serde_json::from_str(text)
}

/// Prefix of the message a client proves (see docs/PROTOCOL.md, "Session start (protocol 2)").
const CLIENT_PROOF_LABEL: &str = "voxa-hello/2 client\n";
/// Prefix of the message the agent proves.
const AGENT_PROOF_LABEL: &str = "voxa-hello/2 agent\n";

/// A fresh 128-bit nonce as 32 lowercase hex characters.
pub fn new_nonce() -> anyhow::Result<String> {
    use rand::TryRngCore;
    let mut bytes = [0u8; NONCE_HEX_LEN / 2];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|err| anyhow::anyhow!("the OS random number generator failed: {err}"))?;
    Ok(hex::encode(bytes))
}

/// True for a hello nonce: exactly 32 lowercase hex characters.
pub fn is_hello_nonce(nonce: &str) -> bool {
    nonce.len() == NONCE_HEX_LEN && crate::secret::is_lower_hex(nonce)
}

/// Whether `proof` has a hello proof's shape: 64 lowercase hex characters.
pub fn is_hello_proof(proof: &str) -> bool {
    proof.len() == PROOF_HEX_LEN && crate::secret::is_lower_hex(proof)
}

/// `HMAC-SHA256(key = token, label + agent_nonce + "\n" + client_nonce)`.
fn hello_mac(token: &Secret, label: &str, agent_nonce: &str, client_nonce: &str) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(token.expose().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for part in [label, agent_nonce, "\n", client_nonce] {
        mac.update(part.as_bytes());
    }
    mac
}

fn proof_hex(mac: hmac::Hmac<sha2::Sha256>) -> String {
    use hmac::Mac;
    hex::encode(mac.finalize().into_bytes())
}

/// Checks a presented proof in constant time; anything but 64 lowercase hex is wrong.
fn proof_matches(mac: hmac::Hmac<sha2::Sha256>, presented: &str) -> bool {
    use hmac::Mac;
    let mut bytes = [0u8; PROOF_HEX_LEN / 2];
    is_hello_proof(presented) && hex::decode_to_slice(presented, &mut bytes).is_ok() && mac.verify_slice(&bytes).is_ok()
}

/// The client's proof: lowercase hex of `HMAC-SHA256(T, "voxa-hello/2 client\n" + A + "\n" + C)`.
pub fn client_proof(token: &Secret, agent_nonce: &str, client_nonce: &str) -> String {
    proof_hex(hello_mac(token, CLIENT_PROOF_LABEL, agent_nonce, client_nonce))
}

/// The agent's proof: lowercase hex of `HMAC-SHA256(T, "voxa-hello/2 agent\n" + A + "\n" + C)`.
pub fn agent_proof(token: &Secret, agent_nonce: &str, client_nonce: &str) -> String {
    proof_hex(hello_mac(token, AGENT_PROOF_LABEL, agent_nonce, client_nonce))
}

/// True when `proof` is the client's proof for these nonces (constant time).
pub fn verify_client_proof(token: &Secret, agent_nonce: &str, client_nonce: &str, proof: &str) -> bool {
    proof_matches(hello_mac(token, CLIENT_PROOF_LABEL, agent_nonce, client_nonce), proof)
}

/// True when `proof` is the agent's proof for these nonces (constant time).
pub fn verify_agent_proof(token: &Secret, agent_nonce: &str, client_nonce: &str, proof: &str) -> bool {
    proof_matches(hello_mac(token, AGENT_PROOF_LABEL, agent_nonce, client_nonce), proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_serialize_as_their_wire_strings() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: ErrorCode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, code);
        }
    }

    #[test]
    fn peer_frames_are_recognised_only_by_their_type() {
        assert!(is_peer_frame(r#"{"type":"__peer","peer":"agent","state":"joined"}"#));
        assert!(is_peer_frame(r#"{ "state":"left", "type" : "__peer" }"#));
        assert!(!is_peer_frame(r#"{"type":"say","text":"__peer"}"#));
        assert!(is_peer_frame(r#"{"type":"\u005f_peer","peer":"agent","state":"left"}"#));
        assert!(is_peer_frame(r#"{"type":"say","type":"__peer","peer":"agent","state":"left"}"#));
        assert!(is_peer_frame(r#"{"type":"__peer","peer":"agent","state":"left","x":"\ud800"}"#));
        assert!(!is_peer_frame(r#"["__peer"]"#));
        assert!(is_peer_frame("not json __peer"), "unreadable frames that mention the marker are held back");
        assert!(!is_peer_frame(r#"{"type":"say","text":"\u005f_peer"}"#));
        let notice = PeerNotice::new(PeerRole::Phone, PeerState::Left);
        assert_eq!(PeerNotice::parse(&notice.to_json()), Some(notice));
    }

    #[test]
    fn tool_call_parses_with_and_without_args() {
        let call = parse_client(r#"{"type":"tool_call","id":"c1","name":"list_dir"}"#).unwrap();
        assert_eq!(
            call,
            ClientMessage::ToolCall(ToolCall {
                id: "c1".into(),
                name: "list_dir".into(),
                args: serde_json::json!({}),
                env: None,
                caller: None
            })
        );
        assert!(parse_client(r#"{"type":"tool_call","id":"c1"}"#).is_err());
        assert!(parse_client(r#"{"type":"nope"}"#).is_err());
    }

    #[test]
    fn hello_debug_redacts_token_and_bearer() {
        let hello = Hello { token: Some("0123456789abcdef0123456789abcdef".into()), ..Default::default() };
        let shown = format!("{hello:?}");
        assert!(!shown.contains("0123456789abcdef"));
        let bearer = parse_client(r#"{"type":"bearer","bearer":"vbx_secret"}"#).unwrap();
        assert!(!format!("{bearer:?}").contains("vbx_secret"));
    }

    /// The worked example of docs/PROTOCOL.md: other clients (the web client's WebCrypto code
    /// among them) check themselves against these values.
    #[test]
    fn hello_proofs_match_the_documented_worked_example() {
        let token = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        let agent_nonce = "0123456789abcdef0123456789abcdef";
        let client_nonce = "fedcba9876543210fedcba9876543210";
        let client = client_proof(&token, agent_nonce, client_nonce);
        let agent = agent_proof(&token, agent_nonce, client_nonce);
        assert_eq!(client, CLIENT_PROOF_EXAMPLE);
        assert_eq!(agent, AGENT_PROOF_EXAMPLE);
        assert!(verify_client_proof(&token, agent_nonce, client_nonce, &client));
        assert!(verify_agent_proof(&token, agent_nonce, client_nonce, &agent));
        // Each proof is bound to its direction, to both nonces and to the token.
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, &agent));
        assert!(!verify_agent_proof(&token, agent_nonce, client_nonce, &client));
        assert!(!verify_client_proof(&token, client_nonce, agent_nonce, &client));
        let other = Secret::parse_hex128("ffeeddccbbaa99887766554433221100").unwrap();
        assert!(!verify_client_proof(&other, agent_nonce, client_nonce, &client));
        // Only the exact lowercase spelling counts.
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, &client.to_uppercase()));
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, &client[..63]));
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, ""));
    }

    const CLIENT_PROOF_EXAMPLE: &str = "5443ac3f4e3e479a60415e1042edf9736a2b5270918af2cea93033164c24171f";
    const AGENT_PROOF_EXAMPLE: &str = "1599d38f043a94e01ce17b0f74ce1fd2985a8cdef4b54aef1993c9fe4bc194d5";

    #[test]
    fn nonces_are_fresh_128_bit_hex() {
        let (a, b) = (new_nonce().unwrap(), new_nonce().unwrap());
        assert!(is_hello_nonce(&a) && is_hello_nonce(&b));
        assert_ne!(a, b);
        assert!(!is_hello_nonce(&a.to_uppercase()) && !is_hello_nonce(&a[..31]));
    }

    #[test]
    fn session_start_frames_have_the_documented_shape() {
        assert_eq!(
            AgentMessage::challenge("0123456789abcdef0123456789abcdef").to_json(),
            r#"{"type":"challenge","protocol":2,"nonce":"0123456789abcdef0123456789abcdef","protocols":[2,3]}"#
        );
        let hello =
            r#"{"type":"hello","protocol":2,"nonce":"fedcba9876543210fedcba9876543210","proof":"ab","client":"x/1"}"#;
        let ClientMessage::Hello(hello) = parse_client(hello).unwrap() else { panic!("not a hello") };
        assert_eq!(
            (hello.protocol, hello.proof.as_deref(), hello.client.as_deref()),
            (Some(2), Some("ab"), Some("x/1"))
        );
    }

    #[test]
    fn agent_messages_use_the_contract_field_names() {
        let msg = AgentMessage::Transcript { role: TranscriptRole::User, text: "hi".into(), is_final: true };
        assert_eq!(msg.to_json(), r#"{"type":"transcript","role":"user","text":"hi","final":true}"#);
        let done = AgentMessage::TurnComplete { reason: None, message: None };
        assert_eq!(done.to_json(), r#"{"type":"turn_complete"}"#);
        let end: ClientMessage = serde_json::from_str(r#"{"type":"audio_end"}"#).unwrap();
        assert_eq!(end, ClientMessage::AudioEnd);
        let err = AgentMessage::error(ErrorCode::BadFrame);
        assert_eq!(err.to_json(), r#"{"type":"error","code":"bad-frame"}"#);
    }
}
