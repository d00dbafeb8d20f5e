//! The service manager: `systemctl --user` on Linux, `launchctl` on macOS, each call with no stdin
//! and its own words on failure.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};

#[cfg(target_os = "macos")]
use super::LAUNCHD_LABEL;
use super::UNIT_NAME;

/// What the service manager says about the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerState {
    /// `active`, `inactive`, `failed`, `activating`, … (systemd) or `running`, `not loaded` (launchd).
    pub state: String,
    pub pid: Option<u32>,
    pub enabled: Option<bool>,
}

/// Runs `systemctl --user ARGS`; a non-zero exit is an error carrying systemctl's own words.
pub(super) fn systemctl(args: &[&str]) -> Result<Output> {
    run_tool("systemctl", &[&["--user"], args].concat())
}

/// Runs a tool with no stdin and captured output; a non-zero exit is an error with its stderr.
pub(super) fn run_tool(program: &str, args: &[&str]) -> Result<Output> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not run {program} (is it installed and on PATH?)"))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        bail!("`{program} {}` failed ({}): {said}", args.join(" "), output.status);
    }
    Ok(output)
}

pub(super) fn systemd_start(changed: bool) -> Result<bool> {
    systemctl(&["daemon-reload"]).map_err(no_user_manager_hint)?;
    systemctl(&["enable", UNIT_NAME])?;
    // A changed file takes effect only on a restart; an unchanged one is left running.
    systemctl(&[if changed { "restart" } else { "start" }, UNIT_NAME])?;
    Ok(true)
}

pub(super) fn systemd_stop(present: bool) -> Result<()> {
    let stopped = systemctl(&["disable", "--now", UNIT_NAME]).map_err(no_user_manager_hint);
    // Without a file there is nothing of ours to stop: a manager that does not know the unit is fine.
    if present {
        stopped?;
    }
    Ok(())
}

pub(super) fn no_user_manager_hint(err: anyhow::Error) -> anyhow::Error {
    err.context(format!(
        "is a systemd user manager running for {}? (a desktop login starts one; `loginctl enable-linger {}` starts one at boot)",
        user_name(),
        user_name()
    ))
}

pub(super) fn systemd_state() -> Result<ManagerState> {
    let output = systemctl(&["show", UNIT_NAME, "--property=LoadState,ActiveState,SubState,MainPID,UnitFileState"])?;
    Ok(parse_systemctl_show(&String::from_utf8_lossy(&output.stdout)))
}

/// Reads `systemctl show` output (`Key=value` lines).
pub fn parse_systemctl_show(text: &str) -> ManagerState {
    let get = |key: &str| {
        text.lines().find_map(|line| line.strip_prefix(key).and_then(|rest| rest.strip_prefix('='))).unwrap_or("")
    };
    let state = match (get("LoadState"), get("ActiveState"), get("SubState")) {
        ("not-found", _, _) => "not loaded".to_owned(),
        (_, "", _) => "unknown".to_owned(),
        (_, active, sub) if !sub.is_empty() && sub != active => format!("{active} ({sub})"),
        (_, active, _) => active.to_owned(),
    };
    let pid = get("MainPID").parse::<u32>().ok().filter(|pid| *pid != 0);
    let enabled = match get("UnitFileState") {
        "enabled" | "enabled-runtime" | "linked" | "linked-runtime" | "alias" => Some(true),
        "disabled" | "masked" | "masked-runtime" | "static" | "indirect" => Some(false),
        _ => None,
    };
    ManagerState { state, pid, enabled }
}

/// Whether systemd keeps this user's manager running without a login session.
pub(super) fn linger_enabled() -> Option<bool> {
    let uid = rustix::process::getuid().as_raw().to_string();
    let output = run_tool("loginctl", &["show-user", &uid, "--property=Linger", "--value"]).ok()?;
    match String::from_utf8_lossy(&output.stdout).trim() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

pub(super) fn user_name() -> String {
    std::env::var("USER").ok().filter(|name| !name.is_empty()).unwrap_or_else(|| "$USER".to_owned())
}

/// `gui/<uid>`, the launchd domain of this user's login session.
#[cfg(target_os = "macos")]
pub(super) fn launchd_domain() -> String {
    format!("gui/{}", rustix::process::getuid().as_raw())
}

#[cfg(target_os = "macos")]
pub(super) fn launchd_start(file: &Path, log_file: &Path, changed: bool) -> Result<bool> {
    if let Some(dir) = log_file.parent() {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
    }
    let target = format!("{}/{LAUNCHD_LABEL}", launchd_domain());
    let loaded = run_tool("launchctl", &["print", &target]).is_ok();
    if loaded && changed {
        run_tool("launchctl", &["bootout", &target])?;
    }
    if !loaded || changed {
        run_tool("launchctl", &["bootstrap", &launchd_domain(), &file.display().to_string()])?;
    }
    run_tool("launchctl", &["enable", &target])?;
    run_tool("launchctl", &["kickstart", &target])?;
    Ok(true)
}

#[cfg(not(target_os = "macos"))]
pub(super) fn launchd_start(_file: &Path, _log_file: &Path, _changed: bool) -> Result<bool> {
    bail!("launchd runs only on macOS")
}

#[cfg(target_os = "macos")]
pub(super) fn launchd_stop() -> Result<()> {
    let target = format!("{}/{LAUNCHD_LABEL}", launchd_domain());
    if run_tool("launchctl", &["print", &target]).is_ok() {
        run_tool("launchctl", &["bootout", &target])?;
    }
    Ok(())
}

#[cfg(not(target_os = "macos"))]
pub(super) fn launchd_stop() -> Result<()> {
    bail!("launchd runs only on macOS")
}

#[cfg(target_os = "macos")]
pub(super) fn launchd_state() -> Result<ManagerState> {
    let target = format!("{}/{LAUNCHD_LABEL}", launchd_domain());
    let Ok(output) = run_tool("launchctl", &["print", &target]) else {
        return Ok(ManagerState { state: "not loaded".into(), pid: None, enabled: Some(false) });
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |key: &str| {
        text.lines().find_map(|line| line.trim().strip_prefix(key).and_then(|rest| rest.trim().strip_prefix('=')))
    };
    Ok(ManagerState {
        state: field("state").map(|s| s.trim().to_owned()).unwrap_or_else(|| "loaded".into()),
        pid: field("pid").and_then(|pid| pid.trim().parse().ok()),
        enabled: Some(true),
    })
}

#[cfg(not(target_os = "macos"))]
pub(super) fn launchd_state() -> Result<ManagerState> {
    bail!("launchd runs only on macOS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemctl_show_is_read() {
        let state = parse_systemctl_show(
            "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\nUnitFileState=enabled\n",
        );
        assert_eq!(state, ManagerState { state: "active (running)".into(), pid: Some(4242), enabled: Some(true) });
        let state = parse_systemctl_show("LoadState=not-found\nActiveState=inactive\nSubState=dead\nMainPID=0\n");
        assert_eq!(state, ManagerState { state: "not loaded".into(), pid: None, enabled: None });
    }
}
