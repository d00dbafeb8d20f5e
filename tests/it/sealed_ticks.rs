//! Sealed ticks (docs/PROTOCOL.md, "Sealed sessions (protocol 3)", "Ticks") with the real relay
//! and agent: a frame the relay drops — the phone's `cancel` of a running command — ends the
//! session within one tick interval and the phone says so; a sealed peer that goes silent is
//! ended `sealed-session-stalled`; a quiet session whose two ends are alive stays open.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use voxa::agent::LinkEvent;
use voxa::protocol::ErrorCode;
use voxa::seal::ticks::{STALL_AFTER, TICK_INTERVAL};

use crate::support::harness::*;
use crate::support::mitm::{drop_next_up, Mitm};

/// The close frame that ends `socket`, within `limit`; anything else it reads is skipped.
async fn closed_within(socket: &mut voxa::net::dial::ClientSocket, limit: Duration) -> Option<CloseFrame> {
    tokio::time::timeout(limit, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => continue,
                Some(Err(err)) => panic!("the socket failed instead of closing: {err}"),
                None => panic!("the socket ended without a close frame"),
            }
        }
    })
    .await
    .expect("the session ended in time")
}

#[tokio::test]
async fn a_relay_that_drops_the_phones_cancel_ends_the_session_within_one_tick_and_the_phone_says_so() {
    let relay = TestRelay::start().await;
    let mut agent = TestAgent::start(Some(relay.url())).await;
    let status = agent.agent.ctx.status.clone();
    let (armed, dropped) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let mitm = Mitm::start(relay.addr, agent.code(), drop_next_up(armed.clone(), dropped.clone())).await;
    let mut phone = mitm.phone(&agent).await;
    let long = json!({"type":"tool_call","id":"long","name":"run_command","args":{"command":"sleep 40"}});
    send(&mut phone, long).await;
    eventually("the command runs", || status.calls_in_flight.load(Ordering::Relaxed) == 1).await;

    armed.store(true, Ordering::SeqCst);
    let cancelled_at = Instant::now();
    send(&mut phone, json!({"type":"cancel","id":"long"})).await;
    // The cancel never arrives; the phone's next sealed frame is its tick, which cannot open.
    let close = closed_within(&mut phone, TICK_INTERVAL + STEP).await.expect("a close frame");
    let took = cancelled_at.elapsed();
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "exactly one frame dropped");
    assert_eq!((u16::from(close.code), close.reason.as_str()), (1008, "sealed-session-broken"));
    // Not before the tick that follows the lost frame, and within one interval of it.
    assert!(took > TICK_INTERVAL - Duration::from_secs(1), "it was the tick that told: {took:?}");
    assert!(took < TICK_INTERVAL + Duration::from_secs(3), "noticed within one interval: {took:?}");
    agent
        .wait_event("the agent ends the session", |event| {
            matches!(event, LinkEvent::PeerRefused { code: ErrorCode::SealedSessionBroken })
        })
        .await;
    // What a Rust client (`voxa call`, a host) says of it.
    let said = format!("{:#}", voxa::net::client::close_error(Some(close)));
    assert!(said.contains("sealed-session-broken") && said.contains("dropped"), "{said}");
    eprintln!("a dropped cancel was noticed after {took:?}: {said}");

    // The cancel did not reach the laptop: the command still runs, and a new session sees it and
    // can cancel it.
    assert_eq!(status.calls_in_flight.load(Ordering::Relaxed), 1, "the command was not cancelled");
    let mut again = agent.phone(&relay).await;
    send(&mut again, json!({"type":"calls"})).await;
    let calls = recv_type(&mut again, "calls").await;
    assert_eq!(calls["running"][0]["id"], "long", "{calls}");
    send(&mut again, json!({"type":"cancel","id":"long"})).await;
    assert_eq!(recv_result(&mut again, "long").await["error"]["code"], "cancelled");
}

/// A raw socket that completes a sealed hello by hand and then stays silent (no ticks), and the
/// agent's keys' other half to open what it sends.
/// Also when the hello went out: the agent's clock for the session starts after it.
async fn silent_sealed(url: &str, token: &str) -> (voxa::net::dial::ClientSocket, voxa::seal::Opener, Instant) {
    let mut socket = connect(url).await;
    let challenge = recv_challenge(&mut socket).await;
    let token = voxa::secret::Secret::from_string(token.to_owned());
    let (initiator, one) = voxa::seal::Initiator::start(&token, &challenge).unwrap();
    let hello = json!({"type":"hello","protocol":3,"noise": base64::engine::general_purpose::STANDARD.encode(one)});
    let sent = Instant::now();
    send(&mut socket, hello).await;
    let ok = recv_type(&mut socket, "hello_ok").await;
    let two = base64::engine::general_purpose::STANDARD.decode(ok["noise"].as_str().unwrap()).unwrap();
    let (keys, _) = initiator.finish(&two).unwrap();
    (socket, keys.opener, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_sealed_peer_is_ended_stalled_and_a_quiet_live_one_stays_open() {
    let relay = TestRelay::start().await;
    let mut agent = TestAgent::start(Some(relay.url())).await;
    let (mut relayed, mut relayed_keys, relayed_at) =
        silent_sealed(&format!("ws://{}/ws?code={}", relay.addr, agent.code()), agent.token()).await;
    let (mut local, mut local_keys, local_at) = silent_sealed(&agent.loopback_url(), agent.token()).await;
    // Beside them, a phone whose socket is read (and so ticks) but that sends nothing itself.
    let mut quiet = agent.phone(&relay).await;

    let (relayed_end, local_end, quiet_alive) = tokio::join!(
        async {
            // The agent ticks to a silent peer while it waits, then gives it up.
            let mut ticks = 0;
            let close = loop {
                match relayed.next().await {
                    Some(Ok(Message::Binary(data))) => {
                        let opened = relayed_keys.open(&data).unwrap();
                        assert!(matches!(opened, Some(voxa::seal::Plain::Json(ref t)) if t == r#"{"type":"tick"}"#));
                        ticks += 1;
                    }
                    Some(Ok(Message::Close(frame))) => break frame,
                    Some(Ok(_)) => continue,
                    other => panic!("{other:?}"),
                }
            };
            (close, ticks, relayed_at.elapsed())
        },
        async {
            loop {
                match local.next().await {
                    Some(Ok(Message::Binary(data))) => {
                        local_keys.open(&data).unwrap();
                    }
                    Some(Ok(Message::Close(frame))) => break (frame, local_at.elapsed()),
                    Some(Ok(_)) => continue,
                    other => panic!("{other:?}"),
                }
            }
        },
        async {
            // Nothing but ticks for longer than the stall limit; the session is still there.
            let quiet_for = STALL_AFTER + Duration::from_secs(5);
            let got = tokio::time::timeout(quiet_for, async {
                loop {
                    match quiet.next().await {
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                        other => return other,
                    }
                }
            })
            .await;
            assert!(got.is_err(), "the quiet phone's session ended or showed a frame: {got:?}");
            send(&mut quiet, json!({"type":"status"})).await;
            recv_type(&mut quiet, "status").await
        },
    );
    let (close, ticks, after) = relayed_end;
    let close = close.expect("a close frame");
    assert_eq!((u16::from(close.code), close.reason.as_str()), (1008, "sealed-session-stalled"));
    assert_eq!(ticks, 2, "ticks at 10 s and 20 s");
    assert!(after >= STALL_AFTER && after < STALL_AFTER + Duration::from_secs(3), "{after:?}");
    let (close, after) = local_end;
    let close = close.expect("a close frame");
    assert_eq!((u16::from(close.code), close.reason.as_str()), (1008, "sealed-session-stalled"));
    assert!(after >= STALL_AFTER && after < STALL_AFTER + Duration::from_secs(3), "{after:?}");
    assert_eq!(quiet_alive["type"], "status");
    agent
        .wait_event("the relayed stall is reported", |event| {
            matches!(event, LinkEvent::PeerRefused { code: ErrorCode::SealedSessionStalled })
        })
        .await;
    let _ = relayed.close(None).await;
    let _ = local.send(Message::Close(None)).await;
}
