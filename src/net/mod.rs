//! Network plumbing shared by the agent, the relay, the environments and the Gemini link:
//! outbound dialing (with proxy and TLS), HTTP request heads for the servers, the one
//! liveness loop every long-lived WebSocket runs, the client side of the session start, and the
//! web client's files.

pub mod client;
pub mod dial;
pub mod http;
pub mod liveness;
pub mod proxy;
pub mod relay_framing;
pub mod web;
