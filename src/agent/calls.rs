//! The call table of one pairing: tool calls belong to the pairing (the caller a hello proved),
//! not to the socket that asked for them. A session that ends without `cancel` leaves its calls
//! running to their own end; their output is kept, bounded, and handed to the sessions of the same
//! pairing that ask (`calls`). The frames are described in docs/PROTOCOL.md, "Calls outlive the
//! connection".
//!
//! A frame sent again is answered again, never applied twice (docs/PROTOCOL.md, "Receipts"): the
//! table remembers, for a while, the ids of the calls it ran and the receipts it gave. A
//! `tool_call` whose id is running attaches to it; one whose id finished gets its result again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::{
    AgentMessage, CallEntry, CallsFrame, ErrorCode, Frame, Receipt, ToolCall, ToolError, ToolResult,
};

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
/// Ids of finished calls, and receipts, a pairing remembers: at most this many of each…
pub const REMEMBERED_IDS: usize = 512;
/// …for at most this long.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(600);
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
    /// Ids of the calls that finished, newest last, whether or not their frames are still kept.
    ran: Remembered<()>,
    /// Receipts given, newest last.
    receipts: Remembered<Receipt>,
}

/// What a pairing remembers of ids it answered: bounded by [`REMEMBERED_IDS`] and [`REMEMBERED_FOR`].
struct Remembered<T> {
    entries: VecDeque<(String, Instant, T)>,
}

impl<T> Default for Remembered<T> {
    fn default() -> Self {
        Remembered { entries: VecDeque::new() }
    }
}

impl<T> Remembered<T> {
    fn forget_old(&mut self) {
        while self.entries.front().is_some_and(|(_, at, _)| at.elapsed() > REMEMBERED_FOR) {
            self.entries.pop_front();
        }
    }

    fn get(&mut self, id: &str) -> Option<&T> {
        self.forget_old();
        self.entries.iter().find(|(known, _, _)| known == id).map(|(_, _, value)| value)
    }

    fn add(&mut self, id: String, value: T) {
        self.forget_old();
        self.entries.retain(|(known, _, _)| *known != id);
        if self.entries.len() >= REMEMBERED_IDS {
            self.entries.pop_front();
        }
        self.entries.push_back((id, Instant::now(), value));
    }
}

struct Running {
    entry: CallEntry,
    origin: ListenerId,
    cancel: CancellationToken,
    /// Other sessions that sent this call again and hear its frames too.
    watchers: Vec<ListenerId>,
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
    Busy(usize),
    /// The pairing already ran (or runs) a call with this id: it was answered again instead.
    AnsweredAgain,
}

impl Refused {
    pub fn error(&self, id: &str) -> ToolError {
        match self {
            Refused::Busy(running) => {
                ToolError::new(ErrorCode::Busy, format!("{running} calls are already running; wait for one to finish"))
            }
            Refused::AnsweredAgain => {
                ToolError::new(ErrorCode::DuplicateId, format!("call {id:?} already ran; its result is no longer kept"))
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

    /// Enters a call started by `origin`, unless `limit` calls already run. The other sessions
    /// that asked hear of it in a `calls` frame. A call whose id the pairing runs or ran is not
    /// started again: `origin` gets its frames ([`Refused::AnsweredAgain`]).
    pub async fn start(
        &self,
        call: &ToolCall,
        origin: ListenerId,
        cancel: CancellationToken,
        limit: usize,
    ) -> Result<(), Refused> {
        let mut table = self.table.lock().await;
        if self.again(&mut table, &call.id, origin).await {
            return Err(Refused::AnsweredAgain);
        }
        if table.running.len() >= limit {
            return Err(Refused::Busy(table.running.len()));
        }
        let entry = entry_of(call);
        let announce = AgentMessage::Calls(CallsFrame { running: vec![entry.clone()], ..Default::default() });
        let running =
            Running { entry, origin, cancel, watchers: Vec::new(), progress: String::new(), progress_dropped: 0 };
        table.running.insert(call.id.clone(), running);
        self.deliver(&[origin], &[Frame::from(announce)], Audience::Others).await;
        Ok(())
    }

    /// A call sent again by `listener`: running, it attaches (its output so far, then the rest);
    /// finished and kept, its frames again; finished and no longer kept, a `duplicate-id` result.
    /// False when the pairing never ran this id (or forgot it).
    async fn again(&self, table: &mut Table, id: &str, listener: ListenerId) -> bool {
        let hears_all = {
            let listeners = self.listeners.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            listeners.iter().any(|l| l.id == listener && l.all)
        };
        if let Some(running) = table.running.get_mut(id) {
            if running.origin == listener || hears_all || running.watchers.contains(&listener) {
                return true; // It hears this call already.
            }
            running.watchers.push(listener);
            if running.progress.is_empty() {
                return true;
            }
            let (chunk, env) = (running.progress.clone(), running.entry.env.clone());
            let frame = Frame::from(AgentMessage::ToolProgress { id: id.to_owned(), chunk, env });
            self.deliver_to(listener, &[frame]).await;
            return true;
        }
        if let Some(finished) = table.finished.iter().find(|call| call.entry.id == id) {
            let frames = finished.frames.clone();
            self.deliver_to(listener, &frames).await;
            return true;
        }
        if table.ran.get(id).is_some() {
            let result = ToolResult::failure(id.to_owned(), Refused::AnsweredAgain.error(id));
            self.deliver_to(listener, &[Frame::from(AgentMessage::ToolResult(result))]).await;
            return true;
        }
        false
    }

    /// The receipt already given under `id`, if the pairing remembers it.
    pub async fn receipt(&self, id: &str) -> Option<Receipt> {
        self.table.lock().await.receipts.get(id).cloned()
    }

    /// Remembers a receipt given, for the same frame sent again.
    pub async fn remember_receipt(&self, receipt: &Receipt) {
        self.table.lock().await.receipts.add(receipt.id.clone(), receipt.clone());
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
        let own: Vec<ListenerId> = std::iter::once(running.origin).chain(running.watchers.iter().copied()).collect();
        self.deliver(&own, &[frame], Audience::All).await;
    }

    /// The call ended with these frames (its image, if any, and its result): delivered, then kept
    /// for the sessions that have not seen it.
    pub async fn finish(&self, id: &str, frames: Vec<Frame>) {
        let mut table = self.table.lock().await;
        let Some(running) = table.running.remove(id) else { return };
        let own: Vec<ListenerId> = std::iter::once(running.origin).chain(running.watchers.iter().copied()).collect();
        self.deliver(&own, &frames, Audience::All).await;
        table.ran.add(id.to_owned(), ());
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

    /// Sends `frames` to the listeners `audience` names (`own`: the call's sessions), dropping
    /// those that are gone or that held the pairing's output up too long.
    async fn deliver(&self, own: &[ListenerId], frames: &[Frame], audience: Audience) {
        let targets: Vec<(ListenerId, mpsc::WeakSender<Frame>)> = {
            let listeners = self.listeners.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            listeners
                .iter()
                .filter(|l| match audience {
                    Audience::All => l.all || own.contains(&l.id),
                    Audience::Others => l.all && !own.contains(&l.id),
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
