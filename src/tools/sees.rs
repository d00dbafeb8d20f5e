//! What this agent's tools find in its own environment — its `DISPLAY`, and which coding agents
//! its `PATH` holds — reported in `status`, so `voxa doctor` tells what the running agent has
//! rather than what the shell it runs in has.

use std::ffi::OsStr;

use super::{coding_agent, Toolbox};
use crate::config::Config;
use crate::protocol::{AgentSees, CodingAgentSeen};

impl Toolbox {
    /// This agent's view, looked up in the environment its tools run with.
    pub fn sees(&self) -> AgentSees {
        let display = self.env_var("DISPLAY").map(|value| value.to_string_lossy().into_owned());
        AgentSees {
            display: display.filter(|display| !display.is_empty()),
            wayland: self.env_var("WAYLAND_DISPLAY").is_some(),
            coding_agents: coding_agents_seen(&self.inner.config, self.env_var("PATH")),
        }
    }
}

/// `claude` (or its `[agents.claude]` replacement) and every other `[agents]` entry, each with
/// whether `path` holds its program.
pub fn coding_agents_seen(config: &Config, path: Option<&OsStr>) -> Vec<CodingAgentSeen> {
    let claude =
        config.agents.get("claude").map_or_else(|| coding_agent::default_claude().program, |c| c.program.clone());
    let others = config.agents.iter().filter(|(name, _)| name.as_str() != "claude");
    std::iter::once(("claude".to_owned(), claude))
        .chain(others.map(|(name, command)| (name.clone(), command.program.clone())))
        .map(|(name, program)| {
            let found = coding_agent::find_program(&program, path).is_some();
            CodingAgentSeen { name, program, found }
        })
        .collect()
}
