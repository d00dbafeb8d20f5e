//! The seam beside the core: a [`PhoneService`] serves one more kind of phone socket (hosted
//! voice at `/live`). The edge routes and admits its requests like `/ws`, completes the upgrade on
//! the shard of the code and hands the socket over with its place as a phone of that code; the
//! service builds its socket from the core's reader, writer and send queues, named here.

use std::net::IpAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub(crate) use super::core::codec::close::GOING_AWAY;
pub(crate) use super::core::codec::{OutFrame, OP_BINARY, OP_TEXT};
use super::core::metrics::RelayMetrics;
pub(crate) use super::core::queue::{End, Push, SendQueue};
pub(crate) use super::core::reader::{FrameReader, Part};
pub use super::core::socket::Membership;
pub(crate) use super::core::socket::{read_side, wind_down, write_side, Deliver};
use super::core::SocketLimits;
use crate::secret::Secret;

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
    fn report(&self, _metrics: &RelayMetrics) {}
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
    pub limits: SocketLimits,
    pub metrics: Arc<RelayMetrics>,
    /// Cancelled when the relay shuts down.
    pub cancel: CancellationToken,
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
