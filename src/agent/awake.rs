//! A laptop that stays awake while it works: while a tool call runs (a command, a coding agent),
//! an approval waits, a coding-agent turn runs or a terminal program is in use, the agent holds
//! the system's sleep inhibitor, and lets it go once all of that is over.
//!
//! On Linux the inhibitor is logind's: `org.freedesktop.login1.Manager.Inhibit("sleep", "voxa",
//! why, "block")` on the system bus, whose answer is a file descriptor that is the lock — held
//! while busy, closed when idle (what `systemd-inhibit` does around its command). On macOS it is
//! a `caffeinate -i -w <voxa's pid>` child, killed when idle (and gone with voxa if voxa dies).
//! Where there is neither (a container, a machine without logind) the agent says so once and
//! goes on; `status` shows why.
//!
//! The watch looks at the agent's state every [`AwakeOptions::interval`]: the toolbox's calls,
//! the broker's open approvals, the sessions' states and the terminals' last use, so none of those
//! modules knows about sleep.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::context::AgentContext;
pub use super::power::{on_battery, AwakeShown};
use crate::protocol::SessionState;

/// A terminal used (written, typed into, read) this recently counts as running.
pub const TERMINAL_BUSY_WINDOW: Duration = Duration::from_secs(60);

/// Where the agent asks for the inhibitor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Inhibitor {
    /// The system's own: logind on the system bus (Linux), `caffeinate` (macOS).
    #[default]
    System,
    /// logind at this D-Bus address (`unix:path=…`): the tests' bus.
    Bus(String),
    /// None: the agent never holds one (and says so in `status`).
    Off,
}

/// How the agent keeps the laptop awake.
#[derive(Clone, Debug)]
pub struct AwakeOptions {
    pub inhibitor: Inhibitor,
    /// How often the agent's state is looked at; the lock follows within one interval.
    pub interval: Duration,
    /// Where the power supplies are described (`/sys/class/power_supply` on Linux).
    pub power_supply: PathBuf,
}

impl Default for AwakeOptions {
    fn default() -> Self {
        AwakeOptions {
            inhibitor: Inhibitor::System,
            interval: Duration::from_secs(1),
            power_supply: PathBuf::from("/sys/class/power_supply"),
        }
    }
}

/// What keeps the agent busy right now, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Busy {
    pub calls: usize,
    pub approvals: usize,
    pub turns: usize,
    pub terminals: usize,
}

impl Busy {
    /// What `ctx` is doing now. The sessions' states come from their store, read on a blocking
    /// thread.
    pub async fn of(ctx: &AgentContext) -> Busy {
        let calls = ctx.toolbox().calls_in_flight().max(ctx.status.calls_in_flight.load(Ordering::Relaxed));
        let turns = match ctx.sessions.clone() {
            Some(host) => tokio::task::spawn_blocking(move || working_turns(&host)).await.unwrap_or(0),
            None => 0,
        };
        let terminals = ctx.terminals.as_ref().map_or(0, |host| host.in_use(TERMINAL_BUSY_WINDOW));
        Busy { calls, approvals: ctx.approvals.open().len(), turns, terminals }
    }

    pub fn is_busy(&self) -> bool {
        *self != Busy::default()
    }

    /// "a command runs, an approval waits": the reason logind and `status` show.
    pub fn why(&self) -> String {
        let mut parts = Vec::new();
        if self.calls > 0 {
            parts.push(if self.calls == 1 {
                "a command runs".to_owned()
            } else {
                format!("{} commands run", self.calls)
            });
        }
        if self.approvals > 0 {
            parts.push(if self.approvals == 1 {
                "an approval waits".to_owned()
            } else {
                format!("{} approvals wait", self.approvals)
            });
        }
        if self.turns > 0 {
            parts.push(if self.turns == 1 {
                "a coding-agent turn runs".to_owned()
            } else {
                format!("{} coding-agent turns run", self.turns)
            });
        }
        if self.terminals > 0 {
            parts.push(if self.terminals == 1 {
                "a terminal is in use".to_owned()
            } else {
                format!("{} terminals are in use", self.terminals)
            });
        }
        parts.join(", ")
    }
}

/// Coding-agent sessions starting, in a turn, or waiting on a question.
fn working_turns(host: &crate::sessions::SessionHost) -> usize {
    let working =
        |state: &SessionState| matches!(state, SessionState::Starting | SessionState::Working | SessionState::Waiting);
    host.sessions().map_or(0, |sessions| sessions.iter().filter(|info| working(&info.state)).count())
}

/// The lock itself: dropping it lets the laptop sleep again.
enum Lock {
    /// logind's inhibitor descriptor.
    Fd(#[allow(dead_code)] OwnedFd),
    /// A `caffeinate` child (macOS), killed when dropped.
    #[allow(dead_code)]
    Child(tokio::process::Child),
}

/// Watches `ctx` until `cancel` and holds the inhibitor while it is busy.
pub async fn watch(ctx: Arc<AgentContext>, options: AwakeOptions, cancel: CancellationToken) {
    let shown = ctx.status.awake.clone();
    shown.read_battery_at(options.power_supply.clone());
    if options.inhibitor == Inhibitor::Off {
        shown.update(|s| s.unavailable = Some("turned off".into()));
        return;
    }
    let mut ticks = tokio::time::interval(options.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lock: Option<Lock> = None;
    let mut said_unavailable = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticks.tick() => {}
        }
        let busy = Busy::of(&ctx).await;
        match (busy.is_busy(), lock.is_some()) {
            (true, false) => {
                let why = busy.why();
                match acquire(&options.inhibitor, &why).await {
                    Ok((taken, how)) => {
                        info!(how, "keeping the laptop awake: {why}");
                        lock = Some(taken);
                        shown.update(|s| {
                            s.held = true;
                            s.why = Some(why);
                            s.since = Some(unix_secs());
                            s.how = Some(how.to_owned());
                            s.unavailable = None;
                        });
                    }
                    Err(err) => {
                        let reason = format!("{err:#}");
                        if !said_unavailable {
                            warn!("the laptop may sleep while voxa works: {reason}");
                            said_unavailable = true;
                        }
                        shown.update(|s| s.unavailable = Some(reason));
                    }
                }
            }
            (true, true) => shown.update(|s| s.why = Some(busy.why())),
            (false, true) => {
                lock = None;
                info!("the laptop may sleep again");
                shown.update(|s| {
                    s.held = false;
                    s.why = None;
                    s.since = None;
                });
            }
            (false, false) => {}
        }
    }
    drop(lock);
    shown.update(|s| s.held = false);
}

/// Takes the inhibitor, saying how.
async fn acquire(inhibitor: &Inhibitor, why: &str) -> Result<(Lock, &'static str)> {
    match inhibitor {
        Inhibitor::Bus(address) => {
            let connection = zbus::connection::Builder::address(address.as_str())
                .context("bad D-Bus address")?
                .build()
                .await
                .context("no D-Bus at the inhibitor's address")?;
            Ok((Lock::Fd(logind_inhibit(&connection, why).await?), "logind"))
        }
        Inhibitor::System => system_lock(why).await,
        Inhibitor::Off => anyhow::bail!("turned off"),
    }
}

#[cfg(not(target_os = "macos"))]
async fn system_lock(why: &str) -> Result<(Lock, &'static str)> {
    let connection = zbus::Connection::system().await.context("no system D-Bus (no logind here)")?;
    Ok((Lock::Fd(logind_inhibit(&connection, why).await?), "logind"))
}

#[cfg(target_os = "macos")]
async fn system_lock(_why: &str) -> Result<(Lock, &'static str)> {
    // -i: no idle sleep; -w: caffeinate ends with voxa even if voxa is killed.
    let child = tokio::process::Command::new("caffeinate")
        .args(["-i", "-w", &std::process::id().to_string()])
        .kill_on_drop(true)
        .spawn()
        .context("could not start caffeinate")?;
    Ok((Lock::Child(child), "caffeinate"))
}

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1",
    gen_blocking = false
)]
trait Manager {
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<zbus::zvariant::OwnedFd>;
}

/// `Inhibit("sleep", "voxa", why, "block")`: the descriptor is the lock.
async fn logind_inhibit(connection: &zbus::Connection, why: &str) -> Result<OwnedFd> {
    let manager = ManagerProxy::new(connection).await.context("logind is not on this bus")?;
    let fd = manager.inhibit("sleep", "voxa", why, "block").await.context("logind refused the sleep inhibitor")?;
    Ok(fd.into())
}

fn unix_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_what_runs() {
        assert!(!Busy::default().is_busy());
        assert_eq!(Busy { calls: 1, ..Busy::default() }.why(), "a command runs");
        let busy = Busy { calls: 2, approvals: 1, turns: 1, terminals: 3 };
        assert_eq!(busy.why(), "2 commands run, an approval waits, a coding-agent turn runs, 3 terminals are in use");
    }
}
