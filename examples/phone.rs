//! A minimal phone client: joins a laptop through the relay, opens a sealed session (protocol 3:
//! the relay carries only ciphertext), runs one tool and prints what comes back. The session start
//! and the sealing are in docs/PROTOCOL.md; `voxa::net::client::hello` does both and checks that it
//! is really the laptop, after which the socket reads and writes plain JSON frames as usual.
//!
//! ```text
//! cargo run --example phone -- '<pairing URL from `voxa pair`>' run_command '{"command":"uname -a"}'
//! ```

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

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

    // The pairing URL is `{relay}/#code=<code>&token=<token>` (older ones put them in the query):
    // the code routes, the token authenticates.
    let url = url::Url::parse(&pairing_url).context("not a pairing URL")?;
    let fields = url::form_urlencoded::parse(url.fragment().unwrap_or_default().as_bytes())
        .chain(url.query_pairs())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect::<Vec<_>>();
    let param = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let code = param("code").ok_or_else(|| anyhow!("pairing URL has no code"))?;
    let token = param("token").ok_or_else(|| anyhow!("pairing URL has no token"))?;
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    let host = url.host_str().ok_or_else(|| anyhow!("pairing URL has no host"))?;
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let base = url.path().trim_end_matches('/');
    let socket_url = format!("{scheme}://{host}{port}{base}/ws?code={code}");

    // voxa's dialer adds TLS and proxy support; any WebSocket client works here.
    // A private relay's token rides in the link too; a client that can send headers sends it so.
    let options = voxa::net::dial::DialOptions {
        bearer: param("relay_token").map(voxa::secret::Secret::from_string),
        ..Default::default()
    };
    let mut socket = voxa::net::dial::connect(&socket_url, &options).await?;
    eprintln!("connected to the relay; waiting for the laptop");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // The laptop's challenge, our hello with the handshake's first message, its sealed answer:
    // only our laptop can answer, and from here on every frame is sealed.
    let token = voxa::secret::Secret::from_string(token);
    let hello_ok = tokio::time::timeout_at(deadline, voxa::net::client::hello(&mut socket, &token, "example-phone/1"))
        .await
        .map_err(|_| anyhow!("no answer within 60 s"))??;
    eprintln!("laptop {} ({} mode, sealed) offers {:?}", hello_ok.agent, hello_ok.mode, hello_ok.tools);
    let call = json!({"type": "tool_call", "id": "c1", "name": tool, "args": tool_args});
    socket.send(Message::text(call.to_string())).await?;
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
        let Ok(message) = serde_json::from_str::<Value>(&text) else { continue };
        match message["type"].as_str().unwrap_or_default() {
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
