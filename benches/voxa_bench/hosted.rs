//! Hosted voice: the built `voxa relay` (its own process, so its memory and CPU are its own)
//! hosting many calls at once against the fake Gemini Live server, which echoes the microphone
//! back as model audio. Real agents (in this process) run in hosted mode behind each pairing (the
//! relay hosts calls only for codes a laptop holds); each page's call socket at `/live` streams
//! 50 frames/s, and hears as many back. Figures per call: the relay's
//! resident memory while the calls stream, over the same pairings without calls, and its CPU.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use voxa::agent::LinkEvent;
use voxa::config::RelayUrl;
use voxa::net::dial::{ClientSocket, DialOptions};

#[path = "../../tests/it/support/harness.rs"]
pub(crate) mod harness;

use self::harness::{recv_type, send, TestAgent};
use crate::report::{percentiles, Report};
use crate::voice::fake_gemini::{FakeGemini, FakeOptions};
use crate::voice::{cpu_time, frame, HostingRelay, HOSTED_KEY};

const AREA: &str = "hosted";
const FRAME_EVERY: Duration = Duration::from_millis(20);

impl HostingRelay {
    fn rss_kib(&self) -> u64 {
        crate::report::status_kib(self.child.id(), "VmRSS")
    }
}

/// A page's call socket at `/live` (no session of the pairing: it says no hello). The calls run
/// no tool, so no sealed session stands beside it.
async fn live_phone(relay: SocketAddr, agent: &TestAgent) -> ClientSocket {
    let url = format!("ws://{relay}/live?code={}", agent.code());
    voxa::net::dial::connect(&url, &DialOptions::default()).await.unwrap()
}

pub fn run(report: &mut Report, measuring: bool) {
    let (calls, stream_for) = if measuring { (100, Duration::from_secs(10)) } else { (10, Duration::from_secs(1)) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let fake = FakeGemini::start(FakeOptions { echo_audio: true, ..FakeOptions::new(HOSTED_KEY) }).await;
        let relay = HostingRelay::spawn(&fake.url());
        let pid = relay.child.id();
        let url = RelayUrl::parse(&format!("http://{}", relay.addr)).unwrap();
        let mut agents = Vec::with_capacity(calls);
        for _ in 0..calls {
            let mut agent = TestAgent::start(Some(url.clone())).await;
            agent.wait_event("the relay link", |event| matches!(event, LinkEvent::Connected { .. })).await;
            agents.push(agent);
        }
        let mut phones = Vec::with_capacity(calls);
        for agent in &agents {
            phones.push(live_phone(relay.addr, agent).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let paired_kib = relay.rss_kib();

        for phone in &mut phones {
            send(phone, json!({"type":"call_start"})).await;
        }
        for phone in &mut phones {
            recv_type(phone, "call_started").await;
        }

        let sent = Arc::new(AtomicU64::new(0));
        let heard = Arc::new(AtomicU64::new(0));
        let until = Instant::now() + stream_for;
        let mut streams = Vec::with_capacity(calls);
        for phone in phones {
            let (sent, heard) = (sent.clone(), heard.clone());
            streams.push(tokio::spawn(async move {
                let (mut sink, mut stream) = phone.split();
                let reader = tokio::spawn(async move {
                    while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_secs(2), stream.next()).await
                    {
                        if let Message::Binary(_) = message {
                            heard.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                let mut tick = tokio::time::interval(FRAME_EVERY);
                let mut seq = 0u64;
                while Instant::now() < until {
                    tick.tick().await;
                    let mut message = vec![voxa::protocol::AUDIO_PREFIX];
                    message.extend_from_slice(&frame(seq));
                    seq += 1;
                    if sink.send(Message::binary(message)).await.is_err() {
                        break;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                let _ = sink.send(Message::text(json!({"type":"call_end"}).to_string())).await;
                let _ = reader.await;
            }));
        }
        // CPU per second of streaming, the first second left out as warm-up.
        tokio::time::sleep(Duration::from_secs(1).min(stream_for / 2)).await;
        let mut cpu_samples = Vec::new();
        let mut last = (cpu_time(pid), Instant::now());
        let mut streaming_kib = 0;
        while Instant::now() + Duration::from_millis(500) < until {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = (cpu_time(pid), Instant::now());
            cpu_samples.push((now.0 - last.0).as_secs_f64() / now.1.duration_since(last.1).as_secs_f64());
            streaming_kib = streaming_kib.max(relay.rss_kib());
            last = now;
        }
        for stream in streams {
            let _ = stream.await;
        }
        let (sent, heard) = (sent.load(Ordering::Relaxed), heard.load(Ordering::Relaxed));
        let (cpu_median, _) = percentiles(&mut cpu_samples);
        report.add(
            AREA,
            format!(
                "relay CPU per hosted call, {calls} calls streaming 50 frames/s each way (median of 0.5 s samples)"
            ),
            format!("{:.2} % of a core ({:.1} % in all)", cpu_median * 100.0 / calls as f64, cpu_median * 100.0),
            "",
        );
        report.add(
            AREA,
            format!("relay RSS per hosted call, {calls} calls streaming, over the same pairings without calls"),
            format!(
                "{:.0} KiB ({:.1} MiB paired, {:.1} MiB streaming at most)",
                streaming_kib.saturating_sub(paired_kib) as f64 / calls as f64,
                paired_kib as f64 / 1024.0,
                streaming_kib as f64 / 1024.0
            ),
            "",
        );
        report.add(
            AREA,
            "microphone frames heard back (Gemini echoes them) / sent",
            format!("{heard} / {sent}"),
            "all, bar the last in flight",
        );
        drop(agents);
    });
}
