//! The relay, step by step as `voxa run` reaches it (proxy, TCP, TLS, `/healthz`), its token and
//! its clock.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::http::{connect_tcp, connect_tls, http_get, open_stream, Target};
use super::Check;
use crate::cli::DoctorArgs;
use crate::commands::{RelaySource, Settings};
use crate::config::{Config, RelayUrl};
use crate::net::dial::{DialOptions, Io};
use crate::protocol::{AgentStatus, RelayPage};
use crate::secret::Secret;

/// Clock difference with the relay above which doctor warns.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);

/// The relay to check, with the `relay` line: `--relay` when given, else the one the running
/// agent dials (when it says), else the one `voxa run` would dial.
pub(super) fn relay_to_check(
    settings: &Settings,
    config: &Config,
    agent: Option<&AgentStatus>,
    checks: &mut Vec<Check>,
) -> Option<(RelayUrl, RelaySource)> {
    let dialed = agent.map(|status| status.relay.as_str()).filter(|relay| !relay.is_empty());
    let chosen = match dialed {
        Some(relay) if settings.relay_flags.is_empty() => settings.running_relay(relay),
        _ => settings.relay(config).map(|relay| (relay, settings.relay_source(config))),
    };
    match chosen {
        Ok((relay, source)) => {
            checks.push(Check::ok("relay", format!("{relay} ({})", source.describe())));
            Some((relay, source))
        }
        Err(err) => {
            checks.push(Check::fail(
                "relay",
                format!("{err:#}"),
                "pass --relay https://… (and `voxa pair` to save it)",
            ));
            None
        }
    }
}

/// The relay inside the running agent is dialed directly (never through a proxy), and a `--lan`
/// one with the certificate `voxa run --lan` made trusted, as the agent itself dials it.
pub(super) fn for_embedded(
    mut dial: DialOptions,
    home: &crate::state::Home,
    relay: &RelayUrl,
    source: RelaySource,
) -> DialOptions {
    if source != RelaySource::Embedded {
        return dial;
    }
    dial.proxy = None;
    if let Ok(Some(cert)) = crate::commands::lan::kept(home) {
        if crate::commands::lan::fingerprint_of(home, relay).is_some() {
            dial.extra_roots.push(rustls_pki_types::CertificateDer::from(cert.der));
        }
    }
    dial
}

/// Proxy and extra roots as `voxa run` would use them; reports the proxy.
pub(super) fn dial_options(args: &DoctorArgs, checks: &mut Vec<Check>) -> Option<DialOptions> {
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

/// TCP (through the proxy when `run` would use it), TLS, `/healthz`, the relay token and the
/// clock, each its own line; later steps are skipped once one fails.
pub(super) async fn check_relay(
    relay: &RelayUrl,
    dial: &DialOptions,
    args: &DoctorArgs,
    home: &Path,
    checks: &mut Vec<Check>,
) {
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
                let roots = if dial.extra_roots.is_empty() {
                    "the web's roots"
                } else {
                    "the web's roots and --ca-cert (or the certificate of voxa run --lan)"
                };
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
    checks.push(check_page(relay, dial).await);
}

/// The page and scripts the relay serves against this voxa's own copy.
pub(super) async fn check_page(relay: &RelayUrl, dial: &DialOptions) -> Check {
    const NAME: &str = "relay page";
    let page = crate::net::page_check::check(relay, dial).await;
    match page {
        RelayPage::Same { .. } => Check::ok(NAME, page.describe()),
        RelayPage::Altered { .. } => Check::fail(
            NAME,
            page.describe(),
            "pair through a relay you run (voxa relay, or voxa run --embedded-relay), use `voxa open` on this laptop, and run voxa pair --rotate",
        ),
        RelayPage::Unchecked { .. } => Check::warn(NAME, page.describe(), "run voxa doctor again"),
    }
}

/// Asks `/agent` without a code: the relay checks its token before the code, so `401` means
/// "token refused" and `400` means "token accepted (or none needed)". No code is ever sent.
pub(super) async fn check_relay_token(target: &Target, dial: &DialOptions, args: &DoctorArgs, home: &Path) -> Check {
    const NAME: &str = "relay token";
    let given = crate::commands::token_value(args.relay_token.as_deref());
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

pub(super) fn check_clock(date: Option<SystemTime>, received: SystemTime) -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::doctor::Status;

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
