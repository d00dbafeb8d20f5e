//! The page as a hosted call's tools see it: the model's function calls go to the page on `/live`
//! as `tool_call` frames with the relay's own ids, the page runs each inside its sealed session
//! (`"caller":"gemini-hosted"`), and its `tool_result` comes back matched by id. The relay never
//! reaches the laptop: it learns of a call only what the page answers.
//!
//! The laptop keeps calls per pairing beyond the socket that made them (a call still running when
//! a call ends goes on), so each `/live` session's ids carry a random part of their own:
//! `gemini-hosted-<8 hex>-<n>` never meets a call an earlier session left on the laptop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::gemini::VoiceTools;
use crate::protocol::{ClientMessage, ErrorCode, ToolCall, ToolError, ToolResult, LIVE_CALL_PREFIX};
use crate::tools::ToolOutput;

/// Random bytes in the ids of one session's calls (hex in the id).
const SESSION_ID_BYTES: usize = 4;
/// The error of every call the page can no longer answer.
pub(super) const PAGE_GONE: &str = "the phone's page left the call";

/// The page of one `/live` socket, as the voice bridge's tools see it.
pub(super) struct PageLink {
    pending: Mutex<HashMap<String, oneshot::Sender<Result<ToolOutput, ToolError>>>>,
    /// [`LIVE_CALL_PREFIX`], then this session's random part: the start of each of its call ids.
    id_prefix: String,
    next_id: AtomicU64,
    to_page: mpsc::Sender<String>,
}

impl PageLink {
    /// The link of one `/live` session, whose calls go to the page through `to_page`.
    pub(super) fn new(to_page: mpsc::Sender<String>) -> Self {
        let random = hex::encode(rand::random::<[u8; SESSION_ID_BYTES]>());
        PageLink {
            pending: Mutex::default(),
            id_prefix: format!("{LIVE_CALL_PREFIX}{random}-"),
            next_id: AtomicU64::new(1),
            to_page,
        }
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<String, oneshot::Sender<Result<ToolOutput, ToolError>>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends one of the model's calls to the page and waits for its `tool_result`.
    pub(super) async fn call(&self, call: ToolCall, cancel: CancellationToken) -> Result<ToolOutput, ToolError> {
        let id = format!("{}{}", self.id_prefix, self.next_id.fetch_add(1, Ordering::Relaxed));
        let (answer, answered) = oneshot::channel();
        self.pending().insert(id.clone(), answer);
        let gone = || Err(ToolError::new(ErrorCode::Unavailable, PAGE_GONE));
        let frame = ClientMessage::ToolCall(ToolCall { id: id.clone(), caller: None, ..call });
        if self.to_page.send(frame.to_json()).await.is_err() {
            self.pending().remove(&id);
            return gone();
        }
        tokio::pin!(answered);
        tokio::select! {
            outcome = &mut answered => return outcome.unwrap_or_else(|_| gone()),
            () = cancel.cancelled() => {}
        }
        // The page has the laptop cancel it and passes on its `cancelled`; the bridge bounds the wait.
        let _ = self.to_page.try_send(ClientMessage::Cancel { id, receipt: None }.to_json());
        answered.await.unwrap_or_else(|_| gone())
    }

    /// The page's answer to one of this session's calls; an answer to no call is dropped.
    pub(super) fn answer(&self, result: ToolResult) {
        let Some(waiting) = self.pending().remove(&result.id) else { return };
        let outcome = if result.ok {
            Ok(ToolOutput { result: result.result.unwrap_or(Value::Null), image: None })
        } else {
            Err(result.error.unwrap_or_else(|| ToolError::new(ErrorCode::Internal, "the page gave no reason")))
        };
        let _ = waiting.send(outcome);
    }

    /// The page left: every call in flight is answered [`PAGE_GONE`].
    pub(super) fn gone(&self) {
        for (_, waiting) in std::mem::take(&mut *self.pending()) {
            let _ = waiting.send(Err(ToolError::new(ErrorCode::Unavailable, PAGE_GONE)));
        }
    }
}

/// The voice bridge's tools on a hosted call: the laptop's, reached through the page.
pub(super) struct PageTools {
    pub page: Arc<PageLink>,
    pub declarations: Value,
}

impl VoiceTools for PageTools {
    fn declarations(&self) -> Value {
        self.declarations.clone()
    }

    fn run(&self, call: ToolCall, cancel: CancellationToken) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let page = Arc::clone(&self.page);
        Box::pin(async move { page.call(call, cancel).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "list_dir".into(), args: serde_json::json!({}), env: None, caller: None }
    }

    #[tokio::test]
    async fn calls_go_to_the_page_under_the_relays_ids_and_its_answer_comes_back() {
        let (to_page, mut sent) = mpsc::channel(4);
        let page = Arc::new(PageLink::new(to_page));
        let running = tokio::spawn({
            let page = Arc::clone(&page);
            async move { page.call(ToolCall { env: Some("devbox".into()), ..call("g1") }, CancellationToken::new()).await }
        });
        let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(
            (frame["type"].as_str(), frame["name"].as_str(), frame["env"].as_str()),
            (Some("tool_call"), Some("list_dir"), Some("devbox"))
        );
        assert!(frame.get("caller").is_none(), "the page labels it: {frame}");
        let id = frame["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with(LIVE_CALL_PREFIX) && !id.contains("g1"), "{id}");
        page.answer(ToolResult::success("gemini-hosted-other-1".into(), serde_json::json!(1)));
        page.answer(ToolResult::success(id.clone(), serde_json::json!({"entries": []})));
        assert_eq!(running.await.unwrap().unwrap().result, serde_json::json!({"entries": []}));

        let waiting = tokio::spawn({
            let page = Arc::clone(&page);
            async move { page.call(call("g2"), CancellationToken::new()).await }
        });
        sent.recv().await.unwrap();
        page.gone();
        let error = waiting.await.unwrap().unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (ErrorCode::Unavailable, PAGE_GONE));
    }

    #[tokio::test]
    async fn each_session_numbers_its_calls_under_a_random_part_of_its_own() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2 {
            let (to_page, mut sent) = mpsc::channel(4);
            let page = Arc::new(PageLink::new(to_page));
            for gemini in ["g1", "g2"] {
                tokio::spawn({
                    let page = Arc::clone(&page);
                    async move { page.call(call(gemini), CancellationToken::new()).await }
                });
                let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
                let id = frame["id"].as_str().unwrap().to_owned();
                let rest = id.strip_prefix(LIVE_CALL_PREFIX).unwrap();
                let (random, n) = rest.split_once('-').unwrap();
                assert_eq!(random.len(), 2 * SESSION_ID_BYTES, "{id}");
                assert!(random.bytes().all(|b| b.is_ascii_hexdigit()) && n.parse::<u64>().is_ok(), "{id}");
                assert!(seen.insert(id.clone()), "{id} came twice");
            }
        }
    }

    #[tokio::test]
    async fn a_cancelled_call_asks_the_page_to_cancel_and_takes_its_answer() {
        let (to_page, mut sent) = mpsc::channel(4);
        let page = Arc::new(PageLink::new(to_page));
        let cancel = CancellationToken::new();
        let running = tokio::spawn({
            let (page, cancel) = (Arc::clone(&page), cancel.clone());
            async move { page.call(call("g1"), cancel).await }
        });
        let frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        let id = frame["id"].as_str().unwrap().to_owned();
        cancel.cancel();
        let cancel_frame: Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(cancel_frame, serde_json::json!({"type":"cancel","id": id}));
        let error = ToolError::new(ErrorCode::Cancelled, "the call was cancelled");
        page.answer(ToolResult::failure(id, error));
        assert_eq!(running.await.unwrap().unwrap_err().code, ErrorCode::Cancelled);
    }
}
