//! One terminal: its output delivered in order to every client watching it, under a window of
//! unacknowledged bytes per client; a bounded scrollback replayed to a client that attaches; the
//! screen as a terminal emulator sees it, for `term_screen`; and its end.

use std::collections::VecDeque;
use std::num::NonZeroU16;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use portable_pty::{Child, MasterPty};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::pty::{self, Spawned};
use crate::protocol::{
    AgentMessage, ErrorCode, Frame, TermExit, TermOutput, ToolError, MAX_TERM_INPUT, TERM_CHUNK, TERM_SCROLLBACK,
    TERM_WINDOW,
};

/// Lines above the screen the emulator keeps for `term_screen`.
pub(super) const SCREEN_HISTORY: usize = 1000;
/// How often a terminal held back by its window looks again for clients that went away.
const WINDOW_RECHECK: Duration = Duration::from_secs(1);

/// What a terminal is, as `term_list` shows it.
#[derive(Clone, Debug)]
pub(super) struct Described {
    pub command: String,
    /// Relative to the workspace (`.` for its root).
    pub cwd: String,
    pub started_at: u64,
}

/// One terminal and its program.
pub(crate) struct Terminal {
    pub id: String,
    described: Described,
    size: Mutex<(u16, u16)>,
    master: Mutex<Box<dyn MasterPty + Send>>,
    input: std::sync::mpsc::SyncSender<Vec<u8>>,
    pid: Option<u32>,
    output: tokio::sync::Mutex<Output>,
    /// Woken by an acknowledgement: the window may have opened.
    acked: Notify,
    exited: AtomicBool,
    last_used: Mutex<Instant>,
    /// Cancelled by `term_close` or the agent stopping.
    closed: CancellationToken,
    reader_stop: Arc<AtomicBool>,
}

/// The output side, behind one lock so that delivery and attaching keep every client's frames in
/// order.
struct Output {
    /// Bytes written since the start: the offset of the next byte.
    offset: u64,
    /// The last [`TERM_SCROLLBACK`] bytes, ending at `offset`.
    scrollback: VecDeque<u8>,
    viewers: Vec<Viewer>,
    exit: Option<i64>,
}

/// A client watching the terminal: its socket queue and how far it has acknowledged.
struct Viewer {
    out: mpsc::Sender<Frame>,
    acked: u64,
}

impl Output {
    /// Whether every live client is within its window (a terminal nobody watches always is).
    fn window_open(&mut self) -> bool {
        self.viewers.retain(|viewer| !viewer.out.is_closed());
        let offset = self.offset;
        self.viewers.iter().all(|viewer| offset.saturating_sub(viewer.acked) < TERM_WINDOW)
    }
}

fn nonzero(value: u16) -> NonZeroU16 {
    NonZeroU16::new(value).unwrap_or(NonZeroU16::MIN)
}

impl Terminal {
    /// Makes a started program a terminal: its output is pumped to the clients and its end
    /// reported, both as tasks of `tasks`.
    pub(super) fn start(
        id: String,
        described: Described,
        spawned: Spawned,
        (cols, rows): (u16, u16),
        tasks: &tokio_util::task::TaskTracker,
        shutdown: &CancellationToken,
    ) -> Arc<Self> {
        let Spawned { master, output, input, child, pid, stop } = spawned;
        let terminal = Arc::new(Terminal {
            id,
            described,
            size: Mutex::new((cols, rows)),
            master: Mutex::new(master),
            input,
            pid,
            output: tokio::sync::Mutex::new(Output {
                offset: 0,
                scrollback: VecDeque::new(),
                viewers: Vec::new(),
                exit: None,
            }),
            acked: Notify::new(),
            exited: AtomicBool::new(false),
            last_used: Mutex::new(Instant::now()),
            closed: shutdown.child_token(),
            reader_stop: stop,
        });
        let (code_tx, code_rx) = tokio::sync::oneshot::channel();
        tasks.spawn(terminal.clone().reap(child, code_tx));
        tasks.spawn(terminal.clone().pump(output, code_rx));
        terminal
    }

    pub(super) fn describe(&self) -> Value {
        let (cols, rows) = self.size.lock().map(|size| *size).unwrap_or((0, 0));
        json!({
            "term": self.id,
            "command": self.described.command,
            "cwd": self.described.cwd,
            "cols": cols,
            "rows": rows,
            "started_at": self.described.started_at,
            "exited": self.has_exited(),
        })
    }

    pub(super) fn has_exited(&self) -> bool {
        self.exited.load(Ordering::Acquire)
    }

    fn touch(&self) {
        if let Ok(mut last) = self.last_used.lock() {
            *last = Instant::now();
        }
    }

    /// Time since anyone typed into, read or attached the terminal, or it wrote something.
    pub(super) fn idle_for(&self) -> Duration {
        self.last_used.lock().map(|last| last.elapsed()).unwrap_or_default()
    }

    /// Whether some live client watches it.
    pub(super) async fn watched(&self) -> bool {
        let mut output = self.output.lock().await;
        output.viewers.retain(|viewer| !viewer.out.is_closed());
        !output.viewers.is_empty()
    }

    /// Starts sending the terminal's output to `out`: the scrollback first (from the returned
    /// offset), then live output. A client already watching starts over from the scrollback.
    pub(super) async fn attach(&self, out: mpsc::Sender<Frame>) -> u64 {
        self.touch();
        let mut output = self.output.lock().await;
        output.viewers.retain(|viewer| !viewer.out.same_channel(&out) && !viewer.out.is_closed());
        let start = output.offset - output.scrollback.len() as u64;
        let replay: Vec<u8> = output.scrollback.iter().copied().collect();
        for (index, chunk) in replay.chunks(TERM_CHUNK).enumerate() {
            let frame = output_frame(&self.id, start + (index * TERM_CHUNK) as u64, chunk);
            if out.send(frame).await.is_err() {
                return start;
            }
        }
        if let Some(code) = output.exit {
            let _ = out.send(exit_frame(&self.id, code)).await;
        }
        output.viewers.push(Viewer { out, acked: start });
        start
    }

    /// `out`'s client has every byte before `offset`. An offset beyond what was sent is capped.
    pub(super) async fn ack(&self, out: &mpsc::Sender<Frame>, offset: u64) {
        let mut output = self.output.lock().await;
        let sent = output.offset;
        if let Some(viewer) = output.viewers.iter_mut().find(|viewer| viewer.out.same_channel(out)) {
            viewer.acked = viewer.acked.max(offset.min(sent));
        }
        drop(output);
        self.acked.notify_one();
    }

    /// Queues `data` for the program, in order.
    pub(super) fn type_in(&self, data: &str) -> Result<(), ToolError> {
        if data.len() > MAX_TERM_INPUT {
            let message = format!("field `data` is {} bytes; at most {MAX_TERM_INPUT} are accepted", data.len());
            return Err(ToolError::new(ErrorCode::TooLarge, message));
        }
        if self.has_exited() {
            return Err(ToolError::new(ErrorCode::NotFound, format!("terminal {} has ended", self.id)));
        }
        self.touch();
        self.input.try_send(data.as_bytes().to_vec()).map_err(|err| match err {
            std::sync::mpsc::TrySendError::Full(_) => {
                ToolError::new(ErrorCode::Busy, "the terminal's program is not reading its input; try again")
            }
            std::sync::mpsc::TrySendError::Disconnected(_) => {
                ToolError::new(ErrorCode::NotFound, format!("terminal {} has ended", self.id))
            }
        })
    }

    /// Gives the terminal a new size; its program gets SIGWINCH.
    pub(super) async fn resize(&self, cols: u16, rows: u16) -> Result<(), ToolError> {
        self.touch();
        let resized =
            self.master.lock().map_err(|_| internal("the terminal is unusable"))?.resize(pty::size(cols, rows));
        resized.map_err(|err| internal(&format!("could not resize the terminal: {err:#}")))?;
        if let Ok(mut size) = self.size.lock() {
            *size = (cols, rows);
        }
        Ok(())
    }

    /// The screen as text, with up to `history` lines above it: the scrollback run through a
    /// terminal emulator of the terminal's size, so colours and cursor movement are applied, not shown.
    pub(super) async fn screen(&self, history: usize) -> Result<Value, ToolError> {
        self.touch();
        let replay: Vec<u8> = self.output.lock().await.scrollback.iter().copied().collect();
        let (cols, rows) = self.size.lock().map(|size| *size).unwrap_or((80, 24));
        let text = tokio::task::spawn_blocking(move || screen_text(&replay, cols, rows, history))
            .await
            .map_err(|_| internal("could not read the screen"))?;
        Ok(json!({ "term": self.id, "text": text, "exited": self.has_exited() }))
    }

    /// Stops the program and everything in its session; the clients get `term_exit`.
    pub(super) fn close(&self) {
        self.closed.cancel();
    }

    /// Delivers the output until the program's end, then its exit; reads only while every
    /// client's window is open.
    async fn pump(self: Arc<Self>, mut chunks: mpsc::Receiver<Vec<u8>>, code: tokio::sync::oneshot::Receiver<i64>) {
        loop {
            if !self.output.lock().await.window_open() {
                tokio::select! {
                    _ = self.acked.notified() => {}
                    _ = tokio::time::sleep(WINDOW_RECHECK) => {}
                    _ = self.closed.cancelled() => break,
                }
                continue;
            }
            let Some(chunk) = chunks.recv().await else { break };
            self.deliver(&chunk).await;
        }
        self.reader_stop.store(true, Ordering::Release);
        drop(chunks);
        let code = code.await.unwrap_or(-1);
        self.exited.store(true, Ordering::Release);
        let mut output = self.output.lock().await;
        output.exit = Some(code);
        let frame = exit_frame(&self.id, code);
        for viewer in &output.viewers {
            let _ = viewer.out.send(frame.clone()).await;
        }
    }

    async fn deliver(&self, chunk: &[u8]) {
        self.touch();
        let mut output = self.output.lock().await;
        let offset = output.offset;
        output.offset += chunk.len() as u64;
        output.scrollback.extend(chunk);
        let excess = output.scrollback.len().saturating_sub(TERM_SCROLLBACK);
        output.scrollback.drain(..excess);
        let frame = output_frame(&self.id, offset, chunk);
        let mut gone = Vec::new();
        for (index, viewer) in output.viewers.iter().enumerate() {
            if viewer.out.send(frame.clone()).await.is_err() {
                gone.push(index);
            }
        }
        for index in gone.into_iter().rev() {
            output.viewers.remove(index);
        }
    }

    /// Waits for the program's end (or the close), stops what is left of its session while the
    /// program is not yet reaped, reaps it and hands over its exit code.
    async fn reap(self: Arc<Self>, mut child: Box<dyn Child + Send + Sync>, code: tokio::sync::oneshot::Sender<i64>) {
        match self.pid {
            Some(pid) => {
                tokio::select! {
                    _ = crate::process::exited(pid) => {}
                    _ = self.closed.cancelled() => {}
                }
                crate::process::kill_tree(pid, true);
            }
            None => self.closed.cancelled().await,
        }
        let _ = child.kill();
        let status = tokio::task::spawn_blocking(move || child.wait()).await;
        let exit = match status {
            Ok(Ok(status)) => pty::exit_code(&status),
            _ => -1,
        };
        let _ = code.send(exit);
        // The reader ends at end-of-file, or at its next look once stopped.
        self.reader_stop.store(true, Ordering::Release);
    }
}

/// The text a terminal of `cols` × `rows` shows after `bytes`, with up to `history` lines above it.
fn screen_text(bytes: &[u8], cols: u16, rows: u16, history: usize) -> String {
    let mut parser = vt100::Parser::new(nonzero(rows), nonzero(cols), SCREEN_HISTORY);
    parser.process(bytes);
    let screen = parser.screen_mut();
    screen.set_scrollback(usize::MAX);
    let above = screen.scrollback().min(history);
    let mut lines: Vec<String> = Vec::new();
    for back in (1..=above).rev() {
        screen.set_scrollback(back);
        lines.extend(screen.rows(0, cols).next());
    }
    screen.set_scrollback(0);
    lines.extend(screen.rows(0, cols).take(usize::from(rows)));
    let mut lines: Vec<&str> = lines.iter().map(|line| line.trim_end()).collect();
    while lines.last().is_some_and(|line| line.is_empty()) {
        lines.pop();
    }
    lines.join("\n")
}

fn output_frame(term: &str, offset: u64, data: &[u8]) -> Frame {
    let data = base64::engine::general_purpose::STANDARD.encode(data);
    Frame::from(AgentMessage::TermOutput(TermOutput { term: term.to_owned(), offset, data }))
}

fn exit_frame(term: &str, code: i64) -> Frame {
    Frame::from(AgentMessage::TermExit(TermExit { term: term.to_owned(), code }))
}

fn internal(message: &str) -> ToolError {
    ToolError::new(ErrorCode::Internal, message)
}
