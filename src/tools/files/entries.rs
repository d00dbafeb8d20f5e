//! `move_file`, `delete_file`, `list_trash`, `restore_file`: whole entries of the workspace.
//!
//! Decisions:
//! - These act on the entry a path names, never on what a symlink there points at: a link is
//!   moved or deleted as a link ([`Workspace::resolve_entry`]). Both ends stay inside the fence.
//! - Nothing is ever replaced: a move or restore onto a name that exists is refused `conflict`.
//! - Deleting moves the entry into the trash in voxa's home (`trash/<id>/item`, beside an
//!   `entry.json` saying where it came from), out of every tool's reach but `restore_file`. The
//!   trash keeps the newest [`MAX_TRASH_ITEMS`]; older ones are removed for good. A home on
//!   another filesystem than the workspace takes files by copy, folders not at all (refused
//!   `unavailable`, nothing deleted).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{ErrorKind, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rustix::fs::{FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::content::create_private;
use crate::protocol::{ErrorCode, ToolError};
use crate::tools::beneath;
use crate::tools::workspace::{io_error, Resolved, Workspace};

/// Entries the trash keeps; deleting one more removes the oldest for good.
pub const MAX_TRASH_ITEMS: usize = 100;
/// Name of the moved entry inside its trash folder.
const ITEM: &str = "item";
/// Name of the record beside it.
const RECORD: &str = "entry.json";
/// Largest record read back.
const MAX_RECORD_LEN: u64 = 16 << 10;

/// Where a trashed entry came from.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    /// Path relative to the workspace, as shown to callers.
    path: String,
    kind: String,
    size: u64,
    deleted_ms: u64,
}

/// The parent directory handle and name of an entry, for the `*at` calls.
struct Entry {
    dir: OwnedFd,
    name: std::ffi::OsString,
    shown: String,
}

impl Entry {
    fn open(workspace: &Workspace, resolved: &Resolved, shown: &str) -> Result<Entry, ToolError> {
        let (Some(parent), Some(name)) = (resolved.real.parent(), resolved.real.file_name()) else {
            return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{shown} names no entry")));
        };
        let relative = parent.strip_prefix(workspace.root()).unwrap_or(Path::new(""));
        let dir = beneath::open_dir(workspace.handle(), relative).map_err(|err| io_error(shown, &err))?;
        Ok(Entry { dir, name: name.to_owned(), shown: shown.to_owned() })
    }

    /// `(kind, size)` of the entry, without following a link.
    fn kind(&self) -> Result<(&'static str, u64), ToolError> {
        let stat = beneath::stat(&self.dir, &self.name).map_err(|err| io_error(&self.shown, &err))?;
        Ok(match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => ("symlink", 0),
            FileType::Directory => ("dir", 0),
            FileType::RegularFile => ("file", stat.st_size.max(0) as u64),
            _ => ("other", 0),
        })
    }
}

fn existing(workspace: &Workspace, path: &str) -> Result<Resolved, ToolError> {
    let resolved = workspace.resolve_entry(path)?;
    if !resolved.exists {
        return Err(ToolError::new(ErrorCode::NotFound, format!("{path} does not exist")));
    }
    Ok(resolved)
}

fn taken(path: &str) -> ToolError {
    ToolError::new(ErrorCode::Conflict, format!("{path} already exists; nothing was replaced"))
}

/// `move_file {from, to}` → `{from, to}`: renames a file or folder inside the workspace.
pub(crate) fn move_file(workspace: &Workspace, from: &str, to: &str) -> Result<Value, ToolError> {
    let source = existing(workspace, from)?;
    let target = workspace.resolve_entry(to)?;
    if target.exists {
        return Err(taken(to));
    }
    if target.real.starts_with(&source.real) {
        return Err(ToolError::new(ErrorCode::InvalidArgs, format!("{to} is inside {from}")));
    }
    let (source_entry, target_entry) = (Entry::open(workspace, &source, from)?, Entry::open(workspace, &target, to)?);
    beneath::rename_new(&source_entry.dir, &source_entry.name, &target_entry.dir, &target_entry.name).map_err(
        |err| match err.kind() {
            ErrorKind::AlreadyExists => taken(to),
            _ => io_error(from, &err),
        },
    )?;
    Ok(json!({ "from": workspace.display(&source.real), "to": workspace.display(&target.real) }))
}

/// The trash in voxa's home.
#[derive(Clone, Debug)]
pub(crate) struct Trash {
    dir: PathBuf,
}

impl Trash {
    pub fn new(dir: PathBuf) -> Self {
        Trash { dir }
    }

    fn ensure(&self) -> anyhow::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("could not create the trash {}", self.dir.display()))
    }

    /// `delete_file {path}` → `{path, trash, kind}`: moves the entry into the trash.
    pub fn delete(&self, workspace: &Workspace, path: &str) -> Result<Value, ToolError> {
        let resolved = existing(workspace, path)?;
        let entry = Entry::open(workspace, &resolved, path)?;
        let (kind, size) = entry.kind()?;
        self.ensure().map_err(internal)?;
        let id = format!("{:013}-{:08x}", delete_stamp(), rand::random::<u32>());
        let folder = self.dir.join(&id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&folder)
            .map_err(|err| internal(anyhow::anyhow!("could not use the trash: {err}")))?;
        let record =
            Record { path: workspace.display(&resolved.real), kind: kind.to_owned(), size, deleted_ms: now_ms() };
        let moved = (|| {
            let holder = open_own(&folder)?;
            create_private(&holder, OsStr::new(RECORD), true)?.write_all(&serde_json::to_vec(&record)?)?;
            move_across(&entry.dir, &entry.name, &holder, OsStr::new(ITEM), kind)
        })();
        if let Err(err) = moved {
            let _ = std::fs::remove_dir_all(&folder);
            return Err(match err.downcast::<std::io::Error>() {
                Ok(err) if err.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => ToolError::new(
                    ErrorCode::Unavailable,
                    format!("{path} is a folder on another disk than voxa's trash; nothing was deleted"),
                ),
                Ok(err) => io_error(path, &err),
                Err(err) => internal(err),
            });
        }
        self.prune();
        Ok(json!({ "path": record.path, "trash": id, "kind": kind }))
    }

    /// `list_trash {}` → `{items: [{id, path, kind, size, deleted_ms}]}`, newest first.
    pub fn list(&self) -> Result<Value, ToolError> {
        let items: Vec<Value> = self
            .ids()
            .into_iter()
            .rev()
            .filter_map(|id| {
                let record = self.record(&id).ok()?;
                Some(json!({
                    "id": id, "path": record.path, "kind": record.kind, "size": record.size, "deleted_ms": record.deleted_ms,
                }))
            })
            .collect();
        Ok(json!({ "items": items }))
    }

    /// `restore_file {id, to?}` → `{path}`: puts a trashed entry back where it was, or at `to`.
    pub fn restore(&self, workspace: &Workspace, id: &str, to: Option<&str>) -> Result<Value, ToolError> {
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Err(ToolError::new(ErrorCode::InvalidArgs, "field `id` is not a trash id (list_trash lists them)"));
        }
        let record = self
            .record(id)
            .map_err(|_| ToolError::new(ErrorCode::NotFound, format!("nothing in the trash has the id {id}")))?;
        let path = to.unwrap_or(&record.path);
        let target = workspace.resolve_entry(path)?;
        if target.exists {
            return Err(taken(path));
        }
        let entry = Entry::open(workspace, &target, path).map_err(|err| match err.code {
            ErrorCode::NotFound => ToolError::new(
                ErrorCode::NotFound,
                format!("the folder {path} was in is gone; restore it first or choose another place"),
            ),
            _ => err,
        })?;
        let folder = self.dir.join(id);
        let moved = open_own(&folder)
            .map_err(anyhow::Error::from)
            .and_then(|holder| move_across(&holder, OsStr::new(ITEM), &entry.dir, &entry.name, &record.kind));
        match moved.map_err(|err| err.downcast::<std::io::Error>()) {
            Ok(()) => {}
            Err(Ok(err)) if err.kind() == ErrorKind::AlreadyExists => return Err(taken(path)),
            Err(Ok(err)) => return Err(io_error(path, &err)),
            Err(Err(err)) => return Err(internal(err)),
        }
        let _ = std::fs::remove_dir_all(&folder);
        Ok(json!({ "path": workspace.display(&target.real), "kind": record.kind }))
    }

    /// The ids in the trash, oldest first (they start with the time of the delete).
    fn ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut ids: Vec<String> = entries.filter_map(|entry| entry.ok()?.file_name().into_string().ok()).collect();
        ids.sort();
        ids
    }

    fn record(&self, id: &str) -> anyhow::Result<Record> {
        use std::io::Read as _;
        let mut text = Vec::new();
        File::open(self.dir.join(id).join(RECORD))?.take(MAX_RECORD_LEN).read_to_end(&mut text)?;
        Ok(serde_json::from_slice(&text)?)
    }

    /// Removes the oldest entries beyond [`MAX_TRASH_ITEMS`] for good.
    fn prune(&self) {
        let ids = self.ids();
        for id in ids.iter().take(ids.len().saturating_sub(MAX_TRASH_ITEMS)) {
            if let Err(err) = std::fs::remove_dir_all(self.dir.join(id)) {
                tracing::warn!(%err, "could not empty an old trash entry");
            }
        }
    }
}

/// A handle on one of voxa's own directories.
fn open_own(dir: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

/// Moves `from_name` in `from` to the new name `to_name` in `to`; a regular file on another
/// filesystem is copied (mode kept) and then removed.
fn move_across(from: &OwnedFd, from_name: &OsStr, to: &OwnedFd, to_name: &OsStr, kind: &str) -> anyhow::Result<()> {
    match beneath::rename_new(from, from_name, to, to_name) {
        Err(err) if err.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) && kind == "file" => {}
        other => return Ok(other?),
    }
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut source = File::from(rustix::fs::openat(from, from_name, flags, Mode::empty())?);
    let mode = source.metadata().map(|meta| std::os::unix::fs::PermissionsExt::mode(&meta.permissions()))?;
    let mut copy = create_private(to, to_name, true)?;
    let copied = std::io::copy(&mut source, &mut copy)
        .and_then(|_| Ok(rustix::fs::fchmod(&copy, Mode::from_raw_mode(mode & 0o7777))?))
        .and_then(|()| copy.sync_all());
    if let Err(err) = copied {
        let _ = beneath::remove_file(to, to_name);
        return Err(err.into());
    }
    beneath::remove_file(from, from_name)?;
    Ok(())
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn internal(err: anyhow::Error) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("{err:#}"))
}

/// The time of a delete in milliseconds, later than every earlier one of this process, so ids
/// sort in the order of their deletes even when two fall in one millisecond.
fn delete_stamp() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = now_ms();
    let previous = LAST.fetch_max(now, Ordering::AcqRel);
    if previous < now {
        return now;
    }
    LAST.fetch_add(1, Ordering::AcqRel) + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_deleted_entry_is_listed_and_restored_and_a_link_is_deleted_not_its_target() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("dir")).unwrap();
        std::fs::write(ws.join("dir/a.txt"), "a").unwrap();
        std::fs::write(tmp.path().join("outside"), "keep").unwrap();
        symlink(tmp.path().join("outside"), ws.join("link")).unwrap();
        let workspace = Workspace::new(&ws, &[tmp.path().join("home")]).unwrap();
        let trash = Trash::new(tmp.path().join("home/trash"));
        let deleted = trash.delete(&workspace, "dir").unwrap();
        assert_eq!((deleted["path"].as_str(), deleted["kind"].as_str()), (Some("dir"), Some("dir")));
        assert!(!ws.join("dir").exists());
        assert_eq!(trash.delete(&workspace, "link").unwrap()["kind"], "symlink");
        assert_eq!(std::fs::read_to_string(tmp.path().join("outside")).unwrap(), "keep");
        let items = trash.list().unwrap()["items"].as_array().unwrap().clone();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["path"], "link", "newest first");
        let id = deleted["trash"].as_str().unwrap();
        std::fs::create_dir(ws.join("dir")).unwrap();
        assert_eq!(trash.restore(&workspace, id, None).unwrap_err().code, ErrorCode::Conflict);
        std::fs::remove_dir(ws.join("dir")).unwrap();
        trash.restore(&workspace, id, None).unwrap();
        assert_eq!(std::fs::read_to_string(ws.join("dir/a.txt")).unwrap(), "a");
        assert_eq!(trash.list().unwrap()["items"].as_array().unwrap().len(), 1);
        for bad in ["../x", "", "a/b"] {
            assert_eq!(trash.restore(&workspace, bad, None).unwrap_err().code, ErrorCode::InvalidArgs, "{bad}");
        }
    }

    #[test]
    fn moves_stay_inside_and_never_replace() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("d")).unwrap();
        std::fs::write(ws.join("a"), "a").unwrap();
        std::fs::write(ws.join("b"), "b").unwrap();
        let workspace = Workspace::new(&ws, &[]).unwrap();
        assert_eq!(move_file(&workspace, "a", "b").unwrap_err().code, ErrorCode::Conflict);
        assert_eq!(move_file(&workspace, "a", "../a").unwrap_err().code, ErrorCode::OutsideWorkspace);
        assert_eq!(move_file(&workspace, "d", "d/e").unwrap_err().code, ErrorCode::InvalidArgs);
        assert_eq!(move_file(&workspace, "a", "d/a2").unwrap()["to"], "d/a2");
        assert_eq!(std::fs::read_to_string(ws.join("d/a2")).unwrap(), "a");
        assert_eq!(std::fs::read_to_string(ws.join("b")).unwrap(), "b");
    }
}
