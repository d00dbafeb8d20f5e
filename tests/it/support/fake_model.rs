//! A scripted model server on loopback, written from Anthropic's published Messages API: `POST
//! /v1/messages` with `"stream": true` answered as server-sent events (`message_start`,
//! `content_block_start` / `content_block_delta` (`text_delta`, `input_json_delta`) /
//! `content_block_stop`, `message_delta` with the `stop_reason`, `message_stop`). The real Claude
//! Code CLI talks to it through `ANTHROPIC_BASE_URL`. It also speaks OpenAI's published Responses
//! API, `POST /v1/responses` streamed as server-sent events (`response.created`,
//! `response.output_item.added` / `.done` with a `message` or a `function_call`,
//! `response.output_text.delta`, `response.completed` with the usage), which the real Codex CLI
//! reaches through a model provider's `base_url`. Tests queue the model's answers; requests that
//! carry no tools (the CLI's side requests) get a short text. Every request is recorded.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Longest request body accepted.
const MAX_BODY: usize = 32 << 20;

/// One answer of the model.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Text, streamed in a few deltas; the turn ends.
    Text(String),
    /// A tool use (`name`, `input`); the CLI runs it (after asking) and calls again.
    Tool { name: String, input: Value },
    /// Starts writing this text, then writes nothing more until the client goes away.
    Stall(String),
    /// `count` text deltas of `chunk` each; the turn ends.
    Flood { chunk: String, count: usize },
    /// A thinking block of `thinking` first (in a few deltas), then `count` text deltas of
    /// `chunk` each, `every` apart, as a model that writes for a while; the turn ends.
    Paced { thinking: String, chunk: String, count: usize, every: std::time::Duration },
}

impl Reply {
    pub fn text(text: &str) -> Self {
        Reply::Text(text.to_owned())
    }

    pub fn tool(name: &str, input: Value) -> Self {
        Reply::Tool { name: name.to_owned(), input }
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<Value>,
    tool_uses: usize,
}

/// The running server.
#[derive(Clone)]
pub struct FakeModel {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    requested: Arc<Notify>,
}

impl FakeModel {
    /// Binds `127.0.0.1:0` and serves until the test ends.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let model =
            FakeModel { addr: listener.local_addr().unwrap(), state: Arc::default(), requested: Arc::default() };
        let served = model.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let model = served.clone();
                tokio::spawn(async move { model.serve(stream).await });
            }
        });
        model
    }

    /// `http://127.0.0.1:<port>`, for `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues the model's next answers (to requests that offer tools).
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.lock().unwrap().script.extend(replies);
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The requests that offered tools (the conversation's own).
    pub fn turn_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|request| request.get("tools").is_some_and(|t| t.as_array().is_some_and(|t| !t.is_empty())))
            .collect()
    }

    /// Waits until some request satisfies `check`.
    pub async fn wait_request(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let notified = self.requested.notified();
            if let Some(found) = self.requests().into_iter().find(|request| check(request)) {
                return found;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("the model never got {what}; requests: {:#?}", self.requests().len());
            }
        }
    }

    async fn serve(&self, stream: TcpStream) {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        loop {
            let Some((path, body)) = read_request(&mut reader).await else { return };
            let responses = path.starts_with("/v1/responses");
            if !responses && !path.starts_with("/v1/messages") || path.starts_with("/v1/messages/count_tokens") {
                let answer = if path.starts_with("/v1/messages/count_tokens") {
                    json!({"input_tokens": 10}).to_string()
                } else {
                    json!({"type": "error", "error": {"type": "not_found_error", "message": "no such endpoint"}})
                        .to_string()
                };
                let status = if path.starts_with("/v1/messages/count_tokens") { "200 OK" } else { "404 Not Found" };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    answer.len()
                );
                if write.write_all(head.as_bytes()).await.is_err() || write.write_all(answer.as_bytes()).await.is_err()
                {
                    return;
                }
                continue;
            }
            let offers_tools = body.get("tools").and_then(Value::as_array).is_some_and(|tools| !tools.is_empty());
            let reply = {
                let mut state = self.state.lock().unwrap();
                state.requests.push(body.clone());
                if offers_tools {
                    state.script.pop_front().unwrap_or_else(|| Reply::text("(nothing scripted)"))
                } else {
                    Reply::text("Title")
                }
            };
            self.requested.notify_waiters();
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
            if write.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let id = {
                let mut state = self.state.lock().unwrap();
                state.tool_uses += 1;
                state.tool_uses
            };
            let stalled = matches!(reply, Reply::Stall(_));
            let events = if responses { response_events(&reply, id) } else { events(&reply, id) };
            let pace = match &reply {
                Reply::Paced { every, .. } => Some(*every),
                _ => None,
            };
            for event in events {
                if write_chunk(&mut write, &event).await.is_err() {
                    return;
                }
                let streamed = event["type"] == "content_block_delta" || event["type"] == "response.output_text.delta";
                if let (Some(every), true) = (pace, streamed) {
                    tokio::time::sleep(every).await;
                }
            }
            if stalled {
                // Nothing more: the client gives up (an interrupt) and closes.
                let mut rest = Vec::new();
                let _ = reader.read_to_end(&mut rest).await;
                return;
            }
            if write.write_all(b"0\r\n\r\n").await.is_err() {
                return;
            }
        }
    }
}

async fn write_chunk(write: &mut tokio::net::tcp::OwnedWriteHalf, event: &Value) -> std::io::Result<()> {
    let kind = event["type"].as_str().unwrap_or("message");
    let data = format!("event: {kind}\ndata: {event}\n\n");
    write.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes()).await?;
    write.flush().await
}

/// The server-sent events of one answer.
fn events(reply: &Reply, n: usize) -> Vec<Value> {
    let mut events = vec![json!({
        "type": "message_start",
        "message": {"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": "claude-test",
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 10, "output_tokens": 1}}
    })];
    let text_block = |events: &mut Vec<Value>, deltas: Vec<String>, close: bool| {
        events.push(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}));
        for delta in deltas {
            events.push(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}}),
            );
        }
        if close {
            events.push(json!({"type": "content_block_stop", "index": 0}));
        }
    };
    let stop = match reply {
        Reply::Text(text) => {
            let mid = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(at, _)| at);
            text_block(&mut events, vec![text[..mid].to_owned(), text[mid..].to_owned()], true);
            "end_turn"
        }
        Reply::Flood { chunk, count } => {
            text_block(&mut events, vec![chunk.clone(); *count], true);
            "end_turn"
        }
        Reply::Paced { thinking, chunk, count, .. } => {
            events.push(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}}));
            for piece in [&thinking[..thinking.len() / 2], &thinking[thinking.len() / 2..]] {
                events.push(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": piece}}));
            }
            events.push(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "signature_delta", "signature": "c2lnbmVk"}}));
            events.push(json!({"type": "content_block_stop", "index": 0}));
            events.push(
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            );
            for _ in 0..*count {
                events.push(
                    json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": chunk}}),
                );
            }
            events.push(json!({"type": "content_block_stop", "index": 1}));
            "end_turn"
        }
        Reply::Stall(text) => {
            text_block(&mut events, vec![text.clone()], false);
            return events;
        }
        Reply::Tool { name, input } => {
            events.push(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": {}}}));
            events.push(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}));
            events.push(json!({"type": "content_block_stop", "index": 0}));
            "tool_use"
        }
    };
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// The server-sent events of one answer in the Responses API.
fn response_events(reply: &Reply, n: usize) -> Vec<Value> {
    let id = format!("resp_{n}");
    let mut events = vec![json!({"type": "response.created", "response": {"id": id}})];
    let message = |events: &mut Vec<Value>, deltas: Vec<String>, close: bool| {
        let item = format!("msg_{n}");
        events.push(json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "message", "id": item, "role": "assistant", "content": []}}));
        let mut text = String::new();
        for delta in deltas {
            text.push_str(&delta);
            events.push(json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
                "item_id": item, "delta": delta}));
        }
        if close {
            events.push(json!({"type": "response.output_item.done", "output_index": 0,
                "item": {"type": "message", "id": item, "role": "assistant",
                         "content": [{"type": "output_text", "text": text}]}}));
        }
    };
    match reply {
        Reply::Text(text) => {
            let mid = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(at, _)| at);
            message(&mut events, vec![text[..mid].to_owned(), text[mid..].to_owned()], true);
        }
        Reply::Flood { chunk, count } | Reply::Paced { chunk, count, .. } => {
            message(&mut events, vec![chunk.clone(); *count], true)
        }
        Reply::Stall(text) => {
            message(&mut events, vec![text.clone()], false);
            return events;
        }
        Reply::Tool { name, input } => {
            let item = json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
                              "name": name, "arguments": input.to_string()});
            events.push(json!({"type": "response.output_item.added", "output_index": 0, "item": item}));
            events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
        }
    }
    events.push(json!({"type": "response.completed", "response": {"id": id, "usage": {
        "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}}));
    events
}

/// One request: its path and JSON body; `None` at end of stream or on junk.
async fn read_request(reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<(String, Value)> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).await.ok()? == 0 {
        return None;
    }
    let path = request_line.split_whitespace().nth(1)?.to_owned();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    if length > MAX_BODY {
        return None;
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    Some((path, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// The text of every `tool_result` (Messages) or `function_call_output` (Responses) the model
/// was sent, in order.
pub fn tool_results(request: &Value) -> Vec<String> {
    let mut results = Vec::new();
    for item in request["input"].as_array().into_iter().flatten() {
        if item["type"] == "function_call_output" {
            results.push(item["output"].as_str().map_or_else(|| item["output"].to_string(), str::to_owned));
        }
    }
    for message in request["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let text = match &block["content"] {
                    Value::String(text) => text.clone(),
                    Value::Array(parts) => {
                        parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n")
                    }
                    _ => String::new(),
                };
                results.push(text);
            }
        }
    }
    results
}

/// All the user text the model was sent.
pub fn user_text(request: &Value) -> String {
    let mut text = String::new();
    let messages = request["messages"].as_array().into_iter().flatten();
    let input = request["input"].as_array().into_iter().flatten();
    for message in messages.chain(input).filter(|m| m["role"] == "user") {
        match &message["content"] {
            Value::String(content) => text.push_str(content),
            Value::Array(blocks) => {
                for block in blocks {
                    if let Some(part) = block["text"].as_str() {
                        text.push_str(part);
                        text.push('\n');
                    }
                }
            }
            _ => {}
        }
    }
    text
}
