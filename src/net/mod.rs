//! Network plumbing shared by the agent, the relay, the environments and the Gemini link:
//! outbound dialing (with proxy and TLS), HTTP request heads for the servers, the one
//! liveness loop every long-lived WebSocket runs, and the client side of the session start.

pub mod client;
pub mod dial;
pub mod http;
pub mod liveness;
pub mod proxy;
