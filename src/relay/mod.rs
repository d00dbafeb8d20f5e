//! The relay (docs/PROTOCOL.md, "Relay"): pairs one agent (`/agent`) with up to
//! [`MAX_PHONES_PER_CODE`] phones (`/ws`) per relay code and carries their frames both ways. It
//! reads no session frame at all: it tells each side who comes and goes in frames of its own
//! (`net::relay_framing`), tags each phone's frames with the phone's peer id on the agent's
//! socket, and bounds everything a client can make it hold.
//!
//! The relay is a leaf: it imports `net` and `protocol` (and `secret` for the relay token, `text`
//! to cut a close reason) and nothing that knows what a session means. Hosted voice plugs in
//! beside it through [`PhoneService`].
//!
//! Decisions the protocol leaves to the relay:
//! - A replaced agent is closed 4001 `replaced`; the phones hear `left` and then `joined`, so
//!   they start their sessions (hello) again. A phone past [`MAX_PHONES_PER_CODE`] is closed 4003
//!   `too-many-phones` right after the upgrade.
//! - Cut-through: a message goes on in parts as its bytes arrive (at most 16 KiB each), never
//!   held whole; toward an agent each part is a `PART` message, toward a phone a WebSocket
//!   fragment. A sender that fails in the middle of a message ends it for its receiver: the agent
//!   hears `LEFT` for that phone, a phone is closed 4004. Messages over 16 MiB close the socket
//!   with 1009, bad framing with 1002, text that is not UTF-8 with 1007; shutdown and idle
//!   sockets get 1001.
//! - Slow readers: while a receiver's queue is full, the sender's socket is not read (so TCP slows
//!   the sender down); a receiver that writes nothing at all for [`STALL_TIMEOUT`] is closed 1013
//!   and its queue freed at once. One agent socket carries every phone of its code, so a phone
//!   that stops reading holds the agent's messages back until it is closed.
//! - A socket silent for the ping interval is pinged and one silent for the idle timeout is
//!   dropped, so a vanished peer is gone within 45 s and the others hear of it. Every ping is
//!   answered (a bounded number of pongs wait).
//! - Memory: one budget for the process counts queued parts, parts being read and parts waiting
//!   for room; over it the oldest socket holding more than an even share is closed 1013. One
//!   client address may hold [`MAX_CONNECTIONS_PER_IP`] connections (`429` beyond).
//! - Threads: [`run_sharded`] runs one single-threaded runtime per listener (`SO_REUSEPORT`) and
//!   serves each plain-TCP socket on the shard its code maps to, so the sockets of a code share a
//!   thread; [`run`] serves everything on the caller's runtime.
//!
//! Scale-out: the relay keeps no state but the map of live codes, so a load balancer hashing on
//! `code` (nginx `hash $arg_code consistent;`) spreads pairs over processes (deploy/).

pub mod acme;
mod admission;
mod codec;
mod config;
mod hub;
pub mod metrics;
mod queue;
mod reader;
#[doc(hidden)]
pub mod reader_check;
mod route;
mod shard;
mod socket;

pub use self::config::*;
pub use self::shard::{bind_shared, run, run_sharded};
pub use self::socket::Membership;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context as _};
use futures_util::future::BoxFuture;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use self::admission::{ConnectionGuard, PerIp};
use self::route::{printable_path, route, Route};
use self::shard::Handoff;
use crate::net::http::{self, HeadError, RequestHead};
use crate::net::relay_framing::SUBPROTOCOL;
use crate::net::web;
use crate::protocol::PeerRole;
use crate::secret::Secret;

pub(crate) use self::shard::ACCEPT_BACKOFF;

/// What a [`PhoneService`] builds its socket from: the relay's reader, writer and send queues.
pub(crate) mod service {
    pub(crate) use super::admission::ClientKey;
    pub(crate) use super::codec::close::GOING_AWAY;
    pub(crate) use super::codec::{OutFrame, OP_BINARY, OP_CONTINUATION, OP_TEXT};
    pub(crate) use super::queue::{Action, End, Push, SendQueue};
    pub(crate) use super::reader::{FrameReader, Part};
    pub(crate) use super::socket::{read_side, wind_down, write_side, Deliver, Seated, CLOSE_GRACE};
}

/// A kind of phone socket served beside `/agent` and `/ws` by code outside the relay (hosted
/// voice at `/live`). The relay routes and admits its requests like `/ws` (with the service's
/// own token when it has one), completes the upgrade on the shard of the code, and hands the
/// socket over with its place as a phone of that code.
pub trait PhoneService: Send + Sync + 'static {
    /// The path it serves, such as `/live`.
    fn path(&self) -> &'static str;
    /// The token its sockets present instead of the relay token, if it has one.
    fn token(&self) -> Option<&Secret>;
    /// Serves one upgraded socket until it ends.
    fn serve(&self, socket: ServiceSocket) -> BoxFuture<'_, ()>;
    /// The request header a trusted proxy in front of the relay sets to the client's address
    /// (its last comma-separated entry is taken); `None` takes the TCP peer's address.
    fn client_header(&self) -> Option<&str> {
        None
    }
    /// Records the service's limits and state in the relay's metrics, once at start.
    fn report(&self, _metrics: &metrics::RelayMetrics) {}
}

/// Any byte stream a service's socket runs over: plain TCP or TLS.
pub trait ServiceStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> ServiceStream for T {}

/// An upgraded socket handed to a [`PhoneService`].
pub struct ServiceSocket {
    pub stream: Box<dyn ServiceStream>,
    /// Bytes read past the request head: the client's first frames.
    pub leftover: Vec<u8>,
    /// Its place as a phone of its code, not taken yet.
    pub member: Membership,
    /// The client's address: the TCP peer's, or the one the service's trusted header names.
    pub client: IpAddr,
    pub limits: Limits,
    pub metrics: Arc<metrics::RelayMetrics>,
    /// Cancelled when the relay shuts down.
    pub cancel: CancellationToken,
}

/// State shared by a relay's connection tasks, on every shard.
struct Shared {
    hub: Arc<hub::Hub>,
    token: Option<Secret>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    offer: web::Offer,
    service: Option<Arc<dyn PhoneService>>,
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
        if let Some(service) = &config.service {
            service.report(&metrics);
        }
        let offer = web::Offer {
            live: config.service.is_some(),
            relay_token: config.token.is_some(),
            certificate_sha256: config.certificate_sha256,
        };
        let ledger = Arc::new(queue::Ledger { budget: config.memory_budget, metrics: Arc::clone(&metrics) });
        Ok(Arc::new(Shared {
            hub: Arc::new(hub::Hub::new(ledger)),
            token: config.token,
            limits: config.limits,
            tls: config.tls.map(tokio_rustls::TlsAcceptor::from),
            offer,
            service: config.service,
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
    /// A socket of the [`PhoneService`], which serves it.
    service: bool,
    conn: u64,
    /// The client's address (see [`ServiceSocket::client`]).
    client: IpAddr,
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

async fn serve_stream<S: socket::RelayStream + 'static>(
    shared: &Shared,
    mut stream: S,
    conn: u64,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    // Web answers keep the connection for the page's next request, a bounded number of times;
    // anything else (an upgrade, a refusal) is the connection's last request.
    let (mut carried, mut served) = (Vec::new(), 0);
    let (head, leftover, route) = loop {
        let wait = if served == 0 { http::HEAD_TIMEOUT } else { web::KEEP_ALIVE_IDLE };
        let Some((head, leftover)) = read_request(shared, &mut stream, wait, carried, served > 0).await? else {
            return Ok(());
        };
        let route = route(&head, shared.token.as_ref(), shared.service.as_deref());
        if !matches!(route, Route::Web) {
            break (head, leftover, route);
        }
        served += 1;
        let keep_alive = web::keep_alive(served, &head);
        match web::answer(&head, shared.offer) {
            Some(response) => response.write(&mut stream, keep_alive).await.context("serving the web client")?,
            None => {
                return http::respond(&mut stream, 404, "Not Found", "not found").await.context("answering a request")
            }
        }
        if !keep_alive {
            return Ok(());
        }
        carried = leftover;
    };
    match route {
        Route::Health => http::respond(&mut stream, 200, "OK", "ok").await.context("answering /healthz"),
        Route::Web => Ok(()),
        Route::Refuse(refusal) => {
            let path = printable_path(&head, shared.service.as_deref());
            debug!(status = refusal.status, path, "request refused");
            shared.hub.metrics().refused(refusal.status);
            http::respond_with(&mut stream, refusal.status, refusal.reason, refusal.headers, refusal.body)
                .await
                .context("answering a refused request")
        }
        Route::Join { role, code } => {
            let upgrade = Upgrade { head, leftover, role, code, service: false, conn, client: guard.peer };
            join_on_shard(shared, stream, upgrade, guard, shard).await
        }
        // A service's socket holds a phone's place and is routed as one, to the shard of its code.
        Route::Service { code } => {
            let header = shared.service.as_deref().and_then(PhoneService::client_header);
            let client = header.and_then(|name| forwarded_client(&head, name)).unwrap_or(guard.peer);
            let upgrade = Upgrade { head, leftover, role: PeerRole::Phone, code, service: true, conn, client };
            join_on_shard(shared, stream, upgrade, guard, shard).await
        }
    }
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
async fn read_request<S: socket::RelayStream + 'static>(
    shared: &Shared,
    stream: &mut S,
    wait: std::time::Duration,
    carried: Vec<u8>,
    kept: bool,
) -> anyhow::Result<Option<(RequestHead, Vec<u8>)>> {
    let read = tokio::select! {
        read = http::read_next_head(stream, wait, carried) => read,
        () = shared.cancel.cancelled() => return Ok(None),
    };
    match read {
        Ok(read) => Ok(Some(read)),
        Err(HeadError::Io(err)) if kept && err.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
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
async fn join_on_shard<S: socket::RelayStream + 'static>(
    shared: &Shared,
    stream: S,
    upgrade: Upgrade,
    guard: ConnectionGuard,
    shard: usize,
) -> anyhow::Result<()> {
    tracing::Span::current().record("role", if upgrade.service { "service" } else { upgrade.role.as_str() });
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

/// Completes the upgrade and relays the socket (or hands it to the service) until it ends.
async fn join<S: socket::RelayStream + 'static>(
    shared: &Shared,
    mut stream: S,
    upgrade: Upgrade,
) -> anyhow::Result<()> {
    let Upgrade { head, leftover, role, code, service, conn, client } = upgrade;
    // An agent gets the relay framing it offered (the route checked that it did); a phone the
    // subprotocol it offered beside its relay token, never the token.
    let protocol = match role {
        PeerRole::Agent => Some(SUBPROTOCOL),
        _ => route::offers(&head, route::PHONE_SUBPROTOCOL).then_some(route::PHONE_SUBPROTOCOL),
    };
    http::write_upgrade_with(&mut stream, &head, protocol).await.context("answering the upgrade")?;
    let notices = head.query_param("presence") != Some("none");
    // Nothing of the request outlives the upgrade: a socket keeps only what it needs.
    drop(head);
    let member = socket::Membership { hub: Arc::clone(&shared.hub), code, role, conn, notices };
    match shared.service.as_ref().filter(|_| service) {
        Some(service) => {
            let socket = ServiceSocket {
                stream: Box::new(stream),
                leftover,
                member,
                client,
                limits: shared.limits,
                metrics: Arc::clone(&shared.hub.ledger.metrics),
                cancel: shared.cancel.clone(),
            };
            service.serve(socket).await;
        }
        None => socket::serve(stream, leftover, member, &shared.limits, &shared.cancel).await,
    }
    Ok(())
}
