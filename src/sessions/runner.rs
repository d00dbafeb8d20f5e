//! One session's actor: owns the agent's process, takes turns in order (queued while one runs),
//! asks the gate for every prompt, records every event, and ends the process on `stop`, after an
//! idle spell, or when voxa stops. It runs while there is a process or a turn to take; the host
//! starts it again (resuming the agent) for the next turn.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::adapter::{Adapter, Ask, Output};
use super::event::{now_ms, MAX_TEXT_LEN};
use super::process::{Process, Step};
use super::Shared;
use crate::approvals::{Answer, Request};
use crate::protocol::{DecidedBy, Decision};
use crate::protocol::{ErrorCode, ToolError};
use crate::protocol::{Event, SessionState};

/// Longest one turn may run before it is interrupted.
pub const TURN_TIMEOUT: Duration = crate::tools::CODING_AGENT_TIMEOUT;
/// After an interrupt, how long the turn gets to end before the process is stopped.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);
/// Most bytes of events one turn records; past it, the agent's text and tool output are left out
/// (one `error` event says so) until the turn ends.
pub const TURN_EVENT_BYTES: usize = 32 << 20;
/// Partial text is gathered up to this many bytes, or this long, into one event.
const TEXT_BATCH: usize = 4 << 10;
const TEXT_BATCH_DELAY: Duration = Duration::from_millis(40);
/// Turns waiting behind the running one, at most.
pub const MAX_QUEUED_TURNS: usize = 32;

/// What the host asks of a session.
pub enum Command {
    Send { text: String, by: String, reply: oneshot::Sender<Result<bool, ToolError>> },
    Interrupt { reply: oneshot::Sender<Result<(), ToolError>> },
    Stop { reply: oneshot::Sender<()> },
}

/// The host's handle on a running session.
#[derive(Clone)]
pub struct RunnerHandle {
    pub commands: mpsc::Sender<Command>,
    /// Open prompts, for `agent_sessions`.
    pub pending: Arc<AtomicUsize>,
    /// Tells one runner from the next of the same session.
    pub generation: u64,
}

/// An answer, and the agent's id of the prompt it answers.
type AnswerOf = (String, Answer);

struct OpenAsk {
    ask: Ask,
    approval: String,
    /// Withdraws the approval.
    withdraw: CancellationToken,
}

/// One session's actor.
pub struct Runner {
    id: String,
    shared: Arc<Shared>,
    adapter: Box<dyn Adapter>,
    cwd: std::path::PathBuf,
    resume: Option<String>,
    process: Option<Process>,
    queue: VecDeque<String>,
    working: bool,
    turn_deadline: Option<Instant>,
    interrupt_deadline: Option<Instant>,
    idle_since: Instant,
    turn_bytes: usize,
    turn_capped: bool,
    stopping: bool,
    /// voxa is stopping: no new turn is taken.
    shutting_down: bool,
    stop_replies: Vec<oneshot::Sender<()>>,
    text: String,
    text_since: Option<Instant>,
    asks: HashMap<String, OpenAsk>,
    answers: (mpsc::Sender<AnswerOf>, mpsc::Receiver<AnswerOf>),
    pending: Arc<AtomicUsize>,
    state: SessionState,
}

impl Runner {
    /// Starts the actor of session `id` on the shared task tracker.
    pub fn spawn(
        shared: Arc<Shared>,
        id: String,
        adapter: Box<dyn Adapter>,
        cwd: std::path::PathBuf,
        resume: Option<String>,
        state: SessionState,
        generation: u64,
    ) -> RunnerHandle {
        let (commands, receiver) = mpsc::channel(MAX_QUEUED_TURNS);
        let pending = Arc::new(AtomicUsize::new(0));
        let runner = Runner {
            id,
            shared: shared.clone(),
            adapter,
            cwd,
            resume,
            process: None,
            queue: VecDeque::new(),
            working: false,
            turn_deadline: None,
            interrupt_deadline: None,
            idle_since: Instant::now(),
            turn_bytes: 0,
            turn_capped: false,
            stopping: false,
            shutting_down: false,
            stop_replies: Vec::new(),
            text: String::new(),
            text_since: None,
            asks: HashMap::new(),
            answers: mpsc::channel(16),
            pending: pending.clone(),
            state,
        };
        let shutdown = shared.shutdown.clone();
        let span = tracing::info_span!("session", id = %runner.id);
        shared.tasks.spawn(tracing::Instrument::instrument(runner.run(receiver, shutdown, generation), span));
        RunnerHandle { commands, pending, generation }
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>, shutdown: CancellationToken, generation: u64) {
        loop {
            let idle_at = (self.process.is_some() && !self.working && self.asks.is_empty() && !self.stopping)
                .then(|| self.idle_since + self.shared.idle_stop);
            let flush_at = self.text_since.map(|since| since + TEXT_BATCH_DELAY);
            tokio::select! {
                biased;
                () = shutdown.cancelled(), if !self.shutting_down => {
                    self.shutting_down = true;
                    self.queue.clear();
                    self.begin_stop();
                }
                command = commands.recv() => match command {
                    Some(command) => self.on_command(command).await,
                    None => self.begin_stop(),
                },
                Some((id, answer)) = self.answers.1.recv() => self.on_answer(&id, answer).await,
                step = next_step(&mut self.process) => match step {
                    Step::Line(line) => {
                        let outputs = self.adapter.on_line(&line);
                        self.on_outputs(outputs).await;
                        // A handshake that just finished lets a waiting turn go.
                        if !self.adapter.per_turn() {
                            self.take_next_turn().await;
                        }
                    }
                    Step::Exited(ended) => self.on_exit(ended).await,
                },
                () = sleep_until(flush_at) => self.flush_text(),
                () = sleep_until(self.turn_deadline) => {
                    self.turn_deadline = None;
                    self.record(Event::error(ErrorCode::Timeout.as_str(), format!(
                        "the turn ran for {} minutes and was interrupted", TURN_TIMEOUT.as_secs() / 60)));
                    self.interrupt().await;
                }
                () = sleep_until(self.interrupt_deadline) => {
                    self.interrupt_deadline = None;
                    self.record(Event::error("stuck", "the agent did not end its turn after an interrupt; it was stopped"));
                    self.begin_stop();
                }
                () = sleep_until(idle_at) => self.begin_stop(),
            }
            if self.process.is_none() && (self.queue.is_empty() || self.shutting_down) && !self.working {
                break;
            }
        }
        self.flush_text();
        commands.close();
        // Turns that arrived while this actor ended were never taken: their callers try again
        // with the next actor.
        while let Ok(command) = commands.try_recv() {
            if let Command::Stop { reply } = command {
                let _ = reply.send(());
            }
        }
        for reply in self.stop_replies.drain(..) {
            let _ = reply.send(());
        }
        self.shared.runner_ended(&self.id, generation);
    }

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Send { text, by, reply } => {
                if self.shutting_down {
                    let _ = reply.send(Err(ToolError::new(ErrorCode::Unavailable, "voxa is stopping")));
                    return;
                }
                if self.queue.len() >= MAX_QUEUED_TURNS {
                    let busy = ToolError::new(ErrorCode::Busy, format!("{MAX_QUEUED_TURNS} turns are already waiting"));
                    let _ = reply.send(Err(busy));
                    return;
                }
                self.record(Event::User { text: text.clone(), by });
                let queued = self.working || self.process.as_ref().is_some_and(|_| !self.adapter.ready());
                self.queue.push_back(text);
                let _ = reply.send(Ok(queued));
                self.take_next_turn().await;
            }
            Command::Interrupt { reply } => {
                if self.working {
                    self.interrupt().await;
                }
                let _ = reply.send(Ok(()));
            }
            Command::Stop { reply } => {
                if self.process.is_none() {
                    let _ = reply.send(());
                    return;
                }
                self.stop_replies.push(reply);
                self.queue.clear();
                self.begin_stop();
            }
        }
    }

    /// Starts the next queued turn when nothing runs: the process first, if there is none.
    async fn take_next_turn(&mut self) {
        if self.working || self.stopping || self.queue.is_empty() {
            return;
        }
        let per_turn = self.adapter.per_turn();
        if self.process.is_none() {
            let prompt = if per_turn { self.queue.front().cloned() } else { None };
            if !self.start_process(prompt.as_deref()).await {
                return;
            }
        }
        if !self.adapter.ready() {
            return;
        }
        let Some(text) = self.queue.pop_front() else { return };
        let lines = self.adapter.turn(&text);
        self.working = true;
        self.turn_bytes = 0;
        self.turn_capped = false;
        self.turn_deadline = Some(Instant::now() + TURN_TIMEOUT);
        self.set_state(SessionState::Working);
        if let Err(err) = self.write(&lines).await {
            self.record(Event::error(
                ErrorCode::Internal.as_str(),
                format!("could not hand the turn to the agent: {err}"),
            ));
        }
    }

    async fn start_process(&mut self, prompt: Option<&str>) -> bool {
        let launch = self.adapter.launch(self.resume.as_deref(), prompt);
        let env = self.shared.env.clone();
        match Process::start(&launch, &self.cwd, &env, &self.shared.limits) {
            Ok(process) => {
                self.process = Some(process);
                self.idle_since = Instant::now();
                if !self.adapter.per_turn() {
                    self.set_state(SessionState::Starting);
                }
                let hello = self.adapter.hello(self.resume.as_deref());
                if let Err(err) = self.write(&hello).await {
                    self.record(Event::error(
                        ErrorCode::Internal.as_str(),
                        format!("the agent refused its handshake: {err}"),
                    ));
                }
                true
            }
            Err(err) => {
                let program = launch.program.display();
                self.record(Event::error(ErrorCode::Unavailable.as_str(), format!("could not start {program}: {err}")));
                self.queue.clear();
                self.set_state(SessionState::Failed);
                false
            }
        }
    }

    async fn write(&mut self, lines: &[String]) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let Some(process) = &mut self.process else { return Err(std::io::Error::other("no process")) };
        let written = process.write(lines).await;
        if written.is_err() {
            process.kill();
        }
        written
    }

    async fn interrupt(&mut self) {
        self.interrupt_deadline = Some(Instant::now() + INTERRUPT_GRACE);
        if self.adapter.per_turn() {
            if let Some(process) = &mut self.process {
                process.kill();
            }
            return;
        }
        let lines = self.adapter.interrupt();
        let _ = self.write(&lines).await;
    }

    fn begin_stop(&mut self) {
        self.stopping = true;
        match &mut self.process {
            Some(process) => process.close_input(),
            None => {
                self.queue.clear();
            }
        }
    }

    async fn on_outputs(&mut self, outputs: Vec<Output>) {
        for output in outputs {
            match output {
                Output::Event(event) => self.on_event(event),
                Output::ResumeId(id) => {
                    if self.resume.as_deref() != Some(id.as_str()) {
                        if let Err(err) = self.shared.store.set_resume(&self.id, &id) {
                            warn!("{err:#}");
                        }
                        self.resume = Some(id);
                    }
                }
                Output::Ask { ask, request } => {
                    self.flush_text();
                    // A grant ("Allow for session") answers at once: the record says which.
                    if let Some((approval, _grant)) = self.shared.approvals.granted(&request) {
                        let Request { tool, input, summary, risk, questions, .. } = request;
                        let expires_at = now_ms();
                        self.record(Event::Approval {
                            approval: approval.clone(),
                            tool,
                            input,
                            summary,
                            risk,
                            questions,
                            expires_at,
                        });
                        self.record(Event::ApprovalResolved {
                            approval,
                            decision: Decision::Allow,
                            by: DecidedBy::Grant,
                            answers: None,
                        });
                        let answer =
                            Answer { decision: Decision::Allow, message: None, answers: None, by: DecidedBy::Grant };
                        let lines = self.adapter.answer(&ask, &answer);
                        let _ = self.write(&lines).await;
                        continue;
                    }
                    let shown = (request.tool.clone(), request.input.clone(), request.summary.clone(), request.risk);
                    let questions = request.questions.clone();
                    let pending = self.shared.approvals.request(request);
                    let approval = pending.id().to_owned();
                    let timeout = u64::try_from(self.shared.approvals.timeout().as_millis()).unwrap_or(u64::MAX);
                    let expires_at = self
                        .shared
                        .approvals
                        .get(&approval)
                        .map_or_else(|| now_ms().saturating_add(timeout), |frame| frame.expires_at);
                    let withdraw = CancellationToken::new();
                    let answers = self.answers.0.clone();
                    let ask_id = ask.id.clone();
                    let cancel = withdraw.clone();
                    // The broker denies at the expiry; the wait never outlives it.
                    self.shared.tasks.spawn(async move {
                        let answer = pending.wait(&cancel).await;
                        let _ = answers.send((ask_id, answer)).await;
                    });
                    // The count and the state are right by the time anyone hears of the prompt.
                    self.asks.insert(ask.id.clone(), OpenAsk { ask, approval: approval.clone(), withdraw });
                    self.pending.store(self.asks.len(), Ordering::Relaxed);
                    self.set_state(SessionState::Waiting);
                    let (tool, input, summary, risk) = shown;
                    self.record(Event::Approval { approval, tool, input, summary, risk, questions, expires_at });
                }
                Output::Withdrawn(id) => self.withdraw(&id),
                Output::TurnEnded => self.end_turn().await,
                Output::Write(lines) => {
                    let _ = self.write(&lines).await;
                }
                Output::Fail => {
                    self.queue.clear();
                    if let Some(process) = &mut self.process {
                        process.kill();
                    }
                }
            }
        }
    }

    fn on_event(&mut self, event: Event) {
        if let Event::Text { text, partial: true } = &event {
            if self.text.len() + text.len() > MAX_TEXT_LEN {
                self.flush_text();
            }
            self.text.push_str(text);
            self.text_since.get_or_insert_with(Instant::now);
            if self.text.len() >= TEXT_BATCH {
                self.flush_text();
            }
            return;
        }
        self.flush_text();
        self.record(event);
    }

    fn flush_text(&mut self) {
        self.text_since = None;
        if self.text.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.text);
        self.record(Event::Text { text, partial: true });
    }

    async fn on_answer(&mut self, id: &str, answer: Answer) {
        let Some(open) = self.asks.remove(id) else { return };
        self.pending.store(self.asks.len(), Ordering::Relaxed);
        let answers = answer.answers.clone();
        self.record(Event::ApprovalResolved {
            approval: open.approval,
            decision: answer.decision,
            by: answer.by,
            answers,
        });
        let lines = self.adapter.answer(&open.ask, &answer);
        let _ = self.write(&lines).await;
        if self.asks.is_empty() && self.working {
            self.set_state(SessionState::Working);
        }
    }

    fn withdraw(&mut self, id: &str) {
        let Some(open) = self.asks.remove(id) else { return };
        open.withdraw.cancel();
        self.pending.store(self.asks.len(), Ordering::Relaxed);
        let withdrawn = Event::ApprovalResolved {
            approval: open.approval,
            decision: Decision::Deny,
            by: DecidedBy::Withdrawn,
            answers: None,
        };
        self.record(withdrawn);
        if self.asks.is_empty() && self.working {
            self.set_state(SessionState::Working);
        }
    }

    fn withdraw_all(&mut self) {
        let ids: Vec<String> = self.asks.keys().cloned().collect();
        for id in ids {
            self.withdraw(&id);
        }
    }

    async fn end_turn(&mut self) {
        self.flush_text();
        self.withdraw_all();
        self.working = false;
        self.turn_deadline = None;
        self.interrupt_deadline = None;
        self.idle_since = Instant::now();
        if self.queue.is_empty() || self.stopping {
            if self.process.is_some() || self.adapter.per_turn() {
                self.set_state(SessionState::Idle);
            }
        } else if !self.adapter.per_turn() {
            self.take_next_turn().await;
        }
    }

    async fn on_exit(&mut self, ended: super::process::Ended) {
        self.process = None;
        self.flush_text();
        if self.adapter.per_turn() {
            let outputs = self.adapter.on_exit(ended.exit_code);
            self.on_outputs(outputs).await;
            self.withdraw_all();
            self.working = false;
            if std::mem::take(&mut self.stopping) {
                self.queue.clear();
            }
            if self.shutting_down {
                self.queue.clear();
            }
            self.take_next_turn().await;
            return;
        }
        self.withdraw_all();
        let crashed = !self.stopping || self.working;
        if crashed {
            let mut message = format!("the agent exited (code {})", ended.exit_code);
            if !ended.stderr.is_empty() {
                message.push_str(": ");
                message.push_str(crate::text::suffix(&ended.stderr, 2000));
            }
            if !self.queue.is_empty() {
                message.push_str(&format!("; {} queued turn(s) were not taken", self.queue.len()));
            }
            self.record(Event::error("agent-exited", message));
        }
        if crashed || self.shutting_down {
            self.queue.clear();
        }
        self.working = false;
        self.stopping = false;
        self.turn_deadline = None;
        self.interrupt_deadline = None;
        let state = if self.resume.is_some() || !crashed { SessionState::Ended } else { SessionState::Failed };
        self.set_state(state);
        // A turn sent while the process was stopping starts it again, resumed.
        self.take_next_turn().await;
    }

    fn set_state(&mut self, state: SessionState) {
        if self.state != state {
            self.state = state;
            self.record(Event::State { state });
        }
    }

    /// Records an event, within the turn's budget.
    fn record(&mut self, event: Event) {
        if self.working && matches!(event, Event::Text { .. } | Event::ToolUse { .. } | Event::ToolResult { .. }) {
            if self.turn_capped {
                return;
            }
            self.turn_bytes += serde_json::to_string(&event).map_or(0, |text| text.len());
            if self.turn_bytes > TURN_EVENT_BYTES {
                self.turn_capped = true;
                let cap = TURN_EVENT_BYTES >> 20;
                let message = format!("this turn wrote more than {cap} MiB; the rest of its output is not kept");
                self.shared.record(&self.id, Event::error(ErrorCode::TooLarge.as_str(), message));
                return;
            }
        }
        self.shared.record(&self.id, event);
    }
}

async fn next_step(process: &mut Option<Process>) -> Step {
    match process {
        Some(process) => process.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
