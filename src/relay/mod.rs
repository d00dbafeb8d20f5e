//! The relay (docs/PROTOCOL.md, "Relay"): pairs one agent (`/agent`) and one phone (`/ws`) per relay code and copies
//! their frames both ways. It reads nothing but the `__peer` marker of text frames, tells each side
//! when the other comes and goes, and bounds everything a client can make it hold.
//!
//! Decisions the protocol leaves to the relay:
//! - A replaced socket is closed 4001 `replaced`; the side that stays hears `left` and then
//!   `joined`, so it knows to start its session (hello) again with the new socket.
//! - Messages are relayed whole: a fragmented message is reassembled (16 MiB in all) and sent on
//!   as one frame. Larger messages close the socket with 1009, bad framing with 1002, text that
//!   is not UTF-8 with 1007; shutdown and idle sockets get 1001.
//! - Slow readers: while a receiver's queue is full, the sender's socket is not read (so TCP slows
//!   the sender down); a receiver that writes nothing at all for [`STALL_TIMEOUT`] is closed 1013
//!   and its queue freed at once.
//! - A socket silent for [`PING_INTERVAL`] is pinged and one silent for [`IDLE_TIMEOUT`] is
//!   dropped, so a vanished peer is gone within 45 s and its partner hears `left`.
//!
//! Scale-out: the relay keeps no state but the map of live codes, so a load balancer hashing on
//! `code` (nginx `hash $arg_code consistent;`) spreads pairs over processes.

mod codec;
mod hub;
mod live;
mod socket;

pub use self::live::{code_tag, LiveConfig, CALL_ID_PREFIX, DEFAULT_MAX_CALLS, DEFAULT_MAX_CALL_TIME};

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn, Instrument as _};

use crate::net::http::{self, HeadError, RequestHead};
use crate::net::web;
use crate::protocol::{PeerRole, IDLE_TIMEOUT, MAX_FRAME_LEN, PING_INTERVAL, SEND_QUEUE_FRAMES};
use crate::secret::{is_lower_hex, Secret, SECRET_HEX_LEN};

/// Bytes queued for one socket's writer before its senders wait. A single frame always fits an
/// empty queue, so this bounds a backlog, not the frame size.
pub const SEND_QUEUE_BYTES: usize = MAX_FRAME_LEN;
/// Time a receiver whose queue is full may write nothing before it is closed 1013.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections (upgraded or not) one relay process serves at once; more are refused.
pub const MAX_CONNECTIONS: usize = 50_000;
/// Time a client has to finish its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = http::HEAD_TIMEOUT;
/// Time connections get to close after shutdown is asked for, before `run` returns anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after an accept error such as running out of file descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How a relay runs: TLS, the optional relay token, and the limits every socket gets.
#[derive(Clone)]
pub struct RelayConfig {
    /// Serve `wss://` with this configuration; plain `ws://` when `None`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Token both sides must present as `Authorization: Bearer`; open relay when `None`.
    pub token: Option<Secret>,
    /// Per-socket timing and size limits.
    pub limits: Limits,
    /// Connections served at once; further ones are refused (`503` on plain HTTP).
    pub max_connections: usize,
    /// Host voice calls at `/live` (docs/PROTOCOL.md, "Hosted voice"); `/live` is 404 when `None`.
    /// The web client's `GET /config` reports whether it is offered.
    pub live: Option<LiveConfig>,
}

/// Timing and size limits of one relayed socket.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Silence after which a socket is pinged.
    pub ping_interval: Duration,
    /// Silence after which a socket is dropped.
    pub idle_timeout: Duration,
    /// Frames queued for a socket; while they are queued, the sender waits.
    pub send_queue_frames: usize,
    /// Bytes queued for a socket; while they are queued, the sender waits.
    pub send_queue_bytes: usize,
    /// Time a socket with a full queue may write nothing before it is closed 1013 (slow reader).
    pub stall_timeout: Duration,
    /// Largest message accepted; larger ones close the socket with 1009.
    pub max_frame_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            ping_interval: PING_INTERVAL,
            idle_timeout: IDLE_TIMEOUT,
            send_queue_frames: SEND_QUEUE_FRAMES,
            send_queue_bytes: SEND_QUEUE_BYTES,
            stall_timeout: STALL_TIMEOUT,
            max_frame_len: MAX_FRAME_LEN,
        }
    }
}

impl Limits {
    /// Refuses limits that would spin (zero intervals) or could never pass a frame.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.ping_interval.is_zero() || self.idle_timeout < self.ping_interval {
            bail!("relay limits: the ping interval must be non-zero and no longer than the idle timeout");
        }
        if self.stall_timeout.is_zero() || self.send_queue_frames == 0 || self.max_frame_len == 0 {
            bail!("relay limits: stall timeout, queue length and frame size must be non-zero");
        }
        Ok(())
    }
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig { tls: None, token: None, limits: Limits::default(), max_connections: MAX_CONNECTIONS, live: None }
    }
}

impl std::fmt::Debug for RelayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayConfig")
            .field("tls", &self.tls.is_some())
            .field("token", &self.token)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("live", &self.live)
            .finish()
    }
}

/// Loads a PEM certificate chain and private key (PKCS#8, PKCS#1 or SEC1) for `wss://`.
pub fn load_tls(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|err| pem_error(err, "TLS certificate", cert))?;
    if certs.is_empty() {
        bail!("TLS certificate {} holds no PEM certificate", cert.display());
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|err| pem_error(err, "TLS private key", key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider supports no protocol version")?
        .with_no_client_auth()
        .with_single_cert(certs, private_key)
        .with_context(|| {
            format!("TLS certificate {} and key {} do not match or are not supported", cert.display(), key.display())
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Describes a PEM loading failure without quoting the file, which may hold key material.
fn pem_error(err: rustls_pki_types::pem::Error, what: &str, path: &Path) -> anyhow::Error {
    use rustls_pki_types::pem::Error;
    match err {
        Error::Io(err) => anyhow::anyhow!("could not read {what} {}: {err}", path.display()),
        Error::NoItemsFound => anyhow::anyhow!("{what} {} holds no PEM item of the expected kind", path.display()),
        _ => anyhow::anyhow!("{what} {} is not valid PEM", path.display()),
    }
}

/// State shared by a relay's connection tasks.
struct Shared {
    hub: Arc<hub::Hub>,
    token: Option<Secret>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    hosting: Option<live::Hosting>,
    offer: web::Offer,
}

/// Serves the relay on an already-bound listener until `shutdown` resolves, then closes every
/// socket (close 1001) and returns once they are gone or after a few seconds' grace.
pub async fn run(
    listener: TcpListener,
    config: RelayConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    config.limits.validate()?;
    let shared = Arc::new(Shared {
        hub: Arc::default(),
        token: config.token,
        limits: config.limits,
        tls: config.tls.map(tokio_rustls::TlsAcceptor::from),
        offer: web::Offer { live: config.live.is_some() },
        hosting: config.live.map(live::Hosting::new),
    });
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let live = Arc::new(AtomicUsize::new(0));
    let next_conn = AtomicU64::new(1);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(err) if is_per_connection(&err) => {
                debug!(%err, "a connection failed before it was accepted");
                continue;
            }
            Err(err) => {
                warn!(%err, "could not accept a connection; pausing");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        let Some(guard) = ConnectionGuard::admit(&live, config.max_connections) else {
            debug!("connection refused: relay full");
            if shared.tls.is_none() {
                let _ = tcp.try_write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: 5\r\nconnection: close\r\n\r\n");
            }
            continue;
        };
        let conn = next_conn.fetch_add(1, Ordering::Relaxed);
        let span = tracing::debug_span!("relay", conn, role = tracing::field::Empty);
        let shared = Arc::clone(&shared);
        let cancel = cancel.clone();
        tracker.spawn(
            async move {
                let _guard = guard;
                if let Err(err) = serve_connection(&shared, tcp, conn, &cancel).await {
                    debug!(err = %format_args!("{err:#}"), "connection ended with an error");
                }
            }
            .instrument(span),
        );
    }
    drop(listener);
    cancel.cancel();
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait()).await.is_err() {
        warn!(connections = tracker.len(), "connections still closing after the shutdown grace; leaving them");
    }
    Ok(())
}

/// Accept errors that concern one connection only, not the listener.
fn is_per_connection(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(err.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock)
}

/// Counts a connection against the limit for as long as it lives.
struct ConnectionGuard(Arc<AtomicUsize>);

impl ConnectionGuard {
    fn admit(live: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let previous = live.fetch_add(1, Ordering::AcqRel);
        if previous >= max {
            live.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(ConnectionGuard(Arc::clone(live)))
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn serve_connection(
    shared: &Shared,
    tcp: TcpStream,
    conn: u64,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    // Frames are written whole and should leave at once; Nagle would hold back small ones.
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = &shared.tls else {
        return serve_stream(shared, tcp, conn, cancel).await;
    };
    let handshake = Box::pin(tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)));
    let stream = tokio::select! {
        result = handshake => result.context("TLS handshake timed out")?.context("TLS handshake failed")?,
        () = cancel.cancelled() => return Ok(()),
    };
    // Boxed: TLS state is large, and plain connections should not carry room for it.
    Box::pin(serve_stream(shared, stream, conn, cancel)).await
}

async fn serve_stream<S>(shared: &Shared, mut stream: S, conn: u64, cancel: &CancellationToken) -> anyhow::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let read = tokio::select! {
        read = http::read_head(&mut stream) => read,
        () = cancel.cancelled() => return Ok(()),
    };
    let (head, leftover) = match read {
        Ok(read) => read,
        Err(HeadError::Io(err)) => return Err(err).context("reading the request"),
        Err(HeadError::TimedOut) => return Ok(()),
        Err(err @ HeadError::TooLarge) => {
            http::respond(&mut stream, 431, "Request Header Fields Too Large", "request head too large").await?;
            bail!(err);
        }
        Err(err @ HeadError::Malformed) => {
            http::respond(&mut stream, 400, "Bad Request", "malformed request").await?;
            bail!(err);
        }
    };
    let route = live::route(&head, shared.hosting.as_ref(), shared.token.as_ref())
        .unwrap_or_else(|| route(&head, shared.token.as_ref()));
    match route {
        Route::Health => http::respond(&mut stream, 200, "OK", "ok").await.context("answering /healthz"),
        Route::Live { code } => {
            let Some(hosting) = &shared.hosting else { return Ok(()) };
            tracing::Span::current().record("role", "live");
            http::write_upgrade(&mut stream, &head).await.context("answering the upgrade")?;
            drop(head);
            let member = socket::Membership { hub: Arc::clone(&shared.hub), code, role: PeerRole::Phone, conn };
            live::serve(stream, leftover, member, &shared.limits, hosting, cancel).await;
            Ok(())
        }
        Route::Web => match web::answer(&head, shared.offer) {
            Some(response) => response.write(&mut stream).await.context("serving the web client"),
            None => http::respond(&mut stream, 404, "Not Found", "not found").await.context("answering a request"),
        },
        Route::Refuse(refusal) => {
            debug!(status = refusal.status, path = %printable_path(&head), "request refused");
            http::respond_with(&mut stream, refusal.status, refusal.reason, refusal.headers, refusal.body)
                .await
                .context("answering a refused request")
        }
        Route::Join { role, code } => {
            tracing::Span::current().record("role", role_name(role));
            http::write_upgrade(&mut stream, &head).await.context("answering the upgrade")?;
            // Nothing of the request outlives the upgrade: a socket keeps only what it needs.
            drop(head);
            let member = socket::Membership { hub: Arc::clone(&shared.hub), code, role, conn };
            socket::serve(stream, leftover, member, &shared.limits, cancel).await;
            Ok(())
        }
    }
}

/// The path for a log line: only the relay's own paths are named, never what a client sent.
fn printable_path(head: &RequestHead) -> &'static str {
    match head.path.as_str() {
        "/agent" => "/agent",
        "/ws" => "/ws",
        "/healthz" => "/healthz",
        "/live" => "/live",
        path if web::is_web_path(path) => "<web client>",
        _ => "<other>",
    }
}

fn role_name(role: PeerRole) -> &'static str {
    match role {
        PeerRole::Agent => "agent",
        PeerRole::Phone => "phone",
    }
}

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Health,
    /// The web client's page, files and `/config` (never behind the relay token: a browser cannot
    /// send one, and nothing served is secret).
    Web,
    Join {
        role: PeerRole,
        code: u128,
    },
    /// `/live`: a phone socket whose voice calls the relay hosts.
    Live {
        code: u128,
    },
    Refuse(Refusal),
}

/// A plain HTTP answer that ends the exchange.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    status: u16,
    reason: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: &'static str,
}

const NOT_FOUND: Refusal = Refusal { status: 404, reason: "Not Found", headers: &[], body: "not found" };
const METHOD_NOT_ALLOWED: Refusal =
    Refusal { status: 405, reason: "Method Not Allowed", headers: &[("allow", "GET")], body: "method not allowed" };
const UNAUTHORIZED: Refusal = Refusal {
    status: 401,
    reason: "Unauthorized",
    headers: &[("www-authenticate", "Bearer")],
    body: "relay token required",
};
const BAD_CODE: Refusal =
    Refusal { status: 400, reason: "Bad Request", headers: &[], body: "code must be 32 lowercase hex characters" };
const BAD_KEY: Refusal = Refusal { status: 400, reason: "Bad Request", headers: &[], body: "bad sec-websocket-key" };
const UPGRADE_REQUIRED: Refusal = Refusal {
    status: 426,
    reason: "Upgrade Required",
    headers: &[("upgrade", "websocket"), ("sec-websocket-version", "13")],
    body: "websocket upgrade required",
};

/// Decides a request from its head alone: path, method, relay token, code, then the upgrade.
fn route(head: &RequestHead, token: Option<&Secret>) -> Route {
    let role = match head.path.as_str() {
        "/healthz" if head.method == "GET" => return Route::Health,
        "/healthz" => return Route::Refuse(METHOD_NOT_ALLOWED),
        path if web::is_web_path(path) => return Route::Web,
        "/agent" => PeerRole::Agent,
        "/ws" => PeerRole::Phone,
        _ => return Route::Refuse(NOT_FOUND),
    };
    join_route(head, role, token)
}

/// Decides a socket request for `role` from the rest of its head: method, token, code, upgrade.
fn join_route(head: &RequestHead, role: PeerRole, token: Option<&Secret>) -> Route {
    if head.method != "GET" {
        return Route::Refuse(METHOD_NOT_ALLOWED);
    }
    if let Some(token) = token {
        if !head.bearer().is_some_and(|presented| token.matches(presented)) {
            return Route::Refuse(UNAUTHORIZED);
        }
    }
    let Some(code) = head.query_param("code").and_then(parse_code) else {
        return Route::Refuse(BAD_CODE);
    };
    if !head.is_websocket_upgrade() {
        return Route::Refuse(UPGRADE_REQUIRED);
    }
    // The key is 16 random bytes in base64: always 24 characters.
    if head.header("sec-websocket-key").map(str::trim).map(str::len) != Some(24) {
        return Route::Refuse(BAD_KEY);
    }
    Route::Join { role, code }
}

/// A relay code: exactly 32 lowercase hex characters, nothing around them.
fn parse_code(text: &str) -> Option<u128> {
    if text.len() != SECRET_HEX_LEN || !is_lower_hex(text) {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODE: &str = "0123456789abcdef0123456789abcdef";

    fn head(request: &str) -> RequestHead {
        RequestHead::parse(request.as_bytes()).unwrap().0
    }

    fn upgrade(path: &str, extra: &str) -> RequestHead {
        head(&format!(
            "GET {path} HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        ))
    }

    #[test]
    fn codes_are_exactly_32_lowercase_hex() {
        assert_eq!(parse_code(CODE), Some(0x0123456789abcdef0123456789abcdef));
        for bad in ["", "0123", &CODE.to_uppercase(), &format!("{CODE}0"), &CODE[1..], &format!("+{}", &CODE[1..])] {
            assert_eq!(parse_code(bad), None, "{bad:?}");
        }
        assert_eq!(parse_code(&format!(" {}", &CODE[1..])), None);
        assert_eq!(parse_code(&CODE.replace('a', "g")), None);
    }

    #[test]
    fn routes_paths_codes_and_upgrades() {
        let agent = upgrade(&format!("/agent?code={CODE}"), "");
        assert_eq!(route(&agent, None), Route::Join { role: PeerRole::Agent, code: parse_code(CODE).unwrap() });
        let phone = upgrade(&format!("/ws?v=1&code={CODE}"), "");
        assert!(matches!(route(&phone, None), Route::Join { role: PeerRole::Phone, .. }));

        assert_eq!(route(&head("GET /healthz HTTP/1.1\r\n\r\n"), None), Route::Health);
        assert_eq!(route(&head("POST /healthz HTTP/1.1\r\n\r\n"), None), Route::Refuse(METHOD_NOT_ALLOWED));
        assert_eq!(route(&upgrade("/nope", ""), None), Route::Refuse(NOT_FOUND));
        assert_eq!(route(&head("GET /?code=abc&token=def HTTP/1.1\r\n\r\n"), None), Route::Web);
        assert_eq!(route(&head("GET /js/main.js HTTP/1.1\r\n\r\n"), None), Route::Web);
        assert_eq!(route(&head("GET /config HTTP/1.1\r\n\r\n"), Some(&Secret::from_string("t".into()))), Route::Web);
        assert_eq!(route(&upgrade("/agent?code=XYZ", ""), None), Route::Refuse(BAD_CODE));
        assert_eq!(route(&upgrade("/agent", ""), None), Route::Refuse(BAD_CODE));
        let plain = head(&format!("GET /ws?code={CODE} HTTP/1.1\r\nHost: relay\r\n\r\n"));
        assert_eq!(route(&plain, None), Route::Refuse(UPGRADE_REQUIRED));
        let post = head(&format!("POST /ws?code={CODE} HTTP/1.1\r\n\r\n"));
        assert_eq!(route(&post, None), Route::Refuse(METHOD_NOT_ALLOWED));
        let short_key = head(&format!(
            "GET /ws?code={CODE} HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ));
        assert_eq!(route(&short_key, None), Route::Refuse(BAD_KEY));
    }

    #[test]
    fn relay_token_is_checked_before_anything_about_the_code() {
        let token = Secret::from_string("relay-secret".into());
        let path = format!("/agent?code={CODE}");
        assert_eq!(route(&upgrade(&path, ""), Some(&token)), Route::Refuse(UNAUTHORIZED));
        let wrong = upgrade(&path, "Authorization: Bearer relay-secreT\r\n");
        assert_eq!(route(&wrong, Some(&token)), Route::Refuse(UNAUTHORIZED));
        let basic = upgrade(&path, "Authorization: Basic relay-secret\r\n");
        assert_eq!(route(&basic, Some(&token)), Route::Refuse(UNAUTHORIZED));
        let right = upgrade(&path, "Authorization: Bearer relay-secret\r\n");
        assert!(matches!(route(&right, Some(&token)), Route::Join { .. }));
        let no_code = upgrade("/agent", "");
        assert_eq!(route(&no_code, Some(&token)), Route::Refuse(UNAUTHORIZED));
    }

    #[test]
    fn limits_that_would_spin_are_refused() {
        assert!(Limits::default().validate().is_ok());
        assert!(Limits { ping_interval: Duration::ZERO, ..Limits::default() }.validate().is_err());
        assert!(Limits { idle_timeout: Duration::from_secs(1), ..Limits::default() }.validate().is_err());
        assert!(Limits { send_queue_frames: 0, ..Limits::default() }.validate().is_err());
    }

    #[test]
    fn config_debug_hides_the_token() {
        let config = RelayConfig { token: Some(Secret::from_string("hunter2-token".into())), ..Default::default() };
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn load_tls_explains_bad_files_without_quoting_them() {
        let dir = tempfile::tempdir().unwrap();
        let cert_path = dir.path().join("cert.pem");
        let key_path = dir.path().join("key.pem");
        let missing = load_tls(&cert_path, &key_path).unwrap_err();
        assert!(format!("{missing:#}").contains("could not read TLS certificate"), "{missing:#}");

        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&cert_path, certified.cert.pem()).unwrap();
        std::fs::write(&key_path, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n").unwrap();
        let broken = format!("{:#}", load_tls(&cert_path, &key_path).unwrap_err());
        assert!(broken.contains("TLS private key") && !broken.contains("c2VjcmV0"), "{broken}");

        std::fs::write(&key_path, certified.key_pair.serialize_pem()).unwrap();
        let config = load_tls(&cert_path, &key_path).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);

        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&key_path, other.key_pair.serialize_pem()).unwrap();
        let mismatch = format!("{:#}", load_tls(&cert_path, &key_path).unwrap_err());
        assert!(mismatch.contains("do not match"), "{mismatch}");
    }
}
