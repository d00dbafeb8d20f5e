//! The loopback socket: `ws://127.0.0.1:<port>` for local clients, scripts, CI and editors, with
//! the session start of docs/PROTOCOL.md. Any local user can reach it, so everything before a good hello is bounded: a short
//! time for the request head, [`MAX_PREAUTH_LEN`](protocol::MAX_PREAUTH_LEN) bytes before the
//! hello, [`MAX_UNAUTHENTICATED`] connections waiting for one (a new one closes the oldest), and
//! a connection count that leaves descriptors for the agent's own work.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span, Instrument};

use super::context::AgentContext;
use super::gate::Gate;
use super::outbox::Outbox;
use super::session::Session;
use super::start::{Admitted, Carrier, Next, Refusal, SessionStart};
use crate::net::liveness::{cancelled, close_message, sleep_until, Heartbeat, Liveness, Pulse};
use crate::net::{http, web};
use crate::protocol::{self, AgentMessage, ErrorCode, Frame};
use crate::seal;

/// Time a local client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections that have not completed the hello, at most; a new one closes the oldest.
pub const MAX_UNAUTHENTICATED: usize = 64;
/// Descriptors left for PTYs, files and relay connections when sizing the connection limit.
pub const FD_RESERVE: u64 = 256;
/// Fewest loopback connections allowed, whatever the descriptor limit.
const MIN_CONNECTIONS: usize = 16;

/// A local connection: TCP with the pre-hello byte budget.
type LocalSocket = WebSocketStream<PreAuthLimit<TcpStream>>;

/// Serves local clients on an already-bound loopback listener until `shutdown`.
pub async fn run(
    listener: TcpListener,
    ctx: Arc<AgentContext>,
    gate: Arc<dyn Gate>,
    shutdown: CancellationToken,
) -> Result<()> {
    let tasks = TaskTracker::new();
    let waiting = Arc::new(Unauthenticated::default());
    let open = Arc::new(AtomicUsize::new(0));
    let max_open = connection_limit();
    let mut next_id: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    debug!(%err, "accept failed");
                    // Out of descriptors and similar: back off briefly instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        next_id += 1;
        if !peer.ip().is_loopback() {
            continue; // Bound to 127.0.0.1, so this cannot happen; refuse anyway.
        }
        // The newest connection may be the owner's: make room by closing the oldest stranger.
        let full = open.load(Ordering::Acquire) >= max_open;
        if full || waiting.len() >= MAX_UNAUTHENTICATED {
            let evicted = waiting.evict_oldest();
            if full && !evicted {
                debug!("too many local connections, all authenticated; refusing a new one");
                continue;
            }
        }
        let slot = OpenSlot::take(&open);
        let pending = waiting.enter(next_id);
        let (ctx, gate, shutdown) = (ctx.clone(), gate.clone(), shutdown.clone());
        tasks.spawn(
            async move {
                let _slot = slot;
                if let Err(err) = serve(stream, ctx, gate, pending, shutdown).await {
                    debug!("local connection ended: {err:#}");
                }
            }
            .instrument(info_span!("local", conn = next_id)),
        );
    }
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// Loopback connections allowed at once: the open-file limit less [`FD_RESERVE`].
fn connection_limit() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    usize::try_from(limit.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX).max(MIN_CONNECTIONS)
}

/// Counts one open connection while it lives.
struct OpenSlot(Arc<AtomicUsize>);

impl OpenSlot {
    fn take(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::AcqRel);
        OpenSlot(open.clone())
    }
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Connections still waiting for their hello, oldest first.
#[derive(Default)]
struct Unauthenticated {
    queue: Mutex<VecDeque<(u64, CancellationToken)>>,
}

impl Unauthenticated {
    fn len(&self) -> usize {
        self.queue.lock().map(|q| q.len()).unwrap_or(0)
    }

    /// Registers a connection; its token is cancelled if it is evicted.
    fn enter(self: &Arc<Self>, id: u64) -> WaitingPlace {
        let evicted = CancellationToken::new();
        if let Ok(mut queue) = self.queue.lock() {
            queue.push_back((id, evicted.clone()));
        }
        WaitingPlace { waiting: self.clone(), id, evicted }
    }

    /// Closes the oldest waiting connection; false when none waits.
    fn evict_oldest(&self) -> bool {
        let oldest = self.queue.lock().ok().and_then(|mut q| q.pop_front());
        match oldest {
            Some((_, evicted)) => {
                evicted.cancel();
                true
            }
            None => false,
        }
    }

    fn leave(&self, id: u64) {
        if let Ok(mut queue) = self.queue.lock() {
            queue.retain(|(queued, _)| *queued != id);
        }
    }
}

/// One connection's place among the unauthenticated; it leaves when dropped.
struct WaitingPlace {
    waiting: Arc<Unauthenticated>,
    id: u64,
    evicted: CancellationToken,
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        self.waiting.leave(self.id);
    }
}

/// True for the name part of a loopback `Host` or origin: `localhost`, `127.0.0.0/8` or `[::1]`
/// (bracketed in a URL authority). `*.localhost` is not: a resolver may send it anywhere, and
/// another local user's page may be served under such a name.
fn is_loopback_name(name: &str, bracketed: bool) -> bool {
    match name.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
        Some(v6) => bracketed && v6.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| ip.is_loopback()),
        None => {
            name.eq_ignore_ascii_case("localhost")
                || name.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
        }
    }
}

/// True for an `Origin` that is this socket's own: `http://<loopback name>:<port>` — the page
/// this agent serves on `port`. Pages on other ports (another local user's server, a dev
/// server) and `*.localhost` names are not this agent's page.
pub fn is_own_origin(origin: &str, port: u16) -> bool {
    let Some(authority) = origin.strip_prefix("http://") else { return false };
    authority_is_loopback(authority, port, false)
}

/// True for a `Host` header that names this socket and nothing else: a loopback name and
/// `port` (implied 80 when absent). `127.0.0.1:4242@evil.example`, a path, a user part or any
/// other character is refused: a page that rebinds its own name to 127.0.0.1 still sends that
/// name, and a parser elsewhere must not read the header another way.
pub fn is_loopback_host_header(value: &str, port: u16) -> bool {
    authority_is_loopback(value, port, true)
}

/// `name[:port]` with a loopback name and exactly this port; nothing else in it.
fn authority_is_loopback(authority: &str, port: u16, port_optional: bool) -> bool {
    let (name, given) = match authority.rfind(':') {
        // `[::1]` alone: the colon is inside the brackets.
        Some(colon) if !authority[colon..].contains(']') => (&authority[..colon], Some(&authority[colon + 1..])),
        _ => (authority, None),
    };
    let port_ok = match given {
        Some(digits) => {
            !digits.is_empty()
                && digits.len() <= 5
                && digits.bytes().all(|b| b.is_ascii_digit())
                && digits.parse::<u16>() == Ok(port)
        }
        None => port_optional && port == 80,
    };
    port_ok && is_loopback_name(name, true)
}

async fn serve(
    stream: TcpStream,
    ctx: Arc<AgentContext>,
    gate: Arc<dyn Gate>,
    pending: WaitingPlace,
    shutdown: CancellationToken,
) -> Result<()> {
    let evicted = pending.evicted.clone();
    // Everything before a good hello, within the hello timeout of the connect.
    let deadline = tokio::time::Instant::now() + protocol::HELLO_TIMEOUT;
    let opened = tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        _ = evicted.cancelled() => {
            debug!("closed to make room for a newer local connection");
            return Ok(());
        }
        // A safety net only: every step inside has its own, shorter bound.
        opened = tokio::time::timeout_at(deadline + Duration::from_secs(1), open_session(stream, &ctx, gate, deadline)) => opened,
    };
    let opened = match opened {
        Ok(opened) => opened?,
        Err(_) => {
            debug!("no hello in time");
            return Ok(());
        }
    };
    // Answered or refused: either way it no longer waits for a hello.
    drop(pending);
    let (mut socket, admitted) = match opened {
        LocalStart::Admitted(socket, admitted) => (socket, admitted),
        LocalStart::Refused(mut socket, refusal) => {
            refuse(&mut socket, close_message(refusal.close, refusal.reason)).await;
            return Ok(());
        }
        LocalStart::Answered => return Ok(()),
    };
    socket.get_mut().lift();
    run_session(socket, ctx, *admitted, shutdown).await
}

/// How the start of a local connection ended.
enum LocalStart {
    /// A good hello: the session may start.
    Admitted(LocalSocket, Box<Admitted>),
    /// Close the socket as the refusal says.
    Refused(LocalSocket, Refusal),
    /// Answered over plain HTTP (or dropped); nothing more to do.
    Answered,
}

/// The request head, the upgrade, the challenge and the hello, which must arrive by `deadline`.
async fn open_session(
    mut stream: TcpStream,
    ctx: &AgentContext,
    gate: Arc<dyn Gate>,
    deadline: tokio::time::Instant,
) -> Result<LocalStart> {
    // Web answers keep the connection for the page's next request, a bounded number of times and
    // only until the hello deadline: a connection that waits holds a waiting place.
    let (mut carried, mut served) = (Vec::new(), 0);
    let (head, leftover) = loop {
        let wait =
            if served == 0 { HEAD_TIMEOUT } else { deadline.saturating_duration_since(tokio::time::Instant::now()) };
        let (head, leftover) = match http::read_next_head(&mut stream, wait, carried).await {
            Ok(read) => read,
            // A kept-alive connection the page no longer needs.
            Err(http::HeadError::TimedOut) if served > 0 => return Ok(LocalStart::Answered),
            Err(http::HeadError::Io(err)) if served > 0 && err.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(LocalStart::Answered)
            }
            Err(http::HeadError::TimedOut) => {
                let _ = http::respond(&mut stream, 408, "Request Timeout", "no request in time\n").await;
                return Ok(LocalStart::Answered);
            }
            Err(err) => {
                let _ = http::respond(&mut stream, 400, "Bad Request", "bad request\n").await;
                return Err(err.into());
            }
        };
        let port = stream.local_addr()?.port();
        // Exactly one `Host`, naming this socket; at most one `Origin`, this socket's own.
        if !head.single_header("host").is_some_and(|host| is_loopback_host_header(host, port)) {
            http::respond(&mut stream, 403, "Forbidden", "this socket answers only to a loopback Host\n").await?;
            return Ok(LocalStart::Answered);
        }
        let origin_ok = match head.header("origin") {
            None => true,
            Some(_) => head.single_header("origin").is_some_and(|origin| is_own_origin(origin, port)),
        };
        if !origin_ok {
            http::respond(&mut stream, 403, "Forbidden", "cross-origin requests are refused\n").await?;
            return Ok(LocalStart::Answered);
        }
        let response = if head.is_websocket_upgrade() { None } else { web::answer(&head, web::Offer::default()) };
        let Some(response) = response else { break (head, leftover) };
        served += 1;
        let keep_alive = web::keep_alive(served, &head);
        response.write(&mut stream, keep_alive).await?;
        if !keep_alive {
            return Ok(LocalStart::Answered);
        }
        carried = leftover;
    };
    if head.path != "/" {
        http::respond(&mut stream, 404, "Not Found", "not found\n").await?;
        return Ok(LocalStart::Answered);
    }
    if !head.is_websocket_upgrade() {
        http::respond(&mut stream, 426, "Upgrade Required", "this is a WebSocket endpoint\n").await?;
        return Ok(LocalStart::Answered);
    }
    // The token never crosses the socket: a bearer header is refused whether it is right or not.
    if head.header("authorization").is_some() {
        let body = format!("{}\n", ErrorCode::BearerRefused);
        http::respond(&mut stream, 403, "Forbidden", &body).await?;
        return Ok(LocalStart::Answered);
    }
    let _ = stream.set_nodelay(true);
    let stream = PreAuthLimit::new(stream, protocol::MAX_PREAUTH_LEN);
    let mut socket = http::accept_websocket(stream, &head, leftover, http::websocket_config()).await?;
    let (mut start, opening) = SessionStart::new(gate, Carrier::Loopback, deadline)?;
    for frame in opening {
        socket.send(Message::from(frame)).await?;
    }
    let hello_ok = |admission: &_| ctx.hello_ok(admission);
    loop {
        let next = tokio::select! {
            _ = sleep_until(start.deadline()) => match start.on_timeout(tokio::time::Instant::now()) {
                Some(refusal) => Next::Refused(refusal),
                None => Next::Wait,
            },
            message = socket.next() => match message {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => Next::Wait,
                Some(Ok(message)) => match Frame::from_message(message) {
                    Ok(frame) => start.on_frame(frame, &hello_ok),
                    // A close (or a raw frame) before the hello.
                    Err(_) => Next::Refused(start.refuse(ErrorCode::UnauthenticatedCall)),
                },
                Some(Err(tokio_tungstenite::tungstenite::Error::Io(err))) if is_over_budget(&err) => {
                    Next::Refused(start.too_much())
                }
                Some(Err(_)) | None => Next::Refused(start.refuse(ErrorCode::UnauthenticatedCall)),
            },
        };
        match next {
            Next::Wait => {}
            Next::Send(frames) => {
                for frame in frames {
                    socket.send(Message::from(frame)).await?;
                }
            }
            Next::Admitted(admitted) => return Ok(LocalStart::Admitted(socket, admitted)),
            Next::Refused(refusal) => return Ok(LocalStart::Refused(socket, refusal)),
        }
    }
}

async fn refuse(socket: &mut LocalSocket, close: Message) {
    let _ = socket.send(close).await;
    // Give the close frame a moment to be read; never wait on a hostile peer for long.
    let _ =
        tokio::time::timeout(Duration::from_secs(1), async { while let Some(Ok(_)) = socket.next().await {} }).await;
}

/// The error a [`PreAuthLimit`] read fails with.
#[derive(Debug)]
struct OverBudget;

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client sent too much before its hello")
    }
}

impl std::error::Error for OverBudget {}

fn is_over_budget(err: &std::io::Error) -> bool {
    err.get_ref().is_some_and(|inner| inner.is::<OverBudget>())
}

/// A stream that fails once its peer sent more than a budget, until [`PreAuthLimit::lift`]: what
/// a client may send before its hello is accepted, so no unauthenticated frame grows memory.
pub struct PreAuthLimit<S> {
    inner: S,
    budget: Option<usize>,
}

impl<S> PreAuthLimit<S> {
    pub fn new(inner: S, budget: usize) -> Self {
        PreAuthLimit { inner, budget: Some(budget) }
    }

    /// The peer authenticated: no budget from now on.
    pub fn lift(&mut self) {
        self.budget = None;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PreAuthLimit<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(budget)) = (&polled, self.budget) {
            let read = buf.filled().len() - before;
            match budget.checked_sub(read) {
                Some(left) => self.budget = Some(left),
                None => return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::InvalidData, OverBudget))),
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PreAuthLimit<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn run_session(
    socket: LocalSocket,
    ctx: Arc<AgentContext>,
    admitted: Admitted,
    shutdown: CancellationToken,
) -> Result<()> {
    let Admitted { admission, frames, ends } = admitted;
    let (sink, mut stream) = socket.split();
    let outbox = Outbox::spawn(sink);
    let out_tx = outbox.frames.clone();
    let revoked = admission.revoked.clone();
    let queue = outbox.begin_session().await;
    for frame in frames {
        queue.send(frame).await.context("the session's socket closed")?;
    }
    let mut io = ends.open(queue, &ctx.status.sessions);
    let shown = super::session::connected(&admission, io.input.is_sealed(), "loopback");
    let mut session = Session::new(ctx, admission.caller, io.out).shown(shown);
    let mut liveness = Liveness::new(Heartbeat::PROTOCOL);
    loop {
        let revoked = revoked.clone();
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = out_tx.send(close_message(CloseCode::Away, "agent shutting down")).await;
                break;
            }
            _ = sleep_until(io.input.stall_deadline()) => {
                debug!("sealed session stalled: nothing sealed from the client in time");
                let _ = out_tx.send(seal::stalled_close()).await;
                break;
            }
            _ = cancelled(revoked) => {
                // A sealed session hears it in the close alone (an unsealed frame would break it).
                if !io.input.is_sealed() {
                    let _ = out_tx.send(Message::text(AgentMessage::error(ErrorCode::PairingRevoked).to_json())).await;
                }
                let _ = out_tx.send(close_message(CloseCode::Policy, ErrorCode::PairingRevoked.as_str())).await;
                break;
            }
            pulse = liveness.tick() => match pulse {
                Pulse::Silent(_) => break,
                Pulse::Ping => { let _ = out_tx.try_send(Message::Ping(Default::default())); }
            },
            frame = stream.next() => {
                liveness.heard();
                let frame = match frame.map(|frame| frame.map(Frame::from_message)) {
                    Some(Ok(Ok(frame))) => match io.input.open(frame) {
                        Ok(Some(frame)) => {
                            session.on_frame(frame).await;
                            continue;
                        }
                        Ok(None) => continue,
                        Err(broken) => {
                            debug!(%broken, "local session closed");
                            let _ = out_tx.send(seal::broken_close()).await;
                            break;
                        }
                    },
                    Some(Ok(Err(control))) => Some(Ok(control)),
                    Some(Err(err)) => Some(Err(err)),
                    None => None,
                };
                match frame {
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(_)) => {}
                    Some(Err(err)) => {
                        if let tokio_tungstenite::tungstenite::Error::Capacity(_) = err {
                            let _ = out_tx.send(close_message(CloseCode::Size, "frame too large")).await;
                        }
                        debug!(%err, "local socket error");
                        break;
                    }
                }
            }
        }
    }
    drop(session);
    drop(out_tx);
    outbox.finish().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_sockets_host_passes() {
        for ok in ["127.0.0.1:4242", "localhost:4242", "LOCALHOST:4242", "[::1]:4242", "127.1.2.3:4242"] {
            assert!(is_loopback_host_header(ok, 4242), "{ok}");
        }
        assert!(is_loopback_host_header("localhost", 80));
        for bad in [
            "",
            "localhost",
            "evil.example:4242",
            "127.0.0.1.evil.example:4242",
            "127.0.0.1:4242@evil.example",
            "127.0.0.1:4242/x",
            "user@127.0.0.1:4242",
            "127.0.0.1:4243",
            "127.0.0.1:04242x",
            "127.0.0.1:",
            "[::1",
            "::1:4242",
            "app.localhost:4242",
            "0.0.0.0:4242",
            ":4242",
            " 127.0.0.1:4242",
        ] {
            assert!(!is_loopback_host_header(bad, 4242), "{bad}");
        }
    }

    #[tokio::test]
    async fn the_pre_hello_budget_fails_reads_past_it_until_lifted() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(64 << 10);
        let mut limited = PreAuthLimit::new(server, 100);
        client.write_all(&[7u8; 100]).await.unwrap();
        let mut buf = [0u8; 100];
        limited.read_exact(&mut buf).await.unwrap();
        client.write_all(&[7u8; 1]).await.unwrap();
        assert!(is_over_budget(&limited.read(&mut buf).await.unwrap_err()));

        let (mut client, server) = tokio::io::duplex(64 << 10);
        let mut limited = PreAuthLimit::new(server, 100);
        limited.lift();
        client.write_all(&[7u8; 4096]).await.unwrap();
        let mut big = vec![0u8; 4096];
        limited.read_exact(&mut big).await.unwrap();
    }

    #[test]
    fn only_this_sockets_own_origin_passes() {
        for ok in ["http://127.0.0.1:4242", "http://localhost:4242", "http://[::1]:4242"] {
            assert!(is_own_origin(ok, 4242), "{ok}");
        }
        for bad in [
            "null",
            "http://127.0.0.1:4243",
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://127.0.0.1:4242",
            "http://app.localhost:4242",
            "http://127.0.0.1:4242/",
            "http://127.0.0.1:4242@evil.example",
            "https://evil.example",
            "http://127.0.0.1.evil.example:4242",
            "file://",
            "chrome-extension://x",
        ] {
            assert!(!is_own_origin(bad, 4242), "{bad}");
        }
    }
}
