//! The relay's limits under hostile or careless clients: message sizes, silence, slow readers,
//! the memory budget, connections per address, and the metrics that count it all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use voxa::protocol::relay::{self as relay_framing, Kind};
use voxa::protocol::PeerState;
use voxa::relay::{RelayConfig, SocketLimits};

use crate::support::harness::{http, parse_response, upgrade_request, TestRelay, STEP as WAIT};
use crate::support::relay::{
    agent, expect_close, expect_joined, expect_left, expect_presence, expect_text, frame_header, new_code, next,
    next_any, pair, parse_server_frame, phone, raw_upgraded, read_server_frames, relayed, sample, send, to,
    try_connect, Client, FromRelay, RelayCommand, ServerFrame,
};
use voxa::secret::Secret;

#[tokio::test]
async fn frames_up_to_16_mib_pass_and_larger_ones_close_1009() {
    let relay = TestRelay::start().await;
    let (laptop, mut handset, _, peer) = pair(&relay).await;
    let limit = voxa::protocol::MAX_FRAME_LEN;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();

    // The relay's header does not count against the limit of what the phone gets.
    let largest: Vec<u8> = (0..limit).map(|i| (i % 251) as u8).collect();
    let sending = tokio::spawn(async move {
        laptop_tx.send(to(peer, Message::binary(largest))).await.unwrap();
        let _ = laptop_tx.send(to(peer, Message::binary(vec![0u8; limit + 1]))).await;
        laptop_tx
    });
    match next(&mut handset).await {
        Message::Binary(payload) => {
            assert_eq!(payload.len(), limit);
            assert!(payload.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        }
        other => panic!("expected the 16 MiB frame, got {other:?}"),
    }
    let close = loop {
        match timeout(WAIT, laptop_rx.next()).await.expect("close in time") {
            Some(Ok(Message::Close(frame))) => break frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close, Some(CloseCode::Size));
    assert_eq!(u16::from(CloseCode::Size), 1009);
    expect_presence(&mut handset, PeerState::Left).await;
    let _ = timeout(WAIT, sending).await;

    // From a phone, the same: 16 MiB pass (in parts) and more close it 1009.
    let (mut laptop, handset, _, peer) = pair(&relay).await;
    let largest: Vec<u8> = (0..limit).map(|i| (i % 241) as u8).collect();
    let (mut handset_tx, mut handset_rx) = handset.split();
    let sending = tokio::spawn(async move {
        handset_tx.send(Message::binary(largest)).await.unwrap();
        let _ = handset_tx.send(Message::binary(vec![0u8; limit + 1])).await;
        handset_tx
    });
    match relayed(&mut laptop).await {
        FromRelay::Frame(from, Message::Binary(payload)) => {
            assert_eq!((from, payload.len()), (peer, limit));
            assert!(payload.iter().enumerate().all(|(i, b)| *b == (i % 241) as u8));
        }
        other => panic!("expected the 16 MiB frame, got {other:?}"),
    }
    assert_eq!(expect_close(&mut handset_rx).await.0, 1009);
    expect_left(&mut laptop, peer).await;
    let _ = timeout(WAIT, sending).await;
}

/// A relay that pings every 200 ms and drops a socket silent for 800 ms, with those limits.
async fn short_ping_relay() -> (TestRelay, SocketLimits) {
    let limits = SocketLimits {
        ping_interval: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(800),
        ..SocketLimits::default()
    };
    (TestRelay::with_config(RelayConfig { limits, ..Default::default() }).await, limits)
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_dropped_within_the_idle_timeout() {
    let (relay, limits) = short_ping_relay().await;
    let code = new_code();
    let mut handset = phone(&relay, &code).await;

    // The laptop upgrades by hand and then neither reads nor writes anything.
    let mut silent = TcpStream::connect(relay.addr).await.unwrap();
    silent.write_all(upgrade_request(&format!("/agent?code={code}"), "").as_bytes()).await.unwrap();
    expect_presence(&mut handset, PeerState::Joined).await;
    // Keep the phone's socket read so it answers pings, while the silent laptop is dropped.
    let dropped = async {
        let mut received = Vec::new();
        timeout(WAIT, silent.read_to_end(&mut received)).await.expect("dropped in time").unwrap();
        received
    };
    let (received, ()) = tokio::join!(dropped, expect_presence(&mut handset, PeerState::Left));
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 101"), "{text:?}");
    let head_len = text.find("\r\n\r\n").unwrap() + 4;
    let frames = server_frames(&received[head_len..]);
    let opcodes: Vec<u8> = frames.iter().map(|(opcode, _)| *opcode).collect();
    // Pinged while silent, and dropped once the idle timeout had passed since it was last heard:
    // a ping goes out each quiet interval, so the count before the close measures the wait.
    let pings = opcodes.iter().filter(|op| **op == 0x9).count();
    let most = (limits.idle_timeout.as_millis() / limits.ping_interval.as_millis()) as usize + 1;
    assert!((2..=most).contains(&pings), "{pings} pings before the drop: {opcodes:?}");
    assert_eq!(
        frames.last().map(|(op, payload)| (*op, payload[..2].to_vec())),
        Some((0x8, 1001u16.to_be_bytes().to_vec()))
    );

    // A phone that answers pings (the client does so while reading) outlives several timeouts.
    let mut laptop = agent(&relay, &code).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    // Twice as many pings as fit in the idle timeout: both sockets outlived it more than once.
    let enough = 2 * most;
    tokio::join!(answer_pings(&mut laptop, enough), answer_pings(&mut handset, enough));
    send(&mut laptop, to(peer, Message::text("still paired"))).await;
    expect_text(&mut handset, "still paired").await;
}

/// Reads `count` pings (the client answers them) and nothing else.
async fn answer_pings<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut Client<S>, count: usize) {
    for _ in 0..count {
        match next_any(ws).await {
            Message::Ping(_) => {}
            other => panic!("a live socket got {other:?}"),
        }
    }
}

/// Splits what a relay wrote into (opcode, payload) frames; server frames are unmasked.
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while let Some(((_, opcode, payload), used)) = parse_server_frame(bytes) {
        frames.push((opcode, payload));
        bytes = &bytes[used..];
    }
    assert!(bytes.is_empty(), "trailing bytes {bytes:?}");
    frames
}

#[tokio::test]
async fn a_slow_upload_of_one_large_message_is_not_taken_for_silence() {
    let (relay, _) = short_ping_relay().await;
    let code = new_code();
    let mut handset = phone(&relay, &code).await;
    let mut laptop = raw_upgraded(relay.addr, &format!("/agent?code={code}")).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    let joined = read_server_frames(&mut laptop, |frames| !frames.is_empty()).await;
    let (_, peer, _) = relay_framing::split(&joined[0].2).unwrap();

    // One 20 KiB binary message trickling in over about 2 s, far past the idle timeout, from a
    // client that never reads (so never answers a ping): only the bytes themselves show life.
    let payload: Vec<u8> = (0..20 * 1024).map(|i| (i % 251) as u8).collect();
    let mut frame = frame_header(true, 0x2, relay_framing::HEADER_LEN + payload.len());
    frame.extend_from_slice(&relay_framing::header(Kind::Binary, peer));
    let upload = async {
        laptop.write_all(&frame).await.unwrap();
        for chunk in payload.chunks(1024) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            laptop.write_all(chunk).await.unwrap();
        }
    };
    // The phone keeps reading (and so answers its pings) while the upload goes on.
    let (_, received) = tokio::join!(upload, next(&mut handset));
    match received {
        Message::Binary(received) => assert_eq!(received.as_ref(), &payload[..]),
        other => panic!("expected the uploaded message, got {other:?}"),
    }
}

/// `GET /metrics`, as Prometheus scrapes it.
async fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Serves the relay's metrics on a listener of its own.
async fn serve_metrics(metrics: Arc<voxa::relay::metrics::RelayMetrics>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(voxa::relay::serve_metrics(listener, metrics, std::future::pending()));
    addr
}

/// The code of the relay's close frame on a raw socket, or `None` if the connection ends first.
async fn raw_close(tcp: &mut TcpStream) -> Option<u16> {
    let is_close = |frame: &ServerFrame| frame.1 == 0x8;
    let frames = read_server_frames(tcp, |frames| frames.iter().any(is_close)).await;
    let (_, _, payload) = frames.into_iter().find(is_close)?;
    Some(u16::from_be_bytes(payload.get(..2)?.try_into().ok()?))
}

#[tokio::test]
async fn metrics_count_what_clients_did_and_never_show_a_code_or_token() {
    const PAIRS: usize = 12;
    const FRAMES: usize = 40;
    const PHONE_FRAME: usize = 100;
    let token = "metrics-relay-token-5b1f0c";
    let limits = SocketLimits { max_frame_len: 64 << 10, ..SocketLimits::default() };
    let config = RelayConfig { token: Some(Secret::from_string(token.into())), limits, ..Default::default() };
    let metrics_addr = serve_metrics(Arc::clone(&config.metrics)).await;
    let relay = TestRelay::with_config(config).await;
    let connect = |path: String| async move { try_connect(relay.addr, &path, Some(token)).await.unwrap() };

    // Refusals the test causes, one of each.
    let bearer = format!("Authorization: Bearer {token}\r\n");
    assert_eq!(http(relay.addr, &upgrade_request("/agent?code=XYZ", &bearer)).await.0, 400);
    let no_token = http(relay.addr, &upgrade_request(&format!("/ws?code={}", new_code()), "")).await;
    assert_eq!(no_token.0, 401);
    assert_eq!(http(relay.addr, &upgrade_request("/elsewhere", "")).await.0, 404);
    let too_big_code = new_code();
    let mut too_big = connect(format!("/agent?code={too_big_code}")).await;
    // The relay's header comes on top of the limit.
    send(&mut too_big, Message::binary(vec![0u8; (64 << 10) + relay_framing::HEADER_LEN + 1])).await;
    assert_eq!(expect_close(&mut too_big).await.0, 1009);

    let codes: Vec<String> = (0..PAIRS).map(|_| new_code()).collect();
    let mut sides = Vec::new();
    for code in &codes {
        let mut laptop = connect(format!("/agent?code={code}")).await;
        let mut handset = connect(format!("/ws?code={code}")).await;
        expect_presence(&mut handset, PeerState::Joined).await;
        let peer = expect_joined(&mut laptop).await;
        sides.push((laptop, handset, peer));
    }
    // One agent is replaced by a newer one (4001).
    let mut newer = connect(format!("/agent?code={}", codes[0])).await;
    assert_eq!(expect_joined(&mut newer).await, sides[0].2);
    assert_eq!(expect_close(&mut sides[0].0).await.0, 4001);
    sides[0].0 = newer;
    expect_presence(&mut sides[0].1, PeerState::Left).await;
    expect_presence(&mut sides[0].1, PeerState::Joined).await;

    // The load: each agent sends text frames of known sizes, each phone binary frames back.
    let text_frame = |pair: usize, i: usize| format!("pair {pair} frame {i} {}", "x".repeat(i));
    let mut load = tokio::task::JoinSet::new();
    for (pair, (laptop, handset, peer)) in sides.into_iter().enumerate() {
        load.spawn(async move {
            let (mut laptop_tx, mut laptop_rx) = laptop.split();
            let (mut handset_tx, mut handset_rx) = handset.split();
            let sending = async {
                for i in 0..FRAMES {
                    laptop_tx.send(to(peer, Message::text(text_frame(pair, i)))).await.unwrap();
                    handset_tx.send(Message::binary(vec![i as u8; PHONE_FRAME])).await.unwrap();
                }
            };
            let receiving = async {
                for i in 0..FRAMES {
                    assert_eq!(next(&mut handset_rx).await, Message::text(text_frame(pair, i)));
                    let from_phone = FromRelay::Frame(peer, Message::binary(vec![i as u8; PHONE_FRAME]));
                    assert_eq!(relayed(&mut laptop_rx).await, from_phone);
                }
            };
            tokio::join!(sending, receiving);
            (laptop_tx.reunite(laptop_rx).unwrap(), handset_tx.reunite(handset_rx).unwrap())
        });
    }
    let during = scrape(metrics_addr).await;
    let sides = timeout(WAIT * 3, load.join_all()).await.expect("load done");
    let after = scrape(metrics_addr).await;

    for text in [&during, &after] {
        for secret in codes.iter().chain([&too_big_code]).map(String::as_str).chain([token]) {
            for part in [secret, &secret[..16], &secret[16..]] {
                assert!(!text.contains(part), "a code or token in the metrics:\n{text}");
            }
        }
        assert_eq!(sample(text, "voxa_relay_pairs"), PAIRS as f64);
        assert_eq!(sample(text, r#"voxa_relay_sockets{role="agent"}"#), PAIRS as f64);
        assert_eq!(sample(text, r#"voxa_relay_sockets{role="phone"}"#), PAIRS as f64);
    }
    let text_bytes: usize = (0..PAIRS).flat_map(|pair| (0..FRAMES).map(move |i| text_frame(pair, i).len())).sum();
    let expect = [
        (r#"voxa_relay_frames_forwarded_total{direction="agent_to_phone"}"#, PAIRS * FRAMES),
        (r#"voxa_relay_bytes_forwarded_total{direction="agent_to_phone"}"#, text_bytes),
        (r#"voxa_relay_frames_forwarded_total{direction="phone_to_agent"}"#, PAIRS * FRAMES),
        (r#"voxa_relay_bytes_forwarded_total{direction="phone_to_agent"}"#, PAIRS * FRAMES * PHONE_FRAME),
        (r#"voxa_relay_refusals_total{reason="400"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="401"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="404"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="1009"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="4001"}"#, 1),
        (r#"voxa_relay_refusals_total{reason="503"}"#, 0),
        (r#"voxa_relay_refusals_total{reason="1013"}"#, 0),
        (r#"voxa_relay_limit{limit="max_message_bytes"}"#, 64 << 10),
        (r#"voxa_relay_limit{limit="memory_budget_bytes"}"#, voxa::relay::MEMORY_BUDGET),
    ];
    for (series, value) in expect {
        assert_eq!(sample(&after, series), value as f64, "{series}");
    }
    assert!(after.contains("# TYPE voxa_relay_queue_full_events counter"), "{after}");

    // Sockets leaving show in the gauges.
    drop(sides);
    let deadline = Instant::now() + WAIT;
    while sample(&scrape(metrics_addr).await, r#"voxa_relay_sockets{role="phone"}"#) != 0.0 {
        assert!(Instant::now() < deadline, "sockets never left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let empty = scrape(metrics_addr).await;
    assert_eq!(sample(&empty, "voxa_relay_pairs"), 0.0);
    assert_eq!(sample(&empty, "voxa_relay_buffered_bytes"), 0.0);
}

/// Floods a phone that reads nothing, until the phone's socket is closed (the agent hears
/// `LEFT`); then the phone reads what reached it, and the close code.
async fn flood_until_left(laptop: Client, handset: &mut Client, peer: u32, frame: usize) -> (Client, u16, usize) {
    let (mut laptop_tx, mut laptop_rx) = laptop.split();
    let flood = async {
        loop {
            laptop_tx.send(to(peer, Message::binary(vec![7u8; frame]))).await.unwrap();
        }
    };
    let phone_left = async {
        loop {
            if relayed(&mut laptop_rx).await == FromRelay::Left(peer) {
                return;
            }
        }
    };
    tokio::select! {
        () = flood => unreachable!(),
        () = phone_left => {}
    }
    let (close, received) = expect_close(handset).await;
    (laptop_tx.reunite(laptop_rx).unwrap(), close, received)
}

#[tokio::test]
async fn a_reader_that_falls_behind_is_closed_1013_and_its_queue_stays_bounded() {
    const QUEUE: usize = 8;
    const FRAME: usize = 64 << 10;
    let limits =
        SocketLimits { send_queue_frames: QUEUE, stall_timeout: Duration::from_millis(300), ..SocketLimits::default() };
    let relay = TestRelay::with_config(RelayConfig { limits, ..Default::default() }).await;
    let (laptop, mut handset, code, peer) = pair(&relay).await;

    // The phone reads nothing while the laptop floods it; then it reads: what it gets is bounded
    // by the queue and the kernel's socket buffers, and then the close frame.
    let (mut laptop, close, received) = flood_until_left(laptop, &mut handset, peer, FRAME).await;
    assert_eq!(close, 1013);
    assert!(received <= 512, "phone received {received} fragments: the relay's backlog is not bounded");

    // The laptop's socket is unharmed: a new phone pairs with it.
    let mut new_handset = phone(&relay, &code).await;
    expect_presence(&mut new_handset, PeerState::Joined).await;
    let new_peer = expect_joined(&mut laptop).await;
    send(&mut laptop, to(new_peer, Message::text("still here"))).await;
    expect_text(&mut new_handset, "still here").await;
}

#[tokio::test]
async fn over_the_memory_budget_the_oldest_heavy_socket_is_closed_1013_and_the_rest_go_on() {
    const BUDGET: usize = 2 << 20;
    // Queues long enough to pass the budget, and no stall timeout to rescue the relay: only the
    // memory budget bounds what readers that read nothing make it hold.
    let limits = SocketLimits {
        max_frame_len: 1 << 20,
        send_queue_bytes: 4 << 20,
        stall_timeout: Duration::from_secs(3600),
        ..SocketLimits::default()
    };
    let config = RelayConfig { limits, memory_budget: BUDGET, ..Default::default() };
    let metrics = Arc::clone(&config.metrics);
    let relay = TestRelay::with_config(config).await;
    let (laptop, mut handset, code, peer) = pair(&relay).await;
    let (mut other_laptop, mut other_handset, _, other_peer) = pair(&relay).await;

    let (mut laptop, close, _) = flood_until_left(laptop, &mut handset, peer, 256 << 10).await;
    assert_eq!(close, 1013);
    let text = metrics.encode();
    assert_eq!(sample(&text, r#"voxa_relay_refusals_total{reason="1013"}"#), 1.0, "{text}");

    // The other pair was never touched, and the flooding agent itself goes on.
    send(&mut other_laptop, to(other_peer, Message::text("untouched"))).await;
    expect_text(&mut other_handset, "untouched").await;
    let mut new_handset = phone(&relay, &code).await;
    expect_presence(&mut new_handset, PeerState::Joined).await;
    let new_peer = expect_joined(&mut laptop).await;
    send(&mut laptop, to(new_peer, Message::text("still here"))).await;
    expect_text(&mut new_handset, "still here").await;
    drop((laptop, new_handset));
    let deadline = Instant::now() + WAIT;
    while sample(&metrics.encode(), "voxa_relay_buffered_bytes") != 0.0 {
        assert!(Instant::now() < deadline, "the relay still holds bytes:\n{}", metrics.encode());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn announcing_large_messages_costs_the_relay_only_what_arrives() {
    const SOCKETS: usize = 100;
    const ANNOUNCED: usize = 16 << 20;
    let relay = RelayCommand::spawn(&["--max-connections-per-ip", "0"], &[]).await;
    let pid = relay.child.id().unwrap();
    let mut sockets = Vec::new();
    for _ in 0..SOCKETS {
        let code = new_code();
        let mut laptop = try_connect(relay.addr, &format!("/agent?code={code}"), None).await.unwrap();
        let handset = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
        let peer = expect_joined(&mut laptop).await;
        sockets.push((laptop, handset, peer));
    }
    let before = proc_memory(pid, "VmData");
    // Each phone announces the largest message and sends 1 KiB of it, which reaches its agent.
    for (_, handset, _) in &mut sockets {
        handset.write_all(&frame_header(true, 0x2, ANNOUNCED)).await.unwrap();
        handset.write_all(&[1u8; 1024]).await.unwrap();
    }
    for (laptop, _, peer) in &mut sockets {
        let mut got = 0;
        while got < 1024 {
            let Message::Binary(data) = next(laptop).await else { panic!("binary messages only") };
            let (kind, from, part) = relay_framing::split(&data).unwrap();
            assert_eq!((kind, from), (Kind::Part, *peer));
            got += part.len();
        }
    }
    let grown = proc_memory(pid, "VmData").saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "{SOCKETS} announcements of {} MiB took {} MiB of the relay's address space",
        ANNOUNCED >> 20,
        grown >> 20
    );
    drop(sockets);
    let (status, _, _) = relay.terminate().await;
    assert!(status.success());
}

/// Issue 30: 60 sockets each sending 15 MiB of a 16 MiB frame grew the relay past its own
/// budget, which it reached holding whole messages. Parts go on (or, with nobody to take them,
/// away) as they arrive: the relay holds a part per socket, whatever the senders do.
#[tokio::test]
async fn sockets_sending_most_of_a_large_message_cost_the_relay_a_part_each() {
    const SOCKETS: usize = 16;
    const MESSAGE: usize = 16 << 20;
    const SENT: usize = 15 << 20;
    let relay = RelayCommand::spawn(&["--max-connections-per-ip", "0", "--memory-budget", "64"], &[]).await;
    let pid = relay.child.id().unwrap();
    let baseline = proc_memory(pid, "VmRSS");
    let chunk = vec![3u8; 1 << 20];
    let mut flooding = tokio::task::JoinSet::new();
    for n in 0..SOCKETS {
        let code = new_code();
        // Half of them have an agent that reads, half nobody to send to.
        let laptop = match n % 2 {
            0 => Some(try_connect(relay.addr, &format!("/agent?code={code}"), None).await.unwrap()),
            _ => None,
        };
        let mut socket = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
        let chunk = chunk.clone();
        flooding.spawn(async move {
            let reading = async {
                if let Some(mut laptop) = laptop {
                    let mut got = 0usize;
                    while got < SENT {
                        if let Message::Binary(data) = next(&mut laptop).await {
                            got += data.len().saturating_sub(relay_framing::HEADER_LEN);
                        }
                    }
                }
            };
            let writing = async {
                socket.write_all(&frame_header(true, 0x2, MESSAGE)).await.unwrap();
                for _ in 0..SENT / chunk.len() {
                    socket.write_all(&chunk).await.unwrap();
                }
            };
            tokio::join!(reading, writing);
            socket
        });
    }
    let sockets = timeout(WAIT * 6, flooding.join_all()).await.expect("floods finish");
    // Every socket has sent all it will: what the relay holds now is its peak.
    let rss = proc_memory(pid, "VmRSS");
    let bound = baseline + (24 << 20);
    assert!(
        rss < bound,
        "{SOCKETS} sockets sending {} MiB each took the relay to {} MiB (bound {} MiB)",
        SENT >> 20,
        rss >> 20,
        bound >> 20
    );
    // None of them was closed: each finishes its message and its close is answered.
    for mut socket in sockets {
        socket.write_all(&chunk).await.unwrap();
        socket.write_all(&[0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8]).await.unwrap();
        assert_eq!(raw_close(&mut socket).await, Some(1000), "closed by the relay before its own close");
    }
    let (status, _, _) = relay.terminate().await;
    assert!(status.success());
}
#[tokio::test]
async fn one_address_cannot_hold_every_connection() {
    const PER_IP: usize = 3;
    let config = RelayConfig { max_connections_per_ip: PER_IP, ..Default::default() };
    let metrics = Arc::clone(&config.metrics);
    let relay = TestRelay::with_config(config).await;
    // Connections that send nothing at all, as a slot-hoarding client would open them.
    let mut idle = Vec::new();
    for _ in 0..PER_IP {
        idle.push(TcpStream::connect(relay.addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(relay.addr).await.unwrap();
    let mut response = Vec::new();
    timeout(WAIT, extra.read_to_end(&mut response)).await.unwrap().unwrap();
    assert_eq!(parse_response(&response).0, 429);
    assert_eq!(sample(&metrics.encode(), r#"voxa_relay_refusals_total{reason="429"}"#), 1.0);

    // One of them leaves: its place is free for the same address again.
    drop(idle.pop());
    let deadline = Instant::now() + WAIT;
    loop {
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").await.unwrap();
        let mut response = Vec::new();
        if let Ok(Ok(_)) = timeout(WAIT, tcp.read_to_end(&mut response)).await {
            if !response.is_empty() && parse_response(&response).0 == 200 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the relay never freed the address's place");
        tokio::task::yield_now().await;
    }
}

/// Memory of a process, in bytes, from one `/proc/<pid>/status` field (`VmRSS`, `VmData`).
fn proc_memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    kib * 1024
}
