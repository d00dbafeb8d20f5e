//! Following sessions: every event after the follower's `after` seqs, replayed from the store and
//! then live, each exactly once and in order per session. Live events come through a bounded
//! broadcast; a follower that falls behind, or sees a gap, reads the missing events back from the
//! store (they are committed before they are broadcast), so nothing is lost, nothing repeats, and
//! a slow follower costs no memory.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::store::Store;
use crate::protocol::SessionEvent;

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

/// Sends every event `follower` yields, mapped by `map`, until `cancel` or the receiver closes.
pub async fn forward<T>(
    mut follower: Follower,
    out: mpsc::Sender<T>,
    cancel: CancellationToken,
    map: impl Fn(&SessionEvent) -> T,
) {
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            () = out.closed() => return,
            event = follower.next() => event,
        };
        let Some(event) = event else { return };
        if out.send(map(&event)).await.is_err() {
            return;
        }
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
}
