//! The tool registry (SPEC §5): one table that names the tools, describes their arguments (for
//! `hello_ok` and Gemini's function declarations) and runs them under the workspace and policy.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::audit::Audit;
use crate::config::Config;
use crate::protocol::{ErrorCode, ToolError};

/// How to build a [`Toolbox`].
#[derive(Clone, Debug)]
pub struct ToolboxOptions {
    /// Root every path argument resolves inside.
    pub workspace: PathBuf,
    /// Policy, coding agents, concurrency.
    pub config: Config,
    /// Where every call is recorded; `None` records nothing (benchmarks).
    pub audit: Option<Audit>,
}

/// One call to run.
#[derive(Debug)]
pub struct ToolRequest {
    pub id: String,
    pub name: String,
    pub args: Value,
    /// Who asked: `phone`, `loopback`, `gemini`, `host:<envKey>` (audit only).
    pub caller: String,
    /// Output chunks as they happen (`tool_progress`); `None` when nobody listens.
    pub progress: Option<mpsc::Sender<String>>,
    /// Cancelled by `cancel`, the session ending, or Gemini's `toolCallCancellation`.
    pub cancel: CancellationToken,
}

/// What a successful call returns.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub result: Value,
    /// A screenshot, sent to the phone only as an `image` frame.
    pub image: Option<Screenshot>,
}

/// An encoded screenshot.
#[derive(Clone)]
pub struct Screenshot {
    pub mime: String,
    pub width: u32,
    pub height: u32,
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for Screenshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screenshot")
            .field("mime", &self.mime)
            .field("width", &self.width)
            .field("height", &self.height)
            .finish()
    }
}

/// The tools of this machine.
#[derive(Clone, Debug)]
pub struct Toolbox {
    workspace: PathBuf,
}

impl Toolbox {
    pub fn new(options: ToolboxOptions) -> anyhow::Result<Self> {
        Ok(Toolbox { workspace: options.workspace })
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Tool names, as listed in `hello_ok`.
    pub fn names(&self) -> Vec<String> {
        Vec::new()
    }

    /// Gemini `functionDeclarations` for every tool.
    pub fn gemini_declarations(&self) -> Value {
        Value::Array(Vec::new())
    }

    /// Runs one call: policy, argument checks, execution, audit.
    pub async fn call(&self, request: ToolRequest) -> Result<ToolOutput, ToolError> {
        Err(ToolError::new(ErrorCode::UnknownTool, format!("no tool named {:?}", request.name)))
    }
}
