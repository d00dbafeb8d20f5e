//! One socket's outgoing side: a bounded queue other sockets push into and this socket's writer
//! drains, the control frames it owes, and how it ends. Also the process-wide memory ledger every
//! queue and reader is counted in.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use tokio::sync::Notify;

use super::codec::{close, OutFrame};
use super::metrics::RelayMetrics;
use super::reader::Meter;
use super::stream::DirectSink;
use crate::protocol;
use crate::protocol::relay;

/// The process-wide memory budget and the metrics every socket reports to.
///
/// The budget counts what clients can make the relay hold: parts queued for a socket, the part
/// being read, and a part waiting for room at its receiver. Over the budget, the oldest socket
/// holding more than its share is closed 1013 and its bytes freed at once.
pub(crate) struct Ledger {
    pub budget: usize,
    pub metrics: Arc<RelayMetrics>,
}

impl Ledger {
    fn charge(&self, bytes: usize) {
        if bytes > 0 {
            self.metrics.buffer(bytes);
        }
    }

    fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.metrics.unbuffer(bytes);
        }
    }

    /// True while more is held than the budget allows.
    pub(crate) fn over(&self) -> bool {
        self.metrics.buffered() > self.budget
    }
}

/// How a socket ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Send this close frame, then close the connection.
    Close { code: u16, reason: Cow<'static, str> },
    /// Answer the client's close frame (echoing its code), then close.
    Echo(Option<u16>),
    /// The connection is gone or useless: close it without a close frame.
    Abort,
}

impl End {
    /// A close frame with the relay's own reason.
    pub(crate) const fn close(code: u16, reason: &'static str) -> End {
        End::Close { code, reason: Cow::Borrowed(reason) }
    }

    /// The close frame to send, as code and reason.
    pub(crate) fn close_frame(&self) -> Option<(u16, &str)> {
        match self {
            End::Close { code, reason } => Some((*code, reason)),
            End::Echo(code) => Some((code.unwrap_or(close::NORMAL), "")),
            End::Abort => None,
        }
    }
}

/// The end of a socket whose reader fell behind.
pub(crate) const TOO_SLOW: End = End::close(protocol::close::TRY_AGAIN_LATER, "reader too slow");

/// What a socket's writer does next.
pub(crate) enum Action {
    Frame(OutFrame),
    Pong(Vec<u8>),
    Ping,
    Close(End),
}

/// Limits of one socket's outgoing queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueLimits {
    pub frames: usize,
    pub bytes: usize,
}

/// What became of a frame handed to a queue.
pub(crate) enum Push {
    Queued,
    /// Queued without waking the writer ([`SendQueue::push_corked`]).
    Corked,
    /// The queue is full: the frame comes back, to be retried once there is room.
    Full(OutFrame),
    /// The socket is ending; the frame was dropped.
    Dropped,
}

#[derive(Default)]
struct State {
    frames: VecDeque<OutFrame>,
    bytes: usize,
    /// Pings to answer, oldest first (at most [`MAX_PONGS`]).
    pongs: VecDeque<Vec<u8>>,
    ping: bool,
    end: Option<End>,
    /// The end to take once every queued frame is written (a close the agent asked for).
    end_when_sent: Option<End>,
    /// A fragmented message was begun and not finished in what was pushed.
    open_message: bool,
    /// A sender waits for room: wake it when a frame leaves the queue.
    room_wanted: bool,
    /// Bytes this socket's reader holds (the part being read, a part waiting for room).
    reader_bytes: usize,
    /// The socket's plain TCP write side, which a sender may write to at once; let go of at the end.
    sink: Option<DirectSink>,
    /// The writer holds something it took from the queue and has not finished writing.
    writing: bool,
    /// The first queued frame is the rest of one the socket took in part: it goes before anything
    /// else, and a socket ended before it went gets no close frame (it would land inside it).
    front_begun: bool,
    /// A reader queued frames without waking the writer: it writes them itself before it next
    /// waits ([`Cork`]).
    corked: bool,
}

impl State {
    fn has_room(&self, limits: &QueueLimits, len: usize) -> bool {
        // A frame always fits an empty queue, however large: the byte budget bounds a backlog.
        self.frames.len() < limits.frames && (self.bytes == 0 || self.bytes.saturating_add(len) <= limits.bytes)
    }

    /// The socket a frame may be written to now, by whoever hands it over: only while nothing is
    /// queued or being written before it, so bytes never interleave and order holds.
    fn sink_now(&self) -> Option<&DirectSink> {
        self.sink_between_writes().filter(|_| self.frames.is_empty())
    }

    /// Moves queued frames to `batch`, up to `max_frames` in it and `max_bytes` taken (a larger
    /// first frame still goes alone); gives the bytes taken.
    fn take_batch(&mut self, batch: &mut Vec<OutFrame>, max_frames: usize, max_bytes: usize) -> usize {
        let mut bytes = 0usize;
        while batch.len() < max_frames {
            let Some(len) = self.frames.front().map(OutFrame::len) else { break };
            if bytes > 0 && bytes + len > max_bytes {
                break;
            }
            bytes += len;
            self.bytes -= len;
            batch.extend(self.frames.pop_front());
        }
        bytes
    }

    /// The socket, while its writer holds nothing and owes no control frame: the frames queued
    /// (if any) are what goes next.
    fn sink_between_writes(&self) -> Option<&DirectSink> {
        let idle = !self.writing && !self.front_begun && self.pongs.is_empty() && !self.ping;
        self.sink.as_ref().filter(|_| idle && self.end.is_none() && self.end_when_sent.is_none())
    }
}

/// A socket's send queue.
pub(crate) struct SendQueue {
    state: Mutex<State>,
    writer_wake: Notify,
    /// Raised before `writer_wake` is notified: the writer's wait polls the notifier only then.
    writer_signal: AtomicBool,
    end_wake: Notify,
    room: Notify,
    /// Bytes written to the socket so far: a stalled reader is one whose count stands still.
    written: AtomicU64,
    /// Set (before `end_wake` is notified) once the end is decided.
    is_ended: AtomicBool,
    limits: QueueLimits,
    ledger: Arc<Ledger>,
}

/// Most queued frames written in one system call.
pub(crate) const MAX_BATCH_FRAMES: usize = 64;
/// Most queued bytes written in one system call (a larger single frame still goes alone).
pub(crate) const MAX_BATCH_BYTES: usize = 256 << 10;
/// Frames kept allocated in an idle queue; a queue that grew past this is shrunk once drained.
const IDLE_QUEUE_CAPACITY: usize = 8;
/// Presence notices a full queue still takes beyond its limit; more mean the reader is gone.
const NOTICE_ALLOWANCE: usize = 2 * super::MAX_PHONES_PER_CODE + 2;
/// Pings answered at once; a client sending more before reading keeps the latest.
pub(crate) const MAX_PONGS: usize = 16;

impl SendQueue {
    #[cfg(test)]
    pub(crate) fn new(limits: QueueLimits, ledger: Arc<Ledger>) -> Self {
        Self::with_sink(limits, ledger, None)
    }

    /// A queue whose frames may go straight into `sink` (the socket's plain TCP write side) when
    /// nothing waits before them: the sender writes them, and this socket's task is not woken.
    pub(crate) fn with_sink(limits: QueueLimits, ledger: Arc<Ledger>, sink: Option<DirectSink>) -> Self {
        SendQueue {
            state: Mutex::new(State { sink, ..State::default() }),
            writer_wake: Notify::new(),
            writer_signal: AtomicBool::new(false),
            end_wake: Notify::new(),
            room: Notify::new(),
            written: AtomicU64::new(0),
            is_ended: AtomicBool::new(false),
            limits,
            ledger,
        }
    }

    /// Bytes this socket holds against the memory budget.
    pub(crate) fn held(&self) -> usize {
        let state = self.state();
        state.bytes + state.reader_bytes
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Adds a frame to the queue, without waking the writer.
    fn queue_frame(&self, state: &mut State, frame: OutFrame) {
        // Only a phone's frames come in fragments (an agent's are whole messages, tagged).
        if frame.tag.is_none() {
            state.open_message = !frame.fin;
        }
        state.bytes += frame.len();
        self.ledger.charge(frame.len());
        state.frames.push_back(frame);
    }

    fn enqueue(&self, mut state: MutexGuard<'_, State>, frame: OutFrame) {
        self.queue_frame(&mut state, frame);
        drop(state);
        self.wake_writer();
    }

    /// Queues a data frame if there is room for it, or, when nothing waits before it, writes it to
    /// the socket at once (what the socket does not take at once is queued for its writer).
    pub(crate) fn push(&self, frame: OutFrame) -> Push {
        self.hand_over(frame, false)
    }

    /// Queues a data frame as [`SendQueue::push`] does, but where that would write it at once,
    /// leaves it queued without waking the writer: `Corked`, and the caller, holding the queue in
    /// its [`Cork`], writes it with whatever else it queues there meanwhile in one system call
    /// before it next waits. Frames other senders queue behind corked ones wake the writer as
    /// usual; it writes everything queued, corked or not.
    pub(crate) fn push_corked(&self, frame: OutFrame) -> Push {
        self.hand_over(frame, true)
    }

    fn hand_over(&self, frame: OutFrame, cork: bool) -> Push {
        let mut state = self.state();
        if state.end.is_some() || state.end_when_sent.is_some() {
            return Push::Dropped;
        }
        if !state.has_room(&self.limits, frame.len()) {
            state.room_wanted = true;
            return Push::Full(frame);
        }
        if cork && state.sink_between_writes().is_some() && (state.frames.is_empty() || state.corked) {
            state.corked = true;
            self.queue_frame(&mut state, frame);
            return Push::Corked;
        }
        let frame = match state.sink_now() {
            Some(sink) => {
                let open_message = frame.tag.is_none().then_some(!frame.fin);
                let (written, rest) = frame.try_write((**sink).as_ref());
                self.wrote(written);
                let Some(rest) = rest else {
                    state.open_message = open_message.unwrap_or(state.open_message);
                    return Push::Queued;
                };
                state.front_begun = written > 0;
                rest
            }
            None => frame,
        };
        self.enqueue(state, frame);
        Push::Queued
    }

    /// Writes the frames corked here at once, as many as the socket takes in one system call;
    /// what it does not take, or what cannot go now (the writer is busy, a control frame waits),
    /// is left to the writer, which is woken.
    pub(crate) fn uncork(&self) {
        let mut state = self.state();
        if !std::mem::take(&mut state.corked) || state.frames.is_empty() {
            return;
        }
        if let Some(sink) = state.sink_between_writes().cloned() {
            let mut batch = Vec::new();
            let bytes = state.take_batch(&mut batch, MAX_BATCH_FRAMES, MAX_BATCH_BYTES);
            self.ledger.release(bytes);
            let (written, rest) = super::codec::try_write_frames(batch, (*sink).as_ref());
            self.wrote(written);
            state.front_begun = rest.begun;
            for frame in rest.frames.into_iter().rev() {
                state.bytes += frame.len();
                self.ledger.charge(frame.len());
                state.frames.push_front(frame);
            }
            let pending = !state.frames.is_empty();
            self.after_pop(state);
            if pending {
                self.wake_writer();
            }
            return;
        }
        drop(state);
        self.wake_writer();
    }

    /// Queues a presence notice after the data before it. Notices never wait: a full queue takes
    /// a few more, and a reader that lets even those pile up is ended with 1013. A phone in the
    /// middle of a message from an agent that is gone now can never get the rest: it is closed.
    pub(crate) fn push_notice(&self, frame: OutFrame) {
        let state = self.state();
        if state.end.is_some() {
            return;
        }
        if state.open_message {
            drop(state);
            self.end(End::close(relay::close::PEER_GONE_MID_MESSAGE, "the agent left in the middle of a message"));
            return;
        }
        if state.frames.len() >= self.limits.frames + NOTICE_ALLOWANCE {
            drop(state);
            self.end(TOO_SLOW);
            return;
        }
        self.enqueue(state, frame);
    }

    /// Resolves when a frame of `len` bytes may fit, or the socket is ending.
    pub(crate) async fn room_for(&self, len: usize) {
        let notified = self.room.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut state = self.state();
            if state.end.is_some() || state.has_room(&self.limits, len) {
                return;
            }
            state.room_wanted = true;
        }
        notified.await;
    }

    /// Waits up to `stall_timeout` for room for a frame of `len` bytes. A reader that had nothing
    /// written to it in all that time is closed with 1013 ("reader too slow"): `false`.
    pub(crate) async fn room_or_stall(&self, len: usize, stall_timeout: std::time::Duration) -> bool {
        let written = self.written();
        if tokio::time::timeout(stall_timeout, self.room_for(len)).await.is_err() && self.written() == written {
            self.end(TOO_SLOW);
            return false;
        }
        true
    }

    /// Resolves once every queued frame went to the writer, or the socket is ending.
    pub(crate) async fn drained(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state();
                if state.end.is_some() || state.frames.is_empty() {
                    return;
                }
                state.room_wanted = true;
            }
            notified.await;
        }
    }

    /// Counts bytes the writer put on the wire.
    pub(crate) fn wrote(&self, bytes: usize) {
        self.written.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes written to the socket so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Asks the writer to answer a ping. Every ping gets its pong, in order; a client that sends
    /// more than [`MAX_PONGS`] before the writer catches up gets answers to the latest ones.
    pub(crate) fn pong(&self, payload: Vec<u8>) {
        let mut state = self.state();
        if state.end.is_none() {
            if state.pongs.len() == MAX_PONGS {
                state.pongs.pop_front();
            }
            state.pongs.push_back(payload);
            drop(state);
            self.wake_writer();
        }
    }

    /// Asks the writer to send a ping.
    pub(crate) fn ping(&self) {
        let mut state = self.state();
        if state.end.is_none() {
            state.ping = true;
            drop(state);
            self.wake_writer();
        }
    }

    /// Ends the socket once what is queued has been written; nothing more is queued meanwhile.
    pub(crate) fn end_when_sent(&self, end: End) {
        let mut state = self.state();
        if state.end.is_none() && state.end_when_sent.is_none() {
            state.end_when_sent = Some(end);
            drop(state);
            self.wake_writer();
        }
    }

    /// Ends the socket: the first reason wins, queued frames are dropped at once and everything
    /// the socket held leaves the memory budget.
    pub(crate) fn end(&self, end: End) {
        let mut state = self.state();
        if state.end.is_some() {
            return;
        }
        if let End::Close { code, .. } = &end {
            let code = *code;
            self.ledger.metrics.refused(code);
        }
        state.end = Some(end);
        self.is_ended.store(true, Ordering::Release);
        // The writer's shutdown sends FIN once it holds the socket alone.
        let sink = state.sink.take();
        state.pongs.clear();
        state.ping = false;
        self.ledger.release(state.bytes + state.reader_bytes);
        state.bytes = 0;
        state.reader_bytes = 0;
        let dropped = std::mem::take(&mut state.frames);
        drop(state);
        drop((dropped, sink));
        self.wake_writer();
        // Several tasks may wait (the socket, its reader, a sender waiting for room): wake all.
        self.end_wake.notify_waiters();
        self.room.notify_waiters();
    }

    /// How the socket ends, once that is decided.
    pub(crate) fn ended(&self) -> Option<End> {
        self.state().end.clone()
    }

    /// True once the end is decided.
    pub(crate) fn is_ended(&self) -> bool {
        self.is_ended.load(Ordering::Acquire)
    }

    /// Resolves once [`SendQueue::end`] has been called. A socket's task polls this on every
    /// wake-up, so polling it again costs one atomic load: the registration is renewed only when
    /// the waker changes, never under the notifier's lock.
    pub(crate) async fn ending(&self) {
        // Only `end` wakes this notifier, and it marks the queue ended first.
        let notified = self.end_wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        wait_until(notified, || self.is_ended()).await
    }

    /// The writer's next action without waiting. The writer asks once it has written what it took
    /// before: until then, nobody else writes to the socket.
    pub(crate) fn try_next(&self) -> Option<Action> {
        let mut state = self.state();
        state.writing = false;
        if let Some(end) = &state.end {
            return Some(Action::Close(if state.front_begun { End::Abort } else { end.clone() }));
        }
        if std::mem::take(&mut state.front_begun) {
            // The rest of a frame the socket took in part, before any pong or ping queued meanwhile.
            if let Some(rest) = state.frames.pop_front() {
                state.bytes -= rest.len();
                state.writing = true;
                self.ledger.release(rest.len());
                self.after_pop(state);
                return Some(Action::Frame(rest));
            }
        }
        if let Some(payload) = state.pongs.pop_front() {
            state.writing = true;
            return Some(Action::Pong(payload));
        }
        if std::mem::take(&mut state.ping) {
            state.writing = true;
            return Some(Action::Ping);
        }
        let Some(frame) = state.frames.pop_front() else {
            let end = state.end_when_sent.take()?;
            drop(state);
            self.end(end.clone());
            return Some(Action::Close(end));
        };
        state.bytes -= frame.len();
        state.writing = true;
        self.ledger.release(frame.len());
        self.after_pop(state);
        Some(Action::Frame(frame))
    }

    /// More queued data frames for the writer to send with the one it has, up to `max_frames` and
    /// `max_bytes` in all; none if a control frame or the end is waiting.
    pub(crate) fn take_more(&self, batch: &mut Vec<OutFrame>, max_frames: usize, max_bytes: usize) {
        let mut state = self.state();
        if state.end.is_some() || !state.pongs.is_empty() || state.ping {
            return;
        }
        let bytes = state.take_batch(batch, max_frames, max_bytes);
        self.ledger.release(bytes);
        if !batch.is_empty() {
            self.after_pop(state);
        }
    }

    fn after_pop(&self, mut state: MutexGuard<'_, State>) {
        if state.frames.is_empty() && state.frames.capacity() > IDLE_QUEUE_CAPACITY {
            state.frames.shrink_to(IDLE_QUEUE_CAPACITY);
        }
        if std::mem::take(&mut state.room_wanted) {
            drop(state);
            self.room.notify_waiters();
        }
    }

    /// The writer's next action, waiting for one.
    pub(crate) async fn next(&self) -> Action {
        loop {
            // `notify_one` leaves a permit when nobody waits yet, so no wake-up is lost between
            // the check and the wait; every `notify_one` raises the signal first.
            let notified = self.writer_wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            self.writer_signal.store(false, Ordering::Relaxed);
            if let Some(action) = self.try_next() {
                return action;
            }
            wait_until(notified, || self.writer_signal.load(Ordering::Acquire)).await;
        }
    }

    /// Wakes the writer.
    fn wake_writer(&self) {
        self.writer_signal.store(true, Ordering::Release);
        self.writer_wake.notify_one();
    }

    #[cfg(test)]
    pub(crate) fn queued(&self) -> (usize, usize) {
        let state = self.state();
        (state.frames.len(), state.bytes)
    }
}

impl Meter for SendQueue {
    fn grow(&self, bytes: usize) -> bool {
        let mut state = self.state();
        if state.end.is_some() {
            return false;
        }
        state.reader_bytes += bytes;
        self.ledger.charge(bytes);
        true
    }

    fn shrink(&self, bytes: usize) {
        let mut state = self.state();
        // An ended socket's bytes already left the budget.
        if state.end.is_none() {
            state.reader_bytes -= bytes.min(state.reader_bytes);
            self.ledger.release(bytes);
        }
    }
}

/// The queues one socket's reader corked ([`SendQueue::push_corked`]): the frames one read
/// brings for a receiver go to it in one system call, not one each. The reader corks while more
/// of what it read waits in its buffer (and then every frame up to the last of that read), and
/// releases the queues before it waits for anything (the stream, room at a receiver) and when it
/// stops. A read that brings one frame writes it at once, as if there were no cork.
#[derive(Default)]
pub(crate) struct Cork {
    held: Mutex<Vec<Arc<SendQueue>>>,
    /// `held` is not empty (read without its lock).
    holding: AtomicBool,
    /// The reader has more bytes read and not yet handed on.
    ahead: AtomicBool,
}

impl Cork {
    /// Whether the reader has more bytes read than it has handed on.
    pub(crate) fn read_ahead(&self, ahead: bool) {
        self.ahead.store(ahead, Ordering::Relaxed);
    }

    /// This cork, if the next frame should be corked: more of the read follows it, or frames
    /// before it are corked already.
    pub(crate) fn wanted(&self) -> Option<&Cork> {
        (self.ahead.load(Ordering::Relaxed) || self.holding.load(Ordering::Relaxed)).then_some(self)
    }

    /// Holds `queue` until the next release.
    pub(crate) fn hold(&self, queue: &Arc<SendQueue>) {
        let mut held = lock(&self.held);
        if !held.iter().any(|other| Arc::ptr_eq(other, queue)) {
            held.push(Arc::clone(queue));
        }
        self.holding.store(true, Ordering::Relaxed);
    }

    /// Writes what every held queue has corked, or wakes its writer to.
    pub(crate) fn release(&self) {
        if !self.holding.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut held = lock(&self.held);
        for queue in held.drain(..) {
            queue.uncork();
        }
    }
}

impl Drop for Cork {
    fn drop(&mut self) {
        self.release();
    }
}

/// Locks a mutex, ignoring poisoning: no code panics while holding these locks, and the state
/// they guard stays consistent between statements.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits for `wait` or for `ready()`, whichever comes first. A socket's task polls every wait it
/// is in on every wake-up, and polling a notifier takes its lock: this polls `wait` only when the
/// task's waker changed, and otherwise looks at `ready()` alone, which whoever wakes the wait makes
/// true first. A notifier must be enabled before it is handed over, so that nothing notified
/// between the first look at `ready()` and the first poll is lost.
pub(crate) async fn wait_until(wait: impl Future<Output = ()>, ready: impl Fn() -> bool) {
    tokio::pin!(wait);
    let mut registered: Option<Waker> = None;
    std::future::poll_fn(|cx| {
        if ready() {
            return Poll::Ready(());
        }
        if registered.as_ref().is_some_and(|waker| waker.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        let polled = wait.as_mut().poll(cx);
        if polled.is_pending() {
            registered = Some(cx.waker().clone());
        }
        polled
    })
    .await
}
