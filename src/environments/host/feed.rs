//! Following environments from the host (docs/PROTOCOL.md, "Environments"): one feed per
//! environment some client of the host follows, and each such client's view of it.
//!
//! A feed holds the host's own `follow` on the environment's pooled session, with an `after`
//! cursor per session kept here: when that session ends (the environment restarted, the network
//! went) the feed marks the environment unreachable, dials again with backoff and follows from
//! its cursors, so the environment replays exactly what the host missed. Each follower of the
//! host replays what *it* missed from the environment's own log (`agent_sessions`, `agent_log`,
//! routed like any call) after its marks, then takes the feed's live frames, dropping what it
//! already has and reading any gap back from the log — no gaps and no repeats across a reconnect
//! of either link. The feed remembers nothing but cursors and the open approvals.

use std::collections::BTreeMap;

use tokio::sync::{broadcast, watch};

use super::*;
use crate::protocol::{EnvReach, EnvironmentState};

/// Live frames a feed buffers for its followers before a slow one reads back from the log.
const FEED_BUFFER: usize = 1024;
/// Frames the environment's session hands the feed before it drops some (read back from the log).
const FEED_QUEUE: usize = 1024;
/// First wait before the feed dials an environment it lost again; doubles up to [`RETRY_CAP`].
const RETRY_BASE: Duration = Duration::from_millis(250);
const RETRY_CAP: Duration = Duration::from_secs(10);
/// Events read from an environment's log per `agent_log` call while a follower catches up.
const LOG_PAGE: u64 = 200;
/// Sessions whose cursors a feed keeps; more sessions are followed from the environment's word.
const MAX_CURSORS: usize = 4096;

/// The host's follow of one environment.
pub(super) struct Feed {
    env_key: String,
    name: String,
    live: broadcast::Sender<Value>,
    reach: watch::Sender<EnvReach>,
    /// The environment's open approvals, tagged, by id.
    open: Mutex<BTreeMap<String, Value>>,
}

impl Feed {
    fn frame(&self, state: EnvReach) -> Frame {
        let state = EnvironmentState { env: self.env_key.clone(), name: self.name.clone(), state };
        Frame::from(AgentMessage::Environment(state))
    }

    fn open(&self) -> Vec<Value> {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// One frame from the environment: a session's next event, an approval opened or resolved.
    fn take(&self, frame: Value, cursors: &mut HashMap<String, u64>) {
        match frame.get("type").and_then(Value::as_str) {
            Some("agent_event") => {
                let (Some(session), Some(seq)) =
                    (frame.get("session").and_then(Value::as_str), frame.get("seq").and_then(Value::as_u64))
                else {
                    return;
                };
                let cursor = cursors.get(session).copied().unwrap_or(0);
                if seq <= cursor {
                    return;
                }
                if cursors.len() < MAX_CURSORS || cursors.contains_key(session) {
                    cursors.insert(session.to_owned(), seq);
                }
            }
            Some(kind @ ("approval" | "approval_resolved")) => {
                let Some(id) = frame.get("approval").and_then(Value::as_str) else { return };
                let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
                if kind == "approval" {
                    if open.len() < protocol::MAX_CALLS_IN_FLIGHT * 16 {
                        open.insert(id.to_owned(), frame.clone());
                    }
                } else {
                    open.remove(id);
                }
            }
            _ => return,
        }
        let _ = self.live.send(frame);
    }
}

impl Inner {
    /// Follows every paired environment for one client (see [`EnvRouter::follow`]).
    pub(super) async fn follow(
        self: Arc<Self>,
        after: HashMap<String, HashMap<String, u64>>,
        scope: FollowScope,
        out: mpsc::Sender<Frame>,
        cancel: CancellationToken,
    ) {
        let registry = match store::load_registry(self.home()) {
            Ok(registry) => registry,
            Err(err) => return warn!("could not read the environments to follow: {err:#}"),
        };
        let mut following = Vec::new();
        for entry in registry.environments.iter().filter(|entry| !entry.is_self) {
            let feed = self.feed(entry);
            let marks = after.get(&entry.env_key).cloned().unwrap_or_default();
            following.push(self.clone().follow_one(feed, marks, scope, out.clone(), cancel.clone()));
        }
        futures_util::future::join_all(following).await;
    }

    /// The feed of `entry`, started when nobody followed it yet (it then runs while the host does).
    fn feed(self: &Arc<Self>, entry: &EnvEntry) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(feed) = feeds.get(&entry.env_key) {
            return feed.clone();
        }
        let feed = Arc::new(Feed {
            env_key: entry.env_key.clone(),
            name: entry.name.clone(),
            live: broadcast::channel(FEED_BUFFER).0,
            reach: watch::channel(EnvReach::Unreachable).0,
            open: Mutex::default(),
        });
        feeds.insert(entry.env_key.clone(), feed.clone());
        let span = info_span!("environment_feed", env = %crate::text::prefix(&entry.env_key, 16));
        self.options.tasks.spawn(self.clone().run_feed(feed.clone()).instrument(span));
        feed
    }

    /// Keeps the host's follow of one environment up until the host stops or the pairing ends.
    async fn run_feed(self: Arc<Self>, feed: Arc<Feed>) {
        let shutdown = self.options.shutdown.clone();
        let mut cursors: HashMap<String, u64> = HashMap::new();
        let mut wait = RETRY_BASE;
        loop {
            let target = match self.resolve(&feed.env_key) {
                Ok((_, Resolved::Remote(target))) => target,
                Ok((_, Resolved::Local)) => return,
                Err(err) => {
                    let state =
                        if err.code == ErrorCode::PairingRevoked { EnvReach::Revoked } else { EnvReach::Unreachable };
                    feed.reach.send_replace(state);
                    if err.code == ErrorCode::PairingRevoked {
                        return;
                    }
                    // Not paired (yet, or any more): looked at again after the wait.
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(RETRY_CAP) => continue,
                    }
                }
            };
            let linked = tokio::select! {
                _ = shutdown.cancelled() => return,
                linked = self.link(&target) => linked,
            };
            if let Ok(commands) = linked {
                let (sender, mut frames) = mpsc::channel(FEED_QUEUE);
                let after = serde_json::to_value(&cursors).unwrap_or(Value::Null);
                if commands.send(LinkCommand::Follow { after, feed: sender }).await.is_ok() {
                    // The environment sends its open approvals again when followed.
                    feed.open.lock().unwrap_or_else(|p| p.into_inner()).clear();
                    feed.reach.send_replace(EnvReach::Reachable);
                    wait = RETRY_BASE;
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            frame = frames.recv() => match frame {
                                Some(frame) => feed.take(frame, &mut cursors),
                                None => break,
                            },
                        }
                    }
                }
            }
            let revoked = matches!(self.resolve(&feed.env_key), Err(err) if err.code == ErrorCode::PairingRevoked);
            feed.reach.send_replace(if revoked { EnvReach::Revoked } else { EnvReach::Unreachable });
            if revoked {
                return;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(RETRY_CAP);
        }
    }

    /// One client's view of one environment: its reachability, its open approvals, what the client
    /// missed of its sessions, then live.
    async fn follow_one(
        self: Arc<Self>,
        feed: Arc<Feed>,
        marks: HashMap<String, u64>,
        scope: FollowScope,
        out: mpsc::Sender<Frame>,
        cancel: CancellationToken,
    ) {
        let mut live = feed.live.subscribe();
        let mut reach = feed.reach.subscribe();
        let mut view = View { router: self, env_key: feed.env_key.clone(), delivered: marks, scope, out, cancel };
        let mut shown = *reach.borrow_and_update();
        if !view.send(feed.frame(shown)).await {
            return;
        }
        if scope.approvals {
            for approval in feed.open() {
                if !view.send(Frame::text(approval.to_string())).await {
                    return;
                }
            }
        }
        if shown == EnvReach::Reachable {
            view.replay().await;
        }
        loop {
            tokio::select! {
                _ = view.cancel.cancelled() => return,
                _ = view.out.closed() => return,
                changed = reach.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = *reach.borrow_and_update();
                    if now != shown {
                        shown = now;
                        if !view.send(feed.frame(now)).await {
                            return;
                        }
                        if now == EnvReach::Reachable {
                            view.replay().await;
                        }
                    }
                }
                frame = live.recv() => match frame {
                    Ok(frame) => if !view.deliver(frame).await { return },
                    Err(broadcast::error::RecvError::Lagged(_)) => view.replay().await,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }

    /// Passes a frame to an environment's session (see [`EnvRouter::pass`]).
    pub(super) async fn pass(self: Arc<Self>, env: String, frame: ClientMessage) -> Result<(), ToolError> {
        let Resolved::Remote(target) = self.resolve(&env)?.1 else {
            return Err(refusal(ErrorCode::Internal, "a frame for this machine is handled here"));
        };
        let commands = self.link(&target).await?;
        commands
            .send(LinkCommand::Pass { frame })
            .await
            .map_err(|_| unreachable("the session with the environment ended before the frame was sent"))
    }
}

/// What one client of the host has of one environment's sessions.
struct View {
    router: Arc<Inner>,
    env_key: String,
    /// The last seq delivered, per session.
    delivered: HashMap<String, u64>,
    scope: FollowScope,
    out: mpsc::Sender<Frame>,
    cancel: CancellationToken,
}

impl View {
    async fn send(&self, frame: Frame) -> bool {
        self.out.send(frame).await.is_ok()
    }

    /// One live frame of the feed; false once the client is gone.
    async fn deliver(&mut self, frame: Value) -> bool {
        if frame.get("type").and_then(Value::as_str) != Some("agent_event") {
            return !self.scope.approvals || self.send(Frame::text(frame.to_string())).await;
        }
        if !self.scope.sessions {
            return true;
        }
        let (Some(session), Some(seq)) =
            (frame.get("session").and_then(Value::as_str), frame.get("seq").and_then(Value::as_u64))
        else {
            return true;
        };
        let delivered = self.delivered.get(session).copied().unwrap_or(0);
        if seq <= delivered {
            return true;
        }
        if seq > delivered + 1 {
            // A gap (this client lagged, or the feed dropped): the environment's log has it.
            let session = session.to_owned();
            return self.catch_up(&session).await;
        }
        self.delivered.insert(session.to_owned(), seq);
        self.send(Frame::text(frame.to_string())).await
    }

    /// Everything the client missed of every session on the environment, from its log.
    async fn replay(&mut self) {
        if !self.scope.sessions {
            return;
        }
        let Ok(listed) = self.call("agent_sessions", json!({})).await else { return };
        let sessions: Vec<String> = listed["sessions"]
            .as_array()
            .map(|all| all.iter().filter_map(|s| s["session"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        for session in sessions {
            if !self.catch_up(&session).await {
                return;
            }
        }
    }

    /// The client's missing events of `session`, read from the environment's log; false once the
    /// client is gone.
    async fn catch_up(&mut self, session: &str) -> bool {
        loop {
            let after = self.delivered.get(session).copied().unwrap_or(0);
            let args = json!({"session": session, "after": after, "limit": LOG_PAGE});
            let Ok(page) = self.call("agent_log", args).await else { return true };
            let events = page["events"].as_array().cloned().unwrap_or_default();
            if events.is_empty() {
                return true;
            }
            for mut event in events {
                let Some(seq) = event.get("seq").and_then(Value::as_u64) else { continue };
                if seq <= self.delivered.get(session).copied().unwrap_or(0) {
                    continue;
                }
                event["env"] = Value::String(self.env_key.clone());
                self.delivered.insert(session.to_owned(), seq);
                if !self.send(Frame::text(event.to_string())).await {
                    return false;
                }
            }
        }
    }

    /// A session tool on the environment, for this view (the environment's policy decides there).
    async fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let call = ToolCall { id: String::new(), name: name.to_owned(), args, env: None, caller: None };
        let progress = mpsc::channel(1).0;
        self.router.clone().route(self.env_key.clone(), call, progress, None, self.cancel.clone()).await
    }
}
