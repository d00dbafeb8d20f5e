//! The two service files — a systemd user unit and a launchd agent — generated on any OS, and the
//! program an installed one starts, read back.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{Platform, LAUNCHD_LABEL, UNIT_NAME};
use crate::error::ConfigError;

/// Seconds systemd waits before restarting a failed agent.
const RESTART_DELAY_SECS: u32 = 5;

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
    pub(super) fn check(&self) -> Result<(), ConfigError> {
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
pub(super) fn systemd_quote(arg: &str) -> String {
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

pub(super) fn xml_escape(text: &str) -> String {
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
pub(super) fn user_dirs() -> Result<(PathBuf, PathBuf)> {
    let dirs =
        directories::BaseDirs::new().ok_or_else(|| ConfigError::new("cannot find your home directory; set HOME"))?;
    Ok((dirs.home_dir().to_owned(), dirs.config_dir().to_owned()))
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
}
