//! `voxa completions`: a shell completion script generated from the command line definition.

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::Cli;

/// Writes the completion script for `shell`.
pub fn print_completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) -> Result<()> {
    clap_complete::generate(shell, &mut Cli::command(), "voxa", out);
    Ok(())
}
