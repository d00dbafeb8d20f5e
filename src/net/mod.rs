//! Network plumbing shared by the agent, the relay, the environments and the Gemini link:
//! outbound dialing (with proxy and TLS), HTTP request heads for the servers, and the one
//! liveness loop every long-lived WebSocket runs.

pub mod dial;
pub mod http;
pub mod liveness;
