use std::process::ExitCode;

use clap::Parser;
use voxa::cli::Cli;
use voxa::error::{exit_for, is_broken_pipe, Exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { Exit::Usage.code() as u8 } else { 0 });
        }
    };
    init_tracing(cli.verbose, cli.quiet);
    match voxa::commands::execute(cli) {
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
