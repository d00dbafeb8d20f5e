//! The client side of the session start (docs/PROTOCOL.md, "Session start (protocol 2)" and
//! "Sealed sessions (protocol 3)"), one implementation for every client: [`hello_with`] runs the
//! exchange, a [`HelloCredential`] says how the client proves itself and checks the agent.
//! [`hello`] answers the agent's challenge with the first message of a sealed session's handshake,
//! keyed by the token, and seals the socket once the agent's answer checks out (`voxa call`,
//! `status`, `env list`, every test and bench client); [`hello_plain`] is protocol 2, for hosted
//! voice, whose relay must read the session. The host's environment sessions bring their own
//! credential (`environments/host/handshake.rs`).

use std::fmt;
use std::ops::ControlFlow;

use std::time::Duration;

use anyhow::{anyhow, Result};
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

use super::dial::ClientSocket;
use crate::error::Refused;
use crate::protocol::relay::Presence;
use crate::protocol::{self, AgentMessage, ClientMessage, ErrorCode, Hello, HelloOk, PeerRole, PeerState};
use crate::seal::handshake::{Initiator, Keys};
use crate::secret::Secret;

/// Whoever answered could not prove it holds this home's auth token: it is not this laptop.
/// Nothing but the hello (which proves nothing reusable) was sent to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotYourLaptop;

impl fmt::Display for NotYourLaptop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "this is not your laptop: the agent that answered could not prove it holds this pairing's auth \
             token; the connection was closed and nothing was sent to it",
        )
    }
}

impl std::error::Error for NotYourLaptop {}

/// How a client proves itself in the hello and checks the agent's proof: the part of the session
/// start that differs between a holder of the auth token (`voxa call`, `status`, tests) and a host
/// opening a session to one of its environments. The rest (waiting, sending, reading answers,
/// refusals, closing on failure) is [`hello_with`].
pub trait HelloCredential {
    /// What comes before the hello.
    fn opening(&self) -> Opening;
    /// The hello, given the agent's challenge (after [`Opening::Challenge`]) and this client's
    /// fresh nonce.
    fn hello(&self, challenge: Option<&str>, nonce: &str) -> Hello;
    /// How long the agent has to answer each frame sent; `None` waits as long as the caller does.
    fn answer_limit(&self) -> Option<Duration>;
    /// What to do with one answer of the agent's.
    fn answer(&mut self, answer: AgentMessage, challenge: Option<&str>, nonce: &str) -> AnswerStep;
    /// The hello of a sealed session, for a credential that seals: given the agent's challenge
    /// (after [`Opening::Challenge`]) and this client's fresh nonce. `None` sends
    /// [`HelloCredential::hello`]'s.
    fn sealed_hello(&mut self, _challenge: Option<&str>, _nonce: &str) -> Option<Result<Hello, HelloError>> {
        None
    }
    /// The keys of the sealed session, once an answer was accepted: the socket is sealed with
    /// them before anything else is sent.
    fn take_keys(&mut self) -> Option<Keys> {
        None
    }
}

/// What a client waits for before it sends its hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// The agent's challenge, which the hello's proof covers.
    Challenge,
    /// The agent's presence at the relay code, for at most this long.
    Presence(Duration),
}

/// A credential's reading of an answer.
#[derive(Debug)]
pub enum AnswerStep {
    /// Send this frame next and wait for the answer to it.
    Reply(ClientMessage),
    /// The session is open.
    Accept(HelloOk),
    /// The hello failed; the socket is closed.
    Reject(HelloError),
    /// Not an answer to this step; keep waiting.
    Ignore,
    /// The handshake is complete: seal the socket with these keys and keep reading (what
    /// follows arrives sealed).
    Seal(Keys),
}

/// How a hello failed. Each client words these its own way.
#[derive(Debug)]
pub enum HelloError {
    /// The agent was not present at the relay code in time ([`Opening::Presence`]).
    Absent,
    /// The connection ended without a close frame.
    Ended,
    /// The other side closed the connection, with this close frame.
    ClosedBy(Option<CloseFrame>),
    /// Reading from the connection failed.
    Failed(tungstenite::Error),
    /// A frame could not be sent.
    SendFailed(tungstenite::Error),
    /// The agent left the relay during the hello.
    AgentLeft,
    /// The agent refused the hello.
    Refused { code: ErrorCode, message: String },
    /// The agent did not answer within [`HelloCredential::answer_limit`].
    TimedOut,
    /// The agent could not prove what it had to; nothing but the hello was sent to it.
    Impostor,
    /// A second challenge came before the answer: another session replaced this one.
    Restarted,
    /// An answer that does not fit the step it answers.
    Unexpected,
    /// The agent answered a sealed hello without sealing the session: it speaks an older
    /// protocol, or something between rewrote the hello.
    Unsealed,
    /// This machine could not make a nonce.
    Internal(anyhow::Error),
}

impl HelloError {
    /// Whether the socket is still open (and is closed) after this failure.
    fn leaves_socket_open(&self) -> bool {
        !matches!(self, HelloError::Ended | HelloError::ClosedBy(_) | HelloError::Failed(_))
    }
}

/// Runs the client side of the session start on `socket` with `credential`: waits for the
/// opening, sends the hello and whatever the credential replies, until it accepts the agent's
/// answer. On failure the socket is closed.
pub async fn hello_with(
    socket: &mut ClientSocket,
    credential: &mut impl HelloCredential,
) -> Result<HelloOk, HelloError> {
    let outcome = exchange(socket, credential).await;
    if let Err(failure) = &outcome {
        if failure.leaves_socket_open() {
            let _ = socket.close(None).await;
        }
    }
    outcome
}

async fn exchange(socket: &mut ClientSocket, credential: &mut impl HelloCredential) -> Result<HelloOk, HelloError> {
    let challenge = match credential.opening() {
        Opening::Challenge => Some(challenge(socket).await?),
        Opening::Presence(limit) => {
            presence(socket, limit).await?;
            None
        }
    };
    let nonce = protocol::new_nonce().map_err(HelloError::Internal)?;
    let sealed = credential.sealed_hello(challenge.as_deref(), &nonce).transpose()?;
    let hello = sealed.unwrap_or_else(|| credential.hello(challenge.as_deref(), &nonce));
    let mut frame = ClientMessage::Hello(hello);
    loop {
        socket.send(Message::text(frame.to_json())).await.map_err(HelloError::SendFailed)?;
        let limit = credential.answer_limit();
        let answered = answer(socket, credential, challenge.as_deref(), &nonce);
        let next = match limit {
            Some(limit) => tokio::time::timeout(limit, answered).await.map_err(|_| HelloError::TimedOut)??,
            None => answered.await?,
        };
        match next {
            ControlFlow::Continue(reply) => frame = reply,
            ControlFlow::Break(ok) => {
                if let Some(keys) = credential.take_keys() {
                    socket.seal(keys);
                }
                return Ok(ok);
            }
        }
    }
}

/// The credential's reading of the agent's answer to the frame just sent: the next frame to send,
/// or the open session.
async fn answer(
    socket: &mut ClientSocket,
    credential: &mut impl HelloCredential,
    challenge: Option<&str>,
    nonce: &str,
) -> Result<ControlFlow<HelloOk, ClientMessage>, HelloError> {
    loop {
        match credential.answer(next_agent_message(socket).await?, challenge, nonce) {
            AnswerStep::Reply(next) => return Ok(ControlFlow::Continue(next)),
            AnswerStep::Accept(ok) => return Ok(ControlFlow::Break(ok)),
            AnswerStep::Reject(failure) => return Err(failure),
            AnswerStep::Ignore => continue,
            AnswerStep::Seal(keys) => socket.seal(keys),
        }
    }
}

/// The agent's challenge; one whose nonce is malformed comes from an impostor.
async fn challenge(socket: &mut ClientSocket) -> Result<String, HelloError> {
    loop {
        match next_agent_message(socket).await? {
            AgentMessage::Challenge { nonce, .. } if protocol::is_hello_nonce(&nonce) => return Ok(nonce),
            AgentMessage::Challenge { .. } => return Err(HelloError::Impostor),
            _ => continue,
        }
    }
}

/// Waits for the relay's notice that the agent is present at the code.
async fn presence(socket: &mut ClientSocket, limit: Duration) -> Result<(), HelloError> {
    let joined = async {
        while let Some(frame) = socket.next().await {
            match frame {
                Ok(Message::Text(text)) => {
                    if Presence::parse(&text) == Some(Presence::new(PeerRole::Agent, PeerState::Joined)) {
                        return Ok(());
                    }
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        Err(HelloError::Absent)
    };
    tokio::time::timeout(limit, joined).await.unwrap_or(Err(HelloError::Absent))
}

/// The next message from the agent. Refusals, closes and the agent leaving the relay are errors;
/// relay notices and frames that are not agent messages are skipped.
async fn next_agent_message(socket: &mut ClientSocket) -> Result<AgentMessage, HelloError> {
    loop {
        let Some(frame) = socket.next().await else { return Err(HelloError::Ended) };
        match frame.map_err(HelloError::Failed)? {
            Message::Text(text) => {
                if let Some(notice) = Presence::parse(&text) {
                    if notice.peer == PeerRole::Agent && notice.state == PeerState::Left {
                        return Err(HelloError::AgentLeft);
                    }
                    continue;
                }
                match serde_json::from_str::<AgentMessage>(&text) {
                    Ok(AgentMessage::Error { code, message }) => {
                        return Err(HelloError::Refused { code, message: message.unwrap_or_default() })
                    }
                    Ok(message) => return Ok(message),
                    Err(_) => continue,
                }
            }
            Message::Close(frame) => return Err(HelloError::ClosedBy(frame)),
            _ => continue,
        }
    }
}

/// The proof of this home's auth token: the credential of `voxa call`, `status` and every test
/// and bench client.
struct TokenProof<'a> {
    token: &'a Secret,
    client: &'a str,
    /// Protocol 3 (every voxa client), or protocol 2 for hosted voice.
    seals: bool,
    /// The handshake between the hello and `hello_ok`, then the session's keys.
    initiator: Option<Initiator>,
    keys: Option<Keys>,
}

impl<'a> TokenProof<'a> {
    fn new(token: &'a Secret, client: &'a str, seals: bool) -> Self {
        TokenProof { token, client, seals, initiator: None, keys: None }
    }

    /// A sealed `hello_ok`: message 2 must check out, and its payload is the real `hello_ok`.
    fn open_hello_ok(&mut self, initiator: Initiator, ok: &HelloOk) -> AnswerStep {
        let message =
            ok.noise.as_deref().and_then(|noise| base64::engine::general_purpose::STANDARD.decode(noise).ok());
        let opened = message.and_then(|message| initiator.finish(&message).ok());
        let Some((keys, payload)) = opened else { return AnswerStep::Reject(HelloError::Impostor) };
        match serde_json::from_slice::<AgentMessage>(&payload) {
            Ok(AgentMessage::HelloOk(inner)) if inner.protocol == protocol::PROTOCOL_SEALED => {
                self.keys = Some(keys);
                AnswerStep::Accept(inner)
            }
            _ => AnswerStep::Reject(HelloError::Unexpected),
        }
    }
}

impl HelloCredential for TokenProof<'_> {
    fn opening(&self) -> Opening {
        Opening::Challenge
    }

    fn hello(&self, challenge: Option<&str>, nonce: &str) -> Hello {
        Hello {
            protocol: Some(protocol::PROTOCOL_VERSION),
            nonce: Some(nonce.to_owned()),
            proof: Some(protocol::client_proof(self.token, challenge.unwrap_or_default(), nonce)),
            client: Some(self.client.to_owned()),
            ..Default::default()
        }
    }

    fn answer_limit(&self) -> Option<Duration> {
        None
    }

    fn sealed_hello(&mut self, challenge: Option<&str>, _nonce: &str) -> Option<Result<Hello, HelloError>> {
        let challenge = challenge.filter(|_| self.seals)?;
        Some(Initiator::start(self.token, challenge).map_err(HelloError::Internal).map(|(initiator, message)| {
            self.initiator = Some(initiator);
            Hello {
                protocol: Some(protocol::PROTOCOL_SEALED),
                noise: Some(base64::engine::general_purpose::STANDARD.encode(message)),
                client: Some(self.client.to_owned()),
                ..Default::default()
            }
        }))
    }

    fn take_keys(&mut self) -> Option<Keys> {
        self.keys.take()
    }

    fn answer(&mut self, answer: AgentMessage, challenge: Option<&str>, nonce: &str) -> AnswerStep {
        match answer {
            AgentMessage::HelloOk(ok) if self.seals => match self.initiator.take() {
                Some(initiator) => self.open_hello_ok(initiator, &ok),
                None => AnswerStep::Reject(HelloError::Unexpected),
            },
            AgentMessage::HelloOk(ok) => {
                let challenge = challenge.unwrap_or_default();
                let proven = ok
                    .proof
                    .as_deref()
                    .is_some_and(|proof| protocol::verify_agent_proof(self.token, challenge, nonce, proof));
                if proven {
                    AnswerStep::Accept(ok)
                } else {
                    AnswerStep::Reject(HelloError::Impostor)
                }
            }
            // A second challenge before hello_ok: a new phone session replaced ours.
            AgentMessage::Challenge { .. } => AnswerStep::Reject(HelloError::Restarted),
            _ => AnswerStep::Ignore,
        }
    }
}

/// Completes the session start on a socket to an agent (loopback, or a phone's socket at the
/// relay) and seals it: waits for the challenge, sends the hello with the handshake's first
/// message, checks the agent's answer and seals the socket (protocol 3). An answer that does not
/// check out closes the socket and fails with [`NotYourLaptop`]. No timeout of its own.
pub async fn hello(socket: &mut ClientSocket, token: &Secret, client: &str) -> Result<HelloOk> {
    token_hello(socket, TokenProof::new(token, client, true)).await
}

/// [`hello`] in protocol 2: proves the token and checks the agent's proof, but leaves the
/// session unsealed. For hosted voice (the relay runs the model and so reads the session) and
/// for checking that protocol-2 clients are still served.
pub async fn hello_plain(socket: &mut ClientSocket, token: &Secret, client: &str) -> Result<HelloOk> {
    token_hello(socket, TokenProof::new(token, client, false)).await
}

async fn token_hello(socket: &mut ClientSocket, mut proof: TokenProof<'_>) -> Result<HelloOk> {
    hello_with(socket, &mut proof).await.map_err(|failure| match failure {
        HelloError::Ended => anyhow!("the agent closed the connection before answering"),
        HelloError::ClosedBy(frame) => close_error(frame),
        HelloError::Failed(err) => anyhow::Error::new(err).context("agent connection failed"),
        HelloError::SendFailed(err) => anyhow::Error::new(err).context("could not send the hello"),
        HelloError::AgentLeft => anyhow!("the laptop left the relay during the hello"),
        HelloError::Refused { code, message } => Refused { code, message }.into(),
        HelloError::Impostor => NotYourLaptop.into(),
        HelloError::Restarted => anyhow!("the agent started a new session before answering"),
        HelloError::Absent | HelloError::TimedOut | HelloError::Unexpected => {
            anyhow!("the agent did not answer the hello")
        }
        HelloError::Unsealed => anyhow!("the agent did not seal the session it was asked to seal"),
        HelloError::Internal(err) => err,
    })
}

/// A close frame as an error: a refusal code in its reason becomes [`Refused`], with a sentence
/// for the ends of a sealed session, which a person must be able to read.
pub fn close_error(frame: Option<CloseFrame>) -> anyhow::Error {
    let reason = frame.as_ref().map(|f| f.reason.to_string()).unwrap_or_default();
    match ErrorCode::ALL.iter().find(|code| code.as_str() == reason) {
        Some(code) => Refused { code: *code, message: ended_sealed(*code).unwrap_or_default().to_owned() }.into(),
        None => anyhow!("the agent closed the connection ({reason})"),
    }
}

/// What ended a sealed session, said for a person.
pub fn ended_sealed(code: ErrorCode) -> Option<&'static str> {
    match code {
        ErrorCode::SealedSessionBroken => Some(
            "the sealed session was closed because a frame was altered, replayed or dropped on the way; nothing \
             altered ran, but what was sent last may not have reached the other side",
        ),
        ErrorCode::SealedSessionStalled => Some(
            "the sealed session was closed because nothing came through it for 25 s; the connection or the relay \
             stopped passing its frames",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use tokio::io::DuplexStream;
    use tokio_tungstenite::WebSocketStream;

    type Agent = WebSocketStream<DuplexStream>;

    async fn sockets() -> (ClientSocket, Agent) {
        let (near, far) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { tokio_tungstenite::accept_async(far).await.unwrap() });
        let near: Box<dyn super::super::dial::Io> = Box::new(near);
        let (client, _) = tokio_tungstenite::client_async("ws://agent.test/", near).await.unwrap();
        (crate::seal::Socket::plain(client), server.await.unwrap())
    }

    /// Sends a JSON frame; a JSON string goes as the text it holds (a relay notice).
    async fn send(agent: &mut Agent, value: Value) {
        let text = match value {
            Value::String(text) => text,
            value => value.to_string(),
        };
        agent.send(Message::text(text)).await.unwrap();
    }

    /// The relay's notice that `peer` came or went, as the relay frames it.
    async fn notice(agent: &mut Agent, peer: PeerRole, state: PeerState) {
        agent.send(Message::text(Presence::new(peer, state).to_text())).await.unwrap();
    }

    /// The next text frame the client sent, or `None` once it closed.
    async fn received(agent: &mut Agent) -> Option<Value> {
        while let Some(Ok(frame)) = agent.next().await {
            match frame {
                Message::Text(text) => return Some(serde_json::from_str(&text).unwrap()),
                Message::Close(_) => return None,
                _ => continue,
            }
        }
        None
    }

    fn token() -> Secret {
        Secret::from_string("ab".repeat(16))
    }

    #[tokio::test]
    async fn the_plain_hello_skips_what_is_not_an_answer_and_accepts_a_proven_agent() {
        let (mut client, mut agent) = sockets().await;
        let agent_side = tokio::spawn(async move {
            let challenge = "c".repeat(32);
            notice(&mut agent, PeerRole::Phone, PeerState::Joined).await;
            send(&mut agent, json!({"type":"not_a_frame"})).await;
            send(&mut agent, json!({"type":"challenge","protocol":2,"nonce": challenge})).await;
            let hello = received(&mut agent).await.unwrap();
            let nonce = hello["nonce"].as_str().unwrap().to_owned();
            assert!(protocol::verify_client_proof(&token(), &challenge, &nonce, hello["proof"].as_str().unwrap()));
            assert!(hello.get("token").is_none(), "{hello}");
            let proof = protocol::agent_proof(&token(), &challenge, &nonce);
            send(
                &mut agent,
                json!({"type":"hello_ok","agent":"voxa/t","mode":"self-hosted","tools":["x"],"proof": proof}),
            )
            .await;
            agent
        });
        let ok = hello_plain(&mut client, &token(), "unit/1").await.unwrap();
        assert_eq!(ok.tools, ["x"]);
        assert!(!client.is_sealed());
        drop(agent_side.await.unwrap());
    }

    #[tokio::test]
    async fn the_hello_seals_the_socket_once_the_agents_answer_opens() {
        use crate::seal::{Responder, Socket};
        let (mut client, mut agent) = sockets().await;
        let agent_side = tokio::spawn(async move {
            let challenge = "c".repeat(32);
            send(&mut agent, json!({"type":"challenge","protocol":2,"protocols":[2,3],"nonce": challenge})).await;
            let hello = received(&mut agent).await.unwrap();
            assert_eq!(hello["protocol"], 3);
            assert!(hello.get("proof").is_none() && hello.get("token").is_none(), "{hello}");
            let one = base64::engine::general_purpose::STANDARD.decode(hello["noise"].as_str().unwrap()).unwrap();
            let inner = json!({"type":"hello_ok","protocol":3,"agent":"voxa/t","mode":"self-hosted","tools":["x"]});
            let (keys, two) =
                Responder::accept(&token(), &challenge, &one).unwrap().finish(inner.to_string().as_bytes()).unwrap();
            let noise = base64::engine::general_purpose::STANDARD.encode(two);
            send(&mut agent, json!({"type":"hello_ok","protocol":3,"noise": noise})).await;
            let mut agent = Socket::plain(agent);
            agent.seal(keys);
            agent.send(Message::text(r#"{"type":"call_started"}"#)).await.unwrap();
            let Some(Ok(Message::Text(text))) = agent.next().await else { panic!("no sealed frame") };
            text.to_string()
        });
        let ok = hello(&mut client, &token(), "unit/1").await.unwrap();
        assert_eq!((ok.tools.as_slice(), ok.protocol), (["x".to_owned()].as_slice(), 3));
        assert!(client.is_sealed());
        let Some(Ok(Message::Text(text))) = client.next().await else { panic!("no frame") };
        assert_eq!(text.as_str(), r#"{"type":"call_started"}"#);
        client.send(Message::text(r#"{"type":"status"}"#)).await.unwrap();
        assert_eq!(agent_side.await.unwrap(), r#"{"type":"status"}"#);
    }

    #[tokio::test]
    async fn a_sealed_hello_ok_that_does_not_open_is_an_impostor() {
        let (mut client, mut agent) = sockets().await;
        let agent_side = tokio::spawn(async move {
            send(&mut agent, json!({"type":"challenge","protocol":2,"protocols":[2,3],"nonce":"c".repeat(32)})).await;
            received(&mut agent).await.unwrap();
            let noise = base64::engine::general_purpose::STANDARD.encode([7u8; 64]);
            send(&mut agent, json!({"type":"hello_ok","protocol":3,"noise": noise})).await;
            agent.next().await
        });
        let err = hello(&mut client, &token(), "unit/1").await.unwrap_err();
        assert!(err.downcast_ref::<NotYourLaptop>().is_some(), "{err:#}");
        assert!(matches!(agent_side.await.unwrap(), Some(Ok(Message::Close(_)))));
    }

    #[tokio::test]
    async fn an_unproven_agent_is_closed_on_and_refusals_and_restarts_say_why() {
        let answers = [
            json!({"type":"hello_ok","agent":"voxa/t","mode":"self-hosted","tools":[],"proof":"0".repeat(64)}),
            json!({"type":"error","code":"bearer-refused","message":"no"}),
            json!({"type":"challenge","protocol":2,"nonce":"d".repeat(32)}),
            Value::String(Presence::new(PeerRole::Agent, PeerState::Left).to_text()),
        ];
        let expected = ["this is not your laptop", "bearer-refused", "started a new session", "left the relay"];
        for (answer, expected) in answers.into_iter().zip(expected) {
            let (mut client, mut agent) = sockets().await;
            let agent_side = tokio::spawn(async move {
                send(&mut agent, json!({"type":"challenge","protocol":2,"nonce":"c".repeat(32)})).await;
                received(&mut agent).await.unwrap();
                send(&mut agent, answer).await;
                // The client closes after a failed hello and sends nothing else.
                agent.next().await
            });
            let err = hello(&mut client, &token(), "unit/1").await.unwrap_err();
            let shown = match err.downcast_ref::<Refused>() {
                Some(refused) => refused.code.as_str().to_owned(),
                None => format!("{err:#}"),
            };
            assert!(shown.contains(expected), "{shown}");
            // The client socket is still open here: only its close frame ends the agent's wait.
            let next =
                tokio::time::timeout(Duration::from_secs(30), agent_side).await.expect("the client never closed");
            assert!(matches!(next.unwrap(), Some(Ok(Message::Close(_)))));
            drop(client);
        }
    }

    /// A credential that waits for presence and needs two answers: what a host does.
    struct TwoStep {
        replied: bool,
    }

    impl HelloCredential for TwoStep {
        fn opening(&self) -> Opening {
            Opening::Presence(Duration::from_secs(5))
        }

        fn hello(&self, challenge: Option<&str>, nonce: &str) -> Hello {
            assert_eq!(challenge, None);
            Hello { nonce: Some(nonce.to_owned()), ..Default::default() }
        }

        fn answer_limit(&self) -> Option<Duration> {
            Some(Duration::from_secs(5))
        }

        fn answer(&mut self, answer: AgentMessage, _challenge: Option<&str>, _nonce: &str) -> AnswerStep {
            match answer {
                AgentMessage::Status(_) if !self.replied => {
                    self.replied = true;
                    AnswerStep::Reply(ClientMessage::Status)
                }
                AgentMessage::HelloOk(ok) if self.replied => AnswerStep::Accept(ok),
                AgentMessage::HelloOk(_) => AnswerStep::Reject(HelloError::Impostor),
                _ => AnswerStep::Ignore,
            }
        }
    }

    #[tokio::test]
    async fn a_credential_leads_the_exchange_step_by_step() {
        let (mut client, mut agent) = sockets().await;
        let agent_side = tokio::spawn(async move {
            notice(&mut agent, PeerRole::Agent, PeerState::Joined).await;
            assert_eq!(received(&mut agent).await.unwrap()["type"], "hello");
            send(&mut agent, serde_json::to_value(AgentMessage::Status(Default::default())).unwrap()).await;
            assert_eq!(received(&mut agent).await.unwrap()["type"], "status");
            send(&mut agent, json!({"type":"hello_ok","agent":"voxa/t","mode":"hosted","tools":["y"]})).await;
            agent
        });
        let ok = hello_with(&mut client, &mut TwoStep { replied: false }).await.unwrap();
        assert_eq!(ok.tools, ["y"]);
        drop(agent_side.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn an_absent_or_silent_agent_ends_the_hello_in_time() {
        let (mut client, _agent) = sockets().await;
        let started = tokio::time::Instant::now();
        let err = hello_with(&mut client, &mut TwoStep { replied: false }).await.unwrap_err();
        assert!(matches!(err, HelloError::Absent), "{err:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        let (mut client, mut agent) = sockets().await;
        notice(&mut agent, PeerRole::Agent, PeerState::Joined).await;
        let err = hello_with(&mut client, &mut TwoStep { replied: false }).await.unwrap_err();
        assert!(matches!(err, HelloError::TimedOut), "{err:?}");
    }
}
