//! `voxa status`: paired or not, the relays, and what the running agent is doing. Never secrets.
//! While an agent runs, the relays shown are the ones it dials ([`dialed_relay`] is how `pair` and
//! `doctor` learn them too), whatever the settings would name for the next run; each with its
//! link's state.

use anyhow::Result;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use super::{RelaySource, Settings};
use crate::config::RelayUrl;
use crate::error::Exit;
use crate::protocol::{AgentMessage, AgentStatus, AwakeStatus, ClientMessage, ConnectedClient, PushStatus};
use crate::state::AgentFile;

/// `voxa status`.
pub async fn run_status(settings: &Settings) -> Result<Exit> {
    let home = &settings.home;
    let paired = home.load_secrets()?.is_some();
    let config = home.load_config()?;
    let configured_relays = settings.relays(&config)?;
    let configured = configured_relays[0].clone();
    let agent = home.running_agent()?;
    let queried = match &agent {
        Some(_) => Some(query(settings).await),
        None => None,
    };
    // Why a recorded agent gave no status: not answering, or not proving it is this laptop's.
    let problem = queried.as_ref().and_then(|r| r.as_ref().err()).map(|err| format!("{err:#}"));
    let live = queried.and_then(Result::ok);
    // The relay the running agent dials, when it says; else the one `voxa run` would dial.
    let (relay, source) = match live.as_ref().filter(|l| !l.relay.is_empty()) {
        Some(live) => settings.running_relay(&live.relay)?,
        None => (configured.clone(), settings.relay_source(&config)),
    };
    let lan = match source {
        RelaySource::Embedded => super::lan::fingerprint_of(home, &relay),
        _ => None,
    };
    // Every relay of the pairing: those the running agent dials, else those the settings name.
    let relays: Vec<String> = match live.as_ref().filter(|l| !l.relays.is_empty()) {
        Some(live) => live.relays.iter().map(|link| link.relay.clone()).collect(),
        None => configured_relays.iter().map(|relay| relay.to_string()).collect(),
    };
    let value = json!({
        "home": home.dir().display().to_string(),
        "paired": paired,
        "relay": relay.as_str(),
        "relay_source": source.as_str(),
        "relay_certificate_sha256": lan,
        "configured_relay": configured.as_str(),
        "relays": relays,
        "agent": agent.as_ref().map(|a| json!({
            "pid": a.pid,
            "port": a.port,
            "version": a.version,
            "mode": live.as_ref().map(|l| l.mode.clone()),
            "relay_connected": live.as_ref().map(|l| l.relay_connected),
            "relay_replaced": live.as_ref().map(|l| l.relay_replaced),
            "error": problem,
            "phone_present": live.as_ref().map(|l| l.phone_present),
            "retired_code_until": live.as_ref().and_then(|l| l.retired_code_until),
            "calls_in_flight": live.as_ref().map(|l| l.calls_in_flight),
            "connected": live.as_ref().map(|l| l.connected.clone()),
            "sealed_sessions": live.as_ref().map(|l| l.sealed_sessions),
            "plain_sessions": live.as_ref().map(|l| l.plain_sessions),
            "relay_page": live.as_ref().and_then(|l| l.relay_page.clone()),
            "workspace": live.as_ref().map(|l| l.workspace.clone()),
            "relay": live.as_ref().map(|l| l.relay.clone()),
            "relays": live.as_ref().map(|l| l.relays.clone()),
            "awake": live.as_ref().and_then(|l| l.awake.clone()),
            "push": live.as_ref().and_then(|l| l.push.clone()),
        })),
    });
    let shown = Shown { relay: &relay, relays: &relays, source, lan: lan.as_deref(), configured: &configured };
    let human = human_status(home.dir(), paired, &shown, agent.as_ref(), live.as_ref(), problem.as_deref());
    settings.printer.result(&value, human)?;
    Ok(Exit::Ok)
}

/// The relay `status` speaks of, where it comes from, and the one the settings name.
struct Shown<'a> {
    relay: &'a RelayUrl,
    /// Every relay of the pairing, `relay` first.
    relays: &'a [String],
    source: RelaySource,
    /// The fingerprint of a `--lan` relay's certificate.
    lan: Option<&'a str>,
    configured: &'a RelayUrl,
}

impl Shown<'_> {
    /// The `relay:` line's words after the URL.
    fn describe(&self) -> String {
        let mut words = match (self.source, self.lan) {
            (RelaySource::Embedded, Some(_)) => "in the running agent, for this network (--lan)".to_owned(),
            (RelaySource::Embedded, None) => {
                "in the running agent, on loopback: this machine's browser only".to_owned()
            }
            (source, _) => source.describe().to_owned(),
        };
        if self.source == RelaySource::RunningAgent && self.configured != self.relay {
            words.push_str(&format!("; this home's settings name {} for the next run", self.configured));
        }
        words
    }
}

/// The status as the text `voxa status` prints.
fn human_status(
    home: &std::path::Path,
    paired: bool,
    shown: &Shown<'_>,
    agent: Option<&AgentFile>,
    live: Option<&AgentStatus>,
    problem: Option<&str>,
) -> String {
    let mut human = format!(
        "home:    {}\npaired:  {}\nrelay:   {} ({})\n",
        home.display(),
        yes_no(paired),
        shown.relay,
        shown.describe()
    );
    if shown.relays.len() > 1 {
        human.push_str(&format!("relays:  {} (the page moves to the next when one fails)\n", shown.relays.join(", ")));
    }
    if let Some(fingerprint) = shown.lan {
        human.push_str(&format!("certificate: SHA-256 {fingerprint}\n"));
    }
    match (agent, live) {
        (None, _) => human.push_str("agent:   not running (start it with `voxa run`)\n"),
        (Some(a), None) => human.push_str(&format!(
            "agent:   pid {} on port {} (not answering: {}; the relay above is the settings', it may dial another)\n",
            a.pid,
            a.port,
            problem.unwrap_or("no answer")
        )),
        (Some(a), Some(l)) => human.push_str(&format!(
            "agent:   pid {} on 127.0.0.1:{}, {} mode, workspace {}\nrelay connected: {}\nphone present:   {}\ncalls in flight: {}\nsessions:        {} sealed, {} plain (protocol 2: the relay can read those)\n",
            a.pid,
            a.port,
            l.mode,
            l.workspace,
            relay_state(l),
            yes_no(l.phone_present),
            l.calls_in_flight,
            l.sealed_sessions,
            l.plain_sessions
        )),
    }
    if let Some(live) = live.filter(|l| l.relays.len() > 1) {
        for link in &live.relays {
            let state = if link.connected { "connected" } else { "not connected" };
            let phone = if link.phone_present { ", a phone on it" } else { "" };
            human.push_str(&format!("  via {}: {state}{phone}\n", link.relay));
        }
    }
    if let Some(live) = live {
        human.push_str(&connected_lines(&live.connected));
    }
    if let Some(awake) = live.and_then(|l| l.awake.as_ref()) {
        human.push_str(&awake_lines(awake));
    }
    if let Some(push) = live.and_then(|l| l.push.as_ref()) {
        human.push_str(&format!("last push:       {}\n", push_line(push)));
    }
    if let Some(page) = live.and_then(|l| l.relay_page.as_ref()) {
        human.push_str(&format!("relay page:      {}\n", page.describe()));
    }
    if let Some(until) = live.and_then(|l| l.retired_code_until) {
        let until = std::time::UNIX_EPOCH + std::time::Duration::from_secs(until);
        human.push_str(&format!(
            "retired code:    answered until {} (the code before `pair --rotate`; every phone on it is refused)\n",
            humantime::format_rfc3339_seconds(until)
        ));
    }
    human
}

/// "awake: held since … (a command runs; logind)" and, where there is a battery, the power line.
fn awake_lines(awake: &AwakeStatus) -> String {
    let held = match (awake.held, &awake.unavailable) {
        (true, _) => {
            let since = awake.since.map(|since| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(since))
                    .to_string()
            });
            format!(
                "held since {} ({}; {})",
                since.as_deref().unwrap_or("now"),
                awake.why.as_deref().unwrap_or("busy"),
                awake.how.as_deref().unwrap_or("inhibitor")
            )
        }
        (false, Some(why)) => format!("not held: the laptop may sleep while voxa works ({why})"),
        (false, None) => "not held (nothing runs; the laptop may sleep)".to_owned(),
    };
    let mut lines = format!("kept awake:      {held}\n");
    if let Some(on_battery) = awake.on_battery {
        lines.push_str(&format!("power:           {}\n", if on_battery { "on battery" } else { "on mains" }));
    }
    lines
}

/// "approval, delivered in 1.2 s": the last push and whether its receipt came back.
fn push_line(push: &PushStatus) -> String {
    let state = match (push.state.as_str(), push.delivered_after_ms) {
        ("delivered", Some(ms)) => format!("delivered in {:.1} s", ms as f64 / 1000.0),
        ("not-delivered", _) => "not delivered".to_owned(),
        _ => "not acknowledged yet".to_owned(),
    };
    let again = if push.resent { " (sent again: the first was not delivered in time)" } else { "" };
    format!("{}, {state}{again}", push.event)
}

/// What the relay this home's running agent dials is, as the commands learn it.
pub enum Dialed {
    /// No agent runs: `voxa run` will dial what the settings name.
    NoAgent,
    /// The running agent (`pid`) said it dials `relays` (the pairing's, its first the page's).
    Agent { pid: u32, relays: Vec<RelayUrl>, source: RelaySource },
    /// An agent runs and did not say (`why`).
    Unknown { pid: u32, why: String },
}

/// Asks this home's running agent, if one runs, which relay it dials.
pub async fn dialed_relay(settings: &Settings) -> Result<Dialed> {
    let Some(agent) = settings.home.running_agent()? else { return Ok(Dialed::NoAgent) };
    let status = match query(settings).await {
        Ok(status) if !status.relay.is_empty() => status,
        Ok(_) => return Ok(Dialed::Unknown { pid: agent.pid, why: "it dials no relay".to_owned() }),
        Err(err) => return Ok(Dialed::Unknown { pid: agent.pid, why: format!("{err:#}") }),
    };
    let dialed = settings.running_relay(&status.relay).and_then(|(relay, source)| {
        let others = status.relays.iter().map(|link| &link.relay).filter(|other| **other != status.relay);
        let others: Vec<&String> = others.collect();
        let mut relays = crate::config::relay_list(&others)?;
        relays.insert(0, relay);
        Ok((relays, source))
    });
    match dialed {
        Ok((relays, source)) => Ok(Dialed::Agent { pid: agent.pid, relays, source }),
        Err(err) => Ok(Dialed::Unknown { pid: agent.pid, why: format!("{err:#}") }),
    }
}

/// One line per open session: how it came, sealed or not, its client and since when. The
/// `voxa status` asking is among them.
fn connected_lines(connected: &[ConnectedClient]) -> String {
    let mut lines = format!("connected:       {}\n", connected.len());
    for client in connected {
        let since = std::time::UNIX_EPOCH + std::time::Duration::from_secs(client.since);
        lines.push_str(&format!(
            "  {:<8} {:<9} {} since {}\n",
            client.via,
            if client.sealed { "sealed" } else { "plain" },
            client.client.as_deref().unwrap_or("(unnamed client)"),
            humantime::format_rfc3339_seconds(since)
        ));
    }
    lines
}

fn relay_state(status: &AgentStatus) -> &'static str {
    match (status.relay_connected, status.relay_replaced) {
        (_, true) => "contested: another agent is using this relay code; this one keeps dialing",
        (true, false) => "yes",
        (false, false) => "no",
    }
}

fn yes_no(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

async fn query(settings: &Settings) -> Result<AgentStatus> {
    let (mut socket, _) = super::call::connect_local(&settings.home).await?;
    socket.send(Message::text(ClientMessage::Status.to_json())).await?;
    let wait = async {
        while let Some(frame) = socket.next().await {
            if let Message::Text(text) = frame? {
                if let Ok(AgentMessage::Status(status)) = serde_json::from_str::<AgentMessage>(&text) {
                    return Ok(status);
                }
            }
        }
        anyhow::bail!("no status from the agent")
    };
    let status = tokio::time::timeout(std::time::Duration::from_secs(5), wait).await??;
    let _ = socket.close(None).await;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_awake_line_says_held_why_or_why_not() {
        let held = AwakeStatus {
            held: true,
            why: Some("a command runs".into()),
            since: Some(0),
            how: Some("logind".into()),
            on_battery: Some(true),
            ..AwakeStatus::default()
        };
        assert_eq!(
            awake_lines(&held),
            "kept awake:      held since 1970-01-01T00:00:00Z (a command runs; logind)\npower:           on battery\n"
        );
        let none = AwakeStatus { unavailable: Some("no system D-Bus".into()), ..AwakeStatus::default() };
        assert_eq!(
            awake_lines(&none),
            "kept awake:      not held: the laptop may sleep while voxa works (no system D-Bus)\n"
        );
        assert!(awake_lines(&AwakeStatus::default()).contains("nothing runs"));
    }

    #[test]
    fn the_push_line_says_delivered_or_not() {
        let push = |state: &str, ms, resent| PushStatus {
            event: "approval".into(),
            state: state.into(),
            delivered_after_ms: ms,
            resent,
            ..PushStatus::default()
        };
        assert_eq!(push_line(&push("delivered", Some(1234), false)), "approval, delivered in 1.2 s");
        assert_eq!(push_line(&push("waiting", None, false)), "approval, not acknowledged yet");
        assert_eq!(
            push_line(&push("not-delivered", None, true)),
            "approval, not delivered (sent again: the first was not delivered in time)"
        );
    }
}
