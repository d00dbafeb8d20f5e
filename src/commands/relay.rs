//! `voxa relay`: run a relay server until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tokio::net::TcpListener;
use tracing::debug;

use super::Settings;
use crate::cli::RelayArgs;
use crate::config::DEFAULT_GEMINI_MODEL;
use crate::error::ConfigError;
use crate::gemini::{GeminiConfig, GEMINI_LIVE_URL};
use crate::relay::{load_tls, run, LiveConfig, RelayConfig};
use crate::secret::Secret;

/// File descriptors kept free for everything but client connections.
const RESERVED_FDS: u64 = 64;

/// `voxa relay`: binds `--listen`, announces the address, and relays until SIGINT or SIGTERM.
pub async fn run_relay(settings: &Settings, args: RelayArgs) -> anyhow::Result<()> {
    let mut config = RelayConfig::default();
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some(load_tls(cert, key).map_err(|err| ConfigError::new(format!("{err:#}")))?);
    }
    config.token = super::relay_token(args.relay_token.as_deref(), args.relay_token_file.as_deref())?;
    config.live = live_config(&args, settings.env_secrets.gemini_api_key.clone())?;
    if let Some(fds) = raise_fd_limit() {
        config.max_connections = config.max_connections.min(fds.saturating_sub(RESERVED_FDS).max(1) as usize);
    }
    let addr = resolve_listen(&args.listen).await?;
    let listener = TcpListener::bind(addr).await.with_context(|| format!("could not listen on {addr}"))?;
    let local = listener.local_addr().context("could not read the listening address")?;
    let scheme = if config.tls.is_some() { "wss" } else { "ws" };
    let token_note = if config.token.is_some() { " (relay token required)" } else { "" };
    let live_note = if config.live.is_some() { "; hosting voice calls at /live" } else { "" };
    settings.printer.event(
        "relay_listening",
        json!({
            "listen": local.to_string(),
            "url": format!("{scheme}://{local}"),
            "tls": config.tls.is_some(),
            "relay_token": config.token.is_some(),
            "live": config.live.is_some(),
        }),
        format_args!("relay listening on {scheme}://{local}{token_note}{live_note}"),
    );
    let signal = super::shutdown::on_signal();
    run(listener, config, async move { signal.cancelled().await }).await?;
    settings.printer.event("relay_stopped", json!({}), "relay stopped");
    Ok(())
}

/// Hosted voice: on with a key from `--gemini-key-file` (which wins) or `GEMINI_API_KEY`, off
/// without one.
fn live_config(args: &RelayArgs, env_key: Option<Secret>) -> anyhow::Result<Option<LiveConfig>> {
    let key = match &args.gemini_key_file {
        Some(path) => super::secret_file(path, "Gemini key file")?,
        None => match env_key {
            Some(key) => key,
            None => return Ok(None),
        },
    };
    if args.live_max_calls == 0 || args.live_max_minutes == 0 {
        return Err(ConfigError::new("--live-max-calls and --live-max-minutes must be at least 1").into());
    }
    let url = std::env::var("VOXA_GEMINI_URL").ok().filter(|url| !url.trim().is_empty());
    if let Some(url) = &url {
        crate::gemini::check_url(url)?;
    }
    let gemini = GeminiConfig {
        api_key: key,
        url: url.map(|url| url.trim().to_owned()).unwrap_or_else(|| GEMINI_LIVE_URL.to_owned()),
        model: args.live_model.clone().unwrap_or_else(|| DEFAULT_GEMINI_MODEL.to_owned()),
        voice: "Kore".into(),
        heartbeat: crate::gemini::HEARTBEAT,
    };
    let proxy_token = std::env::var("VOXA_PROXY_TOKEN").ok().filter(|token| !token.trim().is_empty());
    Ok(Some(LiveConfig {
        gemini: Arc::new(gemini),
        max_calls: args.live_max_calls,
        max_call_time: Duration::from_secs(args.live_max_minutes.saturating_mul(60)),
        proxy_token: proxy_token.map(|token| Secret::from_string(token.trim().to_owned())),
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
