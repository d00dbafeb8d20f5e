//! Hello admission, in one place: who may open a session, by the machine's auth token (phone and
//! loopback clients) or by an environment pairing's bearer (a host driving this machine). See
//! docs/PROTOCOL.md, "Hello".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::environments::identity::{is_valid_nonce, Identity};
use crate::environments::store::bearer_hash;
use crate::protocol::{self, ClientMessage, ErrorCode, Hello};
use crate::secret::Secret;

/// Decides who may open a session from their hello.
pub trait Gate: Send + Sync {
    /// Admits a hello or refuses it with a contract code.
    fn admit(&self, hello: &Hello) -> Result<Admission, ErrorCode>;
}

/// A caller the gate let in.
#[derive(Clone, Debug, Default)]
pub struct Admission {
    /// Audit name of the caller.
    pub caller: String,
    /// Filled into `hello_ok` for environment sessions (docs/PROTOCOL.md, "Environments").
    pub env_key: Option<String>,
    pub signature: Option<String>,
    /// Cancelled when the credential behind this session is revoked.
    pub revoked: Option<CancellationToken>,
}

/// The plain gate: the hello must carry this machine's auth token.
pub struct TokenGate {
    pub token: Secret,
    pub caller: &'static str,
}

impl Gate for TokenGate {
    fn admit(&self, hello: &Hello) -> Result<Admission, ErrorCode> {
        match hello.token.as_deref() {
            Some(candidate) if self.token.matches(candidate) => {
                Ok(Admission { caller: self.caller.to_owned(), ..Default::default() })
            }
            Some(_) => Err(ErrorCode::BearerRefused),
            None => Err(ErrorCode::UnauthenticatedCall),
        }
    }
}

/// Admits the first frame of a session, if it is a hello the gate accepts.
pub fn admit_hello(gate: &dyn Gate, text: &str) -> Result<Admission, ErrorCode> {
    match protocol::parse_client(text) {
        Ok(ClientMessage::Hello(hello)) => gate.admit(&hello),
        _ => Err(ErrorCode::UnauthenticatedCall),
    }
}

/// State every pairing gate reads.
#[derive(Default)]
pub(crate) struct GateShared {
    pub(crate) state: Mutex<GateState>,
}

impl GateShared {
    pub(crate) fn identity(&self) -> Option<Arc<Identity>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).identity.clone()
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
    /// Cancelled when the pairing is revoked: every session it admitted ends.
    pub(crate) revoked: CancellationToken,
}

/// Admits a host on one pairing's relay code (docs/PROTOCOL.md, "Environments").
pub struct PairingGate {
    pub(crate) shared: Arc<GateShared>,
    pub(crate) pairing_id: String,
}

impl Gate for PairingGate {
    fn admit(&self, hello: &Hello) -> Result<Admission, ErrorCode> {
        let state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        admit(&state, &self.pairing_id, hello)
    }
}

/// The order is the contract: envKey first, then presence of a bearer, then revoked, then right.
fn admit(state: &GateState, pairing_id: &str, hello: &Hello) -> Result<Admission, ErrorCode> {
    let Some(identity) = &state.identity else { return Err(ErrorCode::UnknownEnvironment) };
    let own_key = identity.env_key();
    if hello.env_key.as_deref() != Some(own_key.as_str()) {
        return Err(ErrorCode::UnknownEnvironment);
    }
    // No bearer: the dialer keeps waiting, and answers `unauthenticated-call` when time is up.
    let Some(bearer) = hello.bearer.as_deref() else { return Err(ErrorCode::UnauthenticatedCall) };
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
    let Some(nonce) = hello.nonce.as_deref().filter(|n| is_valid_nonce(n)) else {
        return Err(ErrorCode::BadFrame);
    };
    Ok(Admission {
        caller: format!("host:{}:{pairing_id}", &own_key[..16]),
        env_key: Some(own_key),
        signature: Some(identity.sign_nonce(nonce)),
        revoked: Some(pairing.revoked.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::identity::{new_nonce, verify_nonce};

    fn state_with(bearer: &str) -> (GateState, String) {
        let identity = Identity::generate().unwrap();
        let key = identity.env_key();
        let mut state = GateState { identity: Some(Arc::new(identity)), ..Default::default() };
        state.live.insert(
            "p_1".into(),
            LivePairing { bearer_hash: bearer_hash(bearer), bound_to: key.clone(), revoked: CancellationToken::new() },
        );
        (state, key)
    }

    fn hello(key: &str, bearer: Option<&str>, nonce: Option<&str>) -> Hello {
        Hello {
            role: Some(crate::protocol::HOST_ROLE.into()),
            env_key: Some(key.into()),
            bearer: bearer.map(Into::into),
            nonce: nonce.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn a_good_hello_is_answered_with_a_signature_over_the_nonce() {
        let bearer = "vbx_0123456789abcdef0123456789abcdef";
        let (state, key) = state_with(bearer);
        let nonce = new_nonce().unwrap();
        let admission = admit(&state, "p_1", &hello(&key, Some(bearer), Some(&nonce))).unwrap();
        assert_eq!(admission.env_key.as_deref(), Some(key.as_str()));
        assert!(verify_nonce(&key, &nonce, admission.signature.as_deref().unwrap()));
        assert!(admission.caller.starts_with("host:") && !admission.caller.contains(bearer));
        let token = admission.revoked.unwrap();
        state.live["p_1"].revoked.cancel();
        assert!(token.is_cancelled());
    }

    #[test]
    fn the_env_key_is_checked_before_the_bearer() {
        let bearer = "vbx_0123456789abcdef0123456789abcdef";
        let (state, _) = state_with(bearer);
        let other = Identity::generate().unwrap().env_key();
        let nonce = new_nonce().unwrap();
        for presented in [Some(bearer), Some("vbx_wrong"), None] {
            let refused = admit(&state, "p_1", &hello(&other, presented, Some(&nonce))).unwrap_err();
            assert_eq!(refused, ErrorCode::UnknownEnvironment);
        }
        let no_key = Hello { bearer: Some(bearer.into()), ..Default::default() };
        assert_eq!(admit(&state, "p_1", &no_key).unwrap_err(), ErrorCode::UnknownEnvironment);
        let empty = GateState::default();
        assert_eq!(
            admit(&empty, "p_1", &hello(&other, Some(bearer), None)).unwrap_err(),
            ErrorCode::UnknownEnvironment
        );
    }

    #[test]
    fn wrong_missing_and_revoked_bearers_get_their_own_codes() {
        let bearer = "vbx_0123456789abcdef0123456789abcdef";
        let (mut state, key) = state_with(bearer);
        let nonce = new_nonce().unwrap();
        let code = |state: &GateState, b: Option<&str>, pairing: &str| {
            admit(state, pairing, &hello(&key, b, Some(&nonce))).unwrap_err()
        };
        assert_eq!(code(&state, None, "p_1"), ErrorCode::UnauthenticatedCall);
        assert_eq!(code(&state, Some("vbx_ffffffffffffffffffffffffffffffff"), "p_1"), ErrorCode::BearerRefused);
        assert_eq!(code(&state, Some(bearer), "p_other"), ErrorCode::BearerRefused);
        let bad_nonce = admit(&state, "p_1", &hello(&key, Some(bearer), Some("not hex"))).unwrap_err();
        assert_eq!(bad_nonce, ErrorCode::BadFrame);
        state.revoked.push(bearer_hash(bearer));
        assert_eq!(code(&state, Some(bearer), "p_1"), ErrorCode::PairingRevoked);
        assert_eq!(code(&state, Some(bearer), "p_other"), ErrorCode::PairingRevoked);
    }

    #[test]
    fn a_pairing_bound_to_an_old_identity_is_refused() {
        let bearer = "vbx_0123456789abcdef0123456789abcdef";
        let (mut state, _) = state_with(bearer);
        let rekeyed = Identity::generate().unwrap();
        let new_key = rekeyed.env_key();
        state.identity = Some(Arc::new(rekeyed));
        let nonce = new_nonce().unwrap();
        let refused = admit(&state, "p_1", &hello(&new_key, Some(bearer), Some(&nonce))).unwrap_err();
        assert_eq!(refused, ErrorCode::BearerRefused);
    }
}
