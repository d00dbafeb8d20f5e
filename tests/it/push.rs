//! Notifications: pushes the agent sends, received by a push service on loopback that checks them
//! as a real one would — the VAPID JWT (RFC 8292: ES256, `aud`, `exp`, `sub`), the RFC 8030
//! headers — and decrypts the payload (RFC 8291 `aes128gcm`) with the subscriber's private key,
//! which only this test holds. The checks are written from the RFCs, not from voxa's code.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::ecdsa::signature::Verifier;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use voxa::config::{Config, NotificationSettings, PushSettings};
use voxa::net::dial::DialOptions;
use voxa::push::{Notice, Notifier, NotifyEvent, Outcome, Subscription, Subscriptions, Urgency};
use voxa::state::Home;

use crate::support::push::Subscriber;
use crate::support::voxa;

/// One request the push service received.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Statuses (with an optional `Retry-After`) the push service answers, in order.
type Script = Arc<Mutex<VecDeque<(u16, Option<u64>)>>>;

/// A push service on loopback: answers each request with the next scripted status (201 when the
/// script is empty) and keeps what it received.
struct PushService {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    script: Script,
    /// Connections it accepted, whatever came on them.
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl PushService {
    async fn start() -> PushService {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::new(Mutex::new(VecDeque::new()));
        let (kept, answers) = (received.clone(), script.clone());
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (kept, answers) = (kept.clone(), answers.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else { return };
                    kept.lock().unwrap().push(request);
                    let (status, retry_after) = answers.lock().unwrap().pop_front().unwrap_or((201, None));
                    let extra = retry_after.map(|s| format!("Retry-After: {s}\r\n")).unwrap_or_default();
                    let answer = format!("HTTP/1.1 {status} Scripted\r\n{extra}Content-Length: 0\r\n\r\n");
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        PushService { port, received, script, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn endpoint(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/push/{name}", self.port)
    }

    fn answer_next(&self, status: u16, retry_after: Option<u64>) {
        self.script.lock().unwrap().push_back((status, retry_after));
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length")?.parse().ok()?;
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(Received { path, headers, body: buf[head_end..head_end + length].to_vec() })
}

/// RFC 8292: `Authorization: vapid t=<JWT>, k=<key>`; the JWT is ES256 over the endpoint's
/// origin, expires within 24 h, names a contact; `k` is the key the page subscribed with.
fn check_vapid(request: &Received, origin: &str, contact: &str, public_key: &str) {
    let auth = request.headers.get("authorization").expect("an Authorization header");
    let rest = auth.strip_prefix("vapid ").expect("the vapid scheme");
    let params: HashMap<&str, &str> =
        rest.split(',').filter_map(|p| p.trim().split_once('=')).map(|(k, v)| (k.trim(), v.trim())).collect();
    assert_eq!(params["k"], public_key, "k is the key hello_ok offers");
    let jwt = params["t"];
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(claims["aud"], origin);
    assert_eq!(claims["sub"], contact);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let exp = claims["exp"].as_u64().expect("exp");
    assert!(exp > now && exp <= now + 24 * 3600, "exp {exp} now {now}");
    let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(params["k"]).unwrap()).unwrap();
    let signature = p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
    key.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature).expect("the JWT's signature verifies");
}

/// The test push service listens on loopback, which a laptop sends to only when told to.
fn private_endpoints() -> PushSettings {
    PushSettings { allow_private_endpoints: true, ..PushSettings::default() }
}

fn home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("home"));
    home.ensure().unwrap();
    (dir, home)
}

/// The agent's notifier for `home`, with the default settings, and its queue.
fn notifier_of(home: &Home) -> (Notifier, voxa::push::NoticeQueue) {
    Notifier::new(home, "p".into(), NotificationSettings::default(), private_endpoints(), DialOptions::default())
        .unwrap()
}

/// A home with one browser subscribed to `service` at `name`.
async fn subscribed(service: &PushService, name: &str) -> (tempfile::TempDir, Home, Subscriber) {
    let (dir, home) = home();
    let browser = Subscriber::new();
    Subscriptions::new(home.clone()).add("p", browser.subscription(service.endpoint(name)), 1).unwrap();
    (dir, home, browser)
}

fn notice(topic: &str) -> Notice {
    Notice {
        event: NotifyEvent::Approval,
        topic: topic.into(),
        title: "Claude wants to run a command".into(),
        body: "Claude wants to run npm test".into(),
        open: "#approval=a-1".into(),
        urgency: Urgency::High,
        ttl: Duration::from_secs(600),
    }
}

#[tokio::test]
async fn a_push_is_signed_encrypted_and_decrypts_to_what_the_page_shows() {
    let service = PushService::start().await;
    let (_dir, home, browser) = subscribed(&service, "one").await;
    let (notifier, _queue) = notifier_of(&home);

    let deliveries = notifier.send_to_all(&notice("s-1")).await.unwrap();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].result.as_ref().unwrap(), &Outcome::Delivered(201));
    assert_eq!(deliveries[0].host, "127.0.0.1");

    let received = service.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.path, "/push/one");
    assert_eq!(request.headers["content-encoding"], "aes128gcm");
    assert_eq!(request.headers["urgency"], "high");
    let ttl: u64 = request.headers["ttl"].parse().unwrap();
    assert!(ttl > 0 && ttl <= 600, "ttl {ttl}");
    let topic = &request.headers["topic"];
    assert!(topic.len() <= 32 && !topic.contains("s-1"), "topic {topic}");
    check_vapid(request, &format!("http://127.0.0.1:{}", service.port), "mailto:voxa@localhost", notifier.public_key());

    let payload: Value = serde_json::from_slice(&browser.decrypt(&request.body)).unwrap();
    assert_eq!(payload["title"], "Claude wants to run a command");
    assert_eq!(payload["body"], "Claude wants to run npm test");
    assert_eq!(payload["open"], "#approval=a-1");
    assert!(!String::from_utf8_lossy(&request.body).contains("npm test"), "the service sees ciphertext only");
}

#[tokio::test]
async fn a_subscription_the_service_calls_gone_is_forgotten() {
    let (_dir, home) = home();
    let service = PushService::start().await;
    let store = Subscriptions::new(home.clone());
    store.add("p", Subscriber::new().subscription(service.endpoint("gone")), 1).unwrap();
    store.add("p", Subscriber::new().subscription(service.endpoint("missing")), 2).unwrap();
    store.add("p", Subscriber::new().subscription(service.endpoint("kept")), 3).unwrap();
    service.answer_next(410, None);
    service.answer_next(404, None);
    let (notifier, _queue) = notifier_of(&home);
    let deliveries = notifier.send_to_all(&notice("s-2")).await.unwrap();
    let outcomes: Vec<_> = deliveries.iter().map(|d| (*d.result.as_ref().unwrap(), d.removed)).collect();
    assert_eq!(outcomes, [(Outcome::Gone(410), true), (Outcome::Gone(404), true), (Outcome::Delivered(201), false)]);
    let left: Vec<String> = store.load().unwrap().into_iter().map(|e| e.subscription.endpoint).collect();
    assert_eq!(left, [service.endpoint("kept")]);
}

#[tokio::test]
async fn a_busy_service_is_tried_again_after_it_says_when() {
    let service = PushService::start().await;
    let (_dir, home, browser) = subscribed(&service, "busy").await;
    service.answer_next(429, Some(0));
    service.answer_next(503, Some(0));
    let (notifier, _queue) = notifier_of(&home);
    let deliveries = notifier.send_to_all(&notice("s-3")).await.unwrap();
    assert_eq!(deliveries[0].result.as_ref().unwrap(), &Outcome::Delivered(201));
    let received = service.received();
    assert_eq!(received.len(), 3, "429, 503, then delivered");
    for request in &received {
        let payload: Value = serde_json::from_slice(&browser.decrypt(&request.body)).unwrap();
        assert_eq!(payload["body"], "Claude wants to run npm test");
    }
}

#[tokio::test]
async fn queued_notices_are_sent_by_the_queue_and_newer_ones_replace_older_of_the_same_topic() {
    let service = PushService::start().await;
    let (_dir, home, browser) = subscribed(&service, "q").await;
    let (notifier, queue) = notifier_of(&home);
    let mut first = notice("s-4");
    first.body = "first".into();
    let mut second = notice("s-4");
    second.body = "second".into();
    assert!(notifier.notify(first));
    assert!(notifier.notify(second));
    let cancel = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(queue.run(notifier.clone(), cancel.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while service.received().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Give a second push (which must not come) the time a first one took to arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    cancel.cancel();
    worker.await.unwrap();
    let bodies: Vec<String> = service
        .received()
        .iter()
        .map(|r| {
            serde_json::from_slice::<Value>(&browser.decrypt(&r.body)).unwrap()["body"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(bodies, ["second"], "one notification per session at a time: the newest");
}

#[tokio::test]
async fn notify_test_reports_each_endpoints_answer_and_names_no_path() {
    let (dir, home) = home();
    let service = PushService::start().await;
    let browser = Subscriber::new();
    Subscriptions::new(home.clone()).add("p", browser.subscription(service.endpoint("secret-capability")), 1).unwrap();
    home.save_config(&Config { push: private_endpoints(), ..Default::default() }).unwrap();
    let home_dir = home.dir().to_owned();
    let output = tokio::task::spawn_blocking(move || voxa(&home_dir, &["notify", "test"])).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout} {}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("127.0.0.1: delivered (HTTP 201)"), "{stdout}");
    assert!(!stdout.contains("secret-capability"), "{stdout}");
    let received = service.received();
    assert_eq!(received.len(), 1);
    let payload: Value = serde_json::from_slice(&browser.decrypt(&received[0].body)).unwrap();
    assert!(payload["body"].as_str().unwrap().contains("Notifications work"), "{payload}");

    let empty = Home::at(dir.path().join("empty"));
    empty.ensure().unwrap();
    let output = voxa(empty.dir(), &["notify", "test"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("Turn on notifications"));
}

/// The agent's end: a phone hands over its subscription, and an approval that opens while nobody
/// follows reaches it as a push; while a client follows, none is sent.
mod agent {
    use serde_json::json;

    use super::*;
    use crate::support::harness::*;

    async fn asking_agent() -> TestAgent {
        TestAgent::start_with(None, |options| {
            options.config.policy.ask = vec!["run_command".into()];
            options.config.push = private_endpoints();
        })
        .await
    }

    fn home_of(agent: &TestAgent) -> Home {
        Home::at(agent.home.path().join("voxa"))
    }

    async fn subscribe(agent: &TestAgent, subscription: &Subscription) -> Value {
        let mut client = agent.local_client().await;
        send(&mut client, json!({"type":"push_subscribe","subscription":subscription})).await;
        recv_json(&mut client).await
    }

    async fn wait_for_pushes(service: &PushService, count: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while service.received().len() < count {
            assert!(tokio::time::Instant::now() < deadline, "no push arrived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        service.received()
    }

    #[tokio::test]
    async fn a_turn_that_ends_while_nobody_follows_is_pushed_with_its_answer() {
        let agent = TestAgent::start_with(None, |options| {
            options.config.push = private_endpoints();
            options.config.agents.insert(
                "echo".into(),
                voxa::config::AgentCommand {
                    program: "/bin/sh".into(),
                    args: vec!["-c".into(), "echo \"3 files changed\"".into(), "{prompt}".into()],
                    format: "text".into(),
                },
            );
        })
        .await;
        let service = PushService::start().await;
        let browser = Subscriber::new();
        let answer = subscribe(&agent, &browser.subscription(service.endpoint("turns"))).await;
        assert_eq!(answer["type"], "push_subscribed", "{answer}");
        let mut caller = agent.local_client().await;
        let start = json!({"type":"tool_call","id":"s1","name":"agent_start","args":{"prompt":"go","agent":"echo","title":"tidy up"}});
        send(&mut caller, start).await;
        let pushes = wait_for_pushes(&service, 1).await;
        let payload: Value = serde_json::from_slice(&browser.decrypt(&pushes[0].body)).unwrap();
        assert_eq!(payload["title"], "Turn finished: tidy up", "{payload}");
        assert_eq!(payload["body"], "3 files changed", "{payload}");
        assert!(payload["open"].as_str().unwrap().starts_with("#session=s-"), "{payload}");
        agent.agent.stop().await;
    }

    #[tokio::test]
    async fn hello_ok_offers_the_vapid_key_and_a_hostile_subscription_is_refused() {
        let agent = TestAgent::start(None).await;
        let mut client = agent.local_client().await;
        send(&mut client, json!({"type":"status"})).await;
        let _ = recv_json(&mut client).await;
        let hello = {
            let mut socket = connect(&agent.loopback_url()).await;
            say_hello(&mut socket, agent.token()).await
        };
        let key = hello["vapid_public_key"].as_str().expect("hello_ok carries the VAPID key");
        assert_eq!(URL_SAFE_NO_PAD.decode(key).unwrap().len(), 65);

        let mut bad = Subscriber::new().subscription("http://push.example/x".into());
        let answer = subscribe(&agent, &bad).await;
        assert_eq!(
            (answer["type"].as_str(), answer["code"].as_str()),
            (Some("error"), Some("invalid-args")),
            "{answer}"
        );
        bad.endpoint = "https://push.example/x".into();
        bad.keys.auth = "AAAA".into();
        let answer = subscribe(&agent, &bad).await;
        assert_eq!(answer["code"], "invalid-args", "{answer}");
        assert!(Subscriptions::new(home_of(&agent)).load().unwrap().is_empty(), "nothing hostile was kept");
        agent.agent.stop().await;
    }

    #[tokio::test]
    async fn push_subscribe_takes_only_https_endpoints_on_public_addresses() {
        let agent = TestAgent::start(None).await;
        let service = PushService::start().await;
        let browser = Subscriber::new();
        let port = service.port;
        for (endpoint, word) in [
            (format!("http://127.0.0.1:{port}/push/x"), "https://"),
            (format!("https://127.0.0.1:{port}/push/x"), "127.0.0.1, which is not a public address"),
            (format!("https://localhost:{port}/push/x"), "which is not a public address"),
            (format!("https://[::ffff:127.0.0.1]:{port}/push/x"), "which is not a public address"),
            (format!("https://[::1]:{port}/push/x"), "which is not a public address"),
            ("https://169.254.169.254/latest/meta-data".to_owned(), "169.254.169.254, which is not"),
            ("https://10.0.0.1/push".to_owned(), "10.0.0.1, which is not"),
            ("https://100.64.0.1/push".to_owned(), "100.64.0.1, which is not"),
        ] {
            let answer = subscribe(&agent, &browser.subscription(endpoint.clone())).await;
            assert_eq!((answer["type"].as_str(), answer["code"].as_str()), (Some("error"), Some("invalid-args")));
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains(word), "{endpoint}: {message}");
            assert!(!message.contains("/push") && !message.contains("meta-data"), "no path: {message}");
        }
        assert!(Subscriptions::new(home_of(&agent)).load().unwrap().is_empty(), "nothing was kept");
        assert_eq!(service.connections(), 0, "the laptop sent nothing");
        agent.agent.stop().await;
    }

    #[tokio::test]
    async fn a_kept_subscription_is_checked_again_before_each_push() {
        // Kept while its name pointed elsewhere (DNS changes), it now points at this machine.
        let (_dir, home) = home();
        let service = PushService::start().await;
        let browser = Subscriber::new();
        let endpoint = format!("https://localhost:{}/push/rebound", service.port);
        Subscriptions::new(home.clone()).add("p", browser.subscription(endpoint), 1).unwrap();
        let settings = NotificationSettings::default();
        let (notifier, _queue) =
            Notifier::new(&home, "p".into(), settings, PushSettings::default(), DialOptions::default()).unwrap();
        let started = std::time::Instant::now();
        let deliveries = notifier.send_to_all(&notice("s-1")).await.unwrap();
        let err = format!("{:#}", deliveries[0].result.as_ref().unwrap_err());
        assert!(err.contains("not a public address"), "{err}");
        assert!(started.elapsed() < voxa::push::FIRST_RETRY_WAIT, "a refused endpoint is not tried again");
        assert_eq!(service.connections(), 0, "the laptop sent nothing");
        assert_eq!(Subscriptions::new(home).load().unwrap().len(), 1, "kept, and refused again next time");
    }

    #[tokio::test]
    async fn an_approval_nobody_follows_becomes_a_push_and_none_goes_out_while_a_client_follows() {
        let agent = asking_agent().await;
        let service = PushService::start().await;
        let browser = Subscriber::new();
        let answer = subscribe(&agent, &browser.subscription(service.endpoint("phone"))).await;
        assert_eq!(answer["type"], "push_subscribed", "{answer}");

        // Nobody follows: the approval is pushed, its summary is what the notification says.
        let mut caller = agent.local_client().await;
        send(&mut caller, json!({"type":"tool_call","id":"c1","name":"run_command","args":{"command":"npm test"}}))
            .await;
        let pushes = wait_for_pushes(&service, 1).await;
        let payload: Value = serde_json::from_slice(&browser.decrypt(&pushes[0].body)).unwrap();
        assert!(payload["body"].as_str().unwrap().contains("npm test"), "{payload}");
        assert!(payload["open"].as_str().unwrap().starts_with("#approval=a-"), "{payload}");
        assert_eq!(pushes[0].headers["urgency"], "high");

        // A client follows: it sees the next approval, and no push goes out for it.
        let mut follower = agent.local_client().await;
        send(&mut follower, json!({"type":"follow"})).await;
        let mut seen_approvals = 0;
        send(&mut caller, json!({"type":"tool_call","id":"c2","name":"run_command","args":{"command":"make"}})).await;
        while seen_approvals < 2 {
            let frame = recv_json(&mut follower).await;
            if frame["type"] == "approval" {
                seen_approvals += 1;
            }
        }
        // The push of the first approval took well under this; a second one would have come.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(service.received().len(), 1, "no push while a client follows");
        agent.agent.stop().await;
    }
}

/// The page's end, in Chromium: "Turn on notifications" subscribes (the browser's push service,
/// unreachable here, replaced at the page boundary by a subscription whose keys the page made with
/// WebCrypto), the laptop's push is decrypted with that key, and the service worker shows it when
/// Chromium delivers it as a push event.
mod page {
    use serde_json::json;

    use super::*;
    use crate::support::browser::Browser as Chromium;
    use crate::support::harness::*;

    /// Runs before the page's scripts: `PushManager.subscribe` hands back a subscription to the
    /// test's push service, with a P-256 key pair and auth secret made here (kept for the test).
    const FAKE_PUSH_SERVICE: &str = r#"
        const endpoint = '__ENDPOINT__';
        PushManager.prototype.subscribe = async function () {
          const pair = await crypto.subtle.generateKey({ name: 'ECDH', namedCurve: 'P-256' }, true, ['deriveBits']);
          const raw = new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey));
          const auth = crypto.getRandomValues(new Uint8Array(16));
          const b64 = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
          window.__pushPrivate = (await crypto.subtle.exportKey('jwk', pair.privateKey)).d;
          window.__pushAuth = b64(auth);
          const keys = { p256dh: b64(raw), auth: b64(auth) };
          return { endpoint, toJSON: () => ({ endpoint, keys }) };
        };
    "#;

    #[tokio::test]
    async fn the_page_subscribes_and_its_service_worker_shows_the_laptops_notification() {
        let Some(chromium) = Chromium::start().await else { return };
        let agent = TestAgent::start_with(None, |options| options.config.push = private_endpoints()).await;
        let service = PushService::start().await;
        let page = agent.loopback_url().replace("ws://", "http://");
        let origin = page.trim_end_matches('/').to_owned();
        chromium.cdp("Browser.grantPermissions", json!({"origin": origin, "permissions": ["notifications"]})).await;
        let script = FAKE_PUSH_SERVICE.replace("__ENDPOINT__", &service.endpoint("chromium"));
        chromium.cdp("Page.addScriptToEvaluateOnNewDocument", json!({"source": script})).await;
        // A tapped notification opens `#session=…`: the page shows the agent tab.
        chromium.open(&format!("{origin}/#token={}&session=s-9", agent.token())).await;
        chromium.wait_connection("online").await;
        chromium
            .wait_script(
                "the agent tab",
                "return document.getElementById('tab-agent').getAttribute('aria-pressed') === 'true';",
            )
            .await;
        chromium.press("Status").await;
        chromium.press("Turn on notifications").await;
        chromium.wait_text("#notify-status", "notifications on", |t| t.contains("Notifications are on")).await;

        let home = Home::at(agent.home.path().join("voxa"));
        let kept = Subscriptions::new(home.clone()).load().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].subscription.endpoint, service.endpoint("chromium"));

        // The laptop pushes; the test decrypts it with the key only the page held.
        let (notifier, _queue) = notifier_of(&home);
        let deliveries = notifier.send_to_all(&notice("s-9")).await.unwrap();
        assert_eq!(deliveries[0].result.as_ref().unwrap(), &Outcome::Delivered(201));
        let private = chromium.script("return window.__pushPrivate;", vec![]).await;
        let auth = chromium.script("return window.__pushAuth;", vec![]).await;
        let held = Subscriber {
            secret: p256::SecretKey::from_slice(&URL_SAFE_NO_PAD.decode(private.as_str().unwrap()).unwrap()).unwrap(),
            auth: URL_SAFE_NO_PAD.decode(auth.as_str().unwrap()).unwrap().try_into().unwrap(),
        };
        let plain = held.decrypt(&service.received()[0].body);

        // Chromium delivers it to the service worker as a push event (the first registration of
        // this fresh profile is number 0), and the worker shows it.
        chromium
            .wait_script("the service worker", "return navigator.serviceWorker.ready.then((r) => !!r.active);")
            .await;
        chromium.cdp("ServiceWorker.enable", json!({})).await;
        let data = String::from_utf8(plain).unwrap();
        let shown = "return navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((list) => \
                     list.map((n) => ({ title: n.title, body: n.body, open: n.data && n.data.open })));";
        // A push delivered while the worker is still starting can be lost on a loaded machine:
        // deliver again after a quiet while, as a push service would retry.
        let mut notifications = json!([]);
        for _ in 0..4 {
            chromium
                .cdp("ServiceWorker.deliverPushMessage", json!({"origin": origin, "registrationId": "0", "data": data}))
                .await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            notifications = chromium.script(shown, vec![]).await;
            while notifications == json!([]) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
                notifications = chromium.script(shown, vec![]).await;
            }
            if notifications != json!([]) {
                break;
            }
        }
        assert_eq!(
            notifications,
            json!([{"title": "Claude wants to run a command", "body": "Claude wants to run npm test", "open": "#approval=a-1"}]),
        );
        chromium.close().await;
        agent.agent.stop().await;
    }

    /// On the relay's page, the service worker shows the laptop's push and sends its receipt to
    /// the relay's `/ack`; the agent says it was delivered, and so does the page's Status tab.
    #[tokio::test]
    async fn the_service_worker_on_the_relays_page_acknowledges_the_push_it_shows() {
        let Some(chromium) = Chromium::start().await else { return };
        let relay = TestRelay::start().await;
        let mut agent =
            TestAgent::start_with(Some(relay.url()), |options| options.config.push = private_endpoints()).await;
        agent.wait_event("connected", |event| matches!(event, voxa::agent::LinkEvent::Connected { .. })).await;
        let service = PushService::start().await;
        let origin = format!("http://{}", relay.addr);
        chromium.cdp("Browser.grantPermissions", json!({"origin": origin, "permissions": ["notifications"]})).await;
        let script = FAKE_PUSH_SERVICE.replace("__ENDPOINT__", &service.endpoint("chromium"));
        chromium.cdp("Page.addScriptToEvaluateOnNewDocument", json!({"source": script})).await;
        chromium.pair(&format!("{origin}/#code={}&token={}", agent.code(), agent.token())).await;
        chromium.wait_connection("online").await;
        chromium.press("Status").await;
        chromium.press("Turn on notifications").await;
        chromium.wait_text("#notify-status", "notifications on", |t| t.contains("Notifications are on")).await;

        assert!(agent.agent.ctx.notifier.as_ref().unwrap().notify(notice("a-7")));
        eventually("the push", || !service.received().is_empty()).await;
        let private = chromium.script("return window.__pushPrivate;", vec![]).await;
        let auth = chromium.script("return window.__pushAuth;", vec![]).await;
        let held = Subscriber {
            secret: p256::SecretKey::from_slice(&URL_SAFE_NO_PAD.decode(private.as_str().unwrap()).unwrap()).unwrap(),
            auth: URL_SAFE_NO_PAD.decode(auth.as_str().unwrap()).unwrap().try_into().unwrap(),
        };
        let data = String::from_utf8(held.decrypt(&service.received()[0].body)).unwrap();
        assert!(data.contains("\"receipt\""), "{data}");
        chromium
            .wait_script("the service worker", "return navigator.serviceWorker.ready.then((r) => !!r.active);")
            .await;
        chromium.cdp("ServiceWorker.enable", json!({})).await;
        let shown = "return navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((l) => l.length);";
        for _ in 0..4 {
            chromium
                .cdp("ServiceWorker.deliverPushMessage", json!({"origin": origin, "registrationId": "0", "data": data}))
                .await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while chromium.script(shown, vec![]).await == json!(0) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if chromium.script(shown, vec![]).await != json!(0) {
                break;
            }
        }
        assert_eq!(chromium.script(shown, vec![]).await, json!(1), "the worker shows the notification");
        // The receipt went worker → relay → agent.
        let mut client = agent.local_client().await;
        let mut push = Value::Null;
        for _ in 0..200 {
            send(&mut client, json!({"type":"status"})).await;
            push = recv_type(&mut client, "status").await["push"].clone();
            if push["state"] == "delivered" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(push["state"], "delivered", "{push}");
        chromium
            .wait_text("#notify-delivery", "delivered on the page", |t| {
                t.starts_with("Last notification: delivered in")
            })
            .await;
        chromium.close().await;
        agent.agent.stop().await;
    }
}

#[test]
fn pair_rotate_forgets_the_old_links_subscriptions() {
    let (_dir, home) = home();
    let output = voxa(home.dir(), &["pair", "--no-qr"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let code = home.load_secrets().unwrap().unwrap().relay_code;
    let store = Subscriptions::new(home.clone());
    store
        .add(&voxa::push::pairing_id(&code), Subscriber::new().subscription("https://push.example/old".into()), 1)
        .unwrap();
    let output = voxa(home.dir(), &["pair", "--rotate", "--no-qr"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(store.load().unwrap().is_empty(), "a rotated link's browsers are not notified any more");
}

/// Push receipts: the service worker's `POST /ack` through a real relay to the agent that sent the
/// push; the test plays the phone's worker with the key only the subscriber holds.
mod receipts {
    use serde_json::json;

    use super::*;
    use crate::support::harness::*;
    use voxa::agent::LinkEvent;

    /// An agent on `relay` (re-sending after 1 s) with one browser subscribed to `service`.
    async fn agent_and_phone(relay: &TestRelay, service: &PushService) -> (TestAgent, Subscriber) {
        let mut agent = TestAgent::start_with(Some(relay.url()), |options| {
            options.config.push = PushSettings { allow_private_endpoints: true, resend_after_secs: Some(1) };
        })
        .await;
        agent.wait_event("connected", |event| matches!(event, LinkEvent::Connected { .. })).await;
        let browser = Subscriber::new();
        let home = Home::at(agent.home.path().join("voxa"));
        let pairing = voxa::push::pairing_id(&agent.secrets.relay_code);
        Subscriptions::new(home).add(&pairing, browser.subscription(service.endpoint("phone")), 1).unwrap();
        (agent, browser)
    }

    async fn pushed(service: &PushService, count: usize) -> Vec<Received> {
        eventually("the push", || service.received().len() >= count).await;
        service.received()
    }

    /// What the service worker does once it showed the notification.
    async fn acknowledge(relay: &TestRelay, path: &str, body: &str) -> u16 {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: relay\r\nContent-Type: text/plain;charset=UTF-8\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        http(relay.addr, &request).await.0
    }

    async fn last_push(agent: &TestAgent) -> Value {
        let mut client = agent.local_client().await;
        send(&mut client, json!({"type":"status"})).await;
        recv_type(&mut client, "status").await["push"].clone()
    }

    #[tokio::test]
    async fn a_shown_push_is_acknowledged_through_the_relay_and_only_its_own_receipt_counts() {
        let relay = TestRelay::start().await;
        let service = PushService::start().await;
        let (agent, browser) = agent_and_phone(&relay, &service).await;
        assert!(agent.agent.ctx.notifier.as_ref().unwrap().notify(notice("a-1")));
        let received = pushed(&service, 1).await;
        let payload: Value = serde_json::from_slice(&browser.decrypt(&received[0].body)).unwrap();
        let ack = payload["ack"].as_str().unwrap().to_owned();
        assert_eq!(ack, format!("/ack?code={}", agent.code()));
        let receipt = payload["receipt"].as_str().unwrap().to_owned();
        assert!(receipt.len() == 32 && receipt.bytes().all(|b| b.is_ascii_hexdigit()), "{receipt}");
        assert_ne!(receipt, agent.token(), "never the pairing's token");
        assert_eq!(last_push(&agent).await["state"], "waiting");

        // The relay passes anything on; the agent counts only the receipt it made.
        let forged = json!({"receipt": "0123456789abcdef0123456789abcdef"}).to_string();
        assert_eq!(acknowledge(&relay, &ack, &forged).await, 202);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_ne!(last_push(&agent).await["state"], "delivered", "a forged receipt is not a delivery");

        assert_eq!(acknowledge(&relay, &ack, &json!({"receipt": receipt}).to_string()).await, 202);
        let mut shown = Value::Null;
        for _ in 0..100 {
            shown = last_push(&agent).await;
            if shown["state"] == "delivered" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(shown["state"], "delivered", "{shown}");
        assert_eq!(shown["event"], "approval");
        assert_eq!(shown["resent"], false);
        assert!(shown["delivered_after_ms"].as_u64().unwrap() >= 300, "{shown}");
        // Delivered: it is not sent again.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(service.received().len(), 1);
        agent.agent.stop().await;
    }

    #[tokio::test]
    async fn an_approvals_push_nobody_acknowledged_is_sent_again_once_and_status_says_so() {
        let relay = TestRelay::start().await;
        let service = PushService::start().await;
        let (agent, browser) = agent_and_phone(&relay, &service).await;
        assert!(agent.agent.ctx.notifier.as_ref().unwrap().notify(notice("a-2")));
        // The push service took it (201) and the phone never showed it: dropped on the way.
        let received = pushed(&service, 2).await;
        let first: Value = serde_json::from_slice(&browser.decrypt(&received[0].body)).unwrap();
        let again: Value = serde_json::from_slice(&browser.decrypt(&received[1].body)).unwrap();
        assert_eq!(first["body"], again["body"]);
        assert_ne!(first["receipt"], again["receipt"], "a new receipt for the re-send");
        let shown = last_push(&agent).await;
        assert_eq!(shown["resent"], true, "{shown}");
        // Once only.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(service.received().len(), 2);
        let shown = last_push(&agent).await;
        assert_eq!(
            (shown["state"].as_str(), shown["resent"].as_bool()),
            (Some("not-delivered"), Some(true)),
            "{shown}"
        );
        // A late receipt still counts: the re-send shows as delivered once its worker answers.
        let ack = again["ack"].as_str().unwrap();
        assert_eq!(acknowledge(&relay, ack, &json!({"receipt": again["receipt"]}).to_string()).await, 202);
        eventually_status(&agent, "delivered").await;
        agent.agent.stop().await;
    }

    async fn eventually_status(agent: &TestAgent, state: &str) {
        for _ in 0..100 {
            if last_push(agent).await["state"] == state {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the last push never became {state}");
    }

    #[tokio::test]
    async fn the_ack_endpoint_is_bounded_and_rate_limited() {
        let relay = TestRelay::start().await;
        let code = "0123456789abcdef0123456789abcdef";
        let path = format!("/ack?code={code}");
        let get = format!("GET {path} HTTP/1.1\r\nHost: relay\r\n\r\n");
        assert_eq!(http(relay.addr, &get).await.0, 405);
        let bad_code = "POST /ack?code=XYZ HTTP/1.1\r\nHost: relay\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(http(relay.addr, bad_code).await.0, 400);
        let no_length = format!("POST {path} HTTP/1.1\r\nHost: relay\r\n\r\n");
        assert_eq!(http(relay.addr, &no_length).await.0, 411);
        let large = format!("POST {path} HTTP/1.1\r\nHost: relay\r\nContent-Length: 100000\r\n\r\n");
        assert_eq!(http(relay.addr, &large).await.0, 413);
        assert_eq!(acknowledge(&relay, &path, "{}").await, 404, "no agent holds the code");
        // 30 a minute per code: the answers above counted, and past 30 the relay says 429.
        let mut statuses = Vec::new();
        for _ in 0..40 {
            statuses.push(acknowledge(&relay, &path, "{}").await);
        }
        assert!(statuses.iter().filter(|s| **s == 404).count() <= 30, "{statuses:?}");
        assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    }
}
