//! Self-hosted voice (docs/PROTOCOL.md, "Voice") against the fake Gemini Live server: the phone's view of a call
//! (driven over the loopback socket, whose session code is the relay's) and what Gemini receives.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::ClientSocket;

use crate::fake_gemini::{FakeGemini, FakeOptions, Kind, SetupReply, BAD_KEY_REASON};
use crate::harness::*;
use crate::support::voxa_cmd;

/// A key shaped like a real one, so a leak anywhere is easy to spot.
const KEY: &str = "AIzaSyFAKE-voxa-test-key-7f3c9e21b04d";

async fn self_hosted_agent(fake: &FakeGemini, key: &str) -> TestAgent {
    let config = fake.config(key);
    TestAgent::start_with(None, |options| options.gemini = Some(config)).await
}

/// The phone's side of a session, keeping every frame it received.
struct Phone {
    socket: ClientSocket,
    texts: Vec<Value>,
    raw: Vec<Vec<u8>>,
}

enum Frame {
    Json(Value),
    Audio(Vec<u8>),
}

impl Phone {
    async fn join(agent: &TestAgent) -> Phone {
        Phone { socket: agent.local_client().await, texts: Vec::new(), raw: Vec::new() }
    }

    async fn send(&mut self, value: Value) {
        send(&mut self.socket, value).await;
    }

    async fn send_audio(&mut self, pcm: &[u8]) {
        let mut frame = vec![voxa::protocol::AUDIO_PREFIX];
        frame.extend_from_slice(pcm);
        self.socket.send(Message::binary(frame)).await.unwrap();
    }

    async fn next(&mut self) -> Frame {
        match next_frame(&mut self.socket).await {
            Some(Message::Text(text)) => {
                self.raw.push(text.as_bytes().to_vec());
                let value: Value = serde_json::from_str(&text).unwrap();
                self.texts.push(value.clone());
                Frame::Json(value)
            }
            Some(Message::Binary(data)) => {
                self.raw.push(data.to_vec());
                assert_eq!(data.first(), Some(&voxa::protocol::AUDIO_PREFIX), "binary frames carry audio");
                Frame::Audio(data[1..].to_vec())
            }
            other => panic!("the phone expected a frame, got {other:?}"),
        }
    }

    /// Skips frames until a JSON frame of `kind`.
    async fn expect(&mut self, kind: &str) -> Value {
        loop {
            if let Frame::Json(value) = self.next().await {
                if value["type"] == kind {
                    return value;
                }
            }
        }
    }

    /// Skips JSON frames until model audio arrives.
    async fn audio(&mut self) -> Vec<u8> {
        loop {
            if let Frame::Audio(pcm) = self.next().await {
                return pcm;
            }
        }
    }

    fn saw(&self, kind: &str) -> bool {
        self.texts.iter().any(|t| t["type"] == kind)
    }
}

/// 20 ms of recognisable "audio".
fn pcm(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Starts a call and returns the Gemini connection number and its setup.
async fn start_call(phone: &mut Phone, fake: &mut FakeGemini) -> (usize, Value) {
    phone.send(json!({"type":"call_start"})).await;
    let setup = fake.expect_setup().await;
    phone.expect("call_started").await;
    setup
}

fn saw(fake: &FakeGemini, conn: usize, kind: &Kind) -> bool {
    fake.received().iter().any(|e| e.conn == conn && &e.kind == kind)
}

/// The next `n` tool responses Gemini receives.
async fn expect_tool_responses(fake: &mut FakeGemini, n: usize) -> Vec<Value> {
    let mut responses = Vec::new();
    while responses.len() < n {
        let event = fake.wait_for("a tool response", |e| matches!(e.kind, Kind::ToolResponse(_))).await;
        let Kind::ToolResponse(response) = event.kind else { unreachable!() };
        responses.push(response);
    }
    responses
}

fn tool_responses(fake: &FakeGemini) -> Vec<Value> {
    fake.received()
        .into_iter()
        .filter_map(|e| match e.kind {
            Kind::ToolResponse(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn self_hosted_without_a_key_exits_2_at_once_and_dials_nothing() {
    let home = tempfile::tempdir().unwrap();
    // Anything dialled would land on these listeners.
    let relay = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gemini = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    relay.set_nonblocking(true).unwrap();
    gemini.set_nonblocking(true).unwrap();
    for args in [&["--self-hosted"][..], &["run", "--self-hosted"], &["--self-hosted", "run", "--json"]] {
        let started = std::time::Instant::now();
        let output = voxa_cmd(home.path())
            .args(args)
            .env("VOXA_RELAY", format!("http://{}", relay.local_addr().unwrap()))
            .env("VOXA_GEMINI_URL", format!("ws://{}/ws", gemini.local_addr().unwrap()))
            .env("GEMINI_API_KEY", "  ")
            .output()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?} took {:?}", started.elapsed());
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("GEMINI_API_KEY"), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} printed {:?}", String::from_utf8_lossy(&output.stdout));
    }
    assert!(relay.accept().is_err(), "the relay was dialled");
    assert!(gemini.accept().is_err(), "Gemini was dialled");
    assert!(!home.path().join("auth_token").exists(), "nothing was started, not even the secrets");
}

#[test]
fn a_gemini_url_carrying_a_key_is_refused_without_repeating_it() {
    let home = tempfile::tempdir().unwrap();
    let output = voxa_cmd(home.path())
        .args(["run", "--self-hosted"])
        .env("GEMINI_API_KEY", KEY)
        .env("VOXA_GEMINI_URL", format!("wss://example.com/ws?key={KEY}"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("VOXA_GEMINI_URL") && stderr.contains("header"), "{stderr}");
    assert!(!stderr.contains(KEY), "{stderr}");
}

#[tokio::test]
async fn hosted_mode_refuses_call_start_unchanged() {
    let agent = TestAgent::start(None).await;
    let mut phone = Phone::join(&agent).await;
    phone.send(json!({"type":"call_start"})).await;
    let error = phone.expect("call_error").await;
    assert_eq!(error["code"], "unavailable");
    assert!(error["message"].as_str().unwrap().contains("--self-hosted"));
}

#[tokio::test]
async fn a_call_bridges_audio_transcripts_turns_and_tool_calls() {
    let mut options = FakeOptions::new(KEY);
    options.echo_audio = true;
    options.setup_reply = SetupReply::Hold;
    let mut fake = FakeGemini::start(options).await;
    let agent = self_hosted_agent(&fake, KEY).await;

    let mut hello = connect(&agent.loopback_url()).await;
    send(&mut hello, json!({"type":"hello","token": agent.token()})).await;
    assert_eq!(recv_type(&mut hello, "hello_ok").await["mode"], "self-hosted");

    let mut phone = Phone::join(&agent).await;
    phone.send(json!({"type":"call_start"})).await;
    let connected = fake.next_event().await;
    assert_eq!(connected.kind, Kind::Connected { key: Some(KEY.into()) }, "the key travels in x-goog-api-key");
    let (conn, setup) = fake.expect_setup().await;
    assert!(setup["model"].as_str().unwrap().starts_with("models/"));
    assert_eq!(setup["generationConfig"]["responseModalities"], json!(["AUDIO"]));
    assert_eq!(setup["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"], "Kore");
    assert_eq!(setup["inputAudioTranscription"], json!({}));
    assert_eq!(setup["outputAudioTranscription"], json!({}));
    assert_eq!(setup["contextWindowCompression"], json!({"slidingWindow":{}}));
    assert_eq!(setup["sessionResumption"], json!({}));
    let declared: Vec<_> =
        setup["tools"][0]["functionDeclarations"].as_array().unwrap().iter().map(|d| d["name"].clone()).collect();
    for tool in ["run_command", "read_file", "write_file", "list_dir", "screenshot", "coding_agent"] {
        assert!(declared.contains(&json!(tool)), "{tool} is not declared: {declared:?}");
    }
    let instruction = setup["systemInstruction"]["parts"][0]["text"].as_str().unwrap();
    assert!(instruction.contains("confirm") && instruction.contains("phone"), "{instruction}");

    // Until setupComplete, nothing else goes to Gemini (the fake closes 1007 if it does) and the
    // phone hears nothing; what the phone says meanwhile waits.
    let first = pcm(1, 640);
    phone.send_audio(&first).await;
    phone.send(json!({"type":"say","text":"hello"})).await;
    assert_silent(&mut phone.socket, Duration::from_millis(300)).await;
    fake.complete_setup(conn);
    phone.expect("call_started").await;
    let typed = fake.wait_for("the typed text", |e| e.conn == conn && matches!(e.kind, Kind::Text(_))).await;
    assert_eq!(typed.kind, Kind::Text("hello".into()));
    assert_eq!(fake.expect_audio(conn).await, ("audio/pcm;rate=16000".into(), first.clone()));
    assert_eq!(phone.audio().await, first, "model audio reaches the phone as 0x01 + PCM");

    let second = pcm(2, 640);
    phone.send_audio(&second).await;
    assert_eq!(fake.expect_audio(conn).await.1, second);
    assert_eq!(phone.audio().await, second);

    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"list the files","finished":true}}}));
    let heard = phone.expect("transcript").await;
    assert_eq!(heard, json!({"type":"transcript","role":"user","text":"list the files","final":true}));
    fake.send(conn, json!({"serverContent":{"outputTranscription":{"text":"Looking"}}}));
    let spoken = phone.expect("transcript").await;
    assert_eq!(spoken, json!({"type":"transcript","role":"model","text":"Looking","final":false}));

    std::fs::write(agent.workspace.path().join("notes.txt"), "hi").unwrap();
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[
            {"id":"fc-1","name":"list_dir","args":{}},
            {"id":"fc-2","name":"no_such_tool"}
        ]}}),
    );
    let mut activity = Vec::new();
    while activity.len() < 4 {
        activity.push(phone.expect("tool_activity").await);
    }
    for (id, name, ok) in [("fc-1", "list_dir", true), ("fc-2", "no_such_tool", false)] {
        let states: Vec<_> = activity.iter().filter(|a| a["id"] == id).map(|a| a["state"].clone()).collect();
        assert_eq!(states, [json!("started"), json!("finished")], "{id}: {activity:?}");
        let finished = activity.iter().find(|a| a["id"] == id && a["state"] == "finished").unwrap();
        assert_eq!((finished["name"].as_str(), finished["ok"].as_bool()), (Some(name), Some(ok)), "{finished}");
    }
    let mut responses = expect_tool_responses(&mut fake, 2).await;
    responses.sort_by_key(|r| r["id"].as_str().unwrap().to_owned());
    assert_eq!((responses[0]["id"].as_str(), responses[0]["name"].as_str()), (Some("fc-1"), Some("list_dir")));
    let entries = &responses[0]["response"]["output"]["entries"];
    assert_eq!(entries[0]["name"], "notes.txt", "{}", responses[0]);
    assert_eq!((responses[1]["id"].as_str(), responses[1]["name"].as_str()), (Some("fc-2"), Some("no_such_tool")));
    assert_eq!(responses[1]["response"]["error"]["code"], "unknown-tool", "{}", responses[1]);
    assert!(responses[1]["response"]["error"]["message"].is_string());

    fake.send(conn, json!({"serverContent":{"interrupted":true}}));
    phone.expect("interrupted").await;
    fake.send(conn, json!({"serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;

    phone.send(json!({"type":"say","text":"thanks"})).await;
    fake.wait_for("the second text", |e| e.kind == Kind::Text("thanks".into())).await;

    phone.send(json!({"type":"call_end"})).await;
    let ended = phone.expect("call_ended").await;
    assert!(ended["duration_s"].as_f64().unwrap() >= 0.0, "{ended}");
    fake.expect_closed(conn).await;
    assert!(!phone.saw("call_error"));
    phone.send(json!({"type":"say","text":"anyone?"})).await;
    assert_eq!(phone.expect("call_error").await["code"], "no-call");
}

#[tokio::test]
async fn go_away_and_a_lost_connection_resume_with_the_newest_handle_without_ending_the_call() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (first, setup) = start_call(&mut phone, &mut fake).await;
    assert_eq!(setup["sessionResumption"], json!({}));

    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":"handle-1","resumable":true}}));
    // Not resumable (a tool was running): must not replace the usable handle.
    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":"handle-busy","resumable":false}}));
    fake.send(first, json!({"goAway":{"timeLeft":"50s"}}));
    let (second, setup) = fake.expect_setup().await;
    assert_ne!(second, first);
    assert_eq!(setup["sessionResumption"], json!({"handle":"handle-1"}));
    assert_eq!(setup["model"], fake.config(KEY).model, "a resumed setup is otherwise the same");
    eventually("the old connection closed", || saw(&fake, first, &Kind::Closed)).await;

    let chunk = pcm(3, 640);
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(second).await.1, chunk, "audio flows to the resumed session");
    let reply = pcm(4, 960);
    fake.send(second, FakeGemini::model_audio(&reply));
    assert_eq!(phone.audio().await, reply);

    // An unexpected drop while a handle is known resumes too, with the newest handle.
    fake.send(second, json!({"sessionResumptionUpdate":{"newHandle":"handle-2","resumable":true}}));
    fake.drop_conn(second);
    let (third, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({"handle":"handle-2"}));
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(third).await.1, chunk);
    fake.send(third, json!({"serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;

    let started = phone.texts.iter().filter(|t| t["type"] == "call_started").count();
    assert_eq!(started, 1, "resuming is invisible to the phone: {:?}", phone.texts);
    assert!(!phone.saw("call_ended") && !phone.saw("call_error"), "{:?}", phone.texts);
    phone.send(json!({"type":"call_end"})).await;
    phone.expect("call_ended").await;
    fake.expect_closed(third).await;
}

#[tokio::test]
async fn go_away_before_any_handle_waits_for_a_resumable_one() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (first, _) = start_call(&mut phone, &mut fake).await;
    fake.send(first, json!({"goAway":{"timeLeft":"10s"}}));
    // The connection stays in use until a handle makes resuming possible.
    let chunk = pcm(5, 640);
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(first).await.1, chunk);
    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":"late-handle","resumable":true}}));
    let (_, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({"handle":"late-handle"}));
    assert!(!phone.saw("call_ended"));
}

#[tokio::test]
async fn a_quota_close_mid_call_ends_it_with_gemini_unavailable() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    fake.close(conn, 1011, "You exceeded your current quota, please check your plan and billing details.");
    let error = phone.expect("call_error").await;
    assert_eq!(error["code"], "gemini-unavailable");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("1011") && message.contains("quota"), "{message}");
    phone.expect("call_ended").await;
    assert_eq!(
        fake.drain().iter().filter(|e| matches!(e.kind, Kind::Setup(_))).count(),
        0,
        "no resumption without a handle"
    );
    phone.send(json!({"type":"call_end"})).await;
    assert_eq!(phone.expect("call_error").await["code"], "no-call");
}

#[tokio::test]
async fn setup_failures_are_call_errors_with_stable_codes() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let cases: Vec<(&str, FakeOptions, &str, Option<u16>)> = vec![
        ("wrong key", FakeOptions::new("AIzaSy-the-right-key"), "bad-key", Some(1007)),
        ("HTTP 429", FakeOptions { refuse_http: Some(429), ..FakeOptions::new(KEY) }, "gemini-unavailable", None),
        ("HTTP 403", FakeOptions { refuse_http: Some(403), ..FakeOptions::new(KEY) }, "bad-key", None),
        (
            "model not found",
            FakeOptions {
                setup_reply: SetupReply::Close(1008, "Requested entity was not found.".into()),
                ..FakeOptions::new(KEY)
            },
            "gemini-not-found",
            Some(1008),
        ),
        (
            "quota at setup",
            FakeOptions { setup_reply: SetupReply::Close(1011, "Quota exceeded.".into()), ..FakeOptions::new(KEY) },
            "gemini-unavailable",
            Some(1011),
        ),
        ("unreachable", FakeOptions::new(KEY), "gemini-unreachable", None),
    ];
    for (case, options, code, close) in cases {
        let mut fake = FakeGemini::start(options).await;
        let mut config = fake.config(KEY);
        if case == "unreachable" {
            config.url = format!("ws://{closed_port}/ws");
        }
        let agent = TestAgent::start_with(None, |o| o.gemini = Some(config)).await;
        let mut phone = Phone::join(&agent).await;
        phone.send(json!({"type":"call_start"})).await;
        let error = phone.expect("call_error").await;
        assert_eq!(error["code"], code, "{case}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.len() > 20 && !message.contains(KEY), "{case}: {message}");
        if case == "wrong key" {
            assert!(message.contains(BAD_KEY_REASON) && message.contains("GEMINI_API_KEY"), "{message}");
        }
        if let Some(close) = close {
            let rejected = fake.wait_for("the close", |e| matches!(e.kind, Kind::Rejected { .. })).await;
            assert!(matches!(rejected.kind, Kind::Rejected { code, .. } if code == close), "{case}");
        }
        assert!(!phone.saw("call_started") && !phone.saw("call_ended"), "{case}: {:?}", phone.texts);
        phone.send(json!({"type":"say","text":"hello?"})).await;
        assert_eq!(phone.expect("call_error").await["code"], "no-call", "{case}");
    }
}

#[tokio::test]
async fn the_phone_leaving_mid_call_closes_the_gemini_socket() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    drop(phone);
    fake.expect_closed(conn).await;
}

#[tokio::test]
async fn the_phone_leaving_during_setup_closes_the_gemini_socket() {
    let options = FakeOptions { setup_reply: SetupReply::Hold, ..FakeOptions::new(KEY) };
    let mut fake = FakeGemini::start(options).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    phone.send(json!({"type":"call_start"})).await;
    let (conn, _) = fake.expect_setup().await;
    drop(phone);
    fake.expect_closed(conn).await;
}

#[tokio::test]
async fn malformed_server_messages_do_not_break_the_call() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    let junk: Vec<Message> = vec![
        Message::binary(b"{".to_vec()),
        Message::text("not json at all"),
        Message::binary(vec![0xff; 1 << 20]),
        Message::binary(br#"{"serverContent":{"modelTurn":5}}"#.to_vec()),
        Message::binary(br#"{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"@@@"}}]}}}"#.to_vec()),
        Message::binary(br#"{"toolCall":{"functionCalls":[{"name":"list_dir"},{"id":7,"name":"x"}]}}"#.to_vec()),
        Message::binary(br#"{"toolCallCancellation":{"ids":["never-started"]}}"#.to_vec()),
        Message::binary(br#"{"sessionResumptionUpdate":{"newHandle":12,"resumable":"yes"}}"#.to_vec()),
        Message::binary(format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes()),
        Message::text(r#"{"setupComplete":{}}"#),
    ];
    for frame in junk {
        fake.send_raw(conn, frame);
    }
    let after = pcm(6, 640);
    fake.send(conn, FakeGemini::model_audio(&after));
    assert_eq!(phone.audio().await, after, "the call survives hostile input");
    // Text frames are accepted as well as binary ones.
    fake.send_raw(conn, Message::text(json!({"serverContent":{"turnComplete":true}}).to_string()));
    phone.expect("turn_complete").await;
    assert!(!phone.saw("call_error") && !phone.saw("call_ended") && !phone.saw("tool_activity"), "{:?}", phone.texts);
    assert!(tool_responses(&fake).is_empty(), "calls without an id get no response");
    let chunk = pcm(7, 640);
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(conn).await.1, chunk);
}

#[tokio::test]
async fn the_fake_refuses_what_the_service_refuses() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let url = fake.url();
    let headers = vec![("x-goog-api-key".to_owned(), voxa::secret::Secret::from_string(KEY.into()))];
    let options = voxa::net::dial::DialOptions { headers, ..Default::default() };
    let good_setup = || {
        json!({"setup":{"model":"models/m","generationConfig":{"responseModalities":["AUDIO"]},
            "inputAudioTranscription":{},"outputAudioTranscription":{}}})
    };
    let misplaced = json!({"setup":{"model":"models/m",
        "generationConfig":{"responseModalities":["AUDIO"],"inputAudioTranscription":{}}}});
    let media_chunks = json!({"realtimeInput":{"mediaChunks":[{"mimeType":"audio/pcm;rate=16000","data":"AAAA"}]}});
    let scripts: Vec<(Vec<Value>, &str)> = vec![
        (vec![misplaced], "generation_config"),
        (vec![good_setup(), media_chunks], "mediaChunks"),
        (vec![json!({"realtimeInput":{"text":"hi"}})], "first message must be setup"),
        (vec![good_setup(), json!({"toolResponse":{"functionResponses":[{"name":"x","response":{}}]}})], "id"),
    ];
    for (messages, reason) in scripts {
        let mut socket = voxa::net::dial::connect(&url, &options).await.unwrap();
        for message in messages {
            socket.send(Message::text(message.to_string())).await.unwrap();
        }
        let (code, said) = recv_close(&mut socket).await;
        assert_eq!(code, 1007, "{reason}");
        assert!(said.contains(reason), "{said:?} should mention {reason:?}");
    }
    let mut keyless = voxa::net::dial::connect(&url, &voxa::net::dial::DialOptions::default()).await.unwrap();
    keyless.send(Message::text(good_setup().to_string())).await.unwrap();
    assert_eq!(recv_close(&mut keyless).await, (1007, BAD_KEY_REASON.to_owned()));
    let in_url = voxa::net::dial::connect(&format!("{url}?key={KEY}"), &options).await.err().unwrap();
    assert!(format!("{in_url:#}").contains("400"), "{in_url:#}");
    fake.drain();
}

#[tokio::test]
async fn the_key_appears_in_no_frame_log_or_error() {
    // Current-thread runtime: every task of the agent logs into this subscriber.
    let logs = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = {
        let logs = logs.clone();
        move || LogWriter(logs.clone())
    };
    let subscriber = tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_writer(writer).finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let options = FakeOptions { echo_audio: true, ..FakeOptions::new(KEY) };
    let mut fake = FakeGemini::start(options).await;
    let config = fake.config(KEY);
    assert!(!format!("{config:?}").contains(KEY));
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    phone.send_audio(&pcm(8, 640)).await;
    phone.audio().await;
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"fc-9","name":"read_file","args":{"path":"nope"}}]}}));
    phone.expect("tool_activity").await;
    expect_tool_responses(&mut fake, 1).await;
    // A hostile server echoing the key in its close reason.
    fake.send(conn, json!({"sessionResumptionUpdate":{"newHandle":"h","resumable":true}}));
    fake.close(conn, 1007, &format!("API key not valid: {KEY}"));
    let error = phone.expect("call_error").await;
    assert_eq!(error["code"], "bad-key");
    phone.expect("call_ended").await;

    // A second call with a wrong key, refused.
    let wrong = FakeGemini::start(FakeOptions::new("AIzaSy-another-key")).await;
    let agent2 = self_hosted_agent(&wrong, KEY).await;
    let mut phone2 = Phone::join(&agent2).await;
    phone2.send(json!({"type":"call_start"})).await;
    assert_eq!(phone2.expect("call_error").await["code"], "bad-key");

    for frame in phone.raw.iter().chain(&phone2.raw) {
        assert!(!String::from_utf8_lossy(frame).contains(KEY), "a phone frame carries the key");
    }
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(logs.contains("voice call"), "the logs were captured: {logs}");
    assert!(!logs.contains(KEY), "the logs carry the key");
}

/// Collects log output in memory.
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn screenshots_go_to_the_phone_and_gemini_only_hears_about_them() {
    let Some(xvfb) = crate::tools::Xvfb::start("320x240x24") else { return };
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[
            {"id":"shot-1","name":"screenshot","args":{"display": xvfb.display}},
            {"id":"shot-2","name":"screenshot","args":{"display":":9999"}}
        ]}}),
    );
    let image = phone.expect("image").await;
    assert_eq!((image["id"].as_str(), image["mime"].as_str()), (Some("shot-1"), Some("image/png")));
    assert_eq!((image["width"].as_u64(), image["height"].as_u64()), (Some(320), Some(240)));
    let data = image["data"].as_str().unwrap();
    let png = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "the phone gets the PNG itself");

    let mut responses = expect_tool_responses(&mut fake, 2).await;
    responses.sort_by_key(|r| r["id"].as_str().unwrap().to_owned());
    let shown = &responses[0]["response"]["output"];
    assert_eq!(shown["message"], "The screenshot (320x240) is shown on the user's phone.", "{}", responses[0]);
    assert_eq!(responses[1]["response"]["error"]["code"], "unavailable", "{}", responses[1]);
    // Gemini never gets the pixels, in any message.
    let everything = format!("{:?}", fake.received());
    assert!(!everything.contains(&data[..64]) && !everything.contains("iVBORw0KGgo"), "image bytes reached Gemini");
    assert!(phone.texts.iter().filter(|t| t["type"] == "image").count() == 1, "no image for the failed shot");
}

#[tokio::test]
async fn tool_call_cancellation_stops_the_call_and_no_answer_is_sent() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    let pid_file = agent.workspace.path().join("sleeper.pid");
    // Both at once: the quick call is answered while the slow one still runs.
    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[
            {"id":"slow","name":"run_command","args":{"command":"echo $$ > sleeper.pid; exec sleep 60"}},
            {"id":"quick","name":"list_dir","args":{}}
        ]}}),
    );
    let quick = expect_tool_responses(&mut fake, 1).await;
    assert_eq!(quick[0]["id"], "quick", "the quick call was not held up: {quick:?}");
    eventually("the slow command started", || std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')))
        .await;
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    fake.send(conn, json!({"toolCallCancellation":{"ids":["slow"]}}));
    let finished = loop {
        let activity = phone.expect("tool_activity").await;
        if activity["id"] == "slow" && activity["state"] == "finished" {
            break activity;
        }
    };
    assert_eq!(finished["ok"], false);
    eventually("the command's process is gone", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| stat.contains(") Z"))
    })
    .await;
    // The call goes on; Gemini gets no answer for the call it cancelled.
    fake.send(conn, json!({"serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    // Gemini's queue is in order: an answer to the cancelled call would arrive before this text.
    phone.send(json!({"type":"say","text":"still there?"})).await;
    fake.wait_for("the text", |e| e.kind == Kind::Text("still there?".into())).await;
    assert!(tool_responses(&fake).iter().all(|r| r["id"] != "slow"), "{:?}", tool_responses(&fake));
    assert!(!phone.saw("call_error"));
}

#[tokio::test]
async fn a_gemini_socket_that_stops_answering_is_noticed_and_resumed_or_ended() {
    let heartbeat = voxa::net::liveness::Heartbeat {
        ping_every: Duration::from_millis(100),
        dead_after: Duration::from_millis(500),
    };
    for with_handle in [true, false] {
        let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
        let mut config = fake.config(KEY);
        config.heartbeat = heartbeat;
        let agent = TestAgent::start_with(None, |o| o.gemini = Some(config)).await;
        let mut phone = Phone::join(&agent).await;
        let (conn, _) = start_call(&mut phone, &mut fake).await;
        // Pings keep a quiet but healthy socket alive well past `dead_after`: the fake answers
        // them for twice that long and sees no new connection meanwhile.
        let mut first_ping = None;
        loop {
            let event = fake.next_event().await;
            assert!(!matches!(event.kind, Kind::Setup(_) | Kind::Closed), "{event:?}");
            if event.conn != conn || event.kind != Kind::Ping {
                continue;
            }
            let first = *first_ping.get_or_insert(event.at);
            if event.at.duration_since(first) > heartbeat.dead_after * 2 {
                break;
            }
        }
        assert!(!phone.saw("call_ended"));
        if with_handle {
            fake.send(conn, json!({"sessionResumptionUpdate":{"newHandle":"before-freeze","resumable":true}}));
        }
        fake.send(conn, json!({"serverContent":{"turnComplete":true}}));
        phone.expect("turn_complete").await;
        fake.freeze(conn);
        if with_handle {
            let (_, setup) = fake.expect_setup().await;
            assert_eq!(setup["sessionResumption"], json!({"handle":"before-freeze"}));
            assert!(!phone.saw("call_ended"));
        } else {
            let error = phone.expect("call_error").await;
            assert_eq!(error["code"], "gemini-closed", "{error}");
            assert!(error["message"].as_str().unwrap().contains("stopped answering"), "{error}");
            phone.expect("call_ended").await;
        }
    }
}

#[tokio::test]
async fn a_call_over_the_relay_works_the_same() {
    let options = FakeOptions { echo_audio: true, ..FakeOptions::new(KEY) };
    let mut fake = FakeGemini::start(options).await;
    let relay = TestRelay::start().await;
    let config = fake.config(KEY);
    let agent = TestAgent::start_with(Some(relay.url()), |o| o.gemini = Some(config)).await;
    let mut phone = Phone { socket: agent.phone(&relay).await, texts: Vec::new(), raw: Vec::new() };
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    let chunk = pcm(9, 640);
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(conn).await.1, chunk);
    assert_eq!(phone.audio().await, chunk);
    phone.send(json!({"type":"call_end"})).await;
    phone.expect("call_ended").await;
    fake.expect_closed(conn).await;
}
