//! The session tools of SPEC §12 (`agent_start`, `agent_send`, `agent_interrupt`, `agent_stop`,
//! `agent_sessions`, `agent_log`): their table entries and one entry point that runs them.

use serde_json::{json, Value};

use super::{SessionHost, StartRequest};
use crate::protocol::ToolError;
use crate::tools::args::Args;
use crate::tools::{ParamSpec, ParamType, ToolSpec};

/// Events one `agent_log` call returns when it names no `limit`.
pub const DEFAULT_LOG_LIMIT: usize = 200;

const fn param(name: &'static str, kind: ParamType, required: bool, description: &'static str) -> ParamSpec {
    ParamSpec { name, kind, required, description }
}

const SESSION: ParamSpec = param("session", ParamType::String, true, "The session's id, as agent_sessions lists it.");

/// The session tools, in the order they are listed.
pub const SESSION_TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "agent_start",
        description: "Start a coding-agent session (Claude Code by default) working in the workspace, with a first \
                      task. It keeps running after this returns: follow it, answer its questions, send follow-ups.",
        params: &[
            param("prompt", ParamType::String, true, "The first task in full sentences."),
            param("agent", ParamType::String, false, "Which coding agent. Default \"claude\"."),
            param("cwd", ParamType::String, false, "Directory to work in, relative to the workspace."),
            param("title", ParamType::String, false, "A short title for the session list."),
        ],
        changes_machine: true,
    },
    ToolSpec {
        name: "agent_send",
        description: "Send a follow-up to a coding-agent session. It waits behind a running turn; an ended session \
                      is resumed with its context.",
        params: &[SESSION, param("text", ParamType::String, true, "What to tell the agent.")],
        changes_machine: true,
    },
    ToolSpec {
        name: "agent_interrupt",
        description: "Interrupt the running turn of a coding-agent session; the session stays.",
        params: &[SESSION],
        changes_machine: false,
    },
    ToolSpec {
        name: "agent_stop",
        description: "Stop a coding-agent session's process; it stays listed and can be resumed.",
        params: &[SESSION],
        changes_machine: false,
    },
    ToolSpec {
        name: "agent_sessions",
        description: "List the coding-agent sessions: title, agent, state, turns, cost, open approvals.",
        params: &[],
        changes_machine: false,
    },
    ToolSpec {
        name: "agent_log",
        description: "Read a coding-agent session's events after a sequence number.",
        params: &[
            SESSION,
            param("after", ParamType::Integer, false, "Events after this seq. Default 0, from the start."),
            param("limit", ParamType::Integer, false, "At most this many events. Default 200, at most 1000."),
        ],
        changes_machine: false,
    },
];

/// The table entry of a session tool.
pub fn session_tool(name: &str) -> Option<&'static ToolSpec> {
    SESSION_TOOLS.iter().find(|spec| spec.name == name)
}

/// Runs a session tool; `None` when `name` is not one. `caller` is who asked (`phone`, …).
pub async fn call(host: &SessionHost, name: &str, args: &Value, caller: &str) -> Option<Result<Value, ToolError>> {
    let spec = session_tool(name)?;
    Some(run(host, spec, args, caller).await)
}

async fn run(host: &SessionHost, spec: &ToolSpec, args: &Value, caller: &str) -> Result<Value, ToolError> {
    let args = Args::check(spec, args)?;
    let session = args.str("session").unwrap_or_default();
    match spec.name {
        "agent_start" => {
            let request = StartRequest {
                prompt: args.str("prompt").unwrap_or_default().to_owned(),
                agent: args.str("agent").map(str::to_owned),
                cwd: args.str("cwd").map(str::to_owned),
                title: args.str("title").map(str::to_owned),
                by: caller.to_owned(),
            };
            let info = host.start(request).await?;
            Ok(json!({ "session": info.session, "agent": info.agent, "state": info.state }))
        }
        "agent_send" => {
            let queued = host.send(session, args.str("text").unwrap_or_default(), caller).await?;
            Ok(json!({ "queued": queued }))
        }
        "agent_interrupt" => host.interrupt(session).await.map(|()| json!({})),
        "agent_stop" => host.stop(session).await.map(|()| json!({})),
        "agent_sessions" => Ok(json!({ "sessions": host.sessions()? })),
        "agent_log" => {
            let after = args.u64("after").unwrap_or(0);
            let limit =
                args.u64("limit").map_or(DEFAULT_LOG_LIMIT, |limit| usize::try_from(limit).unwrap_or(usize::MAX));
            let (events, next) = host.log(session, after, limit)?;
            let events: Vec<Value> = events.iter().map(super::SessionEvent::to_frame).collect();
            Ok(json!({ "events": events, "next": next }))
        }
        other => {
            Err(ToolError::new(crate::protocol::ErrorCode::Internal, format!("tool {other} has no implementation")))
        }
    }
}
