//! The operating-system side of one terminal: the PTY and its program (in a session and process
//! group of its own), a reader thread that hands output over in bounded chunks — blocking, so the
//! program blocks too, when nobody takes them — and a writer thread for typed input.

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
/// Most a stopped reader still reads: what the kernel holds for a terminal is a few dozen KiB.
const MAX_READ_AFTER_STOP: usize = 1 << 20;
/// A read this large suggests more is on its way (one read of a PTY returns at most the kernel's
/// line buffer, 4,095 bytes on Linux).
const FULL_READ: usize = 2048;
/// How long a reader gathering a frame waits for more output before it sends what it has.
const GATHER_WAIT: Duration = Duration::from_millis(1);
/// How long a reader gathering a frame lets the program write after a read that found the PTY
/// nearly empty (the reader keeping up with the program), before it looks again: the next read
/// then takes what the program wrote meanwhile instead of a line or two.
const GATHER_NAP: Duration = Duration::from_micros(100);
/// Longest a frame is gathered from its first read: a program writing slowly still shows within
/// this.
const GATHER_SPAN: Duration = Duration::from_millis(4);

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
/// `chunks`, so a terminal nobody keeps up with is not read at all. A flood goes in frames of
/// 16 KiB, not of the few lines one read returns when the reader keeps up with the program, while
/// a keystroke's echo goes at once: a first read that filled most of the kernel's buffer starts a
/// flood, and while it lasts the reader gathers each frame, taking what becomes ready up to
/// [`TERM_CHUNK`] and, after a read that found little, first letting the program write for
/// [`GATHER_NAP`]. A frame goes when it is full or [`GATHER_SPAN`] old, and the flood ends when
/// nothing comes within [`GATHER_WAIT`]. Once `stop` is raised (the program was reaped, or the
/// terminal closed) it still reads what is there to read, so the last lines of a program that
/// wrote them and exited while its phone was behind are not lost, and then ends.
fn read_loop(mut reader: Box<dyn Read + Send>, fd: Option<RawFd>, chunks: &mpsc::Sender<Vec<u8>>, stop: &AtomicBool) {
    let mut buf = vec![0u8; TERM_CHUNK];
    let mut flooding = false;
    // Bytes read since the stop: what the kernel held then is far less; a process that left the
    // session and writes on does not keep the reader.
    let mut after_stop: Option<usize> = None;
    loop {
        if stop.load(Ordering::Acquire) {
            let read = after_stop.get_or_insert(0);
            if fd.is_none() || *read >= MAX_READ_AFTER_STOP || !readable(fd, Duration::ZERO) {
                break;
            }
        }
        if !readable(fd, READ_POLL) {
            flooding = false;
            continue;
        }
        let (mut filled, mut ended, started) = (0, false, Instant::now());
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
            flooding |= filled >= FULL_READ;
            let left = GATHER_SPAN.saturating_sub(started.elapsed());
            if ended || !flooding || filled == buf.len() || left.is_zero() {
                break;
            }
            if read < FULL_READ {
                std::thread::sleep(GATHER_NAP.min(left));
            }
            let wait = GATHER_WAIT.min(left);
            if !readable(fd, wait) {
                // Quiet for the whole wait: the flood is over (a frame that only ran out of time
                // is not).
                flooding = wait < GATHER_WAIT;
                break;
            }
        }
        if let Some(read) = after_stop.as_mut() {
            *read += filled;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_gathered_into_whole_chunks() {
        let cwd = std::env::temp_dir();
        let env = [(OsString::from("PATH"), std::env::var_os("PATH").unwrap_or_default())];
        // 1 MiB of zeros as base64: 76 columns a line, each line written on its own (the PTY makes
        // its standard output line-buffered), so a reader that keeps up finds a line or two.
        let command = "head -c 1048576 /dev/zero | base64";
        let launch = Launch { command: Some(command), cwd: &cwd, env: &env, cols: 80, rows: 24 };
        let mut spawned = spawn(launch).unwrap();
        let mut sizes = Vec::new();
        while let Some(chunk) = spawned.output.blocking_recv() {
            sizes.push(chunk.len());
        }
        let _ = spawned.child.wait();
        let total: usize = sizes.iter().sum();
        // 1,398,104 characters in lines of 76, each ended by CR LF.
        assert_eq!(total, 1_398_104 + 2 * 1_398_104usize.div_ceil(76), "every byte arrives");
        assert!(sizes.iter().all(|&size| size <= TERM_CHUNK));
        // One read of a PTY returns at most 4,095 bytes: a chunk past that was gathered. How many
        // are whole depends on how the machine schedules the program and the reader, so the
        // bench counts them (docs/PERFORMANCE.md); here a flood must come in some.
        assert!(sizes.contains(&TERM_CHUNK), "a flood comes in whole chunks: {sizes:?}");
    }

    /// A reader told to stop while output waits in the terminal reads it first, then ends, even
    /// with the other side still open (a process that left the session holding it).
    #[test]
    fn a_reader_stopped_with_output_waiting_delivers_it_and_ends() {
        use std::os::fd::AsRawFd;
        let (mut program, terminal) = std::os::unix::net::UnixStream::pair().unwrap();
        let written: Vec<u8> = (0..40_000u32).map(|i| b'a' + (i % 26) as u8).chain(*b"\r\nthe last line\r\n").collect();
        program.write_all(&written).unwrap();
        let fd = terminal.as_raw_fd();
        let (chunks, mut output) = mpsc::channel(64);
        let (ended, reader_ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            read_loop(Box::new(terminal), Some(fd), &chunks, &AtomicBool::new(true));
            let _ = ended.send(());
        });
        // It ends with the other side still open (a generous bound: it takes milliseconds).
        reader_ended.recv_timeout(Duration::from_secs(30)).expect("the stopped reader ended");
        let mut read = Vec::new();
        while let Ok(chunk) = output.try_recv() {
            read.extend(chunk);
        }
        assert_eq!(read, written, "everything written before the stop was delivered");
        drop(program);
    }
}
