//! The floor for the relay CPU bench: a byte forwarder that pairs sockets by code like the relay
//! but parses no WebSocket frame. It answers each upgrade, sends the presence notice the load
//! generator waits for (the relay's form, docs/PROTOCOL.md "Relay"), then copies bytes between the
//! two sockets of a pair (client frames stay masked; the generator masks with zeros and skips the
//! key; no relay header is added, so the agent side sees the phone's frames themselves). Whatever it costs per round trip is
//! what loopback TCP, the wake-ups and the runtime cost on this machine, below any relay.
//!
//! The bench binary runs it in a child process of its own: `voxa_bench --floor-relay`, which
//! prints `{"listen":"127.0.0.1:PORT"}` once listening.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use voxa::protocol::relay::{PeerRole, PeerState, Presence};

/// The argument that makes the bench binary the floor forwarder.
pub const ARG: &str = "--floor-relay";

/// Longest request head the forwarder reads.
const MAX_HEAD: usize = 4096;

type Waiting = Arc<Mutex<HashMap<String, TcpStream>>>;

/// Runs the forwarder on one single-threaded runtime until killed.
pub fn serve() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        println!("{{\"listen\":\"{}\"}}", listener.local_addr()?);
        let waiting = Waiting::default();
        loop {
            let (tcp, _) = listener.accept().await?;
            let waiting = Arc::clone(&waiting);
            tokio::spawn(async move {
                if let Err(err) = pair(tcp, waiting).await {
                    eprintln!("floor relay: {err:#}");
                }
            });
        }
    })
}

/// Answers the upgrade, then either waits for the other side of the code or forwards both ways.
async fn pair(mut tcp: TcpStream, waiting: Waiting) -> anyhow::Result<()> {
    tcp.set_nodelay(true)?;
    let code = read_upgrade(&mut tcp).await?;
    tcp.write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n").await?;
    let first = {
        let mut waiting = waiting.lock().unwrap_or_else(|e| e.into_inner());
        match waiting.remove(&code) {
            Some(first) => first,
            None => {
                waiting.insert(code, tcp);
                return Ok(());
            }
        }
    };
    let mut first = first;
    let notice = Presence::new(PeerRole::Agent, PeerState::Joined).to_text();
    let mut frame = vec![0x81, notice.len() as u8];
    frame.extend_from_slice(notice.as_bytes());
    first.write_all(&frame).await?;
    tcp.write_all(&frame).await?;
    // Both sockets now stay in this task: the bytes cross without a queue or a wake-up between.
    let _ = tokio::io::copy_bidirectional(&mut first, &mut tcp).await;
    Ok(())
}

/// Reads a request head and returns its `code` query value.
async fn read_upgrade(tcp: &mut TcpStream) -> anyhow::Result<String> {
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    // One byte at a time, so nothing after the head (the first frames) is read here.
    while !head.ends_with(b"\r\n\r\n") {
        anyhow::ensure!(tcp.read(&mut byte).await? == 1 && head.len() < MAX_HEAD, "no request head");
        head.push(byte[0]);
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = std::str::from_utf8(line)?;
    let code = line
        .split_once("code=")
        .map(|(_, rest)| rest.split([' ', '&']).next().unwrap_or_default())
        .ok_or_else(|| anyhow::anyhow!("no code in {line:?}"))?;
    Ok(code.to_owned())
}
