//! `voxa pair`: the secrets, the pairing URL and a QR code a phone camera reads off a terminal.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use qrcode::render::unicode::Dense1x2;
use qrcode::{EcLevel, QrCode};
use serde_json::json;

use super::status::Dialed;
use super::{RelaySource, Settings};
use crate::cli::PairArgs;
use crate::config::RelayUrl;
use crate::error::ConfigError;
use crate::secret::Secret;
use crate::state::{Home, Secrets};
use crate::tickets::Ticket;

/// How long `pair --rotate` waits for a running agent to take the new token.
const PICKUP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs `voxa pair`. While an agent runs, the link is for the relay it dials (asked before
/// anything changes), and only a relay that agent dials and that outlives it is saved.
pub async fn run_pair(settings: &Settings, args: &PairArgs) -> Result<()> {
    let home = &settings.home;
    // Validate everything before creating or changing anything: a refused relay leaves no trace.
    home.check()?;
    let mut config = home.load_config()?;
    let configured = settings.relays(&config)?;
    let dialed = super::status::dialed_relay(settings).await?;
    let (relays, source, unknown) = match dialed {
        Dialed::NoAgent => (configured, settings.relay_source(&config), None),
        Dialed::Agent { pid, relays, source } => {
            if !settings.relay_flags.is_empty() && configured != relays {
                let flags: Vec<String> = configured.iter().map(|relay| format!("--relay {relay}")).collect();
                return Err(ConfigError::new(format!(
                    "the running agent (pid {pid}) dials {}: a link for {} would open no laptop. \
                     Run `voxa pair` without --relay (and VOXA_RELAY) for the link it dials, or stop it and start \
                     `voxa {} run` (nothing was changed)",
                    shown_list(&relays),
                    shown_list(&configured),
                    flags.join(" ")
                ))
                .into());
            }
            (relays, source, None)
        }
        Dialed::Unknown { pid, why } => (configured, settings.relay_source(&config), Some((pid, why))),
    };
    let relay = relays[0].clone();
    home.ensure()?;
    let secrets = if args.rotate { home.rotate_secrets()? } else { home.load_or_create_secrets()?.0 };
    if args.rotate {
        // Browsers that subscribed under the old link hear nothing more from this laptop.
        let pairing = crate::push::pairing_id(&secrets.relay_code);
        let dropped = crate::push::Subscriptions::new(home.clone()).keep_only(&pairing)?;
        if dropped > 0 {
            tracing::info!(dropped, "push subscriptions of the old link removed");
        }
    }
    // The relay inside a running agent ends with it; one an agent that did not answer may not dial
    // is not the pairing's either.
    let saved = source != RelaySource::Embedded && unknown.is_none();
    if saved {
        save_relays(home, &mut config, &relays)?;
    }
    let rotated = match args.rotate {
        true => Some(rotation_outcome(home).await?),
        false => None,
    };
    let printer = settings.printer;
    let relay_token = match source {
        // The embedded relay asks for no token.
        RelaySource::Embedded => None,
        _ => link_relay_token(home, args.relay_token.as_deref(), args.relay_token_file.as_deref())?,
    };
    let lan = match source {
        RelaySource::Embedded => super::lan::fingerprint_of(home, &relay),
        _ => None,
    };
    let link = Link::new(home, &relays, &secrets, relay_token.as_ref())?;
    let mut value = json!({
        "code": secrets.relay_code.expose(),
        "token": secrets.auth_token.expose(),
        "url": link.url,
        "ticket": link.ticket.secret.expose(),
        "ticket_expires": link.expires(),
        "relay": relay.as_str(),
        "relays": link.relay_urls(),
        "relay_source": source.as_str(),
        "relay_saved": saved,
        "reaches": super::reach::Reach::of_link(&relay, lan.as_deref()).as_str(),
        "relay_certificate_sha256": lan,
        "relay_token_in_link": relay_token.is_some(),
    });
    if let Some((pid, why)) = &unknown {
        value["agent_unanswered"] = json!({"pid": pid, "error": why});
    }
    if let Some(rotated) = &rotated {
        value["rotated"] = json!({"agent": rotated.agent, "picked_up": rotated.picked_up});
    }
    // Encoding the QR code is most of this command's CPU time; `--json` never shows it.
    let human = if printer.is_json() {
        String::new()
    } else {
        let mut text = pairing_text(&link, relay_token.is_some(), lan.as_deref(), !args.no_qr, printer.is_terminal())?;
        match (source, &unknown) {
            (_, Some((pid, why))) => text.push_str(&format!(
                "\nThe running agent (pid {pid}) did not say which relay it dials ({why}). This link is for {relay}, \
                 the relay this home's settings name; nothing was saved. If the agent dials another one \
                 (--embedded-relay, --lan, --relay), run `voxa pair` again once it answers.\n"
            )),
            (RelaySource::Embedded, None) => text.push_str(
                "\nThis is the relay inside the running agent: the link works while that agent runs, and nothing \
                 about its relay was saved.\n",
            ),
            _ => {}
        }
        if let Some(rotated) = &rotated {
            text.push_str(&rotated.sentence());
        }
        text
    };
    printer.result(&value, human)?;
    Ok(())
}

/// What `pair --rotate` did to a running agent.
struct Rotated {
    /// The running agent's pid, if one runs.
    agent: Option<u32>,
    /// It answered a hello proven with the new token.
    picked_up: bool,
}

impl Rotated {
    fn sentence(&self) -> String {
        let done = "Rotated: the old link and its code no longer open anything; phones holding it are told to \
                    scan the new code.";
        match (self.agent, self.picked_up) {
            (None, _) => format!("\n{done} No agent is running: `voxa run` starts on the new pairing.\n"),
            (Some(pid), true) => format!(
                "\n{done} The running agent (pid {pid}) took the new pairing at once: every session of the old \
                 token was ended, and its relay link moved to the new code.\n"
            ),
            (Some(pid), false) => format!(
                "\n{done} The running agent (pid {pid}) has not taken the new pairing yet; restart it \
                 to be sure the old link is cut off.\n"
            ),
        }
    }
}

/// Whether a running agent took the rotated token: a hello proven with it is answered within
/// [`PICKUP_WAIT`].
async fn rotation_outcome(home: &Home) -> Result<Rotated> {
    let Some(agent) = home.running_agent()? else { return Ok(Rotated { agent: None, picked_up: false }) };
    let deadline = tokio::time::Instant::now() + PICKUP_WAIT;
    let picked_up = loop {
        if let Ok((socket, _)) = super::call::connect_local(home).await {
            drop(socket);
            break true;
        }
        if tokio::time::Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    Ok(Rotated { agent: Some(agent.pid), picked_up })
}

/// Saves the relays the secrets were shown with, so `run` dials what the phone scanned.
pub fn save_relays(home: &Home, config: &mut crate::config::Config, relays: &[RelayUrl]) -> Result<()> {
    let before = config.clone();
    config.set_relays(relays);
    if *config != before {
        home.save_config(config)?;
    }
    Ok(())
}

/// Relays as a sentence names them: `https://a`, or `https://a and https://b`.
fn shown_list(relays: &[RelayUrl]) -> String {
    let urls: Vec<&str> = relays.iter().map(RelayUrl::as_str).collect();
    urls.join(" and ")
}

/// The relay token a link carries: the one the agent dials with (`--relay-token(-file)`,
/// `VOXA_RELAY_TOKEN`), else the one saved in the home for a service.
pub fn link_relay_token(home: &Home, value: Option<&str>, file: Option<&Path>) -> Result<Option<Secret>> {
    match super::relay_token(value, file)? {
        Some(token) => Ok(Some(token)),
        None => home.load_relay_token(),
    }
}

/// A pairing link as `pair` and a first `run` print it: the relay code and a fresh one-time
/// ticket ([`crate::tickets`]) in the fragment, never the auth token; the pairing's other relays
/// after them.
pub struct Link {
    pub url: String,
    pub ticket: Ticket,
    /// The pairing's relays, the link's own first; never empty.
    pub relays: Vec<RelayUrl>,
}

impl Link {
    /// Makes a ticket of `home` and the link carrying it, on the first of `relays` (never empty).
    pub fn new(home: &Home, relays: &[RelayUrl], secrets: &Secrets, relay_token: Option<&Secret>) -> Result<Link> {
        let Some((relay, others)) = relays.split_first() else { anyhow::bail!("a pairing link needs a relay") };
        let ticket = crate::tickets::issue(home)?;
        let mut url = relay.ticket_url(secrets.relay_code.expose(), ticket.secret.expose(), relay_token);
        crate::config::link_relays(&mut url, others);
        Ok(Link { url, ticket, relays: relays.to_vec() })
    }

    /// When the ticket stops working, RFC 3339 (UTC, seconds).
    pub fn expires(&self) -> String {
        humantime::format_rfc3339_seconds(self.ticket.expires).to_string()
    }

    /// The pairing's relays as `--json` lists them.
    pub fn relay_urls(&self) -> Vec<&str> {
        self.relays.iter().map(RelayUrl::as_str).collect()
    }
}

/// The block `pair` and a first `run` print: QR (optional, and only for a link a phone can open),
/// the URL (with the relay token, when the relay asks for one), how long it works, and what it
/// reaches (`lan`: the fingerprint of a `--lan` relay's certificate, printed beside the code).
pub fn pairing_text(link: &Link, relay_token: bool, lan: Option<&str>, qr: bool, ansi: bool) -> Result<String> {
    let (url, relay) = (&link.url, &link.relays[0]);
    let reach = super::reach::Reach::of_link(relay, lan);
    let qr = qr && reach.wants_qr();
    let mut text = String::new();
    if qr {
        text.push_str(&render_qr(url, ansi)?);
        text.push('\n');
    }
    let _ = writeln!(text, "{}", reach.intro(qr));
    let _ = writeln!(text, "{url}");
    let minutes = crate::tickets::TICKET_LIFETIME.as_secs() / 60;
    let _ = writeln!(
        text,
        "The link works once, within {minutes} minutes: the phone that opens it first is paired. Run `voxa pair` \
         again for another phone."
    );
    if link.relays.len() > 1 {
        let _ = writeln!(
            text,
            "It names {} relays, {}: the page uses the first that answers and moves to the next when one fails.",
            link.relays.len(),
            shown_list(&link.relays)
        );
    }
    if relay_token {
        text.push_str("The link carries the relay's token as well (in its fragment, never sent in a request).\n");
    }
    text.push_str(&super::reach::note(relay, lan));
    Ok(text)
}

/// Renders `data` as a QR code of Unicode half blocks with a quiet zone. With `ansi`, the code is
/// drawn black on white explicitly so it scans on light and dark terminals alike.
pub fn render_qr(data: &str, ansi: bool) -> Result<String> {
    let code = QrCode::with_error_correction_level(data.as_bytes(), EcLevel::L)
        .map_err(|err| anyhow::anyhow!("could not encode the pairing URL as a QR code: {err}"))?;
    let art =
        code.render::<Dense1x2>().dark_color(Dense1x2::Dark).light_color(Dense1x2::Light).quiet_zone(true).build();
    if !ansi {
        return Ok(art);
    }
    let mut out = String::with_capacity(art.len() * 2);
    for line in art.lines() {
        // Black foreground (dark modules) on a white background (light modules and quiet zone).
        let _ = writeln!(out, "\x1b[30;107m{line}\x1b[0m");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns half-block art back into pixels and decodes it, as a phone camera would.
    fn decode(art: &str) -> String {
        let rows: Vec<Vec<char>> = art.lines().map(|l| l.chars().collect()).collect();
        let width = rows.iter().map(Vec::len).max().unwrap();
        let height = rows.len() * 2;
        let scale = 4;
        let dark = |x: usize, y: usize| -> bool {
            let c = rows[y / 2].get(x).copied().unwrap_or(' ');
            match c {
                '█' => true,
                '▀' => y % 2 == 0,
                '▄' => y % 2 == 1,
                _ => false,
            }
        };
        let mut img = rqrr::PreparedImage::prepare_from_greyscale(width * scale, height * scale, |x, y| {
            if dark(x / scale, y / scale) {
                0
            } else {
                255
            }
        });
        let grids = img.detect_grids();
        assert_eq!(grids.len(), 1, "one QR code expected");
        grids[0].decode().unwrap().1
    }

    #[test]
    fn qr_decodes_back_to_the_pairing_url() {
        let url =
            "https://api.voxa.space/#code=00112233445566778899aabbccddeeff&token=ffeeddccbbaa99887766554433221100";
        let art = render_qr(url, false).unwrap();
        assert!(!art.contains('\x1b'));
        assert_eq!(decode(&art), url);
    }

    #[test]
    fn the_qr_code_and_the_link_carry_a_ticket_and_a_private_relays_token_and_the_text_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("voxa"));
        let relay = RelayUrl::parse("https://relay.example.com").unwrap();
        let secrets = Secrets {
            relay_code: Secret::from_string("00112233445566778899aabbccddeeff".into()),
            auth_token: Secret::from_string("ffeeddccbbaa99887766554433221100".into()),
        };
        let token = Secret::from_string("team/token 1".into());
        let link = Link::new(&home, std::slice::from_ref(&relay), &secrets, Some(&token)).unwrap();
        let text = pairing_text(&link, true, None, true, false).unwrap();
        let url = format!(
            "https://relay.example.com/#code=00112233445566778899aabbccddeeff&ticket={}&relay_token=team%2Ftoken+1",
            link.ticket.secret.expose()
        );
        assert_eq!(link.url, url);
        let art: String = text.lines().take_while(|line| !line.starts_with("Scan")).collect::<Vec<_>>().join("\n");
        assert_eq!(decode(&art), url, "the phone's camera reads the ticket and the relay's token");
        assert!(text.lines().any(|line| line == url), "{text}");
        assert!(text.contains("The link carries the relay's token as well"), "{text}");
        assert!(text.contains("works once, within 15 minutes"), "{text}");
        assert!(!text.contains(secrets.auth_token.expose()), "the token is never printed: {text}");
        let again = Link::new(&home, std::slice::from_ref(&relay), &secrets, None).unwrap();
        assert_ne!(again.ticket.secret, link.ticket.secret, "each pair makes a new ticket");
        let plain = pairing_text(&again, false, None, false, false).unwrap();
        assert!(!plain.contains("relay_token") && !plain.contains("relay's token"), "{plain}");
        assert!(!plain.contains("relays"), "{plain}");
        let second = RelayUrl::parse("https://second.example:8443/base").unwrap();
        let both = Link::new(&home, &[relay, second], &secrets, None).unwrap();
        assert!(both.url.ends_with("&relay=https%3A%2F%2Fsecond.example%3A8443%2Fbase"), "{}", both.url);
        let text = pairing_text(&both, false, None, true, false).unwrap();
        let art: String = text.lines().take_while(|line| !line.starts_with("Scan")).collect::<Vec<_>>().join("\n");
        assert_eq!(decode(&art), both.url, "the QR code names both relays");
        assert!(text.contains("It names 2 relays, https://relay.example.com and https://second.example:8443/base"));
    }

    #[test]
    fn ansi_qr_wraps_every_line_in_explicit_colours() {
        let art = render_qr("https://x.example/#code=a&token=b", true).unwrap();
        assert!(art.lines().all(|l| l.starts_with("\x1b[30;107m") && l.ends_with("\x1b[0m")));
        let plain: String = art.replace("\x1b[30;107m", "").replace("\x1b[0m", "");
        assert_eq!(decode(&plain), "https://x.example/#code=a&token=b");
    }
}
