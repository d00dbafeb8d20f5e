//! The audit trail (SPEC §3): one JSON line per tool call under `audit/`. Never secrets, never
//! file contents.

use std::path::PathBuf;

/// Appends audit records to the home's `audit/` directory.
#[derive(Clone, Debug)]
pub struct Audit {
    pub dir: PathBuf,
}

impl Audit {
    pub fn new(dir: PathBuf) -> Self {
        Audit { dir }
    }
}
