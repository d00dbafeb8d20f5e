//! `voxa agent start|send|log|list|interrupt|stop`: the running agent's coding-agent sessions over
//! its loopback socket (the session tools and `follow` of docs/PROTOCOL.md, "Coding-agent
//! sessions"). `start` and `send` follow the turn until it ends and exit by how it ended;
//! `--json` prints the tool's result, then each `agent_event` frame, one JSON object a line.

use std::collections::VecDeque;
use std::io::Write;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio_tungstenite::tungstenite::Message;

use super::call::connect_local;
use super::Settings;
use crate::cli::AgentAction;
use crate::error::{Exit, Refused};
use crate::net::client;
use crate::net::dial::ClientSocket;
use crate::protocol::{AgentMessage, ClientMessage, ToolCall, ToolResult};

/// Events held while a tool's result is awaited; a flood past it is an error, not memory.
const MAX_HELD: usize = 65_536;
/// Events one `agent_log` page asks for.
const LOG_PAGE: u64 = 500;
/// Lines of a tool's output printed under it.
const OUTPUT_LINES: usize = 8;
/// A mark past every seq: a session named with it in `follow` sends nothing.
const PAST_THE_END: u64 = u64::MAX;

/// Runs one `voxa agent` action.
pub async fn run_agent_command(settings: &Settings, action: AgentAction) -> Result<Exit> {
    let (socket, _) = connect_local(&settings.home).await?;
    let mut link = Link { socket, calls: 0, held: VecDeque::new() };
    let mut out = Printer { json: settings.printer.is_json(), partial: false };
    let exit = match action {
        AgentAction::Start { prompt, agent, cwd, title, detach } => {
            // Following before the start: the new session's events are all seen, from seq 1.
            let marks = link.marks_of_all(None).await?;
            if !detach {
                link.follow(&marks).await?;
            }
            let mut args = json!({ "prompt": prompt });
            for (key, value) in [("agent", agent), ("cwd", cwd), ("title", title)] {
                if let Some(value) = value {
                    args[key] = Value::String(value);
                }
            }
            let result = link.call("agent_start", args).await?;
            let Some(body) = out.result(&result) else { return Ok(refusal_exit(&result)) };
            let session = body["session"].as_str().unwrap_or_default().to_owned();
            out.human(&format!("session {session} ({})\n", body["agent"].as_str().unwrap_or("agent")));
            if detach {
                Exit::Ok
            } else {
                link.follow_turn(&session, &prompt, false, &mut out).await?
            }
        }
        AgentAction::Send { session, text, detach } => {
            if !detach {
                let marks = link.marks_of_all(Some(&session)).await?;
                link.follow(&marks).await?;
            }
            let result = link.call("agent_send", json!({ "session": session, "text": text })).await?;
            let Some(body) = out.result(&result) else { return Ok(refusal_exit(&result)) };
            let queued = body["queued"].as_bool() == Some(true);
            if queued {
                out.human("(queued behind the running turn)\n");
            }
            if detach {
                Exit::Ok
            } else {
                link.follow_turn(&session, &text, queued, &mut out).await?
            }
        }
        AgentAction::Log { session, after, follow } => {
            let mut next = after;
            loop {
                let args = json!({ "session": session, "after": next, "limit": LOG_PAGE });
                let result = link.call("agent_log", args).await?;
                let Some(body) = out.quiet_result(&result) else { return Ok(refusal_exit(&result)) };
                let events = body["events"].as_array().cloned().unwrap_or_default();
                for event in &events {
                    out.event(event)?;
                }
                match body["next"].as_u64() {
                    Some(moved) if moved > next && !events.is_empty() => next = moved,
                    _ => break,
                }
            }
            if follow {
                let mut marks = link.marks_of_all(Some(&session)).await?;
                marks.insert(session.clone(), Value::from(next));
                link.follow(&marks).await?;
                while let Some(frame) = link.next_event().await? {
                    if frame["session"] == session.as_str() {
                        out.event(&frame)?;
                    }
                }
            }
            Exit::Ok
        }
        AgentAction::List => {
            let result = link.call("agent_sessions", json!({})).await?;
            let Some(body) = out.quiet_result(&result) else { return Ok(refusal_exit(&result)) };
            if out.json {
                println!("{body}");
            } else {
                print!("{}", list_lines(&body, now_ms()));
            }
            Exit::Ok
        }
        AgentAction::Interrupt { session } => link.act(&mut out, "agent_interrupt", &session, "interrupted").await?,
        AgentAction::Stop { session } => link.act(&mut out, "agent_stop", &session, "stopped").await?,
    };
    let _ = link.socket.close(None).await;
    Ok(exit)
}

/// The exit status of a failed session tool: refused (4) or failed (3).
fn refusal_exit(result: &ToolResult) -> Exit {
    match &result.error {
        Some(error) if error.code.is_refusal() => Exit::Refused,
        _ => Exit::ToolFailed,
    }
}

/// The loopback connection: tool calls, and the `agent_event`s that arrive meanwhile.
struct Link {
    socket: ClientSocket,
    calls: u64,
    held: VecDeque<Value>,
}

impl Link {
    /// One tool call; its result. Events that arrive before it are held for [`Link::next_event`].
    async fn call(&mut self, tool: &str, args: Value) -> Result<ToolResult> {
        self.calls += 1;
        let id = format!("{}-{}", super::call::call_id("agent")?, self.calls);
        let call = ToolCall { id: id.clone(), name: tool.into(), args, env: None, caller: None };
        self.send(ClientMessage::ToolCall(call).to_json()).await?;
        loop {
            match self.frame().await? {
                Incoming::Event(event) => {
                    if self.held.len() >= MAX_HELD {
                        bail!("the agent sent more than {MAX_HELD} events while a call was answered");
                    }
                    self.held.push_back(event);
                }
                Incoming::Result(result) if result.id == id => return Ok(result),
                Incoming::Result(_) | Incoming::Other => {}
                Incoming::Closed => bail!("the agent closed the connection before the result"),
            }
        }
    }

    /// The next `agent_event` frame; `None` once the agent closed the connection.
    async fn next_event(&mut self) -> Result<Option<Value>> {
        if let Some(event) = self.held.pop_front() {
            return Ok(Some(event));
        }
        loop {
            match self.frame().await? {
                Incoming::Event(event) => return Ok(Some(event)),
                Incoming::Closed => return Ok(None),
                Incoming::Result(_) | Incoming::Other => {}
            }
        }
    }

    async fn frame(&mut self) -> Result<Incoming> {
        let Some(frame) = self.socket.next().await else { return Ok(Incoming::Closed) };
        let text = match frame.context("agent connection failed")? {
            Message::Text(text) => text,
            Message::Close(frame) => return Err(client::close_error(frame)),
            _ => return Ok(Incoming::Other),
        };
        if text.contains("\"agent_event\"") {
            if let Ok(value) = serde_json::from_str::<Value>(&text) {
                if value["type"] == "agent_event" {
                    return Ok(Incoming::Event(value));
                }
            }
        }
        Ok(match serde_json::from_str::<AgentMessage>(&text) {
            Ok(AgentMessage::ToolResult(result)) => Incoming::Result(result),
            Ok(AgentMessage::Error { code, message }) => {
                return Err(Refused { code, message: message.unwrap_or_default() }.into())
            }
            _ => Incoming::Other,
        })
    }

    async fn send(&mut self, text: String) -> Result<()> {
        self.socket.send(Message::text(text)).await.context("could not send to the agent")
    }

    /// `follow` marks for every listed session: past its end, or (for `mine`) its last seq, so
    /// the agent sends only what comes next.
    async fn marks_of_all(&mut self, mine: Option<&str>) -> Result<Map<String, Value>> {
        let result = self.call("agent_sessions", json!({})).await?;
        if let Some(error) = &result.error {
            return Err(anyhow!("could not list the sessions: {} ({})", error.message, error.code));
        }
        let listed = result.result.as_ref().and_then(|body| body["sessions"].as_array().cloned()).unwrap_or_default();
        let mut marks = Map::new();
        for session in listed {
            let Some(id) = session["session"].as_str() else { continue };
            let mark = if Some(id) == mine { session["last_seq"].as_u64().unwrap_or(0) } else { PAST_THE_END };
            marks.insert(id.to_owned(), Value::from(mark));
        }
        Ok(marks)
    }

    async fn follow(&mut self, marks: &Map<String, Value>) -> Result<()> {
        self.send(ClientMessage::follow_after(marks.clone()).to_json()).await
    }

    /// Prints `session`'s events until the turn of `text` ends; the exit status says how it did.
    /// A queued turn starts after the running one: its end is the first after its `user` event.
    async fn follow_turn(&mut self, session: &str, text: &str, queued: bool, out: &mut Printer) -> Result<Exit> {
        let mut ours = !queued;
        while let Some(frame) = self.next_event().await? {
            if frame["session"] != session {
                continue;
            }
            out.event(&frame)?;
            let event = &frame["event"];
            match event["kind"].as_str() {
                Some("user") if event["text"] == text => ours = true,
                Some("turn_end") if ours => {
                    return Ok(if event["ok"] == true { Exit::Ok } else { Exit::CommandFailed });
                }
                Some("state") if matches!(event["state"].as_str(), Some("failed" | "ended")) => {
                    return Ok(Exit::ToolFailed);
                }
                _ => {}
            }
        }
        bail!("the agent closed the connection before the turn ended")
    }

    /// `agent_interrupt` or `agent_stop` on `session`.
    async fn act(&mut self, out: &mut Printer, tool: &str, session: &str, done: &str) -> Result<Exit> {
        let result = self.call(tool, json!({ "session": session })).await?;
        if out.result(&result).is_none() {
            return Ok(refusal_exit(&result));
        }
        out.human(&format!("{session} {done}\n"));
        Ok(Exit::Ok)
    }
}

enum Incoming {
    Event(Value),
    Result(ToolResult),
    Other,
    Closed,
}

/// Human lines, or JSON lines with `--json`.
struct Printer {
    json: bool,
    /// Partial text was printed and its line is not ended yet.
    partial: bool,
}

impl Printer {
    /// Prints the tool's result (`--json`) or its error; the result's body when it succeeded.
    fn result(&mut self, result: &ToolResult) -> Option<Value> {
        if self.json {
            println!("{}", serde_json::to_value(result).unwrap_or(Value::Null));
            return result.error.is_none().then(|| result.result.clone().unwrap_or(Value::Null));
        }
        self.quiet_result(result)
    }

    /// The result's body when it succeeded; else its error (as JSON with `--json`, else on stderr).
    fn quiet_result(&self, result: &ToolResult) -> Option<Value> {
        let Some(error) = &result.error else { return Some(result.result.clone().unwrap_or(Value::Null)) };
        if self.json {
            println!("{}", serde_json::to_value(result).unwrap_or(Value::Null));
        } else {
            eprintln!("voxa: {} ({})", error.message, error.code);
        }
        None
    }

    fn human(&mut self, text: &str) {
        if !self.json {
            print!("{text}");
        }
    }

    /// One `agent_event` frame: as it came (`--json`), or as lines a person reads.
    fn event(&mut self, frame: &Value) -> Result<()> {
        let mut stdout = std::io::stdout().lock();
        if self.json {
            writeln!(stdout, "{frame}")?;
            return Ok(stdout.flush()?);
        }
        let event = &frame["event"];
        let kind = event["kind"].as_str().unwrap_or_default();
        if kind == "text" && event["partial"] == true {
            self.partial = true;
            write!(stdout, "{}", plain(&event["text"]))?;
            return Ok(stdout.flush()?);
        }
        // A whole text after its pieces was printed already.
        let ended_partial = std::mem::take(&mut self.partial);
        if ended_partial && kind != "text" {
            writeln!(stdout)?;
        }
        write!(stdout, "{}", human_event(event, ended_partial))?;
        Ok(stdout.flush()?)
    }
}

/// A string field for a terminal: control characters (escape sequences) shown, not obeyed.
fn plain(value: &Value) -> String {
    let text = value.as_str().unwrap_or_default();
    text.chars().map(|c| if c.is_control() && c != '\n' && c != '\t' { '\u{FFFD}' } else { c }).collect()
}

/// The lines of one event, each ended.
fn human_event(event: &Value, streamed: bool) -> String {
    let field = |name: &str| plain(&event[name]);
    match event["kind"].as_str().unwrap_or_default() {
        "state" => match event["state"].as_str() {
            Some(state @ ("waiting" | "ended" | "failed")) => format!("[{state}]\n"),
            _ => String::new(),
        },
        "user" => field("text").lines().map(|line| format!("> {line}\n")).collect(),
        "text" if streamed => "\n".into(),
        "text" => format!("{}\n", field("text")),
        "tool_use" => {
            let mut lines = format!("• {}: {}\n", field("name"), field("summary"));
            if let Some(diff) = event["diff"].as_str() {
                lines.push_str(&plain(&Value::from(diff)));
                if !diff.ends_with('\n') {
                    lines.push('\n');
                }
            }
            lines
        }
        "tool_result" => {
            let output = field("output");
            let mark = if event["ok"] == true { "  ok" } else { "  failed" };
            let mut lines = format!("{mark}\n");
            for line in output.lines().take(OUTPUT_LINES) {
                lines.push_str(&format!("  | {line}\n"));
            }
            if output.lines().count() > OUTPUT_LINES {
                lines.push_str("  | …\n");
            }
            lines
        }
        "approval" => format!(
            "? {} ({}) waits for you: voxa approve {} allow|deny\n",
            field("summary"),
            field("risk"),
            field("approval")
        ),
        "approval_resolved" => format!("  {} ({})\n", field("decision"), field("by")),
        "turn_end" => {
            let outcome = match (event["ok"] == true, event["interrupted"] == true) {
                (true, _) => "done",
                (false, true) => "interrupted",
                (false, false) => "failed",
            };
            let mut facts = vec![outcome.to_owned()];
            if let Some(ms) = event["duration_ms"].as_u64() {
                facts.push(format!("{:.1} s", ms as f64 / 1000.0));
            }
            if let Some(cost) = event["cost_usd"].as_f64() {
                facts.push(format!("${cost:.4}"));
            }
            let result = field("result");
            let said = if event["ok"] != true && !result.is_empty() { format!(": {result}") } else { String::new() };
            format!("— {}{said}\n", facts.join(", "))
        }
        "error" => format!("! {} ({})\n", field("message"), field("code")),
        _ => String::new(),
    }
}

/// `voxa agent list` lines: id, agent, state, turns, cost, last activity, approvals, title.
fn list_lines(body: &Value, now: u64) -> String {
    let sessions = body["sessions"].as_array().cloned().unwrap_or_default();
    if sessions.is_empty() {
        return "no sessions yet: start one with `voxa agent start PROMPT`\n".into();
    }
    let mut sorted = sessions;
    sorted.sort_by_key(|s| std::cmp::Reverse(s["last_event_at"].as_u64().unwrap_or(0)));
    sorted
        .iter()
        .map(|s| {
            let ago = now.saturating_sub(s["last_event_at"].as_u64().unwrap_or(now)) / 1000;
            let ago = match ago {
                0..60 => format!("{ago}s ago"),
                60..3600 => format!("{}m ago", ago / 60),
                3600..86400 => format!("{}h ago", ago / 3600),
                _ => format!("{}d ago", ago / 86400),
            };
            let cost = s["cost_usd"].as_f64().map(|c| format!("${c:.4}")).unwrap_or_else(|| "-".into());
            let pending = match s["pending"].as_u64().unwrap_or(0) {
                0 => String::new(),
                n => format!("  ({n} waiting)"),
            };
            format!(
                "{}  {:<8} {:<8} {:>3} turns  {:>9}  {:>8}  {}{pending}\n",
                plain(&s["session"]),
                plain(&s["agent"]),
                plain(&s["state"]),
                s["turns"].as_u64().unwrap_or(0),
                cost,
                ago,
                plain(&s["title"])
            )
        })
        .collect()
}

fn now_ms() -> u64 {
    crate::approvals::unix_ms(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_lines_and_escape_sequences_are_not_obeyed() {
        let tool = json!({"kind":"tool_use","name":"Bash","summary":"ls\u{1b}[2J","input":{}});
        assert_eq!(human_event(&tool, false), "• Bash: ls\u{FFFD}[2J\n");
        let end = json!({"kind":"turn_end","ok":false,"result":"interrupted","duration_ms":1500,"cost_usd":0.01});
        assert_eq!(human_event(&end, false), "— failed, 1.5 s, $0.0100: interrupted\n");
        assert_eq!(human_event(&json!({"kind":"user","text":"a\nb"}), false), "> a\n> b\n");
        assert_eq!(human_event(&json!({"kind":"text","text":"whole","partial":false}), true), "\n");
        assert_eq!(human_event(&json!({"kind":"state","state":"working"}), false), "");
        let output = (0..20).map(|n| n.to_string()).collect::<Vec<_>>().join("\n");
        let result = human_event(&json!({"kind":"tool_result","ok":true,"output":output}), false);
        assert_eq!(result.lines().count(), 1 + OUTPUT_LINES + 1, "{result}");
    }

    #[test]
    fn the_list_is_most_recent_first() {
        let body = json!({"sessions":[
            {"session":"s-old","agent":"claude","state":"ended","turns":1,"last_event_at":1_000,"title":"old"},
            {"session":"s-new","agent":"claude","state":"waiting","turns":2,"cost_usd":0.5,"last_event_at":61_000,
             "pending":1,"title":"new"},
        ]});
        let lines = list_lines(&body, 121_000);
        let lines: Vec<&str> = lines.lines().collect();
        assert!(lines[0].starts_with("s-new") && lines[0].contains("1m ago") && lines[0].ends_with("new  (1 waiting)"));
        assert!(lines[1].starts_with("s-old") && lines[1].contains("2m ago"), "{lines:?}");
        assert!(list_lines(&json!({"sessions":[]}), 0).contains("voxa agent start"));
    }
}
