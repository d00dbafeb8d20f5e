//! The session tools of docs/PROTOCOL.md, "Coding-agent sessions" (`agent_start`, `agent_send`, `agent_interrupt`, `agent_stop`,
//! `agent_sessions`, `agent_log`, `brief`): their entries are in the one tool table (`tools::spec`,
//! [`Runs::Sessions`](crate::tools::Runs::Sessions)); the dispatcher runs them here, through
//! [`AgentSessions`].

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{SessionHost, StartRequest};
use crate::protocol::ToolError;
use crate::tools::args::Args;
use crate::tools::{AgentSessions, ToolKind};

/// Events one `agent_log` call returns when it names no `limit`.
pub const DEFAULT_LOG_LIMIT: usize = 200;

impl AgentSessions for SessionHost {
    fn run_tool(&self, kind: ToolKind, args: Value, caller: &str) -> BoxFuture<'static, Result<Value, ToolError>> {
        let host = self.clone();
        let caller = caller.to_owned();
        Box::pin(async move { run(&host, kind, &args, &caller).await })
    }
}

async fn run(host: &SessionHost, kind: ToolKind, args: &Value, caller: &str) -> Result<Value, ToolError> {
    let args = Args::check(kind.spec(), args)?;
    let session = args.str("session").unwrap_or_default();
    match kind {
        ToolKind::AgentStart => {
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
        ToolKind::AgentSend => {
            let queued = host.send(session, args.str("text").unwrap_or_default(), caller).await?;
            Ok(json!({ "queued": queued }))
        }
        ToolKind::AgentInterrupt => host.interrupt(session).await.map(|()| json!({})),
        ToolKind::AgentStop => host.stop(session).await.map(|()| json!({})),
        ToolKind::AgentSessions => Ok(json!({ "sessions": host.sessions()?, "agents": host.agents() })),
        ToolKind::AgentLog => {
            let after = args.u64("after").unwrap_or(0);
            let limit =
                args.u64("limit").map_or(DEFAULT_LOG_LIMIT, |limit| usize::try_from(limit).unwrap_or(usize::MAX));
            let (events, next) = host.log(session, after, limit)?;
            let events: Vec<Value> = events.iter().map(crate::protocol::SessionEvent::to_frame).collect();
            Ok(json!({ "events": events, "next": next }))
        }
        ToolKind::Brief => super::brief::brief(host),
        other => Err(crate::tools::dispatch::unknown_tool(other.name())),
    }
}
