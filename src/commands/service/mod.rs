//! `voxa service`: keeps `voxa run` running at login — a systemd user unit on Linux, a launchd
//! agent on macOS. Both files are generated on any OS (so both are tested everywhere); only the
//! `systemctl`/`launchctl` calls depend on the platform. Neither file holds a secret: the agent
//! reads its secrets from its home when it starts.
//!
//! `files.rs` writes and reads the two service files; `manager.rs` drives `systemctl` and
//! `launchctl`; this file holds the subcommands.

mod files;
mod manager;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use super::Settings;
use crate::cli::ServiceCommand;
use crate::error::{ConfigError, Exit};
use crate::secret::Secret;

pub use files::{installed_file, launchd_log_file, launchd_plist, program_of, service_file, systemd_unit, ServiceSpec};
pub use manager::{parse_systemctl_show, ManagerState};

use files::user_dirs;
use manager::{
    launchd_start, launchd_state, launchd_stop, linger_enabled, systemctl, systemd_start, systemd_state, systemd_stop,
    user_name,
};

/// Name of the systemd user unit.
pub const UNIT_NAME: &str = "voxa.service";
/// Label of the launchd agent (also its file name, with `.plist`).
pub const LAUNCHD_LABEL: &str = "space.voxa.agent";

/// The service manager this build drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    Systemd,
    Launchd,
}

impl Platform {
    /// This machine's manager: launchd on macOS, systemd elsewhere.
    pub fn current() -> Platform {
        if cfg!(target_os = "macos") {
            Platform::Launchd
        } else {
            Platform::Systemd
        }
    }

    fn name(self) -> &'static str {
        match self {
            Platform::Systemd => "systemd",
            Platform::Launchd => "launchd",
        }
    }
}

/// `voxa service …`.
pub fn run_service(settings: &Settings, command: ServiceCommand) -> Result<Exit> {
    let platform = Platform::current();
    let (user_home, config_dir) = user_dirs()?;
    let file = service_file(platform, &user_home, &config_dir);
    match command {
        ServiceCommand::Install { workspace, ca_cert, relay_token, dry_run } => {
            let spec = spec_for(settings, workspace, ca_cert, launchd_log_file(&user_home))?;
            let relay_token = super::token_value(relay_token.as_deref());
            install(settings, platform, &file, &spec, relay_token.as_ref(), dry_run)
        }
        ServiceCommand::Uninstall { dry_run } => uninstall(settings, platform, &file, dry_run),
        ServiceCommand::Status => status(settings, platform, &file),
        ServiceCommand::Logs { follow, lines } => logs(settings, platform, &user_home, follow, lines),
    }
}

/// Everything the service will run with, checked now: a service that would fail at every login
/// is refused at install time.
fn spec_for(
    settings: &Settings,
    workspace: Option<PathBuf>,
    ca_cert: Option<PathBuf>,
    log_file: PathBuf,
) -> Result<ServiceSpec> {
    if settings.self_hosted {
        return Err(ConfigError::new(
            "a self-hosted service would need GEMINI_API_KEY in its environment, and voxa keeps secrets out of \
             service files; run `voxa --self-hosted` in a session instead",
        )
        .into());
    }
    let home = &settings.home;
    home.require_secrets().context("the service runs `voxa run`, which needs this machine paired")?;
    let config = home.load_config()?;
    let relay = settings.relay(&config)?;
    let current = std::env::current_dir().context("could not read the current directory")?;
    let absolute = |path: &Path| if path.is_absolute() { path.to_owned() } else { current.join(path) };
    let workspace = workspace.unwrap_or_else(|| current.clone());
    let workspace = workspace
        .canonicalize()
        .map_err(|err| ConfigError::new(format!("workspace {} is not usable: {err}", workspace.display())))?;
    let ca_cert = match ca_cert {
        Some(path) => {
            crate::net::dial::DialOptions::default().trust_pem_file(&path)?;
            Some(absolute(&path))
        }
        None => None,
    };
    let program = std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .context("could not find the path of this voxa binary")?;
    let spec = ServiceSpec {
        program,
        home: absolute(home.dir()),
        relay: relay.as_str().to_owned(),
        workspace,
        ca_cert,
        log_file,
    };
    spec.check()?;
    Ok(spec)
}

fn install(
    settings: &Settings,
    platform: Platform,
    file: &Path,
    spec: &ServiceSpec,
    relay_token: Option<&Secret>,
    dry_run: bool,
) -> Result<Exit> {
    let content = spec.render(platform);
    let existing = std::fs::read_to_string(file).ok();
    let changed = existing.as_deref() != Some(content.as_str());
    let mut value = json!({
        "platform": platform.name(),
        "file": file.display().to_string(),
        "command": spec.command_line(),
        "changed": changed,
        "dry_run": dry_run,
        "relay_token_saved": relay_token.is_some(),
    });
    if dry_run {
        value["content"] = Value::String(content.clone());
        settings.printer.result(&value, content)?;
        return Ok(Exit::Ok);
    }
    if let Some(parent) = file.parent() {
        // Directories voxa makes are its user's alone, like the home.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(parent)
            .with_context(|| format!("could not create {}", parent.display()))?;
    }
    if changed {
        crate::state::write_atomic(file, content.as_bytes())?;
    }
    // The service's environment holds no secret: the agent reads the token from its home.
    if let Some(token) = relay_token {
        settings.home.save_relay_token(token)?;
    }
    let started = match platform {
        Platform::Systemd => systemd_start(changed),
        Platform::Launchd => launchd_start(file, &spec.log_file, changed),
    }
    .with_context(|| format!("wrote {} but could not start the service", file.display()))?;
    let linger = (platform == Platform::Systemd).then(linger_enabled).flatten();
    value["started"] = Value::Bool(started);
    value["linger"] = json!(linger);
    let human = installed_text(settings, file, spec, changed, relay_token.is_some(), linger);
    settings.printer.result(&value, human)?;
    Ok(Exit::Ok)
}

/// What `service install` prints once the service is written and started.
fn installed_text(
    settings: &Settings,
    file: &Path,
    spec: &ServiceSpec,
    changed: bool,
    token_saved: bool,
    linger: Option<bool>,
) -> String {
    let mut human = if changed {
        format!("installed and started: {}\n", file.display())
    } else {
        format!("already installed, unchanged, started: {}\n", file.display())
    };
    let _ = writeln!(human, "runs:    {}", spec.command_line().join(" "));
    let _ = writeln!(human, "status:  voxa service status; logs: voxa service logs");
    if token_saved {
        let saved = settings.home.path(crate::state::RELAY_TOKEN_FILE);
        let _ = writeln!(human, "token:   the relay token is saved in {} (0600) for the service", saved.display());
    }
    if linger == Some(false) {
        let _ = writeln!(
            human,
            "note:    it stops when you log out; to keep it running without a login session: loginctl enable-linger {}",
            user_name()
        );
    }
    human
}

fn uninstall(settings: &Settings, platform: Platform, file: &Path, dry_run: bool) -> Result<Exit> {
    let present = file.exists();
    let mut value = json!({
        "platform": platform.name(),
        "file": file.display().to_string(),
        "installed": present,
        "dry_run": dry_run,
    });
    if dry_run {
        let human = if present {
            format!("would stop the service and remove {}\n", file.display())
        } else {
            format!("not installed ({} does not exist); nothing to do\n", file.display())
        };
        settings.printer.result(&value, human)?;
        return Ok(Exit::Ok);
    }
    // Stop first: a running agent whose file is gone could not be managed any more.
    match platform {
        Platform::Systemd => systemd_stop(present),
        Platform::Launchd => launchd_stop(),
    }
    .with_context(|| format!("could not stop the service; {} was left in place", file.display()))?;
    if present {
        std::fs::remove_file(file).with_context(|| format!("could not remove {}", file.display()))?;
        if platform == Platform::Systemd {
            // The manager forgets the unit; a failure here changes nothing that matters.
            let _ = systemctl(&["daemon-reload"]);
            let _ = systemctl(&["reset-failed", UNIT_NAME]);
        }
    }
    value["removed"] = Value::Bool(present);
    let human = if present {
        format!("stopped and removed {}\n", file.display())
    } else {
        format!("not installed ({} does not exist); nothing to do\n", file.display())
    };
    settings.printer.result(&value, human)?;
    Ok(Exit::Ok)
}

fn status(settings: &Settings, platform: Platform, file: &Path) -> Result<Exit> {
    let installed = file.exists();
    let state = match platform {
        Platform::Systemd => systemd_state(),
        Platform::Launchd => launchd_state(),
    };
    let linger = (platform == Platform::Systemd).then(linger_enabled).flatten();
    let (manager, manager_error) = match &state {
        Ok(state) => (Some(state), None),
        Err(err) => (None, Some(format!("{err:#}"))),
    };
    let value = json!({
        "platform": platform.name(),
        "file": file.display().to_string(),
        "installed": installed,
        "enabled": manager.and_then(|m| m.enabled),
        "state": manager.map(|m| m.state.clone()),
        "pid": manager.and_then(|m| m.pid),
        "linger": linger,
        "manager_error": manager_error,
    });
    let mut human =
        format!("file:    {} ({})\n", file.display(), if installed { "installed" } else { "not installed" });
    match (manager, &manager_error) {
        (Some(m), _) => {
            let enabled = match m.enabled {
                Some(true) => "enabled at login",
                Some(false) => "not enabled",
                None => "unknown",
            };
            let pid = m.pid.map(|pid| format!(", pid {pid}")).unwrap_or_default();
            let _ = writeln!(human, "state:   {}{pid} ({enabled})", m.state);
        }
        (None, Some(err)) => {
            let _ = writeln!(human, "state:   unknown: {err}");
        }
        (None, None) => {}
    }
    match linger {
        Some(true) => human.push_str("linger:  yes (keeps running without a login session)\n"),
        Some(false) => {
            let _ =
                writeln!(human, "linger:  no (stops at logout; loginctl enable-linger {} changes that)", user_name());
        }
        None => {}
    }
    settings.printer.result(&value, human)?;
    Ok(Exit::Ok)
}

fn logs(settings: &Settings, platform: Platform, user_home: &Path, follow: bool, lines: u32) -> Result<Exit> {
    let mut command = match platform {
        Platform::Systemd => {
            let mut command = Command::new("journalctl");
            command.args(["--user", "--unit", UNIT_NAME, "--no-pager", "--lines", &lines.to_string()]);
            if settings.printer.is_json() {
                command.args(["--output", "json"]);
            }
            if follow {
                command.arg("--follow");
            }
            command
        }
        Platform::Launchd => {
            let log = launchd_log_file(user_home);
            if !log.exists() {
                bail!("no log yet: {} does not exist (is the service installed?)", log.display());
            }
            let mut command = Command::new("tail");
            command.args(["-n", &lines.to_string()]);
            if follow {
                command.arg("-F");
            }
            command.arg(log);
            command
        }
    };
    let program = command.get_program().to_string_lossy().into_owned();
    let status = command.status().with_context(|| format!("could not run {program}"))?;
    if status.success() {
        Ok(Exit::Ok)
    } else {
        Err(anyhow!("{program} failed ({status})"))
    }
}
