//! Following sessions: every event after the follower's `after` seqs, replayed from the store and
//! then live, each exactly once and in order per session. Live events come through a bounded
//! broadcast; a follower that falls behind, or sees a gap, reads the missing events back from the
//! store (they are committed before they are broadcast), so nothing is lost, nothing repeats, and
//! a slow follower costs no memory.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::event::MAX_TEXT_LEN;
use super::store::Store;
use crate::protocol::{Event, SessionEvent};

/// Live events buffered for followers before a slow one falls back to the store.
pub const LIVE_BUFFER: usize = 1024;
/// Events read from the store at a time while catching up.
const REPLAY_PAGE: usize = 256;

/// One client's view of every session.
pub struct Follower {
    store: Arc<Store>,
    live: broadcast::Receiver<SessionEvent>,
    /// The last seq delivered, per session.
    delivered: HashMap<String, u64>,
    /// Sessions with events in the store not delivered yet.
    behind: VecDeque<String>,
    ready: VecDeque<SessionEvent>,
    /// The user looks while this follower lives.
    _look: Option<super::brief::Look>,
}

impl Follower {
    /// Follows every session from `after` (a session not named there from its start). Subscribes
    /// before it looks at the store, so nothing recorded meanwhile is missed.
    pub(crate) fn new(
        store: Arc<Store>,
        live: broadcast::Receiver<SessionEvent>,
        after: &HashMap<String, u64>,
    ) -> Self {
        let mut follower = Follower {
            store,
            live,
            delivered: HashMap::new(),
            behind: VecDeque::new(),
            ready: VecDeque::new(),
            _look: None,
        };
        for (session, seq) in after {
            follower.delivered.insert(session.clone(), *seq);
        }
        follower.catch_up_all();
        follower
    }

    /// The same follower, counting as the user looking while it lives.
    pub(crate) fn watched(mut self, look: super::brief::Look) -> Self {
        self._look = Some(look);
        self
    }

    fn catch_up_all(&mut self) {
        match self.store.last_seqs() {
            Ok(last) => {
                for (session, last_seq) in last {
                    let delivered = self.delivered.get(&session).copied().unwrap_or(0);
                    if last_seq > delivered && !self.behind.contains(&session) {
                        self.behind.push_back(session);
                    }
                }
            }
            Err(err) => warn!("could not list sessions to replay: {err:#}"),
        }
    }

    /// The next event; `None` once the host is gone.
    pub async fn next(&mut self) -> Option<SessionEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                let delivered = self.delivered.entry(event.session.clone()).or_insert(0);
                if event.seq <= *delivered {
                    continue;
                }
                *delivered = event.seq;
                return Some(event);
            }
            if let Some(session) = self.behind.front().cloned() {
                let after = self.delivered.get(&session).copied().unwrap_or(0);
                match self.store.events(&session, after, REPLAY_PAGE) {
                    Ok(page) if !page.is_empty() => self.ready.extend(page),
                    Ok(_) => {
                        self.behind.pop_front();
                    }
                    Err(err) => {
                        warn!("could not replay session {session}: {err:#}");
                        self.behind.pop_front();
                    }
                }
                continue;
            }
            match self.live.recv().await {
                Ok(event) => {
                    let delivered = self.delivered.get(&event.session).copied().unwrap_or(0);
                    if event.seq == delivered + 1 {
                        self.ready.push_back(event);
                    } else if event.seq > delivered + 1 && !self.behind.contains(&event.session) {
                        // A gap: the store has what came between.
                        self.behind.push_back(event.session);
                    }
                }
                Err(RecvError::Lagged(_)) => self.catch_up_all(),
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// Most sessions a `follow` frame's `after` may name; the rest are replayed from their start.
pub const MAX_AFTER: usize = 1024;

/// The `after` marks of a `follow` frame: `{"<session>": <seq>, …}`; anything else is ignored.
pub fn after_marks(after: Option<&serde_json::Value>) -> HashMap<String, u64> {
    let Some(serde_json::Value::Object(marks)) = after else { return HashMap::new() };
    marks
        .iter()
        .filter_map(|(session, seq)| Some((crate::text::prefix(session, 64).to_owned(), seq.as_u64()?)))
        .take(MAX_AFTER)
        .collect()
}

/// Most environments a `follow` frame's `after` may name.
pub const MAX_ENV_AFTER: usize = 64;

/// The marks of a host's environments in a `follow` frame's `after`: each envKey's own object
/// of marks, `{"<envKey>": {"<session>": <seq>, …}, …}` beside this machine's (docs/PROTOCOL.md,
/// "Environments"); anything else is ignored.
pub fn env_after_marks(after: Option<&serde_json::Value>) -> HashMap<String, HashMap<String, u64>> {
    let Some(serde_json::Value::Object(marks)) = after else { return HashMap::new() };
    marks
        .iter()
        .filter(|(_, marks)| marks.is_object())
        .map(|(env, marks)| (crate::text::prefix(env, 128).to_owned(), after_marks(Some(marks))))
        .take(MAX_ENV_AFTER)
        .collect()
}

/// How often, at most, a low-data follower gets a session's streamed text.
pub const LOW_DATA_EVERY: Duration = Duration::from_millis(250);

/// Sends every event `follower` yields, mapped by `map`, until `cancel` or the receiver closes.
/// With `low_data`, streamed text is held back and merged (see [`Merged`]).
pub async fn forward<T>(
    mut follower: Follower,
    out: mpsc::Sender<T>,
    cancel: CancellationToken,
    low_data: bool,
    map: impl Fn(&SessionEvent) -> T,
) {
    let mut merged = Merged::default();
    loop {
        let due = merged.due();
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            () = out.closed() => return,
            () = sleep_until(due) => {
                for event in merged.take_due(Instant::now()) {
                    if out.send(map(&event)).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            event = follower.next() => event,
        };
        let Some(event) = event else { return };
        let ready = if low_data { merged.offer(event, Instant::now()) } else { vec![event] };
        for event in ready {
            if out.send(map(&event)).await.is_err() {
                return;
            }
        }
    }
}

/// Waits until `due`, or for ever.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}

/// A low-data follower's streamed text, held back per session: the partial `text` events that
/// come within [`LOW_DATA_EVERY`] of the first go as one (the seq and time of the last), and
/// those the whole text overtakes are not sent at all. Any other event of the session sends what
/// is held first, so each session's events keep their order; nothing but partial text is held.
#[derive(Default)]
pub struct Merged {
    held: HashMap<String, (SessionEvent, Instant)>,
}

impl Merged {
    /// What to send now that `event` came (at `now`).
    pub fn offer(&mut self, event: SessionEvent, now: Instant) -> Vec<SessionEvent> {
        if let Event::Text { text, partial: true } = &event.event {
            let Some((mut merged, due)) = self.held.remove(&event.session) else {
                self.held.insert(event.session.clone(), (event, now + LOW_DATA_EVERY));
                return Vec::new();
            };
            if let Event::Text { text: so_far, .. } = &mut merged.event {
                if so_far.len() + text.len() > MAX_TEXT_LEN {
                    self.held.insert(event.session.clone(), (event, now + LOW_DATA_EVERY));
                    return vec![merged];
                }
                so_far.push_str(text);
            }
            merged.seq = event.seq;
            merged.at = event.at;
            self.held.insert(event.session, (merged, due));
            return Vec::new();
        }
        let held = self.held.remove(&event.session);
        match (held, &event.event) {
            // The whole text is on its way: the pieces of it held back are not needed.
            (Some(_), Event::Text { partial: false, .. }) | (None, _) => vec![event],
            (Some((held, _)), _) => vec![held, event],
        }
    }

    /// When the next held text is due.
    pub fn due(&self) -> Option<Instant> {
        self.held.values().map(|(_, due)| *due).min()
    }

    /// The held texts due by `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<SessionEvent> {
        let due: Vec<String> =
            self.held.iter().filter(|(_, (_, at))| *at <= now).map(|(session, _)| session.clone()).collect();
        due.into_iter().filter_map(|session| self.held.remove(&session)).map(|(event, _)| event).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_follow_names_this_machines_marks_and_each_environments_apart() {
        let after = json!({"s-1": 17, "ab12": {"s-9": 4, "s-8": "x"}, "cd34": 5, "ef56": {"s-7": 2}});
        let here = after_marks(Some(&after));
        assert_eq!(here, HashMap::from([("s-1".to_owned(), 17), ("cd34".to_owned(), 5)]));
        let there = env_after_marks(Some(&after));
        assert_eq!(there.len(), 2);
        assert_eq!(there["ab12"], HashMap::from([("s-9".to_owned(), 4)]));
        assert_eq!(there["ef56"], HashMap::from([("s-7".to_owned(), 2)]));
        assert!(env_after_marks(Some(&json!([1, 2]))).is_empty());
        assert!(env_after_marks(None).is_empty());
    }

    fn event(session: &str, seq: u64, event: Event) -> SessionEvent {
        SessionEvent { session: session.into(), seq, at: seq * 10, event }
    }

    fn piece(session: &str, seq: u64, text: &str) -> SessionEvent {
        event(session, seq, Event::Text { text: text.into(), partial: true })
    }

    #[test]
    fn low_data_merges_streamed_text_per_session_and_keeps_the_order() {
        let (start, mut merged) = (Instant::now(), Merged::default());
        assert!(merged.offer(piece("s-1", 1, "Hel"), start).is_empty());
        assert!(merged.offer(piece("s-2", 1, "Other"), start).is_empty());
        assert!(merged.offer(piece("s-1", 2, "lo"), start + Duration::from_millis(100)).is_empty());
        assert_eq!(merged.due(), Some(start + LOW_DATA_EVERY));
        assert!(merged.take_due(start + Duration::from_millis(249)).is_empty());
        let due = merged.take_due(start + LOW_DATA_EVERY);
        assert_eq!(due.len(), 2);
        let one = due.iter().find(|e| e.session == "s-1").unwrap();
        assert_eq!((one.seq, one.at), (2, 20));
        assert_eq!(one.event, Event::Text { text: "Hello".into(), partial: true });
        // Another event sends what is held first.
        assert!(merged.offer(piece("s-1", 3, " there"), start).is_empty());
        let state = event("s-1", 4, Event::State { state: crate::protocol::SessionState::Idle });
        let sent = merged.offer(state.clone(), start);
        assert_eq!(sent.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
        // The whole text overtakes the pieces held.
        assert!(merged.offer(piece("s-1", 5, "Bye"), start).is_empty());
        let whole = event("s-1", 6, Event::Text { text: "Bye now".into(), partial: false });
        assert_eq!(merged.offer(whole.clone(), start), [whole]);
        assert_eq!(merged.due(), None);
    }

    #[test]
    fn low_data_sends_a_merged_text_before_it_grows_too_long() {
        let (now, mut merged) = (Instant::now(), Merged::default());
        let long = "x".repeat(MAX_TEXT_LEN - 10);
        assert!(merged.offer(piece("s-1", 1, &long), now).is_empty());
        let sent = merged.offer(piece("s-1", 2, &"y".repeat(20)), now);
        assert_eq!(sent, [piece("s-1", 1, &long)]);
        assert_eq!(merged.take_due(now + LOW_DATA_EVERY), [piece("s-1", 2, &"y".repeat(20))]);
    }
}
