//! `voxa service`: the generated systemd unit checked by systemd itself, the launchd plist read
//! back by a plist parser, and the install/uninstall round trip in a temporary HOME.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{installed, voxa_bin, voxa_cmd};

/// A temporary user: HOME, a paired voxa home inside it, a workspace whose name needs quoting,
/// and a directory for stand-in tools on PATH.
struct User {
    _dir: tempfile::TempDir,
    home: PathBuf,
    voxa_home: PathBuf,
    workspace: PathBuf,
    bin: PathBuf,
    log: PathBuf,
}

impl User {
    fn new() -> User {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let voxa_home = home.join(".voxa");
        let workspace = home.join("my work 100% \"$HOME\"");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        let user = User { log: dir.path().join("calls.log"), _dir: dir, home, voxa_home, workspace, bin };
        let paired = user.voxa(&["pair", "--json", "--relay", "https://relay.example.com"]);
        assert!(paired.status.success(), "{}", String::from_utf8_lossy(&paired.stderr));
        user
    }

    /// `voxa ARGS` as this user, with the stand-in tools first on PATH.
    fn voxa(&self, args: &[&str]) -> Output {
        self.voxa_env(args, &[])
    }

    fn voxa_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!("{}:{}", self.bin.display(), std::env::var("PATH").unwrap_or_default());
        voxa_cmd(&self.voxa_home)
            .args(args)
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env("USER", "tester")
            .env("PATH", path)
            .env("CALLS_LOG", &self.log)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.voxa(args);
        assert!(out.status.success(), "voxa {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&out.stdout)))
    }

    fn unit_file(&self) -> PathBuf {
        self.home.join(".config/systemd/user/voxa.service")
    }

    /// A stand-in for `program` that records its arguments, and whether the unit file exists at
    /// that moment, in the calls log; then runs `body`.
    fn fake(&self, program: &str, body: &str) {
        let script = format!(
            "#!/bin/sh\n\
             if [ -e \"$HOME/.config/systemd/user/voxa.service\" ]; then state=present; else state=absent; fi\n\
             echo \"{program} $* [$state]\" >> \"$CALLS_LOG\"\n\
             {body}\n"
        );
        let path = self.bin.join(program);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The calls recorded since the last look.
    fn calls(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        text.lines().map(str::to_owned).collect()
    }
}

/// True when a systemd user manager answers for this user.
fn user_manager_running() -> bool {
    Command::new("systemctl")
        .args(["--user", "is-system-running"])
        .output()
        .is_ok_and(|out| matches!(String::from_utf8_lossy(&out.stdout).trim(), "running" | "degraded" | "starting"))
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    if !installed("systemd-analyze", "systemd") {
        return;
    }
    let user = User::new();
    let workspace = user.workspace.to_str().unwrap();
    let dry = user.json(&["service", "install", "--dry-run", "--json", "--workspace", workspace]);
    assert_eq!(dry["dry_run"], true);
    assert!(!user.unit_file().exists(), "--dry-run writes nothing");
    let unit = dry["content"].as_str().unwrap();
    let human = user.voxa(&["service", "install", "--dry-run", "--workspace", workspace]);
    assert_eq!(String::from_utf8_lossy(&human.stdout), unit, "--dry-run prints the file itself");

    // No secret in the unit: it names the home, never what is in it.
    for secret in ["auth_token", "relay_code"] {
        let value = std::fs::read_to_string(user.voxa_home.join(secret)).unwrap();
        assert!(!unit.contains(value.trim()), "{unit}");
    }
    assert!(!unit.contains("Environment"), "{unit}");
    let expected: Vec<String> = [
        voxa_bin().canonicalize().unwrap().display().to_string(),
        "--home".into(),
        user.voxa_home.display().to_string(),
        "--relay".into(),
        "https://relay.example.com".into(),
        "run".into(),
        "--workspace".into(),
        user.workspace.canonicalize().unwrap().display().to_string(),
    ]
    .into();
    assert_eq!(dry["command"], serde_json::json!(expected));

    let runtime = tempfile::tempdir().unwrap();
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = runtime.path().join("voxa.service");
    std::fs::write(&file, unit).unwrap();
    let verify = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(&file)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("HOME", &user.home)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success(), "systemd-analyze verify: {said}\n{unit}");
    // systemd only warns about values it cannot parse (bad quoting, unknown settings): none allowed.
    assert!(said.trim().is_empty(), "systemd-analyze verify warned: {said}\n{unit}");

    // The same check catches a unit systemd cannot read.
    std::fs::write(&file, unit.replace("Restart=on-failure", "Restart=sometimes")).unwrap();
    let broken = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(&file)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&broken.stderr).trim().is_empty(), "a broken unit must be noticed");
}

#[test]
fn the_launchd_plist_parses_and_holds_the_program_and_its_arguments() {
    let spec = voxa::commands::service::ServiceSpec {
        program: "/Applications/voxa & co/bin/voxa".into(),
        home: "/Users/me/.voxa".into(),
        relay: "https://relay.example.com".into(),
        workspace: "/Users/me/<src> \"quoted\" 'single'".into(),
        ca_cert: Some("/Users/me/relay ca.pem".into()),
        log_file: "/Users/me/Library/Logs/voxa/voxa.log".into(),
    };
    let text = spec.render(voxa::commands::service::Platform::Launchd);
    let parsed = plist::Value::from_reader_xml(text.as_bytes()).unwrap_or_else(|err| panic!("{err}\n{text}"));
    let dict = parsed.as_dictionary().unwrap();
    assert_eq!(dict["Label"].as_string(), Some(voxa::commands::service::LAUNCHD_LABEL));
    let arguments: Vec<&str> =
        dict["ProgramArguments"].as_array().unwrap().iter().map(|v| v.as_string().unwrap()).collect();
    assert_eq!(
        arguments,
        [
            "/Applications/voxa & co/bin/voxa",
            "--home",
            "/Users/me/.voxa",
            "--relay",
            "https://relay.example.com",
            "run",
            "--workspace",
            "/Users/me/<src> \"quoted\" 'single'",
            "--ca-cert",
            "/Users/me/relay ca.pem",
        ]
    );
    assert_eq!(dict["RunAtLoad"].as_boolean(), Some(true));
    let keep_alive = dict["KeepAlive"].as_dictionary().unwrap();
    assert_eq!(keep_alive["SuccessfulExit"].as_boolean(), Some(false), "restarted after a failure only");
    assert_eq!(dict["StandardOutPath"].as_string(), Some("/Users/me/Library/Logs/voxa/voxa.log"));
    assert_eq!(dict["StandardErrorPath"].as_string(), Some("/Users/me/Library/Logs/voxa/voxa.log"));
    assert_eq!(dict["WorkingDirectory"].as_string(), Some("/Users/me/<src> \"quoted\" 'single'"));
    assert_eq!(
        voxa::commands::service::service_file(
            voxa::commands::service::Platform::Launchd,
            Path::new("/Users/me"),
            Path::new("/x")
        ),
        Path::new("/Users/me/Library/LaunchAgents/space.voxa.agent.plist")
    );
}

#[test]
fn install_twice_is_harmless_and_uninstall_stops_the_service_before_removing_it() {
    if user_manager_running() {
        // A real user manager reads units from the real home, never a temporary one, and this
        // test must not touch the user's own services.
        eprintln!("skipped: a systemd user manager is running; the round trip fakes systemctl only where none exists");
        return;
    }
    let user = User::new();
    user.fake(
        "systemctl",
        "case \"$*\" in *show*) printf 'LoadState=loaded\\nActiveState=active\\nSubState=running\\nMainPID=4242\\nUnitFileState=enabled\\n';; esac",
    );
    user.fake("loginctl", "echo no");
    user.fake("journalctl", "echo 'Nov 30 09:00:00 host voxa[4242]: relay connected'");
    let workspace = user.workspace.to_str().unwrap();

    // A private relay's token goes to the home (0600), never into the unit or its environment.
    let relay_token = "relay-token-93be01d7c4";
    let dry = user
        .voxa_env(&["service", "install", "--dry-run", "--workspace", workspace], &[("VOXA_RELAY_TOKEN", relay_token)]);
    assert!(!String::from_utf8_lossy(&dry.stdout).contains(relay_token));
    let saved = user.voxa_home.join("relay_token");
    assert!(!saved.exists(), "--dry-run saves nothing");
    let out = user
        .voxa_env(&["service", "install", "--json", "--workspace", workspace], &[("VOXA_RELAY_TOKEN", relay_token)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(first["relay_token_saved"], true);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(relay_token));
    assert_eq!(std::fs::read_to_string(&saved).unwrap().trim(), relay_token);
    assert_eq!(std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!std::fs::read_to_string(user.unit_file()).unwrap().contains(relay_token));
    // What voxa makes is its user's alone: the unit, and the directories it made for it.
    assert_eq!(std::fs::metadata(user.unit_file()).unwrap().permissions().mode() & 0o777, 0o600);
    for dir in [".config", ".config/systemd", ".config/systemd/user"] {
        assert_eq!(std::fs::metadata(user.home.join(dir)).unwrap().permissions().mode() & 0o777, 0o700, "{dir}");
    }
    assert_eq!(first["changed"], true);
    assert_eq!(first["started"], true);
    assert_eq!(first["linger"], false);
    assert_eq!(first["file"], user.unit_file().display().to_string());
    assert_eq!(
        user.calls(),
        [
            "systemctl --user daemon-reload [present]".to_owned(),
            "systemctl --user enable voxa.service [present]".to_owned(),
            "systemctl --user restart voxa.service [present]".to_owned(),
            format!("loginctl show-user {} --property=Linger --value [present]", uid()),
        ]
    );
    let written = std::fs::read_to_string(user.unit_file()).unwrap();
    let dry = user.json(&["service", "install", "--dry-run", "--json", "--workspace", workspace]);
    assert_eq!(dry["content"], written, "install writes what --dry-run prints");
    assert_eq!(dry["changed"], false);

    // Twice: nothing rewritten, the running service left alone (start, not restart).
    let inode = std::fs::metadata(user.unit_file()).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    let second = user.voxa(&["service", "install", "--workspace", workspace]);
    assert!(second.status.success());
    let text = String::from_utf8_lossy(&second.stdout);
    assert!(text.contains("already installed, unchanged, started"), "{text}");
    assert!(text.contains("loginctl enable-linger tester"), "the linger hint: {text}");
    assert_eq!(std::fs::metadata(user.unit_file()).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap(), inode);
    assert!(user.calls().contains(&"systemctl --user start voxa.service [present]".to_owned()));

    // A different workspace rewrites the unit and restarts the service.
    let other = user.home.join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let moved = user.json(&["service", "install", "--json", "--workspace", other.to_str().unwrap()]);
    assert_eq!(moved["changed"], true);
    assert!(user.calls().contains(&"systemctl --user restart voxa.service [present]".to_owned()));

    let status = user.json(&["service", "status", "--json"]);
    assert_eq!(status["installed"], true);
    assert_eq!(status["state"], "active (running)");
    assert_eq!(status["pid"], 4242);
    assert_eq!(status["enabled"], true);
    assert_eq!(status["linger"], false);
    user.calls();

    let logs = user.voxa(&["service", "logs", "-n", "5", "--json"]);
    assert!(logs.status.success());
    assert!(String::from_utf8_lossy(&logs.stdout).contains("relay connected"));
    assert_eq!(user.calls(), ["journalctl --user --unit voxa.service --no-pager --lines 5 --output json [present]"]);

    // doctor sees the service and whether its binary still exists.
    let doctor = |user: &User| {
        let out = user.voxa(&["doctor", "--json", "--relay", "http://127.0.0.1:1"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["checks"].as_array().unwrap().iter().find(|c| c["check"] == "service").unwrap().clone()
    };
    let service = doctor(&user);
    assert_eq!(service["status"], "ok", "{service}");
    assert_eq!(service["message"], format!("{} starts this binary", user.unit_file().display()));
    let unit = std::fs::read_to_string(user.unit_file()).unwrap();
    let program = voxa_bin().canonicalize().unwrap().display().to_string();
    std::fs::write(user.unit_file(), unit.replace(&program, "/opt/moved/voxa")).unwrap();
    let service = doctor(&user);
    assert_eq!(service["status"], "fail", "{service}");
    assert_eq!(service["fix"], "voxa service install (rewrites it for this binary)");
    std::fs::write(user.unit_file(), unit).unwrap();
    user.calls();

    let dry = user.json(&["service", "uninstall", "--dry-run", "--json"]);
    assert_eq!(dry["installed"], true);
    assert!(user.unit_file().exists() && user.calls().is_empty(), "--dry-run changes nothing");

    let removed = user.json(&["service", "uninstall", "--json"]);
    assert_eq!(removed["removed"], true);
    assert!(!user.unit_file().exists());
    let calls = user.calls();
    assert_eq!(calls[0], "systemctl --user disable --now voxa.service [present]", "stopped while its file was there");
    assert!(calls[1..].contains(&"systemctl --user daemon-reload [absent]".to_owned()), "{calls:?}");

    // Twice is harmless too.
    let again = user.json(&["service", "uninstall", "--json"]);
    assert_eq!(again["removed"], false);
    assert!(!user.unit_file().exists());
}

#[test]
fn install_says_what_is_wrong_when_it_cannot_work() {
    let user = User::new();
    user.fake("systemctl", "echo 'Failed to connect to bus: No medium found' >&2; exit 1");
    user.fake("loginctl", "echo no");
    let workspace = user.workspace.to_str().unwrap();
    let out = user.voxa(&["service", "install", "--workspace", workspace]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("could not start the service"), "{said}");
    assert!(said.contains("Failed to connect to bus"), "systemctl's own words: {said}");
    assert!(said.contains("loginctl enable-linger tester"), "{said}");

    // A file whose service cannot be stopped is left in place.
    let out = user.voxa(&["service", "uninstall"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(user.unit_file().exists());

    // Not paired: refused before anything is written (exit 2, configuration error).
    let unpaired = User::new();
    std::fs::remove_file(unpaired.voxa_home.join("auth_token")).unwrap();
    let out = unpaired.voxa(&["service", "install", "--workspace", workspace]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("voxa pair"));
    assert!(!unpaired.unit_file().exists());

    let missing = user.voxa(&["service", "install", "--workspace", "/no/such/dir"]);
    assert_eq!(missing.status.code(), Some(2));
}

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}
