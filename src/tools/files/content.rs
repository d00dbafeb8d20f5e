//! `read_file`, `write_file`, `list_dir`, confined to the workspace.
//!
//! Decisions: a file is returned as text when the bytes read are valid UTF-8
//! (`encoding:"utf-8"`), otherwise as base64 (`encoding:"base64"`); `write_file` takes the same
//! `encoding`. At most `max_bytes` (default and ceiling [`OUTPUT_CAP`]) are ever read. Writes go to
//! a temporary file in the target's directory and are renamed over it, keeping an existing
//! file's permissions. Only regular files are read or written; FIFOs and devices are refused
//! without being opened for blocking. Every operation starts from the workspace's directory
//! handle and follows no link (see [`beneath`]).
//!
//! Versions: `read_file` answers the `version` of what it read whole — `sha256:` and the first
//! 32 hex digits of the SHA-256 of the file's bytes. A write or an upload that carries it replaces
//! the file only while it still has that content, else it is refused `conflict` and nothing
//! changes; `"new"` asks for a file that does not exist yet. A content hash, not size and time: a
//! same-size edit within one clock tick is still seen, and saving what is already there is no
//! conflict. The check runs just before the rename that commits, so only a change landing in that
//! instant can slip between.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use base64::Engine as _;
use rustix::fs::{FileType, Mode, OFlags};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::protocol::{ErrorCode, ToolError, OUTPUT_CAP};
use crate::tools::beneath;
use crate::tools::workspace::{io_error, Workspace};

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

/// `version` that asks for a file that does not exist yet.
pub(crate) const NEW_VERSION: &str = "new";

/// The `version` of a file's whole content.
pub(crate) fn version_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(&Sha256::digest(bytes)[..16]))
}

/// A validated `read_file` call.
pub(crate) struct ReadRequest {
    pub path: String,
    pub max_bytes: Option<u64>,
    /// Where to start, for a download in chunks.
    pub offset: u64,
    /// Base64 whatever the bytes are, so chunks never split a character.
    pub base64: bool,
}

/// `read_file {path, max_bytes?, offset?, encoding?}` →
/// `{path, content, size, offset, truncated, encoding, version?}`; `version` when the whole file was read.
pub(crate) fn read_file(workspace: &Workspace, request: &ReadRequest) -> Result<Value, ToolError> {
    let ReadRequest { path, max_bytes, offset, base64 } = request;
    let path = path.as_str();
    let resolved = workspace.resolve(path)?;
    if !resolved.exists {
        return Err(ToolError::new(ErrorCode::NotFound, format!("{path} does not exist")));
    }
    let mut file = open_regular(workspace, resolved.relative(workspace), path)?;
    let size = file.metadata().map_err(|err| io_error(path, &err))?.len();
    if *offset > 0 {
        file.seek(SeekFrom::Start(*offset)).map_err(|err| io_error(path, &err))?;
    }
    let limit = max_bytes.unwrap_or(OUTPUT_CAP as u64).min(OUTPUT_CAP as u64);
    // One byte past the limit tells a full read from a truncated one even when the size lies
    // (files that grow, pseudo-files that report 0).
    let mut bytes = Vec::with_capacity(size.saturating_sub(*offset).min(limit + 1) as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|err| io_error(path, &err))?;
    let truncated = bytes.len() as u64 > limit;
    bytes.truncate(limit as usize);
    let version = (*offset == 0 && !truncated).then(|| version_of(&bytes));
    let (content, encoding) = if *base64 {
        (base64::engine::general_purpose::STANDARD.encode(&bytes), "base64")
    } else {
        encode(bytes, truncated)
    };
    let mut result = json!({
        "path": workspace.display(&resolved.real),
        "content": content,
        "size": size,
        "offset": offset,
        "truncated": truncated,
        "encoding": encoding,
    });
    if let Some(version) = version {
        result["version"] = Value::String(version);
    }
    Ok(result)
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

/// Opens an existing regular file for reading beneath the workspace handle, without following a
/// link or blocking on a FIFO.
fn open_regular(workspace: &Workspace, relative: &Path, shown: &str) -> Result<File, ToolError> {
    let fd = beneath::open(workspace.handle(), relative, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())
        .map_err(|err| io_error(shown, &err))?;
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

/// What a write expects to find before it replaces the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expected {
    /// Whatever is there (no `version` given).
    Anything,
    /// No file yet (`"new"`).
    Absent,
    /// The file with this `version`.
    Version(String),
}

impl Expected {
    pub fn parse(version: Option<&str>) -> Self {
        match version {
            None => Expected::Anything,
            Some(NEW_VERSION) => Expected::Absent,
            Some(version) => Expected::Version(version.to_owned()),
        }
    }
}

/// A validated `write_file` call.
pub(crate) struct WriteRequest {
    pub path: String,
    pub content: String,
    pub encoding: Encoding,
    pub create_dirs: bool,
    pub expected: Expected,
}

/// `write_file {path, content, create_dirs?, encoding?, version?}` → `{path, bytes_written, size, version}`.
///
/// The new content goes to a temporary file created 0600 beside the target (relative to the same
/// directory handle), gets the old file's mode (or the default for new files), and is renamed over
/// the target. `cancel` is looked at once, just before the rename: a cancelled call either wrote
/// nothing or answers that it wrote.
pub(crate) fn write_file(
    workspace: &Workspace,
    request: &WriteRequest,
    cancel: &CancellationToken,
) -> Result<Value, ToolError> {
    let WriteRequest { path, content, encoding, create_dirs, expected } = request;
    let path = path.as_str();
    let bytes = decode_content(content, *encoding)?;
    let target = Target::open(workspace, path, *create_dirs)?;
    let tmp = OsString::from(format!(".{}.voxa-{:016x}.tmp", target.name.to_string_lossy(), rand::random::<u64>()));
    let written = (|| {
        let mut file = create_private(&target.dir, &tmp, true)?;
        file.write_all(&bytes)?;
        Ok(file)
    })();
    let outcome =
        written.map_err(|err| io_error(path, &err)).and_then(|file| target.commit(file, &tmp, expected, cancel));
    if outcome.is_err() {
        let _ = beneath::remove_file(&target.dir, &tmp);
    }
    outcome?;
    Ok(json!({
        "path": workspace.display(&target.real),
        "bytes_written": bytes.len(),
        "size": bytes.len(),
        "version": version_of(&bytes),
    }))
}

/// The file a write or upload replaces: its directory handle, name and real path.
pub(crate) struct Target {
    pub dir: OwnedFd,
    pub name: OsString,
    pub real: std::path::PathBuf,
    /// The path as given, for messages.
    shown: String,
}

impl Target {
    pub fn open(workspace: &Workspace, path: &str, create_dirs: bool) -> Result<Target, ToolError> {
        let resolved = workspace.resolve(path)?;
        let relative = resolved.relative(workspace);
        let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
            return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{path} is the workspace directory")));
        };
        let dir = target_dir(workspace, parent, path, create_dirs)?;
        Ok(Target { name: name.to_owned(), dir, real: resolved.real.clone(), shown: path.to_owned() })
    }

    /// Gives the finished temporary file `tmp` the target's mode and renames it over the target,
    /// if the target is still what `expected` says. `cancel` is looked at once, just before: a
    /// cancelled call either wrote nothing or answers that it wrote. The caller removes `tmp` on error.
    pub fn commit(
        &self,
        file: File,
        tmp: &OsStr,
        expected: &Expected,
        cancel: &CancellationToken,
    ) -> Result<(), ToolError> {
        let path = self.shown.as_str();
        let mode = mode_for(&self.dir, &self.name, path)?;
        // Widened only now that the content is final, and before it takes the target's name.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(|errno| io_error(path, &errno.into()))?;
        file.sync_all().map_err(|err| io_error(path, &err))?;
        drop(file);
        if cancel.is_cancelled() {
            return Err(ToolError::new(ErrorCode::Cancelled, format!("cancelled; {path} was not changed")));
        }
        // Both renames replace a symlink swapped in meanwhile instead of following it.
        match expected {
            Expected::Absent => beneath::rename_new(&self.dir, tmp, &self.dir, &self.name).map_err(|err| {
                if err.kind() == ErrorKind::AlreadyExists {
                    conflict(format!(
                        "{path} already exists on the laptop; read it to compare, or save with its version"
                    ))
                } else {
                    io_error(path, &err)
                }
            }),
            Expected::Version(version) => {
                let current = current_version(&self.dir, &self.name).map_err(|err| io_error(path, &err))?;
                match current {
                    Some(current) if current == *version => {}
                    Some(current) => {
                        return Err(conflict(format!(
                            "{path} changed on the laptop since it was read (now {current}); nothing was saved"
                        )))
                    }
                    None => {
                        return Err(conflict(format!(
                            "{path} was removed on the laptop since it was read; nothing was saved"
                        )))
                    }
                }
                beneath::rename(&self.dir, tmp, &self.name).map_err(|err| io_error(path, &err))
            }
            Expected::Anything => beneath::rename(&self.dir, tmp, &self.name).map_err(|err| io_error(path, &err)),
        }
    }
}

fn conflict(message: String) -> ToolError {
    ToolError::new(ErrorCode::Conflict, message)
}

/// The `version` of `name` in `dir` as it is now; `None` when nothing is there. A file too large
/// to have been read whole gets a version no read handed out.
fn current_version(dir: &OwnedFd, name: &OsStr) -> std::io::Result<Option<String>> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(errno.into()),
    };
    if !file.metadata()?.is_file() {
        return Ok(Some("not-a-file".to_owned()));
    }
    let mut bytes = Vec::new();
    file.take(OUTPUT_CAP as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > OUTPUT_CAP {
        return Ok(Some("too-large-to-compare".to_owned()));
    }
    Ok(Some(version_of(&bytes)))
}

/// A new file `name` in `dir`, 0600 from its first byte, never through a link; `fresh` refuses
/// one that exists, else an existing one is opened for appending.
pub(crate) fn create_private(dir: &OwnedFd, name: &OsStr, fresh: bool) -> std::io::Result<File> {
    let base = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let flags = if fresh { base | OFlags::CREATE | OFlags::EXCL } else { base | OFlags::APPEND };
    Ok(File::from(rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?))
}

/// The bytes to write, within [`MAX_WRITE_LEN`] (checked before and after decoding).
fn decode_content(content: &str, encoding: Encoding) -> Result<Cow<'_, [u8]>, ToolError> {
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
    Ok(bytes)
}

/// The directory the file goes in, opened beneath the workspace (and created with `create_dirs`).
pub(crate) fn target_dir(
    workspace: &Workspace,
    parent: &Path,
    path: &str,
    create_dirs: bool,
) -> Result<OwnedFd, ToolError> {
    match beneath::open_dir(workspace.handle(), parent) {
        Ok(dir) => Ok(dir),
        Err(err) if err.kind() == ErrorKind::NotFound && create_dirs => {
            beneath::create_dirs(workspace.handle(), parent).map_err(|err| io_error(path, &err))
        }
        Err(err) if err.kind() == ErrorKind::NotFound => Err(ToolError::new(
            ErrorCode::NotFound,
            format!("the directory for {path} does not exist; set create_dirs to create it"),
        )),
        Err(err) => Err(io_error(path, &err)),
    }
}

/// The mode the written file gets: the old file's, or the default for a new one. Anything but a
/// regular file in the way is refused.
pub(crate) fn mode_for(dir: &OwnedFd, name: &OsStr, path: &str) -> Result<u32, ToolError> {
    match beneath::stat(dir, name) {
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Err(ToolError::new(ErrorCode::InvalidArgs, format!("{path} is a directory"))),
            FileType::RegularFile => Ok(stat.st_mode & 0o7777),
            _ => Err(ToolError::new(ErrorCode::InvalidArgs, format!("{path} is not a regular file"))),
        },
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(0o666 & !umask()),
        Err(err) => Err(io_error(path, &err)),
    }
}

/// This process's file creation mask, read without changing it (`umask(2)` can only swap it).
fn umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|line| line.starts_with("Umask:"))?;
                u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).ok()
            })
            .unwrap_or(0o022)
    })
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
    let relative = resolved.relative(workspace);
    let fd = beneath::open(workspace.handle(), relative, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())
        .map_err(|err| io_error(shown, &err))?;
    let stat = rustix::fs::fstat(&fd).map_err(|errno| io_error(shown, &errno.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{shown} is not a directory; use read_file")));
    }
    let mut dir = rustix::fs::Dir::read_from(&fd).map_err(|errno| io_error(shown, &errno.into()))?;
    let mut entries = Vec::new();
    let mut truncated = false;
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(|errno| io_error(shown, &errno.into()))?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        if entries.len() == MAX_DIR_ENTRIES {
            truncated = true;
            break;
        }
        // One lstat per entry, relative to the listed directory's handle: kind and size agree.
        let Ok(stat) = beneath::stat(&fd, name) else { continue };
        let (kind, size) = match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => ("symlink", 0),
            FileType::Directory => ("dir", 0),
            FileType::RegularFile => ("file", stat.st_size.max(0) as u64),
            _ => ("other", 0),
        };
        entries.push((name.to_string_lossy().into_owned(), kind, size));
    }
    entries.sort();
    let entries: Vec<Value> =
        entries.into_iter().map(|(name, kind, size)| json!({ "name": name, "kind": kind, "size": size })).collect();
    Ok(json!({ "path": workspace.display(&resolved.real), "entries": entries, "truncated": truncated }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;
    use std::os::unix::fs::PermissionsExt;

    fn write(path: &str, content: &str) -> WriteRequest {
        WriteRequest {
            path: path.into(),
            content: content.into(),
            encoding: Encoding::Utf8,
            create_dirs: false,
            expected: Expected::Anything,
        }
    }

    fn read(path: &str) -> ReadRequest {
        ReadRequest { path: path.into(), max_bytes: None, offset: 0, base64: false }
    }

    #[test]
    fn a_write_with_the_version_read_replaces_and_one_with_an_old_version_is_a_conflict() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "one").unwrap();
        let workspace = Workspace::new(tmp.path(), &[]).unwrap();
        let cancel = CancellationToken::new();
        let version = read_file(&workspace, &read("notes.txt")).unwrap()["version"].as_str().unwrap().to_owned();
        let with = |content: &str, expected: Expected| WriteRequest { expected, ..write("notes.txt", content) };
        let saved = write_file(&workspace, &with("two", Expected::Version(version.clone())), &cancel).unwrap();
        assert_eq!(saved["size"], 3);
        assert_eq!(saved["version"], read_file(&workspace, &read("notes.txt")).unwrap()["version"]);
        let stale = write_file(&workspace, &with("three", Expected::Version(version)), &cancel).unwrap_err();
        assert_eq!(stale.code, ErrorCode::Conflict);
        assert_eq!(
            write_file(&workspace, &with("x", Expected::Absent), &cancel).unwrap_err().code,
            ErrorCode::Conflict
        );
        assert_eq!(std::fs::read_to_string(tmp.path().join("notes.txt")).unwrap(), "two");
        write_file(&workspace, &WriteRequest { expected: Expected::Absent, ..write("new.txt", "n") }, &cancel).unwrap();
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2, "no temporary file left behind");
        // A part of a file comes with its offset and no version; base64 on request.
        let part = ReadRequest { offset: 1, max_bytes: Some(1), base64: true, ..read("notes.txt") };
        let part = read_file(&workspace, &part).unwrap();
        assert_eq!((part["content"].as_str(), part["truncated"].as_bool()), (Some("dw=="), Some(true)));
        assert!(part.get("version").is_none());
    }

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
        let workspace = Workspace::new(tmp.path(), &[]).unwrap();
        let err = read_file(&workspace, &read("pipe")).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgs);
        assert!(err.message.contains("not a regular file"), "{err}");
        let err = write_file(&workspace, &write("pipe", "x"), &CancellationToken::new()).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgs);
    }

    #[test]
    fn writes_keep_the_mode_of_the_file_they_replace() {
        let tmp = tempfile::tempdir().unwrap();
        let script = tmp.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, Permissions::from_mode(0o750)).unwrap();
        let workspace = Workspace::new(tmp.path(), &[]).unwrap();
        write_file(&workspace, &write("run.sh", "new"), &CancellationToken::new()).unwrap();
        assert_eq!(std::fs::read_to_string(&script).unwrap(), "new");
        assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o750);
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary files left behind");
    }
}
