//! `voxa relay`: run a relay server until SIGINT or SIGTERM; `acme.rs` obtains and renews its
//! certificate for `--domain`.

pub mod acme;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tokio::net::TcpListener;
use tracing::debug;

use super::output::Printer;
use super::Settings;
use crate::cli::RelayArgs;
use crate::error::ConfigError;
use crate::gemini::GeminiConfig;
use crate::hosted::budget::{Budget, BUDGET_FILE};
use crate::hosted::{Hosting, LiveConfig};
use crate::relay::{bind_shared, load_tls, run_sharded, serve_metrics, RelayConfig};
use crate::secret::Secret;

/// File descriptors kept free for everything but client connections.
const RESERVED_FDS: u64 = 64;

/// `voxa relay`: binds `--listen` (one listener per core), announces the address, and relays
/// until SIGINT or SIGTERM; with `--metrics-listen`, serves Prometheus metrics beside it.
pub async fn run_relay(settings: &Settings, args: RelayArgs) -> anyhow::Result<()> {
    let mut config = relay_config(settings, &args)?;
    let acme = match &args.domain {
        Some(domain) => {
            let acme = acme_manager(settings, &args, domain)?;
            config.tls = Some(acme::server_config(acme.resolver())?);
            Some(acme)
        }
        None => None,
    };
    let addr = resolve_listen(&args.listen).await?;
    let (listeners, local) = bind_shards(addr)?;
    let metrics_listener = match &args.metrics_listen {
        Some(listen) => {
            let addr = resolve_listen(listen).await?;
            let listener =
                TcpListener::bind(addr).await.with_context(|| format!("could not listen for metrics on {addr}"))?;
            let local = listener.local_addr().context("could not read the metrics address")?;
            Some((listener, local))
        }
        None => None,
    };
    announce(settings, &config, local, args.domain.as_deref(), metrics_listener.as_ref().map(|(_, local)| *local));
    let signal = super::shutdown::on_signal();
    // Started once the listener is bound: the CA validates the domain through it.
    let acme_task = acme.zip(args.domain.clone()).map(|(acme, domain)| {
        let (printer, signal) = (settings.printer, signal.clone());
        tokio::spawn(acme.run(signal, move |event| report_certificate(printer, &domain, event)))
    });
    let metrics_task = metrics_listener.map(|(listener, _)| {
        let (metrics, signal) = (Arc::clone(&config.metrics), signal.clone());
        tokio::spawn(async move { serve_metrics(listener, metrics, signal.cancelled_owned()).await })
    });
    let relay = {
        let signal = signal.clone();
        tokio::task::spawn_blocking(move || run_sharded(listeners, config, signal))
    };
    let result = relay.await.context("the relay stopped unexpectedly");
    // Whatever ended the relay ends the metrics server and the certificate manager too.
    signal.cancel();
    if let Some(task) = acme_task {
        task.await.context("the certificate manager failed")?;
    }
    result??;
    if let Some(task) = metrics_task {
        task.await.context("the metrics server failed")??;
    }
    settings.printer.event("relay_stopped", json!({}), "relay stopped");
    Ok(())
}

/// The relay's settings from the flags: TLS, relay token, hosted voice, connection limits (within
/// what the file descriptor limit allows) and the memory budget.
fn relay_config(settings: &Settings, args: &RelayArgs) -> anyhow::Result<RelayConfig> {
    let mut config = RelayConfig::default();
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some(load_tls(cert, key).map_err(|err| ConfigError::new(format!("{err:#}")))?);
    }
    config.token = super::relay_token(args.relay_token.as_deref(), args.relay_token_file.as_deref())?;
    let gated = config.token.is_some();
    config.service = live_config(settings, args, gated)?.map(Hosting::service);
    if let Some(fds) = raise_fd_limit() {
        config.max_connections = config.max_connections.min(fds.saturating_sub(RESERVED_FDS).max(1) as usize);
    }
    config.max_connections_per_ip = args.max_connections_per_ip;
    if let Some(mib) = args.memory_budget_mib {
        config.memory_budget = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    }
    Ok(config)
}

/// The certificate manager of `--domain`, its files in the home's `acme/` directory.
fn acme_manager(settings: &Settings, args: &RelayArgs, domain: &str) -> anyhow::Result<acme::Acme> {
    acme::check_domain(domain).map_err(|err| ConfigError::new(format!("{err:#}")))?;
    settings.home.ensure()?;
    acme::Acme::new(acme::AcmeConfig {
        domain: domain.to_owned(),
        directory: args.acme_directory.clone(),
        ca_file: args.acme_ca_file.clone(),
        state_dir: settings.home.dir().to_owned(),
    })
}

/// Tells the operator what became of the `--domain` certificate.
fn report_certificate(printer: Printer, domain: &str, event: acme::AcmeEvent) {
    match event {
        acme::AcmeEvent::Ready { serial, not_after, issued } => {
            let until = humantime::format_rfc3339_seconds(not_after).to_string();
            let how = if issued { "issued" } else { "loaded from the home" };
            printer.event(
                "certificate_ready",
                json!({ "domain": domain, "serial": serial, "not_after": until, "issued": issued }),
                format_args!("certificate for {domain} {how}, valid until {until}"),
            );
        }
        acme::AcmeEvent::Failed { error, retry_in } => {
            printer.event(
                "certificate_failed",
                json!({ "domain": domain, "error": error, "retry_in_secs": retry_in.as_secs() }),
                format_args!("could not get a certificate for {domain}: {error}; retrying in {}s", retry_in.as_secs()),
            );
        }
    }
}

/// One listener per core, all on the same address: the kernel spreads connections over them.
/// Returns them and the address they listen on.
fn bind_shards(addr: SocketAddr) -> anyhow::Result<(Vec<std::net::TcpListener>, SocketAddr)> {
    let shards = std::thread::available_parallelism().map_or(1, usize::from);
    let first = bind_shared(addr).with_context(|| format!("could not listen on {addr}"))?;
    let local = first.local_addr().context("could not read the listening address")?;
    let mut listeners = vec![first];
    // The others bind to the first one's address, which names the port even when asked for 0.
    for _ in 1..shards {
        listeners.push(bind_shared(local).with_context(|| format!("could not listen on {local}"))?);
    }
    Ok((listeners, local))
}

/// Prints where the relay listens and what it offers.
fn announce(
    settings: &Settings,
    config: &RelayConfig,
    local: SocketAddr,
    domain: Option<&str>,
    metrics: Option<SocketAddr>,
) {
    let scheme = if config.tls.is_some() { "wss" } else { "ws" };
    let url = match domain {
        Some(domain) if local.port() == 443 => format!("{scheme}://{domain}"),
        Some(domain) => format!("{scheme}://{domain}:{}", local.port()),
        None => format!("{scheme}://{local}"),
    };
    let token_note = if config.token.is_some() { " (relay token required)" } else { "" };
    let live_note = if config.service.is_some() { "; hosting voice calls at /live" } else { "" };
    settings.printer.event(
        "relay_listening",
        json!({
            "listen": local.to_string(),
            "url": url,
            "tls": config.tls.is_some(),
            "relay_token": config.token.is_some(),
            "metrics": metrics.map(|local| format!("http://{local}/metrics")),
            "live": config.service.is_some(),
        }),
        format_args!("relay listening on {url}{token_note}{live_note}"),
    );
}

/// Hosted voice: on with a key from `--gemini-key-file` (which wins) or `GEMINI_API_KEY`, off
/// without one. With a key, `/live` must ask for a token (`VOXA_PROXY_TOKEN`, else the relay
/// token, `relay_gated`) unless the operator opens it with `--open-live`: a made-up relay code
/// costs nothing, so an open `/live` is anyone's tap on the key.
///
/// The daily budget (`--live-minutes-per-day`) is counted in the home's [`BUDGET_FILE`].
fn live_config(settings: &Settings, args: &RelayArgs, relay_gated: bool) -> anyhow::Result<Option<LiveConfig>> {
    let key = match &args.gemini_key_file {
        Some(path) => super::secret_file(path, "Gemini key file")?,
        None => match settings.env_secrets.gemini_api_key.clone() {
            Some(key) => key,
            None => return Ok(None),
        },
    };
    let limits = [args.live_max_calls, args.live_calls_per_address, args.live_starts_per_minute];
    if limits.contains(&0) || args.live_max_minutes == 0 {
        return Err(ConfigError::new(
            "--live-max-calls, --live-max-minutes, --live-calls-per-address and --live-starts-per-minute must be \
             at least 1",
        )
        .into());
    }
    let client_header = args.live_client_header.as_deref().map(str::trim).filter(|name| !name.is_empty());
    if let Some(name) = client_header {
        if !name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_') {
            return Err(ConfigError::new(format!("--live-client-header {name:?} is not a header name")).into());
        }
    }
    let gemini = GeminiConfig::new(key, args.live_model.clone())?;
    let proxy_token = std::env::var("VOXA_PROXY_TOKEN").ok().filter(|token| !token.trim().is_empty());
    if proxy_token.is_none() && !relay_gated && !args.open_live {
        return Err(ConfigError::new(
            "hosting /live with a Gemini key needs a token from callers: set VOXA_PROXY_TOKEN (or a relay \
             token), or pass --open-live to let anyone's calls spend the key",
        )
        .into());
    }
    settings.home.ensure()?;
    let daily =
        (args.live_minutes_per_day > 0).then(|| Duration::from_secs(args.live_minutes_per_day.saturating_mul(60)));
    let budget = Budget::open(daily, Some(settings.home.dir().join(BUDGET_FILE)))?;
    Ok(Some(LiveConfig {
        gemini: Arc::new(gemini),
        max_calls: args.live_max_calls,
        max_call_time: Duration::from_secs(args.live_max_minutes.saturating_mul(60)),
        proxy_token: proxy_token.map(|token| Secret::from_string(token.trim().to_owned())),
        calls_per_address: args.live_calls_per_address,
        starts_per_minute: args.live_starts_per_minute,
        client_header: client_header.map(str::to_owned),
        budget: Arc::new(budget),
    }))
}

async fn resolve_listen(listen: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = listen.parse() {
        return Ok(addr);
    }
    let mut addrs = tokio::net::lookup_host(listen).await.map_err(|_| {
        ConfigError::new(format!("--listen {listen:?} is not an address like 127.0.0.1:8787 or [::]:443"))
    })?;
    Ok(addrs.next().ok_or_else(|| ConfigError::new(format!("--listen {listen:?} resolves to no address")))?)
}

/// Raises the soft limit on open files to the hard limit; returns the limit in force.
pub(crate) fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current?;
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if wanted > current && setrlimit(Resource::Nofile, Rlimit { current: Some(wanted), maximum: limit.maximum }).is_ok()
    {
        debug!(from = current, to = wanted, "raised the open file limit");
        return Some(wanted);
    }
    Some(current)
}
