//! The frames of an authenticated session, one enum per direction (docs/PROTOCOL.md, "Session frames").

use serde::{Deserialize, Serialize};

use serde_json::Value;

use super::{
    ApprovalFrame, ApprovalResolved, Approve, BearerFrame, CallErrorCode, ErrorCode, Hello, HelloOk, Image,
    PairingToken, ToolCall, ToolResult, PROTOCOLS_OFFERED, PROTOCOL_VERSION,
};

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
        /// Asks for a `receipt` under this id; the same id sent again gets the same receipt and
        /// cancels nothing more (docs/PROTOCOL.md, "Receipts").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receipt: Option<String>,
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
    /// A call the relay hosts for this client starts (`on`) or ends: from now on the agent sends
    /// it the notes for that call's model as `narrate` frames (docs/PROTOCOL.md, "Hosted voice").
    Narration {
        on: bool,
    },
    /// From now on, send this client every open approval and every change (and, with sessions,
    /// their events after the `after` marks). With `low_data`, a session's streamed text comes
    /// merged, at most one frame a quarter second, and none before the whole text.
    Follow {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<Value>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        low_data: bool,
    },
    /// Stop what `follow` started.
    Unfollow,
    /// From now on, send this client every tool call of its pairing: a `calls` frame naming the
    /// ones running and the finished ones not in `seen`, then their output (docs/PROTOCOL.md,
    /// "Calls outlive the connection").
    Calls {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        seen: Vec<String>,
    },
    /// Cancels every call of this pairing still running.
    CancelAll,
    /// An answer to an open approval.
    Approve(Approve),
    /// Lists the grants "Allow for session" made (answered `grants`).
    Grants,
    /// Ends a grant (answered `grants`, the list without it).
    Revoke {
        grant: String,
    },
    /// Notifications: this browser's Web Push subscription (answered `push_subscribed`).
    PushSubscribe {
        subscription: super::PushSubscription,
    },
    /// Notifications off for this browser.
    PushUnsubscribe {
        endpoint: String,
    },
    /// The client has a terminal's output up to `offset` (docs/PROTOCOL.md, "Terminal sessions").
    TermAck(super::TermAck),
    /// A sealed session's sign of life (docs/PROTOCOL.md, "Ticks"); the seal consumes it.
    Tick,
}

impl ClientMessage {
    /// `follow` from the marks in `after` (a session's id → the last seq the client has), in
    /// full frames.
    pub fn follow_after(after: serde_json::Map<String, Value>) -> Self {
        ClientMessage::Follow { after: Some(Value::Object(after)), low_data: false }
    }

    /// Serialises to a text frame payload.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
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
    /// The pairing's auth token, handed inside a session a ticket opened (docs/PROTOCOL.md).
    Pairing(PairingToken),
    /// An environment's answer to a host's hello: its own nonce and its signature over the pairing
    /// and both nonces (docs/PROTOCOL.md, "Environments").
    Identity {
        #[serde(rename = "envKey")]
        env_key: String,
        nonce: String,
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
        /// Why a finished call failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<ErrorCode>,
        /// The approval an `approve` call answered (or, refused, left open).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<String>,
    },
    CallEnded {
        duration_s: f64,
    },
    /// A note for the model of a call the relay hosts (narration, an approval's read-back), which
    /// the client passes on to the relay's `/live` unchanged (docs/PROTOCOL.md, "Hosted voice").
    Narrate {
        text: String,
    },
    /// An approval waiting for the user (docs/PROTOCOL.md, "Approvals").
    Approval(ApprovalFrame),
    /// An approval was decided.
    ApprovalResolved(ApprovalResolved),
    /// What became of a frame that asked for a receipt (`approve`, `cancel`); the same again for
    /// that frame sent again (docs/PROTOCOL.md, "Receipts").
    Receipt(super::Receipt),
    /// The grants, answering `grants` or `revoke` (`revoked`: the grant that `revoke` ended).
    Grants {
        grants: Vec<super::Grant>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revoked: Option<String>,
    },
    /// The laptop keeps this browser's push subscription and will notify it.
    PushSubscribed,
    /// Tool calls of this session's pairing this client did not start: running, or finished and
    /// not yet seen. Their `tool_progress`, `image` and `tool_result` frames follow.
    Calls(CallsFrame),
    /// The screen of a terminal this client attached, before its output.
    TermSnapshot(super::TermSnapshot),
    /// Output of a terminal this client opened or attached.
    TermOutput(super::TermOutput),
    /// A terminal's program ended.
    TermExit(super::TermExit),
    /// A sealed session's sign of life (docs/PROTOCOL.md, "Ticks"); the seal consumes it.
    Tick,
    /// One event of a coding-agent session, to a client that follows (docs/PROTOCOL.md,
    /// "Coding-agent sessions").
    AgentEvent(super::SessionEvent),
    /// What the comparison of the page the relay serves with this voxa's found, to a client that
    /// follows: at once, then at each new finding (docs/SECURITY.md, "The page the relay serves").
    RelayPage(RelayPage),
    /// Whether a paired environment can be reached, to a client that follows on a host: its
    /// sessions and terminals are shown `unreachable` (never ended) until it is back
    /// (docs/PROTOCOL.md, "Environments").
    Environment(EnvironmentState),
}

/// `{"type":"environment",…}`: one paired environment as the host's follow sees it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct EnvironmentState {
    /// Its envKey.
    pub env: String,
    /// The name the host gave it.
    pub name: String,
    pub state: EnvReach,
}

/// Whether the host reaches an environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvReach {
    /// Its session with the host is up: its events come live.
    Reachable,
    /// The host cannot reach it now and keeps trying; its sessions are kept, not ended.
    Unreachable,
    /// It revoked this host's pairing: its sessions are refused `pairing-revoked`.
    Revoked,
}

/// The calls a `calls` frame names (docs/PROTOCOL.md, "Calls outlive the connection").
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct CallsFrame {
    pub running: Vec<CallEntry>,
    pub finished: Vec<CallEntry>,
    /// Finished calls dropped unseen since the agent started (the store is bounded).
    #[serde(default)]
    pub dropped: u64,
}

/// One call in a `calls` frame.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct CallEntry {
    pub id: String,
    pub name: String,
    /// The call's arguments, when they are small (under 2 KiB as JSON); else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// When it started, in Unix seconds.
    pub started: u64,
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

/// Whether the relay serves this voxa's web client, as `voxa run` found when it connected
/// (src/net/page_check.rs compares every file's SHA-256 with the embedded copy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RelayPage {
    /// Every file the relay serves is byte for byte this binary's.
    Same { files: usize },
    /// These paths differ (or were refused) at the relay.
    Altered { paths: Vec<String> },
    /// The comparison could not be made (the relay did not answer, or not as HTTP).
    Unchecked { why: String },
}

impl RelayPage {
    /// One line for people: `status`, `doctor` and `run` print it.
    pub fn describe(&self) -> String {
        match self {
            RelayPage::Same { files } => format!("the relay serves this voxa's page ({files} files, hashes match)"),
            RelayPage::Altered { paths } => format!(
                "the relay serves a page that differs from this voxa's: {} — a changed script could take the pairing \
                 token from the browser; open the page with `voxa open` or use a relay you run",
                paths.join(", ")
            ),
            RelayPage::Unchecked { why } => format!("the relay's page was not compared: {why}"),
        }
    }
}

#[cfg(test)]
mod relay_page_tests {
    use super::RelayPage;

    #[test]
    fn what_is_said_names_the_altered_files_and_the_remedy() {
        let altered = RelayPage::Altered { paths: vec!["/js/session.js".into()] }.describe();
        assert!(altered.contains("/js/session.js") && altered.contains("voxa open"), "{altered}");
        assert!(RelayPage::Same { files: 3 }.describe().contains("hashes match"));
        let json = serde_json::to_value(RelayPage::Same { files: 3 }).unwrap();
        assert_eq!(json, serde_json::json!({"state": "same", "files": 3}));
        // The frame a follower gets carries the finding flat beside its type.
        let frame = super::AgentMessage::RelayPage(RelayPage::Altered { paths: vec!["/js/dom.js".into()] });
        let json = serde_json::json!({"type": "relay_page", "state": "altered", "paths": ["/js/dom.js"]});
        assert_eq!(serde_json::to_value(&frame).unwrap(), json);
        assert_eq!(serde_json::from_value::<super::AgentMessage>(json).unwrap(), frame);
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
    /// Each relay the agent keeps a link to, in the pairing's order (the first is `relay`);
    /// `relay_connected` and `phone_present` say whether any of them is. Absent from agents older
    /// than this field and without a relay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relays: Vec<RelayLinkStatus>,
    /// While the relay code replaced by `voxa pair --rotate` is still answered (every phone on
    /// it refused): until when, in Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_code_until: Option<u64>,
    pub calls_in_flight: usize,
    /// Every client with a session open right now, the asker included.
    #[serde(default)]
    pub connected: Vec<ConnectedClient>,
    /// Open sessions that are sealed (protocol 3) and plain (protocol 2), this one included.
    #[serde(default)]
    pub sealed_sessions: usize,
    #[serde(default)]
    pub plain_sessions: usize,
    /// Whether the relay serves this voxa's page; absent before the first check and without a relay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_page: Option<RelayPage>,
    pub workspace: String,
    /// What the agent's own environment offers its tools; `voxa doctor` reads it instead of its
    /// own shell's. Absent from agents older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sees: Option<AgentSees>,
    /// Whether the agent keeps the laptop awake. Absent from agents older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awake: Option<Box<AwakeStatus>>,
    /// The last push and whether its receipt came back; absent before the first push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<Box<PushStatus>>,
}

/// One relay link of a running agent, as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct RelayLinkStatus {
    pub relay: String,
    pub connected: bool,
    pub phone_present: bool,
}

/// One push, as `status` shows the last one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushStatus {
    /// `approval`, `turn_end`, `session_failed` or `test`.
    pub event: String,
    /// When it went to the push service, in Unix milliseconds.
    pub sent_at: u64,
    /// `"delivered"` (a receipt came back), `"waiting"`, or `"not-delivered"` (none within the
    /// re-send time).
    pub state: String,
    /// From the push to its first receipt, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_after_ms: Option<u64>,
    /// This push is the one re-send of an approval's push that was not delivered in time.
    #[serde(default)]
    pub resent: bool,
}

/// The sleep inhibitor of a running agent, as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct AwakeStatus {
    /// The inhibitor is held: the laptop does not sleep.
    pub held: bool,
    /// While held, why ("a command runs, an approval waits").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// While held, since when, in Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Which inhibitor it took last: `"logind"` or `"caffeinate"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
    /// Why the agent could not take one the last time it tried ("no system D-Bus …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The laptop runs on its battery; absent where there is no battery to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_battery: Option<bool>,
}

/// A client with a session open on the agent, as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ConnectedClient {
    /// Its hello's `client` (printable, at most 64 characters), or absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// `"relay"` (a phone), `"loopback"` (this machine) or `"host"` (a host driving this
    /// environment).
    pub via: String,
    pub sealed: bool,
    /// Since when, in Unix seconds.
    pub since: u64,
}

/// The agent's `DISPLAY` (the screenshot tool's) and which coding agents its `PATH` holds.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct AgentSees {
    /// `DISPLAY`, when set and not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// `WAYLAND_DISPLAY` is set.
    #[serde(default)]
    pub wayland: bool,
    /// `claude` and every `[agents]` entry of `config.toml`, in that order.
    #[serde(default)]
    pub coding_agents: Vec<CodingAgentSeen>,
}

/// One coding agent as the agent's `PATH` resolves it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct CodingAgentSeen {
    pub name: String,
    pub program: String,
    pub found: bool,
}

/// Parses one client text frame. Errors are answered `bad-frame` and the session goes on.
pub fn parse_client(text: &str) -> Result<ClientMessage, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use crate::protocol::*;

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
        let mut marks = serde_json::Map::new();
        marks.insert("s-1".into(), 7.into());
        assert_eq!(ClientMessage::follow_after(marks).to_json(), r#"{"type":"follow","after":{"s-1":7}}"#);
    }
}
