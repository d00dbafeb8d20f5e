//! The client side of the session start (docs/PROTOCOL.md, "Session start (protocol 2)"): answer
//! the agent's challenge with a proof of the token, then check the agent's proof before sending
//! anything else. Used by `voxa call`, `status`, `env list` and every test and bench client.

use std::fmt;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use super::dial::ClientSocket;
use crate::error::Refused;
use crate::protocol::{self, AgentMessage, ClientMessage, ErrorCode, Hello, HelloOk, PeerNotice, PeerRole, PeerState};
use crate::secret::Secret;

/// Whoever answered could not prove it holds this home's auth token: it is not this laptop.
/// Nothing but the hello (which proves nothing reusable) was sent to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotYourLaptop;

impl fmt::Display for NotYourLaptop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "this is not your laptop: the agent that answered could not prove it holds this pairing's auth \
             token; the connection was closed and nothing was sent to it",
        )
    }
}

impl std::error::Error for NotYourLaptop {}

/// Completes the session start on a socket to an agent (loopback, or a phone's socket at the
/// relay): waits for the challenge, sends the hello, checks the agent's proof. A wrong or
/// missing proof closes the socket and fails with [`NotYourLaptop`]. No timeout of its own.
pub async fn hello(socket: &mut ClientSocket, token: &Secret, client: &str) -> Result<HelloOk> {
    let challenge = loop {
        match next_agent_message(socket).await? {
            AgentMessage::Challenge { nonce, .. } if protocol::is_hello_nonce(&nonce) => break nonce,
            AgentMessage::Challenge { .. } => return Err(refuse_impostor(socket).await),
            _ => continue,
        }
    };
    let nonce = protocol::new_nonce()?;
    let frame = ClientMessage::Hello(Hello {
        protocol: Some(protocol::PROTOCOL_VERSION),
        nonce: Some(nonce.clone()),
        proof: Some(protocol::client_proof(token, &challenge, &nonce)),
        client: Some(client.to_owned()),
        ..Default::default()
    });
    socket.send(Message::text(frame.to_json())).await.context("could not send the hello")?;
    loop {
        match next_agent_message(socket).await? {
            AgentMessage::HelloOk(ok) => {
                let proven = ok
                    .proof
                    .as_deref()
                    .is_some_and(|proof| protocol::verify_agent_proof(token, &challenge, &nonce, proof));
                if !proven {
                    return Err(refuse_impostor(socket).await);
                }
                return Ok(ok);
            }
            // A second challenge before hello_ok: a new phone session replaced ours.
            AgentMessage::Challenge { .. } => bail!("the agent started a new session before answering"),
            _ => continue,
        }
    }
}

async fn refuse_impostor(socket: &mut ClientSocket) -> anyhow::Error {
    let _ = socket.close(None).await;
    NotYourLaptop.into()
}

/// The next message from the agent. Refusals, closes and the laptop leaving the relay are errors;
/// relay notices and frames that are not agent messages are skipped.
async fn next_agent_message(socket: &mut ClientSocket) -> Result<AgentMessage> {
    loop {
        let Some(frame) = socket.next().await else { bail!("the agent closed the connection before answering") };
        match frame.context("agent connection failed")? {
            Message::Text(text) => {
                if let Some(notice) = PeerNotice::parse(&text) {
                    if notice.peer == PeerRole::Agent && notice.state == PeerState::Left {
                        bail!("the laptop left the relay during the hello");
                    }
                    continue;
                }
                match serde_json::from_str::<AgentMessage>(&text) {
                    Ok(AgentMessage::Error { code, message }) => {
                        return Err(Refused { code, message: message.unwrap_or_default() }.into())
                    }
                    Ok(message) => return Ok(message),
                    Err(_) => continue,
                }
            }
            Message::Close(frame) => return Err(close_error(frame)),
            _ => continue,
        }
    }
}

/// A close frame as an error: a refusal code in its reason becomes [`Refused`].
pub fn close_error(frame: Option<CloseFrame>) -> anyhow::Error {
    let reason = frame.as_ref().map(|f| f.reason.to_string()).unwrap_or_default();
    match ErrorCode::ALL.iter().find(|code| code.as_str() == reason) {
        Some(code) => Refused { code: *code, message: String::new() }.into(),
        None => anyhow!("the agent closed the connection ({reason})"),
    }
}
