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
    Call { id: String, name: String, args: Value, progress: mpsc::Sender<String>, reply: oneshot::Sender<Delivery> },
    Cancel { id: String },
}

struct InFlight {
    progress: mpsc::Sender<String>,
    reply: oneshot::Sender<Delivery>,
}

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
            LinkCommand::Call { id, name, args, progress, reply } => {
                if self.pending.len() + self.queued.len() >= protocol::MAX_CALLS_IN_FLIGHT {
                    let busy = refusal(ErrorCode::Busy, "too many calls in flight to this environment");
                    let _ = reply.send(Delivery::Done(Err(busy)));
                    return None;
                }
                let call = ToolCall { id: id.clone(), name, args, env: None, caller: None };
                let frame = Message::text(ClientMessage::ToolCall(call).to_json());
                let pending = InFlight { progress, reply };
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
        match serde_json::from_str::<AgentMessage>(text) {
            Ok(AgentMessage::ToolProgress { id, chunk, .. }) => {
                if let Some(pending) = self.pending.get(&id) {
                    // Progress is best effort; the result carries the whole output.
                    let _ = pending.progress.try_send(chunk);
                }
            }
            Ok(AgentMessage::ToolResult(result)) => {
                if let Some(pending) = self.pending.remove(&result.id) {
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
