//! One `/live` socket's session with a page: the page's frames ([`LiveMessage`]) start, feed and
//! end its call, the model's calls go to the page and its answers come back ([`PageLink`]), and
//! the bridge's frames go to the page. Nothing here belongs to the pairing: the relay never joins
//! it, never reads its session and never speaks to the laptop.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span};

use super::budget::{Budget, CHARGE_EVERY};
use super::metrics::HostedMetrics;
use super::page::{PageLink, PageTools};
use super::{code_tag, log_call, Hosting, BRIDGE_QUEUE, BUDGET_SPENT, MAX_DECLARED_TOOLS, TO_PAGE_QUEUE, WIND_DOWN};
use crate::gemini::{self, CallLog, Note, VoiceCall, VoiceInput, MAX_SAY_LEN};
use crate::protocol::{self, AgentMessage, CallErrorCode, ErrorCode, Frame, LiveMessage};
use crate::relay::ServiceLine;
use crate::tools::gemini_declarations;

/// The one tool a hosted call's model is never declared: the relay writes the transcript, so the
/// user's "yes" would be the relay's word (the laptop refuses it from this caller too).
const NEVER_DECLARED: &[&str] = &["approve"];

/// One `/live` socket's session: hosts its page's call.
pub(super) struct LiveSession<'a> {
    hosting: &'a Hosting,
    code_tag: String,
    /// The page's socket, run by the relay; a call starts only while a laptop holds its code here,
    /// and its address is what the per-address limits count.
    line: ServiceLine,
    page: Arc<PageLink>,
    call: Option<Call>,
    bridge_tx: mpsc::Sender<Frame>,
    bridge_rx: mpsc::Receiver<Frame>,
    /// The model's `tool_call` and `cancel` frames for the page.
    page_rx: mpsc::Receiver<String>,
    /// The bridge and the call's log line.
    tasks: TaskTracker,
}

/// The running call.
struct Call {
    input: mpsc::Sender<VoiceInput>,
    end: CancellationToken,
    deadline: Instant,
    /// Charges the call's time to the daily budget.
    meter: Meter,
    /// When the meter charges next.
    budget_check: Instant,
}

/// A running call's time, charged to the operator's daily budget as it goes and at its end.
struct Meter {
    budget: Arc<Budget>,
    metrics: Arc<HostedMetrics>,
    since: Instant,
}

impl Meter {
    /// Charges the time since the last charge; returns the time left today (`None`: no limit).
    fn charge(&mut self, end: bool) -> Option<Duration> {
        let now = Instant::now();
        let metrics = &self.metrics;
        let left = self.budget.charge_reporting(now - self.since, end, |used, left| metrics.budget(used, left));
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

/// Gemini's declarations for the tools a page's `call_start` lists (its laptop's `hello_ok` list;
/// at most [`MAX_DECLARED_TOOLS`], never [`NEVER_DECLARED`]), built as a self-hosted call builds
/// them: a laptop that lists `fleet` gets the `env` argument on the rest.
pub(super) fn hosted_declarations(tools: &[String]) -> Value {
    let tools: Vec<&str> = tools
        .iter()
        .map(String::as_str)
        .filter(|name| !NEVER_DECLARED.contains(name))
        .take(MAX_DECLARED_TOOLS)
        .collect();
    gemini_declarations(&tools)
}

/// Why the session ended.
enum Ending {
    /// The page left: the call ends at once.
    PhoneGone,
    /// The relay shuts down: the call ends with `call_ended` and the socket with 1001.
    Shutdown,
}

impl<'a> LiveSession<'a> {
    pub(super) fn new(hosting: &'a Hosting, line: ServiceLine) -> Self {
        let (bridge_tx, bridge_rx) = mpsc::channel(BRIDGE_QUEUE);
        let (page_tx, page_rx) = mpsc::channel(TO_PAGE_QUEUE);
        LiveSession {
            hosting,
            code_tag: code_tag(&format!("{:032x}", line.code())),
            line,
            page: Arc::new(PageLink::new(page_tx)),
            call: None,
            bridge_tx,
            bridge_rx,
            page_rx,
            tasks: TaskTracker::new(),
        }
    }

    /// Runs the session until the page or the relay ends it; returns the tasks of its call.
    pub(super) async fn run(mut self) -> TaskTracker {
        let shutdown = self.line.shutdown();
        let ending = loop {
            let deadline = self.call.as_ref().map(|call| call.deadline);
            let budget_check = self.call.as_ref().map(|call| call.budget_check);
            let call_end = self.call.as_ref().map(|call| call.end.clone());
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break Ending::Shutdown,
                frame = self.line.recv() => match frame {
                    Some(frame) => self.on_phone_frame(frame).await,
                    None => break Ending::PhoneGone,
                },
                Some(message) = self.bridge_rx.recv() => self.bridge_to_phone(message).await,
                Some(text) = self.page_rx.recv() => self.to_phone(Frame::text(text)).await,
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
        self.page.gone();
        if let Some(call) = self.call.take() {
            call.end.cancel();
        }
        self.tasks.close();
        if let Ending::Shutdown = ending {
            // The bridge says `call_ended`; the page gets it before the socket closes.
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
                self.line.drained().await;
            };
            let _ = timeout(WIND_DOWN, drain).await;
            self.line.close(protocol::close::GOING_AWAY, "relay shutting down");
        }
        // The bridge closes Gemini's socket on its own once its call ended; the log line waits for it.
        self.tasks
    }

    async fn on_phone_frame(&mut self, frame: Frame) {
        let text = match frame {
            Frame::Text(text) => text,
            Frame::Binary(data) => {
                if let (Some(call), Some(&protocol::AUDIO_PREFIX)) = (&self.call, data.first()) {
                    // A full queue means Gemini is behind; dropping 20 ms of audio beats growing memory.
                    let _ = call.input.try_send(VoiceInput::Audio(data.slice(1..)));
                }
                return;
            }
        };
        let message = match LiveMessage::parse(text.as_bytes()) {
            Ok(message) => message,
            Err(err) => {
                debug!(%err, "a page sent a frame /live does not take");
                let reason = crate::text::prefix(&err.to_string(), 200).to_owned();
                let refused = AgentMessage::Error { code: ErrorCode::BadFrame, message: Some(reason) };
                return self.to_phone_message(refused).await;
            }
        };
        match message {
            LiveMessage::CallStart { tools } => self.start_call(&tools).await,
            LiveMessage::Say { text } => self.give_call(VoiceInput::Text(text)).await,
            LiveMessage::AudioEnd => self.give_call(VoiceInput::AudioEnd).await,
            LiveMessage::CallEnd => match self.call.take() {
                Some(call) => call.end.cancel(),
                None => self.to_phone_message(gemini::no_call_error()).await,
            },
            LiveMessage::ToolResult(result) => self.page.answer(result),
            LiveMessage::Narrate { text } => {
                let note = Note::plain(crate::text::prefix(&text, MAX_SAY_LEN));
                if let Some(call) = &self.call {
                    // A call that is not keeping up loses a note rather than stalling the page.
                    let _ = call.input.try_send(VoiceInput::Note(note));
                }
            }
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
        self.hosting.metrics.budget_cutoff();
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

    async fn start_call(&mut self, tools: &[String]) {
        if let Some(previous) = self.call.take() {
            previous.end.cancel();
        }
        // The operator's key serves paired laptops: one must hold this code here now.
        if !self.line.agent_present() {
            let message = "the laptop of this pairing is not connected to this relay";
            let refused = AgentMessage::CallError { code: CallErrorCode::Unavailable, message: message.into() };
            return self.to_phone_message(refused).await;
        }
        let guard = match self.hosting.admit(self.line.client()) {
            Ok(guard) => guard,
            Err(refusal) => {
                debug!(reason = refusal.metric(), "hosted call refused");
                self.hosting.metrics.refused(refusal.metric());
                return self.to_phone_message(refusal.to_message()).await;
            }
        };
        let voice_tools =
            Arc::new(PageTools { page: Arc::clone(&self.page), declarations: hosted_declarations(tools) });
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
        let budget = Arc::clone(&self.hosting.config.budget);
        let budget_check = next_check(budget.state().1, self.hosting.running());
        let meter = Meter { budget, metrics: Arc::clone(&self.hosting.metrics), since: Instant::now() };
        self.call = Some(Call { input, end, deadline, meter, budget_check });
    }

    async fn bridge_to_phone(&self, frame: Frame) {
        if let Frame::Binary(_) = frame {
            // Model speech: a page that cannot keep up loses speech rather than stalling the call.
            if !self.line.try_send(frame) {
                debug!("the page is behind; model audio dropped");
            }
            return;
        }
        self.to_phone(frame).await;
    }

    async fn to_phone_message(&self, message: AgentMessage) {
        self.to_phone(Frame::from(message)).await;
    }

    /// Queues a frame for the page. While its queue is full the session waits; a page that reads
    /// nothing for the stall timeout is closed 1013.
    async fn to_phone(&self, frame: Frame) {
        self.line.send(frame).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_s_tools_are_declared_with_env_and_fleet_on_a_host_and_never_approve() {
        let names = |tools: &[&str]| tools.iter().map(|name| name.to_string()).collect::<Vec<_>>();
        let declared = |declarations: &Value| -> Vec<String> {
            declarations.as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_owned()).collect()
        };
        let plain = hosted_declarations(&names(&["list_dir", "run_command", "approve", "approvals", "brief"]));
        assert_eq!(declared(&plain), ["list_dir", "run_command", "approvals", "brief"], "approve is never declared");
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
        assert_eq!(hosted_declarations(&names(&["9bad", "has space"])), serde_json::json!([]));
    }
}
