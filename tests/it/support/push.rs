//! A browser's side of a push subscription, written from the RFCs and not from voxa's code: its
//! P-256 key pair and auth secret ([`Subscriber`]), the subscription a page sends, and the RFC 8291
//! `aes128gcm` decryption of a push with the key only the subscriber holds.

use aes_gcm::aead::{Aead, KeyInit};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use rand::TryRngCore;
use serde_json::Value;
use sha2::Sha256;
use voxa::push::{Subscription, SubscriptionKeys};

/// A browser's side of a subscription: its P-256 key pair and auth secret.
pub(crate) struct Subscriber {
    pub(crate) secret: p256::SecretKey,
    pub(crate) auth: [u8; 16],
}

impl Subscriber {
    pub(crate) fn new() -> Subscriber {
        let mut scalar = [0u8; 32];
        rand::rngs::OsRng.try_fill_bytes(&mut scalar).unwrap();
        let mut auth = [0u8; 16];
        rand::rngs::OsRng.try_fill_bytes(&mut auth).unwrap();
        Subscriber { secret: p256::SecretKey::from_slice(&scalar).unwrap(), auth }
    }

    pub(crate) fn public_bytes(&self) -> Vec<u8> {
        self.secret.public_key().to_encoded_point(false).as_bytes().to_vec()
    }

    pub(crate) fn subscription(&self, endpoint: String) -> Subscription {
        Subscription {
            endpoint,
            keys: SubscriptionKeys {
                p256dh: URL_SAFE_NO_PAD.encode(self.public_bytes()),
                auth: URL_SAFE_NO_PAD.encode(self.auth),
            },
        }
    }

    /// RFC 8291 §3.4 and RFC 8188 §2: one record, the padding delimiter 0x02 ending it.
    pub(crate) fn decrypt(&self, body: &[u8]) -> Vec<u8> {
        let salt = &body[..16];
        let record_size = u32::from_be_bytes(body[16..20].try_into().unwrap());
        assert!(record_size >= 18, "record size {record_size}");
        let id_len = body[20] as usize;
        assert_eq!(id_len, 65, "keyid is the sender's uncompressed public key");
        let sender_public = &body[21..21 + id_len];
        let ciphertext = &body[21 + id_len..];
        let sender = p256::PublicKey::from_sec1_bytes(sender_public).unwrap();
        let shared = p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), sender.as_affine());
        let prk_key = hkdf_extract(&self.auth, shared.raw_secret_bytes());
        let mut key_info = b"WebPush: info\0".to_vec();
        key_info.extend_from_slice(&self.public_bytes());
        key_info.extend_from_slice(sender_public);
        let ikm = hkdf_expand(&prk_key, &key_info, 32);
        let prk = hkdf_extract(salt, &ikm);
        let cek = hkdf_expand(&prk, b"Content-Encoding: aes128gcm\0", 16);
        let nonce = hkdf_expand(&prk, b"Content-Encoding: nonce\0", 12);
        let cipher = aes_gcm::Aes128Gcm::new_from_slice(&cek).unwrap();
        let mut plain = cipher.decrypt(aes_gcm::Nonce::from_slice(&nonce), ciphertext).expect("the payload decrypts");
        while plain.last() == Some(&0) {
            plain.pop();
        }
        assert_eq!(plain.pop(), Some(2), "the last record ends with the 0x02 delimiter");
        plain
    }
}

fn hkdf_extract(salt: &[u8], ikm: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(salt).unwrap();
    mac.update(ikm);
    mac.finalize().into_bytes().to_vec()
}

/// HKDF-Expand for at most one block (every length here is ≤ 32).
fn hkdf_expand(prk: &[u8], info: &[u8], len: usize) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(prk).unwrap();
    mac.update(info);
    mac.update(&[1]);
    mac.finalize().into_bytes()[..len].to_vec()
}

/// A well-formed subscription to `endpoint`, as a page sends it in `push_subscribe`.
pub(crate) fn sample_subscription(endpoint: &str) -> Value {
    serde_json::to_value(Subscriber::new().subscription(endpoint.into())).unwrap()
}
