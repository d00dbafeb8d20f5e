//! The seam beside the core: a [`PhoneService`] serves one more kind of phone socket (hosted
//! voice at `/live`). The edge routes and admits its requests like `/ws` and completes the upgrade
//! on the shard of the code; the core runs the socket (reading, writing, limits, wind-down) and
//! hands the service a [`ServiceLine`] to it. The service's metrics join the relay's registry.

use std::net::IpAddr;

use futures_util::future::BoxFuture;
use prometheus_client::registry::Registry;

pub use super::core::line::ServiceLine;
use crate::secret::Secret;

/// A kind of phone socket served beside `/agent` and `/ws` by code outside the relay (hosted
/// voice at `/live`). The relay routes and admits its requests like `/ws` (with the service's
/// own token when it has one), completes the upgrade on the shard of the code, and runs the
/// socket while the service serves its line.
pub trait PhoneService: Send + Sync + 'static {
    /// The path it serves, such as `/live`.
    fn path(&self) -> &'static str;
    /// The token its sockets present instead of the relay token, if it has one.
    fn token(&self) -> Option<&Secret>;
    /// Serves one upgraded socket; the relay closes it (within bounded time) once this returns.
    fn serve(&self, line: ServiceLine) -> BoxFuture<'_, ()>;
    /// The request header a trusted proxy in front of the relay sets to the client's address
    /// (its last comma-separated entry is taken); `None` takes the TCP peer's address.
    fn client_header(&self) -> Option<&str> {
        None
    }
    /// Adds the service's own metrics to the relay's registry (prefixed `voxa_relay_`), once at
    /// start.
    fn register(&self, _registry: &mut Registry) {}
    /// The service's limits by name, for the relay's `limit` gauge, read once at start.
    fn limits(&self) -> Vec<(&'static str, usize)> {
        Vec::new()
    }
}

/// A client address as the per-address limits see it (the edge's, a service's): IPv4 whole,
/// IPv6 by its /64 (what one subscriber is usually given).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
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
