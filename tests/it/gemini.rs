//! Self-hosted voice (docs/PROTOCOL.md, "Voice") against the fake Gemini Live server: the phone's view of a call
//! (driven over the loopback socket, whose session code is the relay's) and what Gemini receives.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::ClientSocket;

use crate::support::fake_gemini::{
    FakeGemini, FakeOptions, Kind, SetupReply, BAD_KEY_REASON, DEADLINE_REASON, NOT_FOUND_REASON, STILL_OPEN_REASON,
};
use crate::support::harness::*;
use crate::support::logs::capture_logs;
use crate::support::phone::{expect_tool_responses, pcm, Phone, KEY};
use crate::support::voxa_cmd;

async fn self_hosted_agent(fake: &FakeGemini, key: &str) -> TestAgent {
    let config = fake.config(key);
    TestAgent::start_with(None, |options| options.gemini = Some(config)).await
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
    assert_eq!(say_hello(&mut hello, agent.token()).await["mode"], "self-hosted");

    let mut phone = Phone::join(&agent).await;
    phone.send(json!({"type":"call_start"})).await;
    let connected = fake.next_event().await;
    // Push-to-talk released during setup: held in order with the audio.
    assert_eq!(connected.kind, Kind::Connected { key: Some(KEY.into()) }, "the key travels in x-goog-api-key");
    let (conn, setup) = fake.expect_setup().await;
    assert!(setup["model"].as_str().unwrap().starts_with("models/"));
    assert_eq!(setup["generationConfig"]["responseModalities"], json!(["AUDIO"]));
    assert_eq!(setup["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"], "Kore");
    assert_eq!(setup["inputAudioTranscription"], json!({}));
    assert_eq!(setup["outputAudioTranscription"], json!({}));
    assert_eq!(setup["contextWindowCompression"], json!({"slidingWindow":{}}));
    assert_eq!(setup["sessionResumption"], json!({}));
    assert_eq!(setup["model"], "models/gemini-3.8-live", "the default is the stable Live model");
    let declarations = setup["tools"][0]["functionDeclarations"].as_array().unwrap();
    let declared: Vec<_> = declarations.iter().map(|d| d["name"].clone()).collect();
    for tool in ["run_command", "read_file", "write_file", "list_dir", "screenshot", "coding_agent"] {
        assert!(declared.contains(&json!(tool)), "{tool} is not declared: {declared:?}");
    }
    // The default model does not wait for function results unless told: tools that change the
    // machine are declared BLOCKING, the others keep the model's default.
    let blocking: Vec<_> =
        declarations.iter().filter(|d| d["behavior"] == "BLOCKING").map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(
        blocking,
        [
            "run_command",
            "write_file",
            "move_file",
            "delete_file",
            "restore_file",
            "upload_file",
            "coding_agent",
            "agent_start",
            "agent_send",
            "term_open",
            "term_input"
        ]
    );
    let instruction = setup["systemInstruction"]["parts"][0]["text"].as_str().unwrap();
    assert!(instruction.contains("confirm") && instruction.contains("phone"), "{instruction}");

    // Until setupComplete, nothing else goes to Gemini (the fake closes 1007 if it does) and the
    // phone hears nothing; what the phone says meanwhile waits.
    let first = pcm(1, 640);
    phone.send_audio(&first).await;
    phone.send(json!({"type":"audio_end"})).await;
    phone.send(json!({"type":"say","text":"hello"})).await;
    assert_silent(&mut phone.socket, Duration::from_millis(300)).await;
    fake.complete_setup(conn);
    phone.expect("call_started").await;
    let typed = fake.wait_for("the typed text", |e| e.conn == conn && matches!(e.kind, Kind::Text(_))).await;
    assert_eq!(typed.kind, Kind::Text("hello".into()));
    assert_eq!(fake.expect_audio(conn).await, ("audio/pcm;rate=16000".into(), first.clone()));
    let ended = fake.wait_for("audioStreamEnd", |e| e.conn == conn && e.kind == Kind::AudioStreamEnd).await;
    assert_eq!(ended.kind, Kind::AudioStreamEnd, "audio_end follows the audio it ends");
    assert_eq!(phone.audio().await, first, "model audio reaches the phone as 0x01 + PCM");

    let second = pcm(2, 640);
    phone.send_audio(&second).await;
    assert_eq!(fake.expect_audio(conn).await.1, second);
    assert_eq!(phone.audio().await, second);
    phone.send(json!({"type":"audio_end"})).await;
    fake.wait_for("a second audioStreamEnd", |e| e.conn == conn && e.kind == Kind::AudioStreamEnd).await;

    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"list the files"}}}));
    let heard = phone.expect("transcript").await;
    assert_eq!(heard, json!({"type":"transcript","role":"user","text":"list the files","final":false}));
    fake.send(conn, json!({"serverContent":{"outputTranscription":{"text":"Looking"}}}));
    let heard = phone.expect("transcript").await;
    assert_eq!(heard, json!({"type":"transcript","role":"user","text":"list the files","final":true}));
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
    let cut = phone.expect("transcript").await;
    assert_eq!(cut, json!({"type":"transcript","role":"model","text":"Looking","final":true}));
    fake.end_turn(conn);
    assert_eq!(phone.expect("turn_complete").await, json!({"type":"turn_complete"}));

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

/// A minimal `setup` declaring one function.
fn with_tool(declaration: Value) -> Value {
    json!({"setup":{"model":"models/m","tools":[{"functionDeclarations":[declaration]}]}})
}

/// A raw client of the fake, holding the key.
async fn raw_client(fake: &FakeGemini) -> ClientSocket {
    let headers = vec![("x-goog-api-key".to_owned(), voxa::secret::Secret::from_string(KEY.into()))];
    let options = voxa::net::dial::DialOptions { headers, ..Default::default() };
    voxa::net::dial::connect(&fake.url(), &options).await.unwrap()
}

/// The next data frame from the fake: it must be pretty-printed JSON in a binary frame.
async fn raw_next(socket: &mut ClientSocket) -> Value {
    match next_frame(socket).await {
        Some(Message::Binary(data)) => {
            assert!(data.contains(&b'\n'), "pretty-printed, as the service sends it");
            serde_json::from_slice(&data).unwrap()
        }
        other => panic!("expected a binary JSON frame, got {other:?}"),
    }
}

/// Paused clock: pongs and deadlines are timed exactly, in no real time.
#[tokio::test(start_paused = true)]
async fn the_fake_keeps_sessions_and_time_like_the_service() {
    let mut fake =
        FakeGemini::start(FakeOptions { pong_delay: Duration::from_secs(30), ..FakeOptions::new(KEY) }).await;
    let setup = |handle: Option<&str>| {
        let resumption = handle.map_or(json!({}), |h| json!({"handle": h}));
        Message::text(json!({"setup":{"model":"models/m","sessionResumption":resumption}}).to_string())
    };
    let mut first = raw_client(&fake).await;
    first.send(setup(None)).await.unwrap();
    let complete = raw_next(&mut first).await;
    assert_eq!(complete["setupComplete"]["sessionId"], "fake-session-1", "{complete}");

    // Pongs come late.
    let pinged = tokio::time::Instant::now();
    first.send(Message::Ping(b"p".to_vec().into())).await.unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(Ok(Message::Pong(data))) = first.next().await {
                return data;
            }
        }
    })
    .await
    .expect("a pong within a minute");
    assert_eq!(&pong[..], b"p");
    assert_eq!(pinged.elapsed(), Duration::from_secs(30));

    // Handles: none while a call is pending, and only known ones resume.
    fake.send(1, json!({"toolCall":{"functionCalls":[{"id":"c1","name":"x","args":{}}]}}));
    fake.send(1, json!({"sessionResumptionUpdate":{"newHandle":"busy","resumable":true}}));
    raw_next(&mut first).await;
    assert_eq!(raw_next(&mut first).await["sessionResumptionUpdate"]["resumable"], false);
    let answer = json!({"toolResponse":{"functionResponses":[{"id":"c1","name":"x","response":{"output":1}}]}});
    first.send(Message::text(answer.to_string())).await.unwrap();
    fake.wait_for("the answer", |e| matches!(e.kind, Kind::ToolResponse(_))).await;
    fake.send(1, json!({"sessionResumptionUpdate":{"newHandle":"h-1","resumable":true}}));
    assert_eq!(raw_next(&mut first).await["sessionResumptionUpdate"]["resumable"], true);
    for (handle, code, reason) in [("busy", 1008, NOT_FOUND_REASON), ("h-1", 1011, STILL_OPEN_REASON)] {
        let mut resume = raw_client(&fake).await;
        resume.send(setup(Some(handle))).await.unwrap();
        assert_eq!(recv_close(&mut resume).await, (code, reason.to_owned()), "{handle}");
    }

    // goAway: the socket is cut when its time is up.
    let warned = tokio::time::Instant::now();
    fake.send(1, json!({"goAway":{"timeLeft":"50s"}}));
    assert!(raw_next(&mut first).await["goAway"].is_object());
    let cut = tokio::time::timeout(Duration::from_secs(120), recv_close_slowly(&mut first)).await.unwrap();
    assert_eq!(cut, (1011, DEADLINE_REASON.to_owned()));
    assert_eq!(warned.elapsed(), Duration::from_secs(50));
    // Once the old socket is gone, the handle resumes the session.
    let mut resumed = raw_client(&fake).await;
    resumed.send(setup(Some("h-1"))).await.unwrap();
    assert!(raw_next(&mut resumed).await["setupComplete"].is_object());
}

/// [`recv_close`] without its per-frame timeout (for a paused clock).
async fn recv_close_slowly(socket: &mut ClientSocket) -> (u16, String) {
    loop {
        match socket.next().await {
            Some(Ok(Message::Close(Some(frame)))) => return (u16::from(frame.code), frame.reason.to_string()),
            Some(Ok(_)) => continue,
            other => panic!("closed without a close frame: {other:?}"),
        }
    }
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
        (vec![with_tool(json!({"name":"fleet","parameters":{"type":"OBJECT","properties":{}}}))], "non-empty"),
        (
            vec![with_tool(json!({"name":"run","parameters":{"type":"OBJECT",
                "properties":{"command":{"type":"STRING"}},"required":["command","cwd"]}}))],
            "required[cwd]",
        ),
        (vec![with_tool(json!({"name":"run","parameters":{"type":"object"}}))], "type"),
        (vec![with_tool(json!({"name":"run","behavior":"SOMETIMES"}))], "behavior"),
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
    let (logs, _guard) = capture_logs();

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
    fake.end_turn(conn);
    phone.expect("turn_complete").await;
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
    assert!(logs.contains("total_token_count=150"), "the call's token counts are logged: {logs}");
    assert!(!logs.contains(KEY), "the logs carry the key");
}

#[tokio::test]
async fn screenshots_go_to_the_phone_and_gemini_only_hears_about_them() {
    let Some(xvfb) = crate::support::xvfb::Xvfb::start("320x240x24") else { return };
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

/// Paused clock: the heartbeat's minutes pass in no real time, and exactly.
#[tokio::test(start_paused = true)]
async fn a_gemini_socket_is_dead_only_after_a_minute_of_silence_then_resumed_or_ended() {
    for with_handle in [true, false] {
        // The service's slowest measured pong: 30 s after the ping.
        let options = FakeOptions { pong_delay: Duration::from_secs(30), ..FakeOptions::new(KEY) };
        let mut fake = FakeGemini::start(options).await;
        let agent = self_hosted_agent(&fake, KEY).await;
        let mut phone = Phone::join(&agent).await;
        let (conn, _) = start_call(&mut phone, &mut fake).await;
        // Five quiet minutes: only late pongs come back, and the call stays on the same socket.
        phone.idle(Duration::from_secs(300)).await;
        let setups = fake.drain().iter().filter(|e| matches!(e.kind, Kind::Setup(_))).count();
        assert_eq!(setups, 0, "a healthy socket with late pongs was given up");
        if with_handle {
            fake.send(conn, json!({"sessionResumptionUpdate":{"newHandle":"before-freeze","resumable":true}}));
        }
        fake.send(conn, json!({"serverContent":{"turnComplete":true}}));
        phone.expect("turn_complete").await;
        assert!(!phone.saw("call_ended") && !phone.saw("call_error"), "{:?}", phone.texts);
        // Half-open from now on: nothing read, nothing answered, no pong.
        let silent_since = tokio::time::Instant::now();
        fake.freeze(conn);
        let noticed = if with_handle {
            // The phone stays in touch meanwhile (its session answers pings only when read).
            let resume =
                fake.wait_for_within("a resume", Duration::from_secs(300), |e| matches!(e.kind, Kind::Setup(_)));
            let event = tokio::select! {
                event = resume => event,
                _ = phone.idle(Duration::from_secs(300)) => panic!("no resume within 300 s"),
            };
            let resumed = event.conn;
            let Kind::Setup(setup) = event.kind else { unreachable!() };
            assert_eq!(setup["sessionResumption"], json!({"handle":"before-freeze"}));
            let chunk = pcm(9, 640);
            phone.send_audio(&chunk).await;
            assert_eq!(fake.expect_audio(resumed).await.1, chunk, "the resumed session is in use");
            assert!(!phone.saw("call_ended"));
            // The resume waited up to CLOSE_WAIT for the frozen socket to close.
            tokio::time::Instant::now() - silent_since - voxa::gemini::CLOSE_WAIT
        } else {
            let error = phone.expect_within("call_error", Duration::from_secs(300)).await;
            assert_eq!(error["code"], "gemini-closed", "{error}");
            assert!(error["message"].as_str().unwrap().contains("stopped answering"), "{error}");
            phone.expect("call_ended").await;
            tokio::time::Instant::now() - silent_since
        };
        let ping_every = voxa::gemini::HEARTBEAT.ping_every;
        assert!(noticed >= Duration::from_secs(60), "declared dead after {noticed:?} of silence");
        assert!(noticed <= Duration::from_secs(60) + ping_every, "noticed only after {noticed:?}");
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

/// A call with the default settings: the fake, the agent, the phone and the Gemini connection.
async fn new_call() -> (FakeGemini, TestAgent, Phone, usize) {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = self_hosted_agent(&fake, KEY).await;
    let mut phone = Phone::join(&agent).await;
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    (fake, agent, phone, conn)
}

/// A self-hosted agent whose Gemini link uses `tweak`ed settings.
async fn agent_with(fake: &FakeGemini, tweak: impl FnOnce(&mut voxa::gemini::GeminiConfig)) -> TestAgent {
    let mut config = fake.config(KEY);
    tweak(&mut config);
    TestAgent::start_with(None, |options| options.gemini = Some(config)).await
}

/// What Gemini received on `conn`, in order.
fn kinds(fake: &FakeGemini, conn: usize) -> Vec<Kind> {
    fake.received().into_iter().filter(|e| e.conn == conn).map(|e| e.kind).collect()
}

/// A call whose first connection issued the resumable `handle` (and the bridge has read it).
async fn call_with_handle(handle: &str) -> (FakeGemini, TestAgent, Phone, usize) {
    let (fake, agent, mut phone, first) = new_call().await;
    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":handle,"resumable":true}}));
    fake.send(first, json!({"serverContent":{"turnComplete":true}}));
    phone.expect("turn_complete").await;
    (fake, agent, phone, first)
}

/// A call whose first connection issued `handle`, then asked for `run_command` call `id`, which
/// runs until `gate` exists in the workspace and then prints `done`.
async fn call_running_a_gated_tool(handle: &str, id: &str, gate: &str) -> (FakeGemini, TestAgent, Phone, usize) {
    let (fake, agent, mut phone, first) = call_with_handle(handle).await;
    let command = format!("while [ ! -e {gate} ]; do sleep 0.05; done; echo done");
    let call = json!({"id":id,"name":"run_command","args":{"command":command}});
    fake.send(first, json!({"toolCall":{"functionCalls":[call]}}));
    phone.expect("tool_activity").await;
    (fake, agent, phone, first)
}

#[tokio::test]
async fn transcripts_become_final_when_the_turn_ends_since_the_service_never_says_finished() {
    let (fake, _agent, mut phone, conn) = new_call().await;
    let transcript =
        |role: &str, text: &str, last: bool| json!({"type":"transcript","role":role,"text":text,"final":last});

    // The user's words arrive in pieces; the model answering makes them final, whole.
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"what is "}}}));
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"in here"}}}));
    assert_eq!(phone.expect("transcript").await, transcript("user", "what is ", false));
    assert_eq!(phone.expect("transcript").await, transcript("user", "in here", false));
    fake.send(conn, FakeGemini::model_audio(&pcm(1, 480)));
    assert_eq!(phone.expect("transcript").await, transcript("user", "what is in here", true));
    fake.send(conn, json!({"serverContent":{"outputTranscription":{"text":"Two "}}}));
    fake.send(conn, json!({"serverContent":{"outputTranscription":{"text":"files."}}}));
    assert_eq!(phone.expect("transcript").await, transcript("model", "Two ", false));
    assert_eq!(phone.expect("transcript").await, transcript("model", "files.", false));
    // generationComplete ends the model's transcript; turnComplete then has nothing left to end.
    fake.end_turn(conn);
    assert_eq!(phone.expect("transcript").await, transcript("model", "Two files.", true));
    assert_eq!(phone.expect("turn_complete").await, json!({"type":"turn_complete"}));

    // Cut short by the user: `interrupted` ends what the model said so far.
    fake.send(conn, json!({"serverContent":{"outputTranscription":{"text":"Let me"}}}));
    assert_eq!(phone.expect("transcript").await, transcript("model", "Let me", false));
    fake.send(conn, json!({"serverContent":{"interrupted":true}}));
    phone.expect("interrupted").await;
    assert_eq!(phone.expect("transcript").await, transcript("model", "Let me", true));

    // A turn with nothing to say, and why; `turnComplete` alone also ends a running transcript.
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"delete it"}}}));
    assert_eq!(phone.expect("transcript").await, transcript("user", "delete it", false));
    fake.send(conn, json!({"serverContent":{"turnComplete":true,"turnCompleteReason":"MALFORMED_FUNCTION_CALL"}}));
    assert_eq!(phone.expect("transcript").await, transcript("user", "delete it", true));
    let empty = phone.expect("turn_complete").await;
    assert_eq!(empty["reason"], "MALFORMED_FUNCTION_CALL", "{empty}");
    assert!(empty["message"].as_str().unwrap().contains("malformed tool call"), "{empty}");
    fake.send(conn, json!({"serverContent":{"turnComplete":true,"turnCompleteReason":"NEED_MORE_INPUT"}}));
    assert_eq!(phone.expect("turn_complete").await, json!({"type":"turn_complete"}), "waiting for input is normal");

    // Should `finished` ever come, it ends the transcript at once.
    let finished = json!({"serverContent":{"inputTranscription":{"text":"stop","finished":true}}});
    fake.send_raw(conn, Message::binary(finished.to_string().into_bytes()));
    assert_eq!(phone.expect("transcript").await, transcript("user", "stop", true));
    let finals = phone.texts.iter().filter(|t| t["type"] == "transcript" && t["final"] == true).count();
    assert_eq!(finals, 5, "each utterance is final exactly once: {:?}", phone.texts);

    // Hanging up mid-sentence: what was said is final too.
    fake.send(conn, json!({"serverContent":{"outputTranscription":{"text":"Bye"}}}));
    assert_eq!(phone.expect("transcript").await, transcript("model", "Bye", false));
    phone.send(json!({"type":"call_end"})).await;
    assert_eq!(phone.expect("transcript").await, transcript("model", "Bye", true));
    phone.expect("call_ended").await;
}

#[tokio::test]
async fn go_away_lets_running_tools_finish_and_resumes_with_a_handle_that_covers_their_answers() {
    let (mut fake, agent, mut phone, first) = call_running_a_gated_tool("before-call", "fc-slow", "go").await;
    // While the call is pending the service offers no resumable handle (the fake turns this
    // one into resumable:false, as the service would).
    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":"mid-call","resumable":true}}));
    fake.send(first, json!({"goAway":{"timeLeft":"30s"}}));
    // The connection stays in use: audio still flows to it.
    let chunk = pcm(5, 640);
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(first).await.1, chunk);

    std::fs::write(agent.workspace.path().join("go"), "").unwrap();
    let answered = fake.wait_for("the answer", |e| matches!(e.kind, Kind::ToolResponse(_))).await;
    assert_eq!(answered.conn, first, "answered on the connection that asked");
    fake.send(first, json!({"sessionResumptionUpdate":{"newHandle":"after-call","resumable":true}}));
    let (second, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({"handle":"after-call"}), "the handle that covers the answer");
    let first_events = kinds(&fake, first);
    assert_eq!(first_events.last(), Some(&Kind::Closed), "the old socket closed before the resume: {first_events:?}");
    assert!(
        !fake.received().iter().any(|e| matches!(e.kind, Kind::Rejected { .. })),
        "the service refused nothing: {:?}",
        fake.received()
    );
    assert!(!kinds(&fake, second).iter().any(|k| matches!(k, Kind::Text(_))), "nothing to catch up on");
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(second).await.1, chunk);
    assert!(!phone.saw("call_error") && !phone.saw("call_ended"), "{:?}", phone.texts);
}

#[tokio::test]
async fn a_tool_still_running_when_go_away_time_is_up_is_told_to_the_resumed_session() {
    let (mut fake, agent, mut phone, first) = call_running_a_gated_tool("h-1", "fc-late", "late").await;
    // Two seconds: the bridge leaves a second early, before the service's 1011 "Deadline expired".
    fake.send(first, json!({"goAway":{"timeLeft":"2s"}}));
    let (second, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({"handle":"h-1"}));
    assert_eq!(kinds(&fake, first).last(), Some(&Kind::Closed), "closed by voxa, not by the deadline");

    std::fs::write(agent.workspace.path().join("late"), "").unwrap();
    let told = fake.wait_for("the late outcome", |e| matches!(e.kind, Kind::Text(_))).await;
    assert_eq!(told.conn, second);
    let Kind::Text(note) = told.kind else { unreachable!() };
    assert!(note.contains("run_command") && note.contains("fc-late") && note.contains("done"), "{note}");
    let finished = loop {
        let activity = phone.expect("tool_activity").await;
        if activity["state"] == "finished" {
            break activity;
        }
    };
    assert_eq!(finished["ok"], true, "{finished}");
    assert!(tool_responses(&fake).is_empty(), "no toolResponse to a session that never asked");
    assert!(!phone.saw("call_error") && !phone.saw("call_ended"), "{:?}", phone.texts);
}

#[tokio::test]
async fn the_end_of_a_connection_without_a_handle_is_reported_as_such_not_as_quota() {
    let (mut fake, _agent, mut phone, conn) = new_call().await;
    fake.send(conn, json!({"goAway":{"timeLeft":"1s"}}));
    let closed = fake.wait_for("the deadline", |e| matches!(e.kind, Kind::Rejected { .. })).await;
    assert_eq!(closed.kind, Kind::Rejected { code: 1011, reason: DEADLINE_REASON.into() });
    let error = phone.expect("call_error").await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("1011") && message.contains(DEADLINE_REASON), "the service's reason: {message}");
    assert!(!message.contains("quota"), "{message}");
    assert_eq!(error["code"], "gemini-closed");
    phone.expect("call_ended").await;
}

#[tokio::test]
async fn a_stale_handle_starts_a_fresh_session_in_the_same_call_and_tells_the_model() {
    let (mut fake, _agent, mut phone, first) = call_with_handle("old").await;
    fake.forget_handles();
    fake.drop_conn(first);

    let (refused, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({"handle":"old"}));
    let rejected = fake.wait_for("the refusal", |e| e.conn == refused && matches!(e.kind, Kind::Rejected { .. })).await;
    assert_eq!(rejected.kind, Kind::Rejected { code: 1008, reason: NOT_FOUND_REASON.into() });
    let (fresh, setup) = fake.expect_setup().await;
    assert_eq!(setup["sessionResumption"], json!({}), "a new session, without the stale handle");
    let told = fake.wait_for("the note", |e| e.conn == fresh && matches!(e.kind, Kind::Text(_))).await;
    let Kind::Text(note) = told.kind else { unreachable!() };
    assert!(note.contains("could not be restored"), "{note}");
    let chunk = pcm(6, 640);
    phone.send_audio(&chunk).await;
    assert_eq!(fake.expect_audio(fresh).await.1, chunk, "the call goes on");
    assert!(!phone.saw("call_error") && !phone.saw("call_ended"), "{:?}", phone.texts);
    assert_eq!(phone.texts.iter().filter(|t| t["type"] == "call_started").count(), 1);
}

#[tokio::test]
async fn a_1011_while_resuming_is_tried_once_more_and_then_reported_with_its_reason() {
    for refusals in [1, 2] {
        let (mut fake, _agent, mut phone, first) = call_with_handle("h").await;
        for _ in 0..refusals {
            fake.refuse_next_resume(1011, "Internal error encountered.");
        }
        fake.drop_conn(first);
        for _ in 0..refusals {
            let (conn, setup) = fake.expect_setup().await;
            assert_eq!(setup["sessionResumption"], json!({"handle":"h"}));
            fake.wait_for("the refusal", |e| e.conn == conn && matches!(e.kind, Kind::Rejected { code: 1011, .. }))
                .await;
        }
        if refusals == 1 {
            let (conn, setup) = fake.expect_setup().await;
            assert_eq!(setup["sessionResumption"], json!({"handle":"h"}));
            let chunk = pcm(7, 640);
            phone.send_audio(&chunk).await;
            assert_eq!(fake.expect_audio(conn).await.1, chunk);
            assert!(!phone.saw("call_error"), "{:?}", phone.texts);
        } else {
            let error = phone.expect("call_error").await;
            assert_eq!(error["code"], "gemini-unavailable");
            let message = error["message"].as_str().unwrap();
            assert!(message.contains("1011: Internal error encountered.") && !message.contains("quota"), "{message}");
            phone.expect("call_ended").await;
            let setups = fake.received().iter().filter(|e| matches!(e.kind, Kind::Setup(_))).count();
            assert_eq!(setups, 3, "the first setup and two resume attempts");
        }
    }
}

#[tokio::test]
async fn a_policy_that_allows_no_tool_declares_no_tools() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let config = fake.config(KEY);
    let agent = TestAgent::start_with(None, |options| {
        options.config.policy.allow = vec!["nothing".into()];
        options.gemini = Some(config);
    })
    .await;
    let mut phone = Phone::join(&agent).await;
    let (_, setup) = start_call(&mut phone, &mut fake).await;
    assert!(setup.get("tools").is_none(), "{setup}");
}

#[tokio::test]
async fn another_model_can_be_chosen_and_older_models_get_no_behavior() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let agent = agent_with(&fake, |c| c.model = "gemini-2.5-flash-native-audio-preview-12-2025".into()).await;
    let mut phone = Phone::join(&agent).await;
    let (_, setup) = start_call(&mut phone, &mut fake).await;
    assert_eq!(setup["model"], "models/gemini-2.5-flash-native-audio-preview-12-2025");
    let declarations = setup["tools"][0]["functionDeclarations"].as_array().unwrap();
    assert!(declarations.iter().all(|d| d.get("behavior").is_none()), "{declarations:?}");
}
