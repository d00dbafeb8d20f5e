//! voxa: drive a laptop from a phone by voice. The laptop dials a relay outbound, runs the tools the
//! phone asks for, and serves the same tools to local scripts on a token-gated loopback socket.
#![forbid(unsafe_code)]

// The modules are layered as the table in docs/ARCHITECTURE.md ("Layers") says; tests/it/layers.rs
// reads that table and holds every import to it.
pub mod cli;
pub mod commands;

pub mod agent;
pub mod environments;
pub mod gemini;
pub mod hosted;
pub mod sessions;
pub mod terminal;

pub mod relay;

pub mod approvals;
pub mod net;
pub mod process;
pub mod push;
pub mod seal;
pub mod tools;

pub mod audit;
pub mod config;
pub mod error;
pub mod logging;
pub mod protocol;
pub mod secret;
pub mod state;
pub mod text;

/// This build's version, as reported in `hello_ok` and `agent.json`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `voxa/<version>`, the agent's name on the wire.
pub fn agent_name() -> String {
    format!("voxa/{VERSION}")
}
