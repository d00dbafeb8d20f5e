//! The open approvals kept in the home (`approvals.json`, 0600): just enough to say, after a
//! restart, which ones were left open — id, source, tool, summary, risk — never their input.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::protocol::{ApprovalFrame, ApprovalSource, Risk};

/// Largest `approvals.json` read back; a larger one is taken as damaged.
const MAX_STORE_LEN: usize = 1 << 20;

/// One open approval, as kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    pub approval: String,
    pub source: ApprovalSource,
    pub tool: String,
    pub summary: String,
    pub risk: Risk,
    pub expires_at: u64,
}

impl Kept {
    pub fn of(frame: &ApprovalFrame) -> Self {
        Kept {
            approval: frame.approval.clone(),
            source: frame.source.clone(),
            tool: frame.tool.clone(),
            summary: frame.summary.clone(),
            risk: frame.risk,
            expires_at: frame.expires_at,
        }
    }

    pub fn into_frame(self) -> ApprovalFrame {
        ApprovalFrame {
            approval: self.approval,
            source: self.source,
            tool: self.tool,
            input: serde_json::Value::Null,
            summary: self.summary,
            risk: self.risk,
            diff: None,
            questions: None,
            allow_session: false,
            grant_allows: None,
            expires_at: self.expires_at,
        }
    }
}

/// Replaces the file with `open` (atomically, 0600); removes it when nothing is open.
pub fn save(path: &Path, open: &[Kept]) -> Result<()> {
    if open.is_empty() {
        return match std::fs::remove_file(path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                Err(err).with_context(|| format!("could not remove {}", path.display()))
            }
            _ => Ok(()),
        };
    }
    let bytes = serde_json::to_vec(open).context("could not encode the open approvals")?;
    crate::state::write_atomic(path, &bytes)
}

/// What a previous run left open; the file is removed.
pub fn take(path: &Path) -> Result<Vec<Kept>> {
    let Some(bytes) = crate::state::read_if_exists(path)? else { return Ok(Vec::new()) };
    std::fs::remove_file(path).with_context(|| format!("could not remove {}", path.display()))?;
    if bytes.len() > MAX_STORE_LEN {
        anyhow::bail!("{} is larger than {MAX_STORE_LEN} bytes", path.display());
    }
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not a list of approvals", path.display()))
}
