//! Terminals (docs/PROTOCOL.md, "Terminal sessions") driven as the page drives them: a sealed
//! session, keys sent as `term_input` calls, every `term_output` frame acknowledged as it arrives.
//! Keystroke → echo (one byte typed into a program that writes each byte back) and output
//! throughput (`head -c N /dev/zero | base64`), through `voxa relay` (its own process) and on the
//! agent's loopback socket, side by side with the floor: the same commands on a PTY this process
//! opens itself and reads directly, with the same keys and the agent's read size.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::{ClientSocket, DialOptions};
use voxa::protocol::TERM_CHUNK;

use crate::child::{say_hello, start_agent, Relay};
use crate::report::{percentiles, Report};

const AREA: &str = "terminal";
/// Echoes every byte as the program itself (as a shell's line editor or an editor does), not the
/// terminal's own echo; `ready` says the terminal is raw.
const ECHO_COMMAND: &str = "stty raw -echo; echo ready; exec cat";
/// Printed after the flood: a typed Enter starts it, this ends the clock.
const END_MARK: &[u8] = b"end-42";
/// How long one frame may take before the bench gives up (a deadline, not a measurement).
const PATIENCE: Duration = Duration::from_secs(60);

/// Waits for Enter, then writes `bytes` zeros as base64 (76 columns a line) and the end mark.
fn flood_command(bytes: usize) -> String {
    format!("echo ready; read go; head -c {bytes} /dev/zero | base64; echo end-$((6*7))")
}

/// Sizes of one run: keystrokes timed (after a few untimed), bytes flooded, repeats of each path.
struct Plan {
    keys: usize,
    flood: usize,
    repeats: usize,
}

/// What a session frame was, to a client watching one terminal.
enum Seen {
    Output(Vec<u8>),
    Answer { id: String, frame: Value },
    Other,
}

/// A client of the agent with one terminal open at a time, acknowledging output as it reads it.
struct Phone {
    socket: ClientSocket,
    /// The offset the next `term_output` must carry.
    next: Option<u64>,
}

impl Phone {
    async fn dial(url: &str, token: &str) -> Phone {
        let mut socket = voxa::net::dial::connect(url, &DialOptions::default()).await.unwrap();
        say_hello(&mut socket, token).await;
        assert!(socket.is_sealed(), "the bench speaks protocol 3, as the page does");
        Phone { socket, next: None }
    }

    /// Sends a `tool_call` and returns its id.
    async fn send_call(&mut self, name: &str, args: Value) -> String {
        // Call ids are the pairing's, and every phone of the bench is the same pairing's: one id
        // used twice would be answered from its receipt (docs/PROTOCOL.md, "Receipts").
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let id = format!("k{}", CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let call = json!({"type":"tool_call","id":id,"name":name,"args":args});
        self.socket.send(Message::text(call.to_string())).await.unwrap();
        id
    }

    /// The next frame; output is checked to be in order and acknowledged at once.
    async fn next(&mut self) -> Seen {
        let message = tokio::time::timeout(PATIENCE, self.socket.next())
            .await
            .expect("a frame in time")
            .expect("the session goes on")
            .expect("a readable frame");
        let Message::Text(text) = message else { return Seen::Other };
        let Ok(frame) = serde_json::from_str::<Value>(text.strip_prefix('\u{1}').unwrap_or(&text)) else {
            return Seen::Other;
        };
        match frame["type"].as_str() {
            Some("term_output") => {
                let offset = frame["offset"].as_u64().unwrap();
                let data = base64::engine::general_purpose::STANDARD.decode(frame["data"].as_str().unwrap()).unwrap();
                assert_eq!(*self.next.get_or_insert(offset), offset, "output in order");
                let end = offset + data.len() as u64;
                self.next = Some(end);
                let ack = json!({"type":"term_ack","term":frame["term"],"offset":end});
                self.socket.send(Message::text(ack.to_string())).await.unwrap();
                Seen::Output(data)
            }
            Some("tool_result") => Seen::Answer { id: frame["id"].as_str().unwrap_or_default().to_owned(), frame },
            _ => Seen::Other,
        }
    }

    /// Calls a tool that must succeed; output read on the way is appended to `output`.
    async fn call(&mut self, name: &str, args: Value, output: &mut Vec<u8>) -> Value {
        let id = self.send_call(name, args).await;
        loop {
            match self.next().await {
                Seen::Output(data) => output.extend_from_slice(&data),
                Seen::Answer { id: answered, frame } if answered == id => {
                    assert_eq!(frame["ok"], true, "{name}: {frame}");
                    return frame["result"].clone();
                }
                _ => {}
            }
        }
    }

    /// Opens an 80 × 24 terminal running `command` and returns once it printed `ready`.
    async fn open(&mut self, command: &str) -> String {
        self.next = None;
        let mut output = Vec::new();
        let args = json!({"cols": 80, "rows": 24, "command": command});
        let term = self.call("term_open", args, &mut output).await["term"].as_str().unwrap().to_owned();
        while !is_ready(&output) {
            if let Seen::Output(data) = self.next().await {
                output.extend_from_slice(&data);
            }
        }
        term
    }

    async fn close(&mut self, term: &str) {
        self.call("term_close", json!({"term": term}), &mut Vec::new()).await;
    }

    /// Keystroke → echo, in microseconds: each key is answered (`tool_result`) and echoed
    /// before the next is typed; the clock stops at the echo.
    async fn keystrokes_us(&mut self, plan: &Plan) -> Vec<f64> {
        let term = self.open(ECHO_COMMAND).await;
        let mut samples = Vec::with_capacity(plan.keys);
        for (i, key) in keys(plan.keys).enumerate() {
            let started = Instant::now();
            let id = self.send_call("term_input", json!({"term": term, "data": char::from(key).to_string()})).await;
            let (mut echoed, mut answered) = (None, false);
            while echoed.is_none() || !answered {
                match self.next().await {
                    Seen::Output(data) => {
                        assert_eq!(data, [key], "the program echoes the key it was sent");
                        echoed = Some(started.elapsed());
                    }
                    Seen::Answer { id: answered_id, frame } if answered_id == id => {
                        assert_eq!(frame["ok"], true, "{frame}");
                        answered = true;
                    }
                    _ => {}
                }
            }
            if i >= WARM_UP {
                samples.push(echoed.unwrap_or_default().as_secs_f64() * 1e6);
            }
        }
        self.close(&term).await;
        samples
    }

    /// Enter → the end mark of a `plan.flood` flood; the bytes that arrived, the seconds, and
    /// the `term_output` frames that carried them.
    async fn flood(&mut self, plan: &Plan) -> (u64, f64, u64) {
        let term = self.open(&flood_command(plan.flood)).await;
        let started = Instant::now();
        self.send_call("term_input", json!({"term": term, "data": "\r"})).await;
        let (mut bytes, mut frames, mut tail) = (0u64, 0u64, Vec::new());
        while !contains(&tail, END_MARK) {
            if let Seen::Output(data) = self.next().await {
                bytes += data.len() as u64;
                frames += 1;
                keep_tail(&mut tail, &data);
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        self.close(&term).await;
        (bytes, seconds, frames)
    }
}

/// Keystrokes before the timed ones: the first reads wake every thread on the way.
const WARM_UP: usize = 20;

/// The keys typed: `WARM_UP` untimed, then `count` timed, cycling through the alphabet.
fn keys(count: usize) -> impl Iterator<Item = u8> {
    (0..WARM_UP + count).map(|i| b'a' + (i % 26) as u8)
}

/// True once the program's `ready` line has arrived whole.
fn is_ready(output: &[u8]) -> bool {
    contains(output, b"ready") && output.ends_with(b"\n")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

/// Keeps the last bytes of output, enough to find the end mark across two reads.
fn keep_tail(tail: &mut Vec<u8>, data: &[u8]) {
    tail.extend_from_slice(data);
    let drop = tail.len().saturating_sub(64);
    tail.drain(..drop);
}

/// The floor: a PTY this process opens with portable-pty, read directly in the agent's chunks.
struct DirectPty {
    reader: Box<dyn Read + Send>,
    writer: Box<dyn Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    _master: Box<dyn portable_pty::MasterPty + Send>,
    buf: Vec<u8>,
}

impl DirectPty {
    /// Starts `command` with `/bin/sh -c` on an 80 × 24 PTY and reads until it printed `ready`.
    fn open(command: &str) -> DirectPty {
        let size = portable_pty::PtySize { rows: 24, cols: 80, pixel_width: 0, pixel_height: 0 };
        let pair = portable_pty::native_pty_system().openpty(size).unwrap();
        let mut builder = portable_pty::CommandBuilder::new("/bin/sh");
        builder.args(["-c", command]);
        builder.env("TERM", "xterm-256color");
        let child = pair.slave.spawn_command(builder).unwrap();
        drop(pair.slave);
        let reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let mut pty = DirectPty { reader, writer, child, _master: pair.master, buf: vec![0; TERM_CHUNK] };
        let mut output = Vec::new();
        while !is_ready(&output) {
            output.extend_from_slice(pty.read());
        }
        pty
    }

    fn read(&mut self) -> &[u8] {
        let n = self.reader.read(&mut self.buf).unwrap();
        assert!(n > 0, "the program ended early");
        &self.buf[..n]
    }

    fn type_in(&mut self, data: &[u8]) {
        self.writer.write_all(data).and_then(|()| self.writer.flush()).unwrap();
    }

    fn keystrokes_us(plan: &Plan) -> Vec<f64> {
        let mut pty = DirectPty::open(ECHO_COMMAND);
        let mut samples = Vec::with_capacity(plan.keys);
        for (i, key) in keys(plan.keys).enumerate() {
            let started = Instant::now();
            pty.type_in(&[key]);
            assert_eq!(pty.read(), [key], "the program echoes the key it was sent");
            if i >= WARM_UP {
                samples.push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
        samples
    }

    /// The bytes, the seconds and the reads that returned them.
    fn flood(plan: &Plan) -> (u64, f64, u64) {
        let mut pty = DirectPty::open(&flood_command(plan.flood));
        let started = Instant::now();
        pty.type_in(b"\r");
        let (mut bytes, mut reads, mut tail) = (0u64, 0u64, Vec::new());
        while !contains(&tail, END_MARK) {
            let data = pty.read();
            bytes += data.len() as u64;
            reads += 1;
            keep_tail(&mut tail, data);
        }
        (bytes, started.elapsed().as_secs_f64(), reads)
    }
}

impl Drop for DirectPty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One flood: the bytes that arrived, the seconds it took, the pieces they came in (frames, or
/// the floor's reads), and the CPU seconds it cost each process counted (the agent and the relay;
/// the reader itself for the floor).
struct Flood {
    bytes: u64,
    seconds: f64,
    pieces: u64,
    cpu: Vec<f64>,
}

/// CPU seconds used so far by each of `pids`.
fn cpu_seconds(pids: &[u32]) -> Vec<f64> {
    pids.iter().map(|pid| crate::voice::cpu_time(*pid).as_secs_f64()).collect()
}

/// Runs `flood` and counts the CPU `pids` spent on it.
fn counted(pids: &[u32], flood: impl FnOnce() -> (u64, f64, u64)) -> Flood {
    let before = cpu_seconds(pids);
    let (bytes, seconds, pieces) = flood();
    let cpu = cpu_seconds(pids).iter().zip(before).map(|(after, before)| after - before).collect();
    Flood { bytes, seconds, pieces, cpu }
}

/// Keystroke samples and floods of one path.
#[derive(Default)]
struct Figures {
    keys: Vec<f64>,
    floods: Vec<Flood>,
}

const MIB: f64 = (1 << 20) as f64;

impl Figures {
    fn latency(&mut self) -> String {
        let (p50, p99) = percentiles(&mut self.keys);
        format!("p50 {p50:.0} µs, p99 {p99:.0} µs")
    }

    /// The median flood's rate, with the bytes one run moved and the median size of the pieces
    /// (`piece`: frames, or reads) they came in.
    fn throughput(&self, piece: &str) -> String {
        let bytes = self.floods.first().map_or(0, |flood| flood.bytes);
        let mut rates: Vec<f64> = self.floods.iter().map(|flood| flood.bytes as f64 / MIB / flood.seconds).collect();
        let (median, _) = percentiles(&mut rates);
        let mut sizes: Vec<f64> =
            self.floods.iter().map(|flood| flood.bytes as f64 / 1024.0 / flood.pieces.max(1) as f64).collect();
        let (size, _) = percentiles(&mut sizes);
        let runs = self.floods.len();
        format!("{median:.0} MiB/s ({:.1} MiB, median of {runs}; {size:.1} KiB a {piece})", bytes as f64 / MIB)
    }

    /// Median CPU milliseconds per MiB of output of the `which`-th process counted.
    fn cpu_per_mib(&self, which: usize) -> f64 {
        let mut costs: Vec<f64> =
            self.floods.iter().map(|flood| flood.cpu[which] * 1e3 / (flood.bytes as f64 / MIB)).collect();
        percentiles(&mut costs).0
    }
}

pub fn run(report: &mut Report, measuring: bool) {
    let plan = if measuring {
        Plan { keys: 500, flood: 64 << 20, repeats: 3 }
    } else {
        Plan { keys: 5, flood: 256 << 10, repeats: 1 }
    };
    let relay = Relay::start(&[], &[]);
    let agent = start_agent(&[], &["--relay", &format!("http://{}", relay.addr)], &[], &["started", "relay_connected"]);
    let (agent_pid, relay_pid) = (agent.child.id(), relay.child.id());
    let mut paths = [Figures::default(), Figures::default(), Figures::default()];
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for _ in 0..plan.repeats {
        let relayed = format!("ws://{}/ws?code={}", relay.addr, agent.code);
        let loopback = format!("ws://127.0.0.1:{}/", agent.port);
        for (figures, url) in paths.iter_mut().zip([relayed, loopback]) {
            let mut phone = runtime.block_on(Phone::dial(&url, &agent.token));
            figures.keys.extend(runtime.block_on(phone.keystrokes_us(&plan)));
            let flood = counted(&[agent_pid, relay_pid], || runtime.block_on(phone.flood(&plan)));
            figures.floods.push(flood);
        }
        paths[2].keys.extend(DirectPty::keystrokes_us(&plan));
        paths[2].floods.push(counted(&[std::process::id()], || DirectPty::flood(&plan)));
    }
    let [relayed, loopback, direct] = &mut paths;
    report.add(AREA, "keystroke → echo through the relay (sealed)", relayed.latency(), "");
    report.add(AREA, "keystroke → echo on the loopback socket (sealed)", loopback.latency(), "");
    report.add(AREA, "keystroke → echo, floor: the same PTY read directly", direct.latency(), "");
    report.add(AREA, "output through the relay, acknowledged per frame", relayed.throughput("frame"), "");
    report.add(AREA, "output on the loopback socket, acknowledged per frame", loopback.throughput("frame"), "");
    report.add(AREA, "output, floor: the same PTY read directly", direct.throughput("read"), "");
    let cpu = format!(
        "agent {:.1} ms / relay {:.1} ms through the relay; agent {:.1} ms on loopback; floor reader {:.1} ms",
        relayed.cpu_per_mib(0),
        relayed.cpu_per_mib(1),
        loopback.cpu_per_mib(0),
        direct.cpu_per_mib(0),
    );
    report.add(AREA, "CPU per MiB of output", cpu, "");
}
