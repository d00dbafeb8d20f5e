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

/// The key of the test Gemini behind a relay hosting voice (the `hosted` section and the hosted call
/// in the page).
pub(crate) const HOSTED_KEY: &str = "AIzaSy-bench-hosted-key";

/// `voxa relay` hosting voice with the fake's URL and `HOSTED_KEY`.
pub(crate) use crate::child::Relay as HostingRelay;

impl HostingRelay {
    pub(crate) fn spawn(gemini_url: &str) -> HostingRelay {
        // Every call comes from 127.0.0.1: no per-address limits, no daily budget.
        let args = [
            "--open-live",
            "--live-max-calls",
            "10000",
            "--live-calls-per-address",
            "10000",
            "--live-starts-per-minute",
            "10000",
            "--live-minutes-per-day",
            "0",
            "--max-connections-per-ip",
            "0",
        ];
        let relay = HostingRelay::start(&args, &[("GEMINI_API_KEY", HOSTED_KEY), ("VOXA_GEMINI_URL", gemini_url)]);
        assert_eq!(relay.listening["live"], true, "{}", relay.listening);
        relay
    }
}

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

/// The voice path in a browser: headless Chromium whose microphone is a looped WAV, in a call to
/// the test Gemini server that echoes every microphone frame back as the model's voice. Per frame,
/// on the system clock: from the frame leaving the capture worklet (its last sample, on the audio
/// clock mapped to the page's) to Gemini's socket, and from Gemini sending its echo to the player
/// worklet queueing it (its word back). Beside each, the floor: the same audio, the same worklets
/// and the same page, through one bare WebSocket to an echo server behind the same front. Once on
/// loopback and once with 150 ms of round trip added by a delaying front (75 ms each way), for a
/// call the laptop hosts (sealed session → embedded relay → agent → Gemini) and one the relay
/// hosts (call socket → `voxa relay` → Gemini).
pub fn run_page(report: &mut Report, measuring: bool) {
    let stream_for = if measuring { Duration::from_secs(12) } else { Duration::from_secs(2) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let delays = [Duration::ZERO, Duration::from_millis(75)];
        let calls: Vec<(page::Host, Duration)> = if measuring {
            [page::Host::Laptop, page::Host::Relay].into_iter().flat_map(|host| delays.map(|d| (host, d))).collect()
        } else {
            // A smoke run proves each host and each path once: the laptop's call direct, the
            // relay's through the delaying front.
            vec![(page::Host::Laptop, delays[0]), (page::Host::Relay, delays[1])]
        };
        for (host, one_way) in calls {
            if !page::measure(report, host, one_way, stream_for).await {
                return;
            }
        }
    });
}

mod page {
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, SystemTime};

    use futures_util::{SinkExt, StreamExt};
    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_tungstenite::tungstenite::Message;

    use super::fake_gemini::{FakeGemini, FakeOptions, Kind};
    use super::HostingRelay;
    use crate::child::start_agent;
    use crate::report::{percentiles, Report};
    use crate::web::browser::{tone_wav, Browser, Scheme};

    /// Frames left out at the start of each stream (worklets and sockets warming up).
    const WARM_UP: usize = 25;

    #[derive(Clone, Copy, PartialEq)]
    pub(super) enum Host {
        Laptop,
        Relay,
    }

    /// Unix ms of a system time.
    fn unix_ms(at: SystemTime) -> f64 {
        at.duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }

    /// A front that adds `one_way` to every byte each way, and sends `GET /floor-echo` to `floor`,
    /// everything else to `relay` (so the floor's socket is of the page's own origin).
    async fn delaying_front(relay: SocketAddr, floor: SocketAddr, one_way: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                tokio::spawn(async move {
                    let mut head = [0u8; 15];
                    let to_floor = loop {
                        match tcp.peek(&mut head).await {
                            Ok(n) if n == head.len() => break &head == b"GET /floor-echo",
                            Ok(0) | Err(_) => return,
                            Ok(_) => tokio::task::yield_now().await,
                        }
                    };
                    let Ok(upstream) = TcpStream::connect(if to_floor { floor } else { relay }).await else { return };
                    let _ = upstream.set_nodelay(true);
                    let (from_client, to_client) = tcp.into_split();
                    let (from_server, to_server) = upstream.into_split();
                    tokio::spawn(delayed(from_client, to_server, one_way));
                    tokio::spawn(delayed(from_server, to_client, one_way));
                });
            }
        });
        addr
    }

    /// Copies `from` to `to`, each piece `delay` after it was read.
    async fn delayed(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        delay: Duration,
    ) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
        let writer = tokio::spawn(async move {
            while let Some((due, bytes)) = rx.recv().await {
                tokio::time::sleep_until(due).await;
                if to.write_all(&bytes).await.is_err() {
                    break;
                }
            }
            let _ = to.shutdown().await;
        });
        let mut buffer = vec![0u8; 64 << 10];
        while let Ok(n) = from.read(&mut buffer).await {
            if n == 0 || tx.send((tokio::time::Instant::now() + delay, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
        drop(tx);
        let _ = writer.await;
    }

    /// A bare WebSocket echo: every binary frame straight back, its arrival kept (system clock).
    async fn echo_server() -> (SocketAddr, Arc<Mutex<Vec<SystemTime>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heard: Arc<Mutex<Vec<SystemTime>>> = Arc::default();
        let kept = heard.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let kept = kept.clone();
                tokio::spawn(async move {
                    let Ok(socket) = tokio_tungstenite::accept_async(tcp).await else { return };
                    let (mut tx, mut rx) = socket.split();
                    while let Some(Ok(message)) = rx.next().await {
                        if let Message::Binary(data) = message {
                            kept.lock().unwrap().push(SystemTime::now());
                            if tx.send(Message::Binary(data)).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, heard)
    }

    /// The page's clock against the system's: Unix ms to add to `performance.timeOrigin + now()`.
    async fn clock_offset(browser: &Browser) -> f64 {
        let script = "const o = []; for (let i = 0; i < 41; i += 1) \
                      o.push(Date.now() - (performance.timeOrigin + performance.now())); return o;";
        let mut offsets: Vec<f64> =
            browser.script(script, vec![]).await.as_array().unwrap().iter().filter_map(Value::as_f64).collect();
        percentiles(&mut offsets).0
    }

    /// A page series (`sentAt`, `queuedAt`) of `stats`, on the system clock.
    fn series(stats: &Value, name: &str, offset: f64) -> Vec<f64> {
        stats[name]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).map(|t| t + offset).collect())
            .unwrap_or_default()
    }

    /// `to[k] - from[k]` in ms, frame by frame, the warm-up left out.
    fn one_way(from: &[f64], to: &[f64]) -> Vec<f64> {
        from.iter().zip(to).skip(WARM_UP).map(|(from, to)| to - from).collect()
    }

    /// The floor: the page's own call code (the same worklets) over one bare WebSocket echo.
    const FLOOR: &str = r#"
        const done = arguments[arguments.length - 1];
        (async () => {
          const { Call } = await import('/js/voice/call.js');
          const ws = new WebSocket(`ws://${location.host}/floor-echo`);
          ws.binaryType = 'arraybuffer';
          await new Promise((resolve) => { ws.onopen = resolve; });
          const link = Object.assign(new EventTarget(), {
            online: true, bytesIn: 0, bytesOut: 0,
            sendJson: () => true,
            sendAudio: (bytes) => {
              if (ws.bufferedAmount > 48 * 1024) return false;
              ws.send(bytes);
              return true;
            },
          });
          const speaker = { muted: false, sending: () => true, showLevel() {}, showSpeaking() {} };
          const call = new Call(speaker, link);
          ws.onmessage = (event) => call.onAudio(event.data, performance.now());
          await call.begin();
          call.onStarted();
          globalThis.voxaFloor = { call, ws };
          done(true);
        })().catch((error) => done(String(error)));
    "#;

    /// One measured run; false when no browser can run here.
    pub(super) async fn measure(
        report: &mut Report,
        host: Host,
        one_way_delay: Duration,
        stream_for: Duration,
    ) -> bool {
        let scratch = tempfile::tempdir().unwrap();
        let wav = scratch.path().join("microphone.wav");
        tone_wav(&wav, 48000, 440.0, 1.0, 0.5);
        let Some(browser) = Browser::with_microphone(&wav, Scheme::Light).await else { return false };
        let key = match host {
            Host::Laptop => super::KEY,
            Host::Relay => super::HOSTED_KEY,
        };
        let mut fake = FakeGemini::start(FakeOptions { echo_audio: true, ..FakeOptions::new(key) }).await;
        let (floor, floor_heard) = echo_server().await;
        // Whoever hosts the call; the page reaches its relay through the front.
        let gemini_url = fake.url();
        let (agent, relay, backend) = match host {
            Host::Laptop => {
                let url = gemini_url.clone();
                let agent = tokio::task::spawn_blocking(move || {
                    let env = [("GEMINI_API_KEY", key), ("VOXA_GEMINI_URL", url.as_str())];
                    start_agent(&["--self-hosted"], &["--embedded-relay"], &env, &["embedded_relay", "started"])
                })
                .await
                .unwrap();
                let relay: SocketAddr = agent.embedded_relay.clone().unwrap().parse().unwrap();
                (agent, None, relay)
            }
            Host::Relay => {
                let relay = HostingRelay::spawn(&gemini_url);
                let url = format!("http://{}", relay.addr);
                let agent =
                    tokio::task::spawn_blocking(move || start_agent(&["--relay", &url], &[], &[], &["started"]))
                        .await
                        .unwrap();
                let addr = relay.addr;
                (agent, Some(relay), addr)
            }
        };
        let front = delaying_front(backend, floor, one_way_delay).await;
        // A new origin each time: the page asks "Add this laptop?" first.
        browser.pair(&format!("http://{front}/#code={}&token={}", agent.code, agent.token)).await;
        browser.wait_connection("online").await;
        let offset = clock_offset(&browser).await;

        browser.press("Call").await;
        let conn = fake.wait_for("the call's setup", |e| matches!(e.kind, Kind::Setup(_))).await.conn;
        browser.wait_script("the call to start", "return voxaVoice.state === 'live';").await;
        tokio::time::sleep(stream_for).await;
        let stats = browser.script("return voxaVoice;", vec![]).await;
        browser.press("End call").await;
        let heard: Vec<f64> = fake
            .received()
            .iter()
            .filter(|e| e.conn == conn && matches!(e.kind, Kind::Audio { .. }))
            .map(|e| unix_ms(e.wall))
            .collect();
        let (sent, queued) = (series(&stats, "sentAt", offset), series(&stats, "queuedAt", offset));
        let mut voxa_up = one_way(&sent, &heard);
        let mut voxa_down = one_way(&heard, &queued);

        let ready = browser.client.execute_async(FLOOR, vec![]).await.unwrap();
        assert_eq!(ready, Value::Bool(true), "the floor call did not start: {ready}");
        tokio::time::sleep(stream_for).await;
        let floor_stats = browser.script("return voxaFloor.call.stats;", vec![]).await;
        browser.script("voxaFloor.call.tearDown(); voxaFloor.ws.close();", vec![]).await;
        let echoed: Vec<f64> = floor_heard.lock().unwrap().iter().copied().map(unix_ms).collect();
        let (floor_sent, floor_queued) =
            (series(&floor_stats, "sentAt", offset), series(&floor_stats, "queuedAt", offset));
        let mut floor_up = one_way(&floor_sent, &echoed);
        let mut floor_down = one_way(&echoed, &floor_queued);

        let path = match host {
            Host::Laptop => "call the laptop hosts",
            Host::Relay => "call the relay hosts",
        };
        let network = if one_way_delay.is_zero() {
            "loopback".to_owned()
        } else {
            format!("{} ms RTT", one_way_delay.as_millis() * 2)
        };
        for (direction, voxa, floor) in [
            ("frame leaves the capture worklet → Gemini's socket", &mut voxa_up, &mut floor_up),
            ("Gemini sends its voice → the player worklet queues it", &mut voxa_down, &mut floor_down),
        ] {
            let (count, floor_count) = (voxa.len(), floor.len());
            let (p50, p95) = p50_p95(voxa);
            let (floor_p50, floor_p95) = p50_p95(floor);
            report.add(
                "voice path",
                format!("{path}, {network}: {direction} (p50 / p95 of {count} frames; floor of {floor_count})"),
                format!(
                    "{p50:.1} / {p95:.1} ms; floor {floor_p50:.1} / {floor_p95:.1} ms; +{:.1} ms at p50",
                    p50 - floor_p50
                ),
                "≤ +60 ms over the floor at p50",
            );
        }
        browser.close().await;
        drop((agent, relay));
        true
    }

    /// Median and 95th percentile, in the series' unit.
    fn p50_p95(values: &mut [f64]) -> (f64, f64) {
        if values.is_empty() {
            return (f64::NAN, f64::NAN);
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        (at(0.5), at(0.95))
    }
}
