//! The handshake: `Noise_NNpsk0_25519_AESGCM_SHA256`, initiator = client. Message 1 (`-> psk, e`,
//! empty payload) travels in the hello's `noise`; message 2 (`<- e, ee`, the `hello_ok` JSON as
//! its payload) in `hello_ok`'s `noise`. Reading message 1 proves the client holds the token;
//! reading message 2 proves the agent does and that it answered this challenge.

use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use snow::{Builder, HandshakeState};

use super::transport::{Opener, Sealer};
use super::{prologue, psk, Broken, MAX_NOISE_MESSAGE, NOISE_PARAMS};
use crate::secret::Secret;

/// The session keys both sides hold after the handshake.
pub struct Keys {
    /// Seals what this side sends.
    pub sealer: Sealer,
    /// Opens what the peer sends.
    pub opener: Opener,
    handshake_hash: [u8; 32],
}

impl Keys {
    /// The Noise handshake hash `h`: unique to this session and known to both ends only. An
    /// environment signs it with its identity key, binding its identity to this sealed channel.
    pub fn handshake_hash(&self) -> &[u8; 32] {
        &self.handshake_hash
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(<redacted>)")
    }
}

/// The client's side, between sending message 1 and reading message 2.
pub struct Initiator {
    state: HandshakeState,
}

impl std::fmt::Debug for Initiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Initiator(<redacted>)")
    }
}

impl Initiator {
    /// Starts the handshake answering `challenge` (the agent's nonce as sent): the initiator and
    /// message 1.
    pub fn start(token: &Secret, challenge: &str) -> Result<(Initiator, Vec<u8>)> {
        let mut state = build(&psk(token), &prologue(challenge), Role::Initiator, None)?;
        let mut message = vec![0u8; MAX_NOISE_MESSAGE];
        let len = state.write_message(&[], &mut message).context("Noise message 1")?;
        message.truncate(len);
        Ok((Initiator { state }, message))
    }

    /// Reads message 2: its payload (the `hello_ok` JSON) and the session keys. Fails when the
    /// agent does not hold the token or answered another challenge.
    pub fn finish(mut self, message: &[u8]) -> Result<(Keys, Vec<u8>), Broken> {
        let mut payload = vec![0u8; message.len()];
        let len = self
            .state
            .read_message(message, &mut payload)
            .map_err(|_| Broken("the agent's handshake message does not check out"))?;
        payload.truncate(len);
        Ok((keys(self.state).map_err(|_| Broken("the handshake did not complete"))?, payload))
    }
}

/// The agent's side, after reading message 1 and before writing message 2.
pub struct Responder {
    state: HandshakeState,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(<redacted>)")
    }
}

impl Responder {
    /// Reads message 1 of a client answering `challenge`. Fails when the client does not hold
    /// the token (message 1's tag is keyed by the PSK) or the message is malformed.
    pub fn accept(token: &Secret, challenge: &str, message: &[u8]) -> Result<Responder, Broken> {
        let mut state = build(&psk(token), &prologue(challenge), Role::Responder, None)
            .map_err(|_| Broken("the handshake could not start"))?;
        let mut payload = vec![0u8; message.len()];
        state
            .read_message(message, &mut payload)
            .map_err(|_| Broken("the client's handshake message does not check out"))?;
        Ok(Responder { state })
    }

    /// Writes message 2 carrying `payload` (the `hello_ok` JSON): the message and the keys.
    pub fn finish(mut self, payload: &[u8]) -> Result<(Keys, Vec<u8>)> {
        let mut message = vec![0u8; MAX_NOISE_MESSAGE];
        let len = self.state.write_message(payload, &mut message).context("Noise message 2")?;
        message.truncate(len);
        Ok((keys(self.state)?, message))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Initiator,
    Responder,
}

fn build(psk: &[u8; 32], prologue: &[u8], role: Role, ephemeral: Option<&[u8]>) -> Result<HandshakeState> {
    let params = NOISE_PARAMS.parse().map_err(|err| anyhow!("Noise parameters: {err}"))?;
    let mut builder = Builder::new(params).psk(0, psk)?.prologue(prologue)?;
    if let Some(key) = ephemeral {
        builder = builder.fixed_ephemeral_key_for_testing_only(key);
    }
    Ok(match role {
        Role::Initiator => builder.build_initiator()?,
        Role::Responder => builder.build_responder()?,
    })
}

fn keys(state: HandshakeState) -> Result<Keys> {
    let handshake_hash: [u8; 32] =
        state.get_handshake_hash().try_into().map_err(|_| anyhow!("unexpected handshake hash length"))?;
    let transport = Arc::new(state.into_stateless_transport_mode()?);
    Ok(Keys { sealer: Sealer::new(transport.clone()), opener: Opener::new(transport), handshake_hash })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn token() -> Secret {
        Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap()
    }

    const CHALLENGE: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn both_sides_agree_and_the_payload_and_frames_go_through() {
        let (initiator, one) = Initiator::start(&token(), CHALLENGE).unwrap();
        // Message 1 is the ephemeral key and an empty payload's tag: nothing else.
        assert_eq!(one.len(), 32 + 16);
        let responder = Responder::accept(&token(), CHALLENGE, &one).unwrap();
        let (mut agent, two) = responder.finish(br#"{"agent":"voxa/t"}"#).unwrap();
        let (mut client, payload) = initiator.finish(&two).unwrap();
        assert_eq!(payload, br#"{"agent":"voxa/t"}"#);
        assert_eq!(agent.handshake_hash(), client.handshake_hash());
        let sealed = client.sealer.seal_raw(b"to the agent").unwrap();
        assert_eq!(agent.opener.open_raw(&sealed).unwrap(), b"to the agent");
        let sealed = agent.sealer.seal_raw(b"to the client").unwrap();
        assert_eq!(client.opener.open_raw(&sealed).unwrap(), b"to the client");
    }

    #[test]
    fn a_wrong_token_or_another_challenge_fails_on_the_first_message_that_sees_it() {
        let other = Secret::parse_hex128("ffeeddccbbaa99887766554433221100").unwrap();
        let (_, one) = Initiator::start(&other, CHALLENGE).unwrap();
        assert!(Responder::accept(&token(), CHALLENGE, &one).is_err(), "a client without the token");
        let (_, one) = Initiator::start(&token(), "fedcba9876543210fedcba9876543210").unwrap();
        assert!(Responder::accept(&token(), CHALLENGE, &one).is_err(), "an answer to another challenge");
        // An agent without the token cannot answer: message 2 made under another key fails.
        let (initiator, _) = Initiator::start(&token(), CHALLENGE).unwrap();
        let (_, other_one) = Initiator::start(&other, CHALLENGE).unwrap();
        let (_, two) = Responder::accept(&other, CHALLENGE, &other_one).unwrap().finish(b"{}").unwrap();
        assert!(initiator.finish(&two).is_err());
        assert!(Responder::accept(&token(), CHALLENGE, b"short").is_err());
    }

    fn bytes(value: &Value) -> Vec<u8> {
        hex::decode(value.as_str().unwrap()).unwrap()
    }

    /// The published vector (tests/fixtures/noise, with its source named there): both roles, both
    /// handshake messages, the handshake hash and every transport message, byte for byte.
    #[test]
    fn the_published_noise_vectors_are_reproduced() {
        let fixture: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/noise/NNpsk0_25519_AESGCM_SHA256.json")).unwrap();
        let vector = &fixture["vectors"][0];
        assert_eq!(vector["protocol_name"], NOISE_PARAMS);
        let psk: [u8; 32] = bytes(&vector["init_psks"][0]).try_into().unwrap();
        let prologue = bytes(&vector["init_prologue"]);
        let (ie, re) = (bytes(&vector["init_ephemeral"]), bytes(&vector["resp_ephemeral"]));
        let mut init = build(&psk, &prologue, Role::Initiator, Some(&ie)).unwrap();
        let mut resp = build(&psk, &prologue, Role::Responder, Some(&re)).unwrap();
        let messages = vector["messages"].as_array().unwrap();
        let mut buf = vec![0u8; MAX_NOISE_MESSAGE];
        let mut out = vec![0u8; MAX_NOISE_MESSAGE];
        for (i, message) in messages[..2].iter().enumerate() {
            let (payload, ciphertext) = (bytes(&message["payload"]), bytes(&message["ciphertext"]));
            let (writer, reader) = if i == 0 { (&mut init, &mut resp) } else { (&mut resp, &mut init) };
            let len = writer.write_message(&payload, &mut buf).unwrap();
            assert_eq!(hex::encode(&buf[..len]), hex::encode(&ciphertext), "handshake message {i}");
            let read = reader.read_message(&ciphertext, &mut out).unwrap();
            assert_eq!(out[..read], payload[..]);
        }
        let (init, resp) = (keys(init).unwrap(), keys(resp).unwrap());
        assert_eq!(hex::encode(init.handshake_hash()), vector["handshake_hash"].as_str().unwrap());
        assert_eq!(init.handshake_hash(), resp.handshake_hash());
        let (mut init, mut resp) = (init, resp);
        for (i, message) in messages.iter().enumerate().skip(2) {
            let (payload, ciphertext) = (bytes(&message["payload"]), bytes(&message["ciphertext"]));
            let (writer, reader) =
                if i % 2 == 0 { (&mut init.sealer, &mut resp.opener) } else { (&mut resp.sealer, &mut init.opener) };
            assert_eq!(hex::encode(writer.seal_raw(&payload).unwrap()), hex::encode(&ciphertext), "message {i}");
            assert_eq!(reader.open_raw(&ciphertext).unwrap(), payload);
        }
    }
}
