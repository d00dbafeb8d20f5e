//! The home: a private directory, private files, well-formed secrets, a valid `config.toml`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::Check;
use crate::config::Config;
use crate::secret::Secret;
use crate::state::{read_if_exists, read_text_if_exists, AUDIT_DIR, AUTH_TOKEN_FILE, CONFIG_FILE, RELAY_CODE_FILE};

pub(super) fn check_home(home: &Path) -> Check {
    const NAME: &str = "home";
    match std::fs::metadata(home) {
        Err(_) => {
            Check::fail(NAME, format!("{} does not exist: this machine is not paired", home.display()), "voxa pair")
        }
        Ok(meta) if !meta.is_dir() => Check::fail(
            NAME,
            format!("{} is not a directory", home.display()),
            "move it away, then run voxa pair (or point VOXA_HOME elsewhere)",
        ),
        Ok(meta) if meta.mode() & 0o077 != 0 => Check::fail(
            NAME,
            format!("{} has unsafe permissions {:04o}", home.display(), meta.mode() & 0o777),
            format!("chmod 700 {}", home.display()),
        ),
        Ok(meta) => Check::ok(NAME, format!("{} is private ({:04o})", home.display(), meta.mode() & 0o777)),
    }
}

/// Every file in the home (and in `audit/`) must be private: voxa refuses to start otherwise.
pub(super) fn check_files(home: &Path) -> Check {
    const NAME: &str = "permissions";
    let mut loose_files = Vec::new();
    let mut loose_dirs = Vec::new();
    let mut seen = 0;
    for dir in [home.to_owned(), home.join(AUDIT_DIR)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            seen += 1;
            if meta.mode() & 0o077 != 0 {
                let path = entry.path().display().to_string();
                if meta.is_dir() {
                    loose_dirs.push(path);
                } else {
                    loose_files.push(path);
                }
            }
        }
    }
    if loose_files.is_empty() && loose_dirs.is_empty() {
        return Check::ok(NAME, format!("{seen} file(s) in the home are private"));
    }
    let mut fixes = Vec::new();
    if !loose_files.is_empty() {
        fixes.push(format!("chmod 600 {}", loose_files.join(" ")));
    }
    if !loose_dirs.is_empty() {
        fixes.push(format!("chmod 700 {}", loose_dirs.join(" ")));
    }
    let all = [loose_files, loose_dirs].concat();
    Check::fail(NAME, format!("group or others can access {}", all.join(", ")), fixes.join(" && "))
}

/// Reads both secrets without the home's lock and without finishing a rotation: doctor changes
/// nothing. Only their shape is reported.
pub(super) fn check_secrets(home: &Path) -> Check {
    const NAME: &str = "secrets";
    if !home.is_dir() {
        return Check::fail(NAME, "no relay code or auth token yet", "voxa pair");
    }
    let mut missing = Vec::new();
    for name in [RELAY_CODE_FILE, AUTH_TOKEN_FILE] {
        let path = home.join(name);
        match read_if_exists(&path) {
            Ok(None) => missing.push(name),
            Err(err) => return Check::fail(NAME, format!("{err:#}"), "check its owner and permissions"),
            Ok(Some(bytes)) => {
                let parsed = std::str::from_utf8(&bytes)
                    .map_err(|_| "not text".to_owned())
                    .and_then(|text| Secret::parse_hex128(text).map(drop).map_err(|err| err.to_string()));
                if let Err(why) = parsed {
                    return Check::fail(
                        NAME,
                        format!("{} is not a valid secret ({why})", path.display()),
                        "voxa pair --rotate (the phone must scan the new code)",
                    );
                }
            }
        }
    }
    if !missing.is_empty() {
        return Check::fail(NAME, format!("missing: {}", missing.join(", ")), "voxa pair");
    }
    if home.join(".rotation").exists() {
        return Check::warn(
            NAME,
            "a rotation was interrupted; the next voxa command finishes it",
            "voxa pair (prints the pairing link of the finished rotation)",
        );
    }
    Check::ok(NAME, "relay code and auth token present and well-formed")
}

pub(super) fn check_config(home: &Path) -> (Check, Config) {
    const NAME: &str = "config";
    let path = home.join(CONFIG_FILE);
    match read_text_if_exists(&path) {
        Ok(None) => (Check::ok(NAME, format!("{} absent; defaults apply", path.display())), Config::default()),
        Err(err) => (Check::fail(NAME, format!("{err:#}"), "check its owner and permissions"), Config::default()),
        Ok(Some(text)) => match Config::from_toml(&text) {
            Ok(config) => (Check::ok(NAME, format!("{} is valid", path.display())), config),
            Err(err) => (
                Check::fail(NAME, format!("{}: {}", path.display(), err.0), format!("edit {}", path.display())),
                Config::default(),
            ),
        },
    }
}
