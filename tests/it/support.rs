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
    voxa_cmd_via(home, &[])
}

/// Like [`voxa_cmd`], started through `wrapper` (a program and its arguments, such as `strace`).
pub fn voxa_cmd_via(home: &Path, wrapper: &[&str]) -> Command {
    let mut cmd = match wrapper {
        [] => Command::new(voxa_bin()),
        [program, args @ ..] => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(voxa_bin());
            cmd
        }
    };
    for var in ["VOXA_RELAY", "VOXA_RELAY_TOKEN", "GEMINI_API_KEY", "VOXA_GEMINI_URL", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    cmd.env("VOXA_HOME", home);
    cmd
}
