//! One connection to Gemini Live: dial with the key in `x-goog-api-key`, send `setup`, wait for
//! `setupComplete`. A writer task owns the socket's sending half behind a bounded queue.

use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tracing::{debug, Instrument};

use super::{wire, CallErrorCode, CallFailure, GeminiConfig};
use crate::net::dial::{self, ClientSocket, DialOptions, HttpRefusal};
use crate::secret::Secret;

/// Time Gemini has to answer `setup` with `setupComplete`.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(15);
/// Messages queued for Gemini's socket (about 0.6 s of 20 ms audio) before audio is dropped.
pub const SEND_QUEUE: usize = 32;
/// Longest wait for the server to close an old connection before resuming on a new one.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Longest part of a server's close reason repeated to the phone.
const MAX_REASON_LEN: usize = 200;

/// A ready connection: `setupComplete` has arrived.
pub struct GeminiSocket {
    out: mpsc::Sender<Message>,
    pub stream: SplitStream<ClientSocket>,
}

impl GeminiSocket {
    /// Queues audio; `false` when the queue is full (Gemini is behind) and the chunk was dropped.
    pub fn try_send(&self, text: String) -> bool {
        self.out.try_send(Message::text(text)).is_ok()
    }

    /// Queues a message that must not be dropped, waiting for room.
    pub async fn send(&self, text: String) {
        let _ = self.out.send(Message::text(text)).await;
    }

    /// Pings Gemini (skipped when the queue is full: the socket is busy anyway).
    pub fn ping(&self) {
        let _ = self.out.try_send(Message::Ping(Default::default()));
    }

    /// Closes the connection normally; the writer sends the close frame and drops the socket.
    pub fn close(self) {
        let frame = CloseFrame { code: CloseCode::Normal, reason: "call ended".into() };
        let _ = self.out.try_send(Message::Close(Some(frame)));
    }

    /// Closes the connection and waits (at most [`CLOSE_WAIT`]) until the server has closed its
    /// side too: the service refuses to resume a session whose old socket is still open.
    pub async fn shutdown(mut self) {
        let frame = CloseFrame { code: CloseCode::Normal, reason: "resuming".into() };
        let _ = self.out.send(Message::Close(Some(frame))).await;
        let drained = tokio::time::timeout(CLOSE_WAIT, async {
            while let Some(Ok(message)) = self.stream.next().await {
                if matches!(message, Message::Close(_)) {
                    break;
                }
            }
        });
        if drained.await.is_err() {
            debug!("Gemini did not answer the close in time; resuming anyway");
        }
    }
}

/// Opens a session: dial, `setup` (resuming `handle` if given), wait for `setupComplete`.
pub async fn open(
    config: &GeminiConfig,
    dial_options: &DialOptions,
    declarations: &Value,
    handle: Option<&str>,
) -> Result<GeminiSocket, CallFailure> {
    let mut options = dial_options.clone();
    options.headers.push(("x-goog-api-key".into(), config.api_key.clone()));
    let socket = dial::connect(&config.url, &options).await.map_err(|err| dial_failure(&err, &config.api_key))?;
    let (sink, mut stream) = socket.split();
    let out = spawn_writer(sink);
    let setup = wire::setup(&config.model, &config.voice, declarations, handle);
    let _ = out.send(Message::text(setup)).await;
    match tokio::time::timeout(SETUP_TIMEOUT, setup_complete(&mut stream, &config.api_key)).await {
        Ok(Ok(())) => Ok(GeminiSocket { out, stream }),
        Ok(Err(failure)) => Err(failure),
        Err(_) => Err(CallFailure::new(
            CallErrorCode::GeminiUnreachable,
            format!("Gemini Live did not finish setup within {} s", SETUP_TIMEOUT.as_secs()),
            &config.api_key,
        )),
    }
}

/// The task that writes the link's queue to the socket, and closes it when the queue ends.
fn spawn_writer(mut sink: SplitSink<ClientSocket, Message>) -> mpsc::Sender<Message> {
    let (out, mut queue) = mpsc::channel::<Message>(SEND_QUEUE);
    tokio::spawn(
        async move {
            while let Some(message) = queue.recv().await {
                let closing = matches!(message, Message::Close(_));
                if let Err(err) = sink.send(message).await {
                    debug!(%err, "gemini write failed");
                    break;
                }
                if closing {
                    break;
                }
            }
            // The queue's senders are gone or the socket failed: close it either way.
            let _ = sink.close().await;
        }
        .in_current_span(),
    );
    out
}

/// Reads until `setupComplete`; a close or failure first is the call's failure.
async fn setup_complete(stream: &mut SplitStream<ClientSocket>, key: &Secret) -> Result<(), CallFailure> {
    loop {
        let payload = match stream.next().await {
            Some(Ok(Message::Binary(data))) => data.to_vec(),
            Some(Ok(Message::Text(text))) => text.as_bytes().to_vec(),
            Some(Ok(Message::Close(frame))) => return Err(close_failure(frame.as_ref(), key)),
            Some(Ok(_)) => continue,
            Some(Err(err)) => {
                let message = format!("the connection to Gemini Live failed during setup: {err}");
                return Err(CallFailure::new(CallErrorCode::GeminiClosed, message, key));
            }
            None => {
                let message = "Gemini Live closed the connection during setup";
                return Err(CallFailure::new(CallErrorCode::GeminiClosed, message, key));
            }
        };
        match wire::parse_server(&payload) {
            Ok(events) if events.contains(&wire::ServerEvent::SetupComplete) => return Ok(()),
            Ok(_) => continue,
            Err(err) => debug!(%err, "ignored a malformed message from Gemini during setup"),
        }
    }
}

/// The failure a close frame (or its absence) stands for.
pub fn close_failure(frame: Option<&CloseFrame>, key: &Secret) -> CallFailure {
    let Some(frame) = frame else {
        return CallFailure::new(CallErrorCode::GeminiClosed, "Gemini Live closed the connection", key);
    };
    let code = u16::from(frame.code);
    let reason = clean_reason(&frame.reason);
    let said = if reason.is_empty() { format!("close code {code}") } else { format!("{code}: {reason}") };
    let (error, message) = match code {
        1007 if reason.to_ascii_lowercase().contains("api key") => {
            (CallErrorCode::BadKey, format!("Gemini Live refused the API key ({said}); check GEMINI_API_KEY"))
        }
        1007 => (CallErrorCode::GeminiRefused, format!("Gemini Live refused a request ({said})")),
        1008 => (
            CallErrorCode::GeminiNotFound,
            format!("Gemini Live refused the session by policy or could not find the model or session ({said})"),
        ),
        // 1011 also ends every connection at the end of its lifetime ("Deadline expired") and
        // stands for any internal error: only the reason says whether it is the quota.
        1011 if reason.to_ascii_lowercase().contains("deadline expired") => {
            (CallErrorCode::GeminiClosed, format!("the Gemini Live connection reached its time limit ({said})"))
        }
        1011 | 1013 | 1014 if mentions_quota(&reason) => {
            (CallErrorCode::GeminiUnavailable, format!("Gemini Live is out of quota ({said}); try again later"))
        }
        1011 | 1013 | 1014 => {
            (CallErrorCode::GeminiUnavailable, format!("Gemini Live is unavailable ({said}); try again later"))
        }
        _ => (CallErrorCode::GeminiClosed, format!("Gemini Live closed the connection ({said})")),
    };
    CallFailure::new(error, message, key).with_close_code(code)
}

/// True for a close reason about quota or rate limits.
fn mentions_quota(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    ["quota", "exceeded", "rate limit", "resource_exhausted", "resource exhausted"].iter().any(|w| reason.contains(w))
}

/// A failed dial: an HTTP refusal at upgrade by its status, anything else as unreachable.
fn dial_failure(err: &anyhow::Error, key: &Secret) -> CallFailure {
    let detail = format!("{err:#}");
    let code = match err.chain().find_map(|cause| cause.downcast_ref::<HttpRefusal>()).map(|r| r.0) {
        Some(401 | 403) => CallErrorCode::BadKey,
        Some(404) => CallErrorCode::GeminiNotFound,
        Some(429) => CallErrorCode::GeminiUnavailable,
        Some(status) if status >= 500 => CallErrorCode::GeminiUnavailable,
        Some(_) => CallErrorCode::GeminiRefused,
        None => CallErrorCode::GeminiUnreachable,
    };
    let message = match code {
        CallErrorCode::BadKey => format!("Gemini Live refused the API key ({detail}); check GEMINI_API_KEY"),
        CallErrorCode::GeminiUnavailable => {
            format!("Gemini Live is unavailable or out of quota ({detail}); try again later")
        }
        CallErrorCode::GeminiUnreachable => format!("could not reach Gemini Live ({detail})"),
        _ => format!("Gemini Live refused the connection ({detail})"),
    };
    CallFailure::new(code, message, key)
}

/// A close reason fit to show: printable, bounded.
fn clean_reason(reason: &str) -> String {
    reason.chars().filter(|c| !c.is_control()).take(MAX_REASON_LEN).collect::<String>().trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(code: u16, reason: &str) -> CloseFrame {
        CloseFrame { code: CloseCode::from(code), reason: reason.to_owned().into() }
    }

    #[test]
    fn close_codes_map_to_stable_call_errors() {
        let key = Secret::from_string("AIza-test-key".into());
        let cases = [
            (1007, "API key not valid. Please pass a valid API key.", CallErrorCode::BadKey),
            (1007, "Invalid JSON payload received.", CallErrorCode::GeminiRefused),
            (1008, "Requested entity was not found.", CallErrorCode::GeminiNotFound),
            (1011, "You exceeded your current quota.", CallErrorCode::GeminiUnavailable),
            (1011, "Internal error encountered.", CallErrorCode::GeminiUnavailable),
            (1011, "Deadline expired before operation could complete.", CallErrorCode::GeminiClosed),
            (1000, "", CallErrorCode::GeminiClosed),
        ];
        for (code, reason, expected) in cases {
            let failure = close_failure(Some(&frame(code, reason)), &key);
            assert_eq!(failure.code, expected, "{code} {reason}");
            assert_eq!(failure.close_code, Some(code));
            assert!(failure.message.contains(&code.to_string()), "{}", failure.message);
            assert!(failure.message.contains(reason), "the service's reason is kept: {}", failure.message);
            let quota = reason.contains("quota");
            assert_eq!(failure.message.contains("out of quota"), quota, "{}", failure.message);
        }
        assert_eq!(close_failure(None, &key).code, CallErrorCode::GeminiClosed);
    }

    #[test]
    fn close_reasons_are_cleaned_bounded_and_never_show_the_key() {
        let key = Secret::from_string("AIza-test-key".into());
        let hostile = format!("bad key AIza-test-key\u{1b}[31m{}", "x".repeat(5000));
        let failure = close_failure(Some(&frame(1007, &hostile)), &key);
        assert!(!failure.message.contains("AIza-test-key"), "{}", failure.message);
        assert!(!failure.message.contains('\u{1b}'));
        assert!(failure.message.len() < 400, "{}", failure.message.len());
    }

    #[test]
    fn http_refusals_map_by_status() {
        let key = Secret::from_string("k-123456".into());
        let refusal = |status: u16| anyhow::anyhow!(HttpRefusal(status)).context("could not reach host:443");
        assert_eq!(dial_failure(&refusal(403), &key).code, CallErrorCode::BadKey);
        assert_eq!(dial_failure(&refusal(429), &key).code, CallErrorCode::GeminiUnavailable);
        assert_eq!(dial_failure(&refusal(503), &key).code, CallErrorCode::GeminiUnavailable);
        assert_eq!(dial_failure(&refusal(404), &key).code, CallErrorCode::GeminiNotFound);
        assert_eq!(dial_failure(&refusal(400), &key).code, CallErrorCode::GeminiRefused);
        let refused = anyhow::anyhow!("TCP connect failed").context("could not reach 127.0.0.1:9");
        assert_eq!(dial_failure(&refused, &key).code, CallErrorCode::GeminiUnreachable);
    }
}
