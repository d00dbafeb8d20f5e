//! Session start (docs/PROTOCOL.md, "Session start (protocol 2)"): `challenge`, `hello`,
//! `bearer`, `hello_ok`, and the proofs and nonces they carry.

use serde::{Deserialize, Serialize};

use super::{NONCE_HEX_LEN, PROOF_HEX_LEN, PROTOCOL_SEALED};
use crate::secret::Secret;

/// `role` of the hello a host sends to drive an environment.
pub const HOST_ROLE: &str = "host";

/// The first frame of every session: the answer to the agent's `challenge` (phone and local
/// clients), or a host's hello to an environment.
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Hello {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// A raw auth token: protocol 1. Never sent by voxa; a hello carrying it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// HMAC proof over both nonces ([`client_proof`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Free-form client name and version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// `"host"` when a host drives an environment (docs/PROTOCOL.md, "Environments").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, rename = "envKey", skip_serializing_if = "Option::is_none")]
    pub env_key: Option<String>,
    /// The client's nonce (the host's, on an environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// Protocol 3: base64 of the Noise handshake's message 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
    /// Protocol 3 keyed by a pairing ticket instead of the auth token (docs/PROTOCOL.md, "A
    /// pairing link's ticket"): the agent spends the ticket and hands the token sealed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ticket: bool,
}

/// `{"type":"pairing","token":…}`: the pairing's auth token, sent by the agent inside a sealed
/// session opened with a ticket, right after `hello_ok`. `Debug` never shows it.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
pub struct PairingToken {
    pub token: String,
}

impl std::fmt::Debug for PairingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PairingToken(<redacted>)")
    }
}

/// `{"type":"bearer","bearer":…}`: `Debug` never shows it.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
pub struct BearerFrame {
    pub bearer: String,
}

impl std::fmt::Debug for BearerFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerFrame(<redacted>)")
    }
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redact = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("Hello")
            .field("protocol", &self.protocol)
            .field("token", &redact(&self.token))
            .field("proof", &self.proof)
            .field("client", &self.client)
            .field("role", &self.role)
            .field("env_key", &self.env_key)
            .field("nonce", &self.nonce)
            .field("noise", &self.noise.as_ref().map(|_| "<handshake>"))
            .field("ticket", &self.ticket)
            .finish()
    }
}

/// Answer to a good hello.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct HelloOk {
    /// Empty, and left out, in protocol 3's plain `hello_ok` ([`HelloOk::handshake`]), whose
    /// fields travel inside `noise`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    #[serde(default)]
    pub protocol: u32,
    /// The agent's proof over both nonces ([`agent_proof`]); a client checks it before it sends
    /// anything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Environment answers (docs/PROTOCOL.md, "Environments"): own envKey.
    #[serde(default, rename = "envKey", skip_serializing_if = "Option::is_none")]
    pub env_key: Option<String>,
    /// This machine's host name, so a client can name the pairing (sent only after a good hello).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The agent's VAPID public key (base64url of the uncompressed P-256 point), the page's
    /// `applicationServerKey` for notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vapid_public_key: Option<String>,
    /// Protocol 3: base64 of the Noise handshake's message 2, whose payload is this frame's JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
}

impl HelloOk {
    /// Protocol 3's plain `hello_ok`: message 2 of the Noise handshake, whose payload is the
    /// sealed `hello_ok` (or nothing, in an environment's answer to its host). Nothing else
    /// travels in the clear.
    pub fn handshake(message_two: &[u8]) -> Self {
        use base64::Engine as _;
        HelloOk {
            agent: String::new(),
            mode: String::new(),
            tools: Vec::new(),
            protocol: PROTOCOL_SEALED,
            proof: None,
            env_key: None,
            host: None,
            vapid_public_key: None,
            noise: Some(base64::engine::general_purpose::STANDARD.encode(message_two)),
        }
    }
}

/// Prefix of the message a client proves (see docs/PROTOCOL.md, "Session start (protocol 2)").
const CLIENT_PROOF_LABEL: &str = "voxa-hello/2 client\n";
/// Prefix of the message the agent proves.
const AGENT_PROOF_LABEL: &str = "voxa-hello/2 agent\n";

/// A fresh 128-bit nonce as 32 lowercase hex characters.
pub fn new_nonce() -> anyhow::Result<String> {
    use rand::TryRngCore;
    let mut bytes = [0u8; NONCE_HEX_LEN / 2];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|err| anyhow::anyhow!("the OS random number generator failed: {err}"))?;
    Ok(hex::encode(bytes))
}

/// True for a hello nonce: exactly 32 lowercase hex characters.
pub fn is_hello_nonce(nonce: &str) -> bool {
    nonce.len() == NONCE_HEX_LEN && crate::secret::is_lower_hex(nonce)
}

/// Whether `proof` has a hello proof's shape: 64 lowercase hex characters.
pub fn is_hello_proof(proof: &str) -> bool {
    proof.len() == PROOF_HEX_LEN && crate::secret::is_lower_hex(proof)
}

/// `HMAC-SHA256(key = token, label + agent_nonce + "\n" + client_nonce)`.
fn hello_mac(token: &Secret, label: &str, agent_nonce: &str, client_nonce: &str) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(token.expose().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for part in [label, agent_nonce, "\n", client_nonce] {
        mac.update(part.as_bytes());
    }
    mac
}

fn proof_hex(mac: hmac::Hmac<sha2::Sha256>) -> String {
    use hmac::Mac;
    hex::encode(mac.finalize().into_bytes())
}

/// Checks a presented proof in constant time; anything but 64 lowercase hex is wrong.
fn proof_matches(mac: hmac::Hmac<sha2::Sha256>, presented: &str) -> bool {
    use hmac::Mac;
    let mut bytes = [0u8; PROOF_HEX_LEN / 2];
    is_hello_proof(presented) && hex::decode_to_slice(presented, &mut bytes).is_ok() && mac.verify_slice(&bytes).is_ok()
}

/// The client's proof: lowercase hex of `HMAC-SHA256(T, "voxa-hello/2 client\n" + A + "\n" + C)`.
pub fn client_proof(token: &Secret, agent_nonce: &str, client_nonce: &str) -> String {
    proof_hex(hello_mac(token, CLIENT_PROOF_LABEL, agent_nonce, client_nonce))
}

/// The agent's proof: lowercase hex of `HMAC-SHA256(T, "voxa-hello/2 agent\n" + A + "\n" + C)`.
pub fn agent_proof(token: &Secret, agent_nonce: &str, client_nonce: &str) -> String {
    proof_hex(hello_mac(token, AGENT_PROOF_LABEL, agent_nonce, client_nonce))
}

/// True when `proof` is the client's proof for these nonces (constant time).
pub fn verify_client_proof(token: &Secret, agent_nonce: &str, client_nonce: &str, proof: &str) -> bool {
    proof_matches(hello_mac(token, CLIENT_PROOF_LABEL, agent_nonce, client_nonce), proof)
}

/// True when `proof` is the agent's proof for these nonces (constant time).
pub fn verify_agent_proof(token: &Secret, agent_nonce: &str, client_nonce: &str, proof: &str) -> bool {
    proof_matches(hello_mac(token, AGENT_PROOF_LABEL, agent_nonce, client_nonce), proof)
}

#[cfg(test)]
mod tests {
    use crate::protocol::*;
    use crate::secret::Secret;

    #[test]
    fn protocol_3_s_plain_hello_ok_carries_message_2_and_nothing_else() {
        let plain = AgentMessage::HelloOk(HelloOk::handshake(b"\x01\x02two"));
        assert_eq!(plain.to_json(), r#"{"type":"hello_ok","protocol":3,"noise":"AQJ0d28="}"#);
        let parsed: AgentMessage = serde_json::from_str(&plain.to_json()).unwrap();
        let AgentMessage::HelloOk(ok) = parsed else { panic!("not a hello_ok") };
        assert_eq!((ok.agent.as_str(), ok.tools.len(), ok.noise.as_deref()), ("", 0, Some("AQJ0d28=")));
    }

    #[test]
    fn hello_debug_redacts_token_and_bearer() {
        let hello = Hello { token: Some("0123456789abcdef0123456789abcdef".into()), ..Default::default() };
        let shown = format!("{hello:?}");
        assert!(!shown.contains("0123456789abcdef"));
        let bearer = parse_client(r#"{"type":"bearer","bearer":"vbx_secret"}"#).unwrap();
        assert!(!format!("{bearer:?}").contains("vbx_secret"));
    }

    /// The worked example of docs/PROTOCOL.md: other clients (the web client's WebCrypto code
    /// among them) check themselves against these values.
    #[test]
    fn hello_proofs_match_the_documented_worked_example() {
        let token = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        let agent_nonce = "0123456789abcdef0123456789abcdef";
        let client_nonce = "fedcba9876543210fedcba9876543210";
        let client = client_proof(&token, agent_nonce, client_nonce);
        let agent = agent_proof(&token, agent_nonce, client_nonce);
        assert_eq!(client, CLIENT_PROOF_EXAMPLE);
        assert_eq!(agent, AGENT_PROOF_EXAMPLE);
        assert!(verify_client_proof(&token, agent_nonce, client_nonce, &client));
        assert!(verify_agent_proof(&token, agent_nonce, client_nonce, &agent));
        // Each proof is bound to its direction, to both nonces and to the token.
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, &agent));
        assert!(!verify_agent_proof(&token, agent_nonce, client_nonce, &client));
        assert!(!verify_client_proof(&token, client_nonce, agent_nonce, &client));
        let other = Secret::parse_hex128("ffeeddccbbaa99887766554433221100").unwrap();
        assert!(!verify_client_proof(&other, agent_nonce, client_nonce, &client));
        // Only the exact lowercase spelling counts.
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, &client.to_uppercase()));
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, &client[..63]));
        assert!(!verify_client_proof(&token, agent_nonce, client_nonce, ""));
    }

    const CLIENT_PROOF_EXAMPLE: &str = "5443ac3f4e3e479a60415e1042edf9736a2b5270918af2cea93033164c24171f";
    const AGENT_PROOF_EXAMPLE: &str = "1599d38f043a94e01ce17b0f74ce1fd2985a8cdef4b54aef1993c9fe4bc194d5";

    #[test]
    fn nonces_are_fresh_128_bit_hex() {
        let (a, b) = (new_nonce().unwrap(), new_nonce().unwrap());
        assert!(is_hello_nonce(&a) && is_hello_nonce(&b));
        assert_ne!(a, b);
        assert!(!is_hello_nonce(&a.to_uppercase()) && !is_hello_nonce(&a[..31]));
    }

    #[test]
    fn session_start_frames_have_the_documented_shape() {
        assert_eq!(
            AgentMessage::challenge("0123456789abcdef0123456789abcdef").to_json(),
            r#"{"type":"challenge","protocol":2,"nonce":"0123456789abcdef0123456789abcdef","protocols":[2,3]}"#
        );
        let hello =
            r#"{"type":"hello","protocol":2,"nonce":"fedcba9876543210fedcba9876543210","proof":"ab","client":"x/1"}"#;
        let ClientMessage::Hello(hello) = parse_client(hello).unwrap() else { panic!("not a hello") };
        assert_eq!(
            (hello.protocol, hello.proof.as_deref(), hello.client.as_deref()),
            (Some(2), Some("ab"), Some("x/1"))
        );
    }
}
