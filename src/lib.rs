//! voxa: drive a laptop from a phone by voice. The laptop dials a relay outbound, runs the tools the
//! phone asks for, and serves the same tools to local scripts on a token-gated loopback socket.
#![forbid(unsafe_code)]

pub mod agent;
pub mod audit;
pub mod call;
pub mod cli;
pub mod client;
pub mod config;
pub mod dial;
pub mod environments;
pub mod error;
pub mod gemini;
pub mod http;
pub mod logging;
pub mod loopback;
pub mod open;
pub mod output;
pub mod pair;
pub mod protocol;
pub mod relay;
pub mod secret;
pub mod session;
pub mod shutdown;
pub mod state;
pub mod status;
pub mod tools;
pub mod web;
pub mod writer;

/// This build's version, as reported in `hello_ok` and `agent.json`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `voxa/<version>`, the agent's name on the wire.
pub fn agent_name() -> String {
    format!("voxa/{VERSION}")
}
