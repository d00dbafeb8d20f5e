//! A laptop for the browser tests of coding agents: `voxa run` as a process whose coding agents
//! are the real CLI (tests/agents) against the fake model, and its pairing link.

use std::path::Path;

use crate::support::agents::agent_env;
use crate::support::fake_model::FakeModel;
use crate::support::run::start_run_with_env;
use crate::support::RunningVoxa;

/// `voxa run --embedded-relay` whose coding agents are the real CLI against `model`.
pub(crate) struct Laptop {
    pub run: RunningVoxa,
    pub link: String,
    pub home: std::path::PathBuf,
    pub workspace: std::path::PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    _claude_home: tempfile::TempDir,
}

impl Laptop {
    pub fn start(bin: &Path, model: &FakeModel) -> Laptop {
        Self::start_with(bin, model, &["--embedded-relay"])
    }

    /// The same, with `voxa run`'s arguments.
    pub fn start_with(bin: &Path, model: &FakeModel, args: &[&str]) -> Laptop {
        let claude_home = tempfile::tempdir().unwrap();
        let env: Vec<(String, String)> = agent_env(bin, claude_home.path(), model)
            .into_iter()
            .map(|(key, value)| (key.to_string_lossy().into_owned(), value.to_string_lossy().into_owned()))
            .collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (key.as_str(), value.as_str())).collect();
        let (mut run, home, dirs) = start_run_with_env(args, &env);
        let link = run.wait_event("pairing")["url"].as_str().unwrap().to_owned();
        let workspace = dirs.1.path().canonicalize().unwrap();
        Laptop { run, link, home, workspace, _dirs: dirs, _claude_home: claude_home }
    }

    /// A new pairing link for another browser: `voxa pair` beside the running agent prints the link
    /// of the relay it dials, with a ticket of its own (a link's ticket works once).
    pub fn another_link(&self) -> String {
        let out = crate::support::voxa(&self.home, &["pair", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        value["url"].as_str().unwrap().to_owned()
    }
}
