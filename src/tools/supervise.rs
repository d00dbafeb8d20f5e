//! Supervising the processes tools start (`run_command`, `coding_agent`): one loop that lets a
//! process run until it finishes, the call is cancelled or its time is up, the grace periods
//! around its end, and stopping everything it started (the process group, and on Linux the rest
//! of the session).

use std::future::Future;
use std::time::Duration;

use rustix::process::{kill_process_group, Pid, Signal};
use tokio_util::sync::CancellationToken;

use crate::protocol::ErrorCode;

/// After SIGKILL, how long a tool's process gets to be reaped before it is given up on.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(5);
/// After a tool's process exits, how long output still in flight is awaited.
pub(crate) const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Why a supervised process was stopped before it finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Cancelled,
    TimedOut,
}

impl Stop {
    /// The error code the call is answered with.
    pub(crate) fn code(self) -> ErrorCode {
        match self {
            Stop::Cancelled => ErrorCode::Cancelled,
            Stop::TimedOut => ErrorCode::Timeout,
        }
    }
}

/// Runs `work` (a process and the reading of its output) until it finishes, `cancel` fires or
/// `timeout` passes. A finished process wins a tie; the caller kills the process on `Err`.
pub(crate) async fn supervise<T>(
    work: impl Future<Output = T>,
    cancel: &CancellationToken,
    timeout: Duration,
) -> Result<T, Stop> {
    tokio::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => Ok(done),
        _ = cancel.cancelled() => Err(Stop::Cancelled),
        _ = tokio::time::sleep(timeout) => Err(Stop::TimedOut),
    }
}

/// Sends SIGKILL to the process group led by `leader`. With `whole_session` (the leader also leads
/// a session, as a PTY's shell does) every process still in that session goes too, including
/// jobs that moved to another process group. Processes that left the session (`setsid`, daemons)
/// are out of reach by design of the operating system.
pub(crate) fn kill_tree(leader: u32, whole_session: bool) {
    let Some(pid) = i32::try_from(leader).ok().and_then(Pid::from_raw) else { return };
    // ESRCH (nothing left) is the normal answer once everything has exited.
    let _ = kill_process_group(pid, Signal::KILL);
    if whole_session {
        kill_session(pid);
    }
}

#[cfg(target_os = "linux")]
fn kill_session(session: Pid) {
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()).and_then(Pid::from_raw)
        else {
            continue;
        };
        // Read from /proc rather than getsid(2): kernel threads have session 0, which the
        // syscall wrapper does not expect.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_pid())) else { continue };
        if stat_field(&stat, 3) == Some(session.as_raw_pid()) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
}

/// A numeric field of `/proc/<pid>/stat` after the command name: 0 is the state, 3 the session.
#[cfg(target_os = "linux")]
fn stat_field(stat: &str, index: usize) -> Option<i32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(index)?.parse().ok()
}

#[cfg(not(target_os = "linux"))]
fn kill_session(_session: Pid) {}

/// True while a process with this pid exists and is not a zombie.
#[cfg(test)]
pub(crate) fn is_running(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else { return false };
    if rustix::process::test_kill_process(pid).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => true,
    }
}
