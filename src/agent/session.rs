//! One authenticated session, the same over the relay and the loopback socket: tool calls (kept
//! in the pairing's table, [`super::calls`]), cancellation, progress, screenshots to the phone
//! only, and the voice call. The frames are described in docs/PROTOCOL.md, "Session frames".
//! Every frame that acts asks the agent's one policy first, as its tools would
//! ([`crate::tools::FrameAction`]; docs/SECURITY.md, "One policy, every door").

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::calls::{self, CallBoard, ListenerId};
use super::context::AgentContext;
use crate::approvals;
use crate::gemini::{self, VoiceCall, VoiceInput, VoiceTools};
use crate::protocol::{
    self, AgentMessage, Bytes, CallErrorCode, ClientMessage, ConnectedClient, ErrorCode, Frame, ToolCall, ToolError,
    ToolResult,
};
use crate::sessions::voice::{Host, Narrator, Told};
use crate::tools::{FrameAction, ToolOutput, ToolRequest, Verdict};

/// An authenticated session. Dropping it ends its voice call and its deliveries; its tool calls
/// belong to its pairing and go on (docs/PROTOCOL.md, "Calls outlive the connection").
pub struct Session {
    ctx: Arc<AgentContext>,
    caller: String,
    out: mpsc::Sender<Frame>,
    /// The pairing's call table, and this session's place among its listeners.
    board: Arc<CallBoard>,
    listener: ListenerId,
    voice: Option<VoiceCall>,
    cancel: CancellationToken,
    /// Set while the client follows (`follow`): cancelling it stops the delivery.
    following: Option<CancellationToken>,
    /// Set while the client's call is hosted by the relay (`narration`): its notes go to the client.
    narrating: Option<CancellationToken>,
    /// Keystrokes (`term_input`) run one after the other, in the order they came.
    typing: Option<mpsc::Sender<(CallTask, ToolCall)>>,
}

impl Session {
    /// A session that answers through `out` (the socket's bounded writer queue).
    pub fn new(ctx: Arc<AgentContext>, caller: String, out: mpsc::Sender<Frame>) -> Self {
        let board = ctx.calls.board(&caller);
        let listener = ctx.calls.listener();
        Session {
            ctx,
            caller,
            out,
            board,
            listener,
            voice: None,
            cancel: CancellationToken::new(),
            following: None,
            narrating: None,
            typing: None,
        }
    }

    /// Shows this session in `status` (who is connected) until it ends.
    pub fn shown(self, client: ConnectedClient) -> Self {
        if let Ok(mut connected) = self.ctx.status.connected.lock() {
            connected.insert(self.listener, client);
        }
        self
    }

    /// Who asks for `call`: a relay-hosted voice call when the page marked it so
    /// ([`protocol::HOSTED_CALLER`]), else the session's own caller. The mark only ever narrows
    /// what a call may do (`[policy.hosted]`), so it is taken from any session.
    fn caller_of(&self, call: &ToolCall) -> String {
        match call.caller.as_deref() {
            Some(protocol::HOSTED_CALLER) => protocol::HOSTED_CALLER.to_owned(),
            _ => self.caller.clone(),
        }
    }

    /// The policy's word on a frame that acts; a refusal is answered `denied-by-policy` here.
    async fn judged(&self, action: &FrameAction) -> Verdict {
        let verdict = self.ctx.dispatcher.judge_frame(&self.caller, action);
        if let Verdict::Deny(rule) = &verdict {
            let message = rule.refusal(action.frame()).message;
            self.send(AgentMessage::Error { code: ErrorCode::DeniedByPolicy, message: Some(message) }).await;
        }
        verdict
    }

    /// Handles one frame from the socket.
    pub async fn on_frame(&mut self, frame: Frame) {
        match frame {
            Frame::Text(text) => self.on_text(&text).await,
            Frame::Binary(data) => self.on_binary(data).await,
        }
    }

    /// Handles one text frame. Malformed frames are answered `bad-frame`; the session goes on.
    pub async fn on_text(&mut self, text: &str) {
        match protocol::parse_client(text) {
            Ok(message) => self.on_message(message).await,
            Err(err) => {
                debug!(%err, "bad frame");
                let message = AgentMessage::Error { code: ErrorCode::BadFrame, message: Some(bad_frame_reason(&err)) };
                self.send(message).await;
            }
        }
    }

    /// Handles one binary frame: microphone audio during a voice call, else ignored.
    pub async fn on_binary(&mut self, data: Bytes) {
        if let (Some(voice), [protocol::AUDIO_PREFIX, ..]) = (&self.voice, &data[..]) {
            // A full queue means Gemini is behind; dropping 20 ms of audio beats growing memory.
            let _ = voice.input.try_send(VoiceInput::Audio(data.slice(1..)));
        }
    }

    async fn on_message(&mut self, message: ClientMessage) {
        match message {
            ClientMessage::ToolCall(call) => self.start_call(call).await,
            // Any call of the pairing, whichever session started it.
            ClientMessage::Cancel { id, receipt } => {
                if self.answered_again(receipt.as_deref()).await {
                    return;
                }
                let cancelled = self.board.cancel(&id).await;
                let outcome = match cancelled {
                    true => Ok(()),
                    false => Err(ToolError::new(ErrorCode::NotFound, format!("no call {id:?} is running"))),
                };
                self.give_receipt(receipt, outcome).await;
            }
            ClientMessage::CancelAll => {
                let stopped = self.board.cancel_all().await;
                debug!(stopped, "cancel_all");
            }
            ClientMessage::Calls { mut seen } => {
                seen.truncate(calls::MAX_SEEN);
                self.board.follow(self.listener, &self.out, &seen).await;
            }
            ClientMessage::Status => {
                let status = self.ctx.status();
                self.send(AgentMessage::Status(status)).await;
            }
            // Already authenticated; a repeated hello or bearer changes nothing. A tick (consumed
            // by the seal in a sealed session) says nothing either.
            ClientMessage::Hello(_) | ClientMessage::Bearer(_) | ClientMessage::Tick => {}
            ClientMessage::CallStart => self.start_voice().await,
            ClientMessage::Say { text } => match self.voice.as_ref().filter(|voice| voice.is_live()) {
                Some(voice) => {
                    if let Some(busy) = gemini::give(&voice.input, VoiceInput::Text(text)) {
                        self.send(busy).await;
                    }
                }
                None => self.send(gemini::no_call_error()).await,
            },
            ClientMessage::AudioEnd => match self.voice.as_ref().filter(|voice| voice.is_live()) {
                // Dropped like audio when the bridge is behind: the service's own VAD ends the turn.
                Some(voice) => {
                    let _ = voice.input.try_send(VoiceInput::AudioEnd);
                }
                None => self.send(gemini::no_call_error()).await,
            },
            ClientMessage::CallEnd => match self.voice.take().filter(|voice| voice.is_live()) {
                Some(voice) => voice.end.cancel(),
                None => self.send(gemini::no_call_error()).await,
            },
            ClientMessage::Narration { on } => self.narrate_hosted(on),
            ClientMessage::Follow { after, low_data } => self.follow(after, low_data).await,
            ClientMessage::Unfollow => {
                if let Some(following) = self.following.take() {
                    following.cancel();
                }
            }
            ClientMessage::Approve(mut approve) => {
                let receipt = approve.receipt.take();
                if self.answered_again(receipt.as_deref()).await {
                    return;
                }
                if let Verdict::Deny(rule) = self.judged(&FrameAction::Approve).await {
                    return self.give_receipt(receipt, Err(rule.refusal("approve"))).await;
                }
                // An environment's approval is answered there, under its own policy too.
                let outcome = match self.remote(approve.env.as_deref()) {
                    Some(env) => self.approve_there(env, approve).await,
                    None => approvals::answer(&self.ctx.approvals, approve, &self.caller),
                };
                match (receipt, outcome) {
                    (Some(receipt), outcome) => self.give_receipt(Some(receipt), outcome).await,
                    (None, Err(err)) => {
                        self.send(AgentMessage::Error { code: err.code, message: Some(err.message) }).await
                    }
                    (None, Ok(())) => {}
                }
            }
            ClientMessage::Grants => {
                if let Verdict::Deny(_) = self.judged(&FrameAction::Grants).await {
                    return;
                }
                let grants = self.ctx.approvals.grants();
                self.send(AgentMessage::Grants { grants, revoked: None }).await;
            }
            ClientMessage::Revoke { grant } => {
                if let Verdict::Deny(_) = self.judged(&FrameAction::Revoke).await {
                    return;
                }
                if !self.ctx.approvals.revoke(&grant) {
                    let shown = crate::text::prefix(&grant, 64);
                    let message = format!("no grant {shown:?}; it was revoked already or never made");
                    self.send(AgentMessage::Error { code: ErrorCode::NotFound, message: Some(message) }).await;
                    return;
                }
                let grants = self.ctx.approvals.grants();
                self.send(AgentMessage::Grants { grants, revoked: Some(grant) }).await;
            }
            ClientMessage::PushSubscribe { subscription } => self.push_subscribe(subscription).await,
            ClientMessage::TermAck(ack) => {
                if let Verdict::Deny(_) = self.judged(&FrameAction::TermAck).await {
                    return;
                }
                if let (Some(env), Some(router)) = (self.remote(ack.env.as_deref()), self.ctx.dispatcher.router()) {
                    // The environment's own session judges it there and paces its terminal.
                    let frame = ClientMessage::TermAck(protocol::TermAck { env: None, ..ack });
                    if let Err(err) = router.pass(env, frame).await {
                        self.send(AgentMessage::Error { code: err.code, message: Some(err.message) }).await;
                    }
                    return;
                }
                if let Some(terminals) = &self.ctx.terminals {
                    terminals.ack(&ack, &self.out).await;
                }
            }
            ClientMessage::PushUnsubscribe { endpoint } => {
                if let Some(notifier) = &self.ctx.notifier {
                    if let Err(err) = notifier.subscriptions().remove(&endpoint) {
                        warn!("could not remove a push subscription: {err:#}");
                    }
                }
            }
        }
    }

    /// Starts (or restarts) the delivery of approvals to this client: the open ones, then each
    /// change — when the policy lets it both list and answer them. With sessions, also every
    /// session's `agent_event`s after the `after` marks, then live — when it lets it read them
    /// (`agent_log`; under `ask`, once the user allowed it). And, always, what the comparison of the
    /// relay's page found. With `low_data`, streamed text comes merged (`follow::LOW_DATA_EVERY`).
    async fn follow(&mut self, after: Option<Value>, low_data: bool) {
        if let Some(previous) = self.following.take() {
            previous.cancel();
        }
        let following = self.cancel.child_token();
        self.following = Some(following.clone());
        let approvals = self.ctx.dispatcher.judge_frame(&self.caller, &FrameAction::FollowApprovals);
        let sessions = match &self.ctx.sessions {
            Some(_) => self.ctx.dispatcher.judge_frame(&self.caller, &FrameAction::FollowSessions),
            None => Verdict::Allow,
        };
        if let (Verdict::Deny(rule), Verdict::Deny(_)) = (&approvals, &sessions) {
            let message = rule.refusal("follow").message;
            return self.send(AgentMessage::Error { code: ErrorCode::DeniedByPolicy, message: Some(message) }).await;
        }
        // A client the policy lets follow hears what the comparison of the relay's page found.
        self.ctx.tasks.spawn(tell_relay_page(
            self.ctx.status.relay_page.subscribe(),
            self.out.clone(),
            following.clone(),
        ));
        if let Some(router) = self.ctx.dispatcher.router().cloned() {
            // Every paired environment, as far as this host's policy lets the client follow here
            // without asking; each environment's own policy decides there.
            let scope = crate::tools::FollowScope {
                approvals: approvals == Verdict::Allow,
                sessions: self.ctx.sessions.is_some() && sessions == Verdict::Allow,
            };
            if scope.approvals || scope.sessions {
                let marks = crate::sessions::follow::env_after_marks(after.as_ref());
                self.ctx.tasks.spawn(router.follow(marks, scope, self.out.clone(), following.clone()));
            }
        }
        if !matches!(approvals, Verdict::Deny(_)) {
            let broker = self.ctx.approvals.clone();
            let status = self.ctx.status.clone();
            let out = self.out.clone();
            let following = following.clone();
            self.ctx.tasks.spawn(async move {
                // Counted while it runs: notifications wait for a moment nobody follows.
                let _following = crate::push::CountedFollower::hold(&status.followers);
                approvals::forward(broker, out, following, |notice| Some(Frame::from(&notice))).await
            });
        }
        let Some(host) = self.ctx.sessions.clone() else { return };
        let ask = match sessions {
            Verdict::Deny(_) => return,
            Verdict::Ask(ask) => Some(ask),
            Verdict::Allow => None,
        };
        let (ctx, out) = (self.ctx.clone(), self.out.clone());
        self.ctx.tasks.spawn(async move {
            if let Some(ask) = ask {
                let input = serde_json::json!({ "after": after });
                let action = FrameAction::FollowSessions;
                if let Err(refused) = ctx.dispatcher.frame_approval(&action, ask, input, &following).await {
                    let message = AgentMessage::Error { code: refused.code, message: Some(refused.message) };
                    let _ = out.send(Frame::from(message)).await;
                    return;
                }
            }
            let follower = host.follow(&crate::sessions::follow::after_marks(after.as_ref()));
            let forward = crate::sessions::follow::forward(follower, out, following, low_data, |event| {
                Frame::text(event.to_frame().to_string())
            });
            forward.await
        });
    }

    /// The environment a frame names, when it is another machine than this one (a host's).
    fn remote(&self, env: Option<&str>) -> Option<String> {
        let (env, router) = (env?, self.ctx.dispatcher.router()?);
        (!router.is_local(env)).then(|| env.to_owned())
    }

    /// An answer to an environment's approval, which passed this host's policy as a frame: it goes
    /// to the environment as its `approve` tool, where the environment's policy decides; a
    /// refusal there comes back as an `error` frame.
    async fn approve_there(&self, env: String, approve: protocol::Approve) -> Result<(), ToolError> {
        let Some(router) = self.ctx.dispatcher.router().cloned() else {
            return Err(ToolError::new(ErrorCode::UnknownEnvironment, "this laptop routes to no environment"));
        };
        let mut args = serde_json::json!({"approval": approve.approval, "decision": approve.decision});
        if let Some(message) = approve.message {
            args["message"] = Value::String(message);
        }
        if let Some(answers) = approve.answers {
            args["answers"] = answers;
        }
        let call = ToolCall { id: "approve".into(), name: "approve".into(), args, env: None, caller: None };
        let progress = mpsc::channel(1).0;
        router.route(env, call, progress, None, self.cancel.clone()).await.map(|_| ())
    }

    /// Keeps the browser's push subscription, if the policy lets this client make the laptop send
    /// to that endpoint (under `ask`, once the user allowed it) and the endpoint is one the
    /// laptop may send to; answered `push_subscribed` or an error.
    async fn push_subscribe(&self, subscription: crate::protocol::PushSubscription) {
        let Some(notifier) = self.ctx.notifier.clone() else {
            let message = Some("this agent sends no notifications".into());
            return self.send(AgentMessage::Error { code: ErrorCode::Unavailable, message }).await;
        };
        let action = FrameAction::PushSubscribe { host: subscription.host() };
        let ask = match self.judged(&action).await {
            Verdict::Deny(_) => return,
            Verdict::Ask(ask) => Some(ask),
            Verdict::Allow => None,
        };
        let (ctx, out, cancel) = (self.ctx.clone(), self.out.clone(), self.cancel.clone());
        let subscribing = async move {
            if let Some(ask) = ask {
                let input = serde_json::json!({ "endpoint_host": subscription.host() });
                if let Err(refused) = ctx.dispatcher.frame_approval(&action, ask, input, &cancel).await {
                    return AgentMessage::Error { code: refused.code, message: Some(refused.message) };
                }
            }
            match notifier.subscribe(subscription).await {
                Ok(()) => AgentMessage::PushSubscribed,
                Err(err) => AgentMessage::Error { code: ErrorCode::InvalidArgs, message: Some(format!("{err:#}")) },
            }
        };
        // Resolving the endpoint (and an approval) may take a while: the session goes on meanwhile.
        self.ctx.tasks.spawn(async move {
            let answer = subscribing.await;
            let _ = out.send(Frame::from(answer)).await;
        });
    }

    async fn start_voice(&mut self) {
        let Some(config) = self.ctx.gemini.clone() else {
            let message = AgentMessage::CallError {
                code: CallErrorCode::Unavailable,
                message: "this laptop hosts no voice calls itself (a relay that offers them hosts them at /live); \
                          start it with --self-hosted and GEMINI_API_KEY to host them here"
                    .into(),
            };
            return self.send(message).await;
        };
        if let Some(previous) = self.voice.take() {
            previous.end.cancel();
        }
        let tools = Arc::new(SessionTools(self.ctx.clone()));
        let voice = gemini::start(config, tools, self.out.clone(), &self.ctx.tasks);
        // The model is told of the approvals (so the user can answer by voice) and of the sessions,
        // as far as the policy lets the call follow them, as a follower would.
        let narrator = self.narrator(Host::Laptop, "gemini");
        let wrap = |told: Told| VoiceInput::Note(gemini::Note { text: told.text, approval: told.approval });
        self.ctx.tasks.spawn(narrator.run(voice.input.clone(), voice.end.clone(), wrap));
        self.voice = Some(voice);
    }

    /// What narrates a call hosted by `host`, as `[voice] narrate` says.
    /// The approvals are told when the policy lets `caller` follow them, the sessions when it
    /// lets it read them without asking — what a `follow` from it would get.
    fn narrator(&self, host: Host, caller: &str) -> Narrator {
        let allowed = |action| self.ctx.dispatcher.judge_frame(caller, &action) == Verdict::Allow;
        Narrator {
            broker: allowed(FrameAction::FollowApprovals).then(|| self.ctx.approvals.clone()),
            sessions: self.ctx.sessions.clone().filter(|_| allowed(FrameAction::FollowSessions)),
            mode: self.ctx.toolbox().config().voice.narrate,
            host,
        }
    }

    /// The client's call is hosted by the relay (`on`) or ended: while it runs the client gets the
    /// notes for its model as `narrate` frames, which it passes to the relay.
    fn narrate_hosted(&mut self, on: bool) {
        if let Some(previous) = self.narrating.take() {
            previous.cancel();
        }
        if !on {
            return;
        }
        let narrating = self.cancel.child_token();
        self.narrating = Some(narrating.clone());
        let wrap = |told: Told| Frame::from(AgentMessage::Narrate { text: told.text });
        self.ctx.tasks.spawn(self.narrator(Host::Relay, protocol::HOSTED_CALLER).run(
            self.out.clone(),
            narrating,
            wrap,
        ));
    }

    async fn start_call(&mut self, call: ToolCall) {
        if call.id.is_empty() || call.id.len() > protocol::MAX_CALL_ID_LEN {
            let error = ToolError::new(ErrorCode::InvalidArgs, "`id` must be 1 to 128 characters");
            let result = ToolResult::failure(call.id.chars().take(protocol::MAX_CALL_ID_LEN).collect(), error);
            return self.send(AgentMessage::ToolResult(result)).await;
        }
        // A call belongs to the pairing: only the agent stopping (or a `cancel`) ends it early.
        let token = self.ctx.shutdown.child_token();
        self.board.listen(self.listener, &self.out, false);
        let limit = self.ctx.toolbox().max_calls_in_flight();
        match self.board.start(&call, self.listener, token.clone(), limit).await {
            Ok(()) => {}
            // Sent again (an outbox after a reconnect): answered again, not run again.
            Err(calls::Refused::AnsweredAgain) => return,
            Err(refused) => {
                let result = ToolResult::failure(call.id.clone(), refused.error(&call.id));
                return self.send(AgentMessage::ToolResult(result)).await;
            }
        }
        let task = CallTask {
            ctx: self.ctx.clone(),
            caller: self.caller_of(&call),
            board: self.board.clone(),
            cancel: token,
            viewer: self.out.downgrade(),
        };
        if call.name == TYPING_TOOL {
            let lane = self.typing.get_or_insert_with(|| {
                let (lane, mut queued) = mpsc::channel::<(CallTask, ToolCall)>(protocol::MAX_CALLS_IN_FLIGHT);
                self.ctx.tasks.spawn(async move {
                    while let Some((task, call)) = queued.recv().await {
                        task.run(call).await;
                    }
                });
                lane
            });
            // The call table holds at most as many calls as the lane does.
            if let Err(err) = lane.try_send((task, call)) {
                let (task, call) = err.into_inner();
                self.ctx.tasks.spawn(task.run(call));
            }
            return;
        }
        self.ctx.tasks.spawn(task.run(call));
    }

    /// A frame that asked for a receipt under an id the pairing already answered: the same
    /// receipt again, and nothing applied (docs/PROTOCOL.md, "Receipts").
    async fn answered_again(&self, receipt: Option<&str>) -> bool {
        let Some(id) = receipt else { return false };
        match self.board.receipt(id).await {
            Some(given) => {
                self.send(AgentMessage::Receipt(given)).await;
                true
            }
            None => false,
        }
    }

    /// Answers a frame that asked for a receipt, and remembers the answer; nothing without one.
    async fn give_receipt(&self, receipt: Option<String>, outcome: Result<(), ToolError>) {
        let Some(id) = receipt else { return };
        if id.is_empty() || id.len() > protocol::MAX_CALL_ID_LEN {
            let error = ToolError::new(ErrorCode::InvalidArgs, "`receipt` must be 1 to 128 characters");
            let id = id.chars().take(protocol::MAX_CALL_ID_LEN).collect();
            return self.send(AgentMessage::Receipt(protocol::Receipt::of(id, Err(error)))).await;
        }
        let given = protocol::Receipt::of(id, outcome);
        self.board.remember_receipt(&given).await;
        self.send(AgentMessage::Receipt(given)).await;
    }

    async fn send(&self, message: AgentMessage) {
        let _ = self.out.send(Frame::from(message)).await;
    }

    /// Calls of this session's pairing still running.
    pub async fn calls_in_flight(&self) -> usize {
        self.board.running().await
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.board.leave(self.listener);
        if let Ok(mut connected) = self.ctx.status.connected.lock() {
            connected.remove(&self.listener);
        }
        self.cancel.cancel();
        if let Some(voice) = self.voice.take() {
            voice.end.cancel();
        }
    }
}

/// Tells a follower what the comparison of the relay's page found (docs/SECURITY.md, "The page
/// the relay serves"): the last finding at once, then each new one, until it stops following.
async fn tell_relay_page(
    mut findings: tokio::sync::watch::Receiver<Option<protocol::RelayPage>>,
    out: mpsc::Sender<Frame>,
    following: CancellationToken,
) {
    loop {
        let found = findings.borrow_and_update().clone();
        if let Some(page) = found {
            if out.send(Frame::from(AgentMessage::RelayPage(page))).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = following.cancelled() => return,
            changed = findings.changed() => if changed.is_err() { return },
        }
    }
}

/// How `status` shows an admitted session that came `via` the relay or the loopback socket (a
/// host driving an environment shows as `"host"`).
pub fn connected(admission: &super::Admission, sealed: bool, via: &str) -> ConnectedClient {
    let via = if admission.caller.starts_with("host:") { "host" } else { via };
    ConnectedClient { client: admission.client.clone(), via: via.to_owned(), sealed, since: calls::unix_now() }
}

/// The tool whose calls keep their order: what is typed into a terminal.
const TYPING_TOOL: &str = "term_input";

/// A sentence about a bad frame that never echoes the frame's content back in full.
fn bad_frame_reason(err: &serde_json::Error) -> String {
    crate::text::prefix(&err.to_string(), 200).to_owned()
}

/// One tool call, from start to its single `tool_result`, delivered through its pairing's table.
struct CallTask {
    ctx: Arc<AgentContext>,
    caller: String,
    board: Arc<CallBoard>,
    cancel: CancellationToken,
    /// The session that asked, for the terminals the call opens; gone once that session ends.
    viewer: mpsc::WeakSender<Frame>,
}

impl CallTask {
    async fn run(self, call: ToolCall) {
        let status = self.ctx.status.clone();
        status.calls_in_flight.fetch_add(1, Ordering::Relaxed);
        let id = call.id.clone();
        let env = call.env.clone();
        let (progress_tx, mut progress_rx) = mpsc::channel::<String>(64);
        let forward = {
            let board = self.board.clone();
            let id = id.clone();
            let env = env.clone();
            self.ctx.tasks.spawn(async move {
                while let Some(chunk) = progress_rx.recv().await {
                    let message = AgentMessage::ToolProgress { id: id.clone(), chunk: chunk.clone(), env: env.clone() };
                    board.progress(&id, Frame::from(message), &chunk).await;
                }
            })
        };
        let outcome = self.execute(call, progress_tx).await;
        // Progress first, then the result: the forwarder ends once every sender is gone.
        if let Err(err) = forward.await {
            warn!(%err, "progress forwarder failed");
        }
        let mut frames = Vec::with_capacity(2);
        let mut result = match outcome {
            Ok((value, image)) => {
                frames.extend(image.map(Frame::from));
                ToolResult::success(id.clone(), value)
            }
            Err(error) => ToolResult::failure(id.clone(), error),
        };
        result.env = env;
        frames.push(Frame::from(AgentMessage::ToolResult(result)));
        self.board.finish(&id, frames).await;
        status.calls_in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    async fn execute(
        &self,
        call: ToolCall,
        progress: mpsc::Sender<String>,
    ) -> Result<(Value, Option<AgentMessage>), ToolError> {
        let id = call.id.clone();
        let mut request = ToolRequest::from_call(call, self.caller.clone(), Some(progress), self.cancel.clone());
        // A terminal the call opens or attaches is watched by the session that asked, while it lasts.
        if let Some(viewer) = self.viewer.upgrade() {
            request = request.with_viewer(viewer);
        }
        let output = self.ctx.dispatcher.dispatch(request).await?;
        let image = output.image.map(|shot| shot.image_frame(&id));
        Ok((output.result, image))
    }
}

/// The agent's tools as the voice bridge sees them: this machine's and, on a host, the
/// environments'.
struct SessionTools(Arc<AgentContext>);

impl VoiceTools for SessionTools {
    fn declarations(&self) -> Value {
        self.0.dispatcher.gemini_declarations()
    }

    fn run(&self, call: ToolCall, cancel: CancellationToken) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let ctx = self.0.clone();
        Box::pin(async move { ctx.dispatcher.dispatch(ToolRequest::from_call(call, "gemini", None, cancel)).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Toolbox;
    use tokio_util::task::TaskTracker;

    #[tokio::test]
    async fn a_bad_frame_with_multibyte_text_is_answered_not_panicked_on() {
        let workspace = tempfile::tempdir().unwrap();
        let options = crate::tools::ToolboxOptions { workspace: workspace.path().to_owned(), ..Default::default() };
        let broker = crate::approvals::Broker::new(Default::default());
        let ctx = AgentContext::new(Toolbox::new(options).unwrap(), broker, None, TaskTracker::new());
        let (out, mut frames) = mpsc::channel(4);
        let mut session = Session::new(Arc::new(ctx), "test".into(), out);
        let frame = format!("{{\"type\":\"{}\"}}", "é".repeat(300));
        session.on_text(&frame).await;
        let Some(Frame::Text(answer)) = frames.recv().await else { panic!("no answer") };
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["code"], "bad-frame");
        assert!(answer["message"].as_str().unwrap().len() <= 200);
    }
}
