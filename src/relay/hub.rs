//! Who is connected: the map from relay code to the pair of sockets holding it, and each socket's
//! bounded outgoing queue. This is the relay's only shared state.

use std::collections::{HashMap, VecDeque};
use std::future::Future as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use tokio::sync::Notify;

use super::codec::{close, Meter, OutFrame};
use super::metrics::RelayMetrics;
use crate::protocol::{self, PeerNotice, PeerRole, PeerState};

/// The process-wide memory budget and the metrics every socket reports to.
///
/// The budget counts what clients can make the relay hold: messages queued for a socket, partial
/// messages being read, and a message waiting for room at its receiver. Over the budget, the
/// oldest socket holding more than its share is closed 1013 and its bytes freed at once.
pub(super) struct Ledger {
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
    pub(super) fn over(&self) -> bool {
        self.metrics.buffered() > self.budget
    }
}

/// How a socket ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// Send this close frame, then close the connection.
    Close { code: u16, reason: &'static str },
    /// Answer the client's close frame (echoing its code), then close.
    Echo(Option<u16>),
    /// The connection is gone or useless: close it without a close frame.
    Abort,
}

impl End {
    /// The close frame to send, as code and reason.
    pub(super) fn close_frame(self) -> Option<(u16, &'static str)> {
        match self {
            End::Close { code, reason } => Some((code, reason)),
            End::Echo(code) => Some((code.unwrap_or(close::NORMAL), "")),
            End::Abort => None,
        }
    }
}

/// What a socket's writer does next.
pub(super) enum Action {
    Frame(OutFrame),
    Pong(Vec<u8>),
    Ping,
    Close(End),
}

/// Limits of one socket's outgoing queue.
#[derive(Clone, Copy, Debug)]
pub(super) struct QueueLimits {
    pub frames: usize,
    pub bytes: usize,
}

/// What became of a frame handed to a queue.
pub(super) enum Push {
    Queued,
    /// The queue is full: the frame comes back, to be retried once there is room.
    Full(OutFrame),
    /// The socket is ending; the frame was dropped.
    Dropped,
}

#[derive(Default)]
struct OutboxState {
    frames: VecDeque<OutFrame>,
    bytes: usize,
    pong: Option<Vec<u8>>,
    ping: bool,
    end: Option<End>,
    /// A sender waits for room: wake it when a frame leaves the queue.
    room_wanted: bool,
    /// Bytes this socket's reader holds (partial messages, a message waiting for room).
    reader_bytes: usize,
}

impl OutboxState {
    fn has_room(&self, limits: &QueueLimits, len: usize) -> bool {
        // A frame always fits an empty queue, however large: the byte budget bounds a backlog.
        self.frames.len() < limits.frames && (self.bytes == 0 || self.bytes.saturating_add(len) <= limits.bytes)
    }
}

/// One socket's outgoing side: a bounded queue that other sockets push into and this socket's
/// writer drains, plus the control frames and the end it has been asked for.
pub(super) struct Outbox {
    state: Mutex<OutboxState>,
    writer_wake: Notify,
    end_wake: Notify,
    room: Notify,
    /// Bytes written to the socket so far: a stalled reader is one whose count stands still.
    written: AtomicU64,
    /// Set (before `end_wake` is notified) once the end is decided.
    is_ended: AtomicBool,
    limits: QueueLimits,
    ledger: Arc<Ledger>,
}

/// Frames kept allocated in an idle queue; a queue that grew past this is shrunk once drained.
const IDLE_QUEUE_CAPACITY: usize = 8;
/// Presence notices a full queue still takes beyond its limit; more mean the reader is gone.
const NOTICE_ALLOWANCE: usize = 8;

impl Outbox {
    pub(super) fn new(limits: QueueLimits, ledger: Arc<Ledger>) -> Self {
        Outbox {
            state: Mutex::new(OutboxState::default()),
            writer_wake: Notify::new(),
            end_wake: Notify::new(),
            room: Notify::new(),
            written: AtomicU64::new(0),
            is_ended: AtomicBool::new(false),
            limits,
            ledger,
        }
    }

    /// Bytes this socket holds against the memory budget.
    fn held(&self) -> usize {
        let state = self.state();
        state.bytes + state.reader_bytes
    }

    fn state(&self) -> MutexGuard<'_, OutboxState> {
        lock(&self.state)
    }

    /// Queues a data frame if there is room for it.
    pub(super) fn push(&self, frame: OutFrame) -> Push {
        let mut state = self.state();
        if state.end.is_some() {
            return Push::Dropped;
        }
        if !state.has_room(&self.limits, frame.payload.len()) {
            state.room_wanted = true;
            return Push::Full(frame);
        }
        state.bytes += frame.payload.len();
        self.ledger.charge(frame.payload.len());
        state.frames.push_back(frame);
        drop(state);
        self.writer_wake.notify_one();
        Push::Queued
    }

    /// Queues a presence notice. Notices never wait: a full queue takes a few more, and a reader
    /// that lets even those pile up is ended with 1013.
    pub(super) fn push_notice(&self, frame: OutFrame) {
        let mut state = self.state();
        if state.end.is_some() {
            return;
        }
        if state.frames.len() >= self.limits.frames + NOTICE_ALLOWANCE {
            drop(state);
            self.end(End::Close { code: protocol::close::TRY_AGAIN_LATER, reason: "reader too slow" });
            return;
        }
        state.bytes += frame.payload.len();
        self.ledger.charge(frame.payload.len());
        state.frames.push_back(frame);
        drop(state);
        self.writer_wake.notify_one();
    }

    /// Resolves when a frame of `len` bytes may fit, or the socket is ending.
    pub(super) async fn room_for(&self, len: usize) {
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
    pub(super) async fn room_or_stall(&self, len: usize, stall_timeout: std::time::Duration) -> bool {
        let written = self.written();
        if tokio::time::timeout(stall_timeout, self.room_for(len)).await.is_err() && self.written() == written {
            self.end(End::Close { code: protocol::close::TRY_AGAIN_LATER, reason: "reader too slow" });
            return false;
        }
        true
    }

    /// Resolves once every queued frame went to the writer, or the socket is ending.
    pub(super) async fn drained(&self) {
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
    pub(super) fn wrote(&self, bytes: usize) {
        self.written.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes written to the socket so far.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Asks the writer to answer a ping (only the latest one needs an answer).
    pub(super) fn pong(&self, payload: Vec<u8>) {
        let mut state = self.state();
        if state.end.is_none() {
            state.pong = Some(payload);
            drop(state);
            self.writer_wake.notify_one();
        }
    }

    /// Asks the writer to send a ping.
    pub(super) fn ping(&self) {
        let mut state = self.state();
        if state.end.is_none() {
            state.ping = true;
            drop(state);
            self.writer_wake.notify_one();
        }
    }

    /// Ends the socket: the first reason wins, queued frames are dropped at once and everything
    /// the socket held leaves the memory budget.
    pub(super) fn end(&self, end: End) {
        let mut state = self.state();
        if state.end.is_some() {
            return;
        }
        state.end = Some(end);
        self.is_ended.store(true, Ordering::Release);
        state.pong = None;
        state.ping = false;
        self.ledger.release(state.bytes + state.reader_bytes);
        state.bytes = 0;
        state.reader_bytes = 0;
        let dropped = std::mem::take(&mut state.frames);
        drop(state);
        drop(dropped);
        if let End::Close { code, .. } = end {
            self.ledger.metrics.refused(code);
        }
        self.writer_wake.notify_one();
        // Several tasks may wait (the socket, its reader, a sender waiting for room): wake all.
        self.end_wake.notify_waiters();
        self.room.notify_waiters();
    }

    /// How the socket ends, once that is decided.
    pub(super) fn ended(&self) -> Option<End> {
        self.state().end
    }

    /// Resolves once [`Outbox::end`] has been called. A socket's task polls this on every
    /// wake-up, so polling it again costs one atomic load: the registration is renewed only when
    /// the waker changes, never under the notifier's lock.
    pub(super) async fn ending(&self) {
        let notified = self.end_wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let mut registered: Option<Waker> = None;
        std::future::poll_fn(|cx| {
            if self.is_ended.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            if registered.as_ref().is_some_and(|waker| waker.will_wake(cx.waker())) {
                return Poll::Pending;
            }
            // Only `end` wakes this notifier, and it marks the outbox ended first.
            let polled = notified.as_mut().poll(cx);
            if polled.is_pending() {
                registered = Some(cx.waker().clone());
            }
            polled
        })
        .await
    }

    /// The writer's next action without waiting.
    pub(super) fn try_next(&self) -> Option<Action> {
        let mut state = self.state();
        if let Some(end) = state.end {
            return Some(Action::Close(end));
        }
        if let Some(payload) = state.pong.take() {
            return Some(Action::Pong(payload));
        }
        if std::mem::take(&mut state.ping) {
            return Some(Action::Ping);
        }
        let frame = state.frames.pop_front()?;
        state.bytes -= frame.payload.len();
        self.ledger.release(frame.payload.len());
        self.after_pop(state);
        Some(Action::Frame(frame))
    }

    /// More queued data frames for the writer to send with the one it has, up to `max_frames` and
    /// `max_bytes` in all; none if a control frame or the end is waiting.
    pub(super) fn take_more(&self, batch: &mut Vec<OutFrame>, max_frames: usize, max_bytes: usize) {
        let mut state = self.state();
        if state.end.is_some() || state.pong.is_some() || state.ping {
            return;
        }
        let mut bytes = 0usize;
        while batch.len() < max_frames {
            let Some(len) = state.frames.front().map(|frame| frame.payload.len()) else { break };
            if bytes > 0 && bytes + len > max_bytes {
                break;
            }
            bytes += len;
            state.bytes -= len;
            batch.extend(state.frames.pop_front());
        }
        self.ledger.release(bytes);
        if !batch.is_empty() {
            self.after_pop(state);
        }
    }

    fn after_pop(&self, mut state: MutexGuard<'_, OutboxState>) {
        if state.frames.is_empty() && state.frames.capacity() > IDLE_QUEUE_CAPACITY {
            state.frames.shrink_to(IDLE_QUEUE_CAPACITY);
        }
        if std::mem::take(&mut state.room_wanted) {
            drop(state);
            self.room.notify_waiters();
        }
    }

    /// The writer's next action, waiting for one.
    pub(super) async fn next(&self) -> Action {
        loop {
            // `notify_one` leaves a permit when nobody waits yet, so no wake-up is lost between
            // the check and the await.
            let notified = self.writer_wake.notified();
            if let Some(action) = self.try_next() {
                return action;
            }
            notified.await;
        }
    }

    #[cfg(test)]
    fn queued(&self) -> (usize, usize) {
        let state = self.state();
        (state.frames.len(), state.bytes)
    }
}

impl Meter for Outbox {
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

/// A socket holding one role of a pairing.
struct Member {
    conn: u64,
    outbox: Arc<Outbox>,
}

/// The two roles of one relay code.
#[derive(Default)]
pub(super) struct Slot {
    members: Mutex<[Option<Member>; 2]>,
}

fn index(role: PeerRole) -> usize {
    match role {
        PeerRole::Agent => 0,
        PeerRole::Phone => 1,
    }
}

fn other(role: PeerRole) -> PeerRole {
    match role {
        PeerRole::Agent => PeerRole::Phone,
        PeerRole::Phone => PeerRole::Agent,
    }
}

fn notice(peer: PeerRole, state: PeerState) -> OutFrame {
    OutFrame::text(PeerNotice::new(peer, state).to_json())
}

/// Outcome of [`Hub::forward`].
pub(super) enum Forward {
    /// Queued for the other side, or dropped because nobody is there to take it.
    Done,
    /// The other side's queue is full.
    Full(OutFrame, Arc<Outbox>),
}

/// Relay codes to their slots. Locks are taken in one order: map, then slot, then outbox.
pub(super) struct Hub {
    slots: Mutex<HashMap<u128, Arc<Slot>>>,
    pub ledger: Arc<Ledger>,
}

impl Hub {
    pub(super) fn new(ledger: Arc<Ledger>) -> Self {
        Hub { slots: Mutex::default(), ledger }
    }

    pub(super) fn metrics(&self) -> &RelayMetrics {
        &self.ledger.metrics
    }

    /// While the memory budget is exceeded, closes (1013) the oldest socket that holds more than
    /// an even share of what is held; its bytes leave the budget at once.
    pub(super) fn enforce_budget(&self) {
        while self.ledger.over() {
            let sockets: Vec<(u64, Arc<Outbox>)> = lock(&self.slots)
                .values()
                .flat_map(|slot| {
                    lock(&slot.members).iter().flatten().map(|m| (m.conn, Arc::clone(&m.outbox))).collect::<Vec<_>>()
                })
                .collect();
            let share = self.ledger.metrics.buffered() / sockets.len().max(1);
            let oldest = sockets
                .into_iter()
                .filter(|(_, outbox)| outbox.ended().is_none() && outbox.held() > share)
                .min_by_key(|(conn, _)| *conn);
            let Some((_, outbox)) = oldest else { return };
            tracing::debug!("memory budget exceeded; closing the oldest socket holding more than its share");
            outbox.end(End::Close { code: protocol::close::TRY_AGAIN_LATER, reason: "relay memory budget exceeded" });
        }
    }

    /// Installs a socket as `role` of `code` and tells both sides about each other.
    ///
    /// A socket already holding that role is replaced: it is closed with 4001 `replaced`, and the
    /// other side, if present, hears `left` for the old socket and then `joined` for the new one,
    /// so it knows to start its session again (the new socket has seen none of it).
    pub(super) fn join(&self, code: u128, role: PeerRole, conn: u64, outbox: &Arc<Outbox>) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        let slot = Arc::clone(slots.entry(code).or_default());
        let mut members = lock(&slot.members);
        let previous = members[index(role)].replace(Member { conn, outbox: Arc::clone(outbox) });
        let peer = members[index(other(role))].as_ref().map(|member| &member.outbox);
        if previous.is_none() && peer.is_some() {
            self.metrics().pair_formed();
        }
        if let Some(previous) = previous {
            previous.outbox.end(End::Close { code: protocol::close::REPLACED, reason: "replaced" });
            if let Some(peer) = peer {
                peer.push_notice(notice(role, PeerState::Left));
            }
        }
        if let Some(peer) = peer {
            peer.push_notice(notice(role, PeerState::Joined));
            outbox.push_notice(notice(other(role), PeerState::Joined));
        }
        drop(members);
        slot
    }

    /// Removes a socket from its slot (unless a newer one replaced it) and tells the other side.
    pub(super) fn leave(&self, code: u128, slot: &Arc<Slot>, role: PeerRole, conn: u64) {
        let mut slots = lock(&self.slots);
        let mut members = lock(&slot.members);
        let own = &mut members[index(role)];
        if own.as_ref().is_some_and(|member| member.conn == conn) {
            *own = None;
            if let Some(peer) = &members[index(other(role))] {
                peer.outbox.push_notice(notice(role, PeerState::Left));
                self.metrics().pair_broken();
            }
        }
        let empty = members.iter().all(Option::is_none);
        drop(members);
        if empty && slots.get(&code).is_some_and(|current| Arc::ptr_eq(current, slot)) {
            slots.remove(&code);
        }
    }

    /// Hands a frame from the socket `conn` (holding `role`) to the other side, if there is one.
    /// Frames from a replaced socket and frames with nobody to receive them are dropped; a frame
    /// for a full queue comes back with that queue, for the caller to wait on.
    pub(super) fn forward(&self, slot: &Slot, role: PeerRole, conn: u64, frame: OutFrame) -> Forward {
        // Pushing under the slot lock keeps a replaced socket's late frames from landing after
        // the notices about its replacement.
        let members = lock(&slot.members);
        if members[index(role)].as_ref().is_none_or(|member| member.conn != conn) {
            return Forward::Done;
        }
        let Some(peer) = &members[index(other(role))] else { return Forward::Done };
        let len = frame.payload.len();
        match peer.outbox.push(frame) {
            Push::Full(frame) => Forward::Full(frame, Arc::clone(&peer.outbox)),
            Push::Queued => {
                self.metrics().forwarded(role, len);
                Forward::Done
            }
            Push::Dropped => Forward::Done,
        }
    }

    /// Relay codes with at least one socket.
    #[cfg(test)]
    fn codes(&self) -> usize {
        lock(&self.slots).len()
    }
}

/// Locks a mutex, ignoring poisoning: no code panics while holding these locks, and the state
/// they guard stays consistent between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt as _;

    use super::*;

    const LIMITS: QueueLimits = QueueLimits { frames: 4, bytes: 100 };

    fn ledger() -> Arc<Ledger> {
        Arc::new(Ledger { budget: usize::MAX, metrics: Arc::default() })
    }

    fn drain(outbox: &Outbox) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(action) = outbox.try_next() {
            match action {
                Action::Frame(frame) => out.push(String::from_utf8(frame.payload).unwrap()),
                Action::Close(end) => {
                    out.push(format!("close {end:?}"));
                    break;
                }
                Action::Ping => out.push("ping".into()),
                Action::Pong(_) => out.push("pong".into()),
            }
        }
        out
    }

    fn joined(peer: &str) -> String {
        format!(r#"{{"type":"__peer","peer":"{peer}","state":"joined"}}"#)
    }

    fn left(peer: &str) -> String {
        format!(r#"{{"type":"__peer","peer":"{peer}","state":"left"}}"#)
    }

    fn queued(outbox: &Outbox, frame: OutFrame) -> bool {
        matches!(outbox.push(frame), Push::Queued)
    }

    #[test]
    fn queue_is_bounded_by_frames_and_bytes_and_ending_frees_it() {
        let outbox = Outbox::new(LIMITS, ledger());
        for _ in 0..4 {
            assert!(queued(&outbox, OutFrame::binary(vec![0; 10])));
        }
        assert_eq!(outbox.queued(), (4, 40));
        assert!(matches!(outbox.push(OutFrame::binary(vec![0; 10])), Push::Full(frame) if frame.payload.len() == 10));
        assert_eq!(outbox.queued(), (4, 40), "a full queue takes no more data");
        for _ in 0..NOTICE_ALLOWANCE {
            outbox.push_notice(OutFrame::text("n".into()));
        }
        assert!(outbox.ended().is_none(), "a few notices still fit");
        outbox.push_notice(OutFrame::text("n".into()));
        assert_eq!(outbox.ended(), Some(End::Close { code: 1013, reason: "reader too slow" }));
        assert_eq!(outbox.queued(), (0, 0), "ending frees the queue");
        assert!(matches!(outbox.push(OutFrame::binary(vec![0; 10])), Push::Dropped));

        let outbox = Outbox::new(LIMITS, ledger());
        assert!(queued(&outbox, OutFrame::binary(vec![0; 500])), "one large frame fits an empty queue");
        assert!(matches!(outbox.push(OutFrame::binary(vec![0; 1])), Push::Full(_)), "nothing queues behind it");
        assert!(matches!(outbox.try_next(), Some(Action::Frame(_))));
        assert!(queued(&outbox, OutFrame::binary(vec![0; 100])));
    }

    #[tokio::test]
    async fn a_full_queue_wakes_its_sender_when_a_frame_leaves_or_it_ends() {
        let outbox = Outbox::new(LIMITS, ledger());
        for _ in 0..4 {
            assert!(queued(&outbox, OutFrame::binary(vec![0; 1])));
        }
        let mut waiting = Box::pin(outbox.room_for(1));
        assert!((&mut waiting).now_or_never().is_none(), "no room yet");
        assert!(matches!(outbox.try_next(), Some(Action::Frame(_))));
        assert!(waiting.now_or_never().is_some(), "room after one frame left");

        assert!(queued(&outbox, OutFrame::binary(vec![0; 1])));
        let mut waiting = Box::pin(outbox.room_for(1));
        assert!((&mut waiting).now_or_never().is_none());
        outbox.end(End::Abort);
        assert!(waiting.now_or_never().is_some(), "an ending socket releases its senders");
    }

    #[tokio::test]
    async fn ending_wakes_a_task_that_polled_it_before_the_end() {
        let outbox = Arc::new(Outbox::new(LIMITS, ledger()));
        let poke = Arc::new(Notify::new());
        let waiter = tokio::spawn({
            let (outbox, poke) = (Arc::clone(&outbox), Arc::clone(&poke));
            async move {
                let ending = outbox.ending();
                tokio::pin!(ending);
                loop {
                    tokio::select! {
                        () = &mut ending => return,
                        // Woken for something else: `ending` is polled again with the same waker.
                        () = poke.notified() => {}
                    }
                }
            }
        });
        for _ in 0..3 {
            poke.notify_one();
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished(), "not ended yet");
        outbox.end(End::Abort);
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("the end woke the waiter").unwrap();
        assert!(outbox.ending().now_or_never().is_some(), "an ended outbox resolves at once");
    }

    #[test]
    fn batches_stop_at_their_limits_and_before_control_frames() {
        let outbox = Outbox::new(QueueLimits { frames: 10, bytes: 1000 }, ledger());
        for len in [10, 10, 10, 50, 10] {
            assert!(queued(&outbox, OutFrame::binary(vec![0; len])));
        }
        let mut batch = Vec::new();
        outbox.take_more(&mut batch, 2, 1000);
        assert_eq!(batch.len(), 2, "frame limit");
        batch.clear();
        outbox.take_more(&mut batch, 10, 40);
        assert_eq!(batch.iter().map(|f| f.payload.len()).collect::<Vec<_>>(), [10], "byte limit");
        batch.clear();
        outbox.ping();
        outbox.take_more(&mut batch, 10, 1000);
        assert!(batch.is_empty(), "a waiting ping goes first");
        assert!(matches!(outbox.try_next(), Some(Action::Ping)));
        outbox.take_more(&mut batch, 10, 1000);
        assert_eq!(batch.len(), 2);
        assert_eq!(outbox.queued(), (0, 0));
    }

    #[test]
    fn control_frames_go_first_and_the_end_before_everything() {
        let outbox = Outbox::new(LIMITS, ledger());
        assert!(queued(&outbox, OutFrame::text("a".into())));
        outbox.ping();
        outbox.pong(vec![1]);
        assert_eq!(drain(&outbox), ["pong", "ping", "a"]);
        assert!(queued(&outbox, OutFrame::text("b".into())));
        outbox.end(End::Abort);
        outbox.end(End::Echo(None));
        assert_eq!(drain(&outbox), ["close Abort"]);
    }

    #[test]
    fn pairing_notices_replacement_and_leaving() {
        let hub = Hub::new(ledger());
        let agent = Arc::new(Outbox::new(LIMITS, ledger()));
        let slot = hub.join(7, PeerRole::Agent, 1, &agent);
        assert!(drain(&agent).is_empty(), "alone: no notice");

        let phone = Arc::new(Outbox::new(LIMITS, ledger()));
        let phone_slot = hub.join(7, PeerRole::Phone, 2, &phone);
        assert!(Arc::ptr_eq(&slot, &phone_slot));
        assert_eq!(drain(&agent), [joined("phone")]);
        assert_eq!(drain(&phone), [joined("agent")]);

        assert!(matches!(hub.forward(&slot, PeerRole::Agent, 1, OutFrame::text("hi".into())), Forward::Done));
        assert_eq!(drain(&phone), ["hi"]);
        for i in 0..LIMITS.frames {
            assert!(matches!(hub.forward(&slot, PeerRole::Agent, 1, OutFrame::text(i.to_string())), Forward::Done));
        }
        match hub.forward(&slot, PeerRole::Agent, 1, OutFrame::text("one more".into())) {
            Forward::Full(frame, queue) => assert!(frame.payload == b"one more" && Arc::ptr_eq(&queue, &phone)),
            Forward::Done => panic!("a full queue must hand the frame back"),
        }
        assert_eq!(drain(&phone), ["0", "1", "2", "3"]);

        let agent2 = Arc::new(Outbox::new(LIMITS, ledger()));
        hub.join(7, PeerRole::Agent, 3, &agent2);
        assert_eq!(agent.ended(), Some(End::Close { code: 4001, reason: "replaced" }));
        assert_eq!(drain(&phone), [left("agent"), joined("agent")]);
        assert_eq!(drain(&agent2), [joined("phone")]);

        assert!(matches!(hub.forward(&slot, PeerRole::Agent, 1, OutFrame::text("stale".into())), Forward::Done));
        assert!(drain(&phone).is_empty(), "a replaced socket's frames are dropped");
        hub.leave(7, &slot, PeerRole::Agent, 1);
        assert!(drain(&phone).is_empty(), "a replaced socket leaving says nothing");

        hub.leave(7, &slot, PeerRole::Phone, 2);
        assert_eq!(drain(&agent2), [left("phone")]);
        assert!(matches!(hub.forward(&slot, PeerRole::Agent, 3, OutFrame::text("nobody".into())), Forward::Done));

        assert_eq!(hub.codes(), 1);
        hub.leave(7, &slot, PeerRole::Agent, 3);
        assert_eq!(hub.codes(), 0, "an empty slot is removed");
    }
}
