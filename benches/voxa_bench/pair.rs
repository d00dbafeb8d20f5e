//! `voxa pair --json` as a user runs it: whole-process wall time (spawn, parse, read the secrets,
//! print, exit) against a home that is already paired, beside `voxa --version` as the floor that
//! any invocation of the binary pays.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::report::{percentiles, Report};

/// Release binary under `cargo bench`, debug binary under `cargo test --all-targets`.
const VOXA: &str = env!("CARGO_BIN_EXE_voxa");
/// Runs discarded before measuring (page cache, dynamic loader).
const WARMUP_RUNS: usize = 10;

/// Adds the `pair` rows to the report, from `runs` runs of each command.
pub fn run(report: &mut Report, runs: usize) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let home = tmp.path().join("home");
    // The steady state: secrets and config.toml exist, so `pair` only reads.
    assert_success(&home, &["pair", "--json"]);

    for (figure, args, target) in [
        ("`voxa --version` (process floor)", &["--version"][..], "baseline"),
        ("`voxa pair --json`, paired home", &["pair", "--json"], "< 5 ms"),
        ("`voxa pair` (QR code, piped), paired home", &["pair"], "< 5 ms"),
    ] {
        for _ in 0..WARMUP_RUNS.min(runs) {
            assert_success(&home, args);
        }
        let mut samples: Vec<f64> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                assert_success(&home, args);
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let (median, p99) = percentiles(&mut samples);
        report.add("pair", format!("{figure}, {runs} runs"), format!("{median:.2} ms (p99 {p99:.2} ms)"), target);
    }
}

fn assert_success(home: &Path, args: &[&str]) {
    let status = Command::new(VOXA)
        .args(args)
        .env("VOXA_HOME", home)
        .env_remove("VOXA_RELAY")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("voxa runs");
    assert!(status.success(), "voxa {args:?} failed: {status}");
}
