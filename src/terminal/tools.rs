//! The terminal tools of docs/PROTOCOL.md, "Terminal sessions" (`term_open`, `term_attach`,
//! `term_input`, `term_resize`, `term_close`, `term_list`, `term_screen`): their entries are in the
//! one tool table (`tools::spec`, [`Runs::Terminals`](crate::tools::Runs::Terminals)); the
//! dispatcher runs them here, through [`Terminals`].

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{checked_size, OpenRequest, TerminalHost};
use crate::protocol::{ErrorCode, Frame, ToolError};
use crate::tools::args::Args;
use crate::tools::{Terminals, ToolKind};

/// Most lines above the screen one `term_screen` returns.
pub const MAX_SCREEN_HISTORY: u64 = super::screen::SCREEN_HISTORY as u64;

impl Terminals for TerminalHost {
    fn run_tool(
        &self,
        kind: ToolKind,
        args: Value,
        viewer: Option<mpsc::Sender<Frame>>,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let host = self.clone();
        Box::pin(async move { run(&host, kind, &args, viewer).await })
    }
}

async fn run(
    host: &TerminalHost,
    kind: ToolKind,
    args: &Value,
    viewer: Option<mpsc::Sender<Frame>>,
) -> Result<Value, ToolError> {
    let args = Args::check(kind.spec(), args)?;
    let term = args.str("term").unwrap_or_default();
    let size = || checked_size(args.u64("cols").unwrap_or(0), args.u64("rows").unwrap_or(0));
    match kind {
        ToolKind::TermOpen => {
            let (cols, rows) = size()?;
            let request = OpenRequest {
                cols: cols.into(),
                rows: rows.into(),
                cwd: args.str("cwd").map(str::to_owned),
                command: args.str("command").map(str::to_owned),
            };
            Ok(json!({ "term": host.open(request, viewer).await? }))
        }
        ToolKind::TermAttach => {
            let viewer = viewer.ok_or_else(|| {
                ToolError::new(
                    ErrorCode::InvalidArgs,
                    "only a client's session can watch a terminal; read it with term_screen",
                )
            })?;
            let offset = host.get(term)?.attach(viewer).await;
            Ok(json!({ "term": term, "offset": offset }))
        }
        ToolKind::TermInput => host.get(term)?.type_in(args.str("data").unwrap_or_default()).map(|()| json!({})),
        ToolKind::TermResize => {
            let (cols, rows) = size()?;
            host.get(term)?.resize(cols, rows).await.map(|()| json!({}))
        }
        ToolKind::TermClose => host.close(term).map(|()| json!({})),
        ToolKind::TermList => Ok(json!({ "terminals": host.list() })),
        ToolKind::TermScreen => {
            let lines = args.u64("lines").unwrap_or(0);
            if lines > MAX_SCREEN_HISTORY {
                let message = format!("field `lines` must be at most {MAX_SCREEN_HISTORY}");
                return Err(ToolError::new(ErrorCode::InvalidArgs, message));
            }
            host.get(term)?.screen(lines as usize).await
        }
        other => Err(crate::tools::dispatch::unknown_tool(other.name())),
    }
}
