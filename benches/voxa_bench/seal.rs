//! Sealed sessions (protocol 3) against plain ones (protocol 2): the handshake alone and a whole
//! hello on the loopback socket, the CPU a frame costs to seal and open (a tool call's JSON and a
//! 20 ms audio frame), and 10 MiB read through the real agent both ways.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::{ClientSocket, DialOptions};
use voxa::seal::transport::{KIND_AUDIO, KIND_JSON};
use voxa::seal::{Initiator, Responder};
use voxa::secret::Secret;

use crate::child::{start_agent, Agent};
use crate::report::{percentiles, Report};
use crate::web::browser::Browser;

const CHALLENGE: &str = "0123456789abcdef0123456789abcdef";
/// What one read returns: `read_file`'s ceiling (`OUTPUT_CAP`).
const READ_CHUNK: usize = 256 << 10;
/// Reads of that file making up the 10 MiB.
const READS: usize = 40;

fn token() -> Secret {
    Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap()
}

/// Both messages and both ends of one handshake, in microseconds.
fn handshake_us(runs: usize) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            let (initiator, one) = Initiator::start(&token(), CHALLENGE).unwrap();
            let (_, two) = Responder::accept(&token(), CHALLENGE, &one).unwrap().finish(b"{}").unwrap();
            initiator.finish(&two).unwrap();
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// The floor of a handshake: protocol 2's hello proofs, each made and checked once, in microseconds.
fn proofs_us(runs: usize) -> Vec<f64> {
    use voxa::protocol::{agent_proof, client_proof, verify_agent_proof, verify_client_proof};
    let client_nonce = "fedcba9876543210fedcba9876543210";
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            let proof = client_proof(&token(), CHALLENGE, client_nonce);
            assert!(verify_client_proof(&token(), CHALLENGE, client_nonce, &proof));
            let proof = agent_proof(&token(), CHALLENGE, client_nonce);
            assert!(verify_agent_proof(&token(), CHALLENGE, client_nonce, &proof));
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// Sealing and opening one frame of `kind` and `len` bytes, in nanoseconds per frame (a median
/// over batches of 1,000).
fn seal_and_open_ns(kind: u8, len: usize, batches: usize) -> f64 {
    let (initiator, one) = Initiator::start(&token(), CHALLENGE).unwrap();
    let (mut agent, two) = Responder::accept(&token(), CHALLENGE, &one).unwrap().finish(b"{}").unwrap();
    let (mut client, _) = initiator.finish(&two).unwrap();
    let body = vec![b'x'; len];
    let mut samples: Vec<f64> = (0..batches)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..1000 {
                for message in client.sealer.seal(kind, &body).unwrap() {
                    std::hint::black_box(agent.opener.open(&message).unwrap());
                }
            }
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    percentiles(&mut samples).0
}

async fn client(port: u16, token: &str, sealed: bool) -> ClientSocket {
    let mut socket =
        voxa::net::dial::connect(&format!("ws://127.0.0.1:{port}/"), &DialOptions::default()).await.unwrap();
    let token = Secret::from_string(token.to_owned());
    let hello = if sealed {
        voxa::net::client::hello(&mut socket, &token, "voxa-bench/1").await
    } else {
        voxa::net::client::hello_plain(&mut socket, &token, "voxa-bench/1").await
    };
    hello.expect("the agent accepts the hello");
    assert_eq!(socket.is_sealed(), sealed);
    socket
}

/// Connect and hello on the loopback socket, in microseconds.
async fn hellos_us(port: u16, token: &str, sealed: bool, runs: usize) -> Vec<f64> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let socket = client(port, token, sealed).await;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
        drop(socket);
    }
    samples
}

/// 10 MiB read with `read_file` (40 reads of a 256 KiB file), in milliseconds.
async fn read_10_mib_ms(socket: &mut ClientSocket) -> f64 {
    // Call ids are the pairing's: a read sent again under an id already used would be answered
    // from its receipt instead of reading (docs/PROTOCOL.md, "Receipts").
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    for _ in 0..READS {
        let id = format!("r{}", CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let call = json!({"type":"tool_call","id": id,"name":"read_file","args":{"path":"chunk.txt"}});
        socket.send(Message::text(call.to_string())).await.unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.unwrap().unwrap().unwrap();
            let Message::Text(text) = frame else { continue };
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["type"] == "tool_result" && value["id"] == id.as_str() {
                assert_eq!(value["result"]["content"].as_str().map(str::len), Some(READ_CHUNK), "{}", value["error"]);
                break;
            }
        }
    }
    started.elapsed().as_secs_f64() * 1e3
}

/// The page's own sealing in Chromium (WebCrypto): handshakes with both ends in the page, then
/// 640 B audio frames sealed and opened one after the other.
const PAGE_RUN: &str = "const [handshakes, frames, done] = arguments;
    Promise.all([import('/js/seal/noise.js'), import('/js/seal/channel.js')]).then(async ([noise, seal]) => {
        const token = '00112233445566778899aabbccddeeff', challenge = '0123456789abcdef0123456789abcdef';
        const times = [];
        let channel, peer;
        for (let i = 0; i < handshakes; i += 1) {
            const started = performance.now();
            const hello = await seal.startHello(token, challenge);
            const agent = await noise.Handshake.begin({ initiator: false, psk: await seal.psk(token),
                prologue: seal.prologue(challenge) });
            await agent.readMessage(hello.message);
            const opened = await hello.finish(await agent.writeMessage(new Uint8Array(0)));
            times.push(performance.now() - started);
            const keys = await agent.split();
            channel = opened.channel;
            peer = new seal.Channel(keys.send, keys.receive);
        }
        const audio = new Uint8Array(640);
        const started = performance.now();
        for (let i = 0; i < frames; i += 1) {
            const [message] = channel.seal(seal.KIND_AUDIO, audio);
            await peer.open(await message);
        }
        done({ handshakes: times, frame: (performance.now() - started) / frames });
    }).catch((error) => done({ error: String(error) }));";

async fn in_the_page(report: &mut Report, agent: &Agent, measuring: bool) {
    let Some(browser) = Browser::start().await else { return };
    browser.open(&format!("http://127.0.0.1:{}/", agent.port)).await;
    let (handshakes, frames) = if measuring { (200, 5000) } else { (2, 10) };
    let ran = browser.client.execute_async(PAGE_RUN, vec![json!(handshakes), json!(frames)]).await.unwrap();
    assert_eq!(ran["error"], Value::Null, "{ran}");
    let mut times: Vec<f64> = ran["handshakes"].as_array().unwrap().iter().filter_map(Value::as_f64).collect();
    let (p50, p99) = percentiles(&mut times);
    report.add(
        "seal",
        "Noise handshake in Chromium (WebCrypto), both ends in the page",
        format!("p50 {p50:.2} ms, p99 {p99:.2} ms"),
        "",
    );
    let frame = ran["frame"].as_f64().unwrap_or(f64::NAN) * 1000.0;
    report.add(
        "seal",
        "seal + open a 20 ms audio frame in Chromium, one after the other",
        format!("{frame:.0} µs"),
        "",
    );
    browser.close().await;
}

pub fn run(report: &mut Report, measuring: bool) {
    let runs = if measuring { 2000 } else { 3 };
    let (p50, p99) = percentiles(&mut handshake_us(runs));
    report.add("seal", "Noise handshake, both ends, in process", format!("p50 {p50:.0} µs, p99 {p99:.0} µs"), "");
    let (p50, p99) = percentiles(&mut proofs_us(runs));
    report.add(
        "seal",
        "floor: protocol 2 hello proofs (HMAC-SHA256), both ends, in process",
        format!("p50 {p50:.1} µs, p99 {p99:.1} µs"),
        "",
    );
    let batches = if measuring { 50 } else { 1 };
    let json_ns = seal_and_open_ns(KIND_JSON, 200, batches);
    report.add("seal", "seal + open a 200 B JSON frame (CPU)", format!("{:.2} µs", json_ns / 1000.0), "");
    let audio_ns = seal_and_open_ns(KIND_AUDIO, 640, batches);
    // A call moves 50 frames a second each way; each end seals one direction and opens the other.
    let share = audio_ns * 50.0 * 2.0 / 1e9 / 2.0 * 100.0;
    report.add(
        "seal",
        "seal + open a 20 ms audio frame, 640 B (CPU)",
        format!("{:.2} µs ({share:.3} % of a core per end for a call, 50 frames/s each way)", audio_ns / 1000.0),
        "",
    );
    let large_ns = seal_and_open_ns(KIND_JSON, READ_CHUNK, if measuring { 2 } else { 1 }) / 1000.0;
    let mib_s = READ_CHUNK as f64 / (1 << 20) as f64 / (large_ns / 1e6);
    report.add("seal", "seal + open, 256 KiB frames (CPU, both ends)", format!("{mib_s:.0} MiB/s"), "");

    let agent = start_agent(&[], &[], &[], &["started"]);
    let workspace = agent.workspace();
    std::fs::write(workspace.join("chunk.txt"), "0123456789abcdef".repeat(READ_CHUNK / 16)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let hello_runs = if measuring { 200 } else { 3 };
        let sealed = percentiles(&mut hellos_us(agent.port, &agent.token, true, hello_runs).await);
        let plain = percentiles(&mut hellos_us(agent.port, &agent.token, false, hello_runs).await);
        report.add(
            "seal",
            "loopback connect + hello: sealed (3) / plain (2)",
            format!("p50 {:.0} / {:.0} µs, p99 {:.0} / {:.0} µs", sealed.0, plain.0, sealed.1, plain.1),
            "",
        );
        let repeats = if measuring { 7 } else { 1 };
        let mut figures = [Vec::new(), Vec::new()];
        for _ in 0..repeats {
            for (i, sealed) in [true, false].into_iter().enumerate() {
                let mut socket = client(agent.port, &agent.token, sealed).await;
                figures[i].push(read_10_mib_ms(&mut socket).await);
            }
        }
        let (sealed, plain) = (percentiles(&mut figures[0]).0, percentiles(&mut figures[1]).0);
        let rate = |ms: f64| 10.0 / (ms / 1e3);
        report.add(
            "seal",
            "10 MiB read through the loopback agent (40 × 256 KiB read_file): sealed / plain",
            format!("{sealed:.0} / {plain:.0} ms ({:.0} / {:.0} MiB/s)", rate(sealed), rate(plain)),
            "",
        );
        in_the_page(report, &agent, measuring).await;
    });
}
