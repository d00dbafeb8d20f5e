//! The phone's side of a voice call against the fake Gemini Live server: its socket and every
//! frame it received ([`Phone`]), the key the fake expects, recognisable audio, and the tool
//! responses Gemini receives.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::ClientSocket;

use crate::support::fake_gemini::{FakeGemini, Kind};
use crate::support::harness::*;

/// A key shaped like a real one, so a leak anywhere is easy to spot.
pub(crate) const KEY: &str = "AIzaSyFAKE-voxa-test-key-7f3c9e21b04d";

/// The phone's side of a session, keeping every frame it received.
pub(crate) struct Phone {
    pub(crate) socket: ClientSocket,
    pub(crate) texts: Vec<Value>,
    pub(crate) raw: Vec<Vec<u8>>,
}

pub(crate) enum Frame {
    Json(Value),
    Audio(Vec<u8>),
}

impl Phone {
    /// The phone on `agent`'s loopback socket.
    pub(crate) async fn join(agent: &TestAgent) -> Phone {
        Phone::over(agent.local_client().await)
    }

    /// The phone's side of an open socket.
    pub(crate) fn over(socket: ClientSocket) -> Phone {
        Phone { socket, texts: Vec::new(), raw: Vec::new() }
    }

    pub(crate) async fn send(&mut self, value: Value) {
        send(&mut self.socket, value).await;
    }

    pub(crate) async fn send_audio(&mut self, pcm: &[u8]) {
        let mut frame = vec![voxa::protocol::AUDIO_PREFIX];
        frame.extend_from_slice(pcm);
        self.socket.send(Message::binary(frame)).await.unwrap();
    }

    pub(crate) async fn next(&mut self) -> Frame {
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
    pub(crate) async fn expect(&mut self, kind: &str) -> Value {
        loop {
            if let Frame::Json(value) = self.next().await {
                if value["type"] == kind {
                    return value;
                }
            }
        }
    }

    /// Skips JSON frames until model audio arrives.
    pub(crate) async fn audio(&mut self) -> Vec<u8> {
        loop {
            if let Frame::Audio(pcm) = self.next().await {
                return pcm;
            }
        }
    }

    /// Reads (and so answers pings) for `quiet`, keeping what arrives.
    pub(crate) async fn idle(&mut self, quiet: Duration) {
        let until = tokio::time::Instant::now() + quiet;
        while let Ok(frame) = tokio::time::timeout_at(until, self.socket.next()).await {
            match frame {
                Some(Ok(Message::Text(text))) => self.texts.push(serde_json::from_str(&text).unwrap()),
                Some(Ok(_)) => continue,
                other => panic!("the phone's session ended: {other:?}"),
            }
        }
    }

    /// Like [`Phone::expect`], waiting up to `within` (for tests on a paused clock).
    pub(crate) async fn expect_within(&mut self, kind: &str, within: Duration) -> Value {
        tokio::time::timeout(within, async {
            loop {
                match self.socket.next().await {
                    Some(Ok(Message::Text(text))) => {
                        let value: Value = serde_json::from_str(&text).unwrap();
                        self.texts.push(value.clone());
                        if value["type"] == kind {
                            return value;
                        }
                    }
                    Some(Ok(_)) => continue,
                    other => panic!("the phone expected {kind}, got {other:?}"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {kind} within {within:?}"))
    }

    pub(crate) fn saw(&self, kind: &str) -> bool {
        self.texts.iter().any(|t| t["type"] == kind)
    }
}

/// 20 ms of recognisable "audio".
pub(crate) fn pcm(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// The next `n` tool responses Gemini receives.
pub(crate) async fn expect_tool_responses(fake: &mut FakeGemini, n: usize) -> Vec<Value> {
    let mut responses = Vec::new();
    while responses.len() < n {
        let event = fake.wait_for("a tool response", |e| matches!(e.kind, Kind::ToolResponse(_))).await;
        let Kind::ToolResponse(response) = event.kind else { unreachable!() };
        responses.push(response);
    }
    responses
}
