//! Bytes to the phone while a coding agent streams an answer: two phones follow through the relay
//! at once, one as before and one with `low_data`, while a configured stream-json agent (a shell
//! loop) writes a text delta and a thinking delta every 20 ms, then its whole text. Each frame is
//! counted as a sealed session carries it: its JSON, the seal's 17 bytes (a kind byte and the
//! tag) and the WebSocket header. Byte counts do not depend on the build.

use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::ClientSocket;

use crate::child::start_agent_configured;
use crate::report::Report;
use crate::sessions::{next_json, phone};

/// `N` deltas of text and of thinking, 20 ms apart, then the whole text and the turn's end.
const STREAM_SCRIPT: &str = r#"N=${0#N=}; i=0; all=""; while [ $i -lt "$N" ]; do printf '{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"weighing the next step %s "}}}\n{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"streamed words %s "}}}\n' $i $i; all="${all}streamed words $i "; i=$((i+1)); sleep 0.02; done; printf '{"type":"assistant","message":{"content":[{"type":"text","text":"%s"}]}}\n' "$all"; echo '{"type":"result","subtype":"success","is_error":false,"result":"done"}'"#;

/// Bytes a sealed session spends on one frame of `json` bytes.
fn sealed_len(json: usize) -> usize {
    let payload = json + 17;
    payload
        + if payload < 126 {
            2
        } else if payload < 65536 {
            4
        } else {
            10
        }
}

/// What one phone got of `session` until its turn ended: frames, sealed bytes, streamed-text frames.
async fn count(socket: &mut ClientSocket, session: &str) -> (usize, usize, usize) {
    let (mut frames, mut bytes, mut texts) = (0, 0, 0);
    loop {
        let value = next_json(socket).await;
        frames += 1;
        bytes += sealed_len(value.to_string().len());
        if value["type"] != "agent_event" || value["session"] != session {
            continue;
        }
        texts += usize::from(value["event"]["kind"] == "text" && value["event"]["partial"] == true);
        if value["event"]["kind"] == "turn_end" {
            return (frames, bytes, texts);
        }
    }
}

pub fn run(report: &mut Report, measuring: bool) {
    let deltas = if measuring { 1500 } else { 150 };
    let config = format!(
        "[agents.writer]\nprogram = \"/bin/sh\"\nargs = [\"-c\", {}, \"{{prompt}}\"]\nformat = \"stream-json\"\n",
        toml::Value::String(STREAM_SCRIPT.to_owned())
    );
    let agent = start_agent_configured(
        Some(&config),
        &[],
        &["--embedded-relay"],
        &[],
        &["embedded_relay", "started", "relay_connected"],
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let (mut plain, mut low, mut control) = (phone(&agent).await, phone(&agent).await, phone(&agent).await);
        plain.send(Message::text(json!({"type": "follow"}).to_string())).await.unwrap();
        low.send(Message::text(json!({"type": "follow", "low_data": true}).to_string())).await.unwrap();
        // Nothing recorded yet: both follows are in place before the session starts.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let frame = json!({"type": "tool_call", "id": "bytes-1", "name": "agent_start",
                           "args": {"agent": "writer", "prompt": format!("N={deltas}")}});
        control.send(Message::text(frame.to_string())).await.unwrap();
        let started = Instant::now();
        let session = loop {
            let value: Value = next_json(&mut control).await;
            if value["type"] == "tool_result" && value["id"] == "bytes-1" {
                break value["result"]["session"].as_str().unwrap().to_owned();
            }
        };
        let (default, low_data) = tokio::join!(count(&mut plain, &session), count(&mut low, &session));
        let minutes = started.elapsed().as_secs_f64() / 60.0;
        for (name, (frames, bytes, texts), target) in
            [("default", default, ""), ("low data", low_data, "≤ 150 KB per minute")]
        {
            report.add(
                "bytes",
                format!(
                    "to a phone while an agent streams {:.0} s ({deltas} text and {deltas} thinking deltas), {name}",
                    minutes * 60.0
                ),
                format!(
                    "{:.0} KB per minute ({bytes} bytes, {frames} frames, {texts} of streamed text)",
                    bytes as f64 / 1e3 / minutes
                ),
                target,
            );
        }
    });
}
