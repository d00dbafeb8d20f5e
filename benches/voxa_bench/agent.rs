//! The agent as a separate process: idle memory, loopback tool round trips, `run_command` overhead
//! against spawning the program directly, the same call through the relay, and reconnect time
//! after a relay restart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use voxa::net::dial::{ClientSocket, DialOptions};

use crate::child::{say_hello, start_agent, Agent};
use crate::report::{percentiles, Report};

pub(crate) fn rss_kib(pid: u32) -> u64 {
    crate::report::status_kib(pid, "VmRSS")
}

async fn local_client(agent: &Agent) -> ClientSocket {
    let mut socket =
        voxa::net::dial::connect(&format!("ws://127.0.0.1:{}/", agent.port), &DialOptions::default()).await.unwrap();
    say_hello(&mut socket, &agent.token).await;
    socket
}

async fn phone(relay: std::net::SocketAddr, agent: &Agent) -> ClientSocket {
    let url = format!("ws://{relay}/ws?code={}", agent.code);
    let mut socket = voxa::net::dial::connect(&url, &DialOptions::default()).await.unwrap();
    say_hello(&mut socket, &agent.token).await;
    socket
}

async fn wait_for(socket: &mut ClientSocket, matches: impl Fn(&Value) -> bool) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.unwrap().unwrap().unwrap();
        if let Message::Text(text) = frame {
            // A relay notice is U+0001 and a JSON object.
            let value: Value = serde_json::from_str(text.strip_prefix('\u{1}').unwrap_or(&text)).unwrap();
            if matches(&value) {
                return value;
            }
        }
    }
}

/// Round trips of one call, in microseconds.
async fn round_trips(socket: &mut ClientSocket, name: &str, args: Value, count: usize) -> Vec<f64> {
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let id = format!("b{i}");
        let started = Instant::now();
        let call = json!({"type":"tool_call","id": id,"name": name,"args": args});
        socket.send(Message::text(call.to_string())).await.unwrap();
        let result = wait_for(socket, |v| v["type"] == "tool_result" && v["id"] == id.as_str()).await;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
        assert_eq!(result["ok"], true, "{result}");
    }
    samples
}

fn spawn_directly(program: &Path, count: usize) -> Vec<f64> {
    (0..count)
        .map(|_| {
            let started = Instant::now();
            let status = Command::new(program).status().unwrap();
            assert!(status.success());
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

fn fmt_us((p50, p99): (f64, f64)) -> String {
    format!("p50 {p50:.0} µs, p99 {p99:.0} µs")
}

async fn start_relay(listener: TcpListener) -> CancellationToken {
    let stop = CancellationToken::new();
    let shutdown = stop.clone().cancelled_owned();
    tokio::spawn(async move {
        let _ = voxa::relay::run(listener, voxa::relay::RelayConfig::default(), shutdown).await;
    });
    stop
}

pub fn run(report: &mut Report, measuring: bool) {
    let calls = if measuring { 500 } else { 5 };
    let spawns = if measuring { 200 } else { 3 };
    let restarts = if measuring { 3 } else { 1 };
    let healthy_wait = if measuring { Duration::from_secs(11) } else { Duration::ZERO };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_addr = listener.local_addr().unwrap();
        let mut relay = start_relay(listener).await;
        let agent = tokio::task::spawn_blocking(move || {
            start_agent(&[], &["--relay", &format!("http://{relay_addr}")], &[], &["started", "relay_connected"])
        })
        .await
        .unwrap();

        tokio::time::sleep(Duration::from_secs(2)).await;
        report.add(
            "agent",
            "idle RSS (connected to relay, no phone)",
            format!("{:.1} MB", rss_kib(agent.child.id()) as f64 / 1024.0),
            "≤ 10 MB",
        );

        let mut local = local_client(&agent).await;
        round_trips(&mut local, "list_dir", json!({}), calls / 10 + 1).await; // warm-up
        let mut trivial = round_trips(&mut local, "list_dir", json!({}), calls).await;
        report.add(
            "loopback",
            "tool call round trip (list_dir, empty dir)",
            fmt_us(percentiles(&mut trivial)),
            "p50 < 200 µs",
        );
        // File tools: every operation from the workspace handle, a write is temp file + fsync + rename.
        let small = json!({"path": "bench/small.txt", "content": "x".repeat(1024), "create_dirs": true});
        let mut writes = round_trips(&mut local, "write_file", small, calls).await;
        report.add("loopback", "tool call round trip (write_file, 1 KiB, fsync)", fmt_us(percentiles(&mut writes)), "");
        let mut reads = round_trips(&mut local, "read_file", json!({"path": "bench/small.txt"}), calls).await;
        report.add("loopback", "tool call round trip (read_file, 1 KiB)", fmt_us(percentiles(&mut reads)), "");

        let true_path = PathBuf::from(if Path::new("/usr/bin/true").exists() { "/usr/bin/true" } else { "/bin/true" });
        let mut direct = spawn_directly(&true_path, spawns);
        let mut via_tool =
            round_trips(&mut local, "run_command", json!({"command": true_path.display().to_string()}), spawns).await;
        let (direct_p50, _) = percentiles(&mut direct);
        let (tool_p50, tool_p99) = percentiles(&mut via_tool);
        report.add("loopback", "spawn `true` directly", fmt_us(percentiles(&mut direct)), "baseline");
        report.add("loopback", "run_command `true` (PTY)", fmt_us((tool_p50, tool_p99)), "");
        report.add(
            "loopback",
            "run_command added over direct spawn (p50)",
            format!("{:.2} ms", (tool_p50 - direct_p50) / 1000.0),
            "< 3 ms",
        );

        let mut through_relay = phone(relay_addr, &agent).await;
        round_trips(&mut through_relay, "list_dir", json!({}), calls / 10 + 1).await;
        let mut relayed = round_trips(&mut through_relay, "list_dir", json!({}), calls).await;
        report.add("relay", "tool call round trip via relay (list_dir)", fmt_us(percentiles(&mut relayed)), "");
        drop(through_relay);

        // Reconnect: stop the relay, start it again on the same port, time until the phone sees the agent.
        let mut reconnects = Vec::new();
        for _ in 0..restarts {
            relay.cancel();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let listener = TcpListener::bind(relay_addr).await.unwrap();
            let restarted = Instant::now();
            relay = start_relay(listener).await;
            let url = format!("ws://{relay_addr}/ws?code={}", agent.code);
            let mut socket = voxa::net::dial::connect(&url, &DialOptions::default()).await.unwrap();
            wait_for(&mut socket, |v| v["type"] == "presence" && v["state"] == "joined").await;
            reconnects.push(restarted.elapsed().as_secs_f64() * 1000.0);
            // Let the connection prove healthy so the next restart starts from a reset backoff.
            tokio::time::sleep(healthy_wait).await;
        }
        let (p50, _) = percentiles(&mut reconnects);
        let max = reconnects.iter().cloned().fold(0.0, f64::max);
        report.add(
            "agent",
            format!("back after relay restart ({restarts} restarts)"),
            format!("median {p50:.0} ms, max {max:.0} ms"),
            "≤ 1 s backoff + connect",
        );
        relay.cancel();
    });
}
