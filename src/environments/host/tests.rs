//! The host's handshake and sessions against a played relay and environment.

use super::super::identity::Identity;
use super::handshake::hello_on;
use super::*;
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;

type Relay = WebSocketStream<DuplexStream>;
/// How a played environment answers a hello.
type Answer = Box<dyn FnOnce(&Value, &[u8; 32]) -> Option<Reply> + Send>;

/// The frame a played environment seals after the handshake, given the hello and the hash.
type SealedAnswer = Box<dyn FnOnce(&Value, &[u8; 32]) -> Value + Send>;

/// A played environment's answer to the host's hello.
enum Reply {
    /// Sent as it is, in place of the handshake (a refusal, the relay's notice, an older
    /// environment's unsealed answer).
    Plain(Value),
    /// Message 2 of the handshake, then this frame sealed.
    Sealed(Value),
}

/// A host socket and the far end, where the test plays relay and environment.
async fn sockets() -> (ClientSocket, Relay) {
    let (near, far) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move { tokio_tungstenite::accept_async(far).await.unwrap() });
    let near: Box<dyn dial::Io> = Box::new(near);
    let (client, _) = tokio_tungstenite::client_async("ws://relay.test/ws?code=x", near).await.unwrap();
    (crate::seal::Socket::plain(client), server.await.unwrap())
}

const BEARER: &str = "vbx_11111111111111111111111111111111";

fn target(identity: &Identity) -> Target {
    Target {
        env_key: identity.env_key(),
        relay: RelayUrl::parse("https://relay.example.com").unwrap(),
        code: Secret::from_string("0".repeat(32)),
        bearer: Secret::from_string(BEARER.into()),
    }
}

/// Sends a JSON frame; a JSON string goes as the text it holds (a relay notice).
async fn send_json(relay: &mut Relay, value: Value) {
    let text = match value {
        Value::String(text) => text,
        value => value.to_string(),
    };
    relay.send(Message::text(text)).await.unwrap();
}

/// Sends a JSON frame sealed.
async fn send_sealed(relay: &mut Relay, sealer: &mut crate::seal::Sealer, value: Value) {
    for frame in crate::seal::socket::seal_frame(sealer, &crate::protocol::Frame::text(value.to_string())).unwrap() {
        relay.send(frame.into()).await.unwrap();
    }
}

/// The relay's notice that the agent side came or went.
fn presence(state: crate::protocol::PeerState) -> Value {
    Value::String(crate::protocol::relay::Presence::new(PeerRole::Agent, state).to_text())
}

async fn recv_json(relay: &mut Relay) -> Value {
    loop {
        match relay.next().await.unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            _ => continue,
        }
    }
}

fn joined() -> Value {
    presence(crate::protocol::PeerState::Joined)
}

/// Runs the handshake against an environment that keys it as a real one does (the bearer's
/// hash), answers `answer(hello, handshake hash)` and then, should the host present a bearer,
/// a sealed `hello_ok`. Returns the outcome, every frame the host sent (sealed ones opened) and
/// the text of the frames it sent in the clear.
async fn handshake_with(
    identity: &Identity,
    answer: impl FnOnce(&Value, &[u8; 32]) -> Option<Reply> + Send + 'static,
) -> (Result<Vec<String>, ToolError>, Vec<Value>, Vec<String>) {
    use base64::Engine;
    let (client, mut relay) = sockets().await;
    let environment = tokio::spawn(async move {
        send_json(&mut relay, joined()).await;
        let hello = recv_json(&mut relay).await;
        let mut sent = vec![hello.clone()];
        let mut clear = vec![hello.to_string()];
        let b64 = base64::engine::general_purpose::STANDARD;
        let message = b64.decode(hello["noise"].as_str().unwrap_or_default()).unwrap_or_default();
        let psk = super::super::identity::pairing_psk_input(&crate::environments::store::bearer_hash(BEARER));
        let responder = crate::seal::Responder::accept(&psk, hello["nonce"].as_str().unwrap(), &message).unwrap();
        let (keys, message2) = responder.finish(b"").unwrap();
        let handshake = *keys.handshake_hash();
        let crate::seal::handshake::Keys { mut sealer, mut opener, .. } = keys;
        match answer(&hello, &handshake) {
            Some(Reply::Plain(reply)) => send_json(&mut relay, reply).await,
            Some(Reply::Sealed(reply)) => {
                send_json(&mut relay, json!({"type":"hello_ok","protocol":3,"noise": b64.encode(message2)})).await;
                send_sealed(&mut relay, &mut sealer, reply).await;
            }
            None => {}
        }
        while let Some(Ok(frame)) = relay.next().await {
            let value: Value = match frame {
                Message::Text(text) => {
                    clear.push(text.to_string());
                    serde_json::from_str(&text).unwrap()
                }
                Message::Binary(data) => match opener.open(&data) {
                    Ok(Some(crate::seal::transport::Plain::Json(text))) => serde_json::from_str(&text).unwrap(),
                    other => panic!("the host sent what does not open: {other:?}"),
                },
                _ => continue,
            };
            if value["type"] == "bearer" {
                let ok = json!({"type":"hello_ok","agent":"voxa/t","mode":"hosted","tools":["list_dir"],"protocol":3});
                send_sealed(&mut relay, &mut sealer, ok).await;
            }
            sent.push(value);
        }
        (sent, clear)
    });
    let outcome = hello_on(client, &target(identity)).await.map(|(_, tools)| tools);
    // The host closed or dropped its socket: the environment's loop ends.
    let (sent, clear) = tokio::time::timeout(Duration::from_secs(10), environment).await.unwrap().unwrap();
    (outcome, sent, clear)
}

/// The identity frame `identity` sends for a hello on a code hashing to `code`, signed for the
/// sealed channel `handshake` (or, with `None`, as protocol 2 signed it).
fn signed_for(identity: &Identity, code: &[u8; 32], hello: &Value, handshake: Option<&[u8; 32]>) -> Value {
    let env_nonce = crate::protocol::new_nonce().unwrap();
    let host_nonce = hello["nonce"].as_str().unwrap();
    let binding = HelloBinding { code_hash: code, host_nonce, env_nonce: &env_nonce, handshake };
    json!({"type":"identity","envKey": identity.env_key(),"nonce": env_nonce,"signature": identity.sign_hello(&binding)})
}

/// The code hash of [`target`]'s code.
fn dialled() -> [u8; 32] {
    code_hash(&"0".repeat(32))
}

fn identity_frame(env_key: &str, signature: &str) -> Value {
    json!({"type":"identity","envKey": env_key,"nonce": "e".repeat(32),"signature": signature})
}

#[tokio::test]
async fn a_proven_environment_gets_the_bearer_sealed_and_is_accepted_with_its_tools() {
    let identity = Arc::new(Identity::generate().unwrap());
    let signer = identity.clone();
    let (tools, sent, clear) = handshake_with(&identity, move |hello, handshake| {
        assert_eq!((hello["role"].as_str(), hello["protocol"].as_u64()), (Some("host"), Some(3)));
        assert_eq!(hello["envKey"], signer.env_key().as_str());
        assert!(hello.get("bearer").is_none(), "the hello carries no bearer: {hello}");
        Some(Reply::Sealed(signed_for(&signer, &dialled(), hello, Some(handshake))))
    })
    .await;
    assert_eq!(tools.unwrap(), ["list_dir"]);
    assert_eq!(sent[1]["type"], "bearer");
    assert_eq!(sent[1]["bearer"], BEARER);
    assert_eq!(clear.len(), 1, "only the hello went in the clear: {clear:?}");
    assert!(!clear.iter().any(|text| text.contains("vbx_")), "{clear:?}");
}

#[tokio::test]
async fn answers_that_do_not_prove_the_key_and_the_channel_are_an_identity_mismatch_and_get_no_bearer() {
    let identity = Arc::new(Identity::generate().unwrap());
    let impostor = Arc::new(Identity::generate().unwrap());
    let key = identity.env_key();
    let sealed = |make: SealedAnswer| -> Answer {
        Box::new(move |hello, handshake| Some(Reply::Sealed(make(hello, handshake))))
    };
    let cases: Vec<Answer> = vec![
        sealed(Box::new({
            let key = key.clone();
            move |_, _| identity_frame(&key, &"0".repeat(128))
        })),
        sealed(Box::new({
            let impostor = impostor.clone();
            move |hello, h| signed_for(&impostor, &dialled(), hello, Some(h))
        })),
        sealed(Box::new({
            let identity = identity.clone();
            move |_, h| signed_for(&identity, &dialled(), &json!({"nonce": "a".repeat(32)}), Some(h))
        })),
        // Signed for another pairing's code.
        sealed(Box::new({
            let identity = identity.clone();
            move |hello, h| signed_for(&identity, &code_hash(&"1".repeat(32)), hello, Some(h))
        })),
        // Signed for another channel: what a relay running a handshake of its own with the
        // environment would pass on.
        sealed(Box::new({
            let identity = identity.clone();
            move |hello, _| signed_for(&identity, &dialled(), hello, Some(&[9; 32]))
        })),
        // Signed as protocol 2 signs, without the channel.
        sealed(Box::new({
            let identity = identity.clone();
            move |hello, _| signed_for(&identity, &dialled(), hello, None)
        })),
        // Its own nonce replaced after signing.
        sealed(Box::new({
            let identity = identity.clone();
            move |hello, h| {
                let mut frame = signed_for(&identity, &dialled(), hello, Some(h));
                frame["nonce"] = json!("f".repeat(32));
                frame
            }
        })),
        sealed(Box::new(|_, _| json!({"type":"hello_ok","agent":"x","mode":"hosted","tools":[],"protocol":3}))),
        // An unsealed answer, even one signed right: an older environment, or a downgrade.
        Box::new({
            let identity = identity.clone();
            move |hello, _| Some(Reply::Plain(signed_for(&identity, &dialled(), hello, None)))
        }),
        Box::new(|_, _| Some(Reply::Plain(json!({"type":"hello_ok","agent":"x","mode":"hosted","tools":[]})))),
    ];
    for answer in cases {
        let (outcome, sent, clear) = handshake_with(&identity, answer).await;
        assert_eq!(outcome.unwrap_err().code, ErrorCode::EnvironmentIdentityMismatch);
        assert_eq!(sent.len(), 1, "only the hello was sent: {sent:?}");
        assert!(!clear
            .iter()
            .chain(sent.iter().map(|v| v.to_string()).collect::<Vec<_>>().iter())
            .any(|t| t.contains("vbx_")));
    }
}

/// The relay attack: someone holding two pairing codes of one environment sits on the host's
/// code as the agent and passes the host's hello to the real environment on the other code.
/// The real gate keys the handshake by that other pairing's bearer: it signs nothing, and no
/// bearer leaves.
#[tokio::test]
async fn a_hello_passed_to_another_pairing_of_the_environment_gets_no_signature_and_no_bearer() {
    use crate::agent::gate::{Gate, GateShared, GateState, LivePairing, PairingGate};
    let identity = Arc::new(Identity::generate().unwrap());
    let theirs = "1".repeat(32);
    let mut state = GateState { identity: Some(identity.clone()), ..Default::default() };
    for (id, code, bearer) in
        [("p_host", "0".repeat(32), BEARER.to_owned()), ("p_theirs", theirs, format!("vbx_{}", "2".repeat(32)))]
    {
        let pairing = LivePairing {
            bearer_hash: crate::environments::store::bearer_hash(&bearer),
            bound_to: identity.env_key(),
            code_hash: code_hash(&code),
            revoked: CancellationToken::new(),
        };
        state.live.insert(id.into(), pairing);
    }
    let shared = Arc::new(GateShared { state: std::sync::Mutex::new(state), ..Default::default() });
    // The environment's gate on the attacker's own pairing.
    let gate = PairingGate { shared, pairing_id: "p_theirs".into() };
    let (outcome, sent, _) = handshake_with(&identity, move |hello, _| {
        let hello: Hello = serde_json::from_value(hello.clone()).unwrap();
        match gate.admit(&hello, "") {
            Err(code) => Some(Reply::Plain(serde_json::to_value(AgentMessage::error(code)).unwrap())),
            Ok(other) => panic!("the environment answered a hello keyed for another pairing: {other:?}"),
        }
    })
    .await;
    assert_eq!(outcome.unwrap_err().code, ErrorCode::BearerRefused);
    assert_eq!(sent.len(), 1, "only the hello was sent: {sent:?}");
    assert!(!sent.iter().any(|frame| frame.to_string().contains("vbx_")), "the bearer was stolen: {sent:?}");
}

#[tokio::test]
async fn refusals_of_the_environment_keep_their_code_and_never_echo() {
    let identity = Identity::generate().unwrap();
    for code in ["unknown-environment", "bearer-refused", "pairing-revoked"] {
        let refusal = json!({"type":"error","code": code,"message":"vbx_echo"});
        let (outcome, _, _) = handshake_with(&identity, move |_, _| Some(Reply::Plain(refusal))).await;
        let error = outcome.unwrap_err();
        assert_eq!(error.code.as_str(), code);
        assert!(!error.message.contains("vbx_"), "{}", error.message);
    }
}

#[tokio::test(start_paused = true)]
async fn an_absent_or_silent_environment_is_unreachable_within_bounds() {
    let identity = Identity::generate().unwrap();
    let (client, relay) = sockets().await;
    let started = tokio::time::Instant::now();
    let error = hello_on(client, &target(&identity)).await.err().unwrap();
    assert_eq!(error.code, ErrorCode::EnvironmentUnreachable);
    assert_eq!(started.elapsed(), ENV_JOIN_TIMEOUT);
    drop(relay);

    let started = tokio::time::Instant::now();
    let error = handshake_with(&identity, |_, _| None).await.0.unwrap_err();
    assert_eq!(error.code, ErrorCode::EnvironmentUnreachable);
    assert_eq!(started.elapsed(), ENV_HELLO_TIMEOUT);

    let left = presence(crate::protocol::PeerState::Left);
    let error = handshake_with(&identity, move |_, _| Some(Reply::Plain(left))).await.0.unwrap_err();
    assert_eq!(error.code, ErrorCode::EnvironmentUnreachable);
}

/// A running link actor and the far end of its socket.
async fn actor() -> (mpsc::Sender<LinkCommand>, Relay, CancellationToken, tempfile::TempDir) {
    let (client, relay) = sockets().await;
    let tmp = tempfile::tempdir().unwrap();
    let alive = CancellationToken::new();
    let actor = LinkActor::new(Home::at(tmp.path().join("h")), "k".repeat(64), [0; 32], alive.clone());
    let (commands, receiver) = mpsc::channel(8);
    tokio::spawn(actor.run(client, receiver));
    (commands, relay, alive, tmp)
}

async fn call(commands: &mpsc::Sender<LinkCommand>, id: &str) -> oneshot::Receiver<Delivery> {
    let (reply, answer) = oneshot::channel();
    let (progress, _) = mpsc::channel(1);
    let command =
        LinkCommand::Call { id: id.into(), name: "list_dir".into(), args: json!({}), progress, viewer: None, reply };
    commands.send(command).await.unwrap();
    answer
}

#[tokio::test]
async fn an_idle_session_is_checked_before_a_call_is_written() {
    let (commands, mut relay, _alive, _tmp) = actor().await;
    let answer = call(&commands, "h1").await;
    assert_eq!(recv_json(&mut relay).await["type"], "status");
    let status = AgentMessage::Status(Default::default());
    relay.send(Message::text(status.to_json())).await.unwrap();
    let written = recv_json(&mut relay).await;
    assert_eq!((written["type"].as_str(), written["id"].as_str()), (Some("tool_call"), Some("h1")));
    send_json(&mut relay, json!({"type":"tool_result","id":"h1","ok":true,"result":{"n":1}})).await;
    match answer.await.unwrap() {
        Delivery::Done(Ok(value)) => assert_eq!(value, json!({"n":1})),
        _ => panic!("expected the result"),
    }
}

#[tokio::test]
async fn a_call_behind_a_check_the_environment_never_answered_is_not_sent() {
    let (commands, mut relay, alive, _tmp) = actor().await;
    let answer = call(&commands, "h1").await;
    assert_eq!(recv_json(&mut relay).await["type"], "status");
    send_json(&mut relay, presence(crate::protocol::PeerState::Left)).await;
    assert!(matches!(answer.await.unwrap(), Delivery::NotSent));
    alive.cancelled().await;
    // Nothing but the check was ever written.
    while let Some(Ok(frame)) = relay.next().await {
        if let Message::Text(text) = frame {
            panic!("unexpected frame after the session ended: {text}");
        }
    }
}

#[tokio::test]
async fn calls_in_flight_end_with_the_reason_the_session_ended() {
    let (commands, mut relay, _alive, tmp) = actor().await;
    let answer = call(&commands, "h1").await;
    assert_eq!(recv_json(&mut relay).await["type"], "status");
    relay.send(Message::text(AgentMessage::Status(Default::default()).to_json())).await.unwrap();
    assert_eq!(recv_json(&mut relay).await["id"], "h1");
    send_json(&mut relay, json!({"type":"error","code":"pairing-revoked"})).await;
    match answer.await.unwrap() {
        Delivery::Done(Err(error)) => assert_eq!(error.code, ErrorCode::PairingRevoked),
        _ => panic!("expected pairing-revoked"),
    }
    drop(tmp);
}
