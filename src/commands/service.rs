//! `voxa service`: keeps `voxa run` running at login — a systemd user unit on Linux, a launchd
//! agent on macOS. Both files are generated on any OS (so both are tested everywhere); only the
//! `systemctl`/`launchctl` calls depend on the platform. Neither file holds a secret: the agent
//! reads its secrets from its home when it starts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use super::Settings;
use crate::cli::ServiceCommand;
use crate::error::{ConfigError, Exit};
use crate::secret::Secret;

/// Name of the systemd user unit.
pub const UNIT_NAME: &str = "voxa.service";
/// Label of the launchd agent (also its file name, with `.plist`).
pub const LAUNCHD_LABEL: &str = "space.voxa.agent";
/// Seconds systemd waits before restarting a failed agent.
const RESTART_DELAY_SECS: u32 = 5;

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

/// What the service runs, fixed at install time: the binary, its home, relay and workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Absolute path of the `voxa` binary.
    pub program: PathBuf,
    pub home: PathBuf,
    pub relay: String,
    pub workspace: PathBuf,
    pub ca_cert: Option<PathBuf>,
    /// Where launchd writes the agent's output (`~/Library/Logs/voxa/voxa.log`).
    pub log_file: PathBuf,
}

impl ServiceSpec {
    /// Arguments after the program: `--home H --relay R run --workspace W [--ca-cert F]`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--home".to_owned(),
            self.home.display().to_string(),
            "--relay".to_owned(),
            self.relay.clone(),
            "run".to_owned(),
            "--workspace".to_owned(),
            self.workspace.display().to_string(),
        ];
        if let Some(ca) = &self.ca_cert {
            args.extend(["--ca-cert".to_owned(), ca.display().to_string()]);
        }
        args
    }

    /// Program and arguments, as the service manager starts them.
    pub fn command_line(&self) -> Vec<String> {
        let mut line = vec![self.program.display().to_string()];
        line.extend(self.args());
        line
    }

    /// Refuses what neither file format can carry (control characters, non-UTF-8 paths).
    fn check(&self) -> Result<(), ConfigError> {
        for path in [&self.program, &self.home, &self.workspace, &self.log_file].into_iter().chain(&self.ca_cert) {
            if path.to_str().is_none() {
                return Err(ConfigError::new(format!(
                    "{} is not valid UTF-8; a service file cannot name it",
                    path.display()
                )));
            }
        }
        for arg in self.command_line() {
            if arg.chars().any(char::is_control) {
                return Err(ConfigError::new(format!(
                    "{arg:?} holds a control character; a service file cannot carry it"
                )));
            }
        }
        Ok(())
    }

    /// The service file for `platform`.
    pub fn render(&self, platform: Platform) -> String {
        match platform {
            Platform::Systemd => systemd_unit(self),
            Platform::Launchd => launchd_plist(self),
        }
    }
}

/// The systemd user unit: `Restart=on-failure`, and no restart for exit status 2 (a
/// configuration error that restarting cannot fix).
pub fn systemd_unit(spec: &ServiceSpec) -> String {
    let exec = spec.command_line().iter().map(|arg| systemd_quote(arg)).collect::<Vec<_>>().join(" ");
    let mut unit = String::new();
    let _ = write!(
        unit,
        "# Written by `voxa service install`; remove it with `voxa service uninstall`.\n\
         # It holds no secret: the agent reads them from its home when it starts.\n\
         [Unit]\n\
         Description=voxa agent: drive this machine from your phone\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={exec}\n\
         Restart=on-failure\n\
         RestartSec={RESTART_DELAY_SECS}\n\
         # Exit status 2 is a configuration error (not paired, unsafe permissions): run `voxa doctor`.\n\
         RestartPreventExitStatus=2\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n"
    );
    unit
}

/// One `ExecStart=` word: bare when it is plain, else double-quoted with C escapes. `%`
/// (specifiers) and `$` (variables) are doubled either way so systemd takes them literally.
fn systemd_quote(arg: &str) -> String {
    let escaped = arg.replace('%', "%%").replace('$', "$$");
    // The program is an absolute path, so no word can be taken for a `-`/`@`/`+` prefix.
    let plain = !escaped.is_empty() && escaped.chars().all(|c| c.is_ascii_alphanumeric() || "/._:+,=@%$-".contains(c));
    if plain {
        return escaped;
    }
    let mut quoted = String::with_capacity(escaped.len() + 2);
    quoted.push('"');
    for c in escaped.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// The launchd agent: started at login, restarted when it exits with a failure (`KeepAlive`),
/// output in `~/Library/Logs/voxa/`.
pub fn launchd_plist(spec: &ServiceSpec) -> String {
    let string = |text: &str| format!("<string>{}</string>", xml_escape(text));
    let arguments: String = spec.command_line().iter().map(|arg| format!("\t\t{}\n", string(arg))).collect();
    let log = string(&spec.log_file.display().to_string());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `voxa service install`; remove it with `voxa service uninstall`. No secrets. -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \t<key>Label</key>\n\t{label}\n\
         \t<key>ProgramArguments</key>\n\t<array>\n{arguments}\t</array>\n\
         \t<key>WorkingDirectory</key>\n\t{workspace}\n\
         \t<key>RunAtLoad</key>\n\t<true/>\n\
         \t<key>KeepAlive</key>\n\t<dict>\n\t\t<key>SuccessfulExit</key>\n\t\t<false/>\n\t</dict>\n\
         \t<key>ProcessType</key>\n\t<string>Interactive</string>\n\
         \t<key>StandardOutPath</key>\n\t{log}\n\
         \t<key>StandardErrorPath</key>\n\t{log}\n\
         </dict>\n\
         </plist>\n",
        label = string(LAUNCHD_LABEL),
        workspace = string(&spec.workspace.display().to_string()),
    )
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Where the service file of `platform` lives for the user whose home is `user_home`.
/// systemd's user directory follows `XDG_CONFIG_HOME` when `config_dir` says so.
pub fn service_file(platform: Platform, user_home: &Path, config_dir: &Path) -> PathBuf {
    match platform {
        Platform::Systemd => config_dir.join("systemd/user").join(UNIT_NAME),
        Platform::Launchd => user_home.join("Library/LaunchAgents").join(format!("{LAUNCHD_LABEL}.plist")),
    }
}

/// `~/Library/Logs/voxa/voxa.log`, where launchd writes the agent's output.
pub fn launchd_log_file(user_home: &Path) -> PathBuf {
    user_home.join("Library/Logs/voxa/voxa.log")
}

/// Where this platform's service file is for the current user.
pub fn installed_file() -> Result<PathBuf> {
    let (user_home, config_dir) = user_dirs()?;
    Ok(service_file(Platform::current(), &user_home, &config_dir))
}

/// The program a service file starts: the first word of `ExecStart=` (systemd) or the first
/// `ProgramArguments` string (launchd), unescaped.
pub fn program_of(platform: Platform, text: &str) -> Option<String> {
    match platform {
        Platform::Systemd => {
            let exec = text.lines().find_map(|line| line.strip_prefix("ExecStart="))?.trim_start();
            let word = match exec.strip_prefix('"') {
                Some(quoted) => {
                    let mut word = String::new();
                    let mut chars = quoted.chars();
                    loop {
                        match chars.next()? {
                            '"' => break,
                            '\\' => word.push(chars.next()?),
                            c => word.push(c),
                        }
                    }
                    word
                }
                None => exec.split_whitespace().next()?.to_owned(),
            };
            Some(word.replace("%%", "%").replace("$$", "$"))
        }
        Platform::Launchd => {
            let (_, rest) = text.split_once("<key>ProgramArguments</key>")?;
            let (_, rest) = rest.split_once("<string>")?;
            let (escaped, _) = rest.split_once("</string>")?;
            Some(
                escaped
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&amp;", "&"),
            )
        }
    }
}

/// The user's home and configuration directories.
fn user_dirs() -> Result<(PathBuf, PathBuf)> {
    let dirs =
        directories::BaseDirs::new().ok_or_else(|| ConfigError::new("cannot find your home directory; set HOME"))?;
    Ok((dirs.home_dir().to_owned(), dirs.config_dir().to_owned()))
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
        std::fs::create_dir_all(parent).with_context(|| format!("could not create {}", parent.display()))?;
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

/// What the service manager says about the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerState {
    /// `active`, `inactive`, `failed`, `activating`, … (systemd) or `running`, `not loaded` (launchd).
    pub state: String,
    pub pid: Option<u32>,
    pub enabled: Option<bool>,
}

/// Runs `systemctl --user ARGS`; a non-zero exit is an error carrying systemctl's own words.
fn systemctl(args: &[&str]) -> Result<Output> {
    run_tool("systemctl", &[&["--user"], args].concat())
}

/// Runs a tool with no stdin and captured output; a non-zero exit is an error with its stderr.
fn run_tool(program: &str, args: &[&str]) -> Result<Output> {
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

fn systemd_start(changed: bool) -> Result<bool> {
    systemctl(&["daemon-reload"]).map_err(no_user_manager_hint)?;
    systemctl(&["enable", UNIT_NAME])?;
    // A changed file takes effect only on a restart; an unchanged one is left running.
    systemctl(&[if changed { "restart" } else { "start" }, UNIT_NAME])?;
    Ok(true)
}

fn systemd_stop(present: bool) -> Result<()> {
    let stopped = systemctl(&["disable", "--now", UNIT_NAME]).map_err(no_user_manager_hint);
    // Without a file there is nothing of ours to stop: a manager that does not know the unit is fine.
    if present {
        stopped?;
    }
    Ok(())
}

fn no_user_manager_hint(err: anyhow::Error) -> anyhow::Error {
    err.context(format!(
        "is a systemd user manager running for {}? (a desktop login starts one; `loginctl enable-linger {}` starts one at boot)",
        user_name(),
        user_name()
    ))
}

fn systemd_state() -> Result<ManagerState> {
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
fn linger_enabled() -> Option<bool> {
    let uid = rustix::process::getuid().as_raw().to_string();
    let output = run_tool("loginctl", &["show-user", &uid, "--property=Linger", "--value"]).ok()?;
    match String::from_utf8_lossy(&output.stdout).trim() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

fn user_name() -> String {
    std::env::var("USER").ok().filter(|name| !name.is_empty()).unwrap_or_else(|| "$USER".to_owned())
}

/// `gui/<uid>`, the launchd domain of this user's login session.
#[cfg(target_os = "macos")]
fn launchd_domain() -> String {
    format!("gui/{}", rustix::process::getuid().as_raw())
}

#[cfg(target_os = "macos")]
fn launchd_start(file: &Path, log_file: &Path, changed: bool) -> Result<bool> {
    if let Some(dir) = log_file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
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
fn launchd_start(_file: &Path, _log_file: &Path, _changed: bool) -> Result<bool> {
    bail!("launchd runs only on macOS")
}

#[cfg(target_os = "macos")]
fn launchd_stop() -> Result<()> {
    let target = format!("{}/{LAUNCHD_LABEL}", launchd_domain());
    if run_tool("launchctl", &["print", &target]).is_ok() {
        run_tool("launchctl", &["bootout", &target])?;
    }
    Ok(())
}

#[cfg(not(target_os = "macos"))]
fn launchd_stop() -> Result<()> {
    bail!("launchd runs only on macOS")
}

#[cfg(target_os = "macos")]
fn launchd_state() -> Result<ManagerState> {
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
fn launchd_state() -> Result<ManagerState> {
    bail!("launchd runs only on macOS")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            program: "/opt/voxa/bin/voxa".into(),
            home: "/home/me/.voxa".into(),
            relay: "https://relay.example.com".into(),
            workspace: "/home/me/my src/100% \"real\" $HOME".into(),
            ca_cert: None,
            log_file: "/home/me/Library/Logs/voxa/voxa.log".into(),
        }
    }

    #[test]
    fn exec_start_quotes_only_what_needs_it_and_escapes_specifiers() {
        assert_eq!(systemd_quote("/opt/voxa/bin/voxa"), "/opt/voxa/bin/voxa");
        assert_eq!(systemd_quote("--home"), "--home");
        assert_eq!(systemd_quote("https://relay.example.com"), "https://relay.example.com");
        assert_eq!(systemd_quote("/home/me/my src"), "\"/home/me/my src\"");
        assert_eq!(systemd_quote("100%"), "100%%");
        assert_eq!(systemd_quote("a\"b\\c $HOME"), "\"a\\\"b\\\\c $$HOME\"");
        assert_eq!(systemd_quote(""), "\"\"");
    }

    #[test]
    fn the_unit_runs_voxa_run_with_home_relay_and_workspace() {
        let unit = systemd_unit(&spec());
        let exec = unit.lines().find_map(|line| line.strip_prefix("ExecStart=")).unwrap();
        assert_eq!(
            exec,
            "/opt/voxa/bin/voxa --home /home/me/.voxa --relay https://relay.example.com run --workspace \
             \"/home/me/my src/100%% \\\"real\\\" $$HOME\""
        );
        assert!(unit.contains("\nRestart=on-failure\n"));
        assert!(unit.contains("\nWantedBy=default.target\n"));
    }

    #[test]
    fn control_characters_are_refused() {
        let mut bad = spec();
        bad.workspace = "/tmp/a\nExecStartPre=/bin/evil".into();
        assert!(bad.check().is_err());
        assert!(spec().check().is_ok());
    }

    #[test]
    fn the_program_is_read_back_from_both_files() {
        let mut spec = spec();
        for program in ["/opt/voxa/bin/voxa", "/opt/my apps/100% \"v\\x\" $HOME & <co>/voxa"] {
            spec.program = program.into();
            for platform in [Platform::Systemd, Platform::Launchd] {
                assert_eq!(program_of(platform, &spec.render(platform)).as_deref(), Some(program), "{platform:?}");
            }
        }
        assert_eq!(program_of(Platform::Systemd, "[Service]\nType=exec\n"), None);
    }

    #[test]
    fn the_plist_escapes_xml() {
        let plist = launchd_plist(&spec());
        assert!(plist.contains("<string>/home/me/my src/100% &quot;real&quot; $HOME</string>"));
        assert!(plist.contains("<key>KeepAlive</key>"));
    }

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
