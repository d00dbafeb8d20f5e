//! The audit trail an agent wrote (one JSON line per record), read back by the tests.

use std::path::Path;

use serde_json::Value;

use crate::support::harness::TestAgent;

/// Every audit line the agent wrote.
pub fn audit_lines(agent: &TestAgent) -> Vec<Value> {
    let dir = agent.home.path().join("voxa").join("audit");
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        lines.extend(text.lines().map(|line| serde_json::from_str::<Value>(line).unwrap()));
    }
    lines
}

/// The audit lines of the voxa home `home`, oldest first.
pub(crate) fn audit_lines_in(home: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(home.join("audit")) else { return Vec::new() };
    let mut lines: Vec<Value> = entries
        .flat_map(|entry| {
            std::fs::read_to_string(entry.unwrap().path())
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .map(|line| serde_json::from_str(&line).unwrap())
        .collect();
    lines.sort_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()));
    lines
}
