//! Web client figures: the page's weight, the time from opening the pairing link to "online"
//! through the embedded relay in headless Chromium, and from pressing "Run" to the command's first
//! output on screen. Both times are read from the page's own performance marks, so WebDriver's
//! polling adds nothing to them. Then a call from the page, once hosted by a self-hosted laptop and
//! once by `voxa relay` at `/live`: the page's latency series, its CPU and bytes each way.
//! `web-network` loads the page over an emulated phone network, cold and reloaded.

#[path = "../../tests/it/support/browser.rs"]
pub(crate) mod browser;

use std::time::{Duration, Instant};

use self::browser::{tone_wav, Browser, Scheme};
use crate::child::{start_agent, Agent};
use crate::report::{percentiles, Report};
use crate::voice::cpu_time;
use crate::voice::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::voice::HostingRelay;
use crate::web_floor;

const AREA: &str = "web client";

const KEY: &str = "AIzaSy-bench-key";
/// Call time measured (the laptop's voice streams at real time, the microphone is a looped tone).
const CALL: Duration = Duration::from_secs(20);
const SMOKE_CALL: Duration = Duration::from_secs(2);
/// `interrupted` sent while a long answer plays.
const BARGE_INS: usize = 5;

pub fn run(report: &mut Report, samples: usize) {
    let weight = voxa::net::web::page_weight();
    report.add(
        AREA,
        "page weight (every file, uncompressed)",
        format!("{:.1} KiB", weight as f64 / 1024.0),
        "≤ 150 KiB",
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("web bench skipped: no runtime: {err}");
            return;
        }
    };
    runtime.block_on(measure(report, samples));
    let call = if samples > 3 { CALL } else { SMOKE_CALL };
    runtime.block_on(measure_call(report, call, CallHost::Laptop));
    runtime.block_on(measure_call(report, call, CallHost::Relay));
}

/// Who hosts the measured call.
#[derive(Clone, Copy, PartialEq)]
enum CallHost {
    /// A self-hosted `voxa run` with its embedded relay.
    Laptop,
    /// `voxa relay` hosting voice at `/live` for a `voxa run` in hosted mode.
    Relay,
}

/// The processes behind a call; they end when dropped.
struct CallSide {
    _agent: Agent,
    _relay: Option<HostingRelay>,
    link: String,
}

/// Starts whoever hosts the call against the Gemini server at `gemini_url`.
fn start_call_side(host: CallHost, gemini_url: &str) -> CallSide {
    match host {
        CallHost::Laptop => {
            let env = [("GEMINI_API_KEY", KEY), ("VOXA_GEMINI_URL", gemini_url)];
            let agent = start_agent(&["--self-hosted"], &["--embedded-relay"], &env, &["embedded_relay", "started"]);
            let relay = agent.embedded_relay.clone().expect("the embedded relay's address");
            let link = format!("http://{relay}/?code={}&token={}", agent.code, agent.token);
            CallSide { _agent: agent, _relay: None, link }
        }
        CallHost::Relay => {
            let relay = HostingRelay::spawn(gemini_url);
            let relay_url = format!("http://{}", relay.addr);
            let agent = start_agent(&["--relay", &relay_url], &[], &[], &["started"]);
            let link = format!("{relay_url}/?code={}&token={}", agent.code, agent.token);
            CallSide { _agent: agent, _relay: Some(relay), link }
        }
    }
}

/// One browser call against the test Gemini server, hosted by `host`: the page's own latency
/// series (audio clock mapped onto the page clock), its processes' CPU, and bytes.
async fn measure_call(report: &mut Report, length: Duration, host: CallHost) {
    let scratch = tempfile::tempdir().unwrap();
    let wav = scratch.path().join("microphone.wav");
    tone_wav(&wav, 48000, 440.0, 1.0, 1.0);
    let Some(browser) = Browser::with_microphone(&wav, Scheme::Light).await else { return };
    let (key, call) = match host {
        CallHost::Laptop => (KEY, "call"),
        CallHost::Relay => (crate::voice::HOSTED_KEY, "hosted call"),
    };
    let mut fake = FakeGemini::start(FakeOptions::new(key)).await;
    let side = start_call_side(host, &fake.url());
    browser.pair(&side.link).await;
    browser.wait_connection("online").await;
    browser.press("Call").await;
    let conn = fake.wait_for("the call's setup", |e| matches!(e.kind, Kind::Setup(_))).await.conn;
    browser.wait_script("the call to start", "return voxaVoice.state === 'live';").await;

    let pids: Vec<u32> =
        ["--type=renderer", "audio.mojom.AudioService"].iter().flat_map(|k| browser.processes(k)).collect();
    let cpu = || pids.iter().map(|&pid| cpu_time(pid)).sum::<Duration>();
    let bytes = || async {
        let counts = browser.script("return [voxaVoice.bytesSent, voxaVoice.bytesReceived];", vec![]).await;
        (counts[0].as_f64().unwrap_or(f64::NAN), counts[1].as_f64().unwrap_or(f64::NAN))
    };
    let bytes_before = bytes().await;
    let (cpu_before, started) = (cpu(), Instant::now());
    // The laptop's voice at real time: a 40 ms chunk (24 kHz PCM16) every 40 ms.
    let chunk: Vec<u8> = (0..960)
        .flat_map(|n| (((n as f64 * 2.0 * std::f64::consts::PI * 220.0 / 24000.0).sin() * 8000.0) as i16).to_le_bytes())
        .collect();
    let mut tick = tokio::time::interval(Duration::from_millis(40));
    while started.elapsed() < length {
        tick.tick().await;
        fake.send(conn, FakeGemini::model_audio(&chunk));
    }
    let (cpu_used, wall) = (cpu() - cpu_before, started.elapsed());
    let bytes_after = bytes().await;

    // Barge-in: two seconds of voice at once, then `interrupted` while it plays; the page measures
    // on its audio clock how long the voice went on after `interrupted` arrived.
    let burst: Vec<u8> = chunk.iter().copied().cycle().take(chunk.len() * 50).collect();
    for n in 0..BARGE_INS {
        let played = browser.script("return voxaVoice.samplesPlayed;", vec![]).await.as_f64().unwrap_or(0.0);
        for piece in burst.chunks(chunk.len()) {
            fake.send(conn, FakeGemini::model_audio(piece));
        }
        let playing = format!("return voxaVoice.samplesPlayed >= {};", played + 4800.0);
        browser.wait_script("the burst to play", &playing).await;
        fake.send(conn, serde_json::json!({"serverContent": {"interrupted": true}}));
        browser.wait_script("playback to stop", &format!("return voxaVoice.stops.length > {n};")).await;
    }
    browser.press("End call").await;
    browser.wait_script("the call to end", "return voxaVoice.state === 'ended';").await;
    let stats = browser.script("return voxaVoice;", vec![]).await;
    let series = |name: &str| -> Vec<f64> {
        stats[name].as_array().map(|a| a.iter().filter_map(|v| v.as_f64()).collect()).unwrap_or_default()
    };
    let rate = stats["sampleRate"].as_f64().unwrap_or(f64::NAN);
    for (name, label) in [
        ("captureToSendMs", "microphone frame complete on the audio thread → sent on the socket (approximate: audio clock mapped)"),
        ("receiveToQueueMs", "voice frame received → queued on the audio thread (its acknowledgement back)"),
        ("firstVoiceMs", "first voice frame of a turn received → playing, its word back (jitter buffer: 60 ms of audio or of waiting)"),
    ] {
        let mut values = series(name);
        let (p50, p99) = percentiles(&mut values);
        report.add(
            AREA,
            format!("{call}: {label}, Chromium at {rate:.0} Hz (p50 / p99 of {})", values.len()),
            format!("{p50:.1} / {p99:.1} ms"),
            "",
        );
    }
    report.add(
        AREA,
        format!("{call}: page CPU (renderer + audio service) over {:.0} s", wall.as_secs_f64()),
        format!("{:.1} % of one core", 100.0 * cpu_used.as_secs_f64() / wall.as_secs_f64()),
        "",
    );
    let mut stops: Vec<f64> = stats["stops"]
        .as_array()
        .map(|a| a.iter().filter_map(|stop| stop["ms"].as_f64()).collect())
        .unwrap_or_default();
    let (p50, _) = percentiles(&mut stops);
    let max = stops.iter().copied().fold(f64::NAN, f64::max);
    report.add(
        AREA,
        format!("{call}: `interrupted` received → voice silent, on the audio clock ({} barge-ins)", stops.len()),
        format!("median {p50:.1} ms, max {max:.1} ms"),
        "≤ 50 ms",
    );
    let per_second = |after: f64, before: f64| (after - before) / wall.as_secs_f64() / 1024.0;
    report.add(
        AREA,
        format!("{call}: bytes per second while both sides stream, page → laptop / laptop → page (WebSocket payloads)"),
        format!(
            "{:.1} / {:.1} KiB/s",
            per_second(bytes_after.0, bytes_before.0),
            per_second(bytes_after.1, bytes_before.1)
        ),
        "",
    );
    browser.close().await;
    drop(side);
}

async fn measure(report: &mut Report, samples: usize) {
    let Some(browser) = Browser::start().await else { return };
    let agent = start_agent(&[], &["--embedded-relay"], &[], &["embedded_relay", "started"]);
    let relay = agent.embedded_relay.clone().expect("the embedded relay's address");
    let link = format!("http://{relay}/?code={}&token={}", agent.code, agent.token);

    // The first visit asks "Add this laptop?"; every sample is a visit of a laptop the page knows.
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    let mut online = Vec::with_capacity(samples);
    for _ in 0..samples {
        browser.open(&link).await;
        browser.wait_connection("online").await;
        online.push(mark(&browser, "voxa:online").await);
    }
    let (median, _) = percentiles(&mut online);
    report.add(
        AREA,
        format!("open the link → \"online\" via the embedded relay, Chromium (median of {samples})"),
        format!("{median:.0} ms"),
        "",
    );

    let mut first_output = Vec::with_capacity(samples);
    for n in 0..samples {
        browser.script("performance.clearMarks();", vec![]).await;
        browser.type_into("Command", &format!("echo sample-{n}")).await;
        browser.press("Run").await;
        browser.wait_script("the command's end", "return !document.getElementById('run').disabled;").await;
        first_output.push(mark(&browser, "voxa:first-output").await - mark(&browser, "voxa:run").await);
    }
    let (median, _) = percentiles(&mut first_output);
    report.add(
        AREA,
        format!("\"Run\" → first output on screen, `echo` (median of {samples})"),
        format!("{median:.0} ms"),
        "",
    );
    browser.close().await;
}

/// The floor page of `bytes` (over TLS when `tls`) opened with nothing cached, then reloaded.
async fn floor_loads(browser: &Browser, bytes: usize, tls: bool, samples: usize) -> (Loads, Loads) {
    let origin = web_floor::serve(bytes, tls).await;
    let (mut cold, mut warm) = (Loads::default(), Loads::default());
    for _ in 0..samples {
        browser.open("about:blank").await;
        browser.cdp("Network.clearBrowserCache", serde_json::json!({})).await;
        browser.open(&format!("{origin}/")).await;
        cold.add(browser, web_floor::MARK).await;
        browser.client.refresh().await.expect("reload");
        warm.add(browser, web_floor::MARK).await;
    }
    (cold, warm)
}

/// The emulated phone network: a 150 ms round trip and 1.6 Mbit/s each way.
const NETWORK: (f64, f64) = (150.0, 1.6e6 / 8.0);

/// The page over an emulated phone network (Chromium's DevTools network conditions: each request
/// waits the round trip, bodies flow at the throughput): the pairing link opened with nothing
/// cached (cache and the origin's storage cleared before each load) and the page reloaded with
/// everything a first visit left, each to "online", and the bytes that crossed the wire.
pub fn run_network(report: &mut Report, samples: usize) {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("web-network bench skipped: no runtime: {err}");
            return;
        }
    };
    runtime.block_on(measure_network(report, samples));
}

async fn measure_network(report: &mut Report, samples: usize) {
    // The LAN relay's certificate is its own: taken as a user who accepted the warning once.
    let accept = ["--ignore-certificate-errors".to_owned()];
    let Some(browser) = Browser::start_with_args(Scheme::Light, &accept).await else { return };
    let (latency, throughput) = NETWORK;
    browser.cdp("Network.enable", serde_json::json!({})).await;
    let conditions = serde_json::json!({
        "offline": false, "latency": latency, "downloadThroughput": throughput, "uploadThroughput": throughput,
    });
    browser.cdp("Network.emulateNetworkConditions", conditions).await;

    // The same page from a plain relay (HTTP/1.1: six connections) and over TLS (HTTP/2: one).
    let plain = start_agent(&[], &["--embedded-relay"], &[], &["embedded_relay", "started"]);
    let (plain_cold, plain_warm) = page_loads(&browser, &plain, "http", samples).await;
    drop(plain);
    let tls = start_agent(&[], &["--lan", "127.0.0.2"], &[], &["embedded_relay", "started"]);
    let (tls_cold, tls_warm) = page_loads(&browser, &tls, "https", samples).await;
    drop(tls);

    // The floor: as many bytes in one document and one script, then one WebSocket echo; over
    // plain HTTP beside the plain relay, over TLS beside the TLS one.
    let (median_cold_bytes, _) = percentiles(&mut plain_cold.bytes.clone());
    let (floor_cold, floor_warm) = floor_loads(&browser, median_cold_bytes as usize, false, samples).await;
    let (floor_tls_cold, floor_tls_warm) = floor_loads(&browser, median_cold_bytes as usize, true, samples).await;
    let rows = [
        ("open the pairing link → \"online\", nothing cached, plain HTTP (HTTP/1.1)", plain_cold),
        ("open the pairing link → \"online\", nothing cached, HTTPS (HTTP/2)", tls_cold),
        ("reload → \"online\", after a first visit, plain HTTP (HTTP/1.1)", plain_warm),
        ("reload → \"online\", after a first visit, HTTPS (HTTP/2)", tls_warm),
        (
            "floor: a page of as many bytes in one document and one script → one WebSocket echo, nothing cached",
            floor_cold,
        ),
        ("floor: that page reloaded (document revalidated, script cached) → one WebSocket echo", floor_warm),
        ("floor over TLS: the same page over HTTPS → one WebSocket echo (wss), nothing cached", floor_tls_cold),
        ("floor over TLS: that page reloaded → one WebSocket echo (wss)", floor_tls_warm),
    ];
    for (what, mut loads) in rows {
        let (median, _) = percentiles(&mut loads.times);
        let (median_bytes, _) = percentiles(&mut loads.bytes);
        let (median_requests, _) = percentiles(&mut loads.requests);
        report.add(
            AREA,
            format!("{what}, Chromium at {latency:.0} ms round trip and 1.6 Mbit/s (median of {samples})"),
            format!(
                "{median:.0} ms; {:.1} KiB on the wire in {median_requests:.0} HTTP requests",
                median_bytes / 1024.0
            ),
            "",
        );
    }
    browser.close().await;
}

/// `samples` first visits of `agent`'s pairing link with nothing cached (the HTTP cache and the
/// origin's storage cleared before each), each followed by a reload with what it left.
async fn page_loads(browser: &Browser, agent: &Agent, scheme: &str, samples: usize) -> (Loads, Loads) {
    let relay = agent.embedded_relay.clone().expect("the embedded relay's address");
    let origin = format!("{scheme}://{relay}");
    let link = format!("{origin}/?code={}&token={}", agent.code, agent.token);
    let (mut cold, mut warm) = (Loads::default(), Loads::default());
    for _ in 0..samples {
        browser.open("about:blank").await;
        browser.cdp("Network.clearBrowserCache", serde_json::json!({})).await;
        browser.cdp("Storage.clearDataForOrigin", serde_json::json!({"origin": origin, "storageTypes": "all"})).await;
        // A first visit: the page proves the laptop and shows its name for "Add this laptop?".
        browser.open(&link).await;
        cold.add(browser, "voxa:introduced").await;
        if std::env::var_os("VOXA_BENCH_TIMELINE").is_some() {
            eprintln!("{scheme} first load:\n{}", timeline(browser).await);
        }
        browser.add_laptop().await;
        browser.wait_connection("online").await;
        // What a first visit leaves (the worker's copy, the HTTP cache) is in place for the reload.
        browser.wait_script("the service worker", "return !!navigator.serviceWorker.controller;").await;
        browser.client.refresh().await.expect("reload");
        browser.wait_connection("online").await;
        warm.add(browser, "voxa:online").await;
    }
    (cold, warm)
}

/// The load just made as the page saw it, one line a request and a mark, in ms since navigation:
/// when each was asked for, answered and done, over which protocol, and its bytes on the wire.
/// `VOXA_BENCH_TIMELINE=1` prints it for every first visit.
async fn timeline(browser: &Browser) -> String {
    let script = "return [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource'), \
                  ...performance.getEntriesByType('mark')].map((e) => [e.entryType, e.name.replace(/[?#].*/, ''), \
                  e.startTime, e.requestStart || 0, e.responseStart || 0, e.responseEnd || 0, e.nextHopProtocol || '', \
                  e.transferSize || 0].map((v) => typeof v === 'number' ? v.toFixed(0) : v).join(' ')).join('\\n');";
    browser.script(script, vec![]).await.as_str().unwrap_or_default().to_owned()
}

/// One kind of page load, sample by sample: the time to its mark and what crossed the wire.
#[derive(Default)]
struct Loads {
    times: Vec<f64>,
    bytes: Vec<f64>,
    requests: Vec<f64>,
}

impl Loads {
    /// The load just made, once the page has set `mark`.
    async fn add(&mut self, browser: &Browser, mark_name: &str) {
        self.times.push(mark(browser, mark_name).await);
        let (bytes, requests) = wire(browser).await;
        self.bytes.push(bytes);
        self.requests.push(requests);
    }
}

/// Bytes the page's HTTP requests moved on the wire (headers and bodies, as Chromium counts them;
/// answers from a cache count 0) and how many went to the network, up to now.
async fn wire(browser: &Browser) -> (f64, f64) {
    let script = "const entries = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]; \
                  const sent = entries.filter((e) => e.transferSize > 0); \
                  return [sent.reduce((sum, e) => sum + e.transferSize, 0), sent.length];";
    let value = browser.script(script, vec![]).await;
    (value[0].as_f64().unwrap_or(f64::NAN), value[1].as_f64().unwrap_or(f64::NAN))
}

/// Time of a performance mark, in ms since the page's navigation started.
async fn mark(browser: &Browser, name: &str) -> f64 {
    browser.wait_script(name, &format!("return performance.getEntriesByName('{name}').length > 0;")).await;
    let value = browser.script(&format!("return performance.getEntriesByName('{name}')[0].startTime;"), vec![]).await;
    value.as_f64().unwrap_or(f64::NAN)
}
