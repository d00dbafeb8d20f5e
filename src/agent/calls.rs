//! The call table of one pairing: tool calls belong to the pairing (the caller a hello proved),
//! not to the socket that asked for them. A session that ends without `cancel` leaves its calls
//! running to their own end; their output is kept, bounded, and handed to the sessions of the same
//! pairing that ask (`calls`). The frames are described in docs/PROTOCOL.md, "Calls outlive the
//! connection".

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::{AgentMessage, CallEntry, CallsFrame, ErrorCode, Frame, ToolCall, ToolError};

/// Finished calls kept per pairing for a session that has not seen them; the oldest go first.
pub const KEPT_CALLS: usize = 32;
/// Bytes of finished calls' frames kept per pairing; the oldest go first.
pub const KEPT_BYTES: usize = 4 << 20;
/// Output of a running call kept for a session that asks later: the last this many bytes.
pub const KEPT_PROGRESS: usize = crate::protocol::OUTPUT_CAP;
/// Largest `seen` list a `calls` frame may carry.
pub const MAX_SEEN: usize = 256;
/// Arguments larger than this (as JSON) are not repeated in a `calls` frame.
const MAX_SHOWN_ARGS: usize = 2 << 10;
/// How long one session may hold up a call's output before it stops getting it.
const LISTENER_PATIENCE: Duration = Duration::from_secs(10);

/// One session listening on a pairing's calls.
pub type ListenerId = u64;

/// Every pairing's call table, by caller.
#[derive(Default)]
pub struct CallBoards {
    boards: Mutex<HashMap<String, Arc<CallBoard>>>,
    next_listener: AtomicU64,
}

impl CallBoards {
    /// The table of the pairing `caller` names.
    pub fn board(&self, caller: &str) -> Arc<CallBoard> {
        let mut boards = self.boards.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        boards.entry(caller.to_owned()).or_default().clone()
    }

    /// A new listener id, never reused.
    pub fn listener(&self) -> ListenerId {
        self.next_listener.fetch_add(1, Ordering::Relaxed)
    }
}

/// One pairing's calls: running, and finished ones kept for a session that asks.
#[derive(Default)]
pub struct CallBoard {
    /// Every change and every delivery goes through this lock, so a session that asks sees each
    /// frame once and in order.
    table: tokio::sync::Mutex<Table>,
    /// The sessions to deliver to, kept apart so a session leaving never waits.
    listeners: Mutex<Vec<Listener>>,
}

#[derive(Default)]
struct Table {
    running: HashMap<String, Running>,
    finished: VecDeque<Finished>,
    finished_bytes: usize,
    dropped: u64,
}

struct Running {
    entry: CallEntry,
    origin: ListenerId,
    cancel: CancellationToken,
    /// The last [`KEPT_PROGRESS`] bytes of output.
    progress: String,
    /// Bytes of output no longer kept.
    progress_dropped: usize,
}

struct Finished {
    entry: CallEntry,
    /// The call's `image` (if any) and `tool_result`.
    frames: Vec<Frame>,
    bytes: usize,
}

struct Listener {
    id: ListenerId,
    out: mpsc::WeakSender<Frame>,
    /// Asked `calls`: gets every call's frames, not only its own.
    all: bool,
}

/// Why a call was not started.
pub enum Refused {
    Duplicate,
    Busy(usize),
}

impl Refused {
    pub fn error(&self, id: &str) -> ToolError {
        match self {
            Refused::Duplicate => {
                ToolError::new(ErrorCode::DuplicateId, format!("a call with id {id:?} is still running"))
            }
            Refused::Busy(running) => {
                ToolError::new(ErrorCode::Busy, format!("{running} calls are already running; wait for one to finish"))
            }
        }
    }
}

impl CallBoard {
    /// Registers (or updates) a session that receives its own calls' frames, and every call's
    /// when `all`.
    pub fn listen(&self, id: ListenerId, out: &mpsc::Sender<Frame>, all: bool) {
        let mut listeners = self.listeners.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match listeners.iter_mut().find(|listener| listener.id == id) {
            Some(listener) => listener.all |= all,
            None => listeners.push(Listener { id, out: out.downgrade(), all }),
        }
    }

    /// The session is gone: nothing more is delivered to it. Its calls go on.
    pub fn leave(&self, id: ListenerId) {
        let mut listeners = self.listeners.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        listeners.retain(|listener| listener.id != id);
    }

    /// Enters a call started by `origin`, unless its id is running or `limit` calls already are.
    /// The other sessions that asked hear of it in a `calls` frame.
    pub async fn start(
        &self,
        call: &ToolCall,
        origin: ListenerId,
        cancel: CancellationToken,
        limit: usize,
    ) -> Result<(), Refused> {
        let mut table = self.table.lock().await;
        if table.running.contains_key(&call.id) {
            return Err(Refused::Duplicate);
        }
        if table.running.len() >= limit {
            return Err(Refused::Busy(table.running.len()));
        }
        let entry = entry_of(call);
        let announce = AgentMessage::Calls(CallsFrame { running: vec![entry.clone()], ..Default::default() });
        let running = Running { entry, origin, cancel, progress: String::new(), progress_dropped: 0 };
        table.running.insert(call.id.clone(), running);
        self.deliver(origin, &[Frame::from(announce)], Audience::Others).await;
        Ok(())
    }

    /// A piece of a running call's output.
    pub async fn progress(&self, id: &str, frame: Frame, chunk: &str) {
        let mut table = self.table.lock().await;
        let Some(running) = table.running.get_mut(id) else { return };
        running.progress.push_str(chunk);
        if running.progress.len() > KEPT_PROGRESS {
            let cut = running.progress.len() - crate::text::suffix(&running.progress, KEPT_PROGRESS).len();
            running.progress.drain(..cut);
            running.progress_dropped += cut;
        }
        let origin = running.origin;
        self.deliver(origin, &[frame], Audience::All).await;
    }

    /// The call ended with these frames (its image, if any, and its result): delivered, then kept
    /// for the sessions that have not seen it.
    pub async fn finish(&self, id: &str, frames: Vec<Frame>) {
        let mut table = self.table.lock().await;
        let Some(running) = table.running.remove(id) else { return };
        self.deliver(running.origin, &frames, Audience::All).await;
        let bytes = frames.iter().map(frame_len).sum::<usize>() + running.entry.id.len();
        if bytes > KEPT_BYTES {
            table.dropped += 1;
            return;
        }
        table.finished_bytes += bytes;
        table.finished.push_back(Finished { entry: running.entry, frames, bytes });
        while table.finished.len() > KEPT_CALLS || table.finished_bytes > KEPT_BYTES {
            let Some(old) = table.finished.pop_front() else { break };
            table.finished_bytes -= old.bytes;
            table.dropped += 1;
        }
    }

    /// A session asked `calls`: it hears of every running call (with the output kept so far) and
    /// every finished one not in `seen`, then gets every call's frames as they come.
    pub async fn follow(&self, listener: ListenerId, out: &mpsc::Sender<Frame>, seen: &[String]) {
        let table = self.table.lock().await;
        self.listen(listener, out, true);
        let mut running: Vec<&Running> = table.running.values().collect();
        running.sort_by_key(|call| call.entry.started);
        let finished: Vec<&Finished> = table.finished.iter().filter(|call| !seen.contains(&call.entry.id)).collect();
        let header = CallsFrame {
            running: running.iter().map(|call| call.entry.clone()).collect(),
            finished: finished.iter().map(|call| call.entry.clone()).collect(),
            dropped: table.dropped,
        };
        let mut frames = vec![Frame::from(AgentMessage::Calls(header))];
        for call in running.iter().filter(|call| !call.progress.is_empty() || call.progress_dropped > 0) {
            let mut chunk = String::new();
            if call.progress_dropped > 0 {
                chunk.push_str(&format!("[… {} bytes of earlier output not kept …]\n", call.progress_dropped));
            }
            chunk.push_str(&call.progress);
            let env = call.entry.env.clone();
            frames.push(Frame::from(AgentMessage::ToolProgress { id: call.entry.id.clone(), chunk, env }));
        }
        frames.extend(finished.iter().flat_map(|call| call.frames.iter().cloned()));
        self.deliver_to(listener, &frames).await;
    }

    /// Cancels one running call; false when none has this id.
    pub async fn cancel(&self, id: &str) -> bool {
        let table = self.table.lock().await;
        table.running.get(id).map(|call| call.cancel.cancel()).is_some()
    }

    /// Cancels every running call; how many there were.
    pub async fn cancel_all(&self) -> usize {
        let table = self.table.lock().await;
        table.running.values().for_each(|call| call.cancel.cancel());
        table.running.len()
    }

    /// Sends `frames` to the listeners `audience` names, dropping those that are gone or that
    /// held the pairing's output up too long.
    async fn deliver(&self, origin: ListenerId, frames: &[Frame], audience: Audience) {
        let targets: Vec<(ListenerId, mpsc::WeakSender<Frame>)> = {
            let listeners = self.listeners.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            listeners
                .iter()
                .filter(|l| match audience {
                    Audience::All => l.all || l.id == origin,
                    Audience::Others => l.all && l.id != origin,
                })
                .map(|l| (l.id, l.out.clone()))
                .collect()
        };
        for (id, out) in targets {
            if !send_all(&out, frames).await {
                self.leave(id);
            }
        }
    }

    async fn deliver_to(&self, listener: ListenerId, frames: &[Frame]) {
        let out = {
            let listeners = self.listeners.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            listeners.iter().find(|l| l.id == listener).map(|l| l.out.clone())
        };
        if let Some(out) = out {
            if !send_all(&out, frames).await {
                self.leave(listener);
            }
        }
    }

    /// Calls running on this pairing.
    pub async fn running(&self) -> usize {
        self.table.lock().await.running.len()
    }
}

#[derive(Clone, Copy)]
enum Audience {
    /// The call's own session and every session that asked `calls`.
    All,
    /// The sessions that asked `calls`, but not the call's own.
    Others,
}

/// False when the session is gone or did not take the frames in time.
async fn send_all(out: &mpsc::WeakSender<Frame>, frames: &[Frame]) -> bool {
    let Some(out) = out.upgrade() else { return false };
    for frame in frames {
        if out.send_timeout(frame.clone(), LISTENER_PATIENCE).await.is_err() {
            return false;
        }
    }
    true
}

fn frame_len(frame: &Frame) -> usize {
    match frame {
        Frame::Text(text) => text.len(),
        Frame::Binary(data) => data.len(),
    }
}

fn entry_of(call: &ToolCall) -> CallEntry {
    let shown = serde_json::to_string(&call.args).is_ok_and(|json| json.len() <= MAX_SHOWN_ARGS);
    CallEntry {
        id: call.id.clone(),
        name: call.name.clone(),
        args: shown.then(|| call.args.clone()),
        env: call.env.clone(),
        started: unix_now(),
    }
}

/// Now, in Unix seconds (0 on a clock before the epoch).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
