//! Admission at accept, before a byte is read: the relay's connection limit and the limit per
//! client address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::TcpStream;
use tokio_util::task::TaskTracker;
use tracing::{debug, Instrument as _};

use super::{serve_connection, Edge};
use crate::relay::core::metrics;
use crate::relay::service::ClientKey;

/// Serves an accepted connection on its own task, or refuses it when a connection limit is
/// reached.
pub(super) fn admit(edge: &Arc<Edge>, tracker: &TaskTracker, tcp: TcpStream, ip: IpAddr, shard: usize) {
    let guard = match ConnectionGuard::admit(edge, ip) {
        Ok(guard) => guard,
        Err(refusal) => {
            debug!(status = refusal.status, "connection refused: {}", refusal.body);
            edge.core.metrics().refused(refusal.status);
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

/// A connection refused at accept, before any byte is read.
pub(super) struct AcceptRefusal {
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

/// Connections held per client address.
pub(super) struct PerIp {
    pub max: usize,
    pub held: Mutex<HashMap<ClientKey, usize>>,
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
pub(super) struct ConnectionGuard {
    /// The TCP peer's address.
    pub peer: IpAddr,
    open: Arc<AtomicUsize>,
    client: Option<(Arc<PerIp>, ClientKey)>,
    metrics: Arc<metrics::RelayMetrics>,
}

impl ConnectionGuard {
    fn admit(edge: &Edge, ip: IpAddr) -> Result<Self, AcceptRefusal> {
        let per_ip = &edge.per_ip;
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
        let metrics = Arc::clone(edge.core.metrics());
        metrics.connection_opened();
        let guard = ConnectionGuard { peer: ip, open: Arc::clone(&edge.open_connections), client, metrics };
        if edge.open_connections.fetch_add(1, Ordering::AcqRel) >= edge.max_connections {
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
