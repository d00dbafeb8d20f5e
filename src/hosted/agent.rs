//! The agent as a hosted call's tools see it: Gemini's function calls go out as `tool_call`
//! frames with the relay's own ids, and the answers come back matched by id.
//!
//! The laptop keeps calls per pairing beyond the socket that made them (a call still running when
//! a `/live` session ends goes on), so each session's ids carry a random part of their own:
//! `gemini-hosted-<8 hex>-<n>` never meets a call an earlier session left on the laptop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{CALL_ID_PREFIX, LAPTOP_OFFLINE};
use crate::gemini::VoiceTools;
use crate::protocol::{ClientMessage, ErrorCode, ToolCall, ToolError, ToolResult, HOSTED_CALLER};
use crate::tools::ToolOutput;

/// Random bytes in the ids of one session's calls (hex in the id).
const SESSION_ID_BYTES: usize = 4;

/// The agent as the voice bridge's tools see it: tool calls out, answers matched by id.
pub(super) struct AgentLink {
    pub state: Mutex<AgentState>,
    /// [`CALL_ID_PREFIX`], then this session's random part: the start of each of its call ids.
    id_prefix: String,
    next_id: AtomicU64,
    to_agent: mpsc::Sender<String>,
}

#[derive(Default)]
pub(super) struct AgentState {
    /// The agent answered `hello_ok` and has not left since.
    pub present: bool,
    pending: HashMap<String, AwaitedResult>,
}

/// A tool call sent to the agent and not answered yet.
struct AwaitedResult {
    gemini_id: String,
    answer: oneshot::Sender<Result<ToolOutput, ToolError>>,
}

impl AgentLink {
    /// The link of one `/live` session, whose calls go to the agent through `to_agent`.
    pub(super) fn new(to_agent: mpsc::Sender<String>) -> Self {
        let random = hex::encode(rand::random::<[u8; SESSION_ID_BYTES]>());
        AgentLink {
            state: Mutex::default(),
            id_prefix: format!("{CALL_ID_PREFIX}{random}-"),
            next_id: AtomicU64::new(1),
            to_agent,
        }
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, AgentState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends one of Gemini's calls to the agent and waits for its `tool_result`.
    pub(super) async fn call(&self, call: ToolCall, cancel: CancellationToken) -> Result<ToolOutput, ToolError> {
        let id = format!("{}{}", self.id_prefix, self.next_id.fetch_add(1, Ordering::Relaxed));
        let (answer, answered) = oneshot::channel();
        {
            let mut state = self.state();
            if !state.present {
                return Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE));
            }
            state.pending.insert(id.clone(), AwaitedResult { gemini_id: call.id.clone(), answer });
        }
        let frame = ClientMessage::ToolCall(ToolCall { id: id.clone(), caller: Some(HOSTED_CALLER.into()), ..call });
        if self.to_agent.send(frame.to_json()).await.is_err() {
            self.state().pending.remove(&id);
            return Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE));
        }
        tokio::pin!(answered);
        let gone = || Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE));
        tokio::select! {
            outcome = &mut answered => return outcome.unwrap_or_else(|_| gone()),
            () = cancel.cancelled() => {}
        }
        // The agent answers a cancelled call with `cancelled`; the bridge bounds the wait.
        let _ = self.to_agent.try_send(ClientMessage::Cancel { id }.to_json());
        answered.await.unwrap_or_else(|_| gone())
    }

    /// The agent is gone: every call in flight is answered [`LAPTOP_OFFLINE`], new ones fail at
    /// once. True if it was there until now.
    pub(super) fn offline(&self) -> bool {
        let (was_present, pending) = {
            let mut state = self.state();
            (std::mem::take(&mut state.present), std::mem::take(&mut state.pending))
        };
        for (_, pending) in pending {
            let _ = pending.answer.send(Err(ToolError::new(ErrorCode::Unavailable, LAPTOP_OFFLINE)));
        }
        was_present
    }

    /// Hands the agent's answer to the call waiting for it.
    pub(super) fn answer(&self, result: ToolResult) {
        let Some(pending) = self.state().pending.remove(&result.id) else { return };
        let outcome = if result.ok {
            Ok(ToolOutput { result: result.result.unwrap_or(Value::Null), image: None })
        } else {
            Err(result.error.unwrap_or_else(|| ToolError::new(ErrorCode::Internal, "the laptop gave no reason")))
        };
        let _ = pending.answer.send(outcome);
    }

    /// Gemini's id of a call in flight.
    pub(super) fn gemini_id(&self, id: &str) -> Option<String> {
        self.state().pending.get(id).map(|pending| pending.gemini_id.clone())
    }
}

/// The voice bridge's tools on a hosted call: the agent's, run on the laptop.
pub(super) struct HostedTools {
    pub agent: Arc<AgentLink>,
    pub declarations: Value,
}

impl VoiceTools for HostedTools {
    fn declarations(&self) -> Value {
        self.declarations.clone()
    }

    fn run(&self, call: ToolCall, cancel: CancellationToken) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let agent = Arc::clone(&self.agent);
        Box::pin(async move { agent.call(call, cancel).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "run_command".into(), args: serde_json::json!({}), env: None, caller: None }
    }

    #[tokio::test]
    async fn calls_go_out_labelled_and_are_answered_offline_when_the_laptop_leaves() {
        let (to_agent, mut sent) = mpsc::channel(4);
        let link = Arc::new(AgentLink::new(to_agent));
        let refused = link.call(call("g0"), CancellationToken::new()).await.unwrap_err();
        assert_eq!((refused.code, refused.message.as_str()), (ErrorCode::Unavailable, LAPTOP_OFFLINE));

        link.state().present = true;
        let running = tokio::spawn({
            let link = Arc::clone(&link);
            async move { link.call(call("g1"), CancellationToken::new()).await }
        });
        let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(frame["type"], "tool_call");
        assert_eq!(frame["caller"], HOSTED_CALLER);
        let id = frame["id"].as_str().unwrap();
        assert!(id.starts_with(CALL_ID_PREFIX) && id != "g1", "{frame}");
        assert_eq!(link.gemini_id(id).as_deref(), Some("g1"));

        assert!(link.offline(), "the laptop was there");
        let error = running.await.unwrap().unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (ErrorCode::Unavailable, LAPTOP_OFFLINE));
        assert!(!link.offline(), "told once");
    }

    #[tokio::test]
    async fn each_session_numbers_its_calls_under_a_random_part_of_its_own() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2 {
            let (to_agent, mut sent) = mpsc::channel(4);
            let link = Arc::new(AgentLink::new(to_agent));
            link.state().present = true;
            for gemini in ["g1", "g2"] {
                tokio::spawn({
                    let link = Arc::clone(&link);
                    async move { link.call(call(gemini), CancellationToken::new()).await }
                });
                let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
                let id = frame["id"].as_str().unwrap().to_owned();
                let rest = id.strip_prefix(CALL_ID_PREFIX).unwrap();
                let (random, n) = rest.split_once('-').unwrap();
                assert_eq!(random.len(), 2 * SESSION_ID_BYTES, "{id}");
                assert!(random.bytes().all(|b| b.is_ascii_hexdigit()) && n.parse::<u64>().is_ok(), "{id}");
                assert!(seen.insert(id.clone()), "{id} came twice");
            }
        }
    }

    #[tokio::test]
    async fn a_cancelled_call_asks_the_agent_to_cancel_and_takes_its_answer() {
        let (to_agent, mut sent) = mpsc::channel(4);
        let link = Arc::new(AgentLink::new(to_agent));
        link.state().present = true;
        let cancel = CancellationToken::new();
        let running = tokio::spawn({
            let (link, cancel) = (Arc::clone(&link), cancel.clone());
            async move { link.call(call("g1"), cancel).await }
        });
        let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        let id = frame["id"].as_str().unwrap().to_owned();
        cancel.cancel();
        let cancel_frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(cancel_frame, serde_json::json!({"type":"cancel","id": id}));
        let error = ToolError::new(ErrorCode::Cancelled, "the call was cancelled");
        link.answer(ToolResult::failure(id, error));
        assert_eq!(running.await.unwrap().unwrap_err().code, ErrorCode::Cancelled);
    }
}
