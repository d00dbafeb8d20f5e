//! File operations relative to a directory handle, never following a link.
//!
//! [`Workspace::resolve`](super::workspace::Workspace::resolve) turns a path argument into plain
//! names under the root, with every symlink already followed by hand. The operations here then walk
//! exactly those names from a handle on the root and refuse a symlink wherever one appears: a
//! directory swapped for a link between resolution and use makes the call fail (`ELOOP`,
//! `ENOTDIR`), it never leads outside. On Linux 5.6+ one `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS` does the walk in the kernel; elsewhere (older
//! kernels, seccomp filters that hide `openat2`, other systems) each name is opened with
//! `O_NOFOLLOW` relative to the handle of its parent.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};

/// How a directory is held while walking through it: `O_PATH` where it exists (no read permission
/// needed, as for a path lookup), a read-only open elsewhere.
#[cfg(any(target_os = "linux", target_os = "android"))]
const WALK: OFlags = OFlags::PATH;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const WALK: OFlags = OFlags::RDONLY;

/// Set once `openat2` turned out to be missing; the walk is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The plain names of `relative`; anything else (`..`, a root) is refused, it never comes out of
/// the resolver.
fn names(relative: &Path) -> io::Result<Vec<&OsStr>> {
    relative
        .components()
        .filter(|component| *component != Component::CurDir)
        .map(|component| match component {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "path is not plain names under the workspace")),
        })
        .collect()
}

/// Opens `relative` beneath `root` with `flags`, following no symlink in any component.
pub(crate) fn open(root: BorrowedFd<'_>, relative: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let names = names(relative)?;
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Some((last, parents)) = names.split_last() else {
        return Ok(rustix::fs::openat(root, ".", flags, mode)?);
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        use rustix::fs::ResolveFlags;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_SYMLINKS;
        let joined: std::path::PathBuf = names.iter().collect();
        match rustix::fs::openat2(root, &joined, flags, mode, resolve) {
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
            // An escape attempt the kernel caught: report it like a link in the way.
            Err(rustix::io::Errno::XDEV) => return Err(rustix::io::Errno::LOOP.into()),
            other => return Ok(other?),
        }
    }
    let parent = walk(root, parents)?;
    Ok(rustix::fs::openat(&parent, *last, flags, mode)?)
}

/// A handle on the directory `relative` names beneath `root`, for operations inside it.
pub(crate) fn open_dir(root: BorrowedFd<'_>, relative: &Path) -> io::Result<OwnedFd> {
    open(root, relative, WALK | OFlags::DIRECTORY, Mode::empty())
}

/// Like [`open_dir`], creating every missing directory on the way (`mkdir -p`), each relative to
/// the handle of its parent.
pub(crate) fn create_dirs(root: BorrowedFd<'_>, relative: &Path) -> io::Result<OwnedFd> {
    let mut dir = own(root)?;
    for name in names(relative)? {
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
        dir = step(&dir, name)?;
    }
    Ok(dir)
}

/// Opens each name as a directory below the previous one, refusing links.
fn walk(root: BorrowedFd<'_>, names: &[&OsStr]) -> io::Result<OwnedFd> {
    let mut dir = own(root)?;
    for name in names {
        dir = step(&dir, name)?;
    }
    Ok(dir)
}

/// A handle of our own on the directory `root` is a handle on.
fn own(root: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(root, ".", WALK | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

fn step(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dir, name, WALK | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// `lstat` of `name` inside `dir`.
pub(crate) fn stat(dir: impl AsFd, name: &OsStr) -> io::Result<rustix::fs::Stat> {
    Ok(rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
}

/// Replaces `to` with `from`, both inside `dir`.
pub(crate) fn rename(dir: impl AsFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let dir = dir.as_fd();
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

/// Moves `from` in `from_dir` to `to` in `to_dir`, refusing (`AlreadyExists`) when `to` exists.
/// Atomic on Linux (`RENAME_NOREPLACE`); elsewhere checked just before the rename.
pub(crate) fn rename_new(from_dir: impl AsFd, from: &OsStr, to_dir: impl AsFd, to: &OsStr) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::RenameFlags;
        match rustix::fs::renameat_with(&from_dir, from, &to_dir, to, RenameFlags::NOREPLACE) {
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::INVAL) if stat(&to_dir, to).is_err() => {}
            other => return Ok(other?),
        }
    }
    if stat(&to_dir, to).is_ok() {
        return Err(io::ErrorKind::AlreadyExists.into());
    }
    Ok(rustix::fs::renameat(from_dir, from, to_dir, to)?)
}

/// Removes the file `name` inside `dir`.
pub(crate) fn remove_file(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::symlink;

    fn root(dir: &Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap()
    }

    fn errno(result: io::Result<OwnedFd>) -> Option<i32> {
        result.err().and_then(|err| err.raw_os_error())
    }

    #[test]
    fn a_link_anywhere_on_the_way_is_refused_by_both_walks() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("ws/a")).unwrap();
        std::fs::write(tmp.path().join("ws/a/f"), "in").unwrap();
        std::fs::write(tmp.path().join("secret"), "out").unwrap();
        symlink(tmp.path(), tmp.path().join("ws/up")).unwrap();
        symlink("a/f", tmp.path().join("ws/inner")).unwrap();
        let root = root(&tmp.path().join("ws"));
        let read = |path: &str| open(root.as_fd(), Path::new(path), OFlags::RDONLY, Mode::empty());
        for _ in 0..2 {
            assert!(read("a/f").is_ok());
            // Even a link that stays inside: the resolver follows links, the operation never does.
            assert_eq!(errno(read("inner")), Some(rustix::io::Errno::LOOP.raw_os_error()));
            assert!(errno(read("up/secret")).is_some());
            assert!(read("../secret").is_err());
            // Second round: the dirfd walk, as on kernels without openat2.
            NO_OPENAT2.store(true, Ordering::Relaxed);
        }
        NO_OPENAT2.store(false, Ordering::Relaxed);
        assert!(create_dirs(root.as_fd(), Path::new("up/new")).is_err());
        assert!(!tmp.path().join("new").exists());
        assert!(create_dirs(root.as_fd(), Path::new("a/b/c")).is_ok());
        assert!(tmp.path().join("ws/a/b/c").is_dir());
    }
}
