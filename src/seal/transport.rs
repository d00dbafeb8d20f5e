//! One session frame ⇄ Noise transport messages. Each message's plaintext starts with a kind
//! byte: [`KIND_JSON`] + a UTF-8 JSON frame, [`KIND_AUDIO`] + audio (the bytes after the
//! protocol-2 audio prefix, which is the same byte), or [`KIND_PART`] + a non-final part of a
//! frame larger than one message. Nonces count up on each side from 0, so a message that is
//! replayed, reordered, dropped or altered fails to open.

use std::sync::Arc;

use snow::StatelessTransportState;

use super::{Broken, MAX_NOISE_MESSAGE, MAX_PART, TAG_LEN};
use crate::protocol::MAX_FRAME_LEN;

/// Kind byte of a JSON frame's last (or only) part.
pub const KIND_JSON: u8 = 0x00;
/// Kind byte of an audio frame's last (or only) part.
pub const KIND_AUDIO: u8 = 0x01;
/// Kind byte of a non-final part.
pub const KIND_PART: u8 = 0x02;

/// A session frame as opened.
#[derive(Debug, PartialEq, Eq)]
pub enum Plain {
    Json(String),
    /// The audio bytes (without a prefix).
    Audio(Vec<u8>),
}

/// Seals what one side sends.
pub struct Sealer {
    state: Arc<StatelessTransportState>,
    nonce: u64,
}

impl Sealer {
    pub(super) fn new(state: Arc<StatelessTransportState>) -> Self {
        Sealer { state, nonce: 0 }
    }

    /// One frame of `kind` ([`KIND_JSON`] or [`KIND_AUDIO`]) as the transport messages that
    /// carry it, in order: parts of at most [`MAX_PART`] bytes.
    pub fn seal(&mut self, kind: u8, body: &[u8]) -> Result<Vec<Vec<u8>>, Broken> {
        let mut messages = Vec::with_capacity(body.len() / MAX_PART + 1);
        let mut chunks = body.chunks(MAX_PART).peekable();
        let mut plain = Vec::with_capacity(body.len().min(MAX_PART) + 1);
        if chunks.peek().is_none() {
            return Ok(vec![self.seal_raw(&[kind])?]);
        }
        while let Some(chunk) = chunks.next() {
            plain.clear();
            plain.push(if chunks.peek().is_some() { KIND_PART } else { kind });
            plain.extend_from_slice(chunk);
            messages.push(self.seal_raw(&plain)?);
        }
        Ok(messages)
    }

    /// One transport message holding `plaintext` (at most 65,519 bytes).
    pub fn seal_raw(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, Broken> {
        let mut message = vec![0u8; plaintext.len() + TAG_LEN];
        let len = self
            .state
            .write_message(self.nonce, plaintext, &mut message)
            .map_err(|_| Broken("a frame could not be sealed"))?;
        message.truncate(len);
        self.nonce += 1;
        Ok(message)
    }
}

/// Opens what the peer sends, in order, and joins parts into frames.
pub struct Opener {
    state: Arc<StatelessTransportState>,
    nonce: u64,
    partial: Vec<u8>,
}

impl Opener {
    pub(super) fn new(state: Arc<StatelessTransportState>) -> Self {
        Opener { state, nonce: 0, partial: Vec::new() }
    }

    /// Opens the next transport message: a whole frame, or `None` after a non-final part. Any
    /// failure is final: the session is broken.
    pub fn open(&mut self, message: &[u8]) -> Result<Option<Plain>, Broken> {
        let plain = self.open_raw(message)?;
        let Some((&kind, body)) = plain.split_first() else { return Err(Broken("an empty sealed message")) };
        if self.partial.len() + body.len() > MAX_FRAME_LEN {
            return Err(Broken("a sealed frame larger than the frame limit"));
        }
        if kind == KIND_PART {
            self.partial.extend_from_slice(body);
            return Ok(None);
        }
        let whole = if self.partial.is_empty() {
            body.to_vec()
        } else {
            let mut whole = std::mem::take(&mut self.partial);
            whole.extend_from_slice(body);
            whole
        };
        match kind {
            KIND_JSON => String::from_utf8(whole)
                .map(Plain::Json)
                .map(Some)
                .map_err(|_| Broken("a sealed JSON frame that is not UTF-8")),
            KIND_AUDIO => Ok(Some(Plain::Audio(whole))),
            _ => Err(Broken("a sealed message of unknown kind")),
        }
    }

    /// The plaintext of the next transport message.
    pub fn open_raw(&mut self, message: &[u8]) -> Result<Vec<u8>, Broken> {
        if message.len() < TAG_LEN || message.len() > MAX_NOISE_MESSAGE {
            return Err(Broken("a sealed message of impossible length"));
        }
        let mut plain = vec![0u8; message.len() - TAG_LEN];
        let len = self
            .state
            .read_message(self.nonce, message, &mut plain)
            .map_err(|_| Broken("a frame failed to decrypt: altered, replayed, reordered or after a dropped one"))?;
        plain.truncate(len);
        self.nonce += 1;
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::super::handshake::{Initiator, Keys, Responder};
    use super::*;
    use crate::secret::Secret;

    fn pair() -> (Keys, Keys) {
        let token = Secret::parse_hex128("00112233445566778899aabbccddeeff").unwrap();
        let challenge = "0123456789abcdef0123456789abcdef";
        let (initiator, one) = Initiator::start(&token, challenge).unwrap();
        let (agent, two) = Responder::accept(&token, challenge, &one).unwrap().finish(b"{}").unwrap();
        (initiator.finish(&two).unwrap().0, agent)
    }

    fn deliver(opener: &mut Opener, messages: &[Vec<u8>]) -> Result<Vec<Plain>, Broken> {
        let mut frames = Vec::new();
        for message in messages {
            frames.extend(opener.open(message)?);
        }
        Ok(frames)
    }

    #[test]
    fn frames_of_every_size_are_split_at_the_limit_and_joined_again() {
        let (mut client, mut agent) = pair();
        for len in [0, 1, MAX_PART - 1, MAX_PART, MAX_PART + 1, 3 * MAX_PART + 7] {
            let body = "x".repeat(len);
            let messages = client.sealer.seal(KIND_JSON, body.as_bytes()).unwrap();
            assert_eq!(messages.len(), len.div_ceil(MAX_PART).max(1), "{len}");
            assert!(messages.iter().all(|m| m.len() <= MAX_NOISE_MESSAGE));
            assert_eq!(deliver(&mut agent.opener, &messages).unwrap(), [Plain::Json(body)]);
        }
        let audio = vec![7u8; 640];
        let messages = agent.sealer.seal(KIND_AUDIO, &audio).unwrap();
        assert_eq!(deliver(&mut client.opener, &messages).unwrap(), [Plain::Audio(audio)]);
    }

    #[test]
    fn altered_replayed_reordered_and_dropped_messages_break_the_session() {
        type Tamper = fn(&[Vec<u8>]) -> Vec<Vec<u8>>;
        let cases: [(&str, Tamper); 4] = [
            ("flipped", |f| {
                let mut f = f.to_vec();
                f[1][3] ^= 0x10;
                f
            }),
            ("replayed", |f| vec![f[0].clone(), f[1].clone(), f[1].clone()]),
            ("reordered", |f| vec![f[0].clone(), f[2].clone(), f[1].clone()]),
            ("dropped", |f| vec![f[0].clone(), f[2].clone()]),
        ];
        for (name, tamper) in cases {
            let (mut client, mut agent) = pair();
            let sent: Vec<Vec<u8>> =
                (0..3).map(|i| client.sealer.seal(KIND_JSON, format!("{i}").as_bytes()).unwrap().remove(0)).collect();
            let mut opened = Vec::new();
            let outcome = tamper(&sent).iter().try_for_each(|m| agent.opener.open(m).map(|p| opened.extend(p)));
            assert!(outcome.is_err(), "{name}");
            // Only what came before the tampered message opened, and it opened as sent.
            assert!(opened.len() <= 2, "{name}");
            for (i, plain) in opened.iter().enumerate() {
                assert_eq!(*plain, Plain::Json(format!("{i}")), "{name}");
            }
        }
    }

    #[test]
    fn unknown_kinds_empty_messages_and_bad_utf8_break_the_session() {
        for plain in [vec![0x07, b'x'], vec![], vec![KIND_JSON, 0xff, 0xfe]] {
            let (mut client, mut agent) = pair();
            let message = client.sealer.seal_raw(&plain).unwrap();
            assert!(agent.opener.open(&message).is_err(), "{plain:?}");
        }
        let (_, mut agent) = pair();
        assert!(agent.opener.open(&[0u8; 10]).is_err());
    }
}
