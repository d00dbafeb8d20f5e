//! The host's handshake and sessions against a played relay and environment.

use super::super::identity::Identity;
use super::handshake::hello_on;
use super::*;
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;

type Relay = WebSocketStream<DuplexStream>;
/// How a played environment answers a hello.
type Answer = Box<dyn FnOnce(&Value) -> Option<Value> + Send>;

/// A host socket and the far end, where the test plays relay and environment.
async fn sockets() -> (ClientSocket, Relay) {
    let (near, far) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move { tokio_tungstenite::accept_async(far).await.unwrap() });
    let near: Box<dyn dial::Io> = Box::new(near);
    let (client, _) = tokio_tungstenite::client_async("ws://relay.test/ws?code=x", near).await.unwrap();
    (crate::seal::Socket::plain(client), server.await.unwrap())
}

fn target(identity: &Identity) -> Target {
    Target {
        env_key: identity.env_key(),
        relay: RelayUrl::parse("https://relay.example.com").unwrap(),
        code: Secret::from_string("0".repeat(32)),
        bearer: Secret::from_string(format!("vbx_{}", "1".repeat(32))),
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

/// The relay's notice that the agent side came or went.
fn presence(state: crate::protocol::PeerState) -> Value {
    Value::String(crate::net::relay_framing::Presence::new(PeerRole::Agent, state).to_text())
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

/// Runs the handshake against an environment that answers `answer(hello)` and then, should
/// the host present a bearer, `hello_ok`. Returns the outcome and every frame the host sent.
async fn handshake_with(
    identity: &Identity,
    answer: impl FnOnce(&Value) -> Option<Value> + Send + 'static,
) -> (Result<Vec<String>, ToolError>, Vec<Value>) {
    let (client, mut relay) = sockets().await;
    let environment = tokio::spawn(async move {
        send_json(&mut relay, joined()).await;
        let hello = recv_json(&mut relay).await;
        let mut sent = vec![hello.clone()];
        if let Some(reply) = answer(&hello) {
            send_json(&mut relay, reply).await;
        }
        while let Some(Ok(frame)) = relay.next().await {
            let Message::Text(text) = frame else { continue };
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["type"] == "bearer" {
                let ok = json!({"type":"hello_ok","agent":"voxa/t","mode":"hosted","tools":["list_dir"],"protocol":2});
                send_json(&mut relay, ok).await;
            }
            sent.push(value);
        }
        sent
    });
    let outcome = hello_on(client, &target(identity)).await.map(|(_, tools)| tools);
    // The host closed or dropped its socket: the environment's loop ends.
    let sent = tokio::time::timeout(Duration::from_secs(10), environment).await.unwrap().unwrap();
    (outcome, sent)
}

/// The identity frame `identity` sends for a hello on a code hashing to `code`.
fn signed_for(identity: &Identity, code: &[u8; 32], hello: &Value) -> Value {
    let env_nonce = crate::protocol::new_nonce().unwrap();
    let host_nonce = hello["nonce"].as_str().unwrap();
    let binding = HelloBinding { code_hash: code, host_nonce, env_nonce: &env_nonce };
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
async fn a_proven_environment_gets_the_bearer_and_is_accepted_with_its_tools() {
    let identity = Arc::new(Identity::generate().unwrap());
    let signer = identity.clone();
    let (tools, sent) = handshake_with(&identity, move |hello| {
        assert_eq!((hello["role"].as_str(), hello["protocol"].as_u64()), (Some("host"), Some(2)));
        assert_eq!(hello["envKey"], signer.env_key().as_str());
        assert!(hello.get("bearer").is_none(), "the hello carries no bearer: {hello}");
        Some(signed_for(&signer, &dialled(), hello))
    })
    .await;
    assert_eq!(tools.unwrap(), ["list_dir"]);
    assert_eq!(sent[1]["type"], "bearer");
    assert!(sent[1]["bearer"].as_str().unwrap().starts_with("vbx_"));
}

#[tokio::test]
async fn answers_that_do_not_prove_the_key_are_an_identity_mismatch_and_get_no_bearer() {
    let identity = Arc::new(Identity::generate().unwrap());
    let impostor = Arc::new(Identity::generate().unwrap());
    let key = identity.env_key();
    let cases: Vec<Answer> = vec![
        Box::new({
            let key = key.clone();
            move |_| Some(identity_frame(&key, &"0".repeat(128)))
        }),
        Box::new({
            let impostor = impostor.clone();
            move |hello| Some(signed_for(&impostor, &dialled(), hello))
        }),
        Box::new({
            let identity = identity.clone();
            move |_| Some(signed_for(&identity, &dialled(), &json!({"nonce": "a".repeat(32)})))
        }),
        // Signed for another pairing's code.
        Box::new({
            let identity = identity.clone();
            move |hello| Some(signed_for(&identity, &code_hash(&"1".repeat(32)), hello))
        }),
        // Its own nonce replaced after signing.
        Box::new({
            let identity = identity.clone();
            move |hello| {
                let mut frame = signed_for(&identity, &dialled(), hello);
                frame["nonce"] = json!("f".repeat(32));
                Some(frame)
            }
        }),
        Box::new(|_| Some(json!({"type":"hello_ok","agent":"x","mode":"hosted","tools":[]}))),
    ];
    for answer in cases {
        let (outcome, sent) = handshake_with(&identity, answer).await;
        assert_eq!(outcome.unwrap_err().code, ErrorCode::EnvironmentIdentityMismatch);
        assert_eq!(sent.len(), 1, "only the hello was sent: {sent:?}");
        assert!(!sent.iter().any(|frame| frame.to_string().contains("vbx_")), "{sent:?}");
    }
}

/// The relay attack: someone holding two pairing codes of one environment sits on the host's
/// code as the agent, has the real environment answer the host's hello on the other code, and
/// hands that answer back. The real gate signs, the real host checks: no bearer leaves.
#[tokio::test]
async fn an_answer_relayed_from_another_pairing_of_the_environment_gets_no_bearer() {
    use crate::agent::gate::{Gate, GateShared, GateState, HelloVerdict, LivePairing, PairingGate};
    let identity = Arc::new(Identity::generate().unwrap());
    let theirs = "1".repeat(32);
    let mut state = GateState { identity: Some(identity.clone()), ..Default::default() };
    for (id, code) in [("p_host", "0".repeat(32)), ("p_theirs", theirs)] {
        let pairing = LivePairing {
            bearer_hash: [7; 32],
            bound_to: identity.env_key(),
            code_hash: code_hash(&code),
            revoked: CancellationToken::new(),
        };
        state.live.insert(id.into(), pairing);
    }
    let shared = Arc::new(GateShared { state: std::sync::Mutex::new(state), ..Default::default() });
    // The environment's gate on the attacker's own pairing, which answers any host hello.
    let gate = PairingGate { shared, pairing_id: "p_theirs".into() };
    let (outcome, sent) = handshake_with(&identity, move |hello| {
        let hello: Hello = serde_json::from_value(hello.clone()).unwrap();
        match gate.admit(&hello, "") {
            Ok(HelloVerdict::AwaitBearer(answer)) => Some(serde_json::to_value(answer).unwrap()),
            other => panic!("the environment did not sign: {other:?}"),
        }
    })
    .await;
    assert_eq!(outcome.unwrap_err().code, ErrorCode::EnvironmentIdentityMismatch);
    assert_eq!(sent.len(), 1, "only the hello was sent: {sent:?}");
    assert!(!sent.iter().any(|frame| frame.to_string().contains("vbx_")), "the bearer was stolen: {sent:?}");
}

#[tokio::test]
async fn refusals_of_the_environment_keep_their_code_and_never_echo() {
    let identity = Identity::generate().unwrap();
    for code in ["unknown-environment", "bearer-refused", "pairing-revoked"] {
        let (outcome, _) =
            handshake_with(&identity, move |_| Some(json!({"type":"error","code": code,"message":"vbx_echo"}))).await;
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
    let error = handshake_with(&identity, |_| None).await.0.unwrap_err();
    assert_eq!(error.code, ErrorCode::EnvironmentUnreachable);
    assert_eq!(started.elapsed(), ENV_HELLO_TIMEOUT);

    let error = handshake_with(&identity, |_| Some(presence(crate::protocol::PeerState::Left))).await.0.unwrap_err();
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
    let command = LinkCommand::Call { id: id.into(), name: "list_dir".into(), args: json!({}), progress, reply };
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
