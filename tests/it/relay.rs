//! The relay (docs/PROTOCOL.md, "Relay") on 127.0.0.1:0, driven by real WebSocket clients as the laptop and the
//! phones would drive it, plus raw TCP clients where a misbehaving peer is the point. The laptop's side speaks
//! the relay framing (`voxa-relay.2`); limits, metrics and memory are in `relay_limits`.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use voxa::protocol::relay::{self as relay_framing, Kind, MAX_PHONES_PER_CODE};
use voxa::protocol::PeerState;
use voxa::relay::RelayConfig;

use crate::support::harness::{bare_upgrade_request, http, upgrade_request, TestRelay, STEP as WAIT};
use crate::support::relay::{
    agent, expect_close, expect_from, expect_joined, expect_left, expect_presence, expect_text, frame_header, new_code,
    next, next_any, pair, phone, presence, raw_upgraded, read_server_frames, relayed, sample, send, to, FromRelay,
    ServerFrame,
};

fn numbered_frame(from: &str, i: usize) -> Message {
    if i % 2 == 0 {
        Message::text(format!("{from} {i} ünïcode"))
    } else {
        Message::binary((0..i % 700).map(|b| (b + i) as u8).collect::<Vec<u8>>())
    }
}

#[tokio::test]
async fn copies_text_and_binary_both_ways_unchanged_and_in_order() {
    const FRAMES: usize = 1000;
    let relay = TestRelay::start().await;
    let (laptop, handset, _, peer) = pair(&relay).await;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();
    let (mut handset_tx, mut handset_rx) = handset.split();
    let laptop_sends = async {
        for i in 0..FRAMES {
            laptop_tx.feed(to(peer, numbered_frame("agent", i))).await.unwrap();
        }
        timeout(WAIT, laptop_tx.flush()).await.unwrap().unwrap();
    };
    let handset_sends = async {
        for i in 0..FRAMES {
            handset_tx.feed(numbered_frame("phone", i)).await.unwrap();
        }
        timeout(WAIT, handset_tx.flush()).await.unwrap().unwrap();
    };
    let handset_gets = async {
        for i in 0..FRAMES {
            assert_eq!(next(&mut handset_rx).await, numbered_frame("agent", i), "frame {i} from the agent");
        }
    };
    let laptop_gets = async {
        for i in 0..FRAMES {
            assert_eq!(relayed(&mut laptop_rx).await, FromRelay::Frame(peer, numbered_frame("phone", i)), "frame {i}");
        }
    };
    tokio::join!(laptop_sends, handset_sends, handset_gets, laptop_gets);
    relay.shut_down(WAIT).await;
}

#[tokio::test]
async fn each_side_hears_when_the_other_joins_and_leaves() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    // A phone arriving second hears about the agent already there, and the agent about it.
    let mut handset = phone(&relay, &code).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    let first = expect_joined(&mut laptop).await;

    handset.close(None).await.unwrap();
    expect_left(&mut laptop, first).await;

    let mut handset = phone(&relay, &code).await;
    let second = expect_joined(&mut laptop).await;
    assert_ne!(first, second, "a peer id is never reused");
    expect_presence(&mut handset, PeerState::Joined).await;

    // A vanished TCP connection (no close frame) counts as leaving too.
    drop(laptop);
    expect_presence(&mut handset, PeerState::Left).await;

    // Codes are independent: another pair never hears about this one.
    let (mut other_laptop, _other_handset, _, other_peer) = pair(&relay).await;
    let mut laptop = agent(&relay, &code).await;
    let peer = expect_joined(&mut laptop).await;
    assert_eq!(peer, second, "a new agent hears of the phone already there, by its id");
    expect_presence(&mut handset, PeerState::Joined).await;
    send(&mut other_laptop, to(other_peer, Message::text("only mine"))).await;
    send(&mut other_laptop, to(peer, Message::text("not even with its id"))).await;
    send(&mut laptop, to(peer, Message::text("for this phone"))).await;
    expect_text(&mut handset, "for this phone").await;
}

#[tokio::test]
async fn several_phones_share_a_code_each_with_its_own_frames_up_to_the_limit() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    let mut phones = Vec::new();
    for _ in 0..MAX_PHONES_PER_CODE {
        let mut handset = phone(&relay, &code).await;
        expect_presence(&mut handset, PeerState::Joined).await;
        phones.push((expect_joined(&mut laptop).await, handset));
    }
    // One more is refused: closed 4003 right after its upgrade; the others are undisturbed.
    let mut ninth = phone(&relay, &code).await;
    assert_eq!(expect_close(&mut ninth).await, (relay_framing::close::TOO_MANY_PHONES, 0));

    for (n, (peer, handset)) in phones.iter_mut().enumerate() {
        send(handset, Message::text(format!("from phone {n}"))).await;
        expect_from(&mut laptop, *peer, Message::text(format!("from phone {n}"))).await;
        send(&mut laptop, to(*peer, Message::binary(vec![n as u8; 3]))).await;
    }
    for (n, (_, handset)) in phones.iter_mut().enumerate() {
        assert_eq!(next(handset).await, Message::binary(vec![n as u8; 3]), "only its own frame");
    }
    // The agent closes one phone with a code and reason of its choosing.
    let (closed_peer, mut closed) = phones.remove(0);
    send(&mut laptop, Message::binary(relay_framing::close_peer(closed_peer, 1008, "executor-unauthenticated"))).await;
    match timeout(WAIT, closed.next()).await.unwrap() {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!((u16::from(frame.code), frame.reason.as_str()), (1008, "executor-unauthenticated"))
        }
        other => panic!("expected the agent's close, got {other:?}"),
    }
    expect_left(&mut laptop, closed_peer).await;
    // Its place is free again.
    let mut again = phone(&relay, &code).await;
    expect_presence(&mut again, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    send(&mut laptop, to(peer, Message::text("welcome"))).await;
    expect_text(&mut again, "welcome").await;
}

#[tokio::test]
async fn an_agent_without_the_relay_framing_is_refused_with_a_sentence() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let (status, body) = http(relay.addr, &bare_upgrade_request(&format!("/agent?code={code}"), "")).await;
    assert_eq!((status, body.as_str()), (426, relay_framing::OLD_AGENT_REFUSAL));
    assert!(body.contains("newer voxa agent"), "{body}");
    let older = "Sec-WebSocket-Protocol: voxa-relay.1\r\n";
    assert_eq!(http(relay.addr, &bare_upgrade_request(&format!("/agent?code={code}"), older)).await.0, 426);
    // A phone needs no subprotocol, and an agent offering it is told it was chosen.
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(upgrade_request(&format!("/agent?code={code}"), "").as_bytes()).await.unwrap();
    let mut head = vec![0u8; 512];
    let n = timeout(WAIT, tcp.read(&mut head)).await.unwrap().unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 101") && head.contains("sec-websocket-protocol: voxa-relay.2"), "{head}");
}

#[tokio::test]
async fn notices_cannot_be_forged_and_any_other_text_goes_through() {
    let relay = TestRelay::start().await;
    let (mut laptop, mut handset, _, peer) = pair(&relay).await;
    // An agent's text frame starting with U+0001 would be a notice to the phone: dropped.
    send(&mut laptop, to(peer, Message::text(presence(PeerState::Left)))).await;
    // A phone's is data to the agent, wrapped like every frame it sends: it cannot pose as the relay.
    send(&mut handset, Message::text(presence(PeerState::Left))).await;
    expect_from(&mut laptop, peer, Message::text(presence(PeerState::Left))).await;
    // JSON presence of old is an ordinary frame now, and so is text that is not JSON at all.
    for text in [r#"{"type":"__peer","peer":"agent","state":"left"}"#, r"C:\users\me", r#"{"path":"C:\users\me"}"#] {
        send(&mut handset, Message::text(text)).await;
        expect_from(&mut laptop, peer, Message::text(text)).await;
        send(&mut laptop, to(peer, Message::text(text))).await;
        expect_text(&mut handset, text).await;
    }
    // The same bytes in a binary frame are data both ways.
    send(&mut laptop, to(peer, Message::binary(presence(PeerState::Left).into_bytes()))).await;
    assert_eq!(next(&mut handset).await, Message::binary(presence(PeerState::Left).into_bytes()));
}

#[tokio::test]
async fn a_newer_agent_replaces_the_older_one_with_4001() {
    let relay = TestRelay::start().await;
    let (mut old_laptop, mut handset, code, peer) = pair(&relay).await;
    let mut new_laptop = agent(&relay, &code).await;

    let (code_seen, _) = expect_close(&mut old_laptop).await;
    assert_eq!(code_seen, 4001);
    assert_eq!(expect_joined(&mut new_laptop).await, peer);
    expect_presence(&mut handset, PeerState::Left).await;
    expect_presence(&mut handset, PeerState::Joined).await;

    send(&mut handset, Message::text("to the new laptop")).await;
    expect_from(&mut new_laptop, peer, Message::text("to the new laptop")).await;
    send(&mut new_laptop, to(peer, Message::text("from the new laptop"))).await;
    expect_text(&mut handset, "from the new laptop").await;

    // Phones do not replace each other: a second one joins beside the first.
    let mut second = phone(&relay, &code).await;
    expect_presence(&mut second, PeerState::Joined).await;
    let second_peer = expect_joined(&mut new_laptop).await;
    send(&mut new_laptop, to(peer, Message::text("still for the first"))).await;
    expect_text(&mut handset, "still for the first").await;
    send(&mut new_laptop, to(second_peer, Message::text("for the second"))).await;
    expect_text(&mut second, "for the second").await;
}

#[tokio::test]
async fn frames_without_a_peer_are_dropped_not_delivered_later() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    send(&mut laptop, to(1, Message::text("nobody hears this"))).await;
    send(&mut laptop, to(1, Message::binary(vec![1, 2, 3]))).await;
    // Round trip through the relay so both frames were surely read before the phone arrives.
    send(&mut laptop, Message::Ping(b"sync".to_vec().into())).await;
    assert_eq!(next_any(&mut laptop).await, Message::Pong(b"sync".to_vec().into()));

    let mut handset = phone(&relay, &code).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    send(&mut laptop, to(peer, Message::text("now heard"))).await;
    expect_text(&mut handset, "now heard").await;
}

/// Issue 30: with 256 KiB frames, a phone that took the place of one that left received part of
/// what the agent had sent the one before. Every frame is for one peer id now.
#[tokio::test]
async fn frames_for_a_phone_that_left_never_reach_the_phone_after_it() {
    const FRAME: usize = 256 << 10;
    const FRAMES: usize = 32;
    let relay = TestRelay::start().await;
    let (laptop, mut first, code, first_peer) = pair(&relay).await;
    let (mut laptop_tx, mut laptop_rx) = laptop.split();
    // The first phone reads one frame, then the agent floods it while it leaves.
    laptop_tx.send(to(first_peer, Message::binary(vec![1u8; FRAME]))).await.unwrap();
    assert_eq!(next(&mut first).await, Message::binary(vec![1u8; FRAME]));
    let flood = tokio::spawn(async move {
        for _ in 0..FRAMES {
            if laptop_tx.send(to(first_peer, Message::binary(vec![1u8; FRAME]))).await.is_err() {
                break;
            }
        }
        laptop_tx
    });
    drop(first);
    let mut second = phone(&relay, &code).await;
    expect_presence(&mut second, PeerState::Joined).await;
    let second_peer = loop {
        match relayed(&mut laptop_rx).await {
            FromRelay::Left(peer) => assert_eq!(peer, first_peer),
            FromRelay::Joined(peer) => break peer,
            other => panic!("{other:?}"),
        }
    };
    let mut laptop_tx = timeout(WAIT, flood).await.unwrap().unwrap();
    laptop_tx.send(to(second_peer, Message::text("yours"))).await.unwrap();
    // The first thing the new phone gets is its own frame: none of the flood.
    assert_eq!(next(&mut second).await, Message::text("yours"));
}

#[tokio::test]
async fn every_ping_is_answered_even_ten_in_a_row() {
    let relay = TestRelay::start().await;
    let (mut laptop, mut handset, _, _) = pair(&relay).await;
    // Ten pings in one write, before the relay could answer any (Autobahn 2.10 and 2.11).
    for socket in [&mut handset, &mut laptop] {
        for n in 0..10u8 {
            socket.feed(Message::Ping(vec![n; 10].into())).await.unwrap();
        }
        socket.flush().await.unwrap();
        for n in 0..10u8 {
            assert_eq!(next_any(socket).await, Message::Pong(vec![n; 10].into()), "pong {n}");
        }
    }
}

/// Issue 30: the relay held whole messages. A phone's message now reaches the agent in parts as
/// it arrives, and a phone that dies in the middle of one is `LEFT` for the agent.
#[tokio::test]
async fn a_phones_message_goes_on_in_parts_as_it_arrives_and_a_phone_dying_mid_message_leaves() {
    const MESSAGE: usize = 1 << 20;
    const SENT: usize = 200 << 10;
    let config = RelayConfig::default();
    let metrics = Arc::clone(&config.metrics);
    let relay = TestRelay::with_config(config).await;
    let code = new_code();
    let mut laptop = agent(&relay, &code).await;
    let mut handset = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
    let peer = expect_joined(&mut laptop).await;
    let payload: Vec<u8> = (0..SENT).map(|i| (i % 251) as u8).collect();
    handset.write_all(&frame_header(true, 0x2, MESSAGE)).await.unwrap();
    handset.write_all(&payload).await.unwrap();

    // Long before the message is complete, its first 200 KiB are at the agent, in parts.
    let mut got = Vec::new();
    while got.len() < SENT {
        let Message::Binary(data) = next(&mut laptop).await else { panic!("binary messages only") };
        let (kind, from, part) = relay_framing::split(&data).unwrap();
        assert_eq!((kind, from), (Kind::Part, peer));
        assert!(part.len() <= 16 << 10, "a part of {} bytes", part.len());
        got.extend_from_slice(part);
    }
    assert_eq!(got, payload);
    let held = sample(&metrics.encode(), "voxa_relay_buffered_bytes");
    assert!(held <= (64 << 10) as f64, "the relay holds {held} bytes of a message it forwards");

    // The phone's connection dies mid-message: the agent hears it left, and drops the part.
    drop(handset);
    expect_left(&mut laptop, peer).await;
}

/// And the other way: an agent's message reaches the phone as WebSocket fragments as it arrives;
/// an agent that dies in the middle of one closes the phone 4004 (the rest will never come).
#[tokio::test]
async fn an_agents_message_reaches_the_phone_in_fragments_and_an_agent_dying_mid_message_closes_it() {
    const MESSAGE: usize = 1 << 20;
    const SENT: usize = 200 << 10;
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut laptop = raw_upgraded(relay.addr, &format!("/agent?code={code}")).await;
    let mut handset = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
    // The phone hears the agent (a whole text frame), and its peer id arrives at the agent.
    let notice = read_server_frames(&mut handset, |frames| !frames.is_empty()).await;
    assert_eq!(notice, vec![(true, 0x1, presence(PeerState::Joined).into_bytes())]);
    let joined = read_server_frames(&mut laptop, |frames| !frames.is_empty()).await;
    let (kind, peer, _) = relay_framing::split(&joined[0].2).unwrap();
    assert_eq!(kind, Kind::Joined);

    let payload: Vec<u8> = (0..SENT).map(|i| (i % 251) as u8).collect();
    laptop.write_all(&frame_header(true, 0x2, relay_framing::HEADER_LEN + MESSAGE)).await.unwrap();
    laptop.write_all(&relay_framing::header(Kind::Binary, peer)).await.unwrap();
    laptop.write_all(&payload).await.unwrap();
    let received = |frames: &[ServerFrame]| frames.iter().map(|(_, _, data)| data.len()).sum::<usize>();
    let frames = read_server_frames(&mut handset, |frames| received(frames) >= SENT).await;
    assert_eq!(frames[0].1, 0x2, "the first fragment says binary");
    assert!(frames.iter().all(|(fin, _, _)| !fin), "no fragment ends a message that has not ended");
    assert!(frames[1..].iter().all(|(_, opcode, _)| *opcode == 0x0), "the rest are continuations");
    assert_eq!(frames.iter().flat_map(|(_, _, data)| data.clone()).collect::<Vec<u8>>(), payload);

    drop(laptop);
    let rest = read_server_frames(&mut handset, |frames| frames.iter().any(|(_, opcode, _)| *opcode == 0x8)).await;
    let close = rest.iter().find(|(_, opcode, _)| *opcode == 0x8).expect("a close frame");
    assert_eq!(u16::from_be_bytes([close.2[0], close.2[1]]), relay_framing::close::PEER_GONE_MID_MESSAGE);
}

/// A phone that starts a message before the agent arrives: the agent never sees its tail as a
/// frame of its own.
#[tokio::test]
async fn a_message_begun_before_the_agent_came_is_not_delivered_in_half() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let mut handset = raw_upgraded(relay.addr, &format!("/ws?code={code}")).await;
    handset.write_all(&frame_header(false, 0x1, 5)).await.unwrap();
    handset.write_all(b"{\"hal").await.unwrap();
    // A ping answered means the relay has read the first part.
    handset.write_all(&[0x89, 0x80, 0, 0, 0, 0]).await.unwrap();
    read_server_frames(&mut handset, |frames| frames.iter().any(|(_, opcode, _)| *opcode == 0xA)).await;
    let mut laptop = agent(&relay, &code).await;
    let peer = expect_joined(&mut laptop).await;
    handset.write_all(&frame_header(true, 0x0, 4)).await.unwrap();
    handset.write_all(b"f\":1").await.unwrap();
    handset.write_all(&frame_header(true, 0x1, 6)).await.unwrap();
    handset.write_all(b"whole!").await.unwrap();
    expect_from(&mut laptop, peer, Message::text("whole!")).await;
}
