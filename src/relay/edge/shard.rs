//! Threads and listeners: one runtime for everything ([`run`]) or one single-threaded runtime per
//! `SO_REUSEPORT` listener ([`run_sharded`]), each plain-TCP socket handed to the shard its code
//! maps to, so both sides of a pair share a thread.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn, Instrument as _};

use super::{accept_connection, upgrade_and_hand_on, Edge, Handoff};
use crate::relay::config::RelayConfig;

/// Time connections get to close after shutdown is asked for, before `run` returns anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after an accept error such as running out of file descriptors.
pub(super) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Sockets waiting to be taken over by the shard that serves their code.
const HANDOFF_QUEUE: usize = 1024;
/// Pending connections a listener keeps before the kernel refuses more.
const LISTEN_BACKLOG: u32 = 1024;

/// A listening socket that other sockets may share (`SO_REUSEPORT`), for one shard.
pub fn bind_shared(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)?.into_std()
}

/// Serves the relay on an already-bound listener until `shutdown` resolves, then closes every
/// socket (close 1001) and returns once they are gone or after a few seconds' grace. Everything
/// runs on the caller's runtime.
pub async fn run(
    listener: TcpListener,
    config: RelayConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let edge = Edge::new(config, Vec::new())?;
    serve_shard(&edge, listener, None, 0, shutdown).await
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
    let edge = Edge::new(config, if listeners.len() > 1 { senders } else { Vec::new() })?;
    let mut shards: Vec<_> = listeners.into_iter().zip(receivers).enumerate().collect();
    let Some((last, (listener, handoffs))) = shards.pop() else { return Ok(()) };
    let threads = shards
        .into_iter()
        .map(|(index, (listener, handoffs))| {
            let (edge, shutdown) = (Arc::clone(&edge), shutdown.clone());
            std::thread::Builder::new().name(format!("relay-{index}")).spawn(move || {
                let ended = run_shard(&edge, listener, handoffs, index, &shutdown);
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
    let mut result = run_shard(&edge, listener, handoffs, last, &shutdown);
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
    edge: &Arc<Edge>,
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
        serve_shard(edge, listener, Some(handoffs), index, shutdown.clone().cancelled_owned()).await
    })
}

/// One shard: accepts on its listener and serves what it accepted or was handed, until shutdown.
async fn serve_shard(
    edge: &Arc<Edge>,
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
                tracker.spawn(serve_handoff(Arc::clone(edge), handoff).instrument(span));
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
        accept_connection(edge, &tracker, tcp, peer.ip(), shard);
    }
    drop(listener);
    drop(handoffs);
    edge.core.shut_down();
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait()).await.is_err() {
        warn!(connections = tracker.len(), "connections still closing after the shutdown grace; leaving them");
    }
    Ok(())
}

/// Serves a socket another shard accepted and routed here.
async fn serve_handoff(edge: Arc<Edge>, handoff: Handoff) {
    let Handoff { tcp, upgrade, guard, .. } = handoff;
    let _guard = guard;
    let stream = match TcpStream::from_std(tcp) {
        Ok(stream) => stream,
        Err(err) => return debug!(%err, "could not take over a socket"),
    };
    if let Err(err) = upgrade_and_hand_on(&edge, stream, upgrade).await {
        debug!(err = %format_args!("{err:#}"), "connection ended with an error");
    }
}

/// Accept errors that concern one connection only, not the listener.
fn is_per_connection(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(err.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock)
}
