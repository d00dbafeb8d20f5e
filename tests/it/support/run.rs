//! `voxa run --json` as a process in a fresh home and workspace, the way a user runs it, waited
//! on until it printed `started`.

use crate::support::{voxa_cmd, RunningVoxa};

/// `voxa run --json` with `extra` arguments in a fresh home and workspace, with extra environment
/// variables (`DISPLAY` for screenshots, `PATH`), waited on until it printed `started`.
pub(crate) fn start_run_with_env(
    extra: &[&str],
    env: &[(&str, &str)],
) -> (RunningVoxa, std::path::PathBuf, (tempfile::TempDir, tempfile::TempDir)) {
    let (dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--json", "--workspace"]).arg(workspace.path()).args(extra).envs(env.iter().copied());
    (RunningVoxa::start(cmd), home, (dir, workspace))
}

/// [`start_run_with_env`] in a home whose `config.toml` is `config`.
pub(crate) fn start_run_with_config(
    extra: &[&str],
    config: &str,
) -> (RunningVoxa, std::path::PathBuf, (tempfile::TempDir, tempfile::TempDir)) {
    let (dir, home) = fresh_home();
    crate::support::harness::write_home_config(&home, config);
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--json", "--workspace"]).arg(workspace.path()).args(extra);
    (RunningVoxa::start(cmd), home, (dir, workspace))
}

/// A temporary directory and a not-yet-existing voxa home inside it.
pub(crate) fn fresh_home() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    (dir, home)
}
