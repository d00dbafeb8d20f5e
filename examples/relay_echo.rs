//! An agent that echoes: it holds relay codes on a relay's `/agent` side (relay framing 2,
//! docs/PROTOCOL.md "Relay") and sends every phone's frames back to that phone, whole and of the
//! same kind. `.ci/autobahn` runs the WebSocket conformance cases through the relay with it.
//!
//! ```text
//! cargo run --example relay_echo -- ws://127.0.0.1:8787
//! ```
//!
//! Each line on stdin is a relay code to hold. The agent proves it is seated with a phone socket
//! of its own (it hears that phone's JOINED only once the relay has it), then prints
//! `ready <code>`; the code's socket ends when the next phone leaves (one phone, one case).

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use voxa::protocol::relay::{self as relay_framing, Kind, PeerId};

#[tokio::main]
async fn main() -> Result<()> {
    let Some(relay) = std::env::args().nth(1) else { bail!("usage: relay_echo <ws://relay>") };
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = ready_rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(code) = lines.next_line().await.context("reading stdin")? {
        let code = code.trim().to_owned();
        if code.is_empty() {
            continue;
        }
        let (relay, ready) = (relay.clone(), ready_tx.clone());
        tokio::spawn(async move {
            if let Err(err) = echo(&relay, &code, &ready).await {
                eprintln!("relay_echo: {code}: {err:#}");
                let _ = ready.send(format!("failed {code}\n"));
            }
        });
    }
    Ok(())
}

/// Holds `code` and echoes until its first phone leaves or the relay closes the socket.
async fn echo(relay: &str, code: &str, ready: &mpsc::UnboundedSender<String>) -> Result<()> {
    let options = voxa::net::dial::DialOptions { subprotocol: Some(relay_framing::SUBPROTOCOL), ..Default::default() };
    let mut socket = voxa::net::dial::connect(&format!("{relay}/agent?code={code}"), &options).await?;
    let probe_url = format!("{relay}/ws?code={code}&presence=none");
    let mut probe = Some(tokio::spawn(async move {
        let mut phone = voxa::net::dial::connect(&probe_url, &Default::default()).await?;
        phone.close(None).await.context("closing the probe")?;
        while phone.next().await.is_some() {}
        anyhow::Ok(())
    }));
    // The probe phone, until it has left.
    let mut probe_peer: Option<PeerId> = None;
    // The parts of a frame still coming, per phone.
    let mut partial: HashMap<PeerId, Vec<u8>> = HashMap::new();
    while let Some(message) = socket.next().await {
        let bytes = match message.context("reading from the relay")? {
            Message::Binary(bytes) => bytes,
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
            Message::Text(_) => bail!("a text message on the agent's socket"),
        };
        let Some((kind, peer, payload)) = relay_framing::split(&bytes) else { bail!("a message without its header") };
        match kind {
            Kind::Part => partial.entry(peer).or_default().extend_from_slice(payload),
            Kind::Text | Kind::Binary => {
                let mut whole = partial.remove(&peer).unwrap_or_default();
                whole.extend_from_slice(payload);
                let echoed = relay_framing::message(kind, peer, &whole);
                socket.send(Message::binary(echoed)).await.context("echoing")?;
            }
            Kind::Joined if probe_peer.is_none() => probe_peer = Some(peer),
            Kind::Joined => {}
            Kind::Left if probe.is_some() && probe_peer == Some(peer) => {
                if let Some(probe) = probe.take() {
                    probe.await.context("the probe phone")??;
                }
                let _ = ready.send(format!("ready {code}\n"));
            }
            Kind::Left => break,
            // A push receipt is for agents that send pushes; the echo sends none.
            Kind::Receipt => {}
            Kind::ClosePeer | Kind::Proven => bail!("the relay sent a message only agents send"),
        }
    }
    let _ = socket.close(None).await;
    Ok(())
}
