//! Network plumbing shared by the agent, the relay, the environments and the Gemini link:
//! outbound dialing (with proxy and TLS), HTTP request heads for the servers, the one
//! liveness loop every long-lived WebSocket runs, the client side of the session start, the
//! web client's files, and the check that a relay serves them unchanged.

pub mod client;
pub mod dial;
pub mod http;
pub mod liveness;
pub mod page_check;
pub mod proxy;
pub mod web;
