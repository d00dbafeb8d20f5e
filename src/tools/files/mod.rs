//! The file tools: `read_file`, `write_file`, `list_dir` ([`content`]), `move_file`,
//! `delete_file`, `list_trash`, `restore_file` ([`entries`]) and `upload_file` ([`upload`]), every
//! one confined to the workspace. [`FileCall::parse`] reads a call's checked arguments into what
//! the tool needs; [`FileCall::run`] runs it off the async threads.

pub(crate) mod content;
pub(crate) mod entries;
pub(crate) mod upload;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::args::Args;
use super::spec::FileTool;
use super::{plain, ToolOutput, Toolbox};
use crate::protocol::ToolError;
use content::{Encoding, Expected, ReadRequest, WriteRequest};
use upload::UploadRequest;

pub use content::{MAX_DIR_ENTRIES, MAX_WRITE_LEN};
pub use entries::MAX_TRASH_ITEMS;
pub use upload::{MAX_UPLOAD_CHUNK, MAX_UPLOAD_LEN};

/// One call of a file tool, its arguments read.
pub(crate) enum FileCall {
    Read(ReadRequest),
    Write(WriteRequest),
    List { path: Option<String> },
    Move { from: String, to: String },
    Delete { path: String },
    ListTrash,
    Restore { id: String, to: Option<String> },
    Upload(UploadRequest),
}

impl FileCall {
    /// The call of `tool` these checked arguments make.
    pub(crate) fn parse(tool: FileTool, args: &Args<'_>) -> Result<Self, ToolError> {
        let text = |field: &str| args.str(field).unwrap_or_default().to_owned();
        let encoding = args.str("encoding").map(Encoding::parse).transpose()?;
        Ok(match tool {
            FileTool::Read => FileCall::Read(ReadRequest {
                path: text("path"),
                max_bytes: args.u64("max_bytes"),
                offset: args.u64("offset").unwrap_or(0),
                base64: encoding == Some(Encoding::Base64),
            }),
            FileTool::Write => FileCall::Write(WriteRequest {
                path: text("path"),
                content: text("content"),
                create_dirs: args.bool("create_dirs").unwrap_or(false),
                encoding: encoding.unwrap_or(Encoding::Utf8),
                expected: Expected::parse(args.str("version")),
            }),
            FileTool::List => FileCall::List { path: args.str("path").map(str::to_owned) },
            FileTool::Move => FileCall::Move { from: text("from"), to: text("to") },
            FileTool::Delete => FileCall::Delete { path: text("path") },
            FileTool::ListTrash => FileCall::ListTrash,
            FileTool::Restore => FileCall::Restore { id: text("id"), to: args.str("to").map(str::to_owned) },
            FileTool::Upload => FileCall::Upload(UploadRequest {
                path: text("path"),
                data: text("data"),
                offset: args.u64("offset").unwrap_or(0),
                done: args.bool("done").unwrap_or(false),
                expected: Expected::parse(args.str("version")),
            }),
        })
    }

    /// Runs the call in `toolbox`'s workspace. A tool that only reads answers a cancel at once;
    /// one that changes the workspace is never answered early (see [`Toolbox::committing`]).
    pub(crate) async fn run(self, toolbox: &Toolbox, cancel: CancellationToken) -> Result<ToolOutput, ToolError> {
        let read = |value: Result<Value, ToolError>| value.map(plain);
        match self {
            FileCall::Read(request) => read(toolbox.blocking(cancel, move |ws| content::read_file(ws, &request)).await),
            FileCall::List { path } => {
                read(toolbox.blocking(cancel, move |ws| content::list_dir(ws, path.as_deref())).await)
            }
            FileCall::ListTrash => {
                let trash = toolbox.trash()?;
                read(toolbox.blocking(cancel, move |_| trash.list()).await)
            }
            FileCall::Write(request) => {
                toolbox.committing(cancel, move |ws, cancel| content::write_file(ws, &request, cancel)).await
            }
            FileCall::Upload(request) => {
                toolbox.committing(cancel, move |ws, cancel| upload::upload_file(ws, &request, cancel)).await
            }
            FileCall::Move { from, to } => {
                toolbox.committing(cancel, move |ws, _| entries::move_file(ws, &from, &to)).await
            }
            FileCall::Delete { path } => {
                let trash = toolbox.trash()?;
                toolbox.committing(cancel, move |ws, _| trash.delete(ws, &path)).await
            }
            FileCall::Restore { id, to } => {
                let trash = toolbox.trash()?;
                toolbox.committing(cancel, move |ws, _| trash.restore(ws, &id, to.as_deref())).await
            }
        }
    }
}
