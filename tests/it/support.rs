//! Shared test helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Path of the built `voxa` binary.
pub fn voxa_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_voxa"))
}

/// Runs `voxa` with `VOXA_HOME=home` and no inherited voxa variables.
pub fn voxa(home: &Path, args: &[&str]) -> Output {
    voxa_cmd(home).args(args).output().expect("voxa binary runs")
}

/// A `voxa` command with a clean environment for the given home.
pub fn voxa_cmd(home: &Path) -> Command {
    let mut cmd = Command::new(voxa_bin());
    for var in ["VOXA_RELAY", "VOXA_RELAY_TOKEN", "GEMINI_API_KEY", "VOXA_GEMINI_URL", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    cmd.env("VOXA_HOME", home);
    cmd
}

/// Raises the soft open-file limit to the hard limit and fails the test if it stays below `needed`.
pub fn raise_open_file_limit(needed: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if limit.current.is_some_and(|current| current < want) {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: Some(want), maximum: limit.maximum });
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(now >= needed, "this test needs {needed} open files; the limit is {now}");
}
