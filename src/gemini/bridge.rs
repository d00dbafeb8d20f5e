//! The actor of one voice call: it owns the Gemini connection, the running tool calls and the
//! resumption handle, and bridges the phone's input to the service and the service's answers back.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::consent::Ledger;
use super::notes::{Floor, Note};
use super::socket::{self, GeminiSocket};
use super::wire::{self, ServerEvent, Usage};
use super::{
    CallErrorCode, CallFailure, CallLog, CallSummary, GeminiConfig, VoiceInput, VoiceTools, GAP_AUDIO_BYTES, GAP_TEXTS,
    GEMINI_SEND_TIMEOUT, GO_AWAY_DEFAULT, GO_AWAY_MARGIN, MAX_AUDIO_CHUNK, MAX_SAY_LEN, MAX_TRANSCRIPT_LEN,
    RESUME_ATTEMPTS,
};
use crate::net::dial::DialOptions;
use crate::net::liveness::{Liveness, Pulse};
use crate::protocol::{self, TranscriptRole};
use crate::protocol::{AgentMessage, Bytes, Frame, ToolError};
use crate::tools::ToolOutput;

/// Logs at `$loud` for a narrated call, at `debug` for a summarised one.
macro_rules! call_note {
    ($log:expr, $loud:ident, $($arg:tt)+) => {
        match $log {
            CallLog::Narrated => tracing::$loud!($($arg)+),
            CallLog::Summarised => tracing::debug!($($arg)+),
        }
    };
}

/// Failures of the transport, worth another attempt when resuming.
fn is_transient(code: CallErrorCode) -> bool {
    matches!(code, CallErrorCode::GeminiUnreachable | CallErrorCode::GeminiClosed)
}
/// A connection being opened (or resumed).
type Connecting = Pin<Box<dyn Future<Output = Result<GeminiSocket, CallFailure>> + Send>>;

/// The Gemini side of a call: ready, or being opened.
pub(super) enum Conn {
    Connecting {
        attempt: Connecting,
        /// The attempt resumes the newest handle.
        resuming: bool,
        tries: u32,
        /// A 1011 was already retried once.
        retried_internal: bool,
    },
    Ready(GeminiSocket),
}

enum ConnEvent {
    Opened(Result<GeminiSocket, CallFailure>),
    Frame(Option<Result<Message, tokio_tungstenite::tungstenite::Error>>),
}

impl Conn {
    fn connecting(attempt: Connecting, resuming: bool) -> Conn {
        Conn::Connecting { attempt, resuming, tries: 1, retried_internal: false }
    }

    /// The ready connection, if any.
    pub(super) fn link(&self) -> Option<&GeminiSocket> {
        match self {
            Conn::Ready(link) => Some(link),
            Conn::Connecting { .. } => None,
        }
    }

    /// The next thing that happens on the connection. Cancel-safe.
    async fn next(&mut self) -> ConnEvent {
        match self {
            Conn::Connecting { attempt, .. } => ConnEvent::Opened(attempt.as_mut().await),
            Conn::Ready(link) => {
                use futures_util::StreamExt;
                ConnEvent::Frame(link.stream.next().await)
            }
        }
    }
}

/// A running tool call started by Gemini.
pub(super) struct Running {
    pub cancel: CancellationToken,
    /// The connection generation that asked; a later one only hears of the outcome as a note.
    pub generation: u64,
    /// The approval an `approve` call answers.
    pub approval: Option<String>,
}

/// A finished tool call.
pub(super) struct ToolDone {
    pub id: String,
    pub name: String,
    pub outcome: Result<ToolOutput, ToolError>,
}

/// A tool answer the newest resumable handle does not cover yet.
pub(super) struct Unsettled {
    pub id: String,
    pub name: String,
    pub response: Value,
}

/// Microphone input held while Gemini is being (re)connected.
enum Held {
    Audio(Bytes),
    End,
}

/// How the actor loop ended.
enum Ending {
    /// `call_end`, or the phone's session went away.
    Hangup,
    /// Gemini failed and could not be resumed.
    Failed(CallFailure),
}

pub(super) struct Bridge {
    log: CallLog,
    config: Arc<GeminiConfig>,
    dial: DialOptions,
    declarations: Value,
    pub(super) voice_tools: Arc<dyn VoiceTools>,
    phone: mpsc::Sender<Frame>,
    pub(super) end: CancellationToken,
    /// Newest resumable session handle.
    handle: Option<String>,
    /// After `goAway`: when the old connection must be left at the latest.
    going_away: Option<tokio::time::Instant>,
    /// The next ready connection is a fresh session that must hear its context is gone.
    context_lost: bool,
    /// Pings and silence of the ready connection.
    liveness: Liveness,
    /// Counts connections that became ready.
    pub(super) generation: u64,
    /// When `call_started` was sent.
    started: Option<Instant>,
    gap: VecDeque<Held>,
    gap_audio_bytes: usize,
    gap_texts: VecDeque<String>,
    pub(super) running: HashMap<String, Running>,
    /// Answers sent since the newest resumable handle, oldest first.
    pub(super) unsettled: VecDeque<Unsettled>,
    pub(super) tools: JoinSet<ToolDone>,
    /// Who holds the floor, and the notes waiting for it.
    floor: Floor,
    /// What the user said since each approval was read back.
    pub(super) consent: Ledger,
    /// Running transcript text of the user and of the model.
    transcripts: [String; 2],
    /// Newest token counts.
    usage: Usage,
    dropped_audio: u64,
    /// Told what the call came to once it is over.
    summary: Option<oneshot::Sender<CallSummary>>,
}

impl Bridge {
    /// The actor of a new call; it starts once [`Bridge::run`] is spawned.
    pub(super) fn new(
        log: CallLog,
        config: Arc<GeminiConfig>,
        tools: Arc<dyn VoiceTools>,
        phone: mpsc::Sender<Frame>,
        end: CancellationToken,
        summary_tx: oneshot::Sender<CallSummary>,
    ) -> Self {
        let dial = DialOptions::default().with_proxy_from_env().unwrap_or_else(|err| {
            call_note!(log, warn, "ignoring the proxy setting for Gemini Live: {err:#}");
            DialOptions::default()
        });
        let heartbeat = config.heartbeat;
        Bridge {
            log,
            declarations: tools.declarations(),
            config,
            dial,
            voice_tools: tools,
            phone,
            end,
            handle: None,
            going_away: None,
            context_lost: false,
            liveness: Liveness::new(heartbeat),
            generation: 0,
            started: None,
            gap: VecDeque::new(),
            gap_audio_bytes: 0,
            gap_texts: VecDeque::new(),
            running: HashMap::new(),
            unsettled: VecDeque::new(),
            tools: JoinSet::new(),
            floor: Floor::default(),
            consent: Ledger::default(),
            transcripts: [String::new(), String::new()],
            usage: Usage::default(),
            dropped_audio: 0,
            summary: Some(summary_tx),
        }
    }

    pub(super) async fn run(mut self, mut input: mpsc::Receiver<VoiceInput>) {
        let mut conn = Conn::connecting(self.open(None, Duration::ZERO, None), false);
        let ending = loop {
            let deadline = self.going_away.filter(|_| conn.link().is_some());
            tokio::select! {
                _ = self.end.cancelled() => break Ending::Hangup,
                pulse = self.liveness.tick() => {
                    if let Conn::Ready(link) = &conn {
                        if let Pulse::Ping = pulse {
                            link.ping();
                        } else {
                            let silent = format!("Gemini Live stopped answering for {:?}", self.config.heartbeat.dead_after);
                            let failure = CallFailure::new(CallErrorCode::GeminiClosed, silent, &self.config.api_key);
                            if let Err(failure) = self.lost(failure, true, &mut conn) {
                                break Ending::Failed(failure);
                            }
                        }
                    }
                }
                _ = crate::net::liveness::sleep_until(deadline) => self.go_away_due(&mut conn),
                _ = crate::net::liveness::sleep_until(self.floor.due()) => self.turn_over(conn.link()).await,
                item = input.recv() => match item {
                    Some(item) => self.on_input(item, conn.link()).await,
                    None => break Ending::Hangup,
                },
                event = conn.next() => match event {
                    ConnEvent::Opened(Ok(link)) => conn = self.on_ready(link).await,
                    ConnEvent::Opened(Err(failure)) => match self.retry(&conn, failure) {
                        Ok(next) => conn = next,
                        Err(failure) => break Ending::Failed(failure),
                    },
                    ConnEvent::Frame(frame) => {
                        if let Err(failure) = self.on_frame(frame, &mut conn).await {
                            break Ending::Failed(failure);
                        }
                    }
                },
                Some(done) = self.tools.join_next(), if !self.tools.is_empty() => match done {
                    Ok(done) => self.on_tool_done(done, &mut conn).await,
                    Err(err) => warn!(%err, "a tool task failed"),
                },
            }
        };
        self.finish(ending, conn).await;
    }

    /// Opens a connection after `delay`, resuming `handle` if given. An `old` connection is closed
    /// first, and its close awaited: the service refuses a resume while it is still open.
    fn open(&self, handle: Option<String>, delay: Duration, old: Option<GeminiSocket>) -> Connecting {
        let config = self.config.clone();
        let dial = self.dial.clone();
        let declarations = self.declarations.clone();
        Box::pin(async move {
            if let Some(old) = old {
                old.shutdown().await;
            }
            tokio::time::sleep(delay).await;
            socket::open(&config, &dial, &declarations, handle.as_deref()).await
        })
    }

    /// A connection is ready: tell the phone (first time), then send what waited for it.
    async fn on_ready(&mut self, link: GeminiSocket) -> Conn {
        self.generation += 1;
        self.going_away = None;
        self.liveness.heard();
        if self.started.is_none() {
            self.started = Some(Instant::now());
            call_note!(self.log, info, "voice call started");
            self.to_phone(AgentMessage::CallStarted).await;
        } else {
            call_note!(self.log, info, generation = self.generation, "voice call resumed");
        }
        if std::mem::take(&mut self.context_lost) {
            self.to_gemini(&link, wire::text(wire::CONTEXT_LOST)).await;
        }
        // Held input waits for room in Gemini's queue: it is bounded already.
        while let Some(text) = self.gap_texts.pop_front() {
            self.to_gemini(&link, wire::text(&text)).await;
        }
        while let Some(held) = self.gap.pop_front() {
            let message = match held {
                Held::Audio(pcm) => wire::audio(&pcm),
                Held::End => wire::audio_stream_end(),
            };
            self.to_gemini(&link, message).await;
        }
        self.gap_audio_bytes = 0;
        Conn::Ready(link)
    }

    /// After a failed attempt to resume: a fresh session for a stale handle (1008), one more try
    /// after an internal error (1011), a few after transport failures; else the end.
    fn retry(&mut self, conn: &Conn, failure: CallFailure) -> Result<Conn, CallFailure> {
        let Conn::Connecting { resuming: true, tries, retried_internal, .. } = conn else { return Err(failure) };
        let (tries, retried_internal) = (*tries, *retried_internal);
        let delay = Duration::from_millis(250) * 2u32.pow(tries.saturating_sub(1).min(4));
        match failure.close_code {
            Some(1008) => {
                call_note!(self.log, info, "the Gemini session could not be resumed; starting a new one");
                self.handle = None;
                self.context_lost = true;
                Ok(Conn::connecting(self.open(None, Duration::ZERO, None), false))
            }
            Some(1011) if !retried_internal => {
                debug!("resume refused with 1011; trying once more");
                let attempt = self.open(self.handle.clone(), delay, None);
                Ok(Conn::Connecting { attempt, resuming: true, tries: tries + 1, retried_internal: true })
            }
            _ if is_transient(failure.code) && tries < RESUME_ATTEMPTS => {
                debug!(code = failure.code.as_str(), tries, "resume attempt failed; trying again");
                let attempt = self.open(self.handle.clone(), delay, None);
                Ok(Conn::Connecting { attempt, resuming: true, tries: tries + 1, retried_internal })
            }
            _ => Err(failure),
        }
    }

    /// Replaces the current connection with one resuming the newest handle. Answers that handle
    /// does not cover are told to the resumed session as notes.
    fn resume(&mut self, conn: &mut Conn) {
        self.going_away = None;
        while let Some(Unsettled { id, name, response }) = self.unsettled.pop_front() {
            self.hold_text(wire::late_outcome(&id, &name, &response));
        }
        let placeholder = Conn::connecting(Box::pin(std::future::pending()), true);
        let old = match std::mem::replace(conn, placeholder) {
            Conn::Ready(link) => Some(link),
            Conn::Connecting { .. } => None,
        };
        *conn = Conn::connecting(self.open(self.handle.clone(), Duration::ZERO, old), true);
        call_note!(self.log, info, "resuming the Gemini session");
    }

    /// After `goAway`: resume once no call is pending and a resumable handle covers every answer.
    pub(super) fn resume_when_settled(&mut self, conn: &mut Conn) {
        if self.going_away.is_none() || conn.link().is_none() || self.handle.is_none() {
            return;
        }
        let pending = self.running.values().any(|running| running.generation == self.generation);
        if !pending && self.unsettled.is_empty() {
            self.resume(conn);
        }
    }

    /// `goAway`'s time is up: resume with what there is. Without any handle the service's close
    /// ends the call.
    fn go_away_due(&mut self, conn: &mut Conn) {
        self.going_away = None;
        if self.handle.is_some() {
            debug!("goAway's time is up; resuming with the newest handle");
            self.resume(conn);
        } else {
            call_note!(self.log, warn, "goAway's time is up and Gemini sent no resumable handle");
        }
    }

    /// Keeps a note for the next connection (the oldest goes when too many wait).
    pub(super) fn hold_text(&mut self, text: String) {
        if self.gap_texts.len() == GAP_TEXTS {
            self.gap_texts.pop_front();
        }
        self.gap_texts.push_back(crate::text::prefix(&text, MAX_SAY_LEN).to_owned());
    }

    async fn on_input(&mut self, item: VoiceInput, link: Option<&GeminiSocket>) {
        match item {
            VoiceInput::Audio(pcm) => {
                if pcm.is_empty() || pcm.len() > MAX_AUDIO_CHUNK {
                    return;
                }
                match link {
                    Some(link) => {
                        if !link.try_send(wire::audio(&pcm)) {
                            self.dropped_audio += 1;
                            if self.dropped_audio.is_power_of_two() {
                                debug!(dropped = self.dropped_audio, "Gemini is behind; microphone audio dropped");
                            }
                        }
                    }
                    None => {
                        self.gap_audio_bytes += pcm.len();
                        self.gap.push_back(Held::Audio(pcm));
                        while self.gap_audio_bytes > GAP_AUDIO_BYTES {
                            let Some(oldest) = self.gap.pop_front() else { break };
                            if let Held::Audio(oldest) = oldest {
                                self.gap_audio_bytes -= oldest.len();
                                self.dropped_audio += 1;
                            }
                        }
                    }
                }
            }
            VoiceInput::AudioEnd => match link {
                Some(link) => self.to_gemini(link, wire::audio_stream_end()).await,
                None => {
                    if !matches!(self.gap.back(), Some(Held::End) | None) {
                        self.gap.push_back(Held::End);
                    }
                }
            },
            VoiceInput::Text(text) => {
                // Typed words are the user's own, as spoken ones are; the model answers them.
                self.consent.heard(&text);
                self.consent.pause();
                self.floor.activity();
                match link {
                    Some(link) => self.say(link, &text).await,
                    None => self.hold_text(text),
                }
            }
            VoiceInput::Note(note) => {
                if let Some(note) = self.floor.offer(note) {
                    self.send_note(note, link).await;
                }
            }
        }
    }

    /// A note leaves for the model (now, or with the next connection): an approval it reads back
    /// is announced from here on.
    async fn send_note(&mut self, note: Note, link: Option<&GeminiSocket>) {
        if let Some(approval) = &note.approval {
            self.consent.announced(approval);
        }
        match link {
            Some(link) => self.say(link, &note.text).await,
            None => self.hold_text(note.text),
        }
    }

    /// The floor is free: the notes that waited go, oldest first.
    async fn turn_over(&mut self, link: Option<&GeminiSocket>) {
        for note in self.floor.turn_over() {
            self.send_note(note, link).await;
        }
    }

    /// One frame from a ready connection. `Err` ends the call.
    async fn on_frame(
        &mut self,
        frame: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
        conn: &mut Conn,
    ) -> Result<(), CallFailure> {
        let key = &self.config.api_key;
        self.liveness.heard();
        let payload = match frame {
            Some(Ok(Message::Binary(data))) => data,
            Some(Ok(Message::Text(text))) => text.into(),
            Some(Ok(Message::Close(frame))) => {
                let failure = socket::close_failure(frame.as_ref(), key);
                let refused = frame.is_some_and(|f| u16::from(f.code) == 1007);
                return self.lost(failure, !refused, conn);
            }
            Some(Ok(_)) => return Ok(()),
            Some(Err(err)) => {
                let failure = CallFailure::new(
                    CallErrorCode::GeminiClosed,
                    format!("the Gemini Live connection failed: {err}"),
                    key,
                );
                return self.lost(failure, true, conn);
            }
            None => {
                let failure = CallFailure::new(CallErrorCode::GeminiClosed, "Gemini Live closed the connection", key);
                return self.lost(failure, true, conn);
            }
        };
        let events = match wire::parse_server(&payload) {
            Ok(events) => events,
            Err(err) => {
                debug!(%err, len = payload.len(), "ignored a malformed message from Gemini");
                return Ok(());
            }
        };
        for event in events {
            self.on_event(event, conn).await;
        }
        Ok(())
    }

    /// The connection ended: resume with the newest handle when there is one and it may help.
    fn lost(&mut self, failure: CallFailure, resumable: bool, conn: &mut Conn) -> Result<(), CallFailure> {
        if resumable && self.handle.is_some() {
            debug!(code = failure.code.as_str(), "Gemini connection lost; resuming");
            self.resume(conn);
            Ok(())
        } else {
            Err(failure)
        }
    }

    async fn on_event(&mut self, event: ServerEvent, conn: &mut Conn) {
        match event {
            ServerEvent::SetupComplete => {}
            ServerEvent::Audio(pcm) => self.play(&pcm).await,
            ServerEvent::Transcript { speaker, text, is_final } => {
                self.on_transcript(speaker, text, is_final).await;
            }
            ServerEvent::Interrupted => {
                // The user barged in: they hold the floor now.
                self.floor.activity();
                self.to_phone(AgentMessage::Interrupted).await;
                self.finish_transcript(TranscriptRole::Model).await;
            }
            ServerEvent::GenerationComplete => {
                self.finish_transcript(TranscriptRole::Model).await;
                self.turn_over(conn.link()).await;
            }
            ServerEvent::TurnComplete { reason } => {
                self.on_turn_complete(reason).await;
                self.turn_over(conn.link()).await;
            }
            ServerEvent::ToolCalls(calls) => {
                self.finish_transcript(TranscriptRole::User).await;
                for call in calls {
                    self.start_tool(call, conn.link()).await;
                }
                // The model waits for its calls: an approval one of them opens is read to it now.
                self.turn_over(conn.link()).await;
            }
            ServerEvent::ToolCancellation(ids) => {
                for id in ids {
                    // Removed first: a cancelled call gets no toolResponse.
                    if let Some(running) = self.running.remove(&id) {
                        debug!(%id, "Gemini cancelled a tool call");
                        running.cancel.cancel();
                    }
                }
                self.resume_when_settled(conn);
            }
            ServerEvent::Resumable(handle) => {
                // Issued only while no call is pending: it covers every answer sent before it.
                self.handle = Some(handle);
                self.unsettled.clear();
                self.resume_when_settled(conn);
            }
            ServerEvent::GoAway { time_left } => {
                let time_left = time_left.unwrap_or(GO_AWAY_DEFAULT);
                debug!(?time_left, "Gemini is going away");
                self.going_away = Some(tokio::time::Instant::now() + time_left.saturating_sub(GO_AWAY_MARGIN));
                self.resume_when_settled(conn);
            }
            ServerEvent::Usage(usage) => self.usage = usage,
        }
    }

    /// The model's voice, to the phone. The model answers: what the user said is complete.
    async fn play(&mut self, pcm: &[u8]) {
        self.floor.activity();
        self.finish_transcript(TranscriptRole::User).await;
        let mut frame = Vec::with_capacity(pcm.len() + 1);
        frame.push(protocol::AUDIO_PREFIX);
        frame.extend_from_slice(pcm);
        // A phone that cannot keep up loses speech rather than stalling the call.
        if self.phone.try_send(Frame::binary(frame)).is_err() {
            debug!("phone is behind; model audio dropped");
        }
    }

    /// The turn is over: both transcripts are final, and the phone hears why a turn gave nothing.
    async fn on_turn_complete(&mut self, reason: Option<wire::TurnReason>) {
        self.finish_transcript(TranscriptRole::User).await;
        self.finish_transcript(TranscriptRole::Model).await;
        if let Some(reason) = &reason {
            call_note!(self.log, info, reason = %reason.code, "Gemini ended a turn without an answer");
        }
        let (reason, message) = reason.map(|r| (r.code, r.message)).unzip();
        self.to_phone(AgentMessage::TurnComplete { reason, message }).await;
    }

    /// A piece of transcript: sent on as a partial, or (`finished`) with the whole utterance.
    async fn on_transcript(&mut self, speaker: TranscriptRole, text: String, finished: bool) {
        self.floor.activity();
        match speaker {
            TranscriptRole::Model => self.finish_transcript(TranscriptRole::User).await,
            TranscriptRole::User => self.consent.heard(&text),
        }
        let running = &mut self.transcripts[speaker as usize];
        let room = MAX_TRANSCRIPT_LEN.saturating_sub(running.len());
        running.push_str(crate::text::prefix(&text, room));
        if finished {
            self.finish_transcript(speaker).await;
        } else if !text.is_empty() {
            self.to_phone(AgentMessage::Transcript { role: speaker, text, is_final: false }).await;
        }
    }

    /// Sends the running transcript of `speaker` as final, if there is one.
    async fn finish_transcript(&mut self, speaker: TranscriptRole) {
        if let Some(last) = self.take_final(speaker) {
            self.to_phone(last).await;
        }
    }

    /// The running transcript of `speaker` as a final frame, if there is one; it starts anew.
    fn take_final(&mut self, speaker: TranscriptRole) -> Option<AgentMessage> {
        let text = std::mem::take(&mut self.transcripts[speaker as usize]);
        if speaker == TranscriptRole::User && !text.is_empty() {
            self.consent.pause();
        }
        (!text.is_empty()).then_some(AgentMessage::Transcript { role: speaker, text, is_final: true })
    }

    async fn finish(mut self, ending: Ending, conn: Conn) {
        for running in self.running.values() {
            running.cancel.cancel();
        }
        // Cancelled tools wind down on their own (their child processes included).
        self.tools.detach_all();
        if let Conn::Ready(link) = conn {
            link.close();
        }
        if self.dropped_audio > 0 {
            debug!(dropped = self.dropped_audio, "microphone chunks dropped during the call");
        }
        // What was said last is final too: nothing more of it will come.
        for speaker in [TranscriptRole::User, TranscriptRole::Model] {
            if let Some(last) = self.take_final(speaker) {
                self.to_phone_now(last).await;
            }
        }
        if let Ending::Failed(failure) = &ending {
            call_note!(self.log, warn, code = failure.code.as_str(), "voice call failed: {}", failure.message);
            self.to_phone_now(failure.to_message()).await;
        }
        let failure = match &ending {
            Ending::Failed(failure) => Some(failure.code),
            Ending::Hangup => None,
        };
        let mut summary = CallSummary { duration_s: None, usage: self.usage, failure };
        if let Some(started) = self.started {
            let duration_s = started.elapsed().as_millis() as f64 / 1000.0;
            let Usage { prompt_token_count, response_token_count, total_token_count } = self.usage;
            call_note!(
                self.log,
                info,
                duration_s,
                prompt_token_count,
                response_token_count,
                total_token_count,
                "voice call ended"
            );
            self.to_phone_now(AgentMessage::CallEnded { duration_s }).await;
            summary.duration_s = Some(duration_s);
        }
        self.end.cancel();
        if let Some(tx) = self.summary.take() {
            let _ = tx.send(summary);
        }
    }

    /// Sends a control frame to the phone, giving up if the call ends meanwhile.
    pub(super) async fn to_phone(&self, message: AgentMessage) {
        tokio::select! {
            _ = self.end.cancelled() => {}
            _ = self.phone.send(Frame::from(message)) => {}
        }
    }

    /// Sends a last frame to the phone, bounded in time (the phone may be gone).
    async fn to_phone_now(&self, message: AgentMessage) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.phone.send(Frame::from(message))).await;
    }

    /// Queues a message Gemini must get, giving up if the call ends meanwhile.
    /// Sends text as the user's words, cut to [`MAX_SAY_LEN`] like a held note.
    pub(super) async fn say(&self, link: &GeminiSocket, text: &str) {
        self.to_gemini(link, wire::text(crate::text::prefix(text, MAX_SAY_LEN))).await;
    }

    pub(super) async fn to_gemini(&self, link: &GeminiSocket, text: String) {
        // A link that takes no message for this long is stalled: drop this one and let the
        // heartbeat notice the silence and resume, instead of freezing the whole bridge.
        tokio::select! {
            _ = self.end.cancelled() => {}
            sent = tokio::time::timeout(GEMINI_SEND_TIMEOUT, link.send(text)) => {
                if sent.is_err() {
                    call_note!(self.log, warn, "Gemini is not taking messages; dropped one");
                }
            }
        }
    }
}
