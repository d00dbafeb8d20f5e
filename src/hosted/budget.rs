//! The operator's daily minutes budget for hosted calls (docs/PROTOCOL.md, "Hosted voice"): call
//! time is counted as calls run, the count starts at zero at UTC midnight, and it is kept in the
//! relay's state directory so a restart does not reset it.
//!
//! Decisions:
//! - Time is charged as a call goes (at least every [`CHARGE_EVERY`]), not only at its end, so a
//!   call is ended at the budget and a crash loses at most [`SAVE_EVERY`] of counted time.
//! - A call that runs past midnight charges the time after the last charge to the new day.
//! - A file that does not parse is refused at start (naming it, never guessing a count): the
//!   operator deletes it to start the day at zero.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::error::ConfigError;

/// The budget's file in the relay's state directory.
pub const BUDGET_FILE: &str = "live_budget.json";
/// Daily minutes of hosted calls unless the operator says otherwise.
pub const DEFAULT_MINUTES_PER_DAY: u64 = 600;
/// Longest time a running call goes uncharged.
pub const CHARGE_EVERY: Duration = Duration::from_secs(10);
/// Longest time charged time goes unsaved (a call's end is saved at once).
const SAVE_EVERY: Duration = Duration::from_secs(5);
const DAY_SECS: u64 = 86_400;

/// The day's call time against the operator's daily budget.
#[derive(Debug)]
pub struct Budget {
    /// Call time allowed per UTC day; `None` for no limit (time is still counted).
    daily: Option<Duration>,
    /// Where the count is kept; `None` keeps it in memory only.
    file: Option<PathBuf>,
    state: Mutex<Ledger>,
}

#[derive(Debug)]
struct Ledger {
    /// Days since the Unix epoch (UTC) the count is for.
    day: u64,
    used: Duration,
    saved_at: Option<Instant>,
}

/// The file's content.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    /// The UTC day, `YYYY-MM-DD`.
    day: String,
    used_ms: u64,
}

impl Budget {
    /// No limit and nothing kept: the count lives as long as the relay.
    pub fn unlimited() -> Budget {
        Budget {
            daily: None,
            file: None,
            state: Mutex::new(Ledger { day: today(), used: Duration::ZERO, saved_at: None }),
        }
    }

    /// A budget of `daily` call time per UTC day (`None`: no limit), counted in `file`: today's
    /// count is read back from it when it holds one.
    pub fn open(daily: Option<Duration>, file: Option<PathBuf>) -> anyhow::Result<Budget> {
        let today = today();
        let used = match &file {
            Some(path) => read_used(path, today)?,
            None => Duration::ZERO,
        };
        Ok(Budget { daily, file, state: Mutex::new(Ledger { day: today, used, saved_at: None }) })
    }

    /// The daily limit, if there is one.
    pub fn daily(&self) -> Option<Duration> {
        self.daily
    }

    /// Time used today and time left (`None`: no limit).
    pub fn state(&self) -> (Duration, Option<Duration>) {
        let mut ledger = self.ledger();
        ledger.roll(today());
        (ledger.used, self.left(&ledger))
    }

    /// Whether today's budget is spent.
    pub fn spent(&self) -> bool {
        self.state().1 == Some(Duration::ZERO)
    }

    /// Charges `elapsed` call time to today; saves when it is time to (`end`: a call ended, save
    /// now). Returns time used today and time left.
    pub fn charge(&self, elapsed: Duration, end: bool) -> (Duration, Option<Duration>) {
        self.charge_on(today(), elapsed, end, |_, _| {})
    }

    /// [`Budget::charge`], telling `report` the new state while no other charge can come between
    /// (so gauges fed from it never go back to an older count).
    pub fn charge_reporting(
        &self,
        elapsed: Duration,
        end: bool,
        report: impl FnOnce(Duration, Option<Duration>),
    ) -> Option<Duration> {
        self.charge_on(today(), elapsed, end, report).1
    }

    fn charge_on(
        &self,
        day: u64,
        elapsed: Duration,
        end: bool,
        report: impl FnOnce(Duration, Option<Duration>),
    ) -> (Duration, Option<Duration>) {
        let mut ledger = self.ledger();
        ledger.roll(day);
        ledger.used = ledger.used.saturating_add(elapsed);
        let due = end || ledger.saved_at.is_none_or(|at| at.elapsed() >= SAVE_EVERY);
        if let (true, Some(path)) = (due, &self.file) {
            // Saved under the lock, so the file never goes back to an older count.
            let saved = Saved { day: day_name(ledger.day), used_ms: ledger.used.as_millis() as u64 };
            match serde_json::to_vec(&saved)
                .context("encoding the budget")
                .and_then(|bytes| crate::state::write_atomic(path, &bytes))
            {
                Ok(()) => ledger.saved_at = Some(Instant::now()),
                Err(err) => warn!(err = %format_args!("{err:#}"), "could not save the hosted voice budget"),
            }
        }
        let state = (ledger.used, self.left(&ledger));
        report(state.0, state.1);
        state
    }

    fn left(&self, ledger: &Ledger) -> Option<Duration> {
        self.daily.map(|daily| daily.saturating_sub(ledger.used))
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Ledger {
    /// A new UTC day starts at zero.
    fn roll(&mut self, day: u64) {
        if day != self.day {
            self.day = day;
            self.used = Duration::ZERO;
        }
    }
}

/// Today's count from the file: zero when it is missing or from another day.
fn read_used(path: &Path, today: u64) -> anyhow::Result<Duration> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Duration::ZERO),
        Err(err) => return Err(err).with_context(|| format!("could not read {}", path.display())),
    };
    let unreadable = || {
        ConfigError::new(format!(
            "{} is not a hosted voice budget this relay wrote; delete it to start today's count at zero",
            path.display()
        ))
    };
    let saved: Saved = serde_json::from_slice(&bytes).map_err(|_| unreadable())?;
    let day = day_number(&saved.day).ok_or_else(unreadable)?;
    Ok(if day == today { Duration::from_millis(saved.used_ms) } else { Duration::ZERO })
}

/// Days since the Unix epoch, UTC.
fn today() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs() / DAY_SECS)
}

fn day_name(day: u64) -> String {
    let midnight = UNIX_EPOCH + Duration::from_secs(day.saturating_mul(DAY_SECS));
    humantime::format_rfc3339_seconds(midnight).to_string()[..10].to_owned()
}

fn day_number(name: &str) -> Option<u64> {
    if name.len() != 10 {
        return None;
    }
    let midnight = humantime::parse_rfc3339(&format!("{name}T00:00:00Z")).ok()?;
    Some(midnight.duration_since(UNIX_EPOCH).ok()?.as_secs() / DAY_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_named_and_read_back_in_utc() {
        assert_eq!(day_name(0), "1970-01-01");
        assert_eq!(day_name(20_423), "2025-12-01");
        assert_eq!(day_number("2025-12-01"), Some(20_423));
        for bad in ["2025-12-1", "2025-13-01", "yesterday", "2025-12-01T00:00:00Z"] {
            assert_eq!(day_number(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_count_starts_at_zero_each_utc_day_and_is_left_against_the_limit() {
        let budget = Budget::open(Some(Duration::from_secs(60)), None).unwrap();
        let day = today();
        assert_eq!(
            budget.charge_on(day, Duration::from_secs(45), false, |_, _| {}),
            (Duration::from_secs(45), Some(Duration::from_secs(15)))
        );
        assert_eq!(
            budget.charge_on(day, Duration::from_secs(30), false, |_, _| {}).1,
            Some(Duration::ZERO),
            "never below zero"
        );
        assert!(budget.spent());
        let (used, left) = budget.charge_on(day + 1, Duration::from_secs(5), false, |_, _| {});
        assert_eq!((used, left), (Duration::from_secs(5), Some(Duration::from_secs(55))), "midnight starts anew");
        assert_eq!(Budget::unlimited().charge(Duration::from_secs(9), true), (Duration::from_secs(9), None));
    }

    #[test]
    fn todays_count_survives_a_restart_and_yesterdays_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(BUDGET_FILE);
        let budget = Budget::open(Some(Duration::from_secs(600)), Some(file.clone())).unwrap();
        budget.charge(Duration::from_millis(1_500), false);
        budget.charge(Duration::from_millis(2_000), true);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let again = Budget::open(Some(Duration::from_secs(600)), Some(file.clone())).unwrap();
        assert_eq!(again.state(), (Duration::from_millis(3_500), Some(Duration::from_millis(596_500))));

        let yesterday = Saved { day: day_name(today() - 1), used_ms: 99_000 };
        std::fs::write(&file, serde_json::to_vec(&yesterday).unwrap()).unwrap();
        assert_eq!(Budget::open(None, Some(file.clone())).unwrap().state(), (Duration::ZERO, None));

        for junk in ["", "{}", r#"{"day":"today","used_ms":1}"#, r#"{"day":"2025-12-01","used_ms":-1}"#] {
            std::fs::write(&file, junk).unwrap();
            let err = Budget::open(None, Some(file.clone())).unwrap_err().to_string();
            assert!(err.contains(BUDGET_FILE) && err.contains("delete it"), "{junk}: {err}");
        }
    }
}
