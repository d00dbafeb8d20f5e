//! `voxa run`: start the agent (loopback server, relay link, environment pairings) and print
//! what its links report until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use super::output::Printer;
use super::Settings;
use crate::agent::{self, link_events, AgentOptions, BackoffPolicy, LinkEvent};
use crate::cli::RunArgs;
use crate::config::{Config, RelayUrl};
use crate::error::ConfigError;
use crate::gemini::GeminiConfig;
use crate::net::dial::DialOptions;
use crate::net::liveness::Heartbeat;
use crate::protocol::RelayPage;
use crate::secret::{EnvSecrets, Secret};
use crate::state::{Home, Secrets};

/// `voxa run`.
pub async fn run_agent(settings: &Settings, args: RunArgs) -> Result<()> {
    let home = &settings.home;
    let printer = settings.printer;
    let gemini = if settings.self_hosted { Some(gemini_config(&args, &settings.env_secrets)?) } else { None };
    home.ensure()?;
    // Held until this process ends: while it is, `agent.json` speaks for this agent.
    let _agent_lock = home.lock_agent()?;
    // Room for the loopback socket's connections; it keeps a reserve for the agent's own files.
    super::relay::raise_fd_limit();
    let mut config = home.load_config()?;
    let gemini = gemini.map(|gemini| with_saved_voice(gemini, &args, &config));
    let mut dial = dial_options(&args, home)?;
    let workspace = workspace(&args)?;
    warn_if_home_in_workspace(home, &workspace, printer);
    let shutdown = super::shutdown::on_signal();
    let tasks = TaskTracker::new();
    let (relays, secrets) = relay_and_secrets(settings, &args, &mut config, &mut dial, &tasks, &shutdown).await?;
    let relay = relays[0].clone();
    let listener = TcpListener::bind(("127.0.0.1", args.port))
        .await
        .with_context(|| format!("could not listen on 127.0.0.1:{}", args.port))?;
    let port = listener.local_addr()?.port();
    let events = link_events();
    let printed = tasks.spawn(print_events(events.subscribe(), printer));
    let options = AgentOptions {
        home: home.clone(),
        secrets,
        relay: Some(relay.clone()),
        extra_relays: relays[1..].to_vec(),
        workspace: workspace.clone(),
        config,
        dial,
        heartbeat: Heartbeat::default(),
        backoff: BackoffPolicy::default(),
        gemini,
        events,
        retired_window: agent::retired::RETIRED_CODE_WINDOW,
        awake: agent::awake::AwakeOptions::default(),
    };
    let agent = agent::start(options, listener, shutdown.clone()).await?;
    home.write_agent_file(port)?;
    printer.event(
        "started",
        json!({"port": port, "pid": std::process::id(), "workspace": workspace.display().to_string(), "mode": agent.ctx.mode(), "relay": relay.as_str(), "relays": relays.iter().map(RelayUrl::as_str).collect::<Vec<_>>()}),
        format!(
            "voxa {} running, workspace {}, local port {port}; voice calls: {}",
            crate::VERSION,
            workspace.display(),
            voice_host(agent.ctx.mode())
        ),
    );
    agent.wait().await;
    drop(agent);
    // Every link has ended, so the event stream is closed: print what is left, then "stopped".
    if let Err(err) = printed.await {
        warn!(%err, "event printer failed");
    }
    tasks.close();
    tasks.wait().await;
    home.remove_agent_file();
    printer.event("stopped", json!({}), "stopped");
    Ok(())
}

/// Who hosts this agent's voice calls, as the first line says it (`mode` is `hello_ok`'s word).
fn voice_host(mode: &str) -> &'static str {
    match mode {
        "self-hosted" => "hosted here (Gemini, with this machine's key)",
        _ => "hosted by the relay, if it offers them",
    }
}

/// The relays this agent dials — the embedded one (on loopback, or on this network with its own
/// certificate, which `dial` then trusts), or the configured ones (saved as the home's relays),
/// never empty — with this home's secrets, created on first run. The pairing is printed when the
/// secrets are new or the relay is embedded.
async fn relay_and_secrets(
    settings: &Settings,
    args: &RunArgs,
    config: &mut Config,
    dial: &mut DialOptions,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<(Vec<RelayUrl>, Secrets)> {
    let (home, printer) = (&settings.home, settings.printer);
    let embedded = match (&args.embedded_relay, &args.lan) {
        (Some(addr), _) => Some(Embedded::Loopback(parse_loopback(addr)?)),
        (None, Some(lan)) => Some(Embedded::Lan(super::lan::listen_address(lan)?)),
        (None, None) => None,
    };
    // The embedded relay stands in for a remote one: nothing about it is saved.
    let (relays, lan) = match &embedded {
        Some(embedded) => {
            let (relay, lan) = start_embedded_relay(embedded, home, printer, tasks, shutdown).await?;
            (vec![relay], lan)
        }
        None => (settings.relays(config)?, None),
    };
    if let Some(cert) = &lan {
        // This agent dials its own relay, trusting its certificate, never through a proxy.
        dial.extra_roots.push(rustls_pki_types::CertificateDer::from(cert.der.clone()));
        dial.proxy = None;
    }
    let (secrets, created) = home.load_or_create_secrets()?;
    if embedded.is_none() {
        super::pair::save_relays(home, config, &relays)?;
    }
    if created || embedded.is_some() {
        // The embedded relay asks for no token; another one gets the token this agent dials with.
        let relay_token = dial.bearer.as_ref().filter(|_| embedded.is_none());
        let fingerprint = lan.as_ref().map(|cert| cert.fingerprint.as_str());
        print_pairing(home, &relays, &secrets, relay_token, fingerprint, printer)?;
    }
    Ok((relays, secrets))
}

/// Where the relay inside `voxa run` listens.
enum Embedded {
    /// `--embedded-relay`: a loopback address, plain HTTP.
    Loopback(SocketAddr),
    /// `--lan`: this machine's address on the local network, HTTPS with a certificate of its own.
    Lan(SocketAddr),
}

/// Dial options from the flags and the environment (proxy, extra CA, relay token); without
/// `VOXA_RELAY_TOKEN`, the relay token saved in the home (a service's).
fn dial_options(args: &RunArgs, home: &Home) -> Result<DialOptions> {
    let mut dial = DialOptions::default().with_proxy_from_env()?;
    if let Some(path) = &args.ca_cert {
        dial = dial.trust_pem_file(path)?;
    }
    // A service has no token in its environment: it reads the one `voxa service install` saved.
    dial.bearer = match super::relay_token(args.relay_token.as_deref(), args.relay_token_file.as_deref())? {
        Some(token) => Some(token),
        None => home.load_relay_token()?,
    };
    Ok(dial)
}

/// `--workspace`, else the current directory, canonicalised.
fn workspace(args: &RunArgs) -> Result<PathBuf> {
    let workspace = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("could not read the current directory")?,
    };
    workspace
        .canonicalize()
        .map_err(|err| ConfigError::new(format!("workspace {} is not usable: {err}", workspace.display())).into())
}

/// The file tools refuse the home (`protected-path`), but `run_command` and the coding agent run
/// with this user's rights and can read it: say so when the workspace holds the home.
fn warn_if_home_in_workspace(home: &Home, workspace: &Path, printer: Printer) {
    let home_dir = home.dir().canonicalize().unwrap_or_else(|_| home.dir().to_path_buf());
    if !home_dir.starts_with(workspace) {
        return;
    }
    let message = format!(
        "warning: the workspace {} contains voxa's state directory {}; file tools refuse it, but commands \
         and coding agents run as you and can read its secrets. Pass --workspace with a project directory",
        workspace.display(),
        home_dir.display()
    );
    printer.event(
        "warning",
        json!({"warning": "home-in-workspace", "workspace": workspace.display().to_string(), "home": home_dir.display().to_string()}),
        message,
    );
}

/// Starts the embedded relay on `tasks`; returns its URL and, for `--lan`, its certificate.
async fn start_embedded_relay(
    embedded: &Embedded,
    home: &Home,
    printer: Printer,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<(RelayUrl, Option<super::lan::LanCert>)> {
    let (addr, lan) = match embedded {
        Embedded::Loopback(addr) => (*addr, None),
        Embedded::Lan(addr) => (*addr, Some(super::lan::certificate_for(home, addr.ip())?)),
    };
    let listener = bind_embedded_relay(addr, home).await?;
    let local = listener.local_addr()?;
    let mut config = crate::relay::RelayConfig::default();
    let url = match &lan {
        Some(cert) => {
            let tls = crate::relay::load_tls(&home.path(super::lan::CERT_FILE), &home.path(super::lan::KEY_FILE))?;
            config.tls = Some(tls);
            config.certificate_sha256 = Some(cert.sha256);
            format!("https://{local}")
        }
        None => format!("http://{local}"),
    };
    let fingerprint = lan.as_ref().map(|cert| cert.fingerprint.as_str());
    let text = match &lan {
        Some(cert) if cert.made => format!("embedded relay on {url}, with a new certificate (SHA-256 below)"),
        Some(_) => format!("embedded relay on {url}, with the certificate of the last run (SHA-256 below)"),
        None => format!("embedded relay on {local}"),
    };
    printer.event(
        "embedded_relay",
        json!({"listen": local.to_string(), "url": url, "certificate_sha256": fingerprint, "certificate_new": lan.as_ref().map(|c| c.made)}),
        text,
    );
    let stop = shutdown.clone();
    tasks.spawn(async move {
        if let Err(err) = crate::relay::run(listener, config, stop.cancelled_owned()).await {
            warn!("embedded relay stopped: {err:#}");
        }
    });
    Ok((RelayUrl::parse(&url)?, lan))
}

/// Whether `relay` is the relay a `voxa run` of this home embeds: on the port it last listened on,
/// over HTTP on loopback (`--embedded-relay`) or over HTTPS with the home's `--lan` certificate.
pub fn is_embedded_relay(home: &Home, relay: &RelayUrl) -> bool {
    let Ok(url) = url::Url::parse(relay.as_str()) else { return false };
    let saved = saved_embedded_port(home).ok().flatten();
    if saved.is_none() || url.port_or_known_default() != saved {
        return false;
    }
    match url.scheme() {
        "http" => url.host_str().is_some_and(crate::config::is_loopback_host),
        _ => super::lan::fingerprint_of(home, relay).is_some(),
    }
}

/// The pairing URL (`--json`) or the QR code and URL; `lan`, the fingerprint of a `--lan` relay's
/// certificate, beside them.
fn print_pairing(
    home: &Home,
    relays: &[RelayUrl],
    secrets: &Secrets,
    relay_token: Option<&Secret>,
    lan: Option<&str>,
    printer: Printer,
) -> Result<()> {
    // The link carries a one-time ticket, never the token (docs/SECURITY.md).
    let link = super::pair::Link::new(home, relays, secrets, relay_token)?;
    let relay = &relays[0];
    if printer.is_json() {
        let reaches = super::reach::Reach::of_link(relay, lan).as_str();
        let fields = json!({"url": link.url, "ticket_expires": link.expires(), "relay": relay.as_str(), "relays": link.relay_urls(), "reaches": reaches, "relay_token_in_link": relay_token.is_some(), "relay_certificate_sha256": lan});
        printer.event("pairing", fields, "");
    } else {
        let text = super::pair::pairing_text(&link, relay_token.is_some(), lan, true, printer.is_terminal())?;
        printer.event("pairing", json!({}), text.trim_end());
    }
    Ok(())
}

/// The home file holding the embedded relay's last port. A page keeps its pairing for the relay's
/// origin, port included: the same port after a restart is what lets an open page reconnect.
const EMBEDDED_RELAY_FILE: &str = "embedded_relay";

/// `--embedded-relay`'s address: loopback only (a phone elsewhere needs `--lan`'s HTTPS).
fn parse_loopback(addr: &str) -> Result<SocketAddr> {
    let parsed: SocketAddr = addr
        .parse()
        .map_err(|_| ConfigError::new(format!("--embedded-relay {addr:?} is not an address like 127.0.0.1:8787")))?;
    if !parsed.ip().is_loopback() {
        return Err(ConfigError::new(
            "--embedded-relay must listen on a loopback address; for a phone on this network, use --lan",
        )
        .into());
    }
    Ok(parsed)
}

/// Binds the embedded relay on `parsed`. Without a port (`:0`, the default), the port of the last
/// run is taken again when it is free; the port bound is saved for the next run.
async fn bind_embedded_relay(parsed: SocketAddr, home: &Home) -> Result<TcpListener> {
    let saved = match parsed.port() {
        0 => saved_embedded_port(home)?.map(|port| SocketAddr::new(parsed.ip(), port)),
        _ => None,
    };
    let reused = match saved {
        Some(saved) => TcpListener::bind(saved).await.ok(),
        None => None,
    };
    let listener = match reused {
        Some(listener) => listener,
        None => TcpListener::bind(parsed).await.with_context(|| format!("could not listen on {parsed}"))?,
    };
    let port = listener.local_addr()?.port();
    if saved.map(|addr| addr.port()) != Some(port) {
        home.write_atomic(EMBEDDED_RELAY_FILE, format!("{port}\n").as_bytes())?;
    }
    Ok(listener)
}

/// The port saved by the last `--embedded-relay` run; a file that does not hold one is ignored
/// (the next bind overwrites it).
fn saved_embedded_port(home: &Home) -> Result<Option<u16>> {
    let bytes = crate::state::read_if_exists(&home.path(EMBEDDED_RELAY_FILE))?;
    let text = bytes.and_then(|bytes| String::from_utf8(bytes).ok());
    Ok(text.and_then(|text| text.trim().parse::<u16>().ok()).filter(|port| *port != 0))
}

/// Self-hosted settings from the environment; a missing key is a usage error.
fn gemini_config(args: &RunArgs, env_secrets: &EnvSecrets) -> Result<GeminiConfig> {
    let Some(key) = env_secrets.gemini_api_key.clone() else {
        return Err(ConfigError::new(
            "--self-hosted needs your Gemini API key: set GEMINI_API_KEY (nothing was started)",
        )
        .into());
    };
    GeminiConfig::new(key, args.model.clone())
}

/// Model (unless `--model` was given) and voice saved in `config.toml`.
fn with_saved_voice(mut gemini: GeminiConfig, args: &RunArgs, config: &Config) -> GeminiConfig {
    if let (None, Some(model)) = (&args.model, &config.gemini.model) {
        gemini.model = model.clone();
    }
    if let Some(voice) = &config.gemini.voice {
        gemini.voice = voice.clone();
    }
    gemini
}

/// Prints link events as they come, until every link has ended.
async fn print_events(mut events: broadcast::Receiver<LinkEvent>, printer: Printer) {
    loop {
        match events.recv().await {
            Ok(event) => print_event(&event, printer),
            Err(broadcast::error::RecvError::Lagged(missed)) => warn!(missed, "link events were dropped"),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// What `voxa run` says, loud and on its own lines, when the relay's page is not this voxa's.
fn altered_page_warning(paths: &[String]) -> String {
    format!(
        "WARNING: the relay serves a web page that is not this voxa's ({}: {}).\n  \
         A phone that opens the pairing link there runs whatever that relay sent, and a changed \
         script can take the pairing's token.\n  Do not open the link on that relay. On this \
         machine use `voxa open`; for a phone, use a relay you run (`voxa relay`, `voxa run \
         --embedded-relay`) or a tailnet, then `voxa pair --rotate`.",
        if paths.len() == 1 { "1 file differs".to_owned() } else { format!("{} files differ", paths.len()) },
        paths.join(", ")
    )
}

/// One link event as a line of output (`--json`: one object).
fn print_event(event: &LinkEvent, printer: Printer) {
    match event {
        LinkEvent::Connected { relay } => {
            printer.event("relay_connected", json!({"relay": relay}), format!("connected to relay {relay}"))
        }
        LinkEvent::Lost { reason } => {
            printer.event("relay_lost", json!({"reason": reason}), format!("relay connection lost: {reason}"))
        }
        LinkEvent::ReplacedByLateDial => printer.event(
            "relay_lost",
            json!({"reason": "replaced, probably by a late dial of this agent"}),
            "relay connection replaced, probably by a late dial of this agent",
        ),
        LinkEvent::Replaced => printer.event(
            "replaced",
            json!({"keeps_dialing": true}),
            "WARNING: another voxa agent is using this relay code (the relay replaced this connection). If it \
             is not yours, someone holds your code: run `voxa pair --rotate`. This agent keeps dialing to take \
             the code back.",
        ),
        LinkEvent::ReplacedAgain => {
            printer.event("relay_lost", json!({"reason": "replaced"}), "relay connection replaced again")
        }
        LinkEvent::Recovered => printer.event("relay_recovered", json!({}), "this agent holds its relay code again"),
        LinkEvent::Unreachable { reason } => {
            printer.event("relay_unreachable", json!({"reason": reason}), format!("relay unreachable: {reason}"))
        }
        LinkEvent::Reconnecting { delay, attempt } => printer.event(
            "reconnecting",
            json!({"in_ms": delay.as_millis() as u64, "attempt": attempt}),
            format!("reconnecting in {:.1} s (attempt {attempt})", delay.as_secs_f64()),
        ),
        LinkEvent::PeerJoined => printer.event("phone_connected", json!({}), "phone connected"),
        LinkEvent::PeerLeft => printer.event("phone_disconnected", json!({}), "phone disconnected"),
        LinkEvent::PeerAdmitted => printer.event("phone_authenticated", json!({}), "phone authenticated"),
        LinkEvent::PeerRefused { code } => {
            printer.event("phone_refused", json!({"code": code.as_str()}), format!("phone refused: {code}"))
        }
        LinkEvent::RetiredCodeAnswered { until } => printer.event(
            "retired_code_answered",
            json!({"until": until}),
            format!("the relay code replaced by `voxa pair --rotate` is answered until {} (phones using the old link are told to scan the new code)", humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(*until))),
        ),
        LinkEvent::RetiredCodeEnded => printer.event(
            "retired_code_ended",
            json!({}),
            "the relay code replaced by `voxa pair --rotate` is no longer answered",
        ),
        LinkEvent::PairingActive { pairing, relay } => printer.event(
            "pairing_active",
            json!({"pairing": pairing, "relay": relay}),
            format!("environment pairing {pairing} active: dialing {relay} for its host"),
        ),
        LinkEvent::RelayPage { page: page @ RelayPage::Altered { paths } } => {
            printer.alarm("relay_page", json!(page), altered_page_warning(paths))
        }
        LinkEvent::RelayPage { page } => printer.event("relay_page", json!(page), page.describe()),
        LinkEvent::PairingEnded { pairing } => printer.event(
            "pairing_ended",
            json!({"pairing": pairing}),
            format!("environment pairing {pairing} revoked: its sessions were closed and it is no longer dialed"),
        ),
    }
}
