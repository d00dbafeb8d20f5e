//! Errors that decide the process exit status (README, "Exit codes"). Everything else is `anyhow` with context.

use std::fmt;

use crate::protocol::ErrorCode;

/// Exit status of the `voxa` binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Success.
    Ok = 0,
    /// Any failure not listed below (network, I/O, the agent is not running).
    Failure = 1,
    /// Usage or configuration error: bad flag, missing `GEMINI_API_KEY`, unsafe permissions.
    Usage = 2,
    /// `voxa call`: the tool ran and reported an error (`ok:false`).
    ToolFailed = 3,
    /// `voxa call` or a pairing action: refused (wrong token, policy, pairing refusal).
    Refused = 4,
    /// `voxa call`: the command or coding agent ran and exited non-zero (or timed out).
    CommandFailed = 5,
}

impl Exit {
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// A configuration or usage problem: exit status 2.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl ConfigError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// A refusal with one of the contract's codes (exit status 4).
#[derive(Debug)]
pub struct Refused {
    pub code: ErrorCode,
    pub message: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "refused: {}", self.code)
        } else {
            write!(f, "refused: {} ({})", self.code, self.message)
        }
    }
}

impl std::error::Error for Refused {}

/// A tool that ran and failed (exit status 3); already printed by the caller.
#[derive(Debug)]
pub struct ToolFailed(pub ErrorCode);

impl fmt::Display for ToolFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tool failed: {}", self.0)
    }
}

impl std::error::Error for ToolFailed {}

/// Picks the exit status for an error by looking through its chain.
pub fn exit_for(err: &anyhow::Error) -> Exit {
    for cause in err.chain() {
        if cause.is::<ConfigError>() {
            return Exit::Usage;
        }
        if cause.is::<Refused>() {
            return Exit::Refused;
        }
        if cause.is::<ToolFailed>() {
            return Exit::ToolFailed;
        }
    }
    Exit::Failure
}

/// True when the error is a broken pipe (stdout closed early: `voxa pair | head -1`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn exit_status_follows_the_chain() {
        let err = Err::<(), _>(ConfigError::new("bad")).context("outer").unwrap_err();
        assert_eq!(exit_for(&err), Exit::Usage);
        let err = anyhow::Error::new(Refused { code: ErrorCode::BearerRefused, message: String::new() });
        assert_eq!(exit_for(&err), Exit::Refused);
        assert_eq!(exit_for(&anyhow::anyhow!("other")), Exit::Failure);
    }
}
