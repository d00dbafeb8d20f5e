//! voxa: drive a laptop from a phone by voice. The laptop dials a relay outbound, runs the tools the
//! phone asks for, and serves the same tools to local scripts on a token-gated loopback socket.
#![forbid(unsafe_code)]

// Layers, top to bottom; a module imports only from its own layer or below, never in a circle
// (tests/it/layers.rs checks it; docs/ARCHITECTURE.md describes each module):
//   commands → cli (argument types) → agent, hosted, environments, gemini, sessions → relay
//   → net, seal, tools, approvals, push, process
//   → protocol, state, secret, config, audit, error, logging
// The relay is a leaf: it imports only net and protocol (and secret, text); hosted voice plugs
// into it as its `PhoneService`.
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
pub mod tickets;

/// This build's version, as reported in `hello_ok` and `agent.json`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `voxa/<version>`, the agent's name on the wire.
pub fn agent_name() -> String {
    format!("voxa/{VERSION}")
}
