//! Error and refusal codes (docs/PROTOCOL.md, "Errors and close codes"), `call_error` codes and
//! WebSocket close codes.

use serde::{Deserialize, Serialize};

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
/// | `unavailable` | the laptop hosts no voice calls itself (a relay offering them hosts them at `/live`) |
/// | `no-call` | `say` or `call_end` without a running call |
/// | `at-capacity` | the relay hosting voice runs as many calls as its operator allows |
/// | `too-many-calls` | the caller's address runs, or started in the last minute, as many relay-hosted calls as allowed |
/// | `budget-spent` | the relay's daily minutes of hosted calls are spent (refused, or the running call ended) |
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
    TooManyCalls,
    BudgetSpent,
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
            CallErrorCode::TooManyCalls => "too-many-calls",
            CallErrorCode::BudgetSpent => "budget-spent",
        }
    }
}

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
    /// A sealed session heard nothing sealed from its peer for 25 s (no frame, not even a tick).
    SealedSessionStalled,
    /// This agent accepts sealed sessions (protocol 3) only.
    SealedSessionRequired,
    /// The file changed on the laptop since the caller read it (its `version` differs), or the
    /// name a move, restore or new file wants is taken; nothing was changed.
    Conflict,
    /// A voice call's `approve` with `allow` that the user's own words since the approval was read
    /// to them do not back (docs/GUIDE.md, "What voice will never do"): the approval stays open.
    NoSpokenConsent,
    /// A hello keyed by a pairing ticket that an earlier hello spent already.
    TicketUsed,
    /// A hello keyed by a pairing ticket that expired, was replaced by `pair --rotate`, or is not
    /// this laptop's.
    TicketExpired,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 30] = [
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
        ErrorCode::SealedSessionStalled,
        ErrorCode::SealedSessionRequired,
        ErrorCode::Conflict,
        ErrorCode::NoSpokenConsent,
        ErrorCode::TicketUsed,
        ErrorCode::TicketExpired,
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
            ErrorCode::SealedSessionStalled => "sealed-session-stalled",
            ErrorCode::SealedSessionRequired => "sealed-session-required",
            ErrorCode::Conflict => "conflict",
            ErrorCode::NoSpokenConsent => "no-spoken-consent",
            ErrorCode::TicketUsed => "ticket-used",
            ErrorCode::TicketExpired => "ticket-expired",
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
                | ErrorCode::SealedSessionStalled
                | ErrorCode::SealedSessionRequired
                | ErrorCode::TicketUsed
                | ErrorCode::TicketExpired
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
    /// Going away: the relay shuts down, or the socket was silent past the idle timeout.
    pub const GOING_AWAY: u16 = 1001;
    /// Policy violation: authentication refused (docs/PROTOCOL.md, "Errors and close codes").
    pub const POLICY: u16 = 1008;
    /// Message too big.
    pub const TOO_BIG: u16 = 1009;
    /// Try again later: the reader fell behind.
    pub const TRY_AGAIN_LATER: u16 = 1013;
    /// A newer connection for the same code and role took over.
    pub const REPLACED: u16 = 4001;
}

#[cfg(test)]
mod tests {
    use crate::protocol::*;

    #[test]
    fn error_codes_serialize_as_their_wire_strings() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: ErrorCode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, code);
        }
    }
}
