//! What the tools need from this machine: a display for screenshots and the coding agents on
//! `PATH` — as the running agent sees them, asked over its `status`, or as this shell sees them
//! when no agent runs — and room for open files.

use super::{Check, NET_TIMEOUT};
use crate::config::Config;
use crate::protocol::{AgentSees, CodingAgentSeen};

/// Open-file soft limit below which doctor warns.
pub const MIN_OPEN_FILES: u64 = 1024;

/// Whose environment a check looked at: the running agent's (from its `status`), or, when no
/// agent runs, this shell's.
#[derive(Clone, Copy)]
pub(super) enum Seen<'a> {
    Agent(&'a AgentSees),
    Shell,
}

impl Seen<'_> {
    fn whose(self) -> &'static str {
        match self {
            Seen::Agent(_) => "the running agent's",
            Seen::Shell => "this shell's",
        }
    }

    /// Said after a message about this shell: why it was not the agent's.
    fn note(self) -> &'static str {
        match self {
            Seen::Agent(_) => "",
            Seen::Shell => " (no agent is running)",
        }
    }
}

/// A display the screenshot tool can capture: the agent's `DISPLAY`, probed from here.
pub(super) async fn check_display(seen: Seen<'_>) -> Check {
    const NAME: &str = "display";
    if cfg!(target_os = "macos") {
        return Check::ok(
            NAME,
            "screenshots use screencapture; macOS asks once for the Screen Recording permission (System Settings → Privacy & Security), which cannot be read from here",
        );
    }
    let (display, wayland) = match seen {
        Seen::Agent(sees) => (sees.display.clone(), sees.wayland),
        Seen::Shell => {
            (std::env::var("DISPLAY").ok().filter(|d| !d.is_empty()), std::env::var_os("WAYLAND_DISPLAY").is_some())
        }
    };
    let whose = seen.whose();
    let Some(display) = display else {
        let why = if wayland { "Wayland without DISPLAY (no XWayland)" } else { "DISPLAY is not set" };
        let fix = match seen {
            Seen::Agent(_) => "restart the agent inside your desktop session (for the service: systemctl --user import-environment DISPLAY, then systemctl --user restart voxa.service)",
            Seen::Shell => "run voxa inside your desktop session (for the service: systemctl --user import-environment DISPLAY, then restart it)",
        };
        return Check::warn(
            NAME,
            format!("{why} in {whose} environment: the screenshot tool answers unavailable{}", seen.note()),
            fix,
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
        Ok(Ok(Ok((width, height)))) => {
            Check::ok(NAME, format!("X display {display} ({whose} DISPLAY) answers ({width}x{height}){}", seen.note()))
        }
        Ok(Ok(Err(err))) => Check::warn(
            NAME,
            format!("cannot connect to X display {display} ({whose} DISPLAY): {err}"),
            "check DISPLAY and that the X server lets this user in (xhost, XAUTHORITY)",
        ),
        _ => Check::warn(NAME, format!("X display {display} ({whose} DISPLAY) did not answer"), "check DISPLAY"),
    }
}

/// `claude` and every coding agent named in `config.toml`, on the agent's `PATH`.
pub(super) fn check_coding_agents(config: &Config, seen: Seen<'_>) -> Vec<Check> {
    const NAME: &str = "coding agents";
    let programs = match seen {
        Seen::Agent(sees) => sees.coding_agents.clone(),
        Seen::Shell => crate::tools::coding_agents_seen(config, std::env::var_os("PATH").as_deref()),
    };
    let (found, missing): (Vec<CodingAgentSeen>, Vec<CodingAgentSeen>) =
        programs.into_iter().partition(|agent| agent.found);
    let names = |list: &[CodingAgentSeen]| list.iter().map(|agent| agent.name.as_str()).collect::<Vec<_>>().join(", ");
    let whose = seen.whose();
    if missing.is_empty() {
        return vec![Check::ok(NAME, format!("on {whose} PATH: {}{}", names(&found), seen.note()))];
    }
    let programs = missing.iter().map(|agent| agent.program.as_str()).collect::<Vec<_>>().join(", ");
    let fix = match seen {
        Seen::Agent(_) => "install it, or give the agent a PATH that holds it (for the service: systemctl --user show-environment; systemctl --user set-environment PATH=…, then restart it), or fix `program` under [agents] in config.toml",
        Seen::Shell => "install it (Claude Code: npm install -g @anthropic-ai/claude-code) or fix `program` under [agents] in config.toml",
    };
    vec![Check::warn(
        NAME,
        format!(
            "not on {whose} PATH: {programs} (coding_agent answers unavailable for {}){}",
            names(&missing),
            seen.note()
        ),
        fix,
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
