//! One verified environment session, served by its own task: calls written in order, their
//! progress and results routed back, a `status` check before a call on a session idle for a while.

use super::handshake::refused_by_environment;
use super::*;

/// A verified session with one environment, served by its own task.
pub(super) struct Link {
    pub(super) commands: mpsc::Sender<LinkCommand>,
    /// Cancelled when the session ended, or to end it.
    pub(super) alive: CancellationToken,
    pub(super) fingerprint: [u8; 32],
    pub(super) tools: Vec<String>,
}

pub(super) enum LinkCommand {
    Call {
        id: String,
        name: String,
        args: Value,
        progress: mpsc::Sender<String>,
        /// Gets the output of a terminal the call opens or attaches.
        viewer: Option<mpsc::Sender<Frame>>,
        reply: oneshot::Sender<Delivery>,
    },
    Cancel {
        id: String,
    },
    /// Follow the environment's sessions and approvals after `after`, its frames (tagged with the
    /// envKey) into `feed`, for as long as this session lasts.
    Follow {
        after: Value,
        feed: mpsc::Sender<Value>,
    },
    /// A frame for the environment's own session to judge and act on (`term_ack`).
    Pass {
        frame: ClientMessage,
    },
}

struct InFlight {
    progress: mpsc::Sender<String>,
    viewer: Option<mpsc::Sender<Frame>>,
    reply: oneshot::Sender<Delivery>,
}

/// Terminal frames held for a terminal no viewer claimed yet (its `term_open` or `term_attach`
/// result is still on its way), per terminal.
const UNCLAIMED_FRAMES: usize = 64;
/// Terminals whose frames are held at once.
const UNCLAIMED_TERMS: usize = 8;
/// Longest a terminal's output waits for room in a viewer's queue.
const VIEWER_WAIT: Duration = Duration::from_secs(1);

/// A call waiting for the session check before it is written.
struct Queued {
    id: String,
    frame: Message,
    pending: InFlight,
}

/// Serves one verified environment session until it ends.
pub(super) struct LinkActor {
    home: Home,
    env_key: String,
    fingerprint: [u8; 32],
    alive: CancellationToken,
    pending: HashMap<String, InFlight>,
    queued: Vec<Queued>,
    /// Set while a `status` check is outstanding.
    check_deadline: Option<tokio::time::Instant>,
    liveness: Liveness,
    /// Where the environment's `agent_event`, `approval` and `approval_resolved` frames go.
    feed: Option<mpsc::Sender<Value>>,
    /// Who watches each of the environment's terminals opened or attached through this session.
    viewers: HashMap<String, Vec<mpsc::WeakSender<Frame>>>,
    unclaimed: HashMap<String, Vec<Frame>>,
}

enum Step {
    Continue,
    End(ToolError),
}

impl LinkActor {
    pub(super) fn new(home: Home, env_key: String, fingerprint: [u8; 32], alive: CancellationToken) -> Self {
        LinkActor {
            home,
            env_key,
            fingerprint,
            alive,
            pending: HashMap::new(),
            queued: Vec::new(),
            check_deadline: None,
            liveness: Liveness::new(Heartbeat::PROTOCOL),
            feed: None,
            viewers: HashMap::new(),
            unclaimed: HashMap::new(),
        }
    }

    pub(super) async fn run(mut self, socket: ClientSocket, mut commands: mpsc::Receiver<LinkCommand>) {
        let (mut sink, mut stream) = socket.split();
        let end = 'session: loop {
            let check_deadline = self.check_deadline;
            tokio::select! {
                // Frames already received are read before new calls are written.
                biased;
                _ = self.alive.cancelled() => break unreachable("the session with the environment was closed"),
                frame = stream.next() => {
                    self.liveness.heard();
                    let step = match frame {
                        Some(Ok(Message::Text(text))) => self.on_text(&text).await,
                        Some(Ok(Message::Close(_))) | None => Step::End(unreachable("the relay closed the connection")),
                        Some(Err(err)) => {
                            debug!(%err, "environment session failed");
                            Step::End(unreachable("the relay connection failed"))
                        }
                        Some(Ok(_)) => Step::Continue,
                    };
                    if let Step::End(error) = step {
                        break error;
                    }
                    for frame in self.flush_if_checked() {
                        if sink.send(frame).await.is_err() {
                            break 'session unreachable("the relay connection failed");
                        }
                    }
                }
                _ = sleep_until(check_deadline) => break unreachable("the environment stopped answering"),
                command = commands.recv() => {
                    let Some(command) = command else { break unreachable("the host stopped") };
                    if let Some(frame) = self.on_command(command) {
                        if sink.send(frame).await.is_err() {
                            break unreachable("the relay connection failed");
                        }
                    }
                }
                pulse = self.liveness.tick() => match pulse {
                    Pulse::Silent(_) => break unreachable("the environment stopped answering"),
                    Pulse::Ping => { let _ = sink.send(Message::Ping(Default::default())).await; }
                },
            }
        };
        self.alive.cancel();
        commands.close();
        for (_, pending) in self.pending.drain() {
            let _ = pending.reply.send(Delivery::Done(Err(end.clone())));
        }
        for queued in self.queued.drain(..) {
            let _ = queued.pending.reply.send(Delivery::NotSent);
        }
        while let Ok(command) = commands.try_recv() {
            if let LinkCommand::Call { reply, .. } = command {
                let _ = reply.send(Delivery::NotSent);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
    }

    /// The frame to write for a command, if any: the call itself on a fresh session, else a
    /// `status` check with the call queued behind it.
    fn on_command(&mut self, command: LinkCommand) -> Option<Message> {
        match command {
            LinkCommand::Follow { after, feed } => {
                self.feed = Some(feed);
                let after = (!after.is_null()).then_some(after);
                Some(Message::text(ClientMessage::Follow { after, low_data: false }.to_json()))
            }
            LinkCommand::Pass { frame } => Some(Message::text(frame.to_json())),
            LinkCommand::Call { id, name, args, progress, viewer, reply } => {
                if self.pending.len() + self.queued.len() >= protocol::MAX_CALLS_IN_FLIGHT {
                    let busy = refusal(ErrorCode::Busy, "too many calls in flight to this environment");
                    let _ = reply.send(Delivery::Done(Err(busy)));
                    return None;
                }
                let call = ToolCall { id: id.clone(), name, args, env: None, caller: None };
                let frame = Message::text(ClientMessage::ToolCall(call).to_json());
                let pending = InFlight { progress, viewer, reply };
                if self.check_deadline.is_some() {
                    self.queued.push(Queued { id, frame, pending });
                    return None;
                }
                // Writing on a session the environment may just have left would lose the call, so an
                // idle session is checked first; only a busy, recently heard one is trusted as is.
                if !self.pending.is_empty() && self.liveness.heard_within(LINK_FRESH) {
                    self.pending.insert(id, pending);
                    return Some(frame);
                }
                self.queued.push(Queued { id, frame, pending });
                self.check_deadline = Some(tokio::time::Instant::now() + LINK_CHECK_TIMEOUT);
                Some(Message::text(ClientMessage::Status.to_json()))
            }
            LinkCommand::Cancel { id } => {
                if let Some(index) = self.queued.iter().position(|q| q.id == id) {
                    let queued = self.queued.remove(index);
                    let cancelled = refusal(ErrorCode::Cancelled, "cancelled before it was sent");
                    let _ = queued.pending.reply.send(Delivery::Done(Err(cancelled)));
                    return None;
                }
                self.pending
                    .contains_key(&id)
                    .then(|| Message::text(ClientMessage::Cancel { id, receipt: None }.to_json()))
            }
        }
    }

    /// The queued calls, once the check has been answered.
    fn flush_if_checked(&mut self) -> Vec<Message> {
        if self.check_deadline.is_some() {
            return Vec::new();
        }
        self.queued
            .drain(..)
            .map(|queued| {
                self.pending.insert(queued.id, queued.pending);
                queued.frame
            })
            .collect()
    }

    async fn on_text(&mut self, text: &str) -> Step {
        if let Some(notice) = crate::protocol::relay::Presence::parse(text) {
            // Any change of the agent side ends the session: whoever is there now has not proven
            // the envKey.
            if notice.peer == PeerRole::Agent {
                return Step::End(unreachable("the environment left"));
            }
            return Step::Continue;
        }
        if let Some(step) = self.on_followed(text).await {
            return step;
        }
        match serde_json::from_str::<AgentMessage>(text) {
            Ok(AgentMessage::ToolProgress { id, chunk, .. }) => {
                if let Some(pending) = self.pending.get(&id) {
                    // Progress is best effort; the result carries the whole output.
                    let _ = pending.progress.try_send(chunk);
                }
            }
            Ok(AgentMessage::ToolResult(result)) => {
                if let Some(pending) = self.pending.remove(&result.id) {
                    if let (Some(viewer), Some(term)) =
                        (&pending.viewer, result.result.as_ref().and_then(|r| r.get("term")).and_then(Value::as_str))
                    {
                        self.claim(term, viewer);
                    }
                    let outcome = if result.ok {
                        Ok(result.result.unwrap_or(Value::Null))
                    } else {
                        Err(result
                            .error
                            .unwrap_or_else(|| refusal(ErrorCode::Internal, "the environment sent no error")))
                    };
                    let _ = pending.reply.send(Delivery::Done(outcome));
                }
            }
            // The answer to the session check: the environment that proved its key is still there.
            Ok(AgentMessage::Status(_)) => self.check_deadline = None,
            Ok(AgentMessage::Error { code: ErrorCode::PairingRevoked, .. }) => {
                self.forget_revoked_bearer().await;
                return Step::End(refused_by_environment(ErrorCode::PairingRevoked));
            }
            Ok(AgentMessage::Error { code, .. }) => debug!(%code, "environment reported an error"),
            // Images stay on the environment side: the host forwards results, not screenshots.
            _ => {}
        }
        Step::Continue
    }

    /// A frame of what the host follows there or of a terminal it watches, tagged with the envKey
    /// and passed on; `None` for any other frame.
    async fn on_followed(&mut self, text: &str) -> Option<Step> {
        const FOLLOWED: [&str; 3] = ["agent_event", "approval", "approval_resolved"];
        const TERMINAL: [&str; 3] = ["term_output", "term_snapshot", "term_exit"];
        let kind = frame_type(text)?;
        if !FOLLOWED.contains(&kind.as_str()) && !TERMINAL.contains(&kind.as_str()) {
            return None;
        }
        let Ok(Value::Object(mut frame)) = serde_json::from_str::<Value>(text) else { return Some(Step::Continue) };
        frame.insert("env".into(), Value::String(self.env_key.clone()));
        if FOLLOWED.contains(&kind.as_str()) {
            // A follower that cannot keep up loses live frames; it reads the gap back with `agent_log`.
            if let Some(feed) = &self.feed {
                let _ = feed.try_send(Value::Object(frame));
            }
            return Some(Step::Continue);
        }
        let Some(term) = frame.get("term").and_then(Value::as_str).map(str::to_owned) else {
            return Some(Step::Continue);
        };
        let out = Frame::text(Value::Object(frame).to_string());
        // A screen is sent to the client that attaches, before its `term_attach` result names it.
        let viewers = if kind == "term_snapshot" { None } else { self.viewers.get_mut(&term) };
        match viewers {
            Some(viewers) => {
                // Output waits for room in each viewer's queue, as on the environment (`term_ack`
                // paces it there); a viewer gone or stuck for a second stops watching.
                let mut watching = Vec::with_capacity(viewers.len());
                for viewer in viewers.drain(..) {
                    let Some(live) = viewer.upgrade() else { continue };
                    if let Ok(Ok(())) = tokio::time::timeout(VIEWER_WAIT, live.send(out.clone())).await {
                        watching.push(viewer);
                    }
                }
                *viewers = watching;
                // A client attaching now gets what follows its screen as well.
                if let Some(held) = self.unclaimed.get_mut(&term) {
                    if held.len() < UNCLAIMED_FRAMES {
                        held.push(out);
                    }
                }
            }
            None if self.unclaimed.len() < UNCLAIMED_TERMS || self.unclaimed.contains_key(&term) => {
                let held = self.unclaimed.entry(term).or_default();
                if held.len() < UNCLAIMED_FRAMES {
                    held.push(out);
                }
            }
            None => {}
        }
        Some(Step::Continue)
    }

    /// `viewer` watches the environment's terminal `term` from now on, with what came before it.
    fn claim(&mut self, term: &str, viewer: &mpsc::Sender<Frame>) {
        // What came for it before its result: its screen and any output after it.
        for frame in self.unclaimed.remove(term).unwrap_or_default() {
            let _ = viewer.try_send(frame);
        }
        let viewers = self.viewers.entry(term.to_owned()).or_default();
        viewers.retain(|known| known.upgrade().is_some_and(|known| !known.same_channel(viewer)));
        viewers.push(viewer.downgrade());
    }

    /// The environment, on a session it proved, said our pairing is revoked: the bearer is
    /// useless, so it moves to this home's `revokedBearers` and later calls get
    /// `pairing-revoked` without dialing.
    async fn forget_revoked_bearer(&self) {
        let (home, env_key, fingerprint) = (self.home.clone(), self.env_key.clone(), self.fingerprint);
        let result = tokio::task::spawn_blocking(move || {
            store::update(&home, |_, pairings| {
                let Some(outbound) = pairings.outbound.get(&env_key) else { return Ok(()) };
                let relay = RelayUrl::parse(&outbound.relay).map_err(anyhow::Error::new)?;
                let current = Target {
                    env_key: env_key.clone(),
                    relay,
                    code: outbound.code.clone(),
                    bearer: outbound.bearer.clone(),
                };
                if current.fingerprint() != fingerprint {
                    return Ok(()); // Paired again meanwhile.
                }
                let hash = hex::encode(store::bearer_hash(outbound.bearer.expose()));
                pairings.outbound.remove(&env_key);
                pairings.revoked_bearers.entry(env_key.clone()).or_default().push(store::RevokedBearer {
                    id: None,
                    bearer_sha256: hash,
                    revoked_at: store::now(),
                });
                Ok(())
            })
        })
        .await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(err)) => warn!("could not record the revoked pairing: {err:#}"),
            Err(err) => warn!("could not record the revoked pairing: {err}"),
        }
    }
}

/// The `type` of a frame, read without parsing the rest.
fn frame_type(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_str::<Typed>(text).ok().map(|typed| typed.kind)
}
