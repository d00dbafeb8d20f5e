//! The relay's edge: it accepts connections, admits them (`admission`: the connection limits),
//! finishes TLS (HTTP/2 for what needs no upgrade: `http2`), reads each request head, routes it
//! (`route`: `/agent`, `/ws`, the service's path, `/healthz`, `/ack`'s push receipts (`receipt`),
//! the web app's pages), checks the relay token and upgrades, then hands the stream to the core:
//! [`Core::accept`], or for the registered [`PhoneService`] [`Core::accept_line`], which runs the
//! socket and hands the service its line. `shard` runs the listeners and per-core runtimes and
//! moves a socket to the shard of its code before its upgrade; `prometheus` serves the relay's
//! metrics on a listener of its own.

mod admission;
mod http2;
mod prometheus;
mod receipt;
mod route;
mod shard;

pub use self::prometheus::serve_metrics;
pub use self::shard::{bind_shared, run, run_sharded};

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::{debug, Instrument as _};

use self::admission::{Admission, ConnectionGuard};
use self::route::{printable_path, route, Route};
use super::config::{RelayConfig, TLS_HANDSHAKE_TIMEOUT};
use super::core::stream::DirectSink;
use super::core::{Claim, Core, RelayStream};
use super::service::PhoneService;
use super::web::{WebApp, KEEP_ALIVE_IDLE};
use crate::net::http::{self, HeadError, RequestHead};
use crate::protocol::relay::{Framing, PHONE_SUBPROTOCOL};
use crate::protocol::PeerRole;
use crate::secret::Secret;

/// The ALPN protocols of the connections the relay serves: HTTP/1.1 for everything, HTTP/2 for
/// what needs no upgrade (`http2`). A TLS handshake that agreed on another one (an ACME
/// validation's `acme-tls/1`) ends once it is done.
const HTTP_ALPN: &[u8] = b"http/1.1";
const H2_ALPN: &[u8] = b"h2";

/// State shared by a relay's connection tasks, on every shard.
struct Edge {
    core: Core,
    token: Option<Secret>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    web: WebApp,
    service: Option<Arc<dyn PhoneService>>,
    admission: Admission,
    /// The limits of `POST /ack`.
    receipts: receipt::ReceiptLimits,
    next_conn: AtomicU64,
    /// Each shard's queue of sockets handed over to it; empty with a single shard.
    shards: Vec<mpsc::Sender<Handoff>>,
}

impl Edge {
    fn new(config: RelayConfig, shards: Vec<mpsc::Sender<Handoff>>) -> anyhow::Result<Arc<Edge>> {
        let metrics = config.metrics;
        let core = Core::new(config.limits, config.memory_budget, Arc::clone(&metrics))?;
        metrics.set_limit("max_connections", config.max_connections);
        metrics.set_limit("max_connections_per_ip", config.max_connections_per_ip);
        if let Some(service) = &config.service {
            // Registered before its limits are set: a scrape that shows them shows its metrics.
            metrics.register(|registry| service.register(registry));
            for (name, value) in service.limits() {
                metrics.set_limit(name, value);
            }
        }
        Ok(Arc::new(Edge {
            core,
            web: WebApp::new(config.service.is_some(), config.token.is_some(), config.certificate_sha256),
            token: config.token,
            tls: config.tls.map(tokio_rustls::TlsAcceptor::from),
            service: config.service,
            admission: Admission::new(config.max_connections, config.max_connections_per_ip, Arc::clone(&metrics)),
            receipts: receipt::ReceiptLimits::default(),
            next_conn: AtomicU64::new(1),
            shards,
        }))
    }

    /// The shard that serves a relay code, when there are several.
    fn shard_of(&self, code: u128) -> Option<usize> {
        (self.shards.len() > 1).then(|| (code % self.shards.len() as u128) as usize)
    }
}

/// A stream the edge serves: plain TCP, which may move to another shard, or TLS, which may not.
trait EdgeStream: RelayStream + AsyncRead + AsyncWrite + Unpin + 'static {
    /// The plain socket, for another thread to serve; a TLS stream cannot move (`Err(self)`).
    fn detach(self) -> Result<std::io::Result<std::net::TcpStream>, Self>;
}

impl EdgeStream for TcpStream {
    fn detach(self) -> Result<std::io::Result<std::net::TcpStream>, Self> {
        Ok(self.into_std())
    }
}

type TlsStream = tokio_rustls::server::TlsStream<TcpStream>;

impl RelayStream for TlsStream {
    type Read = tokio::io::ReadHalf<TlsStream>;
    type Write = tokio::io::WriteHalf<TlsStream>;

    /// Split behind a lock, and written by its own task only.
    fn into_halves(self) -> (Self::Read, Self::Write, Option<DirectSink>) {
        let (read, write) = tokio::io::split(self);
        (read, write, None)
    }
}

impl EdgeStream for TlsStream {
    fn detach(self) -> Result<std::io::Result<std::net::TcpStream>, Self> {
        Err(self)
    }
}

/// A socket request the edge accepted: what it needs to complete the upgrade and hand it on.
struct Upgrade {
    head: RequestHead,
    /// Bytes read past the request head: the client's first frames.
    leftover: Vec<u8>,
    claim: Claim,
    /// A socket of the [`PhoneService`], which serves it.
    service: bool,
    /// The client's address (see [`ServiceLine::client`](super::service::ServiceLine::client)).
    client: IpAddr,
}

/// An upgraded plain-TCP socket on its way to the shard that serves its code, so both sides of a
/// pair run on one thread and hand frames to each other without waking another core.
struct Handoff {
    tcp: std::net::TcpStream,
    upgrade: Upgrade,
    guard: ConnectionGuard,
    span: tracing::Span,
}

/// Serves a connection `shard` accepted on a task of `tracker`, or refuses it when a connection
/// limit is reached.
fn accept_connection(edge: &Arc<Edge>, tracker: &TaskTracker, tcp: TcpStream, ip: IpAddr, shard: usize) {
    let guard = match edge.admission.admit(ip) {
        Ok(guard) => guard,
        Err(refusal) => {
            if edge.tls.is_none() {
                let _ = tcp.try_write(refusal.response.as_bytes());
            }
            return;
        }
    };
    let conn = edge.next_conn.fetch_add(1, Ordering::Relaxed);
    let span = tracing::debug_span!("relay", conn, role = tracing::field::Empty);
    let edge = Arc::clone(edge);
    tracker.spawn(
        async move {
            if let Err(err) = serve_connection(&edge, tcp, conn, guard, shard).await {
                debug!(err = %format_args!("{err:#}"), "connection ended with an error");
            }
        }
        .instrument(span),
    );
}

async fn serve_connection(
    edge: &Edge,
    tcp: TcpStream,
    conn: u64,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    // Frames are written whole and should leave at once; Nagle would hold back small ones.
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = &edge.tls else {
        return serve_stream(edge, tcp, conn, guard, shard).await;
    };
    let handshake = Box::pin(tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)));
    let stream = tokio::select! {
        result = handshake => result.context("TLS handshake timed out")?.context("TLS handshake failed")?,
        () = edge.core.cancel().cancelled() => return Ok(()),
    };
    match stream.get_ref().1.alpn_protocol() {
        Some(H2_ALPN) => return Box::pin(http2::serve(edge, stream, guard.peer)).await,
        Some(alpn) if alpn != HTTP_ALPN => return Ok(()),
        _ => {}
    }
    // Boxed: TLS state is large, and plain connections should not carry room for it.
    Box::pin(serve_stream(edge, stream, conn, guard, shard)).await
}

async fn serve_stream<S: EdgeStream>(
    edge: &Edge,
    mut stream: S,
    conn: u64,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    // Web answers keep the connection for the page's next request, a bounded number of times;
    // anything else (an upgrade, a refusal) is the connection's last request.
    let (mut carried, mut served) = (Vec::new(), 0);
    let (head, leftover, route) = loop {
        let wait = if served == 0 { http::HEAD_TIMEOUT } else { KEEP_ALIVE_IDLE };
        let Some((head, leftover)) = read_request(edge, &mut stream, wait, carried, served > 0).await? else {
            return Ok(());
        };
        let route = route(&head, edge.token.as_ref(), edge.service.as_deref());
        if !matches!(route, Route::Web) {
            break (head, leftover, route);
        }
        served += 1;
        if !edge.web.answer(&head, &mut stream, served).await? {
            return Ok(());
        }
        carried = leftover;
    };
    let notices = head.query_param("presence") != Some("none");
    let claim = |code, role, framing| Claim { code, role, conn, notices, framing };
    let upgrade = match route {
        Route::Health => return http::respond(&mut stream, 200, "OK", "ok").await.context("answering /healthz"),
        Route::Web => return Ok(()),
        Route::Receipt { code } => {
            return receipt::answer(&edge.core, &edge.receipts, &mut stream, &head, leftover, code, guard.peer)
                .await
                .context("answering /ack")
        }
        Route::Refuse(refusal) => {
            let path = printable_path(&head, edge.service.as_deref());
            debug!(status = refusal.status, path, "request refused");
            edge.core.metrics().refused(refusal.status);
            return http::respond_with(&mut stream, refusal.status, refusal.reason, refusal.headers, refusal.body)
                .await
                .context("answering a refused request");
        }
        Route::Agent { code, framing } => {
            let claim = claim(code, PeerRole::Agent, framing);
            Upgrade { head, leftover, claim, service: false, client: guard.peer }
        }
        Route::Phone { code } => {
            let claim = claim(code, PeerRole::Phone, Framing::V2);
            Upgrade { head, leftover, claim, service: false, client: guard.peer }
        }
        // A service's socket holds a phone's place and is routed as one, to the shard of its code.
        Route::Service { code } => {
            let header = edge.service.as_deref().and_then(PhoneService::client_header);
            let client = header.and_then(|name| forwarded_client(&head, name)).unwrap_or(guard.peer);
            let claim = claim(code, PeerRole::Phone, Framing::V2);
            Upgrade { head, leftover, claim, service: true, client }
        }
    };
    join_on_shard(edge, stream, upgrade, guard, shard).await
}

/// The client's address as a trusted proxy names it in `header`: its last comma-separated entry
/// (the one the nearest proxy added), an IP address with or without a port; `None` when the
/// header is missing, repeated or names no address.
fn forwarded_client(head: &RequestHead, header: &str) -> Option<IpAddr> {
    let last = head.single_header(header)?.rsplit(',').next()?.trim();
    last.parse().ok().or_else(|| last.parse::<std::net::SocketAddr>().ok().map(|addr| addr.ip()))
}

/// Reads the request head; answers and gives `None` for one that is too large, malformed, or
/// not sent in time, or when the relay shuts down first.
/// `carried` holds the bytes read past the previous request of a kept-alive connection, whose
/// client may close it instead of sending another (`kept`).
async fn read_request<S: EdgeStream>(
    edge: &Edge,
    stream: &mut S,
    wait: std::time::Duration,
    carried: Vec<u8>,
    kept: bool,
) -> anyhow::Result<Option<(RequestHead, Vec<u8>)>> {
    let read = tokio::select! {
        read = http::read_next_head(stream, wait, carried) => read,
        () = edge.core.cancel().cancelled() => return Ok(None),
    };
    match read {
        Ok(read) => Ok(Some(read)),
        Err(HeadError::Io(err)) if kept && err.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(HeadError::Io(err)) => Err(err).context("reading the request"),
        Err(HeadError::TimedOut) => Ok(None),
        Err(err @ HeadError::TooLarge) => {
            edge.core.metrics().refused(431);
            http::respond(stream, 431, "Request Header Fields Too Large", "request head too large").await?;
            bail!(err);
        }
        Err(err @ HeadError::Malformed) => {
            edge.core.metrics().refused(400);
            http::respond(stream, 400, "Bad Request", "malformed request").await?;
            bail!(err);
        }
    }
}

/// Upgrades the socket here, or hands a plain-TCP socket to the shard that serves its code.
async fn join_on_shard<S: EdgeStream>(
    edge: &Edge,
    stream: S,
    upgrade: Upgrade,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    let role = if upgrade.service { "service" } else { upgrade.claim.role.as_str() };
    tracing::Span::current().record("role", role);
    let stream = match edge.shard_of(upgrade.claim.code).filter(|&owner| owner != shard) {
        Some(owner) => match stream.detach() {
            Ok(tcp) => {
                let tcp = tcp.context("could not hand the socket over")?;
                let handoff = Handoff { tcp, upgrade, guard, span: tracing::Span::current() };
                // A full or closed queue (shutdown) drops the socket.
                return edge.shards[owner].try_send(handoff).map_err(|_| anyhow::anyhow!("shard busy"));
            }
            Err(stream) => stream,
        },
        None => stream,
    };
    let _guard = guard;
    upgrade_and_hand_on(edge, stream, upgrade).await
}

/// Completes the upgrade and hands the socket to the core (as the service's line, for its
/// socket) until it ends.
async fn upgrade_and_hand_on<S: EdgeStream>(edge: &Edge, mut stream: S, upgrade: Upgrade) -> anyhow::Result<()> {
    let Upgrade { head, leftover, claim, service, client } = upgrade;
    // An agent gets the relay framing picked from its offer; a phone the subprotocol it offered
    // beside its relay token, never the token.
    let protocol = match claim.role {
        PeerRole::Agent => Some(claim.framing.subprotocol()),
        PeerRole::Phone => route::offers(&head, PHONE_SUBPROTOCOL).then_some(PHONE_SUBPROTOCOL),
    };
    http::write_upgrade_with(&mut stream, &head, protocol).await.context("answering the upgrade")?;
    // Nothing of the request outlives the upgrade: a socket keeps only what it needs.
    drop(head);
    match edge.service.as_ref().filter(|_| service) {
        Some(service) => edge.core.accept_line(stream, leftover, claim, client, |line| service.serve(line)).await,
        None => edge.core.accept(stream, leftover, claim).await,
    }
    Ok(())
}
