use std::process::ExitCode;

use clap::Parser;
use voxa::cli::Cli;
use voxa::error::{exit_for, is_broken_pipe, Exit};

fn main() -> ExitCode {
    // First, while nothing else runs: other processes of this user (the tools included) may not
    // read this one's memory or environment.
    let protected = voxa::secret::protect_process();
    // Secret variables leave the environment block the kernel shows in /proc/<pid>/environ: voxa
    // runs itself again without them (only returns when nothing moved or that failed).
    let reexec = voxa::secret::reexec_without_secrets();
    let handed = voxa::secret::restore_handed_secrets();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { Exit::Usage.code() as u8 } else { 0 });
        }
    };
    // Still one thread: the secrets leave the environment before anything could copy it.
    let env_secrets = voxa::secret::EnvSecrets::take();
    init_tracing(cli.verbose, cli.quiet);
    if let Err(err) = protected {
        tracing::warn!(%err, "could not make this process non-dumpable");
    }
    if let Err(err) = reexec {
        tracing::warn!(%err, "could not run again without the secret variables; they stay readable in /proc");
    }
    if let Err(err) = handed {
        tracing::warn!(%err, "could not read the secrets handed over at start");
    }
    match voxa::commands::execute(cli, env_secrets) {
        Ok(exit) => ExitCode::from(exit.code() as u8),
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("voxa: {err:#}");
            ExitCode::from(exit_for(&err).code() as u8)
        }
    }
}

/// Logs go to stderr; `RUST_LOG` overrides the verbosity flags.
fn init_tracing(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    voxa::logging::init(default);
}
