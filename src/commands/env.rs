//! `voxa env`: pair this machine with others (issue, add, list, revoke, remove).

use std::fmt::Write as _;

use anyhow::{Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Settings;
use crate::cli::EnvCommand;
use crate::config::RelayUrl;
use crate::environments::{add, host, issue, remove, revoke, store, HostOptions, HostRouter, Identity};
use crate::error::{ConfigError, Exit};
use crate::net::dial::DialOptions;
use crate::protocol::{AgentMessage, ClientMessage, ToolCall};
use crate::secret::Secret;
use crate::state::Home;

/// Longest pairing line `voxa env add -` reads (a real one is about 200 bytes).
const MAX_PASTED_LINE: u64 = 4096;

/// `voxa env …`.
pub async fn run_env(settings: &Settings, command: EnvCommand) -> Result<Exit> {
    let home = &settings.home;
    let printer = settings.printer;
    match command {
        EnvCommand::Issue => issue_pairing(settings)?,
        EnvCommand::Add { line, name } => {
            let token = store::load_or_create_host_token(home)?;
            let line = if line == "-" { read_line_from_stdin()? } else { line };
            let added = add(home, &line, name.as_deref(), token.expose())?;
            let value =
                json!({"envKey": added.env_key, "name": added.name, "relay": added.relay, "replaced": added.replaced});
            let verb = if added.replaced { "paired again with" } else { "added" };
            let human = format!(
                "{verb} environment {} ({}…) via {}\nCall it from the phone with \"env\":\"{}\", or: voxa call --env {} TOOL …\n",
                added.name,
                &added.env_key[..16],
                added.relay,
                added.name,
                added.name
            );
            printer.result(&value, human)?;
        }
        EnvCommand::List => list(settings).await?,
        EnvCommand::Revoke { target } => {
            let token = store::load_or_create_host_token(home)?;
            let revoked = revoke(home, &target, token.expose(), "cli")?;
            let value = json!({"revoked": revoked.pairings, "alreadyRevoked": revoked.already});
            let human = if revoked.already {
                "already revoked; nothing changed\n".to_owned()
            } else {
                format!(
                    "revoked {}; a running agent closes their sessions and stops dialing them\n",
                    revoked.pairings.join(", ")
                )
            };
            printer.result(&value, human)?;
        }
        EnvCommand::Remove { target } => {
            let token = store::load_or_create_host_token(home)?;
            let removed = remove(home, &target, token.expose())?;
            let value = json!({"removed": {"envKey": removed.env_key, "name": removed.name}});
            printer.result(&value, format!("removed environment {} ({}…)\n", removed.name, &removed.env_key[..16]))?;
        }
    }
    Ok(Exit::Ok)
}

/// `voxa env issue`: a new pairing and the line to paste on the host.
fn issue_pairing(settings: &Settings) -> Result<()> {
    let (home, printer) = (&settings.home, settings.printer);
    home.ensure()?;
    let relay = settings.relay(&home.load_config()?)?;
    let token = store::load_or_create_host_token(home)?;
    let issued = issue(home, &relay, token.expose())?;
    let line = issued.line.encode();
    let value = json!({
        "line": line,
        "pairing": issued.pairing,
        "envKey": issued.line.env_key,
        "relay": relay.as_str(),
        "code": issued.line.code.expose(),
        "bearer": issued.line.bearer.expose(),
    });
    let mut human = String::new();
    let _ = writeln!(
        human,
        "Pairing {} issued. On the host, run `voxa env add - --name NAME` and paste:\n",
        issued.pairing
    );
    let _ = writeln!(human, "  {line}\n");
    let _ = writeln!(human, "The line holds a credential to drive this machine: paste it only on the host.");
    if home.running_agent()?.is_none() {
        let _ = writeln!(human, "Keep `voxa run` running here so the host can reach this machine.");
    }
    let _ = writeln!(human, "Revoke it any time with: voxa env revoke {}", issued.pairing);
    printer.result(&value, human)?;
    Ok(())
}

/// `voxa env list`: known environments with their reachability, and the pairings this machine
/// issued. A running agent answers through its `fleet` tool (its pooled sessions stay up);
/// otherwise each environment is probed from here.
async fn list(settings: &Settings) -> Result<()> {
    let home = &settings.home;
    home.check()?;
    let own_key = Identity::load(home)?.map(|identity| identity.env_key());
    let pairings = store::load_pairings(home)?;
    let fleet = match fleet_from_running_agent(home).await {
        Some(fleet) => fleet,
        None => probe_here(home, settings.env_secrets.relay_token.clone()).await?,
    };
    let environments = fleet.get("environments").cloned().unwrap_or_else(|| json!([]));
    let mut issued: Vec<Value> = pairings
        .issued
        .iter()
        .flat_map(|(key, list)| list.iter().map(move |p| (key, p)))
        .map(|(key, p)| {
            let state = if Some(key) == own_key.as_ref() { "live" } else { "bound to a previous identity" };
            json!({"pairing": p.id, "envKey": key, "relay": p.relay, "issuedAt": p.issued_at, "state": state})
        })
        .collect();
    issued.extend(pairings.revoked_bearers.iter().flat_map(|(key, list)| {
        list.iter().filter_map(move |r| {
            let id = r.id.as_ref()?;
            Some(json!({"pairing": id, "envKey": key, "revokedAt": r.revoked_at, "state": "revoked"}))
        })
    }));
    let value = json!({"envKey": own_key, "environments": environments, "issued": issued});
    let mut human = String::new();
    let rows = environments.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        let _ = writeln!(
            human,
            "No environments yet. On another machine run `voxa env issue`, then `voxa env add -` here and paste its line."
        );
    }
    for row in &rows {
        let text = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        let key = text("envKey");
        let _ =
            writeln!(human, "{:<20} {:<18} {}", text("name"), format!("{}…", &key[..key.len().min(16)]), text("state"));
    }
    if !issued.is_empty() {
        let _ = writeln!(human, "\nPairings issued by this machine:");
        for row in &issued {
            let text = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            let _ = writeln!(human, "{:<12} {:<8} {}", text("pairing"), text("state"), text("relay"));
        }
    }
    settings.printer.result(&value, human)?;
    Ok(())
}

/// The first line of standard input, for `voxa env add -`; at most [`MAX_PASTED_LINE`] bytes.
fn read_line_from_stdin() -> Result<String> {
    use std::io::{BufRead, Read};
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(MAX_PASTED_LINE)
        .read_line(&mut line)
        .context("could not read the pairing line from standard input")?;
    if line.trim().is_empty() {
        return Err(
            ConfigError::new("no pairing line on standard input (paste the line `voxa env issue` printed)").into()
        );
    }
    Ok(line)
}

async fn fleet_from_running_agent(home: &Home) -> Option<Value> {
    let (mut socket, _) = super::call::connect_local(home).await.ok()?;
    let id = super::call::call_id("env-list").ok()?;
    let call = ToolCall {
        id: id.clone(),
        name: host::FLEET_TOOL.into(),
        args: json!({"probe": true}),
        env: None,
        caller: None,
    };
    socket.send(Message::text(ClientMessage::ToolCall(call).to_json())).await.ok()?;
    let wait = async {
        while let Some(Ok(frame)) = socket.next().await {
            let Message::Text(text) = frame else { continue };
            if let Ok(AgentMessage::ToolResult(result)) = serde_json::from_str::<AgentMessage>(&text) {
                if result.id == id {
                    return result.result;
                }
            }
        }
        None
    };
    let result = tokio::time::timeout(host::PROBE_TIMEOUT * 2, wait).await.ok()?;
    let _ = socket.close(None).await;
    result
}

async fn probe_here(home: &Home, relay_token: Option<Secret>) -> Result<Value> {
    let mut dial = DialOptions::default().with_proxy_from_env()?;
    let own_relay = home.load_config()?.relay.and_then(|r| RelayUrl::parse(&r).ok());
    dial.bearer = relay_token;
    let tasks = TaskTracker::new();
    let shutdown = CancellationToken::new();
    let router = HostRouter::new(HostOptions {
        home: home.clone(),
        dial,
        relay: own_relay,
        toolbox: None,
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
    });
    let fleet = router.fleet_list(true).await;
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    fleet.map_err(|error| anyhow::anyhow!("{}", error.message))
}
