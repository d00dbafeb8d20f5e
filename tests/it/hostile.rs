//! Hostile input, by property: whatever bytes a phone, a local script or a scanner sends, the
//! decoders answer without panicking, valid messages survive a round trip, presence cannot be
//! forged by spelling the marker differently, and an authenticated session answers every frame
//! and stays open.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::SinkExt;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::http::{self, HeadError, RequestHead};
use voxa::protocol::relay as relay_framing;
use voxa::protocol::{
    self, AgentMessage, BearerFrame, ClientMessage, ErrorCode, Hello, HelloOk, ToolCall, ToolError, ToolResult,
};

use crate::support::harness::*;

// ---------------------------------------------------------------------------------------------
// Strategies

/// JSON without floats: serde_json's default float parsing is best-effort, so floats would make
/// round trips fail for reasons no user notices.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(any::<String>(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn opt_string() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(any::<String>())
}

/// Tool names: mostly harmless or unknown, so a property never runs a real command.
fn tool_name() -> impl Strategy<Value = String> {
    prop_oneof![Just("list_dir".to_owned()), Just("no_such_tool".to_owned()), "[a-z_]{0,12}", any::<String>()]
}

fn client_message() -> impl Strategy<Value = ClientMessage> {
    let hello = (
        proptest::option::of(any::<u32>()),
        (opt_string(), opt_string(), opt_string()),
        (opt_string(), opt_string(), opt_string()),
    )
        .prop_map(|(protocol, (token, proof, client), (role, env_key, nonce))| {
            ClientMessage::Hello(Hello {
                protocol,
                token,
                proof,
                client,
                role,
                env_key,
                nonce,
                noise: None,
                ticket: false,
            })
        });
    let bearer = any::<String>().prop_map(|bearer| ClientMessage::Bearer(BearerFrame { bearer }));
    let call = (any::<String>(), tool_name(), json_value(), opt_string())
        .prop_map(|(id, name, args, env)| ClientMessage::ToolCall(ToolCall { id, name, args, env, caller: None }));
    prop_oneof![
        hello,
        bearer,
        call,
        any::<String>().prop_map(|id| ClientMessage::Cancel { id, receipt: None }),
        Just(ClientMessage::CancelAll),
        proptest::collection::vec(any::<String>(), 0..3).prop_map(|seen| ClientMessage::Calls { seen }),
        Just(ClientMessage::Status),
        Just(ClientMessage::CallStart),
        Just(ClientMessage::CallEnd),
        Just(ClientMessage::AudioEnd),
        Just(ClientMessage::Tick),
        any::<String>().prop_map(|text| ClientMessage::Say { text }),
        (any::<String>(), any::<u64>()).prop_map(|(term, offset)| ClientMessage::TermAck(voxa::protocol::TermAck {
            term,
            offset,
            env: None
        })),
    ]
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL.to_vec())
}

fn agent_message() -> impl Strategy<Value = AgentMessage> {
    // `result: Some(null)` reads back as `None`: both mean "no result", so it is left out.
    let result_value = json_value().prop_filter("non-null result", |v| !v.is_null());
    let tool_result = (any::<String>(), any::<bool>(), proptest::option::of(result_value), opt_string()).prop_flat_map(
        |(id, ok, result, env)| {
            let error = proptest::option::of((error_code(), any::<String>()).prop_map(|(c, m)| ToolError::new(c, m)));
            error.prop_map(move |error| {
                AgentMessage::ToolResult(ToolResult {
                    id: id.clone(),
                    ok,
                    result: result.clone(),
                    error,
                    env: env.clone(),
                })
            })
        },
    );
    let hello_ok = (any::<String>(), vec(any::<String>(), 0..8), any::<u32>(), opt_string(), opt_string()).prop_map(
        |(agent, tools, protocol, proof, env_key)| {
            AgentMessage::HelloOk(HelloOk {
                agent,
                mode: "hosted".into(),
                tools,
                protocol,
                proof,
                env_key,
                host: None,
                vapid_public_key: None,
                noise: None,
            })
        },
    );
    prop_oneof![
        tool_result,
        hello_ok,
        (any::<u32>(), any::<String>()).prop_map(|(protocol, nonce)| AgentMessage::Challenge {
            protocol,
            nonce,
            protocols: vec![]
        }),
        (any::<String>(), any::<String>(), any::<String>())
            .prop_map(|(env_key, nonce, signature)| AgentMessage::Identity { env_key, nonce, signature }),
        (error_code(), opt_string()).prop_map(|(code, message)| AgentMessage::Error { code, message }),
        (any::<String>(), any::<String>(), opt_string()).prop_map(|(id, chunk, env)| AgentMessage::ToolProgress {
            id,
            chunk,
            env
        }),
        Just(AgentMessage::Tick),
    ]
}

/// One edit of a frame's bytes or of one of its fields.
#[derive(Clone, Debug)]
enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Duplicate {
        at: usize,
        len: usize,
    },
    /// Replaces the value of the n-th top-level field (its type usually changes).
    Retype {
        field: usize,
        value: Value,
    },
    /// Drops the n-th top-level field.
    DropField {
        field: usize,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), 1usize..8).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), vec(any::<u8>(), 1..6)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..16).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
        (any::<usize>(), json_value()).prop_map(|(field, value)| Mutation::Retype { field, value }),
        any::<usize>().prop_map(|field| Mutation::DropField { field }),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let pick = |at: usize, len: usize| if len == 0 { 0 } else { at % len };
    match mutation {
        Mutation::Flip { at, bit } => {
            if !bytes.is_empty() {
                let i = pick(*at, bytes.len());
                bytes[i] ^= 1 << bit;
            }
        }
        Mutation::Delete { at, len } => {
            if !bytes.is_empty() {
                let start = pick(*at, bytes.len());
                let end = (start + len).min(bytes.len());
                bytes.drain(start..end);
            }
        }
        Mutation::Insert { at, bytes: new } => {
            let i = pick(*at, bytes.len() + 1);
            bytes.splice(i..i, new.iter().copied());
        }
        Mutation::Duplicate { at, len } => {
            if !bytes.is_empty() {
                let start = pick(*at, bytes.len());
                let end = (start + len).min(bytes.len());
                let copy = bytes[start..end].to_vec();
                bytes.splice(end..end, copy);
            }
        }
        Mutation::Retype { field, value } => edit_fields(bytes, |map| {
            if let Some(key) = nth_key(map, *field) {
                map.insert(key, value.clone());
            }
        }),
        Mutation::DropField { field } => edit_fields(bytes, |map| {
            if let Some(key) = nth_key(map, *field) {
                map.remove(&key);
            }
        }),
    }
}

fn nth_key(map: &serde_json::Map<String, Value>, n: usize) -> Option<String> {
    (!map.is_empty()).then(|| map.keys().nth(n % map.len()).cloned()).flatten()
}

/// Field edits apply while the frame is still a JSON object; after byte edits they are no-ops.
fn edit_fields(bytes: &mut Vec<u8>, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    if let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(bytes) {
        edit(&mut map);
        *bytes = serde_json::to_vec(&Value::Object(map)).unwrap();
    }
}

/// A valid client frame after a few mutations, as text (invalid UTF-8 replaced, as a WebSocket
/// text frame cannot carry it).
fn mutated_frame() -> impl Strategy<Value = String> {
    (client_message(), vec(mutation(), 1..5)).prop_map(|(message, mutations)| {
        let mut bytes = serde_json::to_vec(&message).unwrap();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

fn message_has_float(message: &ClientMessage) -> bool {
    matches!(message, ClientMessage::ToolCall(call) if has_float(&call.args))
}

/// Everything the relay and agent run on an incoming text frame, with the invariants that tie them
/// together.
fn decode_everything(text: &str) -> Result<(), TestCaseError> {
    let parsed = protocol::parse_client(text);
    // Only a text starting with U+0001 is a relay notice, and no JSON frame starts with it.
    if relay_framing::Presence::parse(text).is_some() {
        prop_assert!(relay_framing::is_notice(text.as_bytes()), "a notice without its mark: {text:?}");
    }
    if serde_json::from_str::<Value>(text).is_ok() {
        prop_assert!(!relay_framing::is_notice(text.as_bytes()), "a JSON frame taken for a notice: {text:?}");
    }
    if let Ok(message) = parsed {
        if !message_has_float(&message) {
            let again = serde_json::to_string(&message).unwrap();
            prop_assert_eq!(protocol::parse_client(&again).ok(), Some(message), "re-encoding changed {:?}", text);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Decoders never panic, valid messages round-trip

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frame_decoders_survive_arbitrary_strings(text in any::<String>()) {
        decode_everything(&text)?;
    }

    #[test]
    fn frame_decoders_survive_arbitrary_bytes(bytes in vec(any::<u8>(), 0..512)) {
        decode_everything(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn frame_decoders_survive_arbitrary_json(value in json_value()) {
        decode_everything(&value.to_string())?;
    }

    #[test]
    fn frame_decoders_survive_mutated_valid_frames(text in mutated_frame()) {
        decode_everything(&text)?;
    }

    #[test]
    fn client_messages_round_trip(message in client_message()) {
        let text = serde_json::to_string(&message).unwrap();
        prop_assert_eq!(protocol::parse_client(&text).unwrap(), message);
        prop_assert!(!relay_framing::is_notice(text.as_bytes()), "a client message is not presence: {}", text);
    }

    #[test]
    fn agent_messages_round_trip(message in agent_message()) {
        let text = message.to_json();
        let back: AgentMessage = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back, message);
    }
}

// ---------------------------------------------------------------------------------------------
// Presence cannot be forged

/// A JSON string literal with every character either plain or `\uXXXX`-escaped (hex case mixed).
fn spelled(text: &str, escapes: &[u8]) -> String {
    let mut out = String::from("\"");
    for (i, c) in text.chars().enumerate() {
        let how = escapes.get(i).copied().unwrap_or(0) % 3;
        match how {
            1 => out.push_str(&format!("\\u{:04x}", c as u32)),
            2 => out.push_str(&format!("\\u{:04X}", c as u32)),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

fn peer_spelling() -> impl Strategy<Value = (String, Value)> {
    (
        vec(any::<u8>(), 6),
        vec(any::<u8>(), 4),
        proptest::sample::select(vec!["agent", "phone"]),
        proptest::sample::select(vec!["joined", "left"]),
        btree_map("[a-z]{1,6}", json_value(), 0..3),
        proptest::option::of(json_value()),
        any::<bool>(),
        "[ \t\r\n]{0,3}",
    )
        .prop_map(|(value_escapes, key_escapes, peer, state, extra, decoy, decoy_first, space)| {
            let mut fields = vec![
                (spelled("type", &key_escapes), spelled("__peer", &value_escapes)),
                ("\"peer\"".to_owned(), format!("\"{peer}\"")),
                ("\"state\"".to_owned(), format!("\"{state}\"")),
            ];
            for (key, value) in extra.into_iter().filter(|(k, _)| !["type", "peer", "state"].contains(&k.as_str())) {
                fields.push((format!("\"{key}\""), value.to_string()));
            }
            // A second `type` member: readers disagree on which one wins, so either must do.
            if let Some(decoy) = decoy {
                let member = ("\"type\"".to_owned(), decoy.to_string());
                if decoy_first {
                    fields.insert(0, member);
                } else {
                    fields.push(member);
                }
            }
            let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}{space}:{space}{v}")).collect();
            let text = format!("{space}{{{}}}{space}", body.join(","));
            (text, json!({"peer": peer, "state": state}))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Presence is no longer spelled in JSON: a frame typed `__peer`, however it is spelled
    /// (escapes, key order, whitespace, a duplicate `type` member), is an ordinary frame that
    /// the relay passes on and no endpoint takes for a notice.
    #[test]
    fn json_presence_however_it_is_spelled_is_an_ordinary_frame((text, _) in peer_spelling()) {
        prop_assert!(!relay_framing::is_notice(text.as_bytes()), "{}", text);
        prop_assert!(relay_framing::Presence::parse(&text).is_none(), "{}", text);
    }
}

#[test]
fn spelled_peer_frames_are_well_formed_json_typed_peer() {
    // Guards the generator above: its frames must really be JSON presence frames of old.
    let mut runner = TestRunner::default();
    for _ in 0..64 {
        let (text, expect) = peer_spelling().new_tree(&mut runner).unwrap().current();
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {}", &text));
        assert_eq!(value["peer"], expect["peer"]);
    }
    let escaped = r#"{"type":"\u005f_peer","peer":"agent","state":"left"}"#;
    assert_eq!(serde_json::from_str::<Value>(escaped).unwrap()["type"], "__peer");
    assert!(relay_framing::Presence::parse(escaped).is_none());
}

// ---------------------------------------------------------------------------------------------
// The upgrade path: request heads

const UPGRADE: &str = "GET /ws?code=00112233445566778899aabbccddeeff HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer t\r\n";

fn touch_head(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok((head, len)) = RequestHead::parse(bytes) {
        prop_assert!(len <= bytes.len());
        let _ = (head.header("origin"), head.query_param("code"), head.bearer(), format!("{head:?}"));
        if head.is_websocket_upgrade() {
            prop_assert_eq!(head.method.as_str(), "GET");
            prop_assert!(head.header("sec-websocket-key").is_some());
        }
    }
    Ok(())
}

/// An in-memory socket that hands out its bytes in the given chunk sizes.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    turn: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        let size = me.sizes.get(me.turn % me.sizes.len().max(1)).copied().unwrap_or(usize::MAX).max(1);
        me.turn += 1;
        let n = size.min(buf.remaining()).min(me.data.len() - me.at);
        buf.put_slice(&me.data[me.at..me.at + n]);
        me.at += n;
        Poll::Ready(Ok(()))
    }
}

/// What a server decides about a head: the same whatever the TCP segmentation.
#[derive(Debug, PartialEq)]
enum Verdict {
    Head { path: String, bearer: Option<String>, leftover: Vec<u8> },
    TooLarge,
    Malformed,
    Eof,
}

fn verdict(data: &[u8], sizes: Vec<usize>) -> Verdict {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let mut reader = Chunked { data: data.to_vec(), at: 0, sizes, turn: 0 };
    match runtime.block_on(http::read_head(&mut reader, http::HEAD_TIMEOUT)) {
        Ok((head, mut leftover)) => {
            // What the WebSocket reads next: bytes read past the head, then the unread rest.
            leftover.extend_from_slice(&reader.data[reader.at..]);
            Verdict::Head { path: head.path.clone(), bearer: head.bearer().map(str::to_owned), leftover }
        }
        Err(HeadError::TooLarge) => Verdict::TooLarge,
        Err(HeadError::Malformed) => Verdict::Malformed,
        Err(HeadError::Io(_)) => Verdict::Eof,
        Err(HeadError::TimedOut) => panic!("an in-memory reader cannot time out"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn request_heads_survive_arbitrary_bytes(bytes in vec(any::<u8>(), 0..1024)) {
        touch_head(&bytes)?;
    }

    #[test]
    fn request_heads_survive_mutated_upgrades(mutations in vec(mutation(), 1..6), tail in "(\r\n){0,2}") {
        let mut bytes = format!("{UPGRADE}{tail}").into_bytes();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        touch_head(&bytes)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// `read_head` decides the same for a head however it is split into reads, including heads
    /// right at the size limit and bytes that follow the head.
    #[test]
    fn read_head_does_not_depend_on_segmentation(
        pad in prop_oneof![0usize..64, (http::MAX_HEAD_LEN - 300)..(http::MAX_HEAD_LEN + 64)],
        sizes in vec(1usize..1500, 1..8),
        after in vec(any::<u8>(), 0..32),
        terminated in any::<bool>(),
    ) {
        let mut data = format!("{UPGRADE}X-Pad: {}\r\n", "p".repeat(pad)).into_bytes();
        let after: Vec<u8> = if terminated {
            data.extend_from_slice(b"\r\n");
            after
        } else {
            // Without the blank line the head never ends; keep line breaks out of the tail.
            after.into_iter().filter(|b| *b != b'\r' && *b != b'\n').collect()
        };
        data.extend_from_slice(&after);
        let whole = verdict(&data, vec![usize::MAX]);
        prop_assert_eq!(&verdict(&data, sizes), &whole);
        prop_assert_eq!(&verdict(&data, vec![1]), &whole);
        let head_len = UPGRADE.len() + pad + 11;
        if let Verdict::Head { leftover, bearer, .. } = &whole {
            prop_assert!(terminated && head_len <= http::MAX_HEAD_LEN, "accepted a {} byte head", head_len);
            prop_assert_eq!(leftover, &after, "bytes after the head must be kept for the WebSocket");
            prop_assert_eq!(bearer.as_deref(), Some("t"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pasted pairing lines

/// A valid line from `voxa env issue`, and the secrets it carries.
fn issued_line() -> (String, String, String) {
    use voxa::environments::{Identity, PairingLine};
    let line = PairingLine {
        env_key: Identity::generate().unwrap().env_key(),
        relay: voxa::config::RelayUrl::parse("https://relay.example.net").unwrap(),
        code: voxa::secret::Secret::generate().unwrap(),
        bearer: voxa::environments::line::new_bearer().unwrap(),
    };
    (line.encode(), line.code.expose().to_owned(), line.bearer.expose().to_owned())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `voxa env add` takes whatever was pasted: damaged lines are refused without panicking, and
    /// the refusal never repeats the code or bearer they carry.
    #[test]
    fn pasted_pairing_lines_are_parsed_or_refused_without_echoing_secrets(
        mutations in vec(mutation(), 0..4),
        wrap in proptest::sample::select(vec!["", " ", "\n", "'", "  \r\n"]),
    ) {
        use voxa::environments::PairingLine;
        let (line, code, bearer) = issued_line();
        let mut bytes = format!("{wrap}{line}{wrap}").into_bytes();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        let pasted = String::from_utf8_lossy(&bytes);
        match PairingLine::parse(&pasted) {
            Ok(parsed) => {
                prop_assert_eq!(parsed.code.expose(), code.as_str(), "an accepted line carries the issued code");
                prop_assert_eq!(parsed.bearer.expose(), bearer.as_str());
            }
            Err(err) => {
                let shown = format!("{err} {err:?}");
                for secret in [&code, &bearer] {
                    for piece in secret.as_bytes().windows(12) {
                        prop_assert!(!shown.contains(std::str::from_utf8(piece).unwrap()), "refusal echoes a secret: {}", shown);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A session under arbitrary frames

/// Frames whose parse errors quote long non-ASCII text (`unknown variant «…»`).
fn quoting_frame() -> impl Strategy<Value = String> {
    let text = proptest::string::string_regex("[a-zé€😀 ]{40,160}").unwrap();
    (text, proptest::sample::select(vec!["type", "id", "name"])).prop_map(|(text, field)| match field {
        "type" => json!({"type": text}).to_string(),
        _ => json!({"type":"tool_call", field: 7, "text": text}).to_string(),
    })
}

fn session_frame() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => quoting_frame(),
        3 => mutated_frame(),
        2 => client_message().prop_map(|m| serde_json::to_string(&m).unwrap()),
        1 => any::<String>(),
        1 => json_value().prop_map(|v| v.to_string()),
    ]
}

/// What a correct agent answers to one frame of an authenticated session.
#[derive(Default, Debug)]
struct Expected {
    bad_frames: usize,
    results: usize,
    statuses: usize,
    call_errors: usize,
    /// Answers to approvals nobody opened: `not-found` (or `invalid-args`) errors.
    approve_errors: usize,
    /// `calls` asked, each answered by one `calls` frame naming what it replays.
    calls: usize,
}

impl Expected {
    fn add(&mut self, text: &str) {
        match protocol::parse_client(text) {
            Err(_) => self.bad_frames += 1,
            Ok(ClientMessage::ToolCall(_)) => self.results += 1,
            Ok(ClientMessage::Status) => self.statuses += 1,
            Ok(ClientMessage::Calls { .. }) => self.calls += 1,
            Ok(
                ClientMessage::CallStart | ClientMessage::CallEnd | ClientMessage::Say { .. } | ClientMessage::AudioEnd,
            ) => self.call_errors += 1,
            // Each is answered once: an error, `push_subscribed` or `grants`.
            Ok(
                ClientMessage::Approve(_)
                | ClientMessage::PushSubscribe { .. }
                | ClientMessage::Grants
                | ClientMessage::Revoke { .. },
            ) => self.approve_errors += 1,
            Ok(
                ClientMessage::Hello(_)
                | ClientMessage::Bearer(_)
                | ClientMessage::Cancel { .. }
                | ClientMessage::CancelAll
                | ClientMessage::Follow { .. }
                | ClientMessage::Unfollow
                // Notes come only of approvals and sessions, and these cases open none.
                | ClientMessage::Narration { .. }
                | ClientMessage::PushUnsubscribe { .. }
                | ClientMessage::TermAck(_)
                | ClientMessage::Tick,
            ) => {}
        }
    }
}

async fn session_answers_every_frame(agent: &TestAgent, frames: Vec<String>) -> Result<(), TestCaseError> {
    let mut client = agent.local_client().await;
    let mut expected = Expected::default();
    for text in &frames {
        expected.add(text);
        client.send(Message::text(text.clone())).await.map_err(|e| TestCaseError::fail(format!("send: {e}")))?;
    }
    // The final status must be answered too: the session is still open and still serving.
    client.send(Message::text(json!({"type":"status"}).to_string())).await.unwrap();
    expected.statuses += 1;
    let mut seen = Expected::default();
    // Finished calls a `calls` frame replays (earlier cases' calls, kept for this pairing), in
    // order and right after it.
    let mut replayed = std::collections::VecDeque::new();
    while seen.bad_frames < expected.bad_frames
        || seen.calls < expected.calls
        || seen.results < expected.results
        || seen.statuses < expected.statuses
        || seen.call_errors < expected.call_errors
        || seen.approve_errors < expected.approve_errors
    {
        let frame = match next_frame(&mut client).await {
            Some(Message::Text(text)) => text,
            other => {
                return Err(TestCaseError::fail(format!(
                    "session ended or sent a non-text frame ({other:?}); expected {expected:?}, seen {seen:?}"
                )))
            }
        };
        let value: Value = serde_json::from_str(&frame).unwrap();
        match value["type"].as_str() {
            Some("error") if matches!(value["code"].as_str(), Some("not-found" | "invalid-args" | "too-large")) => {
                seen.approve_errors += 1;
            }
            Some("error") => {
                prop_assert_eq!(&value["code"], "bad-frame", "only bad-frame errors inside a session: {}", value);
                let reason = value["message"].as_str().unwrap_or_default();
                prop_assert!(reason.len() <= 200, "a bad-frame reason must not echo the frame back");
                seen.bad_frames += 1;
            }
            Some("push_subscribed" | "grants") => seen.approve_errors += 1,
            Some("calls") => {
                seen.calls += 1;
                let finished = value["finished"].as_array().into_iter().flatten();
                replayed.extend(finished.filter_map(|entry| entry["id"].as_str().map(str::to_owned)));
            }
            Some("tool_result") if replayed.front().is_some_and(|id: &String| value["id"] == id.as_str()) => {
                replayed.pop_front();
            }
            Some("tool_result") => seen.results += 1,
            Some("tool_progress") => {}
            Some("status") => seen.statuses += 1,
            Some("call_error") => seen.call_errors += 1,
            _ => return Err(TestCaseError::fail(format!("unexpected frame {value}"))),
        }
    }
    prop_assert_eq!(seen.bad_frames, expected.bad_frames);
    prop_assert_eq!(seen.results, expected.results);
    prop_assert_eq!(seen.statuses, expected.statuses);
    prop_assert_eq!(seen.call_errors, expected.call_errors);
    prop_assert_eq!(seen.approve_errors, expected.approve_errors);
    Ok(())
}

#[test]
fn an_authenticated_session_answers_any_frame_sequence_and_stays_open() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let agent = runtime.block_on(TestAgent::start(None));
    let config = ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = TestRunner::new(config);
    let outcome = runner
        .run(&vec(session_frame(), 1..24), |frames| runtime.block_on(session_answers_every_frame(&agent, frames)));
    if let Err(err) = outcome {
        panic!("{err}");
    }
    runtime.block_on(agent.agent.stop());
}

// ---------------------------------------------------------------------------------------------
// The relay after the upgrade: raw frames from a hostile client

/// A client frame written by hand: every header field chosen, consistent or not.
#[derive(Clone, Debug)]
struct RawFrame {
    fin: bool,
    rsv: u8,
    opcode: u8,
    masked: bool,
    /// 0: shortest length form, 1: 16-bit, 2: 64-bit (non-minimal forms are violations).
    length_form: u8,
    /// Added to the declared length: a frame cut short, or a huge claimed size.
    overclaim: u64,
    payload: Vec<u8>,
}

impl RawFrame {
    fn bytes(&self) -> Vec<u8> {
        let mut out = vec![(u8::from(self.fin) << 7) | ((self.rsv & 7) << 4) | (self.opcode & 0x0f)];
        let len = self.payload.len() as u64 + self.overclaim;
        let mask_bit = if self.masked { 0x80 } else { 0 };
        match (self.length_form, len) {
            (0, len) if len < 126 => out.push(mask_bit | len as u8),
            (0 | 1, len) if len <= u16::MAX as u64 => {
                out.push(mask_bit | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            (_, len) => {
                out.push(mask_bit | 127);
                out.extend_from_slice(&len.to_be_bytes());
            }
        }
        let key = [0x37, 0xfa, 0x21, 0x3d];
        if self.masked {
            out.extend_from_slice(&key);
        }
        out.extend(self.payload.iter().enumerate().map(|(i, b)| if self.masked { b ^ key[i % 4] } else { *b }));
        out
    }
}

fn raw_frame() -> impl Strategy<Value = RawFrame> {
    let payload = prop_oneof![
        vec(any::<u8>(), 0..200),
        any::<String>().prop_map(String::into_bytes),
        client_message().prop_map(|m| serde_json::to_vec(&m).unwrap()),
        peer_spelling().prop_map(|(text, _)| text.into_bytes()),
        (1000u16..5000, "[a-z]{0,20}").prop_map(|(code, reason)| {
            let mut close = code.to_be_bytes().to_vec();
            close.extend_from_slice(reason.as_bytes());
            close
        }),
    ];
    (
        prop_oneof![8 => Just(true), 1 => Just(false)],
        prop_oneof![8 => Just(0u8), 1 => 0u8..8],
        prop_oneof![4 => Just(1u8), 3 => Just(2u8), 1 => Just(0u8), 1 => Just(8u8), 1 => Just(9u8), 1 => Just(10u8), 1 => 0u8..16],
        prop_oneof![8 => Just(true), 1 => Just(false)],
        prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
        prop_oneof![8 => Just(0u64), 1 => 1u64..100, 1 => Just(u64::MAX >> 1), 1 => Just(64u64 << 20)],
        payload,
    )
        .prop_map(|(fin, rsv, opcode, masked, length_form, overclaim, payload)| RawFrame {
            fin,
            rsv,
            opcode,
            masked,
            length_form,
            overclaim,
            payload,
        })
}

/// What a hostile client sends after its upgrade.
fn hostile_stream() -> impl Strategy<Value = (bool, bool, Vec<u8>)> {
    let chunk = prop_oneof![4 => raw_frame().prop_map(|f| f.bytes()), 1 => vec(any::<u8>(), 0..64)];
    (any::<bool>(), any::<bool>(), vec(chunk, 0..8))
        .prop_map(|(as_agent, with_peer, chunks)| (as_agent, with_peer, chunks.concat()))
}

async fn hostile_session(
    relay: std::net::SocketAddr,
    as_agent: bool,
    with_peer: bool,
    bytes: Vec<u8>,
) -> Result<(), TestCaseError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let code = format!("{:032x}", rand::random::<u128>());
    let (mine, theirs) = if as_agent { ("agent", "ws") } else { ("ws", "agent") };
    let _peer = if with_peer { Some(connect(&format!("ws://{relay}/{theirs}?code={code}")).await) } else { None };
    let mut tcp = tokio::net::TcpStream::connect(relay).await.unwrap();
    let request = upgrade_request(&format!("/{mine}?code={code}"), "");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let _ = tcp.write_all(&bytes).await;
    let _ = tcp.shutdown().await;
    // The relay answers the upgrade, then must end the connection: never hang on a hostile peer.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(STEP, async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    prop_assert!(read.is_ok(), "the relay kept a hostile connection open after its end ({} bytes sent)", bytes.len());
    prop_assert!(
        answer.starts_with(b"HTTP/1.1 101"),
        "upgrade answered: {:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(40)])
    );
    Ok(())
}

#[test]
fn hostile_frames_after_the_upgrade_never_take_the_relay_down() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    static RELAY_PANICS: AtomicUsize = AtomicUsize::new(0);
    let previous = Arc::new(std::panic::take_hook());
    let chained = previous.clone();
    std::panic::set_hook(Box::new(move |info| {
        let in_relay = info
            .location()
            .is_some_and(|l| ["src/relay", "src/http", "src/protocol"].iter().any(|p| l.file().contains(p)));
        if in_relay {
            RELAY_PANICS.fetch_add(1, Ordering::SeqCst);
        }
        chained(info);
    }));

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let relay = runtime.block_on(TestRelay::start());
    let addr = relay.addr;
    // A healthy pair that must keep working whatever the hostile clients do.
    let pair = std::cell::RefCell::new(runtime.block_on(async {
        let code = format!("{:032x}", rand::random::<u128>());
        let mut agent = connect(&format!("ws://{addr}/agent?code={code}")).await;
        let mut phone = connect(&format!("ws://{addr}/ws?code={code}")).await;
        wait_agent_joined(&mut phone).await;
        recv_json(&mut agent).await;
        (agent, phone)
    }));
    let config = ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = TestRunner::new(config);
    let cases = std::cell::Cell::new(0usize);
    let outcome = runner.run(&hostile_stream(), |(as_agent, with_peer, bytes)| {
        let case = cases.get() + 1;
        cases.set(case);
        let mut pair = pair.borrow_mut();
        let (agent, phone) = &mut *pair;
        runtime.block_on(async {
            hostile_session(addr, as_agent, with_peer, bytes).await?;
            let ping = format!("healthy-{case}");
            agent.send(Message::text(ping.clone())).await.unwrap();
            let got = next_frame(phone).await;
            prop_assert_eq!(got, Some(Message::text(ping)), "the healthy pair still relays");
            agent.send(Message::binary(vec![case as u8; 3])).await.unwrap();
            phone.send(Message::binary(vec![case as u8; 5])).await.unwrap();
            prop_assert_eq!(next_frame(phone).await, Some(Message::binary(vec![case as u8; 3])));
            prop_assert_eq!(next_frame(agent).await, Some(Message::binary(vec![case as u8; 5])));
            Ok(())
        })
    });
    let _ = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| previous(info)));
    if let Err(err) = outcome {
        panic!("{err}");
    }
    assert_eq!(RELAY_PANICS.load(Ordering::SeqCst), 0, "relay code panicked on hostile input");
    runtime.block_on(relay.kill());
}
