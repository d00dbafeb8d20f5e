//! The state directory (docs/SECURITY.md, "The state directory"): where it is, its permissions, atomic writes, the two secrets,
//! `config.toml` and `agent.json`.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use rand::TryRngCore;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::ConfigError;
use crate::secret::Secret;

pub const AUTH_TOKEN_FILE: &str = "auth_token";
pub const RELAY_CODE_FILE: &str = "relay_code";
/// The relay code `pair --rotate` replaced and the time of that rotation; the agent answers it
/// for a while so a phone holding the old link hears that the link is no longer valid.
pub const RETIRED_CODE_FILE: &str = "retired_relay_code";
pub const CONFIG_FILE: &str = "config.toml";
pub const AGENT_FILE: &str = "agent.json";
/// Locked (flock) by the running agent for its whole life: `agent.json` is trusted only while
/// this lock is held, so a stale file (a crash, a reboot) never sends a client to whoever
/// listens on its port now.
pub const AGENT_LOCK_FILE: &str = "agent.lock";
pub const AUDIT_DIR: &str = "audit";
/// The token a private relay requires, for agents started without `VOXA_RELAY_TOKEN` (a service).
pub const RELAY_TOKEN_FILE: &str = "relay_token";
/// Both new secrets (and the retired relay code with its rotation time), written before a rotation touches either file and removed after; a
/// rotation interrupted by a crash is finished from it on the next start.
const ROTATION_JOURNAL: &str = ".rotation";
/// Held (flock) by every process that reads or writes the secrets, so concurrent `pair --rotate`
/// runs cannot interleave their writes into a mixed pair, nor a start read one half-rotated.
const LOCK_FILE: &str = ".lock";

/// The relay code and auth token of this home.
#[derive(Clone, Debug)]
pub struct Secrets {
    pub relay_code: Secret,
    pub auth_token: Secret,
}

/// A relay code replaced by `pair --rotate`, and when it was replaced.
#[derive(Clone, Debug)]
pub struct RetiredCode {
    pub relay_code: Secret,
    pub rotated_at: SystemTime,
}

impl RetiredCode {
    /// `<code>\n<unix seconds>\n`, as stored in [`RETIRED_CODE_FILE`] and the rotation journal.
    fn to_text(&self) -> String {
        let secs = self.rotated_at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        format!("{}\n{secs}\n", self.relay_code.expose())
    }

    fn parse<'a>(mut lines: impl Iterator<Item = &'a str>) -> Option<RetiredCode> {
        let relay_code = Secret::parse_hex128(lines.next()?).ok()?;
        let secs: u64 = lines.next()?.trim().parse().ok()?;
        Some(RetiredCode { relay_code, rotated_at: UNIX_EPOCH + Duration::from_secs(secs) })
    }
}

/// Contents of `agent.json` while an agent runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentFile {
    pub pid: u32,
    pub port: u16,
    pub version: String,
}

/// The running agent's hold on its home; released when dropped or when the process dies.
#[derive(Debug)]
pub struct AgentLock {
    _file: File,
}

/// A voxa state directory.
#[derive(Clone, Debug)]
pub struct Home {
    dir: PathBuf,
}

/// The pairing tickets the printed links carry (`tickets` reads and writes them).
pub const TICKETS_FILE: &str = "tickets.json";
/// Held while the tickets are read or written.
pub const TICKETS_LOCK: &str = ".tickets.lock";

impl Home {
    /// Forgets every pairing ticket (a rotation: a link printed before opens nothing).
    pub fn forget_tickets(&self) -> anyhow::Result<()> {
        let _lock = self.lock_file(TICKETS_LOCK)?;
        match std::fs::remove_file(self.path(TICKETS_FILE)) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => {
                Err(anyhow::Error::new(err).context(format!("could not remove {}", self.path(TICKETS_FILE).display())))
            }
        }
    }

    /// `explicit` (from `--home` or `VOXA_HOME`), else `~/.voxa`.
    pub fn locate(explicit: Option<PathBuf>) -> Result<Self> {
        let dir = match explicit {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(ConfigError::new("VOXA_HOME is set but empty").into())
            }
            Some(dir) => dir,
            None => directories::BaseDirs::new()
                .map(|dirs| dirs.home_dir().join(".voxa"))
                .ok_or_else(|| ConfigError::new("cannot find your home directory; set VOXA_HOME"))?,
        };
        Ok(Home { dir })
    }

    /// A home at exactly this path (tests, embedded use).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Home { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// True when the directory exists (nothing is created).
    pub fn exists(&self) -> bool {
        self.dir.is_dir()
    }

    /// Creates the directory 0700 if missing, then checks its permissions.
    pub fn ensure(&self) -> Result<()> {
        match fs::metadata(&self.dir) {
            Ok(meta) if !meta.is_dir() => {
                return Err(
                    ConfigError::new(format!("voxa home {} exists but is not a directory", self.dir.display())).into()
                )
            }
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&self.dir)
                    .with_context(|| format!("could not create voxa home {}", self.dir.display()))?;
            }
            Err(err) => return Err(err).with_context(|| format!("could not read voxa home {}", self.dir.display())),
        }
        check_private(&self.dir, true)
    }

    /// Checks the directory without creating it; a missing home is fine.
    pub fn check(&self) -> Result<()> {
        if self.dir.exists() {
            if !self.dir.is_dir() {
                return Err(ConfigError::new(format!(
                    "voxa home {} exists but is not a directory",
                    self.dir.display()
                ))
                .into());
            }
            check_private(&self.dir, true)?;
        }
        Ok(())
    }

    /// Reads both secrets if they exist. A partial pair (one file only) counts as missing.
    pub fn load_secrets(&self) -> Result<Option<Secrets>> {
        let Some(_lock) = self.settled_if_exists()? else { return Ok(None) };
        let relay_code = self.read_secret(RELAY_CODE_FILE)?;
        let auth_token = self.read_secret(AUTH_TOKEN_FILE)?;
        Ok(match (relay_code, auth_token) {
            (Some(relay_code), Some(auth_token)) => Some(Secrets { relay_code, auth_token }),
            _ => None,
        })
    }

    /// The secrets, or a configuration error telling the user to pair first.
    pub fn require_secrets(&self) -> Result<Secrets> {
        self.load_secrets()?.ok_or_else(|| {
            ConfigError::new(format!("not paired yet: no secrets in {}; run `voxa pair`", self.dir.display())).into()
        })
    }

    /// Loads the secrets, creating whichever is missing. Existing secrets are never replaced.
    /// Returns the secrets and whether anything was created.
    pub fn load_or_create_secrets(&self) -> Result<(Secrets, bool)> {
        self.ensure()?;
        let _lock = self.settled()?;
        let mut created = false;
        let mut get = |name: &str| -> Result<Secret> {
            match self.read_secret(name)? {
                Some(secret) => Ok(secret),
                None => {
                    let secret = Secret::generate()?;
                    self.write_atomic(name, format!("{}\n", secret.expose()).as_bytes())?;
                    created = true;
                    Ok(secret)
                }
            }
        };
        let relay_code = get(RELAY_CODE_FILE)?;
        let auth_token = get(AUTH_TOKEN_FILE)?;
        Ok((Secrets { relay_code, auth_token }, created))
    }

    /// Replaces both secrets and keeps the replaced relay code as [`RETIRED_CODE_FILE`]. A crash
    /// at any point leaves the old pair or (after the next start finishes the journal) the new
    /// pair, never a mix and never a torn file.
    pub fn rotate_secrets(&self) -> Result<Secrets> {
        self.ensure()?;
        let _lock = self.settled()?;
        // Refuse to rotate over unreadable secrets we cannot vouch for? No: rotation is the fix
        // for those. Permissions are still enforced by `ensure` above. An unreadable relay code
        // is simply not kept.
        let retired = self
            .read_secret(RELAY_CODE_FILE)
            .ok()
            .flatten()
            .map(|relay_code| RetiredCode { relay_code, rotated_at: SystemTime::now() });
        let secrets = Secrets { relay_code: Secret::generate()?, auth_token: Secret::generate()? };
        // Every link printed before opens nothing: its ticket would be traded for the new token.
        self.forget_tickets()?;
        let mut journal = format!("{}\n{}\n", secrets.relay_code.expose(), secrets.auth_token.expose());
        if let Some(retired) = &retired {
            journal.push_str(&retired.to_text());
        }
        self.write_atomic(ROTATION_JOURNAL, journal.as_bytes())?;
        self.apply_rotation(&secrets, retired.as_ref())?;
        Ok(secrets)
    }

    /// The relay code the last `pair --rotate` replaced, if any.
    pub fn retired_code(&self) -> Result<Option<RetiredCode>> {
        let Some(_lock) = self.settled_if_exists()? else { return Ok(None) };
        let path = self.path(RETIRED_CODE_FILE);
        let Some(text) = read_text_if_exists(&path)? else { return Ok(None) };
        check_private(&path, false)?;
        RetiredCode::parse(text.lines()).map(Some).ok_or_else(|| {
            ConfigError::new(format!("{} is not a relay code and a time; remove it", path.display())).into()
        })
    }

    fn apply_rotation(&self, secrets: &Secrets, retired: Option<&RetiredCode>) -> Result<()> {
        if let Some(retired) = retired {
            self.write_atomic(RETIRED_CODE_FILE, retired.to_text().as_bytes())?;
        }
        self.write_atomic(RELAY_CODE_FILE, format!("{}\n", secrets.relay_code.expose()).as_bytes())?;
        self.write_atomic(AUTH_TOKEN_FILE, format!("{}\n", secrets.auth_token.expose()).as_bytes())?;
        remove_if_exists(&self.path(ROTATION_JOURNAL))?;
        sync_dir(&self.dir)
    }

    /// Takes the home's lock; released when the file is dropped or the process dies.
    fn lock(&self) -> Result<File> {
        self.lock_file(LOCK_FILE)
    }

    /// Takes the home's lock and finishes a rotation an interrupted run left half done.
    fn settled(&self) -> Result<File> {
        let lock = self.lock()?;
        self.finish_interrupted_rotation()?;
        Ok(lock)
    }

    /// [`Home::settled`] for a home that may not exist yet: `None` when it does not.
    fn settled_if_exists(&self) -> Result<Option<File>> {
        self.check()?;
        if !self.exists() {
            return Ok(None);
        }
        self.settled().map(Some)
    }

    /// Takes an exclusive `flock` on the file `name` in the home (created `0600` if missing);
    /// released when the returned file is dropped or the process dies.
    pub fn lock_file(&self, name: &str) -> Result<File> {
        let path = self.path(name);
        let file = open_lock_file(&path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .with_context(|| format!("could not lock {}", path.display()))?;
        Ok(file)
    }

    /// Removes temp files of [`write_atomic`] left by processes that died before the rename.
    /// They may hold secrets and would otherwise pile up, one per crash. Called under the lock.
    fn remove_stale_temp_files(&self) -> Result<()> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err).with_context(|| format!("could not list {}", self.dir.display())),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(temp_file_pid) else { continue };
            if !process_alive(pid) {
                remove_if_exists(&entry.path())?;
            }
        }
        Ok(())
    }

    fn finish_interrupted_rotation(&self) -> Result<()> {
        self.remove_stale_temp_files()?;
        let path = self.path(ROTATION_JOURNAL);
        let Some(text) = read_text_if_exists(&path)? else { return Ok(()) };
        let mut lines = text.lines();
        let parsed = (lines.next().map(Secret::parse_hex128), lines.next().map(Secret::parse_hex128));
        match parsed {
            (Some(Ok(relay_code)), Some(Ok(auth_token))) => {
                check_private(&path, false)?;
                let retired = RetiredCode::parse(lines);
                self.apply_rotation(&Secrets { relay_code, auth_token }, retired.as_ref())
            }
            // The journal itself is written atomically, so a bad one was never ours to finish.
            _ => remove_if_exists(&path),
        }
    }

    fn read_secret(&self, name: &str) -> Result<Option<Secret>> {
        let path = self.path(name);
        let Some(bytes) = read_if_exists(&path)? else { return Ok(None) };
        let Ok(text) = String::from_utf8(bytes) else {
            return Err(ConfigError::new(format!(
                "{} is not a valid secret (not text); run `voxa pair --rotate` to replace it",
                path.display()
            ))
            .into());
        };
        check_private(&path, false)?;
        Secret::parse_hex128(&text).map(Some).map_err(|err| {
            ConfigError::new(format!(
                "{} is not a valid secret ({err}); run `voxa pair --rotate` to replace it",
                path.display()
            ))
            .into()
        })
    }

    /// Writes a file 0600 from the first byte, via temp file + fsync + rename.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<()> {
        write_atomic(&self.path(name), bytes)
    }

    /// The saved relay token, if any. Checked like the other secrets; never printed.
    pub fn load_relay_token(&self) -> Result<Option<Secret>> {
        let path = self.path(RELAY_TOKEN_FILE);
        let Some(text) = read_text_if_exists(&path)? else { return Ok(None) };
        check_private(&path, false)?;
        Ok(Some(Secret::from_string(text.trim().to_owned())).filter(|token| !token.expose().is_empty()))
    }

    /// Saves the relay token (0600, atomically) so an agent started without the environment has it.
    pub fn save_relay_token(&self, token: &Secret) -> Result<()> {
        self.ensure()?;
        self.write_atomic(RELAY_TOKEN_FILE, format!("{}\n", token.expose()).as_bytes())
    }

    /// `config.toml`, or defaults when absent.
    pub fn load_config(&self) -> Result<Config> {
        let path = self.path(CONFIG_FILE);
        let Some(text) = read_text_if_exists(&path)? else { return Ok(Config::default()) };
        check_private(&path, false)?;
        Config::from_toml(&text).map_err(|err| {
            ConfigError::new(format!("{}: {}", path.display(), err.0.trim_start_matches("config.toml "))).into()
        })
    }

    pub fn save_config(&self, config: &Config) -> Result<()> {
        self.ensure()?;
        self.write_atomic(CONFIG_FILE, config.to_toml().as_bytes())
    }

    /// Records the running agent.
    pub fn write_agent_file(&self, port: u16) -> Result<()> {
        let info = AgentFile { pid: std::process::id(), port, version: crate::VERSION.to_owned() };
        let json = serde_json::to_vec(&info).context("could not encode agent.json")?;
        self.write_atomic(AGENT_FILE, &json)
    }

    /// Takes the agent lock for this process's lifetime; fails when another agent of this home
    /// holds it.
    pub fn lock_agent(&self) -> Result<AgentLock> {
        use rustix::fs::FlockOperation;
        let path = self.path(AGENT_LOCK_FILE);
        let file = open_lock_file(&path)?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(AgentLock { _file: file }),
            Err(err) if err == rustix::io::Errno::WOULDBLOCK => {
                let pid = self.read_agent_file().map(|info| format!(" (pid {})", info.pid)).unwrap_or_default();
                anyhow::bail!("another voxa agent is already running for {}{pid}", self.dir.display())
            }
            Err(err) => Err(err).with_context(|| format!("could not lock {}", path.display())),
        }
    }

    /// True while some process holds the agent lock of this home.
    pub fn agent_lock_held(&self) -> Result<bool> {
        use rustix::fs::FlockOperation;
        let path = self.path(AGENT_LOCK_FILE);
        let file = match OpenOptions::new().read(true).open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(false),
            Err(err) => return Err(err).with_context(|| format!("could not open {}", path.display())),
        };
        // A shared lock is granted only when no agent holds its exclusive one; it is released
        // when `file` closes.
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => Ok(false),
            Err(err) if err == rustix::io::Errno::WOULDBLOCK => Ok(true),
            Err(err) => Err(err).with_context(|| format!("could not check {}", path.display())),
        }
    }

    fn read_agent_file(&self) -> Option<AgentFile> {
        serde_json::from_slice(&fs::read(self.path(AGENT_FILE)).ok()?).ok()
    }

    /// The running agent: `agent.json`, trusted only while the agent lock is held and its pid
    /// is a live process of this user.
    pub fn running_agent(&self) -> Result<Option<AgentFile>> {
        let path = self.path(AGENT_FILE);
        let Some(bytes) = read_if_exists(&path)? else { return Ok(None) };
        let Ok(info) = serde_json::from_slice::<AgentFile>(&bytes) else {
            return Ok(None);
        };
        Ok((self.agent_lock_held()? && process_alive(info.pid)).then_some(info))
    }

    /// Removes `agent.json` if it still names this process.
    pub fn remove_agent_file(&self) {
        let path = self.path(AGENT_FILE);
        if let Ok(bytes) = fs::read(&path) {
            if serde_json::from_slice::<AgentFile>(&bytes).is_ok_and(|info| info.pid == std::process::id()) {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// `audit/`, created 0700.
    pub fn audit_dir(&self) -> Result<PathBuf> {
        let dir = self.path(AUDIT_DIR);
        if !dir.exists() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .with_context(|| format!("could not create {}", dir.display()))?;
        }
        check_private(&dir, true)?;
        Ok(dir)
    }
}

/// Opens (creating it 0600 if needed) a file used only for `flock`.
fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("could not open {}", path.display()))
}

/// The bytes of `path`, or `None` when it does not exist; any other failure is an error naming
/// the file.
pub fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("could not read {}", path.display())),
    }
}

/// [`read_if_exists`] for a text file: one that is not UTF-8 is an error naming it.
pub fn read_text_if_exists(path: &Path) -> Result<Option<String>> {
    read_if_exists(path)?
        .map(|bytes| {
            String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("could not read {}: it is not text", path.display()))
        })
        .transpose()
}

/// Refuses a file or directory with any group/other permission bit, like OpenSSH StrictModes.
pub fn check_private(path: &Path, is_dir: bool) -> Result<()> {
    let meta = fs::metadata(path).with_context(|| format!("could not read {}", path.display()))?;
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        let want = if is_dir { "700" } else { "600" };
        return Err(ConfigError::new(format!(
            "{} has unsafe permissions {mode:04o} (group or others can access it); fix with: chmod {want} {}",
            path.display(),
            path.display()
        ))
        .into());
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically; the file is 0600 from its first byte.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let mut nonce = [0u8; 6];
    let _ = rand::rngs::OsRng.try_fill_bytes(&mut nonce);
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), hex::encode(nonce)));
    let result = (|| -> Result<()> {
        let what = || format!("could not write {}", path.display());
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).with_context(what)?;
        file.write_all(bytes).with_context(what)?;
        file.sync_all().with_context(what)?;
        fs::rename(&tmp, path).with_context(|| format!("could not replace {}", path.display()))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The writer's pid of a temp file named `.<name>.<pid>.<12 hex>.tmp` by [`write_atomic`].
fn temp_file_pid(file_name: &str) -> Option<u32> {
    let rest = file_name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, nonce) = rest.rsplit_once('.')?;
    let (name, pid) = rest.rsplit_once('.')?;
    (!name.is_empty() && nonce.len() == 12 && crate::secret::is_lower_hex(nonce)).then_some(())?;
    pid.parse().ok()
}

fn sync_dir(dir: &Path) -> Result<()> {
    // Makes the rename durable. Some filesystems refuse fsync on directories; that is not fatal.
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
    Ok(())
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err).with_context(|| format!("could not remove {}", path.display())),
    }
}

/// True when a process with this pid exists and belongs to this user. Another user's process
/// with the same pid (signalling it is refused) is not ours, however alive.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    match rustix::process::Pid::from_raw(pid) {
        Some(pid) => rustix::process::test_kill_process(pid).is_ok(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn a_missing_file_reads_as_none_and_other_failures_name_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing");
        assert_eq!(read_if_exists(&missing).unwrap(), None);
        assert_eq!(read_text_if_exists(&missing).unwrap(), None);
        let text = tmp.path().join("text");
        fs::write(&text, "hello\n").unwrap();
        assert_eq!(read_text_if_exists(&text).unwrap().as_deref(), Some("hello\n"));
        let binary = tmp.path().join("binary");
        fs::write(&binary, b"\xff\xfe").unwrap();
        assert_eq!(read_if_exists(&binary).unwrap().as_deref(), Some(&b"\xff\xfe"[..]));
        let err = read_text_if_exists(&binary).unwrap_err();
        assert!(format!("{err:#}").contains("binary: it is not text"), "{err:#}");
        let err = read_if_exists(tmp.path()).unwrap_err();
        assert!(format!("{err:#}").contains(&format!("could not read {}", tmp.path().display())), "{err:#}");
    }

    #[test]
    fn secrets_are_created_private_and_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let (first, created) = home.load_or_create_secrets().unwrap();
        assert!(created);
        assert_eq!(mode(home.dir()), 0o700);
        assert_eq!(mode(&home.path(AUTH_TOKEN_FILE)), 0o600);
        assert_eq!(mode(&home.path(RELAY_CODE_FILE)), 0o600);
        let (second, created) = home.load_or_create_secrets().unwrap();
        assert!(!created);
        assert_eq!(first.auth_token, second.auth_token);
        assert_eq!(first.relay_code, second.relay_code);
        assert_ne!(first.auth_token.expose(), first.relay_code.expose());
    }

    #[test]
    fn rotation_replaces_both_and_a_journal_is_finished_on_load() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let (old, _) = home.load_or_create_secrets().unwrap();
        let new = home.rotate_secrets().unwrap();
        assert_ne!(old.auth_token, new.auth_token);
        assert_ne!(old.relay_code, new.relay_code);
        let retired = home.retired_code().unwrap().expect("the replaced code is kept");
        assert_eq!(retired.relay_code, old.relay_code);
        assert!(retired.rotated_at.elapsed().unwrap() < Duration::from_secs(3600));
        assert_eq!(mode(&home.path(RETIRED_CODE_FILE)), 0o600);

        // Simulate a crash after the journal and the first file were written.
        let pending = Secrets { relay_code: Secret::generate().unwrap(), auth_token: Secret::generate().unwrap() };
        let journal = format!(
            "{}\n{}\n{}\n1700000000\n",
            pending.relay_code.expose(),
            pending.auth_token.expose(),
            new.relay_code.expose()
        );
        home.write_atomic(ROTATION_JOURNAL, journal.as_bytes()).unwrap();
        home.write_atomic(RELAY_CODE_FILE, pending.relay_code.expose().as_bytes()).unwrap();
        let loaded = home.load_secrets().unwrap().unwrap();
        assert_eq!(loaded.relay_code, pending.relay_code);
        assert_eq!(loaded.auth_token, pending.auth_token);
        assert!(!home.path(ROTATION_JOURNAL).exists());
        let retired = home.retired_code().unwrap().unwrap();
        assert_eq!(retired.relay_code, new.relay_code);
        assert_eq!(retired.rotated_at, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    }

    #[test]
    fn loose_permissions_are_refused_with_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        home.load_or_create_secrets().unwrap();
        let token = home.path(AUTH_TOKEN_FILE);
        fs::set_permissions(&token, fs::Permissions::from_mode(0o644)).unwrap();
        let err = home.load_secrets().unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains(&format!("chmod 600 {}", token.display())), "{text}");
        assert_eq!(crate::error::exit_for(&err), crate::error::Exit::Usage);

        fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(home.dir(), fs::Permissions::from_mode(0o755)).unwrap();
        let text = format!("{:#}", home.load_secrets().unwrap_err());
        assert!(text.contains("chmod 700"), "{text}");
    }

    #[test]
    fn corrupt_secrets_are_reported_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        home.ensure().unwrap();
        home.write_atomic(AUTH_TOKEN_FILE, b"not-hex-at-all").unwrap();
        let err = home.load_or_create_secrets().unwrap_err();
        assert!(format!("{err:#}").contains("--rotate"));
        assert_eq!(fs::read(home.path(AUTH_TOKEN_FILE)).unwrap(), b"not-hex-at-all");
    }

    #[test]
    fn only_our_temp_file_names_are_recognised() {
        assert_eq!(temp_file_pid(".auth_token.4242.0a8b4c15f298.tmp"), Some(4242));
        assert_eq!(temp_file_pid("..rotation.7.f2803ee8b82b.tmp"), Some(7));
        for other in ["auth_token", ".auth_token.4242.tmp", ".x.abc.0a8b4c15f298.tmp", "..4242.0a8b4c15f298.tmp"] {
            assert_eq!(temp_file_pid(other), None, "{other}");
        }
    }

    #[test]
    fn agent_json_is_trusted_only_while_the_agent_lock_is_held() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        home.ensure().unwrap();
        home.write_agent_file(4242).unwrap();
        // This process is alive, but nobody holds the lock: a stale file.
        assert_eq!(home.running_agent().unwrap(), None);
        let lock = home.lock_agent().unwrap();
        assert_eq!(home.running_agent().unwrap().map(|a| a.port), Some(4242));
        let second = home.lock_agent().unwrap_err();
        assert!(format!("{second:#}").contains("already running"), "{second:#}");
        drop(lock);
        assert_eq!(home.running_agent().unwrap(), None);
        assert_eq!(mode(&home.path(AGENT_LOCK_FILE)), 0o600);
    }

    #[test]
    fn a_file_as_home_is_a_clear_error() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let home = Home::at(tmp.path());
        let err = home.load_or_create_secrets().unwrap_err();
        assert!(format!("{err:#}").contains("not a directory"));
    }
}
