//! One terminal: its output delivered in order to every client watching it, under a window of
//! unacknowledged bytes per client; its screen ([`Screen`]), sent as a snapshot to a client that
//! attaches and read by `term_screen`; and its end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use portable_pty::{Child, MasterPty};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::pty::{self, Spawned};
use super::screen::Screen;
use crate::protocol::{AgentMessage, ErrorCode, Frame, TermExit, TermSnapshot, ToolError, MAX_TERM_INPUT, TERM_WINDOW};
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
    /// What the terminal shows after those bytes.
    screen: Screen,
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
                screen: Screen::new(cols, rows),
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

    /// Starts sending the terminal to `out`: its screen as a snapshot, then live output from the
    /// returned offset. A client already watching starts over from a snapshot.
    pub(super) async fn attach(&self, out: mpsc::Sender<Frame>) -> u64 {
        self.touch();
        let mut output = self.output.lock().await;
        output.viewers.retain(|viewer| !viewer.out.same_channel(&out) && !viewer.out.is_closed());
        let offset = output.offset;
        let (cols, rows) = output.screen.size();
        let data = base64::engine::general_purpose::STANDARD.encode(output.screen.snapshot());
        let snapshot = TermSnapshot { term: self.id.clone(), offset, cols, rows, data };
        if out.send(Frame::from(AgentMessage::TermSnapshot(snapshot))).await.is_err() {
            return offset;
        }
        if let Some(code) = output.exit {
            let _ = out.send(exit_frame(&self.id, code)).await;
        }
        output.viewers.push(Viewer { out, acked: offset });
        offset
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

    /// Gives the terminal a new size; its program gets SIGWINCH. The output read before is
    /// the screen's at the old size.
    pub(super) async fn resize(&self, cols: u16, rows: u16) -> Result<(), ToolError> {
        self.touch();
        let mut output = self.output.lock().await;
        let resized =
            self.master.lock().map_err(|_| internal("the terminal is unusable"))?.resize(pty::size(cols, rows));
        resized.map_err(|err| internal(&format!("could not resize the terminal: {err:#}")))?;
        output.screen.resize(cols, rows);
        if let Ok(mut size) = self.size.lock() {
            *size = (cols, rows);
        }
        Ok(())
    }

    /// The screen as text, with up to `history` lines above it: colours and cursor movement
    /// applied, not shown.
    pub(super) async fn screen(&self, history: usize) -> Result<Value, ToolError> {
        self.touch();
        let text = self.output.lock().await.screen.text(history);
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
        output.screen.take(chunk);
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

/// A `term_output` frame, its text written at once: the base64 of the bytes goes straight into
/// it in one pass, with no string of its own and no pass looking for characters to escape (it has
/// none). The same JSON as [`AgentMessage::TermOutput`] gives.
fn output_frame(term: &str, offset: u64, data: &[u8]) -> Frame {
    let head = format!("{{\"type\":\"term_output\",\"term\":{},\"offset\":{offset},\"data\":\"", Value::from(term));
    // Padded base64: four characters for every three bytes or part of three.
    let encoded = data.len().div_ceil(3) * 4;
    let mut text = Vec::with_capacity(head.len() + encoded + 2);
    text.extend_from_slice(head.as_bytes());
    text.resize(head.len() + encoded, 0);
    let written = base64::engine::general_purpose::STANDARD.encode_slice(data, &mut text[head.len()..]).unwrap_or(0);
    text.truncate(head.len() + written);
    text.extend_from_slice(b"\"}");
    // JSON text and base64: always UTF-8 (checked once, over the whole frame).
    Frame::text(String::from_utf8(text).unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned()))
}

fn exit_frame(term: &str, code: i64) -> Frame {
    Frame::from(AgentMessage::TermExit(TermExit { term: term.to_owned(), code }))
}

fn internal(message: &str) -> ToolError {
    ToolError::new(ErrorCode::Internal, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::TermOutput;

    #[test]
    fn an_output_frame_is_the_json_of_term_output() {
        for data in [&b""[..], b"a", b"ab", b"abc", &[0xff; 4095], b"\x1b[31m\"quoted\"\r\n"] {
            let data_b64 = base64::engine::general_purpose::STANDARD.encode(data);
            let message = AgentMessage::TermOutput(TermOutput { term: "t-0123".into(), offset: 77, data: data_b64 });
            assert_eq!(output_frame("t-0123", 77, data), Frame::from(message));
        }
        let odd = output_frame("t-\"x\"", 0, b"");
        let parsed: Value = serde_json::from_str(odd.as_text().unwrap()).unwrap();
        assert_eq!(parsed["term"], "t-\"x\"");
    }
}
