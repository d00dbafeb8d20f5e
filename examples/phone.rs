//! A minimal phone client: joins a laptop through the relay, answers its challenge, checks that
//! it is really the laptop, runs one tool and prints what comes back. Everything after the
//! connection is plain JSON over a WebSocket; the session start is in docs/PROTOCOL.md.
//!
//! ```text
//! cargo run --example phone -- '<pairing URL from `voxa pair`>' run_command '{"command":"uname -a"}'
//! ```

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio_tungstenite::tungstenite::Message;

/// Lowercase hex of `HMAC-SHA256(key = token, label + agent_nonce + "\n" + client_nonce)`: the
/// client proves it with the label `voxa-hello/2 client\n`, the laptop with `voxa-hello/2 agent\n`.
fn proof(token: &str, label: &str, agent_nonce: &str, client_nonce: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("{label}{agent_nonce}\n{client_nonce}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(pairing_url), Some(tool)) = (args.next(), args.next()) else {
        bail!("usage: phone <pairing-url> <tool> [json-args]");
    };
    let tool_args: Value = match args.next() {
        Some(text) => serde_json::from_str(&text).context("tool arguments must be JSON")?,
        None => json!({}),
    };

    // The pairing URL is `{relay}/?code=<code>&token=<token>`: the code routes, the token authenticates.
    let url = url::Url::parse(&pairing_url).context("not a pairing URL")?;
    let param = |name: &str| url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
    let code = param("code").ok_or_else(|| anyhow!("pairing URL has no code"))?;
    let token = param("token").ok_or_else(|| anyhow!("pairing URL has no token"))?;
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    let host = url.host_str().ok_or_else(|| anyhow!("pairing URL has no host"))?;
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let base = url.path().trim_end_matches('/');
    let socket_url = format!("{scheme}://{host}{port}{base}/ws?code={code}");

    // voxa's dialer adds TLS and proxy support; any WebSocket client works here.
    let mut socket = voxa::net::dial::connect(&socket_url, &Default::default()).await?;
    eprintln!("connected to the relay; waiting for the laptop");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // Both nonces of the current session, once we answered the laptop's challenge.
    let mut nonces: Option<(String, String)> = None;
    loop {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .map_err(|_| anyhow!("no answer within 60 s"))?
            .ok_or_else(|| anyhow!("the relay closed the connection"))??;
        let text = match frame {
            Message::Text(text) => text,
            Message::Close(frame) => bail!("closed: {frame:?}"),
            _ => continue,
        };
        // The relay's own notices are a U+0001 and a JSON object; the laptop's frames are JSON.
        if let Some(notice) = text.strip_prefix('\u{1}') {
            let notice: Value = serde_json::from_str(notice)?;
            if notice["type"] == "presence" && notice["peer"] == "agent" && notice["state"] == "left" {
                bail!("the laptop left");
            }
            continue;
        }
        let message: Value = serde_json::from_str(&text)?;
        match message["type"].as_str().unwrap_or_default() {
            // The laptop challenges every session with a fresh nonce: prove we hold the token
            // without sending it.
            "challenge" if nonces.is_none() => {
                let agent_nonce = message["nonce"].as_str().unwrap_or_default().to_owned();
                let client_nonce = hex::encode(rand::random::<[u8; 16]>());
                let hello = json!({
                    "type": "hello",
                    "protocol": 2,
                    "nonce": client_nonce,
                    "proof": proof(&token, "voxa-hello/2 client\n", &agent_nonce, &client_nonce),
                    "client": "example-phone/1",
                });
                socket.send(Message::text(hello.to_string())).await?;
                nonces = Some((agent_nonce, client_nonce));
            }
            "hello_ok" => {
                // Only our laptop can prove the token back; anyone else holding the code cannot.
                let (agent_nonce, client_nonce) = nonces.as_ref().ok_or_else(|| anyhow!("hello_ok before a hello"))?;
                let expected = proof(&token, "voxa-hello/2 agent\n", agent_nonce, client_nonce);
                if message["proof"].as_str() != Some(expected.as_str()) {
                    let _ = socket.close(None).await;
                    bail!("this is not your laptop: it could not prove it holds the token; nothing was sent to it");
                }
                eprintln!("laptop {} ({} mode) offers {}", message["agent"], message["mode"], message["tools"]);
                let call = json!({"type": "tool_call", "id": "c1", "name": tool, "args": tool_args});
                socket.send(Message::text(call.to_string())).await?;
            }
            "tool_progress" => eprint!("{}", message["chunk"].as_str().unwrap_or_default()),
            "image" => eprintln!("(image {}x{} received)", message["width"], message["height"]),
            "tool_result" => {
                println!("{}", serde_json::to_string_pretty(&message)?);
                let _ = socket.close(None).await;
                return Ok(());
            }
            "error" => bail!("refused: {}", message["code"]),
            _ => {}
        }
    }
}
