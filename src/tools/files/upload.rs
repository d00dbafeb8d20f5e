//! `upload_file`: a file sent from the phone in chunks, committed in one atomic step.
//!
//! Decisions: the chunks are appended, in order, to a hidden part file beside the target
//! (`.<name>.voxa-upload`, 0600), so the last step is a rename in one directory, as for
//! `write_file`. Each chunk names the offset it starts at; a chunk that does not start where the
//! part ends is refused with the offset to send from, so a phone that lost its connection resumes
//! instead of starting over. Chunks are at most [`MAX_UPLOAD_CHUNK`] bytes and the whole file at
//! most [`MAX_UPLOAD_LEN`]. The last chunk (`done`) commits under the same `version` rule as
//! `write_file`; refused `conflict`, the part stays, so the phone can finish with the version it
//! chose without sending the bytes again. A part left behind by a phone that never came back is
//! replaced by the next upload to that name.

use std::ffi::OsString;
use std::io::{ErrorKind, Write};

use base64::Engine as _;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::content::{create_private, Expected, Target};
use crate::protocol::{ErrorCode, ToolError};
use crate::tools::beneath;
use crate::tools::workspace::{io_error, Workspace};

/// Largest chunk of an upload, decoded.
pub const MAX_UPLOAD_CHUNK: usize = 1 << 20;
/// Largest file an upload may build.
pub const MAX_UPLOAD_LEN: u64 = 256 << 20;

/// A validated `upload_file` call.
pub(crate) struct UploadRequest {
    pub path: String,
    /// Base64 of this chunk's bytes.
    pub data: String,
    pub offset: u64,
    pub done: bool,
    pub expected: Expected,
}

/// `upload_file {path, data, offset, done?, version?}` → `{path, received, done}`.
pub(crate) fn upload_file(
    workspace: &Workspace,
    request: &UploadRequest,
    cancel: &CancellationToken,
) -> Result<Value, ToolError> {
    let UploadRequest { path, data, offset, done, expected } = request;
    let path = path.as_str();
    if data.len() > MAX_UPLOAD_CHUNK * 4 / 3 + 4 {
        return Err(chunk_too_large(data.len()));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|err| ToolError::new(ErrorCode::InvalidArgs, format!("field `data` is not valid base64: {err}")))?;
    if bytes.len() > MAX_UPLOAD_CHUNK {
        return Err(chunk_too_large(bytes.len()));
    }
    let received = offset.saturating_add(bytes.len() as u64);
    let target = Target::open(workspace, path, false)?;
    let part = OsString::from(format!(".{}.voxa-upload", target.name.to_string_lossy()));
    if received > MAX_UPLOAD_LEN {
        let _ = beneath::remove_file(&target.dir, &part);
        return Err(ToolError::new(
            ErrorCode::TooLarge,
            format!("{path} would be {received} bytes; an upload takes at most {MAX_UPLOAD_LEN}"),
        ));
    }
    if *offset == 0 {
        match beneath::remove_file(&target.dir, &part) {
            Err(err) if err.kind() != ErrorKind::NotFound => return Err(io_error(path, &err)),
            _ => {}
        }
    }
    let mut file = match create_private(&target.dir, &part, *offset == 0) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err(ToolError::new(
                ErrorCode::InvalidArgs,
                format!("no upload of {path} is under way; start it at offset 0"),
            ))
        }
        Err(err) => return Err(io_error(path, &err)),
    };
    let at = file.metadata().map_err(|err| io_error(path, &err))?.len();
    if at != *offset {
        return Err(ToolError::new(
            ErrorCode::InvalidArgs,
            format!("the upload of {path} has {at} bytes; send the chunk at offset {at}"),
        ));
    }
    file.write_all(&bytes).map_err(|err| io_error(path, &err))?;
    if *done {
        match target.commit(file, &part, expected, cancel) {
            Ok(()) => {}
            // The bytes are all here: kept for a finish with the version the user chose.
            Err(err) if err.code == ErrorCode::Conflict => return Err(err),
            Err(err) => {
                let _ = beneath::remove_file(&target.dir, &part);
                return Err(err);
            }
        }
    }
    Ok(json!({ "path": workspace.display(&target.real), "received": received, "done": done }))
}

fn chunk_too_large(len: usize) -> ToolError {
    ToolError::new(
        ErrorCode::TooLarge,
        format!("a chunk of {len} bytes; upload_file takes at most {MAX_UPLOAD_CHUNK} per chunk"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(path: &str, data: &[u8], offset: u64, done: bool, expected: Expected) -> UploadRequest {
        let data = base64::engine::general_purpose::STANDARD.encode(data);
        UploadRequest { path: path.into(), data, offset, done, expected }
    }

    #[test]
    fn chunks_build_the_file_in_order_and_a_gap_is_refused_with_the_offset() {
        let tmp = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(tmp.path(), &[]).unwrap();
        let cancel = CancellationToken::new();
        upload_file(&workspace, &chunk("up.bin", b"hello ", 0, false, Expected::Absent), &cancel).unwrap();
        let gap = upload_file(&workspace, &chunk("up.bin", b"x", 9, false, Expected::Absent), &cancel).unwrap_err();
        assert!(gap.message.contains("offset 6"), "{gap}");
        assert!(!tmp.path().join("up.bin").exists(), "nothing is visible before the last chunk");
        let last = upload_file(&workspace, &chunk("up.bin", b"world", 6, true, Expected::Absent), &cancel).unwrap();
        assert_eq!(last["received"], 11);
        assert_eq!(std::fs::read(tmp.path().join("up.bin")).unwrap(), b"hello world");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1, "the part file is gone");
        // A second upload onto it is a conflict; the part stays and finishes with the version.
        upload_file(&workspace, &chunk("up.bin", b"again", 0, false, Expected::Absent), &cancel).unwrap();
        let refused = upload_file(&workspace, &chunk("up.bin", b"", 5, true, Expected::Absent), &cancel).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Conflict);
        let version = Expected::Version(super::super::content::version_of(b"hello world"));
        upload_file(&workspace, &chunk("up.bin", b"", 5, true, version), &cancel).unwrap();
        assert_eq!(std::fs::read(tmp.path().join("up.bin")).unwrap(), b"again");
    }
}
