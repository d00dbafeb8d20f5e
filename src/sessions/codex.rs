//! Codex as a long-lived `codex app-server`: JSON-RPC 2.0 as JSON lines on both pipes (the
//! `jsonrpc` member left out). The handshake (`initialize`, `initialized`, then `thread/start`,
//! or `thread/resume` for a thread an earlier process reported) comes first; each turn is a
//! `turn/start`, an interrupt a `turn/interrupt`. The server's approval requests
//! (`item/commandExecution/requestApproval`, `item/fileChange/requestApproval`) block its turn
//! until answered; anything else it asks is refused so it never waits on voxa.
//!
//! Codex's items are told in voxa's tool vocabulary: a `commandExecution` is a `Bash` tool use
//! (`input.command`), a `fileChange` an `Edit` (`input.changes`, with a unified diff), an MCP
//! call `<server>.<tool>`, a web search `WebSearch`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::adapter::{line, Adapter, Ask, Launch, Output};
use super::describe::{summary, unified};
use super::event::{bounded_input, capped, MAX_DIFF_LEN, MAX_TEXT_LEN, MAX_TOOL_OUTPUT};
use crate::approvals::{command_risk, Answer, Request};
use crate::protocol::Event;
use crate::protocol::{ApprovalSource, Decision, Risk};
use crate::text::prefix;

/// The built-in name of the agent.
pub const CODEX_AGENT: &str = "codex";
/// Who asks for approval: every command not known to be harmless, every edit.
const APPROVAL_POLICY: &str = "untrusted";
/// What an approved command may touch: the workspace, not the rest of the machine.
const SANDBOX: &str = "workspace-write";
/// Items of one turn remembered for the approvals that name them.
const MAX_ITEMS: usize = 256;
/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// What a request of ours was, to read its answer.
#[derive(Clone, Debug, PartialEq)]
enum Call {
    Initialize,
    ThreadStart,
    ThreadResume(String),
    TurnStart,
    Interrupt,
}

/// The Codex adapter of one session.
pub struct Codex {
    program: PathBuf,
    /// voxa's id of the session, the source of its approvals.
    session: String,
    cwd: PathBuf,
    next_id: u64,
    calls: HashMap<u64, Call>,
    thread: Option<String>,
    /// The running turn, once Codex named it.
    turn: Option<String>,
    /// An interrupt asked for before the turn had its id.
    interrupt_wanted: bool,
    /// The running turn was interrupted: its end is not a failure.
    interrupted: bool,
    /// Tool items of the running turn by id (commands, file changes), for their approvals.
    items: HashMap<String, Value>,
    /// The turn's last agent message: its result.
    last_message: String,
    /// A turn/start that failed ended the turn already.
    turn_open: bool,
}

impl Codex {
    pub fn new(program: PathBuf, session: String, cwd: PathBuf) -> Self {
        Codex {
            program,
            session,
            cwd,
            next_id: 0,
            calls: HashMap::new(),
            thread: None,
            turn: None,
            interrupt_wanted: false,
            interrupted: false,
            items: HashMap::new(),
            last_message: String::new(),
            turn_open: false,
        }
    }

    fn request(&mut self, call: Call, method: &str, params: Value) -> String {
        self.next_id += 1;
        self.calls.insert(self.next_id, call);
        line(&json!({"id": self.next_id, "method": method, "params": params}))
    }

    fn thread_start(&mut self) -> String {
        let cwd = self.cwd.display().to_string();
        let params = json!({"cwd": cwd, "approvalPolicy": APPROVAL_POLICY, "sandbox": SANDBOX});
        self.request(Call::ThreadStart, "thread/start", params)
    }

    fn interrupt_line(&mut self) -> Option<String> {
        let (thread, turn) = (self.thread.clone()?, self.turn.clone()?);
        self.interrupt_wanted = false;
        Some(self.request(Call::Interrupt, "turn/interrupt", json!({"threadId": thread, "turnId": turn})))
    }

    /// The turn got its id: an interrupt that waited for it goes now.
    fn turn_named(&mut self, id: &str, out: &mut Vec<Output>) {
        if id.is_empty() || !self.turn_open {
            return;
        }
        self.turn = Some(id.to_owned());
        if self.interrupt_wanted {
            if let Some(interrupt) = self.interrupt_line() {
                out.push(Output::Write(vec![interrupt]));
            }
        }
    }

    fn on_response(&mut self, value: &Value, out: &mut Vec<Output>) {
        let Some(call) = value.get("id").and_then(Value::as_u64).and_then(|id| self.calls.remove(&id)) else { return };
        let error = value.get("error").map(|error| capped(&str_at(error, "/message"), MAX_TEXT_LEN));
        match (call, error) {
            (Call::ThreadStart | Call::ThreadResume(_), None) => {
                let id = str_at(value, "/result/thread/id");
                if !id.is_empty() {
                    self.thread = Some(id.clone());
                    out.push(Output::ResumeId(id));
                }
            }
            (Call::ThreadResume(id), Some(error)) => {
                let shown = prefix(&id, 64);
                out.push(Output::Event(Event::error(
                    "agent-error",
                    format!("Codex could not resume thread {shown}: {error}; a new thread starts without its context"),
                )));
                let start = self.thread_start();
                out.push(Output::Write(vec![start]));
            }
            (Call::Initialize | Call::ThreadStart, Some(error)) => {
                out.push(Output::Event(Event::error("unavailable", format!("Codex refused to start: {error}"))));
                out.push(Output::Fail);
            }
            (Call::TurnStart, None) => {
                let id = str_at(value, "/result/turn/id");
                self.turn_named(&id, out);
            }
            (Call::TurnStart, Some(error)) => {
                self.end_turn(false, format!("Codex refused the turn: {error}"), 0, out);
            }
            (Call::Interrupt, Some(error)) => {
                out.push(Output::Event(Event::error("agent-error", format!("Codex refused the interrupt: {error}"))));
            }
            (Call::Initialize | Call::Interrupt, None) => {}
        }
    }

    fn end_turn(&mut self, ok: bool, result: String, duration_ms: u64, out: &mut Vec<Output>) {
        if !std::mem::take(&mut self.turn_open) {
            return;
        }
        let interrupted = !ok && std::mem::take(&mut self.interrupted);
        self.turn = None;
        self.interrupt_wanted = false;
        self.items.clear();
        self.last_message.clear();
        out.push(Output::Event(Event::TurnEnd {
            ok,
            result: capped(&result, MAX_TEXT_LEN),
            cost_usd: None,
            duration_ms,
            interrupted,
        }));
        out.push(Output::TurnEnded);
    }

    fn on_notification(&mut self, method: &str, params: &Value, out: &mut Vec<Output>) {
        match method {
            "turn/started" => self.turn_named(&str_at(params, "/turn/id"), out),
            "item/agentMessage/delta" => {
                let delta = str_at(params, "/delta");
                if !delta.is_empty() {
                    out.push(Output::Event(Event::Text { text: capped(&delta, MAX_TEXT_LEN), partial: true }));
                }
            }
            "item/started" => {
                if let Some(item) = params.get("item") {
                    self.item_started(item, out);
                }
            }
            "item/completed" => {
                if let Some(item) = params.get("item") {
                    self.item_completed(item, out);
                }
            }
            "turn/completed" => {
                let turn = params.get("turn").unwrap_or(&Value::Null);
                let status = str_at(turn, "/status");
                let error = str_at(turn, "/error/message");
                if !error.is_empty() && status != "interrupted" {
                    out.push(Output::Event(Event::error("agent-error", capped(&error, MAX_TEXT_LEN))));
                }
                let mut result = std::mem::take(&mut self.last_message);
                if result.is_empty() {
                    result = match status.as_str() {
                        "interrupted" => "interrupted".to_owned(),
                        _ => error,
                    };
                }
                let duration = turn.get("durationMs").and_then(Value::as_u64).unwrap_or(0);
                self.interrupted |= status == "interrupted";
                self.end_turn(status == "completed", result, duration, out);
            }
            // A retried failure is Codex's own business; a final one is said.
            "error" if !params.get("willRetry").and_then(Value::as_bool).unwrap_or(false) => {
                let message = str_at(params, "/error/message");
                out.push(Output::Event(Event::error("agent-error", capped(&message, MAX_TEXT_LEN))));
            }
            "serverRequest/resolved" => {
                if let Some(id) = params.get("requestId") {
                    out.push(Output::Withdrawn(id.to_string()));
                }
            }
            _ => {}
        }
    }

    fn item_started(&mut self, item: &Value, out: &mut Vec<Output>) {
        let Some((name, input)) = tool_of(item) else { return };
        let id = str_at(item, "/id");
        let summary = self.summary(&name, &input);
        let diff = change_diff(item);
        if self.items.len() >= MAX_ITEMS {
            self.items.clear();
        }
        self.items.insert(id.clone(), item.clone());
        out.push(Output::Event(Event::ToolUse {
            tool_use_id: id,
            input: bounded_input(input, &summary),
            name,
            summary,
            diff,
        }));
    }

    fn item_completed(&mut self, item: &Value, out: &mut Vec<Output>) {
        let kind = str_at(item, "/type");
        if kind == "agentMessage" {
            let text = str_at(item, "/text");
            if !text.is_empty() {
                out.push(Output::Event(Event::Text { text: capped(&text, MAX_TEXT_LEN), partial: false }));
                self.last_message = text;
            }
            return;
        }
        if tool_of(item).is_none() {
            return;
        }
        let id = str_at(item, "/id");
        self.items.remove(&id);
        let status = str_at(item, "/status");
        let (ok, output) = match kind.as_str() {
            "commandExecution" => {
                let exit = item.get("exitCode").and_then(Value::as_i64);
                let output = str_at(item, "/aggregatedOutput");
                let output = match (status.as_str(), exit) {
                    ("declined", _) => "declined".to_owned(),
                    (_, Some(code)) if code != 0 && output.is_empty() => format!("exit code {code}"),
                    _ => output,
                };
                (status == "completed" && exit.unwrap_or(0) == 0, output)
            }
            "mcpToolCall" => {
                let error = str_at(item, "/error/message");
                let result = item.get("result").map(Value::to_string).unwrap_or_default();
                (status == "completed" && error.is_empty(), if error.is_empty() { result } else { error })
            }
            _ => (status == "completed" || status.is_empty(), status),
        };
        out.push(Output::Event(Event::ToolResult { tool_use_id: id, ok, output: capped(&output, MAX_TOOL_OUTPUT) }));
    }

    fn summary(&self, name: &str, input: &Value) -> String {
        match name {
            "Edit" => {
                let paths: Vec<String> = input
                    .get("changes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|change| shown(&str_at(change, "/path"), &self.cwd))
                    .collect();
                prefix(&format!("edit {}", paths.join(", ")), 200).to_owned()
            }
            _ => summary(name, input, &self.cwd),
        }
    }

    fn on_server_request(&mut self, value: &Value, method: &str, out: &mut Vec<Output>) {
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        let params = value.get("params").unwrap_or(&Value::Null);
        let item = self.items.get(&str_at(params, "/itemId")).cloned();
        let (tool, input, risk, diff) = match method {
            "item/commandExecution/requestApproval" => {
                let command = match str_at(params, "/command") {
                    command if command.is_empty() => item.as_ref().map(command_text).unwrap_or_default(),
                    _ => params_command(params),
                };
                let cwd = match str_at(params, "/cwd") {
                    cwd if cwd.is_empty() => self.cwd.display().to_string(),
                    cwd => cwd,
                };
                let risk = command_risk(&command, &self.cwd);
                ("Bash".to_owned(), json!({"command": command, "cwd": cwd, "reason": params.get("reason")}), risk, None)
            }
            "item/fileChange/requestApproval" => {
                let changes = item.as_ref().and_then(|item| item.get("changes")).cloned().unwrap_or(json!([]));
                let risk = change_risk(&changes, &self.cwd);
                let diff = item.as_ref().and_then(change_diff);
                (
                    "Edit".to_owned(),
                    json!({"changes": strip_diffs(&changes), "reason": params.get("reason")}),
                    risk,
                    diff,
                )
            }
            _ => {
                // Nothing else is asked of a host today; an error keeps Codex from waiting.
                let message = format!("voxa does not handle {}", prefix(method, 80));
                out.push(Output::Write(vec![line(
                    &json!({"id": id, "error": {"code": METHOD_NOT_FOUND, "message": message}}),
                )]));
                return;
            }
        };
        let summary = self.summary(&tool, &input);
        let request = Request {
            source: ApprovalSource::Session(self.session.clone()),
            risk,
            diff,
            input: bounded_input(input.clone(), &summary),
            tool,
            summary,
            offers_session: true,
            questions: None,
        };
        out.push(Output::Ask { ask: Ask { id: id.to_string(), input }, request });
    }
}

/// A command as the person would have typed it: the parsed actions when Codex gave them, else
/// the command line.
fn command_text(item: &Value) -> String {
    let actions: Vec<&str> = item
        .get("commandActions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|action| action.get("command").and_then(Value::as_str))
        .collect();
    if actions.is_empty() {
        str_at(item, "/command")
    } else {
        actions.join(" && ")
    }
}

fn params_command(params: &Value) -> String {
    let has_actions = params.get("commandActions").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if has_actions {
        command_text(params)
    } else {
        str_at(params, "/command")
    }
}

/// The voxa tool name and input of a Codex item, for the items that are tool uses.
fn tool_of(item: &Value) -> Option<(String, Value)> {
    match item.get("type").and_then(Value::as_str)? {
        "commandExecution" => {
            Some(("Bash".into(), json!({"command": command_text(item), "cwd": str_at(item, "/cwd")})))
        }
        "fileChange" => Some(("Edit".into(), json!({"changes": strip_diffs(item.get("changes")?)}))),
        "mcpToolCall" => Some((
            format!("{}.{}", str_at(item, "/server"), str_at(item, "/tool")),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        )),
        "webSearch" => Some(("WebSearch".into(), json!({"query": str_at(item, "/query")}))),
        _ => None,
    }
}

/// The changes without their text (the diff carries it).
fn strip_diffs(changes: &Value) -> Value {
    let changes = changes.as_array().into_iter().flatten();
    Value::Array(
        changes.map(|change| json!({"path": change.get("path"), "kind": change.pointer("/kind/type")})).collect(),
    )
}

/// One unified diff of a `fileChange`'s changes: an added file's content as added lines, an
/// update as Codex wrote its diff, a deletion named.
fn change_diff(item: &Value) -> Option<String> {
    let changes = item.get("changes")?.as_array()?;
    let mut diff = String::new();
    for change in changes {
        let path = str_at(change, "/path");
        let text = str_at(change, "/diff");
        match change.pointer("/kind/type").and_then(Value::as_str) {
            Some("add") => diff.push_str(&unified(&path, "", &text)),
            Some("delete") => diff.push_str(&format!("--- a/{path}\n+++ /dev/null\n")),
            _ if text.starts_with("---") || text.starts_with("diff ") => diff.push_str(&text),
            _ => diff.push_str(&format!("--- a/{path}\n+++ b/{path}\n{text}")),
        }
        if !diff.ends_with('\n') {
            diff.push('\n');
        }
    }
    (!diff.is_empty()).then(|| prefix(&diff, MAX_DIFF_LEN).to_owned())
}

fn change_risk(changes: &Value, cwd: &Path) -> Risk {
    let outside = changes.as_array().into_iter().flatten().any(|change| {
        let path = Path::new(change.get("path").and_then(Value::as_str).unwrap_or_default());
        path.is_absolute() && !path.starts_with(cwd)
    });
    if outside {
        Risk::Outside
    } else {
        Risk::Write
    }
}

fn shown(path: &str, cwd: &Path) -> String {
    Path::new(path).strip_prefix(cwd).map_or_else(|_| path.to_owned(), |rel| rel.display().to_string())
}

fn str_at(value: &Value, pointer: &str) -> String {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned()
}

impl Adapter for Codex {
    fn launch(&self, _resume: Option<&str>, _turn: Option<&str>) -> Launch {
        Launch { program: self.program.clone(), args: vec!["app-server".into()], env: Vec::new() }
    }

    fn hello(&mut self, resume: Option<&str>) -> Vec<String> {
        self.thread = None;
        self.turn = None;
        self.turn_open = false;
        self.calls.clear();
        let version = env!("CARGO_PKG_VERSION");
        let mut lines = vec![
            self.request(Call::Initialize, "initialize", json!({"clientInfo": {"name": "voxa", "version": version}})),
            line(&json!({"method": "initialized"})),
        ];
        lines.push(match resume {
            Some(id) => {
                let cwd = self.cwd.display().to_string();
                let params = json!({"threadId": id, "cwd": cwd, "approvalPolicy": APPROVAL_POLICY, "sandbox": SANDBOX});
                self.request(Call::ThreadResume(id.to_owned()), "thread/resume", params)
            }
            None => self.thread_start(),
        });
        lines
    }

    fn ready(&self) -> bool {
        self.thread.is_some()
    }

    fn turn(&mut self, text: &str) -> Vec<String> {
        let Some(thread) = self.thread.clone() else { return Vec::new() };
        self.turn_open = true;
        self.turn = None;
        self.last_message.clear();
        let params = json!({"threadId": thread, "input": [{"type": "text", "text": text}]});
        vec![self.request(Call::TurnStart, "turn/start", params)]
    }

    fn interrupt(&mut self) -> Vec<String> {
        if !self.turn_open {
            return Vec::new();
        }
        self.interrupt_wanted = true;
        self.interrupted = true;
        self.interrupt_line().into_iter().collect()
    }

    fn answer(&mut self, ask: &Ask, answer: &Answer) -> Vec<String> {
        let decision = match answer.decision {
            // "Allow for session" is voxa's grant (it answers the later prompts, and can be
            // revoked): Codex is told `accept` for this one only.
            Decision::Allow | Decision::AllowSession => "accept",
            Decision::Deny => "decline",
        };
        let id: Value = serde_json::from_str(&ask.id).unwrap_or(Value::Null);
        vec![line(&json!({"id": id, "result": {"decision": decision}}))]
    }

    fn on_line(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        // Anything but a JSON object (a warning on stdout) is not the protocol: skipped.
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else { return out };
        match (value.get("method").and_then(Value::as_str), value.get("id")) {
            (Some(method), Some(_)) => self.on_server_request(&value, method, &mut out),
            (Some(method), None) => {
                let params = value.get("params").unwrap_or(&Value::Null);
                self.on_notification(method, params, &mut out);
            }
            (None, Some(_)) => self.on_response(&value, &mut out),
            (None, None) => {}
        }
        out
    }
}

#[cfg(test)]
#[path = "codex_tests.rs"]
mod tests;
