//! Push subscriptions the web client handed over (`push_subscribe`), kept in the home
//! (`push_subscriptions.json`, 0600). Each belongs to the pairing whose session sent it: the relay
//! code's hash names it, so `pair --rotate` (a new code) drops every subscription of the old one.
//! Bounded: at most [`MAX_SUBSCRIPTIONS`]; a new one beyond that replaces the oldest.

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::secret::Secret;
use crate::state::{read_if_exists, Home};

/// The subscriptions' file in the home.
pub const SUBSCRIPTIONS_FILE: &str = "push_subscriptions.json";
/// How many subscriptions the home keeps (phones and browsers together).
pub const MAX_SUBSCRIPTIONS: usize = 16;

pub use crate::protocol::{
    push_endpoint_host as endpoint_host, PushKeys as SubscriptionKeys, PushSubscription as Subscription,
};

/// A kept subscription: which pairing it belongs to and when it came.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// First 16 hex characters of SHA-256 of the pairing's relay code.
    pub pairing: String,
    pub added_at: u64,
    pub subscription: Subscription,
}

/// The name a pairing's subscriptions are kept under: never the code itself.
pub fn pairing_id(relay_code: &Secret) -> String {
    hex::encode(&Sha256::digest(format!("voxa-push-pairing\n{}", relay_code.expose()).as_bytes())[..8])
}

/// The home's subscriptions file.
pub struct Subscriptions {
    home: Home,
}

impl Subscriptions {
    pub fn new(home: Home) -> Self {
        Subscriptions { home }
    }

    /// Every kept subscription (an absent file is none).
    pub fn load(&self) -> Result<Vec<Entry>> {
        let path = self.home.path(SUBSCRIPTIONS_FILE);
        match read_if_exists(&path)? {
            None => Ok(Vec::new()),
            Some(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is damaged; remove it and turn notifications on again", path.display())),
        }
    }

    fn save(&self, entries: &[Entry]) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(entries).context("could not encode push subscriptions")?;
        self.home.write_atomic(SUBSCRIPTIONS_FILE, &bytes)
    }

    /// Adds (or refreshes) a subscription for `pairing`; validated first.
    pub fn add(&self, pairing: &str, subscription: Subscription, now: u64) -> Result<()> {
        subscription.validate().map_err(|reason| anyhow!(reason))?;
        let mut entries = self.load()?;
        entries.retain(|e| e.subscription.endpoint != subscription.endpoint);
        entries.push(Entry { pairing: pairing.to_owned(), added_at: now, subscription });
        while entries.len() > MAX_SUBSCRIPTIONS {
            let oldest = entries.iter().enumerate().min_by_key(|(_, e)| e.added_at).map(|(i, _)| i).unwrap_or(0);
            entries.remove(oldest);
        }
        self.save(&entries)
    }

    /// Removes the subscription with this endpoint; true when one was kept.
    pub fn remove(&self, endpoint: &str) -> Result<bool> {
        let mut entries = self.load()?;
        let before = entries.len();
        entries.retain(|e| e.subscription.endpoint != endpoint);
        if entries.len() == before {
            return Ok(false);
        }
        self.save(&entries)?;
        Ok(true)
    }

    /// Keeps only the subscriptions of `pairing` (after `pair --rotate`); returns how many went.
    pub fn keep_only(&self, pairing: &str) -> Result<usize> {
        let mut entries = self.load()?;
        let before = entries.len();
        entries.retain(|e| e.pairing == pairing);
        let removed = before - entries.len();
        if removed > 0 {
            self.save(&entries)?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::protocol::MAX_PUSH_ENDPOINT_LEN as MAX_ENDPOINT_LEN;
    /// A well-formed subscription for a loopback push service (keys from a fresh P-256 pair).
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;

    pub(crate) fn sample(endpoint: &str) -> Subscription {
        use rand::TryRngCore;
        use web_push_native::p256::elliptic_curve::sec1::ToEncodedPoint;
        let mut scalar = [0u8; 32];
        rand::rngs::OsRng.try_fill_bytes(&mut scalar).unwrap();
        let secret = web_push_native::p256::SecretKey::from_slice(&scalar).unwrap();
        let point = secret.public_key().to_encoded_point(false);
        Subscription {
            endpoint: endpoint.into(),
            keys: SubscriptionKeys {
                p256dh: URL_SAFE_NO_PAD.encode(point.as_bytes()),
                auth: URL_SAFE_NO_PAD.encode([7u8; 16]),
            },
        }
    }

    #[test]
    fn hostile_subscriptions_are_refused_with_a_reason() {
        let good = sample("https://push.example/abc");
        good.validate().unwrap();
        sample("http://127.0.0.1:9/x").validate().unwrap();
        let cases = [
            (Subscription { endpoint: "http://push.example/x".into(), ..good.clone() }, "https"),
            (Subscription { endpoint: "file:///etc/passwd".into(), ..good.clone() }, "https"),
            (
                Subscription { endpoint: format!("https://a/{}", "x".repeat(MAX_ENDPOINT_LEN)), ..good.clone() },
                "longer",
            ),
            (
                Subscription {
                    keys: SubscriptionKeys { p256dh: "AAAA".into(), auth: good.keys.auth.clone() },
                    ..good.clone()
                },
                "p256dh",
            ),
            (
                Subscription {
                    keys: SubscriptionKeys { p256dh: good.keys.p256dh.clone(), auth: "AAAA".into() },
                    ..good.clone()
                },
                "auth",
            ),
        ];
        for (subscription, word) in cases {
            let err = subscription.validate().unwrap_err();
            assert!(err.contains(word), "{err}");
        }
    }

    #[test]
    fn the_store_is_private_bounded_and_drops_other_pairings() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        home.ensure().unwrap();
        let store = Subscriptions::new(home.clone());
        for n in 0..(MAX_SUBSCRIPTIONS as u64 + 3) {
            store.add("old", sample(&format!("https://push.example/{n}")), n).unwrap();
        }
        let kept = store.load().unwrap();
        assert_eq!(kept.len(), MAX_SUBSCRIPTIONS);
        assert!(kept.iter().all(|e| e.subscription.endpoint != "https://push.example/0"), "the oldest went");
        store.add("new", sample("https://push.example/new"), 99).unwrap();
        assert!(store.remove("https://push.example/5").unwrap());
        assert!(!store.remove("https://push.example/5").unwrap());
        assert_eq!(store.keep_only("new").unwrap(), MAX_SUBSCRIPTIONS - 2);
        assert_eq!(store.load().unwrap().len(), 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.path(SUBSCRIPTIONS_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let shown = format!("{:?}", sample("https://push.example/capability-path"));
        assert!(!shown.contains("capability-path"), "{shown}");
    }
}
