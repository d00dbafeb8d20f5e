//! `read_file`, `write_file`, `list_dir`, confined to the workspace.
//!
//! Decisions: a file is returned as text when the bytes read are valid UTF-8
//! (`encoding:"utf-8"`), otherwise as base64 (`encoding:"base64"`); `write_file` takes the same
//! `encoding`. At most `max_bytes` (default and ceiling [`OUTPUT_CAP`]) are ever read. Writes go to
//! a temporary file in the target's directory and are renamed over it, keeping an existing
//! file's permissions. Only regular files are read or written; FIFOs and devices are refused
//! without being opened for blocking.

use std::borrow::Cow;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use base64::Engine as _;
use rustix::fs::{Mode, OFlags};
use serde_json::{json, Value};

use super::workspace::{io_error, Workspace};
use crate::protocol::{ErrorCode, ToolError, OUTPUT_CAP};

/// Largest `write_file` content.
pub const MAX_WRITE_LEN: usize = 16 << 20;
/// Most entries `list_dir` returns; the rest are counted as `truncated`.
pub const MAX_DIR_ENTRIES: usize = 1000;

/// How file content travels in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    Utf8,
    Base64,
}

impl Encoding {
    pub fn parse(text: &str) -> Result<Self, ToolError> {
        match text {
            "utf-8" | "utf8" => Ok(Encoding::Utf8),
            "base64" => Ok(Encoding::Base64),
            other => Err(ToolError::new(
                ErrorCode::InvalidArgs,
                format!("field `encoding` must be \"utf-8\" or \"base64\", not {other:?}"),
            )),
        }
    }
}

/// `read_file {path, max_bytes?}` → `{path, content, size, truncated, encoding}`.
pub(crate) fn read_file(workspace: &Workspace, path: &str, max_bytes: Option<u64>) -> Result<Value, ToolError> {
    let resolved = workspace.resolve(path)?;
    if !resolved.exists {
        return Err(ToolError::new(ErrorCode::NotFound, format!("{path} does not exist")));
    }
    let file = open_regular(&resolved.real, path)?;
    let size = file.metadata().map_err(|err| io_error(path, &err))?.len();
    let limit = max_bytes.unwrap_or(OUTPUT_CAP as u64).min(OUTPUT_CAP as u64);
    // One byte past the limit tells a full read from a truncated one even when the size lies
    // (files that grow, pseudo-files that report 0).
    let mut bytes = Vec::with_capacity(size.min(limit + 1) as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|err| io_error(path, &err))?;
    let truncated = bytes.len() as u64 > limit;
    bytes.truncate(limit as usize);
    let (content, encoding) = encode(bytes, truncated);
    Ok(json!({
        "path": workspace.display(&resolved.real),
        "content": content,
        "size": size,
        "truncated": truncated,
        "encoding": encoding,
    }))
}

/// Text when the bytes are UTF-8 (a character cut by truncation is dropped), else base64.
fn encode(mut bytes: Vec<u8>, truncated: bool) -> (String, &'static str) {
    match std::str::from_utf8(&bytes) {
        Ok(_) => {}
        Err(err) if truncated && err.error_len().is_none() => bytes.truncate(err.valid_up_to()),
        Err(_) => return (base64::engine::general_purpose::STANDARD.encode(&bytes), "base64"),
    }
    match String::from_utf8(bytes) {
        Ok(text) => (text, "utf-8"),
        Err(err) => (base64::engine::general_purpose::STANDARD.encode(err.as_bytes()), "base64"),
    }
}

/// Opens an existing regular file for reading without following a final symlink or blocking on
/// a FIFO.
fn open_regular(real: &Path, shown: &str) -> Result<File, ToolError> {
    let fd =
        rustix::fs::open(real, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
            .map_err(|errno| io_error(shown, &std::io::Error::from(errno)))?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|err| io_error(shown, &err))?;
    if meta.is_dir() {
        return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{shown} is a directory; use list_dir")));
    }
    if !meta.is_file() {
        return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{shown} is not a regular file")));
    }
    Ok(file)
}

/// `write_file {path, content, create_dirs?, encoding?}` → `{path, bytes_written}`.
pub(crate) fn write_file(
    workspace: &Workspace,
    path: &str,
    content: &str,
    encoding: Encoding,
    create_dirs: bool,
) -> Result<Value, ToolError> {
    if content.len() > MAX_WRITE_LEN * 4 / 3 + 4 {
        return Err(too_large(content.len()));
    }
    let bytes: Cow<[u8]> = match encoding {
        Encoding::Utf8 => Cow::Borrowed(content.as_bytes()),
        Encoding::Base64 => Cow::Owned(base64::engine::general_purpose::STANDARD.decode(content).map_err(|err| {
            ToolError::new(ErrorCode::InvalidArgs, format!("field `content` is not valid base64: {err}"))
        })?),
    };
    if bytes.len() > MAX_WRITE_LEN {
        return Err(too_large(bytes.len()));
    }
    let resolved = workspace.resolve(path)?;
    let real = &resolved.real;
    if real.as_path() == workspace.root() {
        return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{path} is the workspace directory")));
    }
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{path} does not name a file")));
    };
    let existing = match std::fs::symlink_metadata(real) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{path} is a directory")));
        }
        Ok(meta) if !meta.is_file() => {
            return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{path} is not a regular file")));
        }
        Ok(meta) => Some(meta.permissions()),
        Err(err) if err.kind() == ErrorKind::NotFound => None,
        Err(err) => return Err(io_error(path, &err)),
    };
    match std::fs::symlink_metadata(parent) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!("{path}: a parent of this path is not a directory"),
            ))
        }
        Err(err) if err.kind() == ErrorKind::NotFound && create_dirs => {
            std::fs::create_dir_all(parent).map_err(|err| io_error(path, &err))?;
        }
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!("the directory for {path} does not exist; set create_dirs to create it"),
            ))
        }
        Err(err) => return Err(io_error(path, &err)),
    }
    let tmp = parent.join(format!(".{}.voxa-{:016x}.tmp", name.to_string_lossy(), rand::random::<u64>()));
    let written = (|| -> std::io::Result<()> {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o666).open(&tmp)?;
        if let Some(permissions) = &existing {
            file.set_permissions(Permissions::from_mode(permissions.mode() & 0o7777))?;
        }
        file.write_all(&bytes)?;
        file.sync_all()?;
        // rename replaces a symlink swapped in meanwhile instead of following it.
        std::fs::rename(&tmp, real)
    })();
    if let Err(err) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(path, &err));
    }
    Ok(json!({ "path": workspace.display(real), "bytes_written": bytes.len() }))
}

fn too_large(len: usize) -> ToolError {
    ToolError::new(
        ErrorCode::TooLarge,
        format!("content is {len} bytes; write_file takes at most {MAX_WRITE_LEN} bytes"),
    )
}

/// `list_dir {path?}` → `{path, entries: [{name, kind, size}], truncated}`, sorted by name.
pub(crate) fn list_dir(workspace: &Workspace, path: Option<&str>) -> Result<Value, ToolError> {
    let shown = path.unwrap_or(".");
    let resolved = workspace.resolve(shown)?;
    if !resolved.exists {
        return Err(ToolError::new(ErrorCode::NotFound, format!("{shown} does not exist")));
    }
    let meta = std::fs::symlink_metadata(&resolved.real).map_err(|err| io_error(shown, &err))?;
    if !meta.is_dir() {
        return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{shown} is not a directory; use read_file")));
    }
    let mut entries = Vec::new();
    let mut truncated = false;
    for entry in std::fs::read_dir(&resolved.real).map_err(|err| io_error(shown, &err))? {
        let entry = entry.map_err(|err| io_error(shown, &err))?;
        if entries.len() == MAX_DIR_ENTRIES {
            truncated = true;
            break;
        }
        let Ok(file_type) = entry.file_type() else { continue };
        let (kind, size) = if file_type.is_symlink() {
            ("symlink", 0)
        } else if file_type.is_dir() {
            ("dir", 0)
        } else if file_type.is_file() {
            ("file", entry.metadata().map(|meta| meta.len()).unwrap_or(0))
        } else {
            ("other", 0)
        };
        entries.push((entry.file_name().to_string_lossy().into_owned(), kind, size));
    }
    entries.sort();
    let entries: Vec<Value> =
        entries.into_iter().map(|(name, kind, size)| json!({ "name": name, "kind": kind, "size": size })).collect();
    Ok(json!({ "path": workspace.display(&resolved.real), "entries": entries, "truncated": truncated }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_text_and_a_cut_character_is_dropped() {
        assert_eq!(encode(b"hello".to_vec(), false), ("hello".into(), "utf-8"));
        let mut cut = "h\u{e9}".as_bytes().to_vec();
        cut.pop();
        assert_eq!(encode(cut.clone(), true), ("h".into(), "utf-8"));
        assert_eq!(encode(cut, false).1, "base64");
        assert_eq!(encode(vec![0xff, 0, 1], false), ("/wAB".into(), "base64"));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mkfifo").arg(tmp.path().join("pipe")).status().unwrap();
        assert!(status.success());
        let workspace = Workspace::new(tmp.path()).unwrap();
        let err = read_file(&workspace, "pipe", None).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgs);
        assert!(err.message.contains("not a regular file"), "{err}");
        let err = write_file(&workspace, "pipe", "x", Encoding::Utf8, false).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgs);
    }

    #[test]
    fn writes_keep_the_mode_of_the_file_they_replace() {
        let tmp = tempfile::tempdir().unwrap();
        let script = tmp.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, Permissions::from_mode(0o750)).unwrap();
        let workspace = Workspace::new(tmp.path()).unwrap();
        write_file(&workspace, "run.sh", "new", Encoding::Utf8, false).unwrap();
        assert_eq!(std::fs::read_to_string(&script).unwrap(), "new");
        assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o750);
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary files left behind");
    }
}
