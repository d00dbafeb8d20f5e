//! One `/live` socket's session: the frames between phone and agent pass through, the hello is
//! followed (never checked: the relay holds no token), and the voice frames are answered here.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span};

use super::agent::{AgentLink, HostedTools};
use super::budget::{Budget, CHARGE_EVERY};
use super::{
    code_tag, log_call, Hosting, Place, BRIDGE_QUEUE, BUDGET_SPENT, CALL_ID_PREFIX, LAPTOP_OFFLINE_NOTE,
    MAX_DECLARED_TOOLS, TO_AGENT_QUEUE, WIND_DOWN,
};
use crate::gemini::{self, CallLog, VoiceCall, VoiceInput};
use crate::net::relay_framing::{is_notice, Presence};
use crate::protocol::{self, AgentMessage, CallErrorCode, ErrorCode, Frame, PeerRole, ToolError, ToolResult};
use crate::relay::metrics::RelayMetrics;
use crate::relay::service::{Action, End, OutFrame, Push, SendQueue, GOING_AWAY, OP_BINARY, OP_CONTINUATION, OP_TEXT};
use crate::tools::gemini_declarations;

/// One `/live` socket's session: passes frames through and hosts its voice call.
pub(super) struct LiveSession<'a> {
    hosting: &'a Hosting,
    code_tag: String,
    place: Place<'a>,
    /// The phone's address, as the per-address limits count it.
    client: IpAddr,
    phone: Arc<SendQueue>,
    metrics: &'a Arc<RelayMetrics>,
    /// The agent's frame being put together from its fragments, and its opcode.
    from_agent: Option<(u8, Vec<u8>)>,
    max_frame_len: usize,
    /// How far the current session's hello has come.
    handshake: Handshake,
    agent: Arc<AgentLink>,
    call: Option<Call>,
    bridge_tx: mpsc::Sender<Frame>,
    bridge_rx: mpsc::Receiver<Frame>,
    agent_rx: mpsc::Receiver<String>,
    /// The bridge and the call's log line.
    tasks: TaskTracker,
}

/// The running call.
struct Call {
    input: mpsc::Sender<VoiceInput>,
    end: CancellationToken,
    deadline: Instant,
    /// Unix ms at the start: session events from before it are not news.
    started_ms: u64,
    /// Charges the call's time to the daily budget.
    meter: Meter,
    /// When the meter charges next.
    budget_check: Instant,
}

/// A running call's time, charged to the operator's daily budget as it goes and at its end.
struct Meter {
    budget: Arc<Budget>,
    metrics: Arc<RelayMetrics>,
    since: Instant,
}

impl Meter {
    /// Charges the time since the last charge; returns the time left today (`None`: no limit).
    fn charge(&mut self, end: bool) -> Option<Duration> {
        let now = Instant::now();
        let metrics = &self.metrics;
        let left = self.budget.charge_reporting(now - self.since, end, |used, left| metrics.live_budget(used, left));
        self.since = now;
        left
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.charge(true);
    }
}

/// When a call that leaves `left` of the day's budget, one of `running` calls spending it, charges
/// next: before its share could run out, and at least every [`CHARGE_EVERY`].
fn next_check(left: Option<Duration>, running: usize) -> Instant {
    let wait = left.map_or(CHARGE_EVERY, |left| (left / running.max(1) as u32).clamp(MIN_CHECK, CHARGE_EVERY));
    Instant::now() + wait
}

/// Shortest wait between two charges of a call near the end of the budget.
const MIN_CHECK: Duration = Duration::from_millis(20);

/// How far a session's hello has come, as far as the relay can tell: it cannot check the proofs
/// (it never holds the token), only that the frames came in their order, each from its side.
#[derive(Debug, PartialEq)]
enum Handshake {
    /// No challenge from the current agent socket yet, or the last hello went wrong.
    Waiting,
    /// The agent's challenge went to the phone.
    Challenged,
    /// The phone answered it with a well-formed protocol-2 hello.
    HelloSent,
    /// The agent accepted that hello: `hello_ok` with a proof, listing these tools.
    Accepted(Vec<String>),
}

impl Handshake {
    /// After an agent frame of `kind` (`hello_ok` parsed as `hello_ok`).
    fn on_agent(&mut self, kind: &str, hello_ok: Option<&protocol::HelloOk>) {
        *self = match (std::mem::replace(self, Handshake::Waiting), kind, hello_ok) {
            (_, "challenge", _) => Handshake::Challenged,
            (Handshake::HelloSent, "hello_ok", Some(ok))
                if ok.proof.as_deref().is_some_and(protocol::is_hello_proof) =>
            {
                Handshake::Accepted(ok.tools.clone())
            }
            (Handshake::HelloSent, "hello_ok" | "error", _) => Handshake::Waiting,
            (state, _, _) => state,
        };
    }

    /// After the phone's `hello`.
    fn on_phone_hello(&mut self, hello: &Map<String, Value>) {
        let text = |field: &str| hello.get(field).and_then(Value::as_str);
        let well_formed = hello.get("protocol").and_then(Value::as_u64) == Some(u64::from(protocol::PROTOCOL_VERSION))
            && text("nonce").is_some_and(protocol::is_hello_nonce)
            && text("proof").is_some_and(protocol::is_hello_proof)
            && !hello.contains_key("token");
        *self = match self {
            Handshake::Challenged if well_formed => Handshake::HelloSent,
            _ => Handshake::Waiting,
        };
    }

    /// The tools of the accepted `hello_ok`.
    fn tools(&self) -> Option<&[String]> {
        match self {
            Handshake::Accepted(tools) => Some(tools),
            _ => None,
        }
    }
}

/// Gemini's declarations for the tools of a `hello_ok` (at most [`MAX_DECLARED_TOOLS`]), built as
/// a self-hosted call builds them: an agent that lists `fleet` gets the `env` argument on the rest.
pub(super) fn hosted_declarations(tools: &[String]) -> Value {
    gemini_declarations(&tools[..tools.len().min(MAX_DECLARED_TOOLS)])
}

/// Why the session ended.
enum Ending {
    /// The phone left or was replaced: the call ends at once.
    PhoneGone,
    /// The relay shuts down: the call ends with `call_ended` and the socket with 1001.
    Shutdown,
}

impl<'a> LiveSession<'a> {
    pub(super) fn new(
        hosting: &'a Hosting,
        place: Place<'a>,
        client: IpAddr,
        phone: Arc<SendQueue>,
        metrics: &'a Arc<RelayMetrics>,
        max_frame_len: usize,
    ) -> Self {
        let (bridge_tx, bridge_rx) = mpsc::channel(BRIDGE_QUEUE);
        let (agent_tx, agent_rx) = mpsc::channel(TO_AGENT_QUEUE);
        LiveSession {
            hosting,
            code_tag: code_tag(&format!("{:032x}", place.member.code())),
            place,
            client,
            phone,
            metrics,
            from_agent: None,
            max_frame_len,
            handshake: Handshake::Waiting,
            agent: Arc::new(AgentLink::new(agent_tx)),
            call: None,
            bridge_tx,
            bridge_rx,
            agent_rx,
            tasks: TaskTracker::new(),
        }
    }

    /// Runs the session until the phone or the relay ends it; returns the tasks of its call.
    pub(super) async fn run(
        mut self,
        mut from_phone: mpsc::Receiver<OutFrame>,
        cancel: &CancellationToken,
    ) -> TaskTracker {
        let ending = loop {
            let deadline = self.call.as_ref().map(|call| call.deadline);
            let budget_check = self.call.as_ref().map(|call| call.budget_check);
            let call_end = self.call.as_ref().map(|call| call.end.clone());
            tokio::select! {
                biased;
                () = cancel.cancelled() => break Ending::Shutdown,
                () = self.phone.ending() => break Ending::PhoneGone,
                frame = from_phone.recv() => match frame {
                    Some(frame) => self.on_phone_frame(frame).await,
                    None => break Ending::PhoneGone,
                },
                Some(message) = self.bridge_rx.recv() => self.bridge_to_phone(message).await,
                action = self.place.inbox.next() => match action {
                    Action::Frame(frame) => self.on_agent_part(frame).await,
                    Action::Close(end) => {
                        // Too slow a reader, or closed at the agent's request: the phone hears
                        // what the agent sent it before (a refusal), then why.
                        let _ = timeout(WIND_DOWN, self.phone.drained()).await;
                        self.phone.end(end);
                        break Ending::PhoneGone;
                    }
                    Action::Ping | Action::Pong(_) => {}
                },
                Some(text) = self.agent_rx.recv() => self.place.to_agent(OutFrame::text(text)).await,
                () = crate::net::liveness::cancelled(call_end) => {
                    self.call = None;
                }
                () = crate::net::liveness::sleep_until(deadline) => {
                    debug!("hosted call reached the operator's time limit");
                    if let Some(call) = self.call.take() {
                        call.end.cancel();
                    }
                }
                () = crate::net::liveness::sleep_until(budget_check) => self.check_budget().await,
            }
        };
        self.finish(ending).await
    }

    async fn finish(mut self, ending: Ending) -> TaskTracker {
        self.laptop_offline();
        if let Some(call) = self.call.take() {
            call.end.cancel();
        }
        self.tasks.close();
        if let Ending::Shutdown = ending {
            // The bridge says `call_ended`; the phone gets it before the socket closes.
            let drain = async {
                loop {
                    tokio::select! {
                        Some(message) = self.bridge_rx.recv() => self.bridge_to_phone(message).await,
                        () = self.tasks.wait() => break,
                    }
                }
                while let Ok(message) = self.bridge_rx.try_recv() {
                    self.bridge_to_phone(message).await;
                }
                self.phone.drained().await;
            };
            let _ = timeout(WIND_DOWN, drain).await;
            self.phone.end(End::close(GOING_AWAY, "relay shutting down"));
        }
        // The bridge closes Gemini's socket on its own once its call ended; the log line waits for it.
        self.tasks
    }

    async fn on_phone_frame(&mut self, frame: OutFrame) {
        if frame.opcode == OP_BINARY {
            if let (Some(call), Some(&protocol::AUDIO_PREFIX)) = (&self.call, frame.payload.first()) {
                // A full queue means Gemini is behind; dropping 20 ms of audio beats growing memory.
                let pcm = protocol::Bytes::from(frame.payload).slice(1..);
                let _ = call.input.try_send(VoiceInput::Audio(pcm));
            }
            return;
        }
        let Ok(mut map) = serde_json::from_slice::<Map<String, Value>>(&frame.payload) else {
            // Not an object: the agent answers `bad-frame`.
            return self.to_agent(frame).await;
        };
        let kind = map.get("type").and_then(Value::as_str).unwrap_or_default();
        let id = map.get("id").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "hello" => {
                self.handshake.on_phone_hello(&map);
                self.to_agent(frame).await;
            }
            "call_start" => self.start_call().await,
            "say" => {
                let text = map.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
                self.give_call(VoiceInput::Text(text)).await;
            }
            "audio_end" => self.give_call(VoiceInput::AudioEnd).await,
            "call_end" => match self.call.take() {
                Some(call) => call.end.cancel(),
                None => self.to_phone_message(gemini::no_call_error()).await,
            },
            "tool_call" if id.starts_with(CALL_ID_PREFIX) => {
                let error = ToolError::new(
                    ErrorCode::InvalidArgs,
                    format!("ids starting with {CALL_ID_PREFIX} are the relay's"),
                );
                let refused = ToolResult::failure(crate::text::prefix(id, protocol::MAX_CALL_ID_LEN).to_owned(), error);
                self.to_phone_message(AgentMessage::ToolResult(refused)).await;
            }
            "cancel" if id.starts_with(CALL_ID_PREFIX) => debug!("dropped a phone's cancel of a relay call"),
            "tool_call" if map.contains_key("caller") => {
                map.remove("caller");
                self.to_agent(OutFrame::text(Value::Object(map).to_string())).await;
            }
            _ => self.to_agent(frame).await,
        }
    }

    /// Charges the running call's time; ends the call when the day's budget is spent.
    async fn check_budget(&mut self) {
        let Some(call) = &mut self.call else { return };
        let left = call.meter.charge(false);
        if left != Some(Duration::ZERO) {
            call.budget_check = next_check(left, self.hosting.running());
            return;
        }
        debug!("hosted call reached the daily budget");
        self.metrics.live_budget_cutoff();
        // `call_error` first, then the bridge's `call_ended`, as for any failure during a call.
        let spent = AgentMessage::CallError { code: CallErrorCode::BudgetSpent, message: BUDGET_SPENT.into() };
        self.to_phone_message(spent).await;
        if let Some(call) = self.call.take() {
            call.end.cancel();
        }
    }

    /// `say` or `audio_end` for the running call, or `no-call`.
    async fn give_call(&mut self, input: VoiceInput) {
        let answer = match &self.call {
            Some(call) => gemini::give(&call.input, input),
            None => Some(gemini::no_call_error()),
        };
        if let Some(answer) = answer {
            self.to_phone_message(answer).await;
        }
    }

    async fn start_call(&mut self) {
        if let Some(previous) = self.call.take() {
            previous.end.cancel();
        }
        let Some(tools) = self.handshake.tools() else {
            let message = "the laptop has not accepted this session (it is offline, or the hello was refused)";
            let refused = AgentMessage::CallError { code: CallErrorCode::Unavailable, message: message.into() };
            return self.to_phone_message(refused).await;
        };
        let guard = match self.hosting.admit(self.metrics, self.client) {
            Ok(guard) => guard,
            Err(refusal) => {
                debug!(reason = refusal.metric(), "hosted call refused");
                self.metrics.live_refused(refusal.metric());
                return self.to_phone_message(refusal.to_message()).await;
            }
        };
        let voice_tools =
            Arc::new(HostedTools { agent: Arc::clone(&self.agent), declarations: hosted_declarations(tools) });
        let span = info_span!("hosted_call", code = %self.code_tag);
        let VoiceCall { input, end, summary } = span.in_scope(|| {
            let config = self.hosting.config.gemini.clone();
            gemini::start_logged(CallLog::Summarised, config, voice_tools, self.bridge_tx.clone(), &self.tasks)
        });
        let code = self.code_tag.clone();
        let started = SystemTime::now();
        self.tasks.spawn(async move {
            // A bridge that ended without its summary (a panic) is logged as such, not as a clean call.
            let (summary, failure) = match summary.await {
                Ok(summary) => {
                    let failure = summary.failure.map_or("none", |code| code.as_str());
                    (summary, failure)
                }
                Err(_) => (gemini::CallSummary::default(), "internal"),
            };
            drop(guard);
            log_call(&code, started, &summary, failure);
        });
        let deadline = Instant::now() + self.hosting.config.max_call_time;
        let started_ms = crate::sessions::event::now_ms();
        let budget = Arc::clone(&self.hosting.config.budget);
        let budget_check = next_check(budget.state().1, self.hosting.running());
        let meter = Meter { budget, metrics: Arc::clone(self.metrics), since: Instant::now() };
        self.call = Some(Call { input, end, deadline, started_ms, meter, budget_check });
    }

    /// A fragment of the agent's frame to this phone: the frame is put together (within the
    /// relay's message limit) and then looked at.
    async fn on_agent_part(&mut self, frame: OutFrame) {
        if frame.opcode != OP_CONTINUATION && frame.fin {
            return self.on_agent_frame(frame).await;
        }
        let (opcode, so_far) = self.from_agent.get_or_insert_with(|| (frame.opcode, Vec::new()));
        if so_far.len() + frame.payload.len() > self.max_frame_len {
            self.from_agent = None;
            return debug!("dropped an agent frame over the message limit");
        }
        so_far.extend_from_slice(&frame.payload);
        let opcode = *opcode;
        if frame.fin {
            if let Some((_, payload)) = self.from_agent.take() {
                self.on_agent_frame(OutFrame { opcode, fin: true, tag: None, payload }).await;
            }
        }
    }

    async fn on_agent_frame(&mut self, frame: OutFrame) {
        if frame.opcode != OP_TEXT {
            return self.to_phone(frame).await;
        }
        if is_notice(&frame.payload) {
            let presence = std::str::from_utf8(&frame.payload).ok().and_then(Presence::parse);
            if presence.is_some_and(|presence| presence.peer == PeerRole::Agent) {
                // A new agent socket starts a new session: a new hello, a new `hello_ok`.
                self.handshake = Handshake::Waiting;
                self.laptop_offline();
                self.from_agent = None;
            }
            return self.phone.push_notice(frame);
        }
        let Ok(peek) = serde_json::from_slice::<Peek>(&frame.payload) else {
            return self.to_phone(frame).await;
        };
        let own = peek.id.as_deref().is_some_and(|id| id.starts_with(CALL_ID_PREFIX));
        match peek.kind.as_str() {
            "hello_ok" => {
                let hello_ok = match serde_json::from_slice::<AgentMessage>(&frame.payload) {
                    Ok(AgentMessage::HelloOk(hello_ok)) => Some(hello_ok),
                    _ => None,
                };
                self.handshake.on_agent("hello_ok", hello_ok.as_ref());
                if self.handshake.tools().is_some() {
                    self.agent.state().present = true;
                }
                self.to_phone(frame).await;
            }
            kind @ ("challenge" | "error") => {
                self.handshake.on_agent(kind, None);
                self.to_phone(frame).await;
            }
            "tool_result" if own => {
                if let Ok(AgentMessage::ToolResult(result)) = serde_json::from_slice::<AgentMessage>(&frame.payload) {
                    self.agent.answer(result);
                }
            }
            "image" if own => {
                let Ok(AgentMessage::Image(mut image)) = serde_json::from_slice::<AgentMessage>(&frame.payload) else {
                    return;
                };
                let Some(gemini_id) = self.agent.gemini_id(&image.id) else { return };
                image.id = gemini_id;
                self.to_phone_message(AgentMessage::Image(image)).await;
            }
            "tool_progress" if own => {}
            "agent_event" => {
                self.tell_call_of_session(&frame.payload);
                self.to_phone(frame).await;
            }
            _ => self.to_phone(frame).await,
        }
    }

    /// A session event on its way to the phone: a turn that ended or a session that failed since
    /// the call started is told to the call's model.
    fn tell_call_of_session(&self, payload: &[u8]) {
        let Some(call) = &self.call else { return };
        let Ok(event) = serde_json::from_slice::<crate::protocol::SessionEvent>(payload) else { return };
        if event.at < call.started_ms {
            return;
        }
        if let Some(note) = crate::sessions::voice::voice_note(&event, None) {
            // A full queue means the call is behind; the phone still shows the event.
            let _ = call.input.try_send(VoiceInput::Text(note));
        }
    }

    /// The agent is gone (or starts anew): calls in flight are answered with that, and a running
    /// voice call's model is told.
    fn laptop_offline(&mut self) {
        if let (true, Some(call)) = (self.agent.offline(), &self.call) {
            let _ = call.input.try_send(VoiceInput::Text(LAPTOP_OFFLINE_NOTE.into()));
        }
    }

    async fn bridge_to_phone(&self, frame: Frame) {
        let frame = match frame {
            Frame::Text(text) => OutFrame::text(text.to_string()),
            Frame::Binary(data) => {
                // Model speech: a phone that cannot keep up loses speech rather than stalling the call.
                if let Push::Full(_) = self.phone.push(OutFrame::binary(Vec::from(data))) {
                    debug!("phone is behind; model audio dropped");
                }
                return;
            }
        };
        self.to_phone(frame).await;
    }

    async fn to_phone_message(&self, message: AgentMessage) {
        self.to_phone(OutFrame::text(message.to_json())).await;
    }

    /// Queues a frame for the phone. While its queue is full the session waits; a phone that
    /// reads nothing for the stall timeout is closed 1013.
    async fn to_phone(&self, mut frame: OutFrame) {
        loop {
            match self.phone.push(frame) {
                Push::Queued | Push::Dropped => return,
                Push::Full(back) => frame = back,
            }
            if !self.phone.room_or_stall(frame.len(), self.place.stall_timeout).await {
                debug!("the phone stopped reading; closed it");
                return;
            }
        }
    }

    async fn to_agent(&self, frame: OutFrame) {
        self.place.to_agent(frame).await;
    }
}

/// What the session reads of an agent frame to decide where it goes.
#[derive(Deserialize)]
struct Peek {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_with_the_router_gets_env_on_its_tools_and_fleet_declared() {
        let names = |tools: &[&str]| tools.iter().map(|name| name.to_string()).collect::<Vec<_>>();
        let plain = hosted_declarations(&names(&["list_dir", "run_command"]));
        assert!(plain.as_array().unwrap().iter().all(|d| d.pointer("/parameters/properties/env").is_none()));
        let host = hosted_declarations(&names(&["list_dir", "fleet", "run_command"]));
        let host = host.as_array().unwrap();
        assert_eq!(host.len(), 3);
        for declaration in host.iter().filter(|d| d["name"] != "fleet") {
            assert_eq!(declaration.pointer("/parameters/properties/env/type"), Some(&Value::from("STRING")));
        }
        let fleet = host.iter().find(|d| d["name"] == "fleet").unwrap();
        assert_eq!(fleet, &gemini_declarations(&["fleet"])[0], "fleet as a self-hosted call declares it");
        let many: Vec<String> = (0..MAX_DECLARED_TOOLS + 10).map(|n| format!("tool_{n}")).collect();
        assert_eq!(hosted_declarations(&many).as_array().unwrap().len(), MAX_DECLARED_TOOLS);
    }

    #[test]
    fn only_challenge_hello_and_a_proven_hello_ok_in_that_order_accept_a_session() {
        let hello = |fields: Value| fields.as_object().unwrap().clone();
        let good =
            hello(serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32),"proof":"a".repeat(64)}));
        let ok = |proof: Option<&str>| protocol::HelloOk {
            vapid_public_key: None,
            agent: "voxa/0".into(),
            mode: "hosted".into(),
            tools: vec!["list_dir".into()],
            protocol: 2,
            proof: proof.map(str::to_owned),
            env_key: None,
            host: None,
            noise: None,
        };
        let proven = ok(Some(&"b".repeat(64)));

        let mut handshake = Handshake::Waiting;
        handshake.on_agent("hello_ok", Some(&proven));
        assert_eq!(handshake, Handshake::Waiting, "no challenge, no hello");
        handshake.on_agent("challenge", None);
        handshake.on_phone_hello(&good);
        handshake.on_agent("hello_ok", Some(&ok(None)));
        assert_eq!(handshake, Handshake::Waiting, "no agent proof");
        for bad in [
            hello(serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32)})),
            hello(serde_json::json!({"type":"hello","protocol":1,"nonce":"1".repeat(32),"proof":"a".repeat(64)})),
            hello(serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32),"proof":"A".repeat(64)})),
            hello(
                serde_json::json!({"type":"hello","protocol":2,"nonce":"1".repeat(32),"proof":"a".repeat(64),"token":"t"}),
            ),
        ] {
            handshake.on_agent("challenge", None);
            handshake.on_phone_hello(&bad);
            handshake.on_agent("hello_ok", Some(&proven));
            assert_eq!(handshake, Handshake::Waiting, "{bad:?}");
        }
        handshake.on_agent("challenge", None);
        handshake.on_phone_hello(&good);
        handshake.on_agent("error", None);
        handshake.on_agent("hello_ok", Some(&proven));
        assert_eq!(handshake, Handshake::Waiting, "a refused hello");

        handshake.on_agent("challenge", None);
        handshake.on_phone_hello(&good);
        handshake.on_agent("hello_ok", Some(&proven));
        assert_eq!(handshake.tools(), Some(&["list_dir".to_owned()][..]));
        handshake.on_agent("error", None);
        assert!(handshake.tools().is_some(), "a later error (a bad frame) keeps the session");
        handshake.on_phone_hello(&good);
        assert_eq!(handshake, Handshake::Waiting, "a hello that answers no challenge");
    }
}
