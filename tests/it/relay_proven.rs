//! No lockout at the relay (docs/PROTOCOL.md, "Relay", relay framing 3): an agent that speaks
//! `voxa-relay.3` marks the phones that proved the pairing's token with `PROVEN`, and a full code
//! makes room for a newcomer by closing its oldest phone not proven — never a proven one. The
//! agent here is a real WebSocket client on `/agent` speaking the relay framing by hand, so the
//! relay's side is shown alone; the phones are real WebSocket clients on `/ws`.

use std::collections::VecDeque;

use futures_util::StreamExt;
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use voxa::protocol::relay::{self as relay_framing, close, Kind, AGENT_SUBPROTOCOLS, MAX_PHONES_PER_CODE};
use voxa::protocol::PeerState;

use crate::support::harness::{TestRelay, STEP as WAIT};
use crate::support::relay::{
    expect_close, expect_from, expect_joined, expect_left, expect_presence, expect_text, new_code, phone, relayed,
    send, to, Client, FromRelay,
};

/// An agent offering relay framings 3 and 2, as voxa agents do; the subprotocol the relay picked.
async fn agent_offering(relay: &TestRelay, code: &str, offer: &str) -> (Client, String) {
    let tcp = TcpStream::connect(relay.addr).await.unwrap();
    let mut request = format!("ws://{}/agent?code={code}", relay.addr).into_client_request().unwrap();
    request.headers_mut().insert("sec-websocket-protocol", offer.parse().unwrap());
    let (ws, response) = timeout(WAIT, tokio_tungstenite::client_async(request, tcp)).await.unwrap().unwrap();
    let picked = response.headers().get("sec-websocket-protocol").unwrap().to_str().unwrap().to_owned();
    (ws, picked)
}

/// The agent's word that phone `peer` proved the token, followed by a frame to `witness` (a phone
/// the agent already proved or just proved): once the witness has it, the relay has read the mark.
async fn prove(laptop: &mut Client, peer: u32, witness: (&mut Client, u32)) {
    send(laptop, Message::binary(relay_framing::message(Kind::Proven, peer, &[]))).await;
    let (phone, witness_peer) = witness;
    send(laptop, to(witness_peer, Message::text(format!("proved {peer}")))).await;
    expect_text(phone, &format!("proved {peer}")).await;
}

/// A phone joins (it hears the agent is there) and the agent hears of it: its peer id.
async fn joins(relay: &TestRelay, code: &str, laptop: &mut Client) -> (Client, u32) {
    let mut handset = phone(relay, code).await;
    expect_presence(&mut handset, PeerState::Joined).await;
    (handset, expect_joined(laptop).await)
}

/// The close frame a phone gets next, as code and reason.
async fn closed_with(ws: &mut Client) -> (u16, String) {
    loop {
        match timeout(WAIT, ws.next()).await.expect("a close frame in time") {
            Some(Ok(Message::Close(Some(frame)))) => return (u16::from(frame.code), frame.reason.to_string()),
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Text(_))) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

/// The phone is still seated and served: a frame from the agent reaches it, and one from it the agent.
async fn still_served(laptop: &mut Client, handset: &mut Client, peer: u32) {
    send(laptop, to(peer, Message::text("still here?"))).await;
    expect_text(handset, "still here?").await;
    send(handset, Message::text("still here")).await;
    expect_from(laptop, peer, Message::text("still here")).await;
}

#[tokio::test]
async fn a_full_code_closes_its_oldest_stranger_for_the_owners_new_phone_and_never_a_proven_phone() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let (mut laptop, picked) = agent_offering(&relay, &code, AGENT_SUBPROTOCOLS).await;
    assert_eq!(picked, "voxa-relay.3", "the relay picks the newest relay framing offered");
    let (mut owner, owner_peer) = joins(&relay, &code, &mut laptop).await;
    prove(&mut laptop, owner_peer, (&mut owner, owner_peer)).await;

    // Strangers who hold the code and never say hello: seven fill it, and every one after them
    // closes the oldest stranger — three rounds of them, and never the owner's proven phone.
    let mut strangers: VecDeque<(Client, u32)> = VecDeque::new();
    for n in 0..3 * MAX_PHONES_PER_CODE {
        let mut stranger = phone(&relay, &code).await;
        expect_presence(&mut stranger, PeerState::Joined).await;
        if strangers.len() == MAX_PHONES_PER_CODE - 1 {
            let (mut oldest, oldest_peer) = strangers.pop_front().unwrap();
            assert_eq!(relayed(&mut laptop).await, FromRelay::Left(oldest_peer), "stranger {n}");
            assert_eq!(closed_with(&mut oldest).await, (close::TOO_MANY_PHONES, close::MADE_ROOM_REASON.to_owned()));
        }
        strangers.push_back((stranger, expect_joined(&mut laptop).await));
    }
    still_served(&mut laptop, &mut owner, owner_peer).await;

    // The owner's new phone is seated at once; the oldest stranger makes room for it.
    let mut second = phone(&relay, &code).await;
    expect_presence(&mut second, PeerState::Joined).await;
    let (mut oldest, oldest_peer) = strangers.pop_front().unwrap();
    assert_eq!(relayed(&mut laptop).await, FromRelay::Left(oldest_peer));
    assert_eq!(closed_with(&mut oldest).await, (close::TOO_MANY_PHONES, close::MADE_ROOM_REASON.to_owned()));
    let second_peer = expect_joined(&mut laptop).await;
    still_served(&mut laptop, &mut second, second_peer).await;
    still_served(&mut laptop, &mut owner, owner_peer).await;
    for (stranger, peer) in &mut strangers {
        still_served(&mut laptop, stranger, *peer).await;
    }
}

#[tokio::test]
async fn a_code_whose_phones_are_all_proven_closes_the_newcomer_too_many_phones() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let (mut laptop, _) = agent_offering(&relay, &code, "voxa-relay.2, voxa-relay.3").await;
    let mut phones = Vec::new();
    for _ in 0..MAX_PHONES_PER_CODE {
        let (mut handset, peer) = joins(&relay, &code, &mut laptop).await;
        prove(&mut laptop, peer, (&mut handset, peer)).await;
        phones.push((handset, peer));
    }
    let mut ninth = phone(&relay, &code).await;
    assert_eq!(closed_with(&mut ninth).await, (close::TOO_MANY_PHONES, close::TOO_MANY_PHONES_REASON.to_owned()));
    for (handset, peer) in &mut phones {
        still_served(&mut laptop, handset, *peer).await;
    }
    // One leaves; its place goes to the next phone, which starts unproven and so makes room later.
    let (mut leaving, leaving_peer) = phones.pop().unwrap();
    leaving.close(None).await.unwrap();
    expect_left(&mut laptop, leaving_peer).await;
    let (mut next, next_peer) = joins(&relay, &code, &mut laptop).await;
    still_served(&mut laptop, &mut next, next_peer).await;
    let mut last = phone(&relay, &code).await;
    expect_presence(&mut last, PeerState::Joined).await;
    assert_eq!(relayed(&mut laptop).await, FromRelay::Left(next_peer));
    assert_eq!(closed_with(&mut next).await, (close::TOO_MANY_PHONES, close::MADE_ROOM_REASON.to_owned()));
}

#[tokio::test]
async fn proven_is_relay_framing_3_only_and_carries_nothing() {
    let relay = TestRelay::start().await;
    // An agent of relay framing 2 gets it, and a PROVEN from it is a kind it does not send: 1002,
    // as an older relay would answer.
    let code = new_code();
    let (mut old, picked) = agent_offering(&relay, &code, "voxa-relay.2").await;
    assert_eq!(picked, "voxa-relay.2");
    let (_handset, peer) = joins(&relay, &code, &mut old).await;
    send(&mut old, Message::binary(relay_framing::message(Kind::Proven, peer, &[]))).await;
    assert_eq!(expect_close(&mut old).await.0, 1002);

    // Under relay framing 3, a PROVEN with a payload is malformed.
    let code = new_code();
    let (mut laptop, _) = agent_offering(&relay, &code, AGENT_SUBPROTOCOLS).await;
    let (_handset, peer) = joins(&relay, &code, &mut laptop).await;
    send(&mut laptop, Message::binary(relay_framing::message(Kind::Proven, peer, b"x"))).await;
    assert_eq!(expect_close(&mut laptop).await.0, 1002);

    // A mark for a peer id that is not there changes nothing, and a later agent starts without the
    // marks of the one it replaced.
    let code = new_code();
    let (mut first, _) = agent_offering(&relay, &code, AGENT_SUBPROTOCOLS).await;
    let mut phones = VecDeque::new();
    for _ in 0..MAX_PHONES_PER_CODE {
        let (mut handset, peer) = joins(&relay, &code, &mut first).await;
        prove(&mut first, peer, (&mut handset, peer)).await;
        phones.push_back((handset, peer));
    }
    let (witness, witness_peer) = phones.back_mut().unwrap();
    prove(&mut first, 0xFFFF_FFF0, (witness, *witness_peer)).await;
    let (mut second, _) = agent_offering(&relay, &code, AGENT_SUBPROTOCOLS).await;
    assert_eq!(expect_close(&mut first).await.0, 4001);
    for _ in 0..MAX_PHONES_PER_CODE {
        expect_joined(&mut second).await;
    }
    for (handset, _) in &mut phones {
        expect_presence(handset, PeerState::Left).await;
        expect_presence(handset, PeerState::Joined).await;
    }
    let mut newcomer = phone(&relay, &code).await;
    expect_presence(&mut newcomer, PeerState::Joined).await;
    let (mut oldest, oldest_peer) = phones.pop_front().unwrap();
    assert_eq!(relayed(&mut second).await, FromRelay::Left(oldest_peer));
    assert_eq!(closed_with(&mut oldest).await, (close::TOO_MANY_PHONES, close::MADE_ROOM_REASON.to_owned()));
}
