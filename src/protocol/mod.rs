//! The wire protocol (docs/PROTOCOL.md): every frame voxa sends or accepts, and the limits that
//! bound them. One enum per direction, tagged by `type`; one folder file per frame family:
//! [`frame`] (the one frame type inside the agent), [`relay`] (the relay's wire: pairing sides,
//! presence notices, relay framing), [`hello`] (session start), [`session`] (session frames),
//! [`tools`] (tool frames), [`live`] (a page and the relay hosting its call), [`approvals`], [`agent_event`] (coding-agent session events),
//! [`terminal`], [`push`] and [`errors`] (codes). The web client names the same frames and codes
//! in `web/js/protocol.js`, which a test (tests/it/web.rs) holds against these enums.

use std::time::Duration;

mod agent_event;
mod approvals;
mod errors;
mod frame;
mod hello;
mod live;
mod push;
pub mod relay;
mod session;
mod terminal;
mod tools;

pub use agent_event::{Event, SessionEvent, SessionState};
pub use approvals::{
    ApprovalFrame, ApprovalResolved, ApprovalSource, Approve, DecidedBy, Decision, Grant, GrantScope, Risk,
    MAX_APPROVAL_TEXT_LEN,
};
pub use errors::{close, CallErrorCode, ErrorCode};
pub use frame::{Bytes, Frame, Utf8Bytes};
pub use hello::{
    agent_proof, client_proof, is_hello_nonce, is_hello_proof, new_nonce, verify_agent_proof, verify_client_proof,
    BearerFrame, Hello, HelloOk, PairingToken, HOST_ROLE,
};
pub use live::{LiveMessage, LIVE_CALL_PREFIX};
pub use push::{push_endpoint_host, PushKeys, PushSubscription, MAX_PUSH_ENDPOINT_LEN};
pub use relay::{PeerRole, PeerState, Presence};
pub use session::{
    parse_client, AgentMessage, AgentSees, AgentStatus, AwakeStatus, CallEntry, CallsFrame, ClientMessage,
    CodingAgentSeen, ConnectedClient, EnvReach, EnvironmentState, PushStatus, RelayLinkStatus, RelayPage,
    ToolActivityState, TranscriptRole,
};
pub use terminal::{
    TermAck, TermExit, TermOutput, TermSnapshot, MAX_TERMINALS, MAX_TERM_CELLS, MAX_TERM_INPUT, MAX_TERM_SIZE,
    TERM_CHUNK, TERM_IDLE_LIMIT, TERM_WINDOW,
};
pub use tools::{Image, Receipt, ToolCall, ToolError, ToolResult, HOSTED_CALLER};

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
/// Binary frame prefix for audio (docs/PROTOCOL.md, "Voice").
pub const AUDIO_PREFIX: u8 = 0x01;
