//! Confinement of path arguments to the workspace root.
//!
//! A path is resolved one component at a time, following symlinks by hand, and refused the moment
//! any step — a `..`, an absolute path, a symlink target, in any component including the last and
//! ones that do not exist yet — would stand outside the root. The resolved path contains no
//! symlinks; the file tools then use it relative to a handle on the root opened at start, through
//! [`beneath`](super::beneath), which refuses a symlink anywhere on the way. A directory swapped for
//! a link between resolution and use makes the call fail instead of leading outside.
//!
//! Paths inside a protected directory (the voxa home, with its secrets) are refused with
//! `protected-path` even when the workspace contains it.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use rustix::fs::{Mode, OFlags};

use crate::protocol::{ErrorCode, ToolError};

/// Symlinks followed while resolving one path before giving up (like the kernel's `ELOOP`).
const MAX_SYMLINKS: usize = 40;

/// The workspace root: canonical, plus the spelling the user gave (so absolute paths written
/// either way are recognised).
#[derive(Clone, Debug)]
pub(crate) struct Workspace {
    root: PathBuf,
    given: PathBuf,
    /// The root, opened once: every file operation starts from this handle.
    handle: Arc<OwnedFd>,
    /// Canonical directories no path may resolve into.
    protected: Vec<PathBuf>,
}

/// A path argument resolved inside the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Real path, no symlinks in it, under the root.
    pub real: PathBuf,
    /// False when the path (or one of its parents) does not exist yet.
    pub exists: bool,
}

impl Resolved {
    /// The real path relative to the root (empty for the root itself).
    pub fn relative<'a>(&'a self, workspace: &Workspace) -> &'a Path {
        self.real.strip_prefix(&workspace.root).unwrap_or(Path::new(""))
    }
}

impl Workspace {
    /// Canonicalises `dir`, which must be an existing directory, and opens it. Paths resolving
    /// into any of `protected` are refused.
    pub fn new(dir: &Path, protected: &[PathBuf]) -> Result<Self> {
        let given = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir().context("could not read the current directory")?.join(dir)
        };
        let root = std::fs::canonicalize(&given)
            .with_context(|| format!("workspace {} does not exist or cannot be read", dir.display()))?;
        if !root.is_dir() {
            anyhow::bail!("workspace {} is not a directory", dir.display());
        }
        let handle = rustix::fs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .with_context(|| format!("could not open the workspace {}", dir.display()))?;
        let protected =
            protected.iter().map(|path| std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())).collect();
        Ok(Workspace { root, given, handle: Arc::new(handle), protected })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The handle every file operation starts from.
    pub fn handle(&self) -> BorrowedFd<'_> {
        self.handle.as_fd()
    }

    /// The path as shown to callers: relative to the root, `.` for the root itself.
    pub fn display(&self, real: &Path) -> String {
        match real.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => real.to_string_lossy().into_owned(),
        }
    }

    /// Resolves a path argument; `outside-workspace` if any step leaves the root.
    pub fn resolve(&self, input: &str) -> Result<Resolved, ToolError> {
        if input.contains('\0') {
            return Err(ToolError::new(ErrorCode::InvalidArgs, "path contains a NUL byte"));
        }
        let input_path = Path::new(input);
        let relative = if input_path.is_absolute() {
            self.strip_root(input_path).ok_or_else(|| outside(input))?
        } else {
            input_path.to_path_buf()
        };

        let mut walk = Walk {
            workspace: self,
            input,
            pending: VecDeque::new(),
            current: self.root.clone(),
            exists: true,
            links: 0,
        };
        walk.push(&relative)?;
        while let Some(name) = walk.pending.pop_front() {
            if name == ".." {
                walk.up()?;
            } else {
                walk.down(&name)?;
            }
        }
        let Walk { current, exists, .. } = walk;
        if !current.starts_with(&self.root) {
            return Err(outside(input));
        }
        if self.protected.iter().any(|dir| current.starts_with(dir)) {
            return Err(ToolError::new(
                ErrorCode::ProtectedPath,
                format!("{input} is inside voxa's own state directory, which no tool may touch"),
            ));
        }
        Ok(Resolved { real: current, exists })
    }

    /// Resolves a path argument naming an entry to act on itself (delete, move, restore): its
    /// parent is resolved as [`Workspace::resolve`] does, its last name is taken as written and
    /// never followed, so a symlink is moved or deleted, not what it points at. The root itself,
    /// a last name of `.` or `..`, an entry inside a protected directory and one that holds a
    /// protected directory are refused.
    pub fn resolve_entry(&self, input: &str) -> Result<Resolved, ToolError> {
        let path = Path::new(input.trim_end_matches('/'));
        let (Some(parent), Some(Component::Normal(name))) = (path.parent(), path.components().next_back()) else {
            // `..` and friends: outside when they lead out, else they name the root or a parent.
            self.resolve(input)?;
            return Err(ToolError::new(
                ErrorCode::InvalidArgs,
                format!("{input} names no file or folder inside the workspace"),
            ));
        };
        let parent = self.resolve(parent.to_str().unwrap_or_default())?;
        if !parent.exists {
            return Err(ToolError::new(ErrorCode::NotFound, format!("the folder of {input} does not exist")));
        }
        let real = parent.real.join(name);
        if self.protected.iter().any(|dir| real.starts_with(dir) || dir.starts_with(&real)) {
            return Err(ToolError::new(
                ErrorCode::ProtectedPath,
                format!("{input} is or holds voxa's own state directory, which no tool may touch"),
            ));
        }
        let exists = std::fs::symlink_metadata(&real).is_ok();
        Ok(Resolved { real, exists })
    }

    fn strip_root(&self, path: &Path) -> Option<PathBuf> {
        [&self.root, &self.given].into_iter().find_map(|root| path.strip_prefix(root).ok().map(Path::to_path_buf))
    }
}

/// One resolution in progress: the real path so far and the names still to walk, one step at a
/// time, so every link is seen and checked.
struct Walk<'a> {
    workspace: &'a Workspace,
    /// The path as given, for messages.
    input: &'a str,
    pending: VecDeque<OsString>,
    current: PathBuf,
    /// False once a step named something missing: the rest is not looked up.
    exists: bool,
    links: usize,
}

impl Walk<'_> {
    /// Puts the names of `path` ahead of what is still to walk.
    fn push(&mut self, path: &Path) -> Result<(), ToolError> {
        push_front(&mut self.pending, path).map_err(|()| outside(self.input))
    }

    /// A `..`: never above the root.
    fn up(&mut self) -> Result<(), ToolError> {
        if self.current == self.workspace.root {
            return Err(outside(self.input));
        }
        self.current.pop();
        if !self.exists {
            // Back out of a missing part of the path: what lies below may exist again and must
            // be checked for links like any other step.
            self.exists = std::fs::symlink_metadata(&self.current).is_ok();
        }
        Ok(())
    }

    /// A step down into `name`, following it if it is a link.
    fn down(&mut self, name: &OsStr) -> Result<(), ToolError> {
        let next = self.current.join(name);
        if !self.exists {
            self.current = next;
            return Ok(());
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => self.follow(&next)?,
            Ok(_) => self.current = next,
            Err(err) if err.kind() == ErrorKind::NotFound => {
                self.exists = false;
                self.current = next;
            }
            Err(err) if err.kind() == ErrorKind::NotADirectory => {
                return Err(ToolError::new(
                    ErrorCode::NotFound,
                    format!("{}: a parent of this path is a file, not a directory", self.input),
                ));
            }
            Err(err) => return Err(io_error(self.input, &err)),
        }
        Ok(())
    }

    /// Walks on through what the link at `link` names.
    fn follow(&mut self, link: &Path) -> Result<(), ToolError> {
        self.links += 1;
        if self.links > MAX_SYMLINKS {
            return Err(ToolError::new(
                ErrorCode::InvalidArgs,
                format!("{}: too many levels of symbolic links", self.input),
            ));
        }
        let target = std::fs::read_link(link).map_err(|err| io_error(self.input, &err))?;
        if target.is_absolute() {
            // Continue from the root with what the absolute target names under it.
            let rest = self.workspace.strip_root(&target).ok_or_else(|| outside(self.input))?;
            self.current = self.workspace.root.clone();
            self.push(&rest)
        } else {
            self.push(&target)
        }
    }
}

/// Puts the components of `path` (relative) in front of the queue. `Err` for a path that still
/// carries a root or prefix, which only an absolute path outside the workspace can.
fn push_front(pending: &mut VecDeque<OsString>, path: &Path) -> Result<(), ()> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => names.push(name.to_os_string()),
            Component::ParentDir => names.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(()),
        }
    }
    for name in names.into_iter().rev() {
        pending.push_front(name);
    }
    Ok(())
}

fn outside(input: &str) -> ToolError {
    ToolError::new(ErrorCode::OutsideWorkspace, format!("{input} is outside the workspace"))
}

/// Maps an I/O error on a resolved path to the contract's codes.
pub(crate) fn io_error(shown: &str, err: &std::io::Error) -> ToolError {
    match err.kind() {
        ErrorKind::NotFound => ToolError::new(ErrorCode::NotFound, format!("{shown} does not exist")),
        // Not a policy decision of this agent: the operating system said no.
        ErrorKind::PermissionDenied => ToolError::new(ErrorCode::Internal, format!("{shown}: permission denied")),
        _ if [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR]
            .iter()
            .any(|errno| err.raw_os_error() == Some(errno.raw_os_error())) =>
        {
            // The resolver saw plain directories; one of them changed into a link since.
            ToolError::new(ErrorCode::OutsideWorkspace, format!("{shown} changed into a symbolic link while in use"))
        }
        _ => ToolError::new(ErrorCode::Internal, format!("{shown}: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("src/deep")).unwrap();
        std::fs::write(ws.join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::create_dir(tmp.path().join("secret")).unwrap();
        std::fs::write(tmp.path().join("secret/key"), "hunter2").unwrap();
        let workspace = Workspace::new(&ws, &[]).unwrap();
        (tmp, workspace, ws)
    }

    fn code(result: Result<Resolved, ToolError>) -> ErrorCode {
        result.unwrap_err().code
    }

    #[test]
    fn plain_paths_resolve_under_the_root() {
        let (_tmp, ws, dir) = setup();
        let root = std::fs::canonicalize(&dir).unwrap();
        let got = ws.resolve("src/main.rs").unwrap();
        assert_eq!(got, Resolved { real: root.join("src/main.rs"), exists: true });
        assert_eq!(ws.resolve("./src/deep/../main.rs").unwrap().real, root.join("src/main.rs"));
        assert_eq!(ws.resolve(".").unwrap().real, root);
        assert_eq!(ws.resolve("").unwrap().real, root);
        let abs = dir.join("src/main.rs");
        assert_eq!(ws.resolve(abs.to_str().unwrap()).unwrap().real, root.join("src/main.rs"));
        let new = ws.resolve("src/new/file.txt").unwrap();
        assert_eq!(new, Resolved { real: root.join("src/new/file.txt"), exists: false });
        assert_eq!(ws.display(&new.real), "src/new/file.txt");
        assert_eq!(ws.display(&root), ".");
    }

    #[test]
    fn dot_dot_and_absolute_escapes_are_refused() {
        let (tmp, ws, _dir) = setup();
        for bad in ["..", "../secret/key", "src/../../secret/key", "src/deep/../../..", "/etc/passwd", "/"] {
            assert_eq!(code(ws.resolve(bad)), ErrorCode::OutsideWorkspace, "{bad}");
        }
        // Leaving and coming back is refused too: every step must stay inside.
        assert_eq!(code(ws.resolve("../ws/src/main.rs")), ErrorCode::OutsideWorkspace);
        let outside = tmp.path().join("secret/key");
        assert_eq!(code(ws.resolve(outside.to_str().unwrap())), ErrorCode::OutsideWorkspace);
        assert_eq!(code(ws.resolve("new/../../x")), ErrorCode::OutsideWorkspace);
    }

    #[test]
    fn symlinks_are_followed_only_while_they_stay_inside() {
        let (tmp, ws, dir) = setup();
        let root = std::fs::canonicalize(&dir).unwrap();
        symlink(tmp.path().join("secret"), dir.join("out_dir")).unwrap();
        symlink(tmp.path().join("secret/key"), dir.join("out_file")).unwrap();
        symlink("../secret/new", dir.join("out_dangling")).unwrap();
        symlink("src/main.rs", dir.join("in_file")).unwrap();
        symlink(root.join("src"), dir.join("in_abs")).unwrap();
        symlink("deep/..", dir.join("src/loopy")).unwrap();
        symlink("self", dir.join("self")).unwrap();
        for bad in ["out_dir", "out_dir/key", "out_dir/new.txt", "out_file", "out_dangling", "out_dangling/x"] {
            assert_eq!(code(ws.resolve(bad)), ErrorCode::OutsideWorkspace, "{bad}");
        }
        assert_eq!(ws.resolve("in_file").unwrap().real, root.join("src/main.rs"));
        assert_eq!(ws.resolve("in_abs/main.rs").unwrap().real, root.join("src/main.rs"));
        assert_eq!(ws.resolve("src/loopy/main.rs").unwrap().real, root.join("src/main.rs"));
        assert_eq!(code(ws.resolve("self")), ErrorCode::InvalidArgs);
    }

    #[test]
    fn a_file_used_as_a_directory_is_not_found() {
        let (_tmp, ws, _dir) = setup();
        assert_eq!(code(ws.resolve("src/main.rs/x")), ErrorCode::NotFound);
        assert_eq!(code(ws.resolve("a\0b")), ErrorCode::InvalidArgs);
    }
}
