//! Relay figures: round-trip latency through the relay against a direct WebSocket echo, frames
//! per second with 1, 100 and 1000 paired sessions, and resident memory per idle paired session.
//! The relay is the built `voxa relay` binary in its own process, so its memory is its own.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

use voxa::protocol::relay::{self as relay_framing, Kind, PeerId, HEADER_LEN};

use crate::report::{percentiles, Report};

const AREA: &str = "relay";
const FRAME_SIZES: [usize; 2] = [32, 640];
const ROUND_TRIPS: usize = 3000;
const SESSION_COUNTS: [usize; 3] = [1, 100, 1000];
const IDLE_SESSIONS: usize = 1000;
const WARM_UP: Duration = Duration::from_millis(300);
const MEASURE: Duration = Duration::from_millis(1500);

pub fn run(report: &mut Report, measuring: bool) {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("relay bench skipped: no runtime: {err}");
            return;
        }
    };
    let outcome = if measuring { runtime.block_on(measure(report)) } else { runtime.block_on(smoke(report)) };
    if let Err(err) = outcome {
        eprintln!("relay bench failed: {err:#}");
        std::process::exit(1);
    }
}

/// Without `--bench`: one paired session and a few round trips, to prove the bench still works.
async fn smoke(report: &mut Report) -> anyhow::Result<()> {
    let mut relay = RelayProcess::spawn()?;
    let result = async {
        let laptop = ws_client(relay.addr, &format!("/agent?code={}", code(0))).await?;
        let mut phone = ws_client(relay.addr, &format!("/ws?code={}", code(0))).await?;
        tokio::spawn(echo(laptop));
        while !matches!(phone.next().await, Some(Ok(Message::Text(_)))) {}
        let mut samples = round_trips(&mut phone, 32, 10).await?;
        let (p50, _) = crate::report::percentiles(&mut samples);
        report.add(AREA, "smoke: round trip through the relay (10 samples)", format!("{p50:.0} µs"), "");
        Ok(())
    }
    .await;
    relay.stop();
    result
}

async fn measure(report: &mut Report) -> anyhow::Result<()> {
    // A fresh relay for memory, so nothing freed by earlier traffic is reused and hides the cost.
    let mut relay = RelayProcess::spawn()?;
    let result = idle_memory(report, &relay).await;
    relay.stop();
    result?;

    let mut relay = RelayProcess::spawn()?;
    let result = half_sent_flood(report, &relay).await;
    relay.stop();
    result?;
    let mut relay = RelayProcess::spawn()?;
    let result = unread_flood(report, &relay).await;
    relay.stop();
    result?;

    let mut relay = RelayProcess::spawn()?;
    let result = async {
        latency(report, relay.addr).await?;
        let before = relay.rss()?;
        throughput(report, relay.addr).await?;
        // Give the relay a moment to close the load's sockets.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = relay.rss()?;
        // The heaviest load once more: memory freed by the first pass is reused, not added to.
        frames_per_second(relay.addr, 1000, 640).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = relay.rss()?;
        report.add(
            AREA,
            "relay RSS: before load / after it (sockets closed) / after the 1000-session load again",
            format!("{:.1} / {:.1} / {:.1} MiB", mib(before), mib(after), mib(again)),
            "flat: peak set by queue limits",
        );
        Ok(())
    }
    .await;
    relay.stop();
    result
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// A relay in its own process, its address read from the `listen` field of its first line.
pub struct RelayProcess {
    pub child: Child,
    pub addr: SocketAddr,
}

impl RelayProcess {
    /// `voxa relay --listen 127.0.0.1:0 --json`.
    fn spawn() -> anyhow::Result<Self> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_voxa"));
        command.args(["relay", "--listen", "127.0.0.1:0", "--json", "--max-connections-per-ip", "0"]);
        Self::start(command)
    }

    /// Starts a relay command that prints `{"listen":"<addr>",…}` first.
    pub fn start(mut command: Command) -> anyhow::Result<Self> {
        let mut child = command
            .env_remove("VOXA_RELAY_TOKEN")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let event: serde_json::Value = serde_json::from_str(&line)?;
        let addr = event["listen"].as_str().ok_or_else(|| anyhow::anyhow!("no address in {line:?}"))?.parse()?;
        Ok(RelayProcess { child, addr })
    }

    /// Resident memory in bytes.
    fn rss(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or_else(|| anyhow::anyhow!("no VmRSS"))?;
        Ok(kib * 1024)
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

fn code(n: usize) -> String {
    format!("{:032x}", 0x5eed_0000_0000_0000_0000_0000_0000_0000u128 + n as u128)
}

// ---- latency ---------------------------------------------------------------------------------

type Client = tokio_tungstenite::WebSocketStream<TcpStream>;

async fn ws_client(addr: SocketAddr, path: &str) -> anyhow::Result<Client> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let mut request = format!("ws://{addr}{path}").into_client_request()?;
    if is_agent(path) {
        request.headers_mut().insert("sec-websocket-protocol", relay_framing::SUBPROTOCOL.parse()?);
    }
    let (ws, _) = tokio_tungstenite::client_async(request, tcp).await?;
    Ok(ws)
}

/// The agent's side of a relay speaks the relay framing (docs/PROTOCOL.md, "Relay").
fn is_agent(path: &str) -> bool {
    path.starts_with("/agent")
}

/// Answers every phone's frame with itself, as the laptop side of the relay path: each message
/// carries the relay's header (kind, peer), which goes back as it came.
async fn echo(mut ws: Client) {
    while let Some(Ok(message)) = ws.next().await {
        let Message::Binary(bytes) = &message else { continue };
        let data = relay_framing::split(bytes).is_some_and(|(kind, _, _)| matches!(kind, Kind::Text | Kind::Binary));
        if data && ws.send(message).await.is_err() {
            return;
        }
    }
}

/// A direct WebSocket echo server on loopback: the baseline.
async fn direct_echo_server() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                if let Ok(ws) = tokio_tungstenite::accept_async(tcp).await {
                    echo_server_side(ws).await;
                }
            });
        }
    });
    Ok(addr)
}

async fn echo_server_side(mut ws: tokio_tungstenite::WebSocketStream<TcpStream>) {
    while let Some(Ok(message)) = ws.next().await {
        if message.is_binary() && ws.send(message).await.is_err() {
            return;
        }
    }
}

/// Round trips in microseconds: send one frame, wait for it to come back, repeat.
async fn round_trips(ws: &mut Client, size: usize, count: usize) -> anyhow::Result<Vec<f64>> {
    let payload = vec![0xA5u8; size];
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        ws.send(Message::binary(payload.clone())).await?;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), ws.next()).await? {
                Some(Ok(Message::Binary(back))) if back.len() == size => break,
                Some(Ok(_)) => continue,
                other => anyhow::bail!("echo lost: {other:?}"),
            }
        }
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(samples)
}

async fn latency(report: &mut Report, relay: SocketAddr) -> anyhow::Result<()> {
    let direct_addr = direct_echo_server().await?;
    let mut direct = ws_client(direct_addr, "/").await?;

    let laptop = ws_client(relay, &format!("/agent?code={}", code(0))).await?;
    let mut phone = ws_client(relay, &format!("/ws?code={}", code(0))).await?;
    tokio::spawn(echo(laptop));
    // Wait for the pairing notice before timing anything.
    while !matches!(phone.next().await, Some(Ok(Message::Text(_)))) {}

    for size in FRAME_SIZES {
        round_trips(&mut direct, size, ROUND_TRIPS / 5).await?;
        round_trips(&mut phone, size, ROUND_TRIPS / 5).await?;
        let mut direct_rtt = round_trips(&mut direct, size, ROUND_TRIPS).await?;
        let mut relay_rtt = round_trips(&mut phone, size, ROUND_TRIPS).await?;
        let (direct_p50, direct_p99) = percentiles(&mut direct_rtt);
        let (relay_p50, relay_p99) = percentiles(&mut relay_rtt);
        report.add(
            AREA,
            format!("round trip, {size} B frames: direct echo / through relay (p50, p99)"),
            format!("{direct_p50:.0} / {relay_p50:.0} µs, {direct_p99:.0} / {relay_p99:.0} µs"),
            "",
        );
        report.add(
            AREA,
            format!("added round-trip latency, {size} B frames (p50, p99)"),
            format!("{:.0} µs, {:.0} µs", relay_p50 - direct_p50, relay_p99 - direct_p99),
            "< 1 ms p99",
        );
    }
    let _ = direct.close(None).await;
    let _ = phone.close(None).await;
    Ok(())
}

// ---- throughput ------------------------------------------------------------------------------

/// A raw client: the upgrade by hand, then bytes. Lighter than a WebSocket library, so the
/// figures measure the relay rather than the clients that share its cores.
pub async fn raw_socket(addr: SocketAddr, path: &str) -> anyhow::Result<TcpStream> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let protocol = if is_agent(path) {
        format!("Sec-WebSocket-Protocol: {}\r\n", relay_framing::SUBPROTOCOL)
    } else {
        String::new()
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{protocol}\r\n"
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut byte).await? == 0 || head.len() > 1024 {
            anyhow::bail!("no upgrade answer");
        }
        head.push(byte[0]);
    }
    anyhow::ensure!(head.starts_with(b"HTTP/1.1 101"), "upgrade refused: {}", String::from_utf8_lossy(&head));
    Ok(tcp)
}

/// `count` masked binary frames an agent sends phone `peer`, each `size` bytes of payload after
/// the relay's header, back to back.
fn masked_batch(peer: PeerId, size: usize, count: usize) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let len = HEADER_LEN + size;
    let mut frame = vec![0x82];
    if len < 126 {
        frame.push(0x80 | len as u8);
    } else {
        frame.push(0x80 | 126);
        frame.extend_from_slice(&(len as u16).to_be_bytes());
    }
    frame.extend_from_slice(&mask);
    let mut payload = relay_framing::header(Kind::Binary, peer).to_vec();
    payload.resize(len, 0x5A);
    frame.extend(payload.iter().enumerate().map(|(i, byte)| byte ^ mask[i % 4]));
    frame.repeat(count)
}

/// The peer id of the phone that just joined, from the relay's JOINED message on an agent's raw
/// socket (an unmasked binary frame of just the header).
async fn joined_peer(agent: &mut TcpStream) -> anyhow::Result<PeerId> {
    let mut frame = [0u8; 2 + HEADER_LEN];
    tokio::time::timeout(Duration::from_secs(10), agent.read_exact(&mut frame)).await??;
    match relay_framing::split(&frame[2..]) {
        Some((Kind::Joined, peer, _)) if frame[..2] == [0x82, HEADER_LEN as u8] => Ok(peer),
        _ => anyhow::bail!("expected JOINED on the agent's socket, got {frame:?}"),
    }
}

/// Counts the binary frames a relay writes to `tcp`.
async fn count_frames(mut tcp: TcpStream, counter: Arc<AtomicU64>) {
    let mut buf = vec![0u8; 64 << 10];
    let (mut filled, mut skip) = (0usize, 0usize);
    loop {
        match tcp.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        let (mut at, mut frames) = (0usize, 0u64);
        loop {
            let take = skip.min(filled - at);
            at += take;
            skip -= take;
            if skip > 0 || filled - at < 2 {
                break;
            }
            let (len, header) = match buf[at + 1] & 0x7F {
                126 if filled - at >= 4 => (u16::from_be_bytes([buf[at + 2], buf[at + 3]]) as usize, 4),
                127 if filled - at >= 10 => {
                    let mut raw = [0u8; 8];
                    raw.copy_from_slice(&buf[at + 2..at + 10]);
                    (u64::from_be_bytes(raw) as usize, 10)
                }
                126 | 127 => break,
                short => (short as usize, 2),
            };
            if buf[at] & 0x0F == 0x2 {
                frames += 1;
            }
            at += header;
            skip = len;
        }
        counter.fetch_add(frames, Ordering::Relaxed);
        buf.copy_within(at..filled, 0);
        filled -= at;
    }
}

async fn throughput(report: &mut Report, relay: SocketAddr) -> anyhow::Result<()> {
    for size in FRAME_SIZES {
        for sessions in SESSION_COUNTS {
            let fps = frames_per_second(relay, sessions, size).await?;
            report.add(
                AREA,
                format!("frames/s through the relay, {sessions} paired session(s), {size} B frames"),
                format!("{:.0}k", fps / 1000.0),
                "",
            );
        }
    }
    Ok(())
}

async fn frames_per_second(relay: SocketAddr, sessions: usize, size: usize) -> anyhow::Result<f64> {
    let counter = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Senders start together once every session is paired, so setup does not compete with load.
    let (start, started_rx) = tokio::sync::watch::channel(false);
    let mut tasks = JoinSet::new();
    for n in 0..sessions {
        let code = code(1000 + n);
        let mut laptop = raw_socket(relay, &format!("/agent?code={code}")).await?;
        let phone = raw_socket(relay, &format!("/ws?code={code}")).await?;
        let batch = masked_batch(joined_peer(&mut laptop).await?, size, (16 << 10) / (size + 8 + HEADER_LEN));
        tasks.spawn(count_frames(phone, Arc::clone(&counter)));
        let (stop, mut go) = (Arc::clone(&stop), started_rx.clone());
        tasks.spawn(async move {
            let mut laptop = laptop;
            if go.wait_for(|go| *go).await.is_err() {
                return;
            }
            while !stop.load(Ordering::Relaxed) {
                if laptop.write_all(&batch).await.is_err() {
                    return;
                }
            }
        });
    }
    let _ = start.send(true);
    tokio::time::sleep(WARM_UP).await;
    let (start_count, started) = (counter.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(MEASURE).await;
    let frames = counter.load(Ordering::Relaxed) - start_count;
    let fps = frames as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    Ok(fps)
}

// ---- memory ----------------------------------------------------------------------------------

async fn idle_memory(report: &mut Report, relay: &RelayProcess) -> anyhow::Result<()> {
    let before = relay.rss()?;
    let mut sockets = Vec::with_capacity(IDLE_SESSIONS * 2);
    for n in 0..IDLE_SESSIONS {
        let code = code(100_000 + n);
        let laptop = raw_socket(relay.addr, &format!("/agent?code={code}")).await?;
        let mut phone = raw_socket(relay.addr, &format!("/ws?code={code}")).await?;
        // The `joined` notice proves the relay holds both sockets.
        let mut notice = [0u8; 64];
        anyhow::ensure!(phone.read(&mut notice).await? > 0, "no notice");
        sockets.push(laptop);
        sockets.push(phone);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = relay.rss()?;
    let per_session = after.saturating_sub(before) as f64 / IDLE_SESSIONS as f64;
    report.add(
        AREA,
        format!("resident memory per idle paired session ({IDLE_SESSIONS} pairs, both sockets)"),
        format!("{:.1} KiB", per_session / 1024.0),
        "≤ 32 KiB",
    );
    report.add(
        AREA,
        format!("relay RSS: started / with {IDLE_SESSIONS} idle pairs"),
        format!("{:.1} / {:.1} MiB", mib(before), mib(after)),
        "",
    );
    drop(sockets);
    Ok(())
}

// ---- floods ----------------------------------------------------------------------------------

/// Memory budget of a relay started with defaults.
const BUDGET_MIB: f64 = 256.0;
/// What a relay may hold beyond its budget: code, runtime, socket state and allocator slack.
const FLOOD_SLACK_MIB: f64 = 64.0;

/// The header of a masked binary frame of `len` bytes with a zero mask.
fn binary_header(len: usize) -> Vec<u8> {
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(len as u64).to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]);
    header
}

/// 100 sockets each send 15 MiB of a 16 MiB message and stop: without a budget the relay would
/// hold 1.5 GB.
async fn half_sent_flood(report: &mut Report, relay: &RelayProcess) -> anyhow::Result<()> {
    const SOCKETS: usize = 100;
    let started = relay.rss()?;
    let chunk = Arc::new(vec![7u8; 1 << 20]);
    let mut floods = JoinSet::new();
    for n in 0..SOCKETS {
        let mut socket = raw_socket(relay.addr, &format!("/agent?code={}", code(200_000 + n))).await?;
        let chunk = Arc::clone(&chunk);
        floods.spawn(async move {
            socket.write_all(&binary_header(16 << 20)).await?;
            for _ in 0..15 {
                if socket.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            anyhow::Ok(socket)
        });
    }
    let mut sockets = Vec::new();
    while let Some(done) = floods.join_next().await {
        if let Ok(Ok(socket)) = done {
            sockets.push(socket);
        }
    }
    let peak = relay.rss()?;
    report.add(
        AREA,
        format!("relay RSS: {SOCKETS} sockets each holding 15 of a 16 MiB message (1.5 GB sent)"),
        format!("{:.0} MiB (from {:.1})", mib(peak), mib(started)),
        "≤ budget 256 + 64 MiB",
    );
    anyhow::ensure!(mib(peak) <= BUDGET_MIB + FLOOD_SLACK_MIB, "the relay passed its memory bound");
    drop(sockets);
    Ok(())
}

/// Agents flood phones that read nothing: one pair alone, then enough pairs to pass the budget.
async fn unread_flood(report: &mut Report, relay: &RelayProcess) -> anyhow::Result<()> {
    const PAIRS: usize = 24;
    const FLOOD_FOR: Duration = Duration::from_secs(3);
    let mut held = Vec::new();
    let mut floods = JoinSet::new();
    let mut one_pair = 0;
    for n in 0..PAIRS {
        let code = code(300_000 + n);
        let mut laptop = raw_socket(relay.addr, &format!("/agent?code={code}")).await?;
        let phone = raw_socket(relay.addr, &format!("/ws?code={code}")).await?;
        held.push(phone);
        let frame = masked_batch(joined_peer(&mut laptop).await?, 60_000, 16);
        floods.spawn(async move {
            let mut laptop = laptop;
            let until = Instant::now() + FLOOD_FOR;
            // Writes block once the relay stops reading; the deadline ends the flood either way.
            let _ =
                tokio::time::timeout_at(until.into(), async { while laptop.write_all(&frame).await.is_ok() {} }).await;
            laptop
        });
        if n == 0 {
            let before = relay.rss()?;
            let laptop = floods.join_next().await.ok_or_else(|| anyhow::anyhow!("flood lost"))??;
            one_pair = relay.rss()?.saturating_sub(before);
            held.push(laptop);
        }
    }
    let laptops = floods.join_all().await;
    let peak = relay.rss()?;
    report.add(
        AREA,
        "relay memory pinned by one agent flooding a phone that reads nothing",
        format!("{:.1} MiB", mib(one_pair)),
        "≤ 16 MiB queue + one message",
    );
    report.add(
        AREA,
        format!("relay RSS: {PAIRS} such pairs at once"),
        format!("{:.0} MiB", mib(peak)),
        "≤ budget 256 + 64 MiB",
    );
    anyhow::ensure!(mib(peak) <= BUDGET_MIB + FLOOD_SLACK_MIB, "the relay passed its memory bound");
    drop((held, laptops));
    Ok(())
}
