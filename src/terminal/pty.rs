//! The operating-system side of one terminal: the PTY and its program (in a session and process
//! group of its own), a reader thread that hands output over in bounded chunks — blocking, so the
//! program blocks too, when nobody takes them — and a writer thread for typed input.

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use portable_pty::{Child, CommandBuilder, MasterPty, PtySize};
use tokio::sync::mpsc;

use crate::protocol::{ErrorCode, ToolError, TERM_CHUNK};

/// Chunks of output read ahead of the one being delivered: with [`TERM_CHUNK`] this bounds what
/// a stalled terminal holds in memory besides its scrollback.
const READ_AHEAD: usize = 4;
/// Inputs queued for the writer thread before `term_input` is answered `busy`.
const INPUT_QUEUE: usize = 64;
/// How often a reader waiting for output checks whether its terminal was closed.
const READ_POLL: Duration = Duration::from_millis(200);
/// A read this large suggests more is on its way (one read of a PTY returns at most the kernel's
/// line buffer, 4,095 bytes on Linux).
const FULL_READ: usize = 2048;
/// How long a reader that found the PTY full waits for the rest of a frame.
const GATHER_WAIT: Duration = Duration::from_millis(1);

/// A started terminal: where its output arrives, where input goes, and its program.
pub(super) struct Spawned {
    pub master: Box<dyn MasterPty + Send>,
    pub output: mpsc::Receiver<Vec<u8>>,
    pub input: std::sync::mpsc::SyncSender<Vec<u8>>,
    pub child: Box<dyn Child + Send + Sync>,
    pub pid: Option<u32>,
    /// Set when the terminal closes: the reader stops at its next look.
    pub stop: Arc<AtomicBool>,
}

/// What to start.
pub(super) struct Launch<'a> {
    /// `None`: the user's login shell.
    pub command: Option<&'a str>,
    pub cwd: &'a Path,
    pub env: &'a [(OsString, OsString)],
    pub cols: u16,
    pub rows: u16,
}

/// The size of a PTY of `cols` × `rows` characters.
pub(super) fn size(cols: u16, rows: u16) -> PtySize {
    PtySize { rows, cols, pixel_width: 0, pixel_height: 0 }
}

/// Opens a PTY and starts the program on it; its output flows once `output` is read.
pub(super) fn spawn(launch: Launch<'_>) -> Result<Spawned, ToolError> {
    let internal = |what: &str, err: anyhow::Error| ToolError::new(ErrorCode::Internal, format!("{what}: {err:#}"));
    let pair = portable_pty::native_pty_system()
        .openpty(size(launch.cols, launch.rows))
        .map_err(|err| internal("could not open a terminal", err))?;
    let mut builder = match launch.command {
        None => CommandBuilder::new_default_prog(),
        Some(command) => {
            let mut builder = CommandBuilder::new(crate::tools::SHELL);
            builder.args(["-c", command]);
            builder
        }
    };
    builder.cwd(launch.cwd);
    builder.env_clear();
    for (key, value) in launch.env {
        builder.env(key, value);
    }
    builder.env("TERM", "xterm-256color");
    builder.env("COLORTERM", "truecolor");
    let reader = pair.master.try_clone_reader().map_err(|err| internal("could not read the terminal", err))?;
    let writer = pair.master.take_writer().map_err(|err| internal("could not write to the terminal", err))?;
    let fd = pair.master.as_raw_fd();
    let child = pair.slave.spawn_command(builder).map_err(|err| internal("could not start the program", err))?;
    // Only the program holds the slave side now: its end (and its session's) shows as end-of-file.
    drop(pair.slave);
    let pid = child.process_id();
    let stop = Arc::new(AtomicBool::new(false));
    let (chunks, output) = mpsc::channel(READ_AHEAD);
    let reading = stop.clone();
    std::thread::Builder::new()
        .name("voxa-term-read".into())
        .spawn(move || read_loop(reader, fd, &chunks, &reading))
        .map_err(|err| internal("could not start the terminal reader", err.into()))?;
    let (input, typed) = std::sync::mpsc::sync_channel::<Vec<u8>>(INPUT_QUEUE);
    std::thread::Builder::new()
        .name("voxa-term-write".into())
        .spawn(move || write_loop(writer, &typed))
        .map_err(|err| internal("could not start the terminal writer", err.into()))?;
    Ok(Spawned { master: pair.master, output, input, child, pid, stop })
}

/// Reads the terminal until its end, or until it is closed; each read waits for room in
/// `chunks`, so a terminal nobody keeps up with is not read at all. A read that filled the
/// kernel's buffer is followed by what else becomes ready within [`GATHER_WAIT`], up to
/// [`TERM_CHUNK`]: a flood goes in frames of 16 KiB, not of the 4 KiB one read returns, while a
/// keystroke's echo goes at once.
fn read_loop(mut reader: Box<dyn Read + Send>, fd: Option<RawFd>, chunks: &mpsc::Sender<Vec<u8>>, stop: &AtomicBool) {
    let mut buf = vec![0u8; TERM_CHUNK];
    while !stop.load(Ordering::Acquire) {
        if !readable(fd, READ_POLL) {
            continue;
        }
        let (mut filled, mut ended) = (0, false);
        loop {
            let read = match reader.read(&mut buf[filled..]) {
                Ok(0) => {
                    ended = true;
                    0
                }
                Ok(n) => n,
                Err(err) if matches!(err.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock) => 0,
                // EIO: every process holding the terminal has gone.
                Err(_) => {
                    ended = true;
                    0
                }
            };
            filled += read;
            if ended || filled == buf.len() || read < FULL_READ || !readable(fd, GATHER_WAIT) {
                break;
            }
        }
        if filled > 0 && chunks.blocking_send(buf[..filled].to_vec()).is_err() {
            break;
        }
        if ended {
            break;
        }
    }
}

/// Whether the terminal has output to read within `wait` (always, when it cannot be polled).
fn readable(fd: Option<RawFd>, wait: Duration) -> bool {
    let Some(fd) = fd else { return true };
    let mut poll = [filedescriptor::pollfd { fd, events: filedescriptor::POLLIN, revents: 0 }];
    match filedescriptor::poll(&mut poll, Some(wait)) {
        Ok(0) => false,
        Ok(_) => true,
        Err(err) => {
            tracing::debug!(%err, "could not poll a terminal");
            true
        }
    }
}

/// Writes typed input in order until the terminal is gone.
fn write_loop(mut writer: Box<dyn Write + Send>, typed: &std::sync::mpsc::Receiver<Vec<u8>>) {
    while let Ok(data) = typed.recv() {
        if let Err(err) = writer.write_all(&data).and_then(|()| writer.flush()) {
            tracing::debug!(%err, "a terminal no longer takes input");
            break;
        }
    }
}

/// The exit code a terminal reports: the program's, or 128 + the signal that ended it.
pub(super) fn exit_code(status: &portable_pty::ExitStatus) -> i64 {
    match status.signal() {
        Some(signal) => 128 + signal_number(signal),
        None => i64::from(status.exit_code()),
    }
}

/// The number of a signal as `ExitStatus` names it (its description), for the common ones.
fn signal_number(name: &str) -> i64 {
    let lower = name.to_ascii_lowercase();
    [("hangup", 1), ("interrupt", 2), ("quit", 3), ("killed", 9), ("terminated", 15)]
        .iter()
        .find(|(word, _)| lower.contains(word))
        .map_or(0, |(_, number)| *number)
}
