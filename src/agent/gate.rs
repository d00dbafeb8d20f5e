//! Hello admission, in one place: who may open a session, by the machine's auth token (phone and
//! loopback clients, who prove it without sending it) or by an environment pairing's bearer (a
//! host driving this machine, which presents it only after this machine proved its identity).
//! A protocol-3 hello opens a sealed session. What the agent does with a verdict — the frames it
//! sends, when it gives up — is [`super::start`]'s. See docs/PROTOCOL.md, "Session start
//! (protocol 2)" and "Sealed sessions (protocol 3)".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::environments::identity::{is_valid_nonce, pairing_psk_input, HelloBinding, Identity};
use crate::environments::store::{self, bearer_hash, stamp_of, Stamp};
use crate::protocol::{self, AgentMessage, ClientMessage, ErrorCode, Frame, Hello, HelloOk};
use crate::seal::handshake::Keys;
use crate::seal::Responder;
use crate::secret::Secret;
use crate::state::Home;
use crate::tickets::Redeemed;

/// Decides who may open a session (docs/PROTOCOL.md, "Session start (protocol 2)").
pub trait Gate: Send + Sync {
    /// True when sessions open with the agent's `challenge` (phone and local clients). An
    /// environment's pairing gate waits for the host's hello instead.
    fn challenges(&self) -> bool {
        true
    }

    /// Checks a hello that answers the session's challenge nonce (empty without one).
    fn admit(&self, hello: &Hello, challenge: &str) -> Result<HelloVerdict, ErrorCode>;

    /// Checks the bearer a host presents after [`HelloVerdict::AwaitBearer`].
    fn admit_bearer(&self, _bearer: &str) -> Result<Admission, ErrorCode> {
        Err(ErrorCode::BearerRefused)
    }

    /// Applies revocations written since the last look, so a session admitted by a credential
    /// revoked a moment ago sees its revocation token cancelled before its next frame runs.
    fn check_revocations(&self) {}

    /// The refusal for a peer that did not complete the exchange in time.
    fn timeout_code(&self) -> ErrorCode {
        ErrorCode::UnauthenticatedCall
    }
}

/// Where a good hello leads.
#[derive(Debug)]
pub enum HelloVerdict {
    /// The caller is in: answer `hello_ok`.
    Admitted(Admission),
    /// Answer with this frame (an environment's signature) and wait for the host's bearer.
    AwaitBearer(AgentMessage),
    /// A host's sealed hello (protocol 3): finish the handshake ([`PairingSeal::finish`]), send
    /// this environment's signature over the handshake hash inside the channel, and wait for the
    /// host's bearer there.
    AwaitSealedBearer(PairingSeal),
}

/// A caller the gate let in.
#[derive(Debug, Default)]
pub struct Admission {
    /// Audit name of the caller.
    pub caller: String,
    /// The agent's proof for `hello_ok`.
    pub proof: Option<String>,
    /// Filled into `hello_ok` for environment sessions (docs/PROTOCOL.md, "Environments").
    pub env_key: Option<String>,
    /// Cancelled when the credential behind this session is revoked.
    pub revoked: Option<CancellationToken>,
    /// A protocol-3 hello's handshake, read and waiting for the agent's answer.
    pub seal: Option<Box<Responder>>,
    /// The hello's `client` name when printable (at most 64 characters), for `status`.
    pub client: Option<String>,
    /// The auth token to hand inside the sealed session: the hello was keyed by a pairing ticket
    /// (now spent), and the page learns the pairing's token from the agent.
    pub hand_token: Option<Secret>,
}

/// A hello's `client` name as `status` may show it: printable and short, else nothing.
pub fn shown_client(hello: &Hello) -> Option<String> {
    let name = hello.client.as_deref()?.trim();
    (!name.is_empty() && name.chars().count() <= 64 && !name.chars().any(char::is_control)).then(|| name.to_owned())
}

/// A host's sealed hello on a pairing, read: its handshake, and what this environment signs.
pub struct PairingSeal {
    responder: Box<Responder>,
    identity: Arc<Identity>,
    code_hash: [u8; 32],
    host_nonce: String,
}

impl std::fmt::Debug for PairingSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PairingSeal(<handshake>)")
    }
}

impl PairingSeal {
    /// Finishes the handshake: message 2 in a plain `hello_ok` (protocol 3, empty payload), the
    /// session's keys, and this environment's `identity` with its signature over the pairing,
    /// both nonces and the handshake hash — the first frame to send sealed. The host's bearer
    /// comes back inside the channel.
    pub fn finish(self) -> anyhow::Result<(Frame, AgentMessage, Keys)> {
        let (keys, message) = self.responder.finish(b"")?;
        let frame = Frame::from(AgentMessage::HelloOk(HelloOk::handshake(&message)));
        let env_nonce = protocol::new_nonce()?;
        let binding = HelloBinding {
            code_hash: &self.code_hash,
            host_nonce: &self.host_nonce,
            env_nonce: &env_nonce,
            handshake: Some(keys.handshake_hash()),
        };
        let identity = AgentMessage::Identity {
            env_key: self.identity.env_key(),
            nonce: env_nonce.clone(),
            signature: self.identity.sign_hello(&binding),
        };
        Ok((frame, identity, keys))
    }
}

/// Message 1 of a protocol-3 hello; a missing or malformed one is refused `bearer-refused`.
fn hello_noise(hello: &Hello) -> Result<Vec<u8>, ErrorCode> {
    hello
        .noise
        .as_deref()
        .filter(|noise| noise.len() <= MAX_HELLO_NOISE)
        .and_then(|noise| base64::engine::general_purpose::STANDARD.decode(noise).ok())
        .ok_or(ErrorCode::BearerRefused)
}

/// Longest `noise` field of a hello accepted (message 1 is 48 bytes, 64 in base64).
const MAX_HELLO_NOISE: usize = 128;

/// The plain gate: the hello must prove knowledge of this machine's auth token for this
/// session's nonces. The token itself never crosses the wire.
pub struct TokenGate {
    pub token: Secret,
    pub caller: &'static str,
    /// Refuse protocol 2 (`[security] require_sealed` in `config.toml`).
    pub sealed_only: bool,
    /// The home whose pairing tickets a ticket hello may spend (`None`: ticket hellos are refused).
    pub tickets: Option<Home>,
}

impl TokenGate {
    /// A gate on `token`; `sealed_only` refuses protocol 2. It takes no tickets.
    pub fn new(token: Secret, caller: &'static str, sealed_only: bool) -> Self {
        TokenGate { token, caller, sealed_only, tickets: None }
    }

    /// This gate, also opening sealed sessions with the pairing tickets of `home`.
    pub fn with_tickets(self, home: Home) -> Self {
        TokenGate { tickets: Some(home), ..self }
    }

    /// The same gate on another token (`pair --rotate`).
    pub fn with_token(&self, token: Secret) -> Self {
        TokenGate { token, caller: self.caller, sealed_only: self.sealed_only, tickets: self.tickets.clone() }
    }

    /// A protocol-3 hello keyed by a pairing ticket: the ticket whose key reads message 1 is spent
    /// before anything is answered, and the session hands the token. A spent ticket is
    /// `ticket-used`; an expired, replaced or unknown one `ticket-expired`.
    fn admit_ticket(&self, hello: &Hello, challenge: &str) -> Result<HelloVerdict, ErrorCode> {
        let Some(home) = &self.tickets else { return Err(ErrorCode::TicketExpired) };
        let message = hello_noise(hello)?;
        if !protocol::is_hello_nonce(challenge) {
            return Err(ErrorCode::BearerRefused);
        }
        let now = std::time::SystemTime::now();
        let redeemed = crate::tickets::redeem(home, now, |ticket| Responder::accept(ticket, challenge, &message).ok());
        match redeemed {
            Ok(Redeemed::Fresh(responder)) => Ok(HelloVerdict::Admitted(Admission {
                caller: self.caller.to_owned(),
                seal: Some(Box::new(responder)),
                client: shown_client(hello),
                hand_token: Some(self.token.clone()),
                ..Default::default()
            })),
            Ok(Redeemed::Used) => Err(ErrorCode::TicketUsed),
            Ok(Redeemed::Expired) => Err(ErrorCode::TicketExpired),
            Err(err) => {
                tracing::warn!("cannot read the pairing tickets: {err:#}");
                Err(ErrorCode::Internal)
            }
        }
    }

    /// A protocol-3 hello: message 1 of the handshake, keyed by the token, answering `challenge`.
    fn admit_sealed(&self, hello: &Hello, challenge: &str) -> Result<HelloVerdict, ErrorCode> {
        let message = hello_noise(hello)?;
        if !protocol::is_hello_nonce(challenge) {
            return Err(ErrorCode::BearerRefused);
        }
        let responder = Responder::accept(&self.token, challenge, &message).map_err(|_| ErrorCode::BearerRefused)?;
        Ok(HelloVerdict::Admitted(Admission {
            caller: self.caller.to_owned(),
            seal: Some(Box::new(responder)),
            client: shown_client(hello),
            ..Default::default()
        }))
    }
}

impl Gate for TokenGate {
    fn admit(&self, hello: &Hello, challenge: &str) -> Result<HelloVerdict, ErrorCode> {
        // A raw token (protocol 1) is refused whether it is right or not.
        if hello.token.is_some() {
            return Err(ErrorCode::BearerRefused);
        }
        // A ticket opens sealed sessions only: the token it is traded for must travel sealed.
        match (hello.ticket, hello.protocol) {
            (true, Some(protocol::PROTOCOL_SEALED)) => return self.admit_ticket(hello, challenge),
            (true, _) => return Err(ErrorCode::BearerRefused),
            (false, _) => {}
        }
        match hello.protocol {
            Some(protocol::PROTOCOL_SEALED) => return self.admit_sealed(hello, challenge),
            Some(protocol::PROTOCOL_VERSION) if self.sealed_only => return Err(ErrorCode::SealedSessionRequired),
            Some(protocol::PROTOCOL_VERSION) => {}
            _ => return Err(ErrorCode::BearerRefused),
        }
        let nonce = hello.nonce.as_deref().filter(|nonce| protocol::is_hello_nonce(nonce));
        let (Some(nonce), Some(proof)) = (nonce, hello.proof.as_deref()) else {
            return Err(ErrorCode::BearerRefused);
        };
        if !protocol::is_hello_nonce(challenge) || !protocol::verify_client_proof(&self.token, challenge, nonce, proof)
        {
            return Err(ErrorCode::BearerRefused);
        }
        Ok(HelloVerdict::Admitted(Admission {
            caller: self.caller.to_owned(),
            proof: Some(protocol::agent_proof(&self.token, challenge, nonce)),
            client: shown_client(hello),
            ..Default::default()
        }))
    }
}

/// Checks a frame that should be the hello answering `challenge`. Anything but a hello is
/// `unauthenticated-call`.
pub fn admit_hello(gate: &dyn Gate, text: &str, challenge: &str) -> Result<HelloVerdict, ErrorCode> {
    match protocol::parse_client(text) {
        Ok(ClientMessage::Hello(hello)) => gate.admit(&hello, challenge),
        _ => Err(ErrorCode::UnauthenticatedCall),
    }
}

/// Checks a frame that should be a host's bearer. Anything but a bearer frame is
/// `unauthenticated-call`.
pub fn admit_bearer(gate: &dyn Gate, text: &str) -> Result<Admission, ErrorCode> {
    match protocol::parse_client(text) {
        Ok(ClientMessage::Bearer(frame)) => gate.admit_bearer(&frame.bearer),
        _ => Err(ErrorCode::UnauthenticatedCall),
    }
}

/// State every pairing gate reads.
#[derive(Default)]
pub(crate) struct GateShared {
    pub(crate) state: Mutex<GateState>,
    /// The home whose `.pairings.json` is read again for revocations when a bearer is admitted
    /// or an admitted session sends a frame, so a revocation has no window (`None`: only what
    /// the watcher applies counts).
    pub(crate) home: Option<Home>,
    /// The version of `.pairings.json` the revocations were last read from.
    pub(crate) seen: Mutex<Stamp>,
}

impl GateShared {
    /// Gate state that reads revocations from `home` as they happen.
    pub(crate) fn watching(home: Home) -> Self {
        GateShared { home: Some(home), ..Default::default() }
    }

    pub(crate) fn identity(&self) -> Option<Arc<Identity>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).identity.clone()
    }

    /// Applies revocations written since the last look, at once: the revoked hashes are replaced
    /// and every live pairing whose bearer is among them has its sessions ended. One `stat` when
    /// nothing changed. A file that cannot be read keeps the last good state (the watcher warns).
    pub(crate) fn refresh_revocations(&self) {
        let Some(home) = &self.home else { return };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let now = stamp_of(&home.path(store::PAIRINGS_FILE));
        if now == *seen {
            return;
        }
        let Ok(pairings) = store::load_pairings(home) else { return };
        let revoked = pairings.revoked_hashes();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for pairing in state.live.values() {
            if revoked.iter().any(|hash| bool::from(hash.ct_eq(&pairing.bearer_hash))) {
                pairing.revoked.cancel();
            }
        }
        state.revoked = revoked;
        *seen = now;
    }
}

#[derive(Default)]
pub(crate) struct GateState {
    pub(crate) identity: Option<Arc<Identity>>,
    pub(crate) live: HashMap<String, LivePairing>,
    pub(crate) revoked: Vec<[u8; 32]>,
}

pub(crate) struct LivePairing {
    pub(crate) bearer_hash: [u8; 32],
    /// The envKey the bearer was issued under.
    pub(crate) bound_to: String,
    /// [`code_hash`](crate::environments::identity::code_hash) of the pairing's relay code: the
    /// hello signature names it, so it proves nothing on another pairing.
    pub(crate) code_hash: [u8; 32],
    /// Cancelled when the pairing is revoked: every session it admitted ends.
    pub(crate) revoked: CancellationToken,
}

/// Admits a host on one pairing's relay code (docs/PROTOCOL.md): the host's hello is answered with this
/// home's signature over the host's nonce, and only then does the host present its bearer.
pub struct PairingGate {
    pub(crate) shared: Arc<GateShared>,
    pub(crate) pairing_id: String,
}

impl Gate for PairingGate {
    fn challenges(&self) -> bool {
        false
    }

    fn admit(&self, hello: &Hello, _challenge: &str) -> Result<HelloVerdict, ErrorCode> {
        let state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        identify(&state, &self.pairing_id, hello)
    }

    fn admit_bearer(&self, bearer: &str) -> Result<Admission, ErrorCode> {
        // A revocation written a moment ago counts now, not at the watcher's next poll.
        self.shared.refresh_revocations();
        let state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        check_bearer(&state, &self.pairing_id, bearer)
    }

    fn check_revocations(&self) {
        self.shared.refresh_revocations();
    }

    fn timeout_code(&self) -> ErrorCode {
        ErrorCode::ExecutorUnauthenticated
    }
}

/// The host's hello on the pairing `pairing_id`: the envKey is resolved first, then this
/// environment signs the pairing's code hash, the host's nonce and a fresh nonce of its own —
/// only for the pairing whose code the hello arrived on.
fn identify(state: &GateState, pairing_id: &str, hello: &Hello) -> Result<HelloVerdict, ErrorCode> {
    let Some(identity) = &state.identity else { return Err(ErrorCode::UnknownEnvironment) };
    let own_key = identity.env_key();
    if hello.env_key.as_deref() != Some(own_key.as_str()) {
        return Err(ErrorCode::UnknownEnvironment);
    }
    let Some(host_nonce) = hello.nonce.as_deref().filter(|n| is_valid_nonce(n)) else {
        return Err(ErrorCode::BadFrame);
    };
    // A pairing that ended while its link was still up signs nothing.
    let Some(pairing) = state.live.get(pairing_id) else { return Err(ErrorCode::BearerRefused) };
    if hello.protocol == Some(protocol::PROTOCOL_SEALED) {
        // The handshake is keyed by the pairing's bearer hash: a host without the bearer (or a
        // relay holding the code) gets no signature.
        let message = hello_noise(hello)?;
        let psk = pairing_psk_input(&pairing.bearer_hash);
        let responder = Responder::accept(&psk, host_nonce, &message).map_err(|_| ErrorCode::BearerRefused)?;
        return Ok(HelloVerdict::AwaitSealedBearer(PairingSeal {
            responder: Box::new(responder),
            identity: identity.clone(),
            code_hash: pairing.code_hash,
            host_nonce: host_nonce.to_owned(),
        }));
    }
    let env_nonce = protocol::new_nonce().map_err(|_| ErrorCode::Internal)?;
    let binding = HelloBinding { code_hash: &pairing.code_hash, host_nonce, env_nonce: &env_nonce, handshake: None };
    let signature = identity.sign_hello(&binding);
    Ok(HelloVerdict::AwaitBearer(AgentMessage::Identity { env_key: own_key, nonce: env_nonce, signature }))
}

/// The bearer, presented after the host verified this home's signature: revoked first, then right.
fn check_bearer(state: &GateState, pairing_id: &str, bearer: &str) -> Result<Admission, ErrorCode> {
    let Some(identity) = &state.identity else { return Err(ErrorCode::UnknownEnvironment) };
    let own_key = identity.env_key();
    let presented = bearer_hash(bearer);
    let mut revoked = subtle::Choice::from(0u8);
    for hash in &state.revoked {
        revoked |= hash.ct_eq(&presented);
    }
    if bool::from(revoked) {
        return Err(ErrorCode::PairingRevoked);
    }
    let Some(pairing) = state.live.get(pairing_id) else { return Err(ErrorCode::BearerRefused) };
    if !bool::from(pairing.bearer_hash.ct_eq(&presented)) || pairing.bound_to != own_key {
        return Err(ErrorCode::BearerRefused);
    }
    Ok(Admission {
        caller: format!("host:{}:{pairing_id}", &own_key[..16]),
        env_key: Some(own_key),
        revoked: Some(pairing.revoked.clone()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::identity::{code_hash, verify_hello};
    use crate::protocol::new_nonce;

    const BEARER: &str = "vbx_0123456789abcdef0123456789abcdef";
    const CODE: &str = "00112233445566778899aabbccddeeff";

    fn state_with(bearer: &str) -> (GateState, String) {
        let identity = Identity::generate().unwrap();
        let key = identity.env_key();
        let mut state = GateState { identity: Some(Arc::new(identity)), ..Default::default() };
        state.live.insert(
            "p_1".into(),
            LivePairing {
                bearer_hash: bearer_hash(bearer),
                bound_to: key.clone(),
                code_hash: code_hash(CODE),
                revoked: CancellationToken::new(),
            },
        );
        (state, key)
    }

    fn hello(key: &str, nonce: Option<&str>) -> Hello {
        Hello {
            protocol: Some(2),
            role: Some(crate::protocol::HOST_ROLE.into()),
            env_key: Some(key.into()),
            nonce: nonce.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn a_hello_is_answered_with_a_signature_and_the_bearer_then_admits() {
        let (state, key) = state_with(BEARER);
        let nonce = new_nonce().unwrap();
        let Ok(HelloVerdict::AwaitBearer(AgentMessage::Identity { env_key, nonce: env_nonce, signature })) =
            identify(&state, "p_1", &hello(&key, Some(&nonce)))
        else {
            panic!("no identity answer")
        };
        assert_eq!(env_key, key);
        let code = code_hash(CODE);
        let binding = HelloBinding { code_hash: &code, host_nonce: &nonce, env_nonce: &env_nonce, handshake: None };
        assert!(verify_hello(&key, &binding, &signature));
        // Signed for this pairing's code only.
        let other = code_hash(&"f".repeat(32));
        assert!(!verify_hello(&key, &HelloBinding { code_hash: &other, ..binding }, &signature));
        let admission = check_bearer(&state, "p_1", BEARER).unwrap();
        assert_eq!(admission.env_key.as_deref(), Some(key.as_str()));
        assert!(admission.caller.starts_with("host:") && !admission.caller.contains(BEARER));
        let token = admission.revoked.unwrap();
        state.live["p_1"].revoked.cancel();
        assert!(token.is_cancelled());
    }

    #[test]
    fn the_env_key_is_checked_before_anything_is_signed() {
        let (state, _) = state_with(BEARER);
        let other = Identity::generate().unwrap().env_key();
        let nonce = new_nonce().unwrap();
        assert_eq!(identify(&state, "p_1", &hello(&other, Some(&nonce))).unwrap_err(), ErrorCode::UnknownEnvironment);
        assert_eq!(identify(&state, "p_1", &Hello::default()).unwrap_err(), ErrorCode::UnknownEnvironment);
        let empty = GateState::default();
        assert_eq!(identify(&empty, "p_1", &hello(&other, Some(&nonce))).unwrap_err(), ErrorCode::UnknownEnvironment);
        assert_eq!(check_bearer(&empty, "p_1", BEARER).unwrap_err(), ErrorCode::UnknownEnvironment);
    }

    #[test]
    fn wrong_and_revoked_bearers_and_bad_nonces_get_their_own_codes() {
        let (mut state, key) = state_with(BEARER);
        assert_eq!(
            check_bearer(&state, "p_1", "vbx_ffffffffffffffffffffffffffffffff").unwrap_err(),
            ErrorCode::BearerRefused
        );
        assert_eq!(check_bearer(&state, "p_other", BEARER).unwrap_err(), ErrorCode::BearerRefused);
        assert_eq!(identify(&state, "p_1", &hello(&key, Some("not hex"))).unwrap_err(), ErrorCode::BadFrame);
        assert_eq!(identify(&state, "p_1", &hello(&key, None)).unwrap_err(), ErrorCode::BadFrame);
        // A pairing that is not live signs nothing.
        let nonce = new_nonce().unwrap();
        assert_eq!(identify(&state, "p_other", &hello(&key, Some(&nonce))).unwrap_err(), ErrorCode::BearerRefused);
        state.revoked.push(bearer_hash(BEARER));
        assert_eq!(check_bearer(&state, "p_1", BEARER).unwrap_err(), ErrorCode::PairingRevoked);
        assert_eq!(check_bearer(&state, "p_other", BEARER).unwrap_err(), ErrorCode::PairingRevoked);
    }

    #[test]
    fn a_pairing_bound_to_an_old_identity_is_refused() {
        let (mut state, _) = state_with(BEARER);
        state.identity = Some(Arc::new(Identity::generate().unwrap()));
        assert_eq!(check_bearer(&state, "p_1", BEARER).unwrap_err(), ErrorCode::BearerRefused);
    }
}
