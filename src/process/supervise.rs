//! The supervision loop: a process runs until it finishes, the call is cancelled or its time is
//! up; the grace periods around its end; its resource limits; and stopping everything it started
//! (the process group, and on Linux the rest of the session) while its leader is not yet reaped —
//! a reaped leader's pid, and with it the group id, can be handed to an unrelated process.

use std::future::Future;
use std::time::Duration;

use rustix::process::{kill_process_group, Pid, Signal, WaitId, WaitIdOptions};
use tokio_util::sync::CancellationToken;

use crate::config::ProcessLimits;
use crate::protocol::ErrorCode;

/// How often a child's exit is checked for while it runs.
const EXIT_POLL: Duration = Duration::from_millis(50);
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

/// Whether reading a process's output can stop after it exited, `since_exit` ago. Everything it
/// wrote is waiting by then, so the drain ends at end-of-file, or once `grace` has passed and a
/// look begun after the exit found nothing waiting: however late the reader gets to run, the
/// process's last words are read first. Something that escaped and keeps writing is cut off
/// after [`KILL_GRACE`].
pub(crate) fn drain_done(eof: bool, quiet_since_exit: bool, since_exit: Duration, grace: Duration) -> bool {
    eof || (quiet_since_exit && since_exit >= grace) || since_exit >= KILL_GRACE
}

/// Whether `fd` has something to read right now (data, or its end). A failed look counts as
/// something waiting, so the reader finds out what is wrong by reading.
pub(crate) fn output_waiting(fd: std::os::fd::RawFd) -> bool {
    let mut poll = [filedescriptor::pollfd { fd, events: filedescriptor::POLLIN, revents: 0 }];
    !matches!(filedescriptor::poll(&mut poll, Some(Duration::ZERO)), Ok(0))
}

/// Shell lines that lower the resource limits of the shell running them, soft and hard (so
/// nothing it starts can raise them again), to `limits` — never above what this process has.
/// `ulimit -u` is bash's name for the process limit and `-p` dash's; whichever the shell knows.
pub(crate) fn ulimit_lines(limits: &ProcessLimits) -> String {
    use rustix::process::{getrlimit, Resource};
    let lowered = |resource: Resource, wanted: u64| {
        let current = getrlimit(resource).maximum;
        (wanted > 0 && current.is_none_or(|hard| wanted < hard)).then_some(wanted)
    };
    let mut lines = String::new();
    if let Some(kib) = lowered(Resource::As, limits.max_address_space_mb.saturating_mul(1 << 20)) {
        lines.push_str(&format!("ulimit -v {}\n", kib >> 10));
    }
    if let Some(count) = lowered(Resource::Nproc, limits.max_processes) {
        lines.push_str(&format!("ulimit -u {count} 2>/dev/null || ulimit -p {count}\n"));
    }
    lines
}

/// True once the child `pid` has exited. It is not reaped: it stays a zombie, its pid and
/// process group reserved, until the caller waits for it.
pub(crate) fn has_exited(pid: u32) -> std::io::Result<bool> {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else { return Ok(true) };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    Ok(rustix::process::waitid(WaitId::Pid(pid), options)?.is_some())
}

/// Resolves once the child `pid` has exited, without reaping it (see [`has_exited`]); also when
/// it cannot be waited for at all (already reaped), so the caller's own wait answers. Polls: soon
/// at first, then every [`EXIT_POLL`].
pub(crate) async fn exited(pid: u32) {
    let mut interval = Duration::from_millis(1);
    while let Ok(false) = has_exited(pid) {
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(EXIT_POLL);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;

    /// The state letter of `/proc/<pid>/stat`.
    fn state(pid: u32) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(stat.rsplit_once(')')?.1.split_whitespace().next()?.to_owned())
    }

    #[tokio::test]
    async fn an_exited_leader_stays_unreaped_while_its_group_is_killed() {
        let mut leader = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 300 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(leader.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let straggler: u32 = line.trim().parse().unwrap();
        exited(leader.id()).await;
        assert!(has_exited(leader.id()).unwrap());
        // Still a zombie: its pid, the group's id, cannot have been handed to anyone else.
        assert_eq!(state(leader.id()).as_deref(), Some("Z"));
        assert!(is_running(straggler));
        kill_tree(leader.id(), false);
        assert!(leader.wait().unwrap().success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while is_running(straggler) {
            assert!(std::time::Instant::now() < deadline, "the group survived");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[test]
    fn a_late_reader_still_reads_what_the_process_wrote_last() {
        // On a loaded machine the reader may run again long after it saw the exit: the grace
        // having passed is not enough while nobody has looked at the output since.
        assert!(!drain_done(false, false, DRAIN_GRACE * 4, DRAIN_GRACE));
        assert!(!drain_done(false, true, DRAIN_GRACE / 2, DRAIN_GRACE));
        assert!(drain_done(false, true, DRAIN_GRACE, DRAIN_GRACE));
        assert!(drain_done(true, false, Duration::ZERO, DRAIN_GRACE));
        // Something that escaped and keeps writing does not hold the call forever.
        assert!(drain_done(false, false, KILL_GRACE, DRAIN_GRACE));
    }

    #[test]
    fn output_waiting_sees_data_and_the_end_of_a_stream() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!output_waiting(reader.as_raw_fd()));
        writer.write_all(b"last words").unwrap();
        assert!(output_waiting(reader.as_raw_fd()));
        let mut drained = [0u8; 16];
        let n = std::io::Read::read(&mut &reader, &mut drained).unwrap();
        assert_eq!(&drained[..n], b"last words");
        assert!(!output_waiting(reader.as_raw_fd()));
        drop(writer);
        assert!(output_waiting(reader.as_raw_fd()));
    }

    #[test]
    fn limits_become_ulimit_lines_and_zero_means_none() {
        let lines = ulimit_lines(&ProcessLimits { max_processes: 50, max_address_space_mb: 2 });
        assert!(lines.contains("ulimit -v 2048\n"), "{lines}");
        assert!(lines.contains("ulimit -u 50 2>/dev/null || ulimit -p 50\n"), "{lines}");
        assert_eq!(ulimit_lines(&ProcessLimits { max_processes: 0, max_address_space_mb: 0 }), "");
    }
}
