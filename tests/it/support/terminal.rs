//! A client of terminal sessions (docs/PROTOCOL.md, "Terminal sessions"): it calls the `term_*`
//! tools and keeps what each terminal sent, acknowledging `term_output` as it reads it.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::ClientSocket;

use crate::support::harness::*;

/// A client watching terminals: the bytes each one sent, in order, acknowledged as they arrive.
pub struct Watcher {
    pub socket: ClientSocket,
    /// Everything received per terminal since it was opened or last attached: the snapshot's
    /// bytes, then the output, as a terminal emulator is given them.
    pub output: HashMap<String, Vec<u8>>,
    /// The last `term_snapshot` of each terminal.
    pub snapshots: HashMap<String, Value>,
    /// The offset the next frame of each terminal must carry.
    pub next: HashMap<String, u64>,
    pub exits: HashMap<String, i64>,
    calls: usize,
    /// This watcher among the test's, for call ids no other watcher uses.
    name: usize,
    /// Acknowledge each frame once read (a client that never does is held at the window).
    pub acking: bool,
}

/// Watchers made so far in this test binary.
static WATCHERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Watcher {
    pub fn new(socket: ClientSocket) -> Self {
        Watcher {
            socket,
            output: HashMap::new(),
            snapshots: HashMap::new(),
            next: HashMap::new(),
            exits: HashMap::new(),
            calls: 0,
            name: WATCHERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            acking: true,
        }
    }

    /// Calls a tool and returns its `tool_result`, taking in terminal frames on the way.
    pub async fn call_raw(&mut self, name: &str, args: Value) -> Value {
        // Call ids name a call of the pairing, not of this socket: one seen again gets its first
        // answer again (docs/PROTOCOL.md, "Receipts"), so every watcher numbers from a count of
        // its own.
        self.calls += 1;
        let id = format!("t{}-{}", self.name, self.calls);
        if name == "term_attach" {
            let term = args["term"].as_str().unwrap_or_default().to_owned();
            self.output.remove(&term);
            self.next.remove(&term);
        }
        send(&mut self.socket, json!({"type":"tool_call","id":id,"name":name,"args":args})).await;
        loop {
            let frame = self.next_frame().await;
            if frame["type"] == "tool_result" && frame["id"] == id.as_str() {
                return frame;
            }
        }
    }

    /// Calls a tool that must succeed and returns its result.
    pub async fn call(&mut self, name: &str, args: Value) -> Value {
        let answer = self.call_raw(name, args).await;
        assert_eq!(answer["ok"], true, "{name}: {answer}");
        answer["result"].clone()
    }

    /// Opens a terminal of 80 × 24 running `command` (the login shell when `None`).
    pub async fn open(&mut self, command: Option<&str>) -> String {
        let mut args = json!({"cols": 80, "rows": 24});
        if let Some(command) = command {
            args["command"] = command.into();
        }
        self.call("term_open", args).await["term"].as_str().unwrap().to_owned()
    }

    pub async fn type_in(&mut self, term: &str, data: &str) {
        self.call("term_input", json!({"term": term, "data": data})).await;
    }

    /// The next JSON frame; a terminal frame is taken in (checked to be in order, acknowledged).
    pub async fn next_frame(&mut self) -> Value {
        loop {
            let frame = match next_frame(&mut self.socket).await {
                Some(Message::Text(text)) => serde_json::from_str::<Value>(&text).unwrap(),
                Some(Message::Binary(_)) => continue,
                other => panic!("the session ended: {other:?}"),
            };
            match frame["type"].as_str() {
                Some("term_output") => self.take_output(&frame).await,
                Some("term_snapshot") => self.take_snapshot(&frame),
                Some("term_exit") => {
                    self.exits.insert(frame["term"].as_str().unwrap().to_owned(), frame["code"].as_i64().unwrap());
                }
                _ => {}
            }
            return frame;
        }
    }

    /// A snapshot starts the terminal's bytes over; its output follows from the snapshot's offset.
    fn take_snapshot(&mut self, frame: &Value) {
        let term = frame["term"].as_str().unwrap().to_owned();
        let data = base64::engine::general_purpose::STANDARD.decode(frame["data"].as_str().unwrap()).unwrap();
        assert!(data.starts_with(b"\x1bc"), "a snapshot starts with a reset");
        self.output.insert(term.clone(), data);
        self.next.insert(term.clone(), frame["offset"].as_u64().unwrap());
        self.snapshots.insert(term, frame.clone());
    }

    async fn take_output(&mut self, frame: &Value) {
        let term = frame["term"].as_str().unwrap().to_owned();
        let offset = frame["offset"].as_u64().unwrap();
        let data = base64::engine::general_purpose::STANDARD.decode(frame["data"].as_str().unwrap()).unwrap();
        let expected = *self.next.entry(term.clone()).or_insert(offset);
        assert_eq!(offset, expected, "output of {term} arrived out of order");
        let next = offset + data.len() as u64;
        self.next.insert(term.clone(), next);
        self.output.entry(term.clone()).or_default().extend_from_slice(&data);
        if self.acking {
            send(&mut self.socket, json!({"type":"term_ack","term":term,"offset":next})).await;
        }
    }

    /// The output of `term` so far, as text.
    pub fn text(&self, term: &str) -> String {
        String::from_utf8_lossy(self.output.get(term).map(Vec::as_slice).unwrap_or_default()).into_owned()
    }

    /// Reads frames until the output of `term` contains `wanted`. A deadline, not a measurement:
    /// a login shell reading its profile on a loaded machine may take several steps to answer.
    pub async fn until(&mut self, term: &str, wanted: &str) {
        let deadline = tokio::time::Instant::now() + 3 * STEP;
        while !self.text(term).contains(wanted) {
            let next = tokio::time::timeout_at(deadline, self.next_frame()).await;
            assert!(next.is_ok(), "no {wanted:?} from {term}; got:\n{}", self.text(term));
        }
    }

    /// Reads frames until `term` reports its end; returns its exit code.
    pub async fn until_exit(&mut self, term: &str) -> i64 {
        loop {
            if let Some(code) = self.exits.get(term) {
                return *code;
            }
            self.next_frame().await;
        }
    }
}
