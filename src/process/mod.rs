//! Supervising the processes voxa starts — `run_command`, `coding_agent`, the coding-agent
//! sessions and the terminals: their resource limits, one loop that lets a process run until it
//! finishes, is cancelled or runs out of time, the grace periods around its end, stopping
//! everything it started while its leader is not yet reaped ([`supervise`]), and reading what it
//! writes in bounded lines ([`io`]).

pub(crate) mod io;
pub(crate) mod supervise;

pub(crate) use io::{exit_code, read_capped, GroupGuard, LineReader};
#[cfg(test)]
pub(crate) use supervise::is_running;
pub(crate) use supervise::{
    drain_done, exited, has_exited, kill_tree, output_waiting, supervise, ulimit_lines, Stop, DRAIN_GRACE, KILL_GRACE,
};
