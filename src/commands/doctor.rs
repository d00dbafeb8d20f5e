//! `voxa doctor`: one line per check — ok, warn or fail — each problem with the command that fixes
//! it. Read-only (it creates, repairs and rotates nothing) and it never prints a secret: a key is
//! described by its shape only.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Settings;
use crate::cli::DoctorArgs;
use crate::config::{Config, RelayUrl};
use crate::error::Exit;
use crate::net::dial::{DialOptions, Io};
use crate::secret::Secret;
use crate::state::{
    read_if_exists, read_text_if_exists, AgentFile, Home, AGENT_FILE, AUDIT_DIR, AUTH_TOKEN_FILE, CONFIG_FILE,
    RELAY_CODE_FILE,
};

/// Longest any one network step (TCP, TLS, one HTTP exchange) may take.
pub const NET_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest HTTP response read from the relay.
const MAX_RESPONSE_LEN: usize = 16 << 10;
/// Clock difference with the relay above which doctor warns.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);
/// Open-file soft limit below which doctor warns.
pub const MIN_OPEN_FILES: u64 = 1024;
/// Length of a Google API key (`AIza` + 35 characters).
const GOOGLE_KEY_LEN: usize = 39;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub status: Status,
    pub message: String,
    /// What to do about a warning or failure.
    pub fix: Option<String>,
}

impl Check {
    fn ok(check: &'static str, message: impl Into<String>) -> Check {
        Check { check, status: Status::Ok, message: message.into(), fix: None }
    }

    fn warn(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { check, status: Status::Warn, message: message.into(), fix: Some(fix.into()) }
    }

    fn fail(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { check, status: Status::Fail, message: message.into(), fix: Some(fix.into()) }
    }
}

/// `voxa doctor`: prints the report; exits 0 when no check failed, 1 otherwise.
pub async fn run_doctor(settings: &Settings, args: DoctorArgs) -> Result<Exit> {
    let checks = diagnose(settings, &args).await;
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
    let value = json!({"ok": failed == 0, "failures": failed, "warnings": warned, "checks": checks});
    let mut human = String::new();
    for check in &checks {
        let status = match check.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        };
        let _ = write!(human, "{status:<4}  {:<14} {}", check.check, check.message);
        if let Some(fix) = &check.fix {
            let _ = write!(human, " — fix: {fix}");
        }
        human.push('\n');
    }
    let _ = writeln!(
        human,
        "{}",
        match (failed, warned) {
            (0, 0) => "everything looks right".to_owned(),
            (0, w) => format!("nothing failed; {w} warning(s)"),
            (f, w) => format!("{f} check(s) failed, {w} warning(s)"),
        }
    );
    settings.printer.result(&value, human)?;
    Ok(if failed == 0 { Exit::Ok } else { Exit::Failure })
}

/// Runs every check in order. Never fails as a whole: each problem is a line of the report.
pub async fn diagnose(settings: &Settings, args: &DoctorArgs) -> Vec<Check> {
    let home = settings.home.dir();
    let mut checks = vec![check_home(home), check_files(home), check_secrets(home)];
    let (config_check, config) = check_config(home);
    checks.push(config_check);
    let relay = match settings.relay(&config) {
        Ok(relay) => {
            checks.push(Check::ok("relay", format!("{relay} ({})", relay_source(settings, &config))));
            Some(relay)
        }
        Err(err) => {
            checks.push(Check::fail(
                "relay",
                format!("{err:#}"),
                "pass --relay https://… (and `voxa pair` to save it)",
            ));
            None
        }
    };
    let dial = dial_options(args, &mut checks);
    if let (Some(relay), Some(dial)) = (&relay, &dial) {
        check_relay(relay, dial, args, home, &mut checks).await;
    }
    checks.push(check_display().await);
    checks.extend(check_coding_agents(&config));
    if settings.self_hosted {
        checks.push(check_gemini_key(settings.env_secrets.gemini_api_key.as_ref()));
        checks.push(check_gemini_reachable(dial.as_ref()).await);
    }
    checks.push(check_agent(home).await);
    checks.push(check_service());
    checks.push(check_open_files());
    checks
}

fn check_home(home: &Path) -> Check {
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
fn check_files(home: &Path) -> Check {
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
fn check_secrets(home: &Path) -> Check {
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

fn check_config(home: &Path) -> (Check, Config) {
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

fn relay_source(settings: &Settings, config: &Config) -> &'static str {
    if settings.relay_flag.is_some() {
        "from --relay or VOXA_RELAY"
    } else if config.relay.is_some() {
        "saved in config.toml"
    } else {
        "the default"
    }
}

/// Proxy and extra roots as `voxa run` would use them; reports the proxy.
fn dial_options(args: &DoctorArgs, checks: &mut Vec<Check>) -> Option<DialOptions> {
    let mut dial = match DialOptions::default().with_proxy_from_env() {
        Ok(dial) => dial,
        Err(err) => {
            checks.push(Check::fail(
                "proxy",
                format!("{err:#}"),
                "fix HTTPS_PROXY (http://[user:password@]host:port) or unset it",
            ));
            return None;
        }
    };
    checks.push(match &dial.proxy {
        Some(proxy) => {
            Check::ok("proxy", format!("HTTPS_PROXY {}:{} (CONNECT) for TLS relays", proxy.host, proxy.port))
        }
        None => Check::ok("proxy", "none (direct connections)"),
    });
    if let Some(path) = &args.ca_cert {
        match dial.trust_pem_file(path) {
            Ok(with_roots) => dial = with_roots,
            Err(err) => {
                checks.push(Check::fail("ca-cert", format!("{err:#}"), "pass a PEM certificate file to --ca-cert"));
                return None;
            }
        }
    }
    Some(dial)
}

/// Where the relay is, split for the step-by-step connection.
struct Target {
    host: String,
    port: u16,
    tls: bool,
    /// The relay's base path, without a trailing slash.
    base_path: String,
}

impl Target {
    fn of(relay: &RelayUrl) -> Result<Target> {
        let url = url::Url::parse(relay.as_str()).context("relay URL")?;
        let host = url.host_str().ok_or_else(|| anyhow!("relay URL has no host"))?;
        Ok(Target {
            host: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
            port: url.port_or_known_default().unwrap_or(443),
            tls: relay.is_tls(),
            base_path: url.path().trim_end_matches('/').to_owned(),
        })
    }
}

/// TCP (through the proxy when `run` would use it), TLS, `/healthz`, the relay token and the
/// clock, each its own line; later steps are skipped once one fails.
async fn check_relay(relay: &RelayUrl, dial: &DialOptions, args: &DoctorArgs, home: &Path, checks: &mut Vec<Check>) {
    let target = match Target::of(relay) {
        Ok(target) => target,
        Err(err) => return checks.push(Check::fail("relay tcp", format!("{err:#}"), "pass --relay https://…")),
    };
    let tcp = match connect_tcp(&target, dial).await {
        Ok(tcp) => tcp,
        Err(err) => {
            return checks.push(Check::fail(
                "relay tcp",
                format!("cannot connect to {}:{}: {err:#}", target.host, target.port),
                "is the relay running and the address right? check the network, proxy and firewall",
            ))
        }
    };
    let via = if dial.proxy.is_some() && target.tls && !dial.bypasses_proxy(&target.host) {
        " through the proxy"
    } else {
        ""
    };
    checks.push(Check::ok("relay tcp", format!("{}:{} accepts connections{via}", target.host, target.port)));
    let stream = if target.tls {
        match connect_tls(&target, dial, tcp).await {
            Ok(stream) => {
                let roots = if dial.extra_roots.is_empty() { "the web's roots" } else { "the web's roots and --ca-cert" };
                checks.push(Check::ok("relay tls", format!("certificate of {} verified with {roots}", target.host)));
                stream
            }
            Err(err) => {
                return checks.push(Check::fail(
                    "relay tls",
                    format!("TLS with {} failed: {err:#}", target.host),
                    "a self-signed relay needs --ca-cert FILE (here and on voxa run); an expired certificate needs the relay operator; check this machine's clock",
                ))
            }
        }
    } else {
        Box::new(tcp) as Box<dyn Io>
    };
    let health = match http_get(stream, &target, "/healthz", None).await {
        Ok(response) if response.status == 200 && response.body.trim() == "ok" => response,
        other => {
            let why = match other {
                Ok(response) => format!("answered {} instead of 200 ok", response.status),
                Err(err) => format!("failed: {err:#}"),
            };
            return checks.push(Check::fail(
                "relay health",
                format!("GET /healthz {why}"),
                "this address is not a voxa relay, or the relay is unhealthy: check --relay",
            ));
        }
    };
    let took = health.elapsed.as_millis();
    checks.push(Check::ok("relay health", format!("GET /healthz answered 200 ok in {took} ms")));
    checks.push(check_relay_token(&target, dial, args, home).await);
    checks.push(check_clock(health.date, health.received));
}

/// Asks `/agent` without a code: the relay checks its token before the code, so `401` means
/// "token refused" and `400` means "token accepted (or none needed)". No code is ever sent.
async fn check_relay_token(target: &Target, dial: &DialOptions, args: &DoctorArgs, home: &Path) -> Check {
    const NAME: &str = "relay token";
    let given = super::token_value(args.relay_token.as_deref());
    let source = if given.is_some() {
        "VOXA_RELAY_TOKEN".to_owned()
    } else {
        format!("the token saved in {}", home.join(crate::state::RELAY_TOKEN_FILE).display())
    };
    // A bad file is the permissions or secrets check's business; here it counts as absent.
    let token = given.or_else(|| crate::state::Home::at(home).load_relay_token().ok().flatten());
    let ask = |bearer: Option<Secret>| async move {
        let stream = open_stream(target, dial).await?;
        http_get(stream, target, "/agent", bearer.as_ref()).await.map(|response| response.status)
    };
    let without = match ask(None).await {
        Ok(status) => status,
        Err(err) => return Check::warn(NAME, format!("could not ask the relay: {err:#}"), "run voxa doctor again"),
    };
    match (without, &token) {
        (400, None) => Check::ok(NAME, "the relay needs no token"),
        (400, Some(_)) => Check::ok(NAME, format!("the relay needs no token ({source} is unused)")),
        (401, None) => Check::fail(
            NAME,
            "the relay requires a token and none is set",
            "set VOXA_RELAY_TOKEN to the relay's token (its operator has it); for the service, `voxa service install` saves it",
        ),
        (401, Some(_)) => match ask(token).await {
            Ok(400) => Check::ok(NAME, format!("the relay accepted {source}")),
            Ok(401) => Check::fail(
                NAME,
                format!("the relay refused {source}"),
                "set VOXA_RELAY_TOKEN to the token the relay runs with (--relay-token); `voxa service install` with it set replaces the saved one",
            ),
            Ok(other) => {
                Check::warn(NAME, format!("could not tell: /agent answered {other}"), "check the relay's address")
            }
            Err(err) => Check::warn(NAME, format!("could not ask the relay: {err:#}"), "run voxa doctor again"),
        },
        (other, _) => Check::warn(
            NAME,
            format!("could not tell: /agent answered {other} (a proxy in front of the relay?)"),
            "check the relay's address",
        ),
    }
}

fn check_clock(date: Option<SystemTime>, received: SystemTime) -> Check {
    const NAME: &str = "clock";
    let Some(date) = date else {
        return Check::warn(
            NAME,
            "the relay sent no Date header; the clock was not compared",
            "none needed if the clock is synchronised",
        );
    };
    let (ahead, skew) = match received.duration_since(date) {
        Ok(skew) => (true, skew),
        Err(err) => (false, err.duration()),
    };
    // Date has one-second resolution and is truncated.
    let skew = skew.saturating_sub(Duration::from_secs(1));
    if skew <= MAX_CLOCK_SKEW {
        return Check::ok(NAME, format!("within {} s of the relay's", MAX_CLOCK_SKEW.as_secs()));
    }
    Check::warn(
        NAME,
        format!("this clock is {} s {} the relay's", skew.as_secs(), if ahead { "ahead of" } else { "behind" }),
        "turn on time synchronisation (timedatectl set-ntp true, or System Settings → Date & Time)",
    )
}

async fn connect_tcp(target: &Target, dial: &DialOptions) -> Result<TcpStream> {
    let attempt = async {
        match dial.proxy.as_ref().filter(|_| target.tls && !dial.bypasses_proxy(&target.host)) {
            Some(proxy) => proxy.connect(&target.host, target.port).await,
            None => TcpStream::connect((target.host.as_str(), target.port)).await.map_err(anyhow::Error::from),
        }
    };
    tokio::time::timeout(NET_TIMEOUT, attempt)
        .await
        .map_err(|_| anyhow!("timed out after {} s", NET_TIMEOUT.as_secs()))?
}

async fn connect_tls(target: &Target, dial: &DialOptions, tcp: TcpStream) -> Result<Box<dyn Io>> {
    let config = crate::net::dial::tls_client_config(&dial.extra_roots)?;
    let name = rustls_pki_types::ServerName::try_from(target.host.clone()).context("invalid TLS server name")?;
    let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
    let stream = tokio::time::timeout(NET_TIMEOUT, handshake)
        .await
        .map_err(|_| anyhow!("timed out after {} s", NET_TIMEOUT.as_secs()))??;
    Ok(Box::new(stream))
}

async fn open_stream(target: &Target, dial: &DialOptions) -> Result<Box<dyn Io>> {
    let tcp = connect_tcp(target, dial).await?;
    if target.tls {
        connect_tls(target, dial, tcp).await
    } else {
        Ok(Box::new(tcp))
    }
}

/// What an HTTP exchange returned.
struct Response {
    status: u16,
    date: Option<SystemTime>,
    body: String,
    received: SystemTime,
    elapsed: Duration,
}

/// One `GET` on its own connection (`Connection: close`), response bounded in size and time.
async fn http_get(mut stream: Box<dyn Io>, target: &Target, path: &str, bearer: Option<&Secret>) -> Result<Response> {
    let started = Instant::now();
    let host = if target.host.contains(':') { format!("[{}]", target.host) } else { target.host.clone() };
    let mut request = format!(
        "GET {}{path} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: voxa-doctor/{}\r\nConnection: close\r\n",
        target.base_path,
        target.port,
        crate::VERSION
    );
    if let Some(bearer) = bearer {
        request.push_str(&format!("Authorization: Bearer {}\r\n", bearer.expose()));
    }
    request.push_str("\r\n");
    let exchange = async {
        stream.write_all(request.as_bytes()).await?;
        stream.flush().await?;
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        loop {
            let n = match stream.read(&mut chunk).await {
                Ok(n) => n,
                // A TLS peer that closes without close_notify still sent a complete response.
                Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => 0,
                Err(err) => return Err(anyhow::Error::from(err)),
            };
            if n == 0 {
                return Ok(buf);
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_RESPONSE_LEN {
                bail!("response larger than {MAX_RESPONSE_LEN} bytes");
            }
        }
    };
    let bytes = tokio::time::timeout(NET_TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow!("no answer within {} s", NET_TIMEOUT.as_secs()))??;
    let received = SystemTime::now();
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(&bytes).context("the answer is not HTTP")? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => bail!("the answer ended early"),
    };
    let date = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("date"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|value| httpdate::parse_http_date(value.trim()).ok());
    Ok(Response {
        status: response.code.unwrap_or(0),
        date,
        body: String::from_utf8_lossy(&bytes[head_len..]).into_owned(),
        received,
        elapsed: started.elapsed(),
    })
}

/// A display the screenshot tool can capture.
async fn check_display() -> Check {
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
fn check_coding_agents(config: &Config) -> Vec<Check> {
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

/// The shape of `GEMINI_API_KEY` (taken out of the environment at start), never its value.
fn check_gemini_key(key: Option<&Secret>) -> Check {
    const NAME: &str = "gemini key";
    let key = key.map(Secret::expose).unwrap_or_default().trim();
    if key.is_empty() {
        return Check::fail(
            NAME,
            "GEMINI_API_KEY is not set; --self-hosted needs it",
            "export GEMINI_API_KEY=… (from Google AI Studio)",
        );
    }
    let plausible = key.len() == GOOGLE_KEY_LEN
        && key.starts_with("AIza")
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plausible {
        Check::ok(NAME, "GEMINI_API_KEY is set and plausible (shape of a Google API key)")
    } else {
        Check::warn(
            NAME,
            format!(
                "GEMINI_API_KEY does not look like a Google API key ({GOOGLE_KEY_LEN} characters starting with AIza)"
            ),
            "copy the key again from Google AI Studio (no quotes or spaces)",
        )
    }
}

/// TCP (and TLS) to the Gemini Live endpoint; the key is not sent.
async fn check_gemini_reachable(dial: Option<&DialOptions>) -> Check {
    const NAME: &str = "gemini";
    let url = match crate::gemini::live_url() {
        Ok(url) => url,
        Err(err) => return Check::fail(NAME, format!("{err:#}"), "fix or unset VOXA_GEMINI_URL"),
    };
    let Ok(parsed) = url::Url::parse(&url) else {
        return Check::fail(NAME, "the Gemini URL is not valid", "fix or unset VOXA_GEMINI_URL");
    };
    let target = Target {
        host: parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned(),
        port: parsed.port_or_known_default().unwrap_or(443),
        tls: parsed.scheme() == "wss",
        base_path: String::new(),
    };
    let dial = dial.cloned().unwrap_or_default();
    match open_stream(&target, &dial).await {
        Ok(_) => Check::ok(
            NAME,
            format!("{}:{} answers{}", target.host, target.port, if target.tls { " (TLS verified)" } else { "" }),
        ),
        Err(err) => Check::fail(
            NAME,
            format!("cannot reach {}:{}: {err:#}", target.host, target.port),
            "check the network and proxy (HTTPS_PROXY); Gemini Live is wss:// on port 443",
        ),
    }
}

/// The agent named by `agent.json`: process alive, holding the home's agent lock, proving on its
/// port that it holds this home's auth token (the token itself never crosses the socket), and
/// the same version as this binary.
async fn check_agent(home: &Path) -> Check {
    let path = home.join(AGENT_FILE);
    let info = match recorded_agent(home, &path) {
        Ok(info) => info,
        Err(check) => return check,
    };
    let Some(token) =
        std::fs::read_to_string(home.join(AUTH_TOKEN_FILE)).ok().and_then(|t| Secret::parse_hex128(&t).ok())
    else {
        return Check::warn(
            AGENT_CHECK,
            format!("pid {} on port {}: not verified without a valid auth token", info.pid, info.port),
            "see the secrets check",
        );
    };
    answering_agent(&info, &token, &path).await
}

/// Name of the agent check.
const AGENT_CHECK: &str = "agent";

/// The agent `agent.json` at `path` names, if it is a live process holding the home's agent lock;
/// otherwise the check's warning.
fn recorded_agent(home: &Path, path: &Path) -> Result<AgentFile, Check> {
    let bytes = match read_if_exists(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(Check::warn(
                AGENT_CHECK,
                "not running",
                "voxa run (or voxa service install to run it at login)",
            ))
        }
        Err(err) => return Err(Check::warn(AGENT_CHECK, format!("{err:#}"), "check its owner and permissions")),
    };
    let stale_fix = format!("rm {}, then voxa run", path.display());
    let Ok(info) = serde_json::from_slice::<AgentFile>(&bytes) else {
        return Err(Check::warn(AGENT_CHECK, format!("{} is not valid", path.display()), stale_fix));
    };
    if !crate::state::process_alive(info.pid) {
        return Err(Check::warn(
            AGENT_CHECK,
            format!("stale {}: pid {} is not running (the agent did not exit cleanly)", path.display(), info.pid),
            stale_fix,
        ));
    }
    // A live agent holds its home's lock for its whole life; a live pid without it was reused.
    match Home::at(home).agent_lock_held() {
        Ok(true) => Ok(info),
        Ok(false) => Err(Check::warn(
            AGENT_CHECK,
            format!(
                "stale {}: pid {} is alive but is not this home's agent (it holds no agent lock)",
                path.display(),
                info.pid
            ),
            stale_fix,
        )),
        Err(err) => Err(Check::warn(AGENT_CHECK, format!("{err:#}"), "check the home's permissions")),
    }
}

/// Whether the recorded agent proves on its port that it is this laptop's, and runs this version.
async fn answering_agent(info: &AgentFile, token: &Secret, path: &Path) -> Check {
    let answered = match verify_loopback(info.port, token).await {
        Ok(hello_ok) => hello_ok,
        Err(err) => {
            return Check::fail(
                AGENT_CHECK,
                format!("pid {} on port {} did not answer as this laptop's agent: {err:#}", info.pid, info.port),
                format!(
                    "restart the agent (one started before `voxa pair --rotate` still holds the old token; a stuck one \
                     needs stopping): voxa service install restarts the service; if pid {} is not voxa, rm {}",
                    info.pid,
                    path.display()
                ),
            )
        }
    };
    if answered.agent != crate::agent_name() {
        return Check::warn(
            AGENT_CHECK,
            format!(
                "pid {} on port {} runs {}, this binary is {}",
                info.pid,
                info.port,
                answered.agent,
                crate::agent_name()
            ),
            "restart the agent so it runs this version (voxa service install restarts the service)",
        );
    }
    Check::ok(
        AGENT_CHECK,
        format!(
            "pid {} answering on 127.0.0.1:{} as this laptop's agent, version {}",
            info.pid, info.port, info.version
        ),
    )
}

/// The protocol-2 session start on the loopback port: whatever answers must prove it holds the
/// token before anything else happens, and only a proof (never the token) is sent. Closed at once.
async fn verify_loopback(port: u16, token: &Secret) -> Result<crate::protocol::HelloOk> {
    let attempt = async {
        let url = format!("ws://127.0.0.1:{port}/");
        let mut socket = crate::net::dial::connect(&url, &DialOptions::default()).await?;
        let client = format!("voxa-doctor/{}", crate::VERSION);
        let hello_ok = crate::net::client::hello(&mut socket, token, &client).await?;
        let _ = futures_util::SinkExt::close(&mut socket).await;
        Ok(hello_ok)
    };
    tokio::time::timeout(NET_TIMEOUT, attempt)
        .await
        .map_err(|_| anyhow!("no answer within {} s", NET_TIMEOUT.as_secs()))?
}

/// The installed service, if any, still starts a binary that exists (a moved or removed binary
/// fails at every login, silently).
fn check_service() -> Check {
    use super::service::{installed_file, program_of, Platform};
    const NAME: &str = "service";
    let Ok(file) = installed_file() else {
        return Check::ok(NAME, "cannot locate your home directory; not checked");
    };
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Check::ok(NAME, "not installed (voxa service install runs voxa at login)");
    };
    let Some(program) = program_of(Platform::current(), &text) else {
        return Check::warn(NAME, format!("{} names no program", file.display()), "voxa service install (rewrites it)");
    };
    if !Path::new(&program).is_file() {
        return Check::fail(
            NAME,
            format!("{} starts {program}, which does not exist any more", file.display()),
            "voxa service install (rewrites it for this binary)",
        );
    }
    let current = std::env::current_exe().and_then(|exe| exe.canonicalize()).ok();
    if current.as_deref() != Some(Path::new(&program)) {
        return Check::warn(
            NAME,
            format!("{} starts {program}, not this binary", file.display()),
            "voxa service install, to run this binary at login",
        );
    }
    Check::ok(NAME, format!("{} starts this binary", file.display()))
}

fn check_open_files() -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_skew_is_judged_with_a_second_of_slack() {
        let now = SystemTime::now();
        assert_eq!(check_clock(Some(now - Duration::from_secs(20)), now).status, Status::Ok);
        let ahead = check_clock(Some(now - Duration::from_secs(120)), now);
        assert_eq!(ahead.status, Status::Warn);
        assert!(ahead.message.contains("ahead"), "{}", ahead.message);
        let behind = check_clock(Some(now + Duration::from_secs(120)), now);
        assert!(behind.message.contains("behind"), "{}", behind.message);
        assert_eq!(check_clock(None, now).status, Status::Warn);
    }
}
