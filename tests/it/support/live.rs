//! Hosted voice in tests (docs/PROTOCOL.md, "Hosted voice"): a relay hosting calls against the
//! fake Gemini Live server with [`KEY`], an agent in hosted mode linked to it, a call socket at
//! `/live`, and a [`Page`] that carries the model's calls into its sealed session as
//! web/js/voice/socket.js does.

use std::collections::HashSet;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::agent::LinkEvent;
use voxa::hosted::{Hosting, LiveConfig};
use voxa::net::dial::{ClientSocket, DialOptions};
use voxa::relay::RelayConfig;

use crate::support::fake_gemini::FakeGemini;
use crate::support::harness::*;
use crate::support::phone::{Phone, KEY};

/// A relay hosting voice with `KEY` against `fake`, with `tweak` applied to its hosting.
pub(crate) async fn hosting_relay(fake: &FakeGemini, tweak: impl FnOnce(&mut LiveConfig)) -> TestRelay {
    let mut live = LiveConfig::new(fake.config(KEY));
    tweak(&mut live);
    TestRelay::with_config(RelayConfig { service: Some(Hosting::service(live)), ..Default::default() }).await
}

/// An agent in hosted mode (no Gemini key of its own) linked to `relay`. It trusts hosted calls
/// with commands too (`[policy.hosted] trust`), so these tests see the hosting itself; what the
/// hosted door asks by default is tests/it/policy.rs's.
pub(crate) async fn hosted_agent(relay: &TestRelay) -> TestAgent {
    let mut agent = TestAgent::start_with(Some(relay.url()), |options| {
        options.config.policy.hosted.trust = vec!["@read".into(), "@exec".into()];
    })
    .await;
    agent.wait_event("the relay link", |event| matches!(event, LinkEvent::Connected { .. })).await;
    agent
}

/// A call socket at `/live` for `agent`'s code, with no session beside it: enough for calls that
/// run no tool.
pub(crate) async fn live_phone(relay: &TestRelay, agent: &TestAgent) -> Phone {
    live_phone_with(relay, agent, DialOptions::default()).await
}

pub(crate) async fn live_phone_with(relay: &TestRelay, agent: &TestAgent, options: DialOptions) -> Phone {
    let url = format!("ws://{}/live?code={}", relay.addr, agent.code());
    let socket = tokio::time::timeout(STEP, voxa::net::dial::connect(&url, &options)).await.unwrap().unwrap();
    Phone::over(socket)
}

/// A page in a call the relay hosts, as web/js/voice/socket.js is one: its sealed session at
/// `/ws` and its call socket at `/live`. A task carries each `tool_call` of the relay (ids
/// `gemini-hosted-…`, offered tools only) into the session with `"caller":"gemini-hosted"` and
/// sends the laptop's `tool_result` back (a screenshot as the sentence that it was shown), cancels
/// what the relay cancels, asks the laptop for the call's notes once it started and passes each
/// `narrate` on. The test sees the rest: `live` (what else the relay sends; what it sends goes to
/// the relay) and `session` (the sealed session's other frames; what it sends goes to the laptop).
pub(crate) struct Page {
    pub(crate) live: Phone,
    pub(crate) session: ClientSocket,
    pub(crate) hello_ok: Value,
}

/// An in-memory socket pair: the test's end, and the carrying task's.
async fn socket_pair() -> (ClientSocket, tokio_tungstenite::WebSocketStream<tokio::io::DuplexStream>) {
    use tokio_tungstenite::tungstenite::protocol::Role;
    use tokio_tungstenite::WebSocketStream;
    let (test_io, task_io) = tokio::io::duplex(1 << 20);
    let config = voxa::net::http::websocket_config();
    let test_io: Box<dyn voxa::net::dial::Io> = Box::new(test_io);
    let test_side = WebSocketStream::from_raw_socket(test_io, Role::Client, Some(config)).await;
    let task_side = WebSocketStream::from_raw_socket(task_io, Role::Server, Some(config)).await;
    (voxa::seal::Socket::plain(test_side), task_side)
}

impl Page {
    /// The page of `agent` through `relay`: sealed session first, then `/live`.
    pub(crate) async fn open(relay: &TestRelay, agent: &TestAgent) -> Page {
        let mut sealed = phone_socket(relay, agent.code()).await;
        let hello_ok = say_hello(&mut sealed, agent.token()).await;
        let url = format!("ws://{}/live?code={}", relay.addr, agent.code());
        let live =
            tokio::time::timeout(STEP, voxa::net::dial::connect(&url, &DialOptions::default())).await.unwrap().unwrap();
        let tools: Vec<String> = serde_json::from_value(hello_ok["tools"].clone()).unwrap();
        let (live_view, live_task) = socket_pair().await;
        let (session_view, session_task) = socket_pair().await;
        tokio::spawn(carry(live, sealed, live_task, session_task, tools));
        Page { live: Phone::over(live_view), session: session_view, hello_ok }
    }
}

/// The carrying task of a [`Page`]; ends when the call socket or the test's view of it does. A
/// sealed session that ends first (the relay shutting down closes it at once) leaves the call
/// socket carried, as a page's `/live` is a socket of its own: what the relay sends on it still
/// reaches the test, and a call made after it fails `offline`, as the page's session fails it.
async fn carry<T>(
    live: ClientSocket,
    sealed: ClientSocket,
    live_view: tokio_tungstenite::WebSocketStream<T>,
    session_view: tokio_tungstenite::WebSocketStream<T>,
    tools: Vec<String>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut live_tx, mut live_rx) = live.split();
    let (mut sealed_tx, mut sealed_rx) = sealed.split();
    let (mut live_view_tx, mut live_view_rx) = live_view.split();
    let (mut session_view_tx, mut session_view_rx) = session_view.split();
    let offered: Vec<String> = tools.into_iter().filter(|name| name != "approve").collect();
    let mut carried: HashSet<String> = HashSet::new();
    let mut shown: HashSet<String> = HashSet::new();
    let text = |value: Value| Message::text(value.to_string());
    let offline = |id: &str| json!({"type":"tool_result","id":id,"ok":false,"error":{"code":"offline","message":"the connection closed"}});
    // A test that does not watch the session drops its end; the page carries on without it.
    let mut watched = true;
    let mut sealed_open = true;
    loop {
        tokio::select! {
            from_test = live_view_rx.next() => {
                let message = match from_test {
                    Some(Ok(Message::Text(frame))) => {
                        let mut value: Value = serde_json::from_str(&frame).unwrap_or(Value::Null);
                        if value["type"] == "call_start" && value.get("tools").is_none() {
                            value["tools"] = json!(offered);
                        }
                        if value.is_object() { text(value) } else { Message::Text(frame) }
                    }
                    Some(Ok(message @ Message::Binary(_))) => message,
                    Some(Ok(_)) => continue,
                    _ => return,
                };
                if live_tx.send(message).await.is_err() { return; }
            }
            from_relay = live_rx.next() => {
                let frame = match from_relay {
                    Some(Ok(Message::Text(frame))) => frame,
                    Some(Ok(message @ Message::Binary(_))) => {
                        if live_view_tx.send(message).await.is_err() { return; }
                        continue;
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let _ = live_view_tx.send(Message::Close(frame)).await;
                        return;
                    }
                    Some(Ok(_)) => continue,
                    _ => return,
                };
                let value: Value = serde_json::from_str(&frame).unwrap_or(Value::Null);
                let id = value["id"].as_str().unwrap_or_default().to_owned();
                match value["type"].as_str() {
                    Some("tool_call") if id.starts_with("gemini-hosted-") && !carried.contains(&id) => {
                        if !offered.iter().any(|name| value["name"] == name.as_str()) {
                            let refused = json!({"type":"tool_result","id":id,"ok":false,
                                "error":{"code":"unknown-tool","message":"this call was not offered that tool"}});
                            if live_tx.send(text(refused)).await.is_err() { return; }
                            continue;
                        }
                        let mut call = value.clone();
                        call["caller"] = json!("gemini-hosted");
                        if !sealed_open || sealed_tx.send(text(call)).await.is_err() {
                            if live_tx.send(text(offline(&id))).await.is_err() { return; }
                            continue;
                        }
                        carried.insert(id);
                    }
                    Some("cancel") if carried.contains(&id) => {
                        let _ = sealed_tx.send(text(json!({"type":"cancel","id":id}))).await;
                    }
                    Some("tool_call" | "cancel") => {}
                    kind => {
                        if kind == Some("call_started") {
                            let on = json!({"type":"narration","on":true});
                            let _ = sealed_tx.send(text(on)).await;
                        }
                        if live_view_tx.send(Message::Text(frame)).await.is_err() { return; }
                    }
                }
            }
            from_laptop = sealed_rx.next(), if sealed_open => {
                let frame = match from_laptop {
                    Some(Ok(Message::Text(frame))) => frame,
                    Some(Ok(message @ Message::Binary(_))) => {
                        if watched && session_view_tx.send(message).await.is_err() {
                            watched = false;
                        }
                        continue;
                    }
                    Some(Ok(_)) => continue,
                    _ => {
                        // The calls it carried fail, and the test's view of the session ends with it.
                        sealed_open = false;
                        for id in std::mem::take(&mut carried) {
                            if live_tx.send(text(offline(&id))).await.is_err() { return; }
                        }
                        if std::mem::take(&mut watched) {
                            let _ = session_view_tx.close().await;
                        }
                        continue;
                    }
                };
                let value: Value = serde_json::from_str(&frame).unwrap_or(Value::Null);
                let id = value["id"].as_str().unwrap_or_default().to_owned();
                let answer = match value["type"].as_str() {
                    Some("tool_result") if carried.remove(&id) => {
                        let mut answer = json!({"type":"tool_result","id":id,"ok":value["ok"]});
                        if value["ok"] == true {
                            answer["result"] = value["result"].clone();
                            if shown.remove(&id) {
                                answer["result"] = json!({"shown_on_phone": true, "width": value["result"]["width"],
                                    "height": value["result"]["height"], "message": "The screenshot is shown on the user's phone."});
                            }
                        } else {
                            answer["error"] = value["error"].clone();
                        }
                        Some(answer)
                    }
                    Some("image") if carried.contains(&id) => {
                        shown.insert(id);
                        None
                    }
                    Some("narrate") => Some(json!({"type":"narrate","text":value["text"]})),
                    _ => None,
                };
                if let Some(answer) = answer {
                    if live_tx.send(text(answer)).await.is_err() { return; }
                }
                // The page sees everything of its session (pictures included).
                if watched && session_view_tx.send(Message::Text(frame)).await.is_err() {
                    watched = false;
                }
            }
            from_test = session_view_rx.next(), if watched => {
                let message = match from_test {
                    Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => message,
                    Some(Ok(_)) => continue,
                    _ => {
                        watched = false;
                        continue;
                    }
                };
                let _ = sealed_tx.send(message).await;
            }
        }
    }
}

/// Starts a hosted call; returns Gemini's connection number and its setup.
pub(crate) async fn start_call(phone: &mut Phone, fake: &mut FakeGemini) -> (usize, Value) {
    phone.send(json!({"type":"call_start"})).await;
    let setup = fake.expect_setup().await;
    phone.expect("call_started").await;
    setup
}
