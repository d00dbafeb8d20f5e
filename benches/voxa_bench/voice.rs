//! Self-hosted voice: the agent binary bridging one call between a phone on its loopback socket and
//! the fake Gemini Live server in this process. Latency per 20 ms audio frame in each direction
//! (phone → Gemini, Gemini → phone; end to end, so it includes both loopback WebSocket hops) and
//! the agent's CPU while a call streams 50 frames/s each way. A direct WebSocket to the fake with
//! the same frames gives the floor that loopback and scheduling set on this machine.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::{ClientSocket, DialOptions};

#[path = "../../tests/it/support/fake_gemini.rs"]
pub(crate) mod fake_gemini;

use self::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::child::{say_hello, start_agent};
use crate::report::{percentiles, Report};

const KEY: &str = "AIzaSy-bench-key";
/// 20 ms of PCM16 mono at 16 kHz.
const FRAME_LEN: usize = 640;
const FRAME_EVERY: Duration = Duration::from_millis(20);
/// Streaming time measured (50 frames/s each way); a short smoke run without `--bench`.
const STREAM: Duration = Duration::from_secs(10);
const SMOKE_STREAM: Duration = Duration::from_millis(1500);
/// Silent call time measured for reference.
const SILENT: Duration = Duration::from_secs(3);
/// Frames left out at the start of the stream.
const WARM_UP: usize = 25;

/// CPU time (user + system) the process has used so far.
pub(crate) fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100)
}

async fn wait_for(socket: &mut ClientSocket, kind: &str) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.unwrap().unwrap().unwrap();
        if let Message::Text(text) = frame {
            // A relay notice is U+0001 and a JSON object.
            let value: Value = serde_json::from_str(text.strip_prefix('\u{1}').unwrap_or(&text)).unwrap();
            if value["type"] == kind {
                return value;
            }
        }
    }
}

/// A frame whose first 8 bytes carry its sequence number.
pub(crate) fn frame(seq: u64) -> Vec<u8> {
    let mut pcm = vec![0x55; FRAME_LEN];
    pcm[..8].copy_from_slice(&seq.to_le_bytes());
    pcm
}

fn seq_of(pcm: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(pcm.get(..8)?.try_into().ok()?))
}

/// Latencies in µs of frames matched by sequence number, warm-up left out.
fn latencies(sent: &[Option<Instant>], arrived: &[(u64, Instant)]) -> Vec<f64> {
    arrived
        .iter()
        .filter(|(seq, _)| *seq as usize >= WARM_UP)
        .filter_map(|(seq, at)| {
            Some(at.duration_since(sent.get(*seq as usize).copied().flatten()?).as_secs_f64() * 1e6)
        })
        .collect()
}

/// The same stream sent straight to the fake over one WebSocket: what loopback and scheduling
/// cost without the bridge.
async fn direct_baseline(fake: &mut FakeGemini, frames: usize) -> Vec<f64> {
    let headers = vec![("x-goog-api-key".to_owned(), voxa::secret::Secret::from_string(KEY.into()))];
    let options = DialOptions { headers, ..Default::default() };
    let mut socket = voxa::net::dial::connect(&fake.url(), &options).await.unwrap();
    let setup = json!({"setup":{"model":"models/bench"}});
    socket.send(Message::text(setup.to_string())).await.unwrap();
    let (conn, _) = fake.expect_setup().await;
    while !matches!(socket.next().await, Some(Ok(Message::Binary(_)))) {}
    let mut sent = vec![None; frames];
    let mut arrived = Vec::with_capacity(frames);
    let mut tick = tokio::time::interval(FRAME_EVERY);
    let mut next = 0;
    while arrived.len() < frames {
        tokio::select! {
            _ = tick.tick(), if next < frames => {
                sent[next] = Some(Instant::now());
                socket.send(Message::text(voxa::gemini::wire::audio(&frame(next as u64)))).await.unwrap();
                next += 1;
            }
            event = fake.next_event() => {
                if let (true, Kind::Audio { pcm, .. }) = (event.conn == conn, event.kind) {
                    if let Some(seq) = seq_of(&pcm) {
                        arrived.push((seq, event.at));
                    }
                }
            }
        }
    }
    let _ = socket.close(None).await;
    latencies(&sent, &arrived)
}

fn fmt_us((p50, p99): (f64, f64)) -> String {
    format!("p50 {p50:.0} µs, p99 {p99:.0} µs")
}

pub fn run(report: &mut Report, measuring: bool) {
    let (stream_for, silent_for) = if measuring { (STREAM, SILENT) } else { (SMOKE_STREAM, FRAME_EVERY) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
        let url = fake.url();
        let agent = tokio::task::spawn_blocking(move || {
            start_agent(
                &["--self-hosted"],
                &["--embedded-relay"],
                &[("GEMINI_API_KEY", KEY), ("VOXA_GEMINI_URL", &url)],
                &["started"],
            )
        })
        .await
        .unwrap();
        let pid = agent.child.id();

        let mut phone = voxa::net::dial::connect(&format!("ws://127.0.0.1:{}/", agent.port), &DialOptions::default())
            .await
            .unwrap();
        say_hello(&mut phone, &agent.token).await;
        phone.send(Message::text(json!({"type":"call_start"}).to_string())).await.unwrap();
        let (conn, _) = fake.expect_setup().await;
        wait_for(&mut phone, "call_started").await;

        // A call open but silent, for reference.
        let idle_from = cpu_time(pid);
        tokio::time::sleep(silent_for).await;
        let idle = (cpu_time(pid) - idle_from).as_secs_f64() / silent_for.as_secs_f64();

        let frames = (stream_for.as_millis() / FRAME_EVERY.as_millis()) as usize;
        let (mut sink, mut stream) = phone.split();
        let up_sent = Arc::new(Mutex::new(vec![None; frames]));
        let writer = {
            let up_sent = up_sent.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(FRAME_EVERY);
                for seq in 0..frames as u64 {
                    tick.tick().await;
                    let mut message = vec![voxa::protocol::AUDIO_PREFIX];
                    message.extend_from_slice(&frame(seq));
                    up_sent.lock().unwrap()[seq as usize] = Some(Instant::now());
                    sink.send(Message::binary(message)).await.unwrap();
                }
                sink
            })
        };
        let reader = tokio::spawn(async move {
            let mut arrived = Vec::with_capacity(frames);
            while arrived.len() < frames {
                let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await else {
                    break;
                };
                if let Message::Binary(data) = message {
                    let now = Instant::now();
                    if let Some(seq) = seq_of(&data[1..]) {
                        arrived.push((seq, now));
                    }
                }
            }
            arrived
        });

        let cpu_from = cpu_time(pid);
        let wall_from = Instant::now();
        let mut down_sent = vec![None; frames];
        let mut up_arrived = Vec::with_capacity(frames);
        let mut tick = tokio::time::interval(FRAME_EVERY);
        let mut next_down = 0;
        while up_arrived.len() < frames || next_down < frames {
            tokio::select! {
                _ = tick.tick(), if next_down < frames => {
                    down_sent[next_down] = Some(Instant::now());
                    fake.send(conn, FakeGemini::model_audio(&frame(next_down as u64)));
                    next_down += 1;
                }
                event = fake.next_event() => {
                    if let Kind::Audio { pcm, .. } = event.kind {
                        if let Some(seq) = seq_of(&pcm) {
                            up_arrived.push((seq, event.at));
                        }
                    }
                }
            }
        }
        let down_arrived = reader.await.unwrap();
        let cpu = (cpu_time(pid) - cpu_from).as_secs_f64() / wall_from.elapsed().as_secs_f64();
        let _sink = writer.await.unwrap();

        let up_sent = up_sent.lock().unwrap().clone();
        let mut up = latencies(&up_sent, &up_arrived);
        let mut down = latencies(&down_sent, &down_arrived);
        let lost = |arrived: usize| frames - arrived;
        report.add(
            "voice",
            format!("phone → Gemini, per 20 ms frame ({FRAME_LEN} B), {} frames", up.len()),
            format!("{} ({} lost)", fmt_us(percentiles(&mut up)), lost(up_arrived.len())),
            "p99 < 1 ms",
        );
        report.add(
            "voice",
            format!("Gemini → phone, per 20 ms frame ({FRAME_LEN} B), {} frames", down.len()),
            format!("{} ({} lost)", fmt_us(percentiles(&mut down)), lost(down_arrived.len())),
            "p99 < 1 ms",
        );
        let mut baseline = direct_baseline(&mut fake, frames).await;
        report.add(
            "voice",
            "baseline: the same frames on one direct loopback WebSocket",
            fmt_us(percentiles(&mut baseline)),
            "reference",
        );
        report.add(
            "voice",
            "agent CPU, one call streaming 50 frames/s each way",
            format!("{:.1} % of a core ({:.1} % with the call silent)", cpu * 100.0, idle * 100.0),
            "",
        );
    });
}
