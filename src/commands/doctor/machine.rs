//! What the tools need from this machine: a display for screenshots, the coding agents on
//! `PATH`, room for open files.

use super::{Check, NET_TIMEOUT};
use crate::config::Config;

/// Open-file soft limit below which doctor warns.
pub const MIN_OPEN_FILES: u64 = 1024;

/// A display the screenshot tool can capture.
pub(super) async fn check_display() -> Check {
    const NAME: &str = "display";
    if cfg!(target_os = "macos") {
        return Check::ok(
            NAME,
            "screenshots use screencapture; macOS asks once for the Screen Recording permission (System Settings → Privacy & Security), which cannot be read from here",
        );
    }
    let display = std::env::var("DISPLAY").ok().filter(|d| !d.is_empty());
    let Some(display) = display else {
        let wayland = std::env::var_os("WAYLAND_DISPLAY").is_some();
        let why = if wayland { "Wayland without DISPLAY (no XWayland)" } else { "DISPLAY is not set" };
        return Check::warn(
            NAME,
            format!("{why}: the screenshot tool answers unavailable"),
            "run voxa inside your desktop session (for the service: systemctl --user import-environment DISPLAY, then restart it)",
        );
    };
    let probe = display.clone();
    let connected = tokio::task::spawn_blocking(move || {
        x11rb::connect(Some(&probe)).map(|(conn, screen)| {
            let root = &x11rb::connection::Connection::setup(&conn).roots[screen];
            (root.width_in_pixels, root.height_in_pixels)
        })
    });
    match tokio::time::timeout(NET_TIMEOUT, connected).await {
        Ok(Ok(Ok((width, height)))) => Check::ok(NAME, format!("X display {display} answers ({width}x{height})")),
        Ok(Ok(Err(err))) => Check::warn(
            NAME,
            format!("cannot connect to X display {display}: {err}"),
            "check DISPLAY and that the X server lets this user in (xhost, XAUTHORITY)",
        ),
        _ => Check::warn(NAME, format!("X display {display} did not answer"), "check DISPLAY"),
    }
}

/// `claude` and every coding agent named in `config.toml`, on PATH.
pub(super) fn check_coding_agents(config: &Config) -> Vec<Check> {
    const NAME: &str = "coding agents";
    let path = std::env::var_os("PATH");
    let mut programs = vec![("claude".to_owned(), crate::tools::default_claude().program)];
    programs.extend(
        config.agents.iter().filter(|(name, _)| name.as_str() != "claude").map(|(n, a)| (n.clone(), a.program.clone())),
    );
    if let Some(custom) = config.agents.get("claude") {
        programs[0].1 = custom.program.clone();
    }
    let (found, missing): (Vec<_>, Vec<_>) =
        programs.into_iter().partition(|(_, program)| crate::tools::find_program(program, path.as_deref()).is_some());
    let names = |list: &[(String, String)]| list.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ");
    if missing.is_empty() {
        return vec![Check::ok(NAME, format!("on PATH: {}", names(&found)))];
    }
    let programs = missing.iter().map(|(_, program)| program.as_str()).collect::<Vec<_>>().join(", ");
    vec![Check::warn(
        NAME,
        format!("not on PATH: {programs} (coding_agent answers unavailable for {})", names(&missing)),
        "install it (Claude Code: npm install -g @anthropic-ai/claude-code) or fix `program` under [agents] in config.toml",
    )]
}

pub(super) fn check_open_files() -> Check {
    const NAME: &str = "open files";
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let show = |value: Option<u64>| value.map_or("unlimited".to_owned(), |v| v.to_string());
    match limit.current {
        Some(soft) if soft < MIN_OPEN_FILES => Check::warn(
            NAME,
            format!("soft limit {soft} (hard {}): many parallel calls may run out", show(limit.maximum)),
            format!(
                "ulimit -n {} in the shell that starts voxa (LimitNOFILE= for the service)",
                MIN_OPEN_FILES.max(limit.maximum.unwrap_or(0).min(65536))
            ),
        ),
        soft => Check::ok(NAME, format!("soft limit {}, hard {}", show(soft), show(limit.maximum))),
    }
}
