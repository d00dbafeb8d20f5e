//! Strangers on the loopback socket: sockets that send a huge first frame and sockets that upgrade
//! and then say nothing, all at once, while the owner keeps connecting and calling. Measures the
//! agent's peak memory and the owner's time to a result.

use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::DialOptions;

use crate::agent::rss_kib;
use crate::child::{say_hello, start_agent, Agent};
use crate::report::{percentiles, Report};

/// Flood sizes: (large first frames, bytes each, idle sockets).
fn sizes(measuring: bool) -> (usize, usize, usize) {
    if measuring {
        (60, 16 << 20, 1100)
    } else {
        (4, 1 << 20, 40)
    }
}

/// The bench itself holds every flooding socket: make room for them.
fn raise_own_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
}

/// A TCP connection that completed the WebSocket upgrade and has not said hello.
async fn upgraded(port: u16) -> Option<TcpStream> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    head.starts_with(b"HTTP/1.1 101").then_some(tcp)
}

/// Sends one binary frame of `len` zero bytes (mask key zero), as fast as the agent reads it;
/// returns how many payload bytes went out before the agent closed the socket.
async fn huge_first_frame(port: u16, len: usize) -> usize {
    let Some(mut tcp) = upgraded(port).await else { return 0 };
    let mut header = vec![0x82u8, 0x80 | 127];
    header.extend_from_slice(&(len as u64).to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]);
    if tcp.write_all(&header).await.is_err() {
        return 0;
    }
    let chunk = vec![0u8; 64 << 10];
    let mut sent = 0;
    while sent < len {
        let n = chunk.len().min(len - sent);
        match tokio::time::timeout(Duration::from_secs(10), tcp.write_all(&chunk[..n])).await {
            Ok(Ok(())) => sent += n,
            _ => break,
        }
    }
    sent
}

/// Connect, hello (with the proof check) and one call: what the owner waits for, in ms.
async fn owner_call(agent: &Agent) -> f64 {
    let started = Instant::now();
    let url = format!("ws://127.0.0.1:{}/", agent.port);
    let mut socket = voxa::net::dial::connect(&url, &DialOptions::default()).await.unwrap();
    say_hello(&mut socket, &agent.token).await;
    let call = json!({"type":"tool_call","id":"owner","name":"list_dir"});
    socket.send(Message::text(call.to_string())).await.unwrap();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), futures_util::StreamExt::next(&mut socket))
            .await
            .expect("the owner's call is answered during the flood")
            .unwrap()
            .unwrap();
        if let Message::Text(text) = frame {
            if text.contains("\"tool_result\"") {
                break;
            }
        }
    }
    started.elapsed().as_secs_f64() * 1000.0
}

pub fn run(report: &mut Report, measuring: bool) {
    let (big, frame_len, idle) = sizes(measuring);
    raise_own_fd_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let agent =
            tokio::task::spawn_blocking(|| start_agent(&[], &["--relay", "http://127.0.0.1:1"], &[], &["started"]))
                .await
                .unwrap();
        let pid = agent.child.id();
        let before = rss_kib(pid);
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
        let sampling = tokio::spawn({
            let peak = peak.clone();
            async move {
                loop {
                    peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        let port = agent.port;
        let mut quiet = Vec::new();
        for _ in 0..idle {
            if let Some(socket) = upgraded(port).await {
                quiet.push(socket);
            }
        }
        let senders: Vec<_> = (0..big).map(|_| tokio::spawn(huge_first_frame(port, frame_len))).collect();
        let mut owner = Vec::new();
        for _ in 0..10 {
            owner.push(owner_call(&agent).await);
        }
        let mut accepted = 0;
        for sender in senders {
            accepted = accepted.max(sender.await.unwrap());
        }
        sampling.abort();
        let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
        drop(quiet);
        let mib = |kib: u64| kib as f64 / 1024.0;
        report.add(
            "loopback",
            format!(
                "pre-hello flood: {big} × {} MiB first frames + {idle} idle upgraded sockets; agent RSS before / peak",
                frame_len >> 20
            ),
            format!(
                "{:.1} / {:.1} MiB (a sender got ≤ {:.1} MiB into socket buffers before its close)",
                mib(before),
                mib(peak),
                mib(accepted.div_ceil(1024) as u64)
            ),
            "peak ≤ 24 MiB",
        );
        let (p50, _) = percentiles(&mut owner);
        let max = owner.iter().cloned().fold(0.0, f64::max);
        report.add(
            "loopback",
            "owner's connect + hello + call during that flood (10 calls)",
            format!("median {p50:.1} ms, max {max:.1} ms"),
            "answered",
        );
    });
}
