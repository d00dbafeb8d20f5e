//! Admission at accept, before a byte is read: the relay's connection limit and the limit per
//! client address. It decides and guards; whoever accepted the connection serves it or sends the
//! refusal.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tracing::debug;

use crate::relay::core::metrics;
use crate::relay::service::ClientKey;

/// The connection limits of one relay, shared by every shard.
pub(super) struct Admission {
    max_connections: usize,
    open: Arc<AtomicUsize>,
    per_ip: Arc<PerIp>,
    metrics: Arc<metrics::RelayMetrics>,
}

impl Admission {
    /// At most `max_connections` at once, `max_per_ip` of them from one address (0: no limit),
    /// counted in `metrics`.
    pub(super) fn new(max_connections: usize, max_per_ip: usize, metrics: Arc<metrics::RelayMetrics>) -> Self {
        let per_ip = Arc::new(PerIp { max: max_per_ip, held: Mutex::default() });
        Admission { max_connections, open: Arc::new(AtomicUsize::new(0)), per_ip, metrics }
    }

    /// A place for one more connection from `ip`, held while the guard lives; or, past a limit,
    /// the refusal to send (counted in the metrics).
    pub(super) fn admit(&self, ip: IpAddr) -> Result<ConnectionGuard, AcceptRefusal> {
        let admitted = ConnectionGuard::admit(self, ip);
        if let Err(refusal) = &admitted {
            debug!(status = refusal.status, "connection refused: {}", refusal.body);
            self.metrics.refused(refusal.status);
        }
        admitted
    }
}

/// A connection refused at accept, before any byte is read.
pub(super) struct AcceptRefusal {
    status: u16,
    body: &'static str,
    /// The whole HTTP answer, for a plain connection to be told.
    pub response: &'static str,
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
pub(super) struct ConnectionGuard {
    /// The TCP peer's address.
    pub peer: IpAddr,
    open: Arc<AtomicUsize>,
    client: Option<(Arc<PerIp>, ClientKey)>,
    metrics: Arc<metrics::RelayMetrics>,
}

impl ConnectionGuard {
    fn admit(admission: &Admission, ip: IpAddr) -> Result<Self, AcceptRefusal> {
        let per_ip = &admission.per_ip;
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
        let metrics = Arc::clone(&admission.metrics);
        metrics.connection_opened();
        let guard = ConnectionGuard { peer: ip, open: Arc::clone(&admission.open), client, metrics };
        if admission.open.fetch_add(1, Ordering::AcqRel) >= admission.max_connections {
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
