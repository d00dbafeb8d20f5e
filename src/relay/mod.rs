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
//! - Memory: one budget for the process counts queued messages, partial reads and messages
//!   waiting for room; over it the oldest socket holding more than an even share is closed 1013.
//!   One client address may hold [`MAX_CONNECTIONS_PER_IP`] connections (`429` beyond).
//! - Threads: [`run_sharded`] runs one single-threaded runtime per listener (`SO_REUSEPORT`) and
//!   serves each plain-TCP socket on the shard its code maps to, so both sides of a pair share a
//!   thread; [`run`] serves everything on the caller's runtime.
//!
//! Scale-out: the relay keeps no state but the map of live codes, so a load balancer hashing on
//! `code` (nginx `hash $arg_code consistent;`) spreads pairs over processes (deploy/).

pub mod acme;
mod codec;
mod hub;
mod live;
pub mod metrics;
mod socket;

pub use self::live::{code_tag, LiveConfig, CALL_ID_PREFIX, DEFAULT_MAX_CALLS, DEFAULT_MAX_CALL_TIME};

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
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
/// Connections one client address (an IPv4 address, an IPv6 /64) may hold at once.
pub const MAX_CONNECTIONS_PER_IP: usize = 128;
/// Bytes of messages the whole process may hold in queues and partial reads; over it, the oldest
/// socket holding more than its share is closed 1013.
pub const MEMORY_BUDGET: usize = 256 << 20;
/// Time a client has to finish its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = http::HEAD_TIMEOUT;
/// Time connections get to close after shutdown is asked for, before `run` returns anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after an accept error such as running out of file descriptors.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Sockets waiting to be taken over by the shard that serves their code.
const HANDOFF_QUEUE: usize = 1024;
/// Pending connections a listener keeps before the kernel refuses more.
const LISTEN_BACKLOG: u32 = 1024;

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
    /// Connections one client address may hold (`429` beyond it); 0 for no limit, as behind a
    /// proxy where every connection comes from the proxy's address.
    pub max_connections_per_ip: usize,
    /// Bytes of messages held at once across all sockets (at least two largest messages).
    pub memory_budget: usize,
    /// Where the relay counts what it does; serve them with [`metrics::serve`].
    pub metrics: Arc<metrics::RelayMetrics>,
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
        RelayConfig {
            tls: None,
            token: None,
            limits: Limits::default(),
            max_connections: MAX_CONNECTIONS,
            max_connections_per_ip: MAX_CONNECTIONS_PER_IP,
            memory_budget: MEMORY_BUDGET,
            metrics: Arc::default(),
            live: None,
        }
    }
}

impl std::fmt::Debug for RelayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayConfig")
            .field("tls", &self.tls.is_some())
            .field("token", &self.token)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_ip", &self.max_connections_per_ip)
            .field("memory_budget", &self.memory_budget)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

/// A listening socket that other sockets may share (`SO_REUSEPORT`), for one shard.
pub fn bind_shared(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)?.into_std()
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

/// State shared by a relay's connection tasks, on every shard.
struct Shared {
    hub: Arc<hub::Hub>,
    token: Option<Secret>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    offer: web::Offer,
    hosting: Option<live::Hosting>,
    max_connections: usize,
    open_connections: Arc<AtomicUsize>,
    per_ip: Arc<PerIp>,
    next_conn: AtomicU64,
    /// Each shard's queue of sockets handed over to it; empty with a single shard.
    shards: Vec<mpsc::Sender<Handoff>>,
    /// Cancelled once the relay stops accepting: every socket closes.
    cancel: CancellationToken,
}

impl Shared {
    fn new(config: RelayConfig, shards: Vec<mpsc::Sender<Handoff>>) -> anyhow::Result<Arc<Shared>> {
        config.limits.validate()?;
        if config.memory_budget < config.limits.max_frame_len.saturating_mul(2) {
            bail!("relay limits: the memory budget must hold at least two of the largest messages");
        }
        let metrics = config.metrics;
        metrics.set_limit("max_connections", config.max_connections);
        metrics.set_limit("max_connections_per_ip", config.max_connections_per_ip);
        metrics.set_limit("memory_budget_bytes", config.memory_budget);
        metrics.set_limit("max_message_bytes", config.limits.max_frame_len);
        metrics.set_limit("send_queue_frames", config.limits.send_queue_frames);
        metrics.set_limit("send_queue_bytes", config.limits.send_queue_bytes);
        let ledger = Arc::new(hub::Ledger { budget: config.memory_budget, metrics: Arc::clone(&metrics) });
        Ok(Arc::new(Shared {
            hub: Arc::new(hub::Hub::new(ledger)),
            token: config.token,
            limits: config.limits,
            tls: config.tls.map(tokio_rustls::TlsAcceptor::from),
            offer: web::Offer { live: config.live.is_some() },
            hosting: config.live.map(|live| live::Hosting::new(live, Arc::clone(&metrics))),
            max_connections: config.max_connections,
            open_connections: Arc::new(AtomicUsize::new(0)),
            per_ip: Arc::new(PerIp { max: config.max_connections_per_ip, held: Mutex::default() }),
            next_conn: AtomicU64::new(1),
            shards,
            cancel: CancellationToken::new(),
        }))
    }

    /// The shard that serves a relay code, when there are several.
    fn shard_of(&self, code: u128) -> Option<usize> {
        (self.shards.len() > 1).then(|| (code % self.shards.len() as u128) as usize)
    }
}

/// A socket request the relay accepted: what it needs to complete the upgrade and join the pair.
struct Upgrade {
    head: RequestHead,
    /// Bytes read past the request head: the client's first frames.
    leftover: Vec<u8>,
    role: PeerRole,
    code: u128,
    /// A `/live` socket, whose voice calls the relay hosts.
    live: bool,
    conn: u64,
}

/// An upgraded plain-TCP socket on its way to the shard that serves its code, so both sides of a
/// pair run on one thread and hand frames to each other without waking another core.
struct Handoff {
    tcp: std::net::TcpStream,
    upgrade: Upgrade,
    guard: ConnectionGuard,
    span: tracing::Span,
}

/// Serves the relay on an already-bound listener until `shutdown` resolves, then closes every
/// socket (close 1001) and returns once they are gone or after a few seconds' grace. Everything
/// runs on the caller's runtime.
pub async fn run(
    listener: TcpListener,
    config: RelayConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let shared = Shared::new(config, Vec::new())?;
    serve_shard(&shared, listener, None, 0, shutdown).await
}

/// Serves the relay on several listeners bound to one address (`SO_REUSEPORT`), each on its own
/// thread with a single-threaded runtime (the last on the calling thread), until `shutdown` is
/// cancelled. A socket is served by the shard its relay code maps to, so the two sides of a pair
/// share a thread (plain TCP; a TLS socket stays on the shard that accepted it). Blocks until
/// every shard has stopped.
pub fn run_sharded(
    listeners: Vec<std::net::TcpListener>,
    config: RelayConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (senders, receivers): (Vec<_>, Vec<_>) = listeners.iter().map(|_| mpsc::channel(HANDOFF_QUEUE)).unzip();
    let shared = Shared::new(config, if listeners.len() > 1 { senders } else { Vec::new() })?;
    let mut shards: Vec<_> = listeners.into_iter().zip(receivers).enumerate().collect();
    let Some((last, (listener, handoffs))) = shards.pop() else { return Ok(()) };
    let threads = shards
        .into_iter()
        .map(|(index, (listener, handoffs))| {
            let (shared, shutdown) = (Arc::clone(&shared), shutdown.clone());
            std::thread::Builder::new().name(format!("relay-{index}")).spawn(move || {
                let ended = run_shard(&shared, listener, handoffs, index, &shutdown);
                if let Err(err) = &ended {
                    // Its codes would find no shard: stop the relay rather than serve part of it.
                    tracing::error!("relay shard {index} stopped: {err:#}");
                    shutdown.cancel();
                }
                ended
            })
        })
        .collect::<std::io::Result<Vec<_>>>()
        .context("could not start the relay threads")?;
    // The calling thread serves a shard too rather than only waiting: one thread fewer.
    let mut result = run_shard(&shared, listener, handoffs, last, &shutdown);
    if result.is_err() {
        shutdown.cancel();
    }
    for thread in threads {
        let ended = thread.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a relay thread panicked")));
        if ended.is_err() {
            // One shard failing stops them all.
            shutdown.cancel();
            result = result.and(ended);
        }
    }
    result
}

/// Runs one shard on the calling thread, on a single-threaded runtime of its own.
fn run_shard(
    shared: &Arc<Shared>,
    listener: std::net::TcpListener,
    handoffs: mpsc::Receiver<Handoff>,
    index: usize,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("could not start a relay thread's runtime")?;
    runtime.block_on(async {
        listener.set_nonblocking(true).context("could not make the listener non-blocking")?;
        let listener = TcpListener::from_std(listener).context("could not register the listener")?;
        serve_shard(shared, listener, Some(handoffs), index, shutdown.clone().cancelled_owned()).await
    })
}

/// One shard: accepts on its listener and serves what it accepted or was handed, until shutdown.
async fn serve_shard(
    shared: &Arc<Shared>,
    listener: TcpListener,
    mut handoffs: Option<mpsc::Receiver<Handoff>>,
    shard: usize,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let tracker = TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            Some(handoff) = async { handoffs.as_mut()?.recv().await } => {
                let span = handoff.span.clone();
                tracker.spawn(serve_handoff(Arc::clone(shared), handoff).instrument(span));
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
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
        admit(shared, &tracker, tcp, peer.ip(), shard);
    }
    drop(listener);
    drop(handoffs);
    shared.cancel.cancel();
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait()).await.is_err() {
        warn!(connections = tracker.len(), "connections still closing after the shutdown grace; leaving them");
    }
    Ok(())
}

/// Serves an accepted connection on its own task, or refuses it when a connection limit is
/// reached.
fn admit(shared: &Arc<Shared>, tracker: &TaskTracker, tcp: TcpStream, ip: IpAddr, shard: usize) {
    let guard = match ConnectionGuard::admit(shared, ip) {
        Ok(guard) => guard,
        Err(refusal) => {
            debug!(status = refusal.status, "connection refused: {}", refusal.body);
            shared.hub.metrics().refused(refusal.status);
            if shared.tls.is_none() {
                let _ = tcp.try_write(refusal.response.as_bytes());
            }
            return;
        }
    };
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let span = tracing::debug_span!("relay", conn, role = tracing::field::Empty);
    let shared = Arc::clone(shared);
    tracker.spawn(
        async move {
            if let Err(err) = serve_connection(&shared, tcp, conn, guard, shard).await {
                debug!(err = %format_args!("{err:#}"), "connection ended with an error");
            }
        }
        .instrument(span),
    );
}

/// Serves a socket another shard accepted and routed here.
async fn serve_handoff(shared: Arc<Shared>, handoff: Handoff) {
    let Handoff { tcp, upgrade, guard, .. } = handoff;
    let _guard = guard;
    let stream = match TcpStream::from_std(tcp) {
        Ok(stream) => stream,
        Err(err) => return debug!(%err, "could not take over a socket"),
    };
    if let Err(err) = join(&shared, stream, upgrade).await {
        debug!(err = %format_args!("{err:#}"), "connection ended with an error");
    }
}

/// Accept errors that concern one connection only, not the listener.
fn is_per_connection(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(err.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock)
}

/// A connection refused at accept, before any byte is read.
struct AcceptRefusal {
    status: u16,
    body: &'static str,
    response: &'static str,
}

const RELAY_FULL: AcceptRefusal = AcceptRefusal {
    status: 503,
    body: "relay full",
    response: "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: 5\r\nconnection: close\r\n\r\n",
};
const TOO_MANY_FROM_IP: AcceptRefusal = AcceptRefusal {
    status: 429,
    body: "too many connections from one address",
    response: "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 0\r\nretry-after: 5\r\nconnection: close\r\n\r\n",
};

/// A client address as the per-address limit sees it: IPv4 whole, IPv6 by its /64 (what one
/// subscriber is usually given).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ClientKey {
    V4(u32),
    V6(u64),
}

impl From<IpAddr> for ClientKey {
    fn from(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => ClientKey::V4(v4.into()),
            IpAddr::V6(v6) => ClientKey::V6((u128::from(v6) >> 64) as u64),
        }
    }
}

/// Connections held per client address.
struct PerIp {
    max: usize,
    held: Mutex<HashMap<ClientKey, usize>>,
}

impl PerIp {
    fn admit(&self, key: ClientKey) -> bool {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(key).or_default();
        if *count >= self.max {
            return false;
        }
        *count += 1;
        true
    }

    fn release(&self, key: ClientKey) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&key);
            }
        }
    }
}

/// Counts a connection against the limits (and in the metrics) for as long as it lives.
struct ConnectionGuard {
    open: Arc<AtomicUsize>,
    client: Option<(Arc<PerIp>, ClientKey)>,
    metrics: Arc<metrics::RelayMetrics>,
}

impl ConnectionGuard {
    fn admit(shared: &Shared, ip: IpAddr) -> Result<Self, AcceptRefusal> {
        let per_ip = &shared.per_ip;
        let client = if per_ip.max == 0 {
            None
        } else {
            let key = ClientKey::from(ip);
            if !per_ip.admit(key) {
                return Err(TOO_MANY_FROM_IP);
            }
            Some((Arc::clone(per_ip), key))
        };
        // From here on, dropping the guard gives back what was taken.
        let metrics = Arc::clone(&shared.hub.ledger.metrics);
        metrics.connection_opened();
        let guard = ConnectionGuard { open: Arc::clone(&shared.open_connections), client, metrics };
        if shared.open_connections.fetch_add(1, Ordering::AcqRel) >= shared.max_connections {
            return Err(RELAY_FULL);
        }
        Ok(guard)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.metrics.connection_closed();
        if let Some((per_ip, key)) = &self.client {
            per_ip.release(*key);
        }
    }
}

async fn serve_connection(
    shared: &Shared,
    tcp: TcpStream,
    conn: u64,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    // Frames are written whole and should leave at once; Nagle would hold back small ones.
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = &shared.tls else {
        return serve_stream(shared, tcp, conn, guard, shard).await;
    };
    let handshake = Box::pin(tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)));
    let stream = tokio::select! {
        result = handshake => result.context("TLS handshake timed out")?.context("TLS handshake failed")?,
        () = shared.cancel.cancelled() => return Ok(()),
    };
    if acme::is_validation(stream.get_ref().1.alpn_protocol()) {
        return Ok(());
    }
    // Boxed: TLS state is large, and plain connections should not carry room for it.
    Box::pin(serve_stream(shared, stream, conn, guard, shard)).await
}

async fn serve_stream<S: socket::RelayStream>(
    shared: &Shared,
    mut stream: S,
    conn: u64,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    let Some((head, leftover)) = read_request(shared, &mut stream).await? else { return Ok(()) };
    let route = live::route(&head, shared.hosting.as_ref(), shared.token.as_ref())
        .unwrap_or_else(|| route(&head, shared.token.as_ref()));
    match route {
        Route::Health => http::respond(&mut stream, 200, "OK", "ok").await.context("answering /healthz"),
        Route::Web => match web::answer(&head, shared.offer) {
            Some(response) => response.write(&mut stream).await.context("serving the web client"),
            None => http::respond(&mut stream, 404, "Not Found", "not found").await.context("answering a request"),
        },
        Route::Refuse(refusal) => {
            debug!(status = refusal.status, path = %printable_path(&head), "request refused");
            shared.hub.metrics().refused(refusal.status);
            http::respond_with(&mut stream, refusal.status, refusal.reason, refusal.headers, refusal.body)
                .await
                .context("answering a refused request")
        }
        Route::Join { role, code } => {
            let upgrade = Upgrade { head, leftover, role, code, live: false, conn };
            join_on_shard(shared, stream, upgrade, guard, shard).await
        }
        // A `/live` socket holds the phone's place and is routed as one, to the shard of its code.
        Route::Live { code } => {
            let upgrade = Upgrade { head, leftover, role: PeerRole::Phone, code, live: true, conn };
            join_on_shard(shared, stream, upgrade, guard, shard).await
        }
    }
}

/// Reads the request head; answers and gives `None` for one that is too large, malformed, or
/// not sent in time, or when the relay shuts down first.
async fn read_request<S: socket::RelayStream>(
    shared: &Shared,
    stream: &mut S,
) -> anyhow::Result<Option<(RequestHead, Vec<u8>)>> {
    let read = tokio::select! {
        read = http::read_head(stream, http::HEAD_TIMEOUT) => read,
        () = shared.cancel.cancelled() => return Ok(None),
    };
    match read {
        Ok(read) => Ok(Some(read)),
        Err(HeadError::Io(err)) => Err(err).context("reading the request"),
        Err(HeadError::TimedOut) => Ok(None),
        Err(err @ HeadError::TooLarge) => {
            shared.hub.metrics().refused(431);
            http::respond(stream, 431, "Request Header Fields Too Large", "request head too large").await?;
            bail!(err);
        }
        Err(err @ HeadError::Malformed) => {
            shared.hub.metrics().refused(400);
            http::respond(stream, 400, "Bad Request", "malformed request").await?;
            bail!(err);
        }
    }
}

/// Joins the socket here, or hands a plain-TCP socket to the shard that serves its code.
async fn join_on_shard<S: socket::RelayStream>(
    shared: &Shared,
    stream: S,
    upgrade: Upgrade,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    tracing::Span::current().record("role", if upgrade.live { "live" } else { upgrade.role.as_str() });
    let stream = match shared.shard_of(upgrade.code).filter(|&owner| owner != shard) {
        Some(owner) => match stream.detach() {
            Ok(tcp) => {
                let tcp = tcp.context("could not hand the socket over")?;
                let handoff = Handoff { tcp, upgrade, guard, span: tracing::Span::current() };
                // A full or closed queue (shutdown) drops the socket.
                return shared.shards[owner].try_send(handoff).map_err(|_| anyhow::anyhow!("shard busy"));
            }
            Err(stream) => stream,
        },
        None => stream,
    };
    let _guard = guard;
    join(shared, stream, upgrade).await
}

/// Completes the upgrade and relays the socket (`live`: hosts its voice calls too) until it ends.
async fn join<S: socket::RelayStream>(shared: &Shared, mut stream: S, upgrade: Upgrade) -> anyhow::Result<()> {
    let Upgrade { head, leftover, role, code, live, conn } = upgrade;
    http::write_upgrade(&mut stream, &head).await.context("answering the upgrade")?;
    // Nothing of the request outlives the upgrade: a socket keeps only what it needs.
    drop(head);
    let member = socket::Membership { hub: Arc::clone(&shared.hub), code, role, conn };
    match (&shared.hosting, live) {
        (Some(hosting), true) => live::serve(stream, leftover, member, &shared.limits, hosting, &shared.cancel).await,
        _ => socket::serve(stream, leftover, member, &shared.limits, &shared.cancel).await,
    }
    Ok(())
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

        std::fs::write(&key_path, certified.signing_key.serialize_pem()).unwrap();
        let config = load_tls(&cert_path, &key_path).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);

        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&key_path, other.signing_key.serialize_pem()).unwrap();
        let mismatch = format!("{:#}", load_tls(&cert_path, &key_path).unwrap_err());
        assert!(mismatch.contains("do not match"), "{mismatch}");
    }
}
