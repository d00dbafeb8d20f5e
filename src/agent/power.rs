//! What `status` shows of the sleep inhibitor ([`super::awake`] keeps it) and of the battery,
//! read from `/sys/class/power_supply` when status is asked.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::protocol::AwakeStatus;

/// The status `voxa status` and the page show, shared with the watch.
#[derive(Debug, Default)]
pub struct AwakeShown {
    status: Mutex<AwakeStatus>,
    /// Where the battery is read when status is asked; `None` before the watch starts.
    power_supply: Mutex<Option<PathBuf>>,
}

impl AwakeShown {
    /// From now on, `status` reads the battery in `dir`.
    pub(super) fn read_battery_at(&self, dir: PathBuf) {
        if let Ok(mut kept) = self.power_supply.lock() {
            *kept = Some(dir);
        }
    }

    /// What `status` shows: the lock, and whether the laptop runs on its battery now.
    pub fn snapshot(&self) -> AwakeStatus {
        let mut shown = self.status.lock().map(|s| s.clone()).unwrap_or_default();
        if let Some(dir) = self.power_supply.lock().ok().and_then(|dir| dir.clone()) {
            shown.on_battery = on_battery(&dir);
        }
        shown
    }

    pub(super) fn update(&self, change: impl FnOnce(&mut AwakeStatus)) {
        if let Ok(mut shown) = self.status.lock() {
            change(&mut shown);
        }
    }
}

/// Whether this machine runs on its battery: a battery that says it is discharging, or batteries
/// and no mains supply online. `None` where there is no battery (a desktop, a container).
pub fn on_battery(dir: &Path) -> Option<bool> {
    let entries = std::fs::read_dir(dir).ok()?;
    let (mut batteries, mut discharging, mut mains, mut mains_online) = (0, false, 0, false);
    for entry in entries.flatten().take(64) {
        let path = entry.path();
        let read =
            |name: &str| std::fs::read_to_string(path.join(name)).map(|s| s.trim().to_owned()).unwrap_or_default();
        match read("type").as_str() {
            "Battery" => {
                batteries += 1;
                discharging |= read("status") == "Discharging";
            }
            "Mains" | "USB" => {
                mains += 1;
                mains_online |= read("online") == "1";
            }
            _ => {}
        }
    }
    (batteries > 0).then_some(discharging || (mains > 0 && !mains_online))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supply(dir: &Path, name: &str, files: &[(&str, &str)]) {
        let path = dir.join(name);
        std::fs::create_dir_all(&path).unwrap();
        for (file, text) in files {
            std::fs::write(path.join(file), format!("{text}\n")).unwrap();
        }
    }

    #[test]
    fn battery_is_read_from_the_power_supplies() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(on_battery(dir.path()), None, "no battery: a desktop");
        assert_eq!(on_battery(&dir.path().join("missing")), None);
        supply(dir.path(), "AC", &[("type", "Mains"), ("online", "1")]);
        supply(dir.path(), "BAT0", &[("type", "Battery"), ("status", "Charging")]);
        assert_eq!(on_battery(dir.path()), Some(false));
        supply(dir.path(), "AC", &[("type", "Mains"), ("online", "0")]);
        supply(dir.path(), "BAT0", &[("type", "Battery"), ("status", "Unknown")]);
        assert_eq!(on_battery(dir.path()), Some(true), "mains offline");
        supply(dir.path(), "AC", &[("type", "Mains"), ("online", "1")]);
        supply(dir.path(), "BAT0", &[("type", "Battery"), ("status", "Discharging")]);
        assert_eq!(on_battery(dir.path()), Some(true), "a discharging battery");
    }
}
