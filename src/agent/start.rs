//! One session start, sans-IO (docs/PROTOCOL.md, "Session start (protocol 2)" and "Sealed
//! sessions (protocol 3)"): everything between a peer's arrival and its admitted session, as a
//! state machine that takes the peer's frames, the bytes it sent and the clock, and says what to
//! do — send these frames, the session is admitted with these ends, or refuse with this code and
//! close. The gate ([`super::gate`]) decides who; [`SessionStart`] decides what happens. The relay
//! link drives one per peer id (`peers.rs`), the loopback socket one per connection
//! (`loopback.rs`), and the unit tests below drive it over plain values.
//!
//! What a stranger can cost the agent before a good hello is bounded here: [`HELLO_TIMEOUT`]
//! from its arrival, and the bytes of its carrier's budget ([`Carrier::budget`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tracing::warn;

use super::gate::{admit_bearer, admit_hello, Admission, Gate, HelloVerdict};
use crate::protocol::{self, AgentMessage, ErrorCode, Frame, HelloOk, PairingToken};
use crate::seal::handshake::Keys;
use crate::seal::socket::seal_frame;
use crate::seal::ticks::{is_tick, STALL_AFTER};
use crate::seal::{self, Broken, Inbound, Plain};

pub use crate::protocol::HELLO_TIMEOUT;

/// Bytes a relay peer may send before its hello is accepted (its hello included); one more and
/// it is closed 1009. With at most [`super::peers::MAX_PEERS`] peers per relay connection, a
/// relay connection's strangers hold at most 2 MiB of the agent's memory.
pub const MAX_RELAYED_PREAUTH_LEN: usize = 64 << 10;

/// The close reason of a peer that sent more than its carrier's budget before its hello.
pub const TOO_MUCH_BEFORE_HELLO: &str = "too much data before the hello";

/// What carries the session, which decides how a refusal is told and what a stray frame costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// One peer of the relay link: a refusal is an error frame and then `CLOSE_PEER`; frames
    /// before the hello that are not one are ignored (counted against the budget).
    Relay,
    /// One loopback connection: a refusal is the close alone, and the first frame must be the
    /// hello.
    Loopback,
}

impl Carrier {
    /// Bytes a peer may send before its hello is accepted.
    pub fn budget(self) -> usize {
        match self {
            Carrier::Relay => MAX_RELAYED_PREAUTH_LEN,
            Carrier::Loopback => protocol::MAX_PREAUTH_LEN,
        }
    }
}

/// What to do after a step of a [`SessionStart`].
#[derive(Debug)]
pub enum Next {
    /// Nothing yet: keep feeding the peer's frames.
    Wait,
    /// Send these frames, in order, and keep feeding.
    Send(Vec<Frame>),
    /// The session is admitted: send its frames first, then run it on its ends.
    Admitted(Box<Admitted>),
    /// The peer is refused: send the refusal's frames, then close it.
    Refused(Refusal),
}

/// An admitted session, ready to run.
#[derive(Debug)]
pub struct Admitted {
    pub admission: Admission,
    /// `hello_ok` (carrying the handshake's message 2, or sealed inside the channel): the first
    /// frames of the session's queue.
    pub frames: Vec<Frame>,
    pub ends: Ends,
}

/// A refused peer: what it is told, and how it is closed.
#[derive(Debug)]
pub struct Refusal {
    pub code: ErrorCode,
    /// Sent before the close: through the relay the error frame (sealed when the peer's channel
    /// already is); none on the loopback socket, where the close says it.
    pub frames: Vec<Frame>,
    pub close: CloseCode,
    pub reason: &'static str,
}

/// The keys an admitted session is sealed with, or none (protocol 2).
pub struct Ends(Option<Box<Keys>>);

impl std::fmt::Debug for Ends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_sealed() { "Ends(sealed)" } else { "Ends(plain)" })
    }
}

impl Ends {
    pub fn is_sealed(&self) -> bool {
        self.0.is_some()
    }

    /// The session's two ends on `out`, the peer's queue (the admitted frames already in it):
    /// a writer that seals (and ticks) when the session is sealed, and its reader.
    pub fn open(self, out: mpsc::Sender<Frame>, counts: &Arc<SessionCounts>) -> SessionIo {
        match self.0 {
            None => SessionIo { out, input: SessionInput::new(Inbound::Plain, counts) },
            Some(keys) => {
                let Keys { sealer, opener, .. } = *keys;
                SessionIo {
                    out: seal::seal_writer(sealer, out),
                    input: SessionInput::new(Inbound::Sealed(opener), counts),
                }
            }
        }
    }
}

/// An admitted session's two ends: the queue the session writes to and how to read its peer's
/// frames. Sealed when the hello was protocol 3.
pub struct SessionIo {
    pub out: mpsc::Sender<Frame>,
    pub input: SessionInput,
}

/// Open sessions by kind, for `status`.
#[derive(Debug, Default)]
pub struct SessionCounts {
    sealed: AtomicUsize,
    plain: AtomicUsize,
}

impl SessionCounts {
    pub fn sealed(&self) -> usize {
        self.sealed.load(Ordering::Relaxed)
    }

    pub fn plain(&self) -> usize {
        self.plain.load(Ordering::Relaxed)
    }

    fn of(&self, sealed: bool) -> &AtomicUsize {
        if sealed {
            &self.sealed
        } else {
            &self.plain
        }
    }
}

/// How an admitted session reads its peer; counted in `status` while it lives. A sealed one
/// knows when it last heard its peer, and so when it is stalled.
pub struct SessionInput {
    inbound: Inbound,
    counts: Arc<SessionCounts>,
    heard: Instant,
}

impl SessionInput {
    fn new(inbound: Inbound, counts: &Arc<SessionCounts>) -> Self {
        counts.of(inbound.is_sealed()).fetch_add(1, Ordering::Relaxed);
        SessionInput { inbound, counts: counts.clone(), heard: Instant::now() }
    }

    pub fn is_sealed(&self) -> bool {
        self.inbound.is_sealed()
    }

    /// One frame from the peer as the session sees it ([`Inbound::open`]; ticks are consumed).
    pub fn open(&mut self, frame: Frame) -> Result<Option<Frame>, Broken> {
        let opened = self.inbound.open(frame)?;
        self.heard = Instant::now();
        Ok(opened)
    }

    /// When a sealed session that hears nothing sealed ends `sealed-session-stalled`; never for a
    /// plain one.
    pub fn stall_deadline(&self) -> Option<Instant> {
        self.is_sealed().then_some(self.heard + STALL_AFTER)
    }
}

impl Drop for SessionInput {
    fn drop(&mut self) {
        self.counts.of(self.inbound.is_sealed()).fetch_sub(1, Ordering::Relaxed);
    }
}

/// How far a session start has come.
enum Step {
    /// Challenged (with [`SessionStart::challenge`], empty on a pairing): waiting for the hello.
    Hello,
    /// A host's hello was answered with this environment's signature: waiting for its bearer.
    Bearer,
    /// A host's sealed hello was answered and the signature sent inside the channel: waiting for
    /// its bearer there.
    SealedBearer(Box<Keys>),
    /// Admitted or refused: nothing more to do.
    Over,
}

/// One peer's session start (see the module's documentation).
pub struct SessionStart {
    gate: Arc<dyn Gate>,
    carrier: Carrier,
    challenge: String,
    deadline: Instant,
    received: usize,
    step: Step,
}

impl SessionStart {
    /// The start of a peer that just arrived and must be admitted by `deadline`, and the frames
    /// to send it first: its challenge (none when the gate waits for the peer's hello).
    pub fn new(gate: Arc<dyn Gate>, carrier: Carrier, deadline: Instant) -> anyhow::Result<(SessionStart, Vec<Frame>)> {
        let (challenge, frames) = if gate.challenges() {
            let nonce = protocol::new_nonce()?;
            let frame = Frame::from(AgentMessage::challenge(&nonce));
            (nonce, vec![frame])
        } else {
            (String::new(), Vec::new())
        };
        Ok((SessionStart { gate, carrier, challenge, deadline, received: 0, step: Step::Hello }, frames))
    }

    /// When the peer is refused unless it is admitted first; `None` once the start is over.
    pub fn deadline(&self) -> Option<Instant> {
        (!matches!(self.step, Step::Over)).then_some(self.deadline)
    }

    /// `len` more bytes arrived from the peer (a frame, or a part of one still being joined):
    /// past the carrier's budget, the peer is refused.
    pub fn on_bytes(&mut self, len: usize) -> Option<Refusal> {
        if matches!(self.step, Step::Over) {
            return None;
        }
        self.received = self.received.saturating_add(len);
        (self.received > self.carrier.budget()).then(|| self.too_much())
    }

    /// The peer sent more than its budget before its hello (noticed here, or by the carrier's
    /// own byte count): closed 1009.
    pub fn too_much(&mut self) -> Refusal {
        self.step = Step::Over;
        Refusal { code: ErrorCode::TooLarge, frames: Vec::new(), close: CloseCode::Size, reason: TOO_MUCH_BEFORE_HELLO }
    }

    /// The clock moved to `now`: a peer past its deadline is refused with the gate's
    /// [`timeout_code`](Gate::timeout_code).
    pub fn on_timeout(&mut self, now: Instant) -> Option<Refusal> {
        if now < self.deadline || matches!(self.step, Step::Over) {
            return None;
        }
        let code = self.gate.timeout_code();
        let told = AgentMessage::Error { code, message: Some("no hello in time".into()) };
        let mut sealer = match std::mem::replace(&mut self.step, Step::Over) {
            Step::SealedBearer(keys) => Some(keys),
            _ => None,
        };
        Some(self.refusal(code, told, sealer.as_deref_mut()))
    }

    /// Refuses the peer with `code` for the carrier's own reasons (its socket ended before a
    /// hello).
    pub fn refuse(&mut self, code: ErrorCode) -> Refusal {
        self.step = Step::Over;
        self.refusal(code, AgentMessage::error(code), None)
    }

    /// One whole frame from the peer; `hello_ok` is the agent's answer for an admission (its
    /// protocol-2 form: it is sealed here when the session is).
    pub fn on_frame(&mut self, frame: Frame, hello_ok: &dyn Fn(&Admission) -> AgentMessage) -> Next {
        match std::mem::replace(&mut self.step, Step::Over) {
            Step::Hello => self.on_hello(frame, hello_ok),
            Step::Bearer => self.on_bearer(frame, hello_ok),
            Step::SealedBearer(keys) => self.on_sealed_bearer(frame, keys, hello_ok),
            Step::Over => Next::Wait,
        }
    }

    fn on_hello(&mut self, frame: Frame, hello_ok: &dyn Fn(&Admission) -> AgentMessage) -> Next {
        let Frame::Text(text) = frame else { return self.not_yet(Step::Hello) };
        match admit_hello(self.gate.as_ref(), &text, &self.challenge) {
            Ok(HelloVerdict::Admitted(admission)) => self.admit(admission, None, hello_ok),
            Ok(HelloVerdict::AwaitBearer(answer)) => {
                self.step = Step::Bearer;
                Next::Send(vec![Frame::from(answer)])
            }
            Ok(HelloVerdict::AwaitSealedBearer(seal)) => {
                let answered = seal.finish().and_then(|(hello_ok, identity, mut keys)| {
                    let identity = seal_frame(&mut keys.sealer, &Frame::from(identity))?;
                    Ok((hello_ok, identity, keys))
                });
                match answered {
                    Ok((hello_ok, identity, keys)) => {
                        self.step = Step::SealedBearer(Box::new(keys));
                        Next::Send(std::iter::once(hello_ok).chain(identity).collect())
                    }
                    Err(err) => self.internal(&err),
                }
            }
            Err(ErrorCode::UnauthenticatedCall) => self.not_yet(Step::Hello),
            Err(code) => Next::Refused(self.refusal(code, AgentMessage::error(code), None)),
        }
    }

    fn on_bearer(&mut self, frame: Frame, hello_ok: &dyn Fn(&Admission) -> AgentMessage) -> Next {
        let Frame::Text(text) = frame else { return self.not_yet(Step::Bearer) };
        match admit_bearer(self.gate.as_ref(), &text) {
            Ok(admission) => self.admit(admission, None, hello_ok),
            Err(ErrorCode::UnauthenticatedCall) => self.not_yet(Step::Bearer),
            Err(code) => Next::Refused(self.refusal(code, AgentMessage::error(code), None)),
        }
    }

    /// A frame of a host's sealed session before its bearer: opened, it must be the bearer.
    /// Anything that does not open ends the start with nothing run.
    fn on_sealed_bearer(
        &mut self,
        frame: Frame,
        mut keys: Box<Keys>,
        hello_ok: &dyn Fn(&Admission) -> AgentMessage,
    ) -> Next {
        let opened = match frame {
            Frame::Binary(data) => keys.opener.open(&data),
            Frame::Text(_) => Err(Broken("an unsealed frame in a sealed session")),
        };
        let text = match opened {
            Ok(Some(Plain::Json(text))) if !is_tick(&text) => text,
            Ok(_) => {
                self.step = Step::SealedBearer(keys);
                return Next::Wait;
            }
            Err(broken) => {
                warn!("{broken}; the host's session is closed");
                let code = ErrorCode::SealedSessionBroken;
                return Next::Refused(self.refusal(code, AgentMessage::error(code), None));
            }
        };
        match admit_bearer(self.gate.as_ref(), &text) {
            Ok(admission) => self.admit(admission, Some(keys), hello_ok),
            Err(ErrorCode::UnauthenticatedCall) => {
                self.step = Step::SealedBearer(keys);
                Next::Wait
            }
            Err(code) => Next::Refused(self.refusal(code, AgentMessage::error(code), Some(&mut keys))),
        }
    }

    /// The admitted session and its first frames: `hello_ok` as the session's protocol carries
    /// it — plain with the agent's proof, plain carrying message 2 of a token-keyed handshake, or
    /// sealed in a pairing's channel already open (`keys`).
    fn admit(
        &mut self,
        mut admission: Admission,
        keys: Option<Box<Keys>>,
        hello_ok: &dyn Fn(&Admission) -> AgentMessage,
    ) -> Next {
        let answer = hello_ok(&admission);
        let sealed = match (keys, admission.seal.take()) {
            (Some(mut keys), _) => seal_frame(&mut keys.sealer, &Frame::from(sealed_hello_ok(answer)))
                .map(|frames| (frames, Some(keys)))
                .map_err(anyhow::Error::from),
            (None, Some(responder)) => {
                responder.finish(sealed_hello_ok(answer).to_json().as_bytes()).and_then(|(mut keys, two)| {
                    let mut frames = vec![Frame::from(AgentMessage::HelloOk(HelloOk::handshake(&two)))];
                    // A ticket opened this session: its first sealed frame hands the pairing's token.
                    if let Some(token) = admission.hand_token.take() {
                        let handed = AgentMessage::Pairing(PairingToken { token: token.expose().to_owned() });
                        frames.extend(seal_frame(&mut keys.sealer, &Frame::from(handed))?);
                    }
                    Ok((frames, Some(Box::new(keys))))
                })
            }
            (None, None) => Ok((vec![Frame::from(answer)], None)),
        };
        match sealed {
            Ok((frames, keys)) => Next::Admitted(Box::new(Admitted { admission, frames, ends: Ends(keys) })),
            Err(err) => self.internal(&err),
        }
    }

    /// A frame that is not what this step waits for: ignored through the relay (it was counted
    /// against the budget), refused on the loopback socket.
    fn not_yet(&mut self, step: Step) -> Next {
        match self.carrier {
            Carrier::Relay => {
                self.step = step;
                Next::Wait
            }
            Carrier::Loopback => {
                let code = ErrorCode::UnauthenticatedCall;
                Next::Refused(self.refusal(code, AgentMessage::error(code), None))
            }
        }
    }

    fn internal(&mut self, err: &anyhow::Error) -> Next {
        warn!("cannot answer a hello: {err:#}");
        let code = ErrorCode::Internal;
        let mut refusal = self.refusal(code, AgentMessage::error(code), None);
        refusal.close = CloseCode::Error;
        Next::Refused(refusal)
    }

    /// A refusal with `code`, telling the peer `told` as its carrier does (sealed with `keys`
    /// when its channel is already open). The start is over.
    fn refusal(&mut self, code: ErrorCode, told: AgentMessage, keys: Option<&mut Keys>) -> Refusal {
        self.step = Step::Over;
        let frames = match (self.carrier, keys) {
            (Carrier::Loopback, _) => Vec::new(),
            (Carrier::Relay, None) => vec![Frame::from(told)],
            (Carrier::Relay, Some(keys)) => seal_frame(&mut keys.sealer, &Frame::from(told)).unwrap_or_default(),
        };
        Refusal { code, frames, close: CloseCode::Policy, reason: code.as_str() }
    }
}

/// `hello_ok` as a sealed session carries it: protocol 3, no proof (the handshake proved it).
fn sealed_hello_ok(hello_ok: AgentMessage) -> AgentMessage {
    match hello_ok {
        AgentMessage::HelloOk(mut ok) => {
            ok.protocol = protocol::PROTOCOL_SEALED;
            ok.proof = None;
            AgentMessage::HelloOk(ok)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::gate::{GateShared, GateState, LivePairing, PairingGate, TokenGate};
    use crate::environments::identity::{code_hash, pairing_psk_input, verify_hello, HelloBinding, Identity};
    use crate::environments::store::bearer_hash;
    use crate::protocol::HOST_ROLE;
    use crate::seal::{Initiator, Opener, Sealer};
    use crate::secret::Secret;
    use base64::Engine;
    use serde_json::{json, Value};
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    const TOKEN: &str = "00112233445566778899aabbccddeeff";

    fn token() -> Secret {
        Secret::parse_hex128(TOKEN).unwrap()
    }

    fn answer(_: &Admission) -> AgentMessage {
        AgentMessage::HelloOk(HelloOk {
            agent: "voxa/t".into(),
            mode: "hosted".into(),
            tools: vec!["list_dir".into()],
            protocol: protocol::PROTOCOL_VERSION,
            proof: None,
            env_key: None,
            host: None,
            vapid_public_key: None,
            noise: None,
        })
    }

    fn json_of(frame: &Frame) -> Value {
        match frame {
            Frame::Text(text) => serde_json::from_str(text).unwrap(),
            Frame::Binary(_) => panic!("a binary frame where JSON was expected"),
        }
    }

    /// A start on the token gate and the nonce of the challenge it sent.
    fn token_start(carrier: Carrier, sealed_only: bool) -> (SessionStart, String) {
        let gate = Arc::new(TokenGate::new(token(), "phone", sealed_only));
        let (start, opening) = SessionStart::new(gate, carrier, Instant::now() + HELLO_TIMEOUT).unwrap();
        let [challenge] = opening.as_slice() else { panic!("one challenge: {opening:?}") };
        let challenge = json_of(challenge);
        assert_eq!((challenge["type"].as_str(), challenge["protocols"].clone()), (Some("challenge"), json!([2, 3])));
        (start, challenge["nonce"].as_str().unwrap().to_owned())
    }

    fn sealed_hello(challenge: &str) -> (Initiator, Frame) {
        let (initiator, one) = Initiator::start(&token(), challenge).unwrap();
        let noise = base64::engine::general_purpose::STANDARD.encode(one);
        (initiator, Frame::text(json!({"type":"hello","protocol":3,"noise": noise,"client":"unit/1"}).to_string()))
    }

    fn admitted(next: Next) -> Admitted {
        match next {
            Next::Admitted(admitted) => *admitted,
            other => panic!("not admitted: {other:?}"),
        }
    }

    fn refused(next: Next) -> Refusal {
        match next {
            Next::Refused(refusal) => refusal,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_sealed_hello_is_admitted_with_message_2_and_sealed_ends() {
        let (mut start, challenge) = token_start(Carrier::Relay, false);
        let (initiator, hello) = sealed_hello(&challenge);
        let Admitted { admission, frames, ends } = admitted(start.on_frame(hello, &answer));
        assert_eq!((admission.caller.as_str(), admission.client.as_deref()), ("phone", Some("unit/1")));
        assert!(ends.is_sealed());
        let [hello_ok] = frames.as_slice() else { panic!("{frames:?}") };
        let hello_ok = json_of(hello_ok);
        assert_eq!((hello_ok["type"].as_str(), hello_ok["protocol"].as_u64()), (Some("hello_ok"), Some(3)));
        assert!(hello_ok.get("tools").is_none(), "the answer travels inside message 2: {hello_ok}");
        let two = base64::engine::general_purpose::STANDARD.decode(hello_ok["noise"].as_str().unwrap()).unwrap();
        let (_, payload) = initiator.finish(&two).unwrap();
        let inner: Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!((inner["protocol"].as_u64(), inner["tools"].clone()), (Some(3), json!(["list_dir"])));
        assert!(inner.get("proof").is_none());
        assert_eq!(start.deadline(), None, "the start is over");
        assert!(matches!(start.on_frame(Frame::text("{}"), &answer), Next::Wait));
    }

    #[tokio::test]
    async fn a_protocol_2_hello_gets_the_agents_proof_unless_sealing_is_required() {
        let (mut start, challenge) = token_start(Carrier::Loopback, false);
        let nonce = protocol::new_nonce().unwrap();
        let proof = protocol::client_proof(&token(), &challenge, &nonce);
        let hello = json!({"type":"hello","protocol":2,"nonce": nonce,"proof": proof});
        let Admitted { frames, ends, .. } = admitted(start.on_frame(Frame::text(hello.to_string()), &answer));
        assert!(!ends.is_sealed());
        // The closure's answer, sent as it is: the gate's proof is the caller's to fill in.
        assert_eq!(json_of(&frames[0])["type"], "hello_ok");

        let (mut strict, challenge) = token_start(Carrier::Loopback, true);
        let proof = protocol::client_proof(&token(), &challenge, &nonce);
        let hello = json!({"type":"hello","protocol":2,"nonce": nonce,"proof": proof});
        let refusal = refused(strict.on_frame(Frame::text(hello.to_string()), &answer));
        assert_eq!((refusal.code, refusal.reason), (ErrorCode::SealedSessionRequired, "sealed-session-required"));
    }

    #[tokio::test]
    async fn a_refused_hello_is_told_through_the_relay_and_closed_on_both() {
        for carrier in [Carrier::Relay, Carrier::Loopback] {
            let (mut start, _) = token_start(carrier, false);
            let (_, hello) = sealed_hello(&"f".repeat(32));
            let refusal = refused(start.on_frame(hello, &answer));
            assert_eq!(
                (refusal.code, refusal.close, refusal.reason),
                (ErrorCode::BearerRefused, CloseCode::Policy, "bearer-refused")
            );
            match carrier {
                Carrier::Relay => {
                    assert_eq!(json_of(&refusal.frames[0]), json!({"type":"error","code":"bearer-refused"}))
                }
                Carrier::Loopback => assert!(refusal.frames.is_empty()),
            }
            assert_eq!(start.deadline(), None);
        }
    }

    #[tokio::test]
    async fn frames_before_the_hello_are_ignored_through_the_relay_and_refused_on_loopback() {
        let (mut relayed, challenge) = token_start(Carrier::Relay, false);
        for early in [Frame::text(r#"{"type":"status"}"#), Frame::binary(vec![1, 2, 3]), Frame::text("junk")] {
            assert!(matches!(relayed.on_frame(early, &answer), Next::Wait));
        }
        let (_, hello) = sealed_hello(&challenge);
        admitted(relayed.on_frame(hello, &answer));

        let (mut local, _) = token_start(Carrier::Loopback, false);
        let refusal = refused(local.on_frame(Frame::text(r#"{"type":"status"}"#), &answer));
        assert_eq!((refusal.code, refusal.close), (ErrorCode::UnauthenticatedCall, CloseCode::Policy));
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_without_a_hello_by_its_deadline_is_refused_once() {
        let (mut start, _) = token_start(Carrier::Relay, false);
        let deadline = start.deadline().unwrap();
        assert_eq!(deadline, Instant::now() + HELLO_TIMEOUT);
        assert!(start.on_timeout(Instant::now()).is_none());
        tokio::time::advance(HELLO_TIMEOUT - Duration::from_millis(1)).await;
        assert!(start.on_timeout(Instant::now()).is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        let refusal = start.on_timeout(Instant::now()).expect("refused at the deadline");
        assert_eq!((refusal.code, refusal.close), (ErrorCode::UnauthenticatedCall, CloseCode::Policy));
        assert_eq!(
            json_of(&refusal.frames[0]),
            json!({"type":"error","code":"unauthenticated-call","message":"no hello in time"})
        );
        assert!(start.on_timeout(Instant::now()).is_none(), "refused once");
        assert_eq!(start.deadline(), None);
    }

    #[tokio::test]
    async fn a_peer_past_its_carriers_budget_before_the_hello_is_closed_1009() {
        for (carrier, budget) in
            [(Carrier::Relay, MAX_RELAYED_PREAUTH_LEN), (Carrier::Loopback, protocol::MAX_PREAUTH_LEN)]
        {
            let (mut start, _) = token_start(carrier, false);
            assert!(start.on_bytes(budget - 1).is_none());
            assert!(start.on_bytes(1).is_none(), "the budget itself is allowed");
            let refusal = start.on_bytes(1).expect("one byte over");
            assert_eq!(
                (refusal.code, refusal.close, refusal.reason),
                (ErrorCode::TooLarge, CloseCode::Size, TOO_MUCH_BEFORE_HELLO)
            );
            assert!(refusal.frames.is_empty());
            assert!(start.on_bytes(1 << 20).is_none(), "refused once");
        }
        assert_eq!(MAX_RELAYED_PREAUTH_LEN, 64 << 10);
    }

    const BEARER: &str = "vbx_0123456789abcdef0123456789abcdef";
    const CODE: &str = "00112233445566778899aabbccddeeff";

    fn pairing_gate() -> (Arc<dyn Gate>, Arc<Identity>) {
        let identity = Arc::new(Identity::generate().unwrap());
        let mut state = GateState { identity: Some(identity.clone()), ..Default::default() };
        let pairing = LivePairing {
            bearer_hash: bearer_hash(BEARER),
            bound_to: identity.env_key(),
            code_hash: code_hash(CODE),
            revoked: CancellationToken::new(),
        };
        state.live.insert("p_1".into(), pairing);
        let shared = Arc::new(GateShared { state: std::sync::Mutex::new(state), ..Default::default() });
        (Arc::new(PairingGate { shared, pairing_id: "p_1".into() }), identity)
    }

    /// A host's sealed hello to the environment, and what it needs to go on.
    fn host_hello(identity: &Identity, nonce: &str) -> (Initiator, Frame) {
        let (initiator, one) = Initiator::start(&pairing_psk_input(&bearer_hash(BEARER)), nonce).unwrap();
        let hello = json!({"type":"hello","protocol":3,"role": HOST_ROLE,"envKey": identity.env_key(),"nonce": nonce,
            "noise": base64::engine::general_purpose::STANDARD.encode(one)});
        (initiator, Frame::text(hello.to_string()))
    }

    fn open_json(opener: &mut Opener, frame: &Frame) -> Value {
        let Frame::Binary(data) = frame else { panic!("an unsealed frame") };
        match opener.open(data).unwrap() {
            Some(Plain::Json(text)) => serde_json::from_str(&text).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn seal_json(sealer: &mut Sealer, value: Value) -> Frame {
        seal_frame(sealer, &Frame::text(value.to_string())).unwrap().remove(0)
    }

    #[tokio::test]
    async fn a_hosts_sealed_hello_gets_the_signature_sealed_and_its_sealed_bearer_admits() {
        let (gate, identity) = pairing_gate();
        let (mut start, opening) = SessionStart::new(gate, Carrier::Relay, Instant::now() + HELLO_TIMEOUT).unwrap();
        assert!(opening.is_empty(), "a pairing waits for the host's hello");
        let nonce = protocol::new_nonce().unwrap();
        let (initiator, hello) = host_hello(&identity, &nonce);
        let Next::Send(frames) = start.on_frame(hello, &answer) else { panic!("no answer to the hello") };
        let [hello_ok, sealed_identity] = frames.as_slice() else { panic!("{frames:?}") };
        let two =
            base64::engine::general_purpose::STANDARD.decode(json_of(hello_ok)["noise"].as_str().unwrap()).unwrap();
        let (mut keys, _) = initiator.finish(&two).unwrap();
        let signed = open_json(&mut keys.opener, sealed_identity);
        let binding = HelloBinding {
            code_hash: &code_hash(CODE),
            host_nonce: &nonce,
            env_nonce: signed["nonce"].as_str().unwrap(),
            handshake: Some(keys.handshake_hash()),
        };
        assert!(verify_hello(&identity.env_key(), &binding, signed["signature"].as_str().unwrap()));
        // A tick before the bearer changes nothing; the bearer, sealed, admits.
        assert!(matches!(start.on_frame(seal_json(&mut keys.sealer, json!({"type":"tick"})), &answer), Next::Wait));
        let bearer = seal_json(&mut keys.sealer, json!({"type":"bearer","bearer": BEARER}));
        let Admitted { admission, frames, ends } = admitted(start.on_frame(bearer, &answer));
        assert!(admission.caller.starts_with("host:") && ends.is_sealed());
        let ok = open_json(&mut keys.opener, &frames[0]);
        assert_eq!((ok["type"].as_str(), ok["protocol"].as_u64()), (Some("hello_ok"), Some(3)));
    }

    #[tokio::test]
    async fn a_wrong_sealed_bearer_is_told_inside_the_channel_and_an_unsealed_frame_breaks_it() {
        let (gate, identity) = pairing_gate();
        let (mut start, _) = SessionStart::new(gate.clone(), Carrier::Relay, Instant::now() + HELLO_TIMEOUT).unwrap();
        let (initiator, hello) = host_hello(&identity, &protocol::new_nonce().unwrap());
        let Next::Send(frames) = start.on_frame(hello, &answer) else { panic!() };
        let two =
            base64::engine::general_purpose::STANDARD.decode(json_of(&frames[0])["noise"].as_str().unwrap()).unwrap();
        let (mut keys, _) = initiator.finish(&two).unwrap();
        open_json(&mut keys.opener, &frames[1]);
        let wrong = seal_json(&mut keys.sealer, json!({"type":"bearer","bearer": format!("vbx_{}", "f".repeat(32))}));
        let refusal = refused(start.on_frame(wrong, &answer));
        assert_eq!((refusal.code, refusal.close), (ErrorCode::BearerRefused, CloseCode::Policy));
        assert_eq!(open_json(&mut keys.opener, &refusal.frames[0]), json!({"type":"error","code":"bearer-refused"}));

        let (mut start, _) = SessionStart::new(gate, Carrier::Relay, Instant::now() + HELLO_TIMEOUT).unwrap();
        let (_, hello) = host_hello(&identity, &protocol::new_nonce().unwrap());
        assert!(matches!(start.on_frame(hello, &answer), Next::Send(_)));
        let plain = Frame::text(json!({"type":"bearer","bearer": BEARER}).to_string());
        let refusal = refused(start.on_frame(plain, &answer));
        assert_eq!(refusal.code, ErrorCode::SealedSessionBroken);
        assert_eq!(json_of(&refusal.frames[0]), json!({"type":"error","code":"sealed-session-broken"}));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sealed_session_stalls_when_nothing_sealed_arrives_and_a_tick_is_consumed() {
        let (mut start, challenge) = token_start(Carrier::Relay, false);
        let (initiator, hello) = sealed_hello(&challenge);
        let Admitted { frames, ends, .. } = admitted(start.on_frame(hello, &answer));
        let two =
            base64::engine::general_purpose::STANDARD.decode(json_of(&frames[0])["noise"].as_str().unwrap()).unwrap();
        let (mut client, _) = initiator.finish(&two).unwrap();
        let (out, mut sent) = mpsc::channel(8);
        let counts = Arc::new(SessionCounts::default());
        let mut io = ends.open(out, &counts);
        assert_eq!(counts.sealed(), 1);
        let opened_at = Instant::now();
        assert_eq!(io.input.stall_deadline(), Some(opened_at + STALL_AFTER));
        tokio::time::advance(Duration::from_secs(20)).await;
        let tick = seal_json(&mut client.sealer, json!({"type":"tick"}));
        assert_eq!(io.input.open(tick).unwrap(), None, "the session never sees a tick");
        assert_eq!(io.input.stall_deadline(), Some(Instant::now() + STALL_AFTER));
        // The agent's own writer ticks when the session says nothing.
        tokio::time::advance(crate::seal::ticks::TICK_INTERVAL).await;
        let sent_tick = sent.recv().await.unwrap();
        assert_eq!(open_json(&mut client.opener, &sent_tick), json!({"type":"tick"}));
        drop(io);
        assert_eq!(counts.sealed(), 0);
    }
}
