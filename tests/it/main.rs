//! voxa's integration tests: the real binary, relay and agent on 127.0.0.1:0, driven as a phone or
//! a script would drive them.

mod admission;
mod agent;
mod approvals;
mod browser;
mod cli;
mod cli_agent;
mod codex;
mod continuity;
mod deploy;
mod doctor;
mod environments;
mod fake_gemini;
mod fake_model;
mod fence;
mod gemini;
mod harness;
mod hostile;
mod layers;
mod live;
mod proof;
mod push;
mod relay;
mod relay_limits;
mod relay_serving;
mod run;
mod sealed;
mod secrets;
mod service;
mod sessions;
mod sessions_web;
mod support;
mod terminal;
mod tools;
mod web;
mod web_voice;
