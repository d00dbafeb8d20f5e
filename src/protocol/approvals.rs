//! Approval frames (docs/PROTOCOL.md, "Approvals"): an action waiting for the user's decision,
//! the user's answer and the notice that it was decided.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest approval id, decision message or summary accepted from a client.
pub const MAX_APPROVAL_TEXT_LEN: usize = 4096;

/// What asked for the approval: a coding-agent session or one of voxa's own tool calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalSource {
    /// `{"session":"s-…"}`.
    Session(String),
    /// `{"call":"c1"}`: the `tool_call` id.
    Call(String),
}

/// What the action can do to the machine, from least to most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Reads inside the workspace.
    Read,
    /// Changes files inside the workspace.
    Write,
    /// Runs a program.
    Exec,
    /// Reaches the network.
    Network,
    /// Touches something outside the workspace.
    Outside,
}

impl Risk {
    /// The class's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Read => "read",
            Risk::Write => "write",
            Risk::Exec => "exec",
            Risk::Network => "network",
            Risk::Outside => "outside",
        }
    }

    /// True for the classes a voice answer may allow only once, explicitly.
    pub fn needs_explicit_allow(self) -> bool {
        matches!(self, Risk::Exec | Risk::Network | Risk::Outside)
    }
}

/// The user's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    /// Allow this and the same kind of action for the rest of the session, where the source offers it.
    AllowSession,
    Deny,
}

impl Decision {
    /// The decision's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::AllowSession => "allow_session",
            Decision::Deny => "deny",
        }
    }

    /// True for both kinds of allow.
    pub fn allows(self) -> bool {
        !matches!(self, Decision::Deny)
    }
}

/// Who (or what) decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// A client on the relay or the loopback page.
    Phone,
    /// The voice model, in a self-hosted call, after telling the user.
    Voice,
    /// `voxa approve`.
    Cli,
    /// Nobody answered before `expires_at`.
    Timeout,
    /// voxa stopped while it was open.
    Restart,
    /// The asker no longer waits: the call was cancelled or the coding agent withdrew the prompt.
    Withdrawn,
    /// A grant the user made with "Allow for session" answered it (docs/PROTOCOL.md, "Grants").
    Grant,
}

impl DecidedBy {
    /// The name on the wire and in the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Phone => "phone",
            DecidedBy::Voice => "voice",
            DecidedBy::Cli => "cli",
            DecidedBy::Timeout => "timeout",
            DecidedBy::Restart => "restart",
            DecidedBy::Withdrawn => "withdrawn",
            DecidedBy::Grant => "grant",
        }
    }
}

/// `{"type":"approval",…}`: an open approval.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ApprovalFrame {
    /// `a-<16 hex>`.
    pub approval: String,
    pub source: ApprovalSource,
    /// The tool as its source names it (`run_command`, `Bash`, `Edit`, …).
    pub tool: String,
    /// The tool's input, as the source gave it (the full command, the edit).
    pub input: Value,
    /// One line a person can read and a voice model can read aloud.
    pub summary: String,
    pub risk: Risk,
    /// A unified diff of a file edit, when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// A coding agent's questions (`AskUserQuestion`): answered with `answers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<Value>,
    /// True when `allow_session` is offered.
    #[serde(default)]
    pub allow_session: bool,
    /// What an `allow_session` would let through from then on, in words (a coding-agent
    /// session's grant: "every Edit in this session, of any file").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_allows: Option<String>,
    /// Unix ms after which it is denied.
    pub expires_at: u64,
}

/// One grant, as listed (`{"type":"grants"}`) and kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// `g-<16 hex>`.
    pub grant: String,
    /// The coding-agent session it belongs to.
    pub session: String,
    /// The tool it lets through (`Edit`, `Bash`, `fileChange`, …).
    pub tool: String,
    /// What it lets through: `tool` (every use of the tool) or `command` (that command only).
    pub scope: GrantScope,
    /// The command of a `command` grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// What it lets through, in words (the card said the same).
    pub allows: String,
    /// Unix ms.
    pub created_at: u64,
}

/// What a grant covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantScope {
    /// Every use of the tool in the session.
    Tool,
    /// The one command, exactly, in the session.
    Command,
}

/// `{"type":"approve",…}`: a client's answer.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct Approve {
    pub approval: String,
    pub decision: Decision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<Value>,
    /// Asks for a `receipt` under this id; the same id sent again gets the same receipt and
    /// answers nothing more (docs/PROTOCOL.md, "Receipts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// The environment whose approval it answers (its envKey or name); the host passes it on
    /// (docs/PROTOCOL.md, "Environments").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

/// `{"type":"approval_resolved",…}`: sent to every following client once an approval is decided.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ApprovalResolved {
    pub approval: String,
    pub decision: Decision,
    pub by: DecidedBy,
    /// Why, when the decision came with a message (`deny` from a person, the expiry, a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The grant an `allow_session` made, or the grant that answered (`by:"grant"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
}
