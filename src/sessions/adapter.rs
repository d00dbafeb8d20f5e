//! The one trait every coding agent's protocol sits behind: how its process starts, what is
//! written to it for a turn, an interrupt or an answer, and what each line it prints means. An
//! adapter is a pure translator (no I/O), so each is tested line by line; the runner does the
//! process work for all of them.

use std::path::PathBuf;

use serde_json::Value;

use crate::approvals::{Answer, Request};
use crate::protocol::Event;

/// How to start the agent's process.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra environment (names and values), on top of the tools' environment.
    pub env: Vec<(String, String)>,
}

/// What a line of the agent's output asks of the host.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// Record and tell followers.
    Event(Event),
    /// The agent's own id for this session, to resume it later.
    ResumeId(String),
    /// A prompt that needs an answer; `ask` identifies it to [`Adapter::answer`].
    Ask { ask: Ask, request: Request },
    /// The agent withdrew the prompt `ask.id`.
    Withdrawn(String),
    /// The running turn ended (its `turn_end` event comes as an [`Output::Event`] before).
    TurnEnded,
    /// Lines to write to the agent (acknowledgements, follow-up requests).
    Write(Vec<String>),
    /// The agent cannot go on (its handshake failed; an `error` event said why): its process
    /// is ended and queued turns are dropped.
    Fail,
}

/// A prompt as the agent identifies it.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    /// The agent's request id (Claude's `request_id`, Codex's JSON-RPC id as JSON text).
    pub id: String,
    /// The input as given, sent back with an allow.
    pub input: Value,
}

/// One agent's protocol.
pub trait Adapter: Send + 'static {
    /// The process to start; `resume` is the id an earlier process reported, `turn` the prompt
    /// for agents that take one turn per process.
    fn launch(&self, resume: Option<&str>, turn: Option<&str>) -> Launch;
    /// True for agents that run one process per turn, the prompt in their arguments.
    fn per_turn(&self) -> bool {
        false
    }
    /// Lines written once the process started (a handshake).
    fn hello(&mut self, _resume: Option<&str>) -> Vec<String> {
        Vec::new()
    }
    /// Whether a turn can be written now (a handshake may have to finish first).
    fn ready(&self) -> bool {
        true
    }
    /// The lines that start a turn.
    fn turn(&mut self, text: &str) -> Vec<String>;
    /// The lines that interrupt the running turn.
    fn interrupt(&mut self) -> Vec<String>;
    /// The lines that answer a prompt.
    fn answer(&mut self, ask: &Ask, answer: &Answer) -> Vec<String>;
    /// What one line of output means.
    fn on_line(&mut self, line: &[u8]) -> Vec<Output>;
    /// What the end of a one-turn process means (its output already read).
    fn on_exit(&mut self, _exit_code: i32) -> Vec<Output> {
        Vec::new()
    }
}

/// One JSON line.
pub fn line(value: &Value) -> String {
    value.to_string()
}
