//! Notifications (docs/PROTOCOL.md, "Notifications"): the laptop taps the phone on the shoulder
//! when it needs it — an approval opens, a turn ends, a session fails — while no client follows.
//!
//! The agent sends each push itself, straight to the browser's push service (RFC 8030), its
//! payload encrypted for that browser (RFC 8291 `aes128gcm`, by `web-push-native`) and signed with
//! the agent's VAPID key (RFC 8292): the relay is not involved and the push service reads nothing.
//! [`Notifier::notify`] never blocks: notices go to a bounded queue that one task drains, retrying
//! 429 and 5xx answers with backoff and forgetting subscriptions the service calls gone (404/410).

pub mod endpoint;
pub mod receipts;
mod send;
mod subscriptions;
mod vapid;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use receipts::{PushStatus, Receipts, RESEND_AFTER};
pub use send::{Outcome, SEND_TIMEOUT};
pub use subscriptions::{
    endpoint_host, pairing_id, Entry, Subscription, SubscriptionKeys, Subscriptions, MAX_SUBSCRIPTIONS,
    SUBSCRIPTIONS_FILE,
};
pub use vapid::{VapidKey, VAPID_KEY_FILE};

use crate::config::{NotificationSettings, PushSettings};
use crate::net::dial::DialOptions;
use crate::state::Home;

/// Notices waiting to be sent; past this, new ones are dropped (and logged), never waited for.
pub const NOTIFY_QUEUE: usize = 64;
/// Longest time a push service keeps an undelivered notification (`TTL`).
pub const MAX_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Tries per subscription for answers that say "later" (429, 5xx) and for network errors.
pub const SEND_ATTEMPTS: u32 = 4;
/// First wait before a retry; doubled each time, and `Retry-After` is honoured up to [`MAX_RETRY_WAIT`].
pub const FIRST_RETRY_WAIT: Duration = Duration::from_secs(1);
/// Longest wait between two tries.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// The longest notification line; longer text is cut.
pub const MAX_BODY_CHARS: usize = 180;

/// Which event a notice is about (`[notifications] events` chooses which notify).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyEvent {
    Approval,
    TurnEnd,
    SessionFailed,
    /// `voxa notify test`: always sent.
    Test,
}

impl NotifyEvent {
    /// The name `config.toml` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::Approval => "approval",
            NotifyEvent::TurnEnd => "turn_end",
            NotifyEvent::SessionFailed => "session_failed",
            NotifyEvent::Test => "test",
        }
    }
}

/// RFC 8030 `Urgency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    Normal,
    High,
}

impl Urgency {
    fn as_str(self) -> &'static str {
        match self {
            Urgency::Normal => "normal",
            Urgency::High => "high",
        }
    }
}

/// One notification: what the page's service worker shows and where a tap leads.
#[derive(Debug, Clone)]
pub struct Notice {
    pub event: NotifyEvent,
    /// What it is about (a session or approval id): one notification per topic at a time, a newer
    /// one replaces an older one at the push service (`Topic`).
    pub topic: String,
    pub title: String,
    /// One line, e.g. "Claude wants to run npm test".
    pub body: String,
    /// Where a tap opens the page: a fragment such as `#session=s-…` or `#approval=a-…`.
    pub open: String,
    pub urgency: Urgency,
    pub ttl: Duration,
}

/// The JSON the service worker receives (short: the push service carries at most 4 KiB).
#[derive(Serialize)]
struct Payload<'a> {
    title: &'a str,
    body: &'a str,
    open: &'a str,
    tag: &'a str,
    /// Where the service worker acknowledges it (`/ack?code=…`, on the relay that served it).
    #[serde(skip_serializing_if = "Option::is_none")]
    ack: Option<&'a str>,
    /// The receipt it sends there: a secret only this payload carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    receipt: Option<&'a str>,
}

impl Notice {
    #[cfg(test)]
    fn payload(&self) -> Vec<u8> {
        self.payload_with(None)
    }

    /// The payload, with `ack`'s path and receipt when the push asks for one.
    fn payload_with(&self, ack: Option<(&str, &str)>) -> Vec<u8> {
        let body = crate::text::prefix(&self.body, MAX_BODY_CHARS);
        let title = crate::text::prefix(&self.title, 80);
        let open = crate::text::prefix(&self.open, 200);
        let (ack, receipt) = ack.map_or((None, None), |(path, receipt)| (Some(path), Some(receipt)));
        serde_json::to_vec(&Payload { title, body, open, tag: &topic_header(&self.topic), ack, receipt })
            .unwrap_or_default()
    }
}

/// RFC 8030 `Topic`: at most 32 characters of the base64url alphabet; a hash, so the push service
/// does not learn the session's id.
fn topic_header(topic: &str) -> String {
    URL_SAFE_NO_PAD.encode(&Sha256::digest(format!("voxa-push-topic\n{topic}").as_bytes())[..24])
}

/// What one subscription answered, for `voxa notify test`.
#[derive(Debug)]
pub struct Delivery {
    /// The endpoint's host (the rest of the URL is a capability and never printed).
    pub host: String,
    pub result: Result<Outcome>,
    /// The subscription was forgotten (the service said 404/410).
    pub removed: bool,
}

/// The agent's notifier: cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
    queue: mpsc::Sender<Notice>,
}

struct Inner {
    key: VapidKey,
    /// The pairing new subscriptions belong to ([`pairing_id`] of the relay code).
    pairing: String,
    subscriptions: Subscriptions,
    settings: NotificationSettings,
    push: PushSettings,
    dial: DialOptions,
    first_retry_wait: Duration,
    /// The pushes sent lately, and their receipts.
    receipts: Receipts,
    /// Where service workers acknowledge pushes (`/ack?code=…`); unset, pushes ask for none.
    ack: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").field("vapid_public_key", &self.inner.key.public_key()).finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier for `home` (its VAPID key made on first use) whose new subscriptions belong to
    /// `pairing`, sending to the endpoints `push` allows, and the queue its sender drains.
    pub fn new(
        home: &Home,
        pairing: String,
        settings: NotificationSettings,
        push: PushSettings,
        dial: DialOptions,
    ) -> Result<(Self, NoticeQueue)> {
        let key = VapidKey::load_or_create(home)?;
        let (queue, receiver) = mpsc::channel(NOTIFY_QUEUE);
        let subscriptions = Subscriptions::new(home.clone());
        let first_retry_wait = FIRST_RETRY_WAIT;
        let receipts = Receipts::new(push.resend_after_secs.map_or(RESEND_AFTER, Duration::from_secs));
        let ack = std::sync::OnceLock::new();
        let inner =
            Arc::new(Inner { key, pairing, subscriptions, settings, push, dial, first_retry_wait, receipts, ack });
        Ok((Notifier { inner, queue }, NoticeQueue { receiver }))
    }

    /// Keeps a browser's subscription (from `push_subscribe`), checked first: well formed, and an
    /// endpoint the laptop may send to ([`endpoint::check`]: `https://` on public addresses unless
    /// `[push] allow_private_endpoints`).
    pub async fn subscribe(&self, subscription: Subscription) -> Result<()> {
        subscription.validate().map_err(|reason| anyhow!(reason))?;
        endpoint::check(&subscription.endpoint, self.inner.push.allow_private_endpoints).await?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.inner.subscriptions.add(&self.inner.pairing, subscription, now)
    }

    /// Pushes from now on ask the service worker for a receipt at the relay code `code`'s
    /// `/ack` (the relay passes it to this agent).
    pub fn ask_receipts(&self, code: &str) {
        let _ = self.inner.ack.set(format!("/ack?code={code}"));
    }

    /// A receipt's body from the relay: true when it answers a push sent lately.
    pub fn receipt(&self, body: &[u8]) -> bool {
        let known = self.inner.receipts.take(body);
        if !known {
            debug!("a receipt that answers no push; dropped");
        }
        known
    }

    /// The last push and whether it arrived, for `status`.
    pub fn last_push(&self) -> Option<PushStatus> {
        self.inner.receipts.last()
    }

    /// The public key the page subscribes with (`hello_ok`'s `vapid_public_key`).
    pub fn public_key(&self) -> &str {
        self.inner.key.public_key()
    }

    /// The home's subscriptions.
    pub fn subscriptions(&self) -> &Subscriptions {
        &self.inner.subscriptions
    }

    /// True when `[notifications] events` lets this event notify.
    pub fn wants(&self, event: NotifyEvent) -> bool {
        event == NotifyEvent::Test || self.inner.settings.events.iter().any(|e| e == event.as_str())
    }

    /// Queues a notice for every subscription; never waits. False when it was not queued (the
    /// event is turned off, or the queue is full).
    pub fn notify(&self, notice: Notice) -> bool {
        if !self.wants(notice.event) {
            return false;
        }
        match self.queue.try_send(notice) {
            Ok(()) => true,
            Err(_) => {
                warn!("notification queue full; a notification was dropped");
                false
            }
        }
    }

    /// Sends `notice` to every subscription now, with retries, and says what each answered.
    pub async fn send_to_all(&self, notice: &Notice) -> Result<Vec<Delivery>> {
        Ok(self.send_recorded(notice, false).await?.0)
    }

    /// [`Notifier::send_to_all`], and the number its receipts are kept under when it asked for
    /// receipts and a push service took it (`resent`: it is the re-send of one not delivered).
    async fn send_recorded(&self, notice: &Notice, resent: bool) -> Result<(Vec<Delivery>, Option<u64>)> {
        let entries = self.inner.subscriptions.load()?;
        let mut deliveries = Vec::with_capacity(entries.len());
        let mut taken = Vec::new();
        for entry in entries {
            let host = entry.subscription.host();
            let receipt = self.inner.ack.get().map(|_| receipts::Receipt::new());
            let ack = self.inner.ack.get().map(String::as_str).zip(receipt.as_ref().map(|r| r.secret.as_str()));
            let payload = notice.payload_with(ack);
            let result = self.send_with_retries(&entry.subscription, notice, &payload).await;
            if let (Ok(Outcome::Delivered(_)), Some(receipt)) = (&result, receipt) {
                taken.push(receipt);
            }
            let mut removed = false;
            if let Ok(Outcome::Gone(status)) = &result {
                removed = self.inner.subscriptions.remove(&entry.subscription.endpoint).unwrap_or(false);
                info!(host, status, "push subscription gone; forgotten");
            }
            deliveries.push(Delivery { host, result, removed });
        }
        let seq = (!taken.is_empty()).then(|| self.inner.receipts.sent(notice.event, &taken, resent));
        Ok((deliveries, seq))
    }

    async fn send_with_retries(&self, subscription: &Subscription, notice: &Notice, payload: &[u8]) -> Result<Outcome> {
        let mut wait = self.inner.first_retry_wait;
        let mut attempt = 1;
        loop {
            let result = self.send_once(subscription, notice, payload).await;
            let retry_after = match &result {
                Ok(Outcome::Later { retry_after, .. }) => *retry_after,
                Err(err) if err.downcast_ref::<endpoint::NotAllowed>().is_some() => return result,
                Err(_) => None,
                Ok(_) => return result,
            };
            if attempt >= SEND_ATTEMPTS {
                return result;
            }
            let pause = retry_after.unwrap_or(wait).min(MAX_RETRY_WAIT);
            debug!(host = subscription.host(), attempt, ?pause, "push not accepted yet; retrying");
            tokio::time::sleep(pause).await;
            wait = (wait * 2).min(MAX_RETRY_WAIT);
            attempt += 1;
        }
    }

    async fn send_once(&self, subscription: &Subscription, notice: &Notice, payload: &[u8]) -> Result<Outcome> {
        let request = self.build(subscription, notice, payload)?;
        send::post(&request, &self.inner.dial, self.inner.push.allow_private_endpoints).await
    }

    fn build(&self, subscription: &Subscription, notice: &Notice, payload: &[u8]) -> Result<http::Request<Vec<u8>>> {
        use web_push_native::{p256::PublicKey, Auth, WebPushBuilder};
        subscription.validate().map_err(|reason| anyhow!(reason))?;
        let p256dh = URL_SAFE_NO_PAD.decode(subscription.keys.p256dh.trim_end_matches('='))?;
        let auth = URL_SAFE_NO_PAD.decode(subscription.keys.auth.trim_end_matches('='))?;
        let endpoint = subscription.endpoint.parse().map_err(|_| anyhow!("the push endpoint is not a URL"))?;
        let ttl = notice.ttl.min(MAX_TTL).max(Duration::from_secs(1));
        let mut request = WebPushBuilder::new(
            endpoint,
            PublicKey::from_sec1_bytes(&p256dh).map_err(|_| anyhow!("keys.p256dh is not a P-256 key"))?,
            Auth::clone_from_slice(&auth),
        )
        .with_valid_duration(ttl)
        .build(payload.to_vec())
        .map_err(|err| anyhow!("could not encrypt the notification: {err}"))?;
        let authorization =
            self.inner.key.authorization(&origin_of(&subscription.endpoint)?, &self.inner.settings.contact)?;
        let headers = request.headers_mut();
        headers.insert(http::header::AUTHORIZATION, http::HeaderValue::from_str(&authorization)?);
        headers.insert("topic", http::HeaderValue::from_str(&topic_header(&notice.topic))?);
        headers.insert("urgency", http::HeaderValue::from_static(notice.urgency.as_str()));
        Ok(request)
    }
}

/// RFC 8292's `aud`: the endpoint's origin, with its port when it is not the scheme's default.
fn origin_of(endpoint: &str) -> Result<String> {
    let url = url::Url::parse(endpoint).map_err(|_| anyhow!("the push endpoint is not a URL"))?;
    Ok(url.origin().ascii_serialization())
}

/// Counts one follower for as long as it lives (`followers` goes back down when it is dropped).
pub struct CountedFollower<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> CountedFollower<'a> {
    pub fn hold(followers: &'a std::sync::atomic::AtomicUsize) -> Self {
        followers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CountedFollower(followers)
    }
}

impl Drop for CountedFollower<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The receiving end of [`Notifier::notify`]'s queue; [`NoticeQueue::run`] drains it.
pub struct NoticeQueue {
    receiver: mpsc::Receiver<Notice>,
}

impl NoticeQueue {
    /// The next notice queued, if one is (tests read what was pushed without sending it).
    #[cfg(test)]
    pub(crate) fn try_next(&mut self) -> Option<Notice> {
        self.receiver.try_recv().ok()
    }

    /// Sends queued notices one after another until `cancel`. A notice whose topic has a newer
    /// notice queued behind it is skipped (the newer one replaces it anyway).
    ///
    /// An approval's push that a push service took but no service worker acknowledged within the
    /// re-send time ([`RESEND_AFTER`]) is sent once more, while it is still worth something.
    pub async fn run(mut self, notifier: Notifier, cancel: CancellationToken) {
        // Approvals' pushes waiting for a receipt: when to look, the notice, its number.
        let mut waiting: Vec<(tokio::time::Instant, Notice, u64)> = Vec::new();
        loop {
            let next_look = waiting.iter().map(|(at, ..)| *at).min();
            let first = tokio::select! {
                _ = cancel.cancelled() => return,
                () = sleep_until(next_look) => {
                    let now = tokio::time::Instant::now();
                    let (due, later): (Vec<_>, Vec<_>) = waiting.drain(..).partition(|(at, ..)| *at <= now);
                    waiting = later;
                    for (_, notice, seq) in due {
                        if !notifier.inner.receipts.delivered(seq) {
                            info!(event = notice.event.as_str(), "push not acknowledged in time; sending it once more");
                            let _ = notifier.send_recorded(&notice, true).await;
                        }
                    }
                    continue;
                }
                notice = self.receiver.recv() => match notice { Some(n) => n, None => return },
            };
            let mut batch = vec![first];
            while let Ok(more) = self.receiver.try_recv() {
                batch.push(more);
            }
            let newest: Vec<Notice> = batch
                .iter()
                .enumerate()
                .filter(|(i, n)| !batch[i + 1..].iter().any(|later| later.topic == n.topic))
                .map(|(_, n)| n.clone())
                .collect();
            for notice in newest {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    result = notifier.send_recorded(&notice, false) => match result {
                        Ok((deliveries, seq)) => {
                            if let Some(seq) = seq.filter(|_| notice.event == NotifyEvent::Approval) {
                                let at = tokio::time::Instant::now() + notifier.inner.receipts.resend_after();
                                waiting.push((at, notice.clone(), seq));
                            }
                            for d in deliveries.iter().filter(|d| !matches!(d.result, Ok(Outcome::Delivered(_)))) {
                                match &d.result {
                                    Ok(outcome) => warn!(host = d.host, status = outcome.status(), event = notice.event.as_str(), "push not delivered"),
                                    Err(err) => warn!(host = d.host, event = notice.event.as_str(), "push failed: {err:#}"),
                                }
                            }
                        }
                        Err(err) => warn!("could not read push subscriptions: {err:#}"),
                    },
                }
            }
        }
    }
}

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notifier(events: &[&str]) -> (Notifier, NoticeQueue, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        home.ensure().unwrap();
        let settings =
            NotificationSettings { events: events.iter().map(|e| e.to_string()).collect(), ..Default::default() };
        let (n, q) =
            Notifier::new(&home, "p".into(), settings, PushSettings::default(), DialOptions::default()).unwrap();
        (n, q, dir)
    }

    fn notice(event: NotifyEvent, topic: &str) -> Notice {
        Notice {
            event,
            topic: topic.into(),
            title: "voxa".into(),
            body: "x".repeat(1000),
            open: "#session=s-1".into(),
            urgency: Urgency::High,
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn settings_choose_which_events_notify_and_the_queue_never_blocks() {
        let (n, _queue, _dir) = notifier(&["approval"]);
        assert!(!n.notify(notice(NotifyEvent::TurnEnd, "s-1")), "turn_end is turned off");
        for _ in 0..NOTIFY_QUEUE {
            assert!(n.notify(notice(NotifyEvent::Approval, "s-1")));
        }
        assert!(!n.notify(notice(NotifyEvent::Approval, "s-1")), "a full queue drops, it does not wait");
        assert!(n.wants(NotifyEvent::Test));
    }

    #[test]
    fn the_payload_is_short_and_the_topic_hides_the_id() {
        let payload = notice(NotifyEvent::Approval, "s-secretish").payload();
        assert!(payload.len() < 600, "{}", payload.len());
        let topic = topic_header("s-secretish");
        assert_eq!(topic.len(), 32);
        assert!(topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert!(!String::from_utf8_lossy(&payload).contains("secretish"));
    }
}
