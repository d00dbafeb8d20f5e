//! Opening a session with an environment: the host's hello, the environment's signature checked
//! before the bearer is sent, and what each failure tells the user.

use base64::Engine;

use super::*;
use crate::environments::identity::pairing_psk_input;
use crate::environments::store::bearer_hash;
use crate::seal::Initiator;

/// Opens the session: join the code as the phone side, wait for the environment, say hello,
/// verify the answer. Bounded at every step.
pub(super) async fn handshake(target: &Target, dial: &DialOptions) -> Result<(ClientSocket, Vec<String>), ToolError> {
    let url = target.relay.socket_url("/ws", target.code.expose());
    let socket = match tokio::time::timeout(ENV_CONNECT_TIMEOUT, dial::connect(&url, dial)).await {
        Ok(Ok(socket)) => socket,
        Ok(Err(err)) => return Err(unreachable(format!("could not reach relay {}: {err:#}", target.relay))),
        Err(_) => return Err(unreachable(format!("relay {} did not answer in time", target.relay))),
    };
    hello_on(socket, target).await
}

/// The handshake on a connected relay socket, the host's [`HostProof`] run by the one client
/// hello. The order is the contract: our nonce, the environment's signature over it, and only
/// then the bearer. An impostor holding the pairing's code learns no bearer.
pub(super) async fn hello_on(
    mut socket: ClientSocket,
    target: &Target,
) -> Result<(ClientSocket, Vec<String>), ToolError> {
    let mut proof = HostProof::new(target);
    match client::hello_with(&mut socket, &mut proof).await {
        Ok(ok) => Ok((socket, ok.tools)),
        Err(failure) => Err(hello_failure(failure, target)),
    }
}

/// The host's credential, sealed (protocol 3): its hello starts a Noise handshake keyed by the
/// pairing's bearer hash; the environment finishes it and, inside the channel, signs the pairing,
/// both nonces and the handshake hash with its key; only then does the host present the bearer,
/// sealed. A relay in between sees neither the bearer nor anything after it, and cannot stand in
/// for the environment: its own handshake would have another hash.
pub(super) struct HostProof<'a> {
    pub(super) target: &'a Target,
    pub(super) bearer_sent: bool,
    /// The handshake between the hello and the environment's answer.
    pub(super) initiator: Option<Initiator>,
    /// The sealed channel's handshake hash, once the handshake completed.
    pub(super) handshake: Option<[u8; 32]>,
}

impl<'a> HostProof<'a> {
    pub(super) fn new(target: &'a Target) -> Self {
        HostProof { target, bearer_sent: false, initiator: None, handshake: None }
    }
}

/// The pre-shared key's input of a host's sealed session: the hash of its bearer.
fn psk_input(target: &Target) -> Secret {
    pairing_psk_input(&bearer_hash(target.bearer.expose()))
}

impl HelloCredential for HostProof<'_> {
    fn opening(&self) -> Opening {
        Opening::Presence(ENV_JOIN_TIMEOUT)
    }

    fn hello(&self, _challenge: Option<&str>, nonce: &str) -> Hello {
        Hello {
            protocol: Some(protocol::PROTOCOL_VERSION),
            role: Some(HOST_ROLE.to_owned()),
            env_key: Some(self.target.env_key.clone()),
            nonce: Some(nonce.to_owned()),
            client: Some(crate::agent_name()),
            ..Default::default()
        }
    }

    fn sealed_hello(&mut self, _challenge: Option<&str>, nonce: &str) -> Option<Result<Hello, HelloError>> {
        Some(Initiator::start(&psk_input(self.target), nonce).map_err(HelloError::Internal).map(
            |(initiator, message)| {
                self.initiator = Some(initiator);
                Hello {
                    protocol: Some(protocol::PROTOCOL_SEALED),
                    noise: Some(base64::engine::general_purpose::STANDARD.encode(message)),
                    ..self.hello(None, nonce)
                }
            },
        ))
    }

    fn answer_limit(&self) -> Option<Duration> {
        Some(ENV_HELLO_TIMEOUT)
    }

    fn answer(&mut self, answer: AgentMessage, _challenge: Option<&str>, nonce: &str) -> AnswerStep {
        let env_key = &self.target.env_key;
        match (answer, self.handshake) {
            // Message 2: the channel is up; the environment's signature comes through it.
            (AgentMessage::HelloOk(ok), None) => {
                let message =
                    ok.noise.as_deref().and_then(|noise| base64::engine::general_purpose::STANDARD.decode(noise).ok());
                let opened = self.initiator.take().zip(message).and_then(|(initiator, m)| initiator.finish(&m).ok());
                let Some((keys, _)) = opened else { return AnswerStep::Reject(HelloError::Impostor) };
                self.handshake = Some(*keys.handshake_hash());
                AnswerStep::Seal(keys)
            }
            // An identity outside a sealed channel: an older environment, or a downgrade.
            (AgentMessage::Identity { .. }, None) => AnswerStep::Reject(HelloError::Unsealed),
            (AgentMessage::Identity { .. }, Some(_)) if self.bearer_sent => AnswerStep::Reject(HelloError::Unexpected),
            (AgentMessage::Identity { env_key: claimed, nonce: env_nonce, signature }, Some(handshake)) => {
                // The signature must name the code this host dialled (one made on another pairing
                // of the same environment does not count) and this very channel.
                let dialled = code_hash(self.target.code.expose());
                let binding = HelloBinding {
                    code_hash: &dialled,
                    host_nonce: nonce,
                    env_nonce: &env_nonce,
                    handshake: Some(&handshake),
                };
                if claimed != *env_key || !verify_hello(env_key, &binding, &signature) {
                    return AnswerStep::Reject(HelloError::Impostor);
                }
                self.bearer_sent = true;
                AnswerStep::Reply(ClientMessage::Bearer(BearerFrame { bearer: self.target.bearer.expose().to_owned() }))
            }
            (AgentMessage::HelloOk(ok), Some(_)) if self.bearer_sent => AnswerStep::Accept(ok),
            // A session opened before the environment proved its key is not one to trust.
            (AgentMessage::HelloOk(_), Some(_)) => AnswerStep::Reject(HelloError::Impostor),
            _ => AnswerStep::Ignore,
        }
    }
}

/// The host's wording of a failed hello.
pub(super) fn hello_failure(failure: HelloError, target: &Target) -> ToolError {
    match failure {
        HelloError::Absent => unreachable(format!(
            "the environment is not connected to relay {} (is `voxa run` running there?)",
            target.relay
        )),
        HelloError::Ended | HelloError::ClosedBy(_) | HelloError::Failed(_) => {
            unreachable("the environment closed the connection during the hello")
        }
        HelloError::SendFailed(_) => unreachable("the relay connection failed during the hello"),
        HelloError::AgentLeft => unreachable("the environment left during the hello"),
        HelloError::Refused { code, .. } => refused_by_environment(code),
        HelloError::TimedOut => unreachable("the environment did not answer the hello in time"),
        HelloError::Impostor => refusal(
            ErrorCode::EnvironmentIdentityMismatch,
            "the machine answering this pairing could not prove it holds the environment's key; nothing was sent to it",
        ),
        HelloError::Unsealed => refusal(
            ErrorCode::EnvironmentIdentityMismatch,
            "the environment answered without sealing the session: it runs an older voxa (update it), or something \
             between rewrote the hello; its bearer was not sent",
        ),
        HelloError::Restarted | HelloError::Unexpected => {
            unreachable("the environment answered the bearer with something else than hello_ok")
        }
        HelloError::Internal(err) => refusal(ErrorCode::Internal, format!("{err:#}")),
    }
}

/// The host's reading of a refusal the environment sent. Never repeats anything it was sent.
pub(super) fn refused_by_environment(code: ErrorCode) -> ToolError {
    let message = match code {
        ErrorCode::UnknownEnvironment => {
            "the environment does not hold this envKey (it was re-keyed, or it is another machine); pair again"
        }
        ErrorCode::BearerRefused => "the environment refused this host's bearer; pair again",
        ErrorCode::PairingRevoked => "the environment revoked this host's pairing",
        ErrorCode::UnauthenticatedCall => "the environment did not accept the hello in time",
        _ => "the environment refused the hello",
    };
    refusal(if code.is_refusal() { code } else { ErrorCode::EnvironmentIdentityMismatch }, message)
}
