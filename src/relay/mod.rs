//! The relay (docs/PROTOCOL.md, "Relay"): pairs one agent (`/agent`) with up to
//! [`MAX_PHONES_PER_CODE`] phones (`/ws`) per relay code and carries their frames both ways. It
//! reads no session frame at all: it tells each side who comes and goes in frames of its own
//! (`protocol::relay`), tags each phone's frames with the phone's peer id on the agent's socket,
//! and bounds everything a client can make it hold.
//!
//! Three parts, as in DERP's server:
//! - the **core** (`core/`) moves frames between the sockets of a code and knows nothing of
//!   HTTP, TLS or certificates: its one entry point takes a stream already upgraded and the place
//!   it claims. Pairing, forwarding, queues, limits, the memory ledger and the metrics live there.
//! - the **edge** (`edge/`) accepts, admits (connection limits, per-address limits), finishes TLS,
//!   reads the request head, routes, checks the relay token, upgrades and hands the stream to the
//!   core: as a socket of its code, or as a [`ServiceLine`] for the [`PhoneService`] registered
//!   beside it (hosted voice at `/live`), whose socket the core runs all the same.
//! - the **web app** (`web.rs`) answers the web client's page requests.
//!
//! The relay is a leaf: it imports `net` and `protocol` (and `secret` for the relay token, `text`
//! to cut a close reason) and nothing that knows what a session means; the core imports only
//! `protocol`, `secret` and `text`. Its certificate (`voxa relay --domain`) is the relay
//! command's: the edge takes a TLS configuration and ends a handshake that agreed on another
//! protocol than HTTP/1.1 (an ACME validation).
//!
//! Threads: [`run_sharded`] runs one single-threaded runtime per listener (`SO_REUSEPORT`) and
//! serves each plain-TCP socket on the shard its code maps to, so the sockets of a code share a
//! thread; [`run`] serves everything on the caller's runtime.
//!
//! Scale-out: the relay keeps no state but the map of live codes, so a load balancer hashing on
//! `code` (nginx `hash $arg_code consistent;`) spreads pairs over processes (deploy/).

mod config;
mod core;
mod edge;
pub mod service;
mod web;

pub use self::config::*;
#[doc(hidden)]
pub use self::core::reader_check;
pub use self::core::{metrics, SocketLimits, MAX_PHONES_PER_CODE, MEMORY_BUDGET, SEND_QUEUE_BYTES, STALL_TIMEOUT};
pub use self::edge::{bind_shared, run, run_sharded, serve_metrics};
pub use self::service::{PhoneService, ServiceLine};
