//! The loopback socket (docs/PROTOCOL.md, "Loopback socket"): `ws://127.0.0.1:<port>` for local scripts, CI and editors,
//! gated by the auth token and closed to web pages.

use std::sync::Arc;

use anyhow::Result;
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info_span, Instrument};

use super::context::AgentContext;
use super::gate::{admit_hello, Admission, Gate};
use super::outbox::Outbox;
use super::session::Session;
use crate::net::http::{self, RequestHead};
use crate::net::liveness::{cancelled, close_message, Heartbeat, Liveness, Pulse};
use crate::protocol::{self, AgentMessage, ErrorCode, Hello};

/// Serves local clients on an already-bound loopback listener until `shutdown`.
pub async fn run(
    listener: TcpListener,
    ctx: Arc<AgentContext>,
    gate: Arc<dyn Gate>,
    shutdown: CancellationToken,
) -> Result<()> {
    let tasks = TaskTracker::new();
    let mut next_id: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    debug!(%err, "accept failed");
                    // Out of descriptors and similar: back off briefly instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        next_id += 1;
        if !peer.ip().is_loopback() {
            continue; // Bound to 127.0.0.1, so this cannot happen; refuse anyway.
        }
        let (ctx, gate, shutdown) = (ctx.clone(), gate.clone(), shutdown.clone());
        tasks.spawn(
            async move {
                if let Err(err) = serve(stream, ctx, gate, shutdown).await {
                    debug!("local connection ended: {err:#}");
                }
            }
            .instrument(info_span!("local", conn = next_id)),
        );
    }
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// True for an `Origin` a page on this machine would send (`http://localhost:3000`, …).
pub fn is_loopback_origin(origin: &str) -> bool {
    let Ok(url) = url::Url::parse(origin.trim()) else { return false };
    // A page's origin never makes voxa dial anything, so `*.localhost` (served by this machine's
    // browser) counts here too.
    let local_name =
        |host: &str| crate::config::is_loopback_host(host) || host.to_ascii_lowercase().ends_with(".localhost");
    matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(local_name)
}

async fn serve(
    mut stream: TcpStream,
    ctx: Arc<AgentContext>,
    gate: Arc<dyn Gate>,
    shutdown: CancellationToken,
) -> Result<()> {
    let (head, leftover) = match http::read_head(&mut stream).await {
        Ok(read) => read,
        Err(err) => {
            let _ = http::respond(&mut stream, 400, "Bad Request", "bad request\n").await;
            return Err(err.into());
        }
    };
    if let Some(origin) = head.header("origin") {
        if !is_loopback_origin(origin) {
            http::respond(&mut stream, 403, "Forbidden", "cross-origin requests are refused\n").await?;
            return Ok(());
        }
    }
    if head.path != "/" {
        http::respond(&mut stream, 404, "Not Found", "not found\n").await?;
        return Ok(());
    }
    if !head.is_websocket_upgrade() {
        http::respond(&mut stream, 426, "Upgrade Required", "this is a WebSocket endpoint\n").await?;
        return Ok(());
    }
    let admitted_by_header = head_admission(&head, gate.as_ref());
    let _ = stream.set_nodelay(true);
    let mut socket = http::accept_websocket(stream, &head, leftover, http::websocket_config()).await?;
    let admission = match admitted_by_header {
        Some(Ok(admission)) => admission,
        Some(Err(code)) => return refuse(&mut socket, code).await,
        None => match wait_for_hello(&mut socket, gate.as_ref()).await {
            Ok(admission) => admission,
            Err(code) => return refuse(&mut socket, code).await,
        },
    };
    socket.send(Message::text(ctx.hello_ok(&admission).to_json())).await?;
    run_session(socket, ctx, admission, shutdown).await
}

fn head_admission(head: &RequestHead, gate: &dyn Gate) -> Option<Result<Admission, ErrorCode>> {
    let token = head.bearer()?;
    Some(gate.admit(&Hello { token: Some(token.to_owned()), ..Default::default() }))
}

async fn wait_for_hello(socket: &mut WebSocketStream<TcpStream>, gate: &dyn Gate) -> Result<Admission, ErrorCode> {
    let first = tokio::time::timeout(protocol::HELLO_TIMEOUT, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) => return Some(text),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return None,
            }
        }
    })
    .await;
    match first {
        Ok(Some(text)) => admit_hello(gate, &text),
        _ => Err(ErrorCode::UnauthenticatedCall),
    }
}

async fn refuse(socket: &mut WebSocketStream<TcpStream>, code: ErrorCode) -> Result<()> {
    let _ = socket.send(close_message(CloseCode::Policy, code.as_str())).await;
    // Give the close frame a moment to be read; never wait on a hostile peer for long.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
    Ok(())
}

async fn run_session(
    socket: WebSocketStream<TcpStream>,
    ctx: Arc<AgentContext>,
    admission: Admission,
    shutdown: CancellationToken,
) -> Result<()> {
    let (sink, mut stream) = socket.split();
    let outbox = Outbox::spawn(sink);
    let out_tx = outbox.frames.clone();
    let revoked = admission.revoked.clone();
    let mut session = Session::new(ctx, admission.caller, out_tx.clone());
    let mut liveness = Liveness::new(Heartbeat::PROTOCOL);
    loop {
        let revoked = revoked.clone();
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = out_tx.send(close_message(CloseCode::Away, "agent shutting down")).await;
                break;
            }
            _ = cancelled(revoked) => {
                let _ = out_tx.send(Message::text(AgentMessage::error(ErrorCode::PairingRevoked).to_json())).await;
                let _ = out_tx.send(close_message(CloseCode::Policy, ErrorCode::PairingRevoked.as_str())).await;
                break;
            }
            pulse = liveness.tick() => match pulse {
                Pulse::Silent(_) => break,
                Pulse::Ping => { let _ = out_tx.try_send(Message::Ping(Default::default())); }
            },
            frame = stream.next() => {
                liveness.heard();
                match frame {
                    Some(Ok(Message::Text(text))) => session.on_text(&text).await,
                    Some(Ok(Message::Binary(data))) => session.on_binary(&data).await,
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(_)) => {}
                    Some(Err(err)) => {
                        if let tokio_tungstenite::tungstenite::Error::Capacity(_) = err {
                            let _ = out_tx.send(close_message(CloseCode::Size, "frame too large")).await;
                        }
                        debug!(%err, "local socket error");
                        break;
                    }
                }
            }
        }
    }
    drop(session);
    drop(out_tx);
    outbox.finish().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_origins_pass() {
        for ok in ["http://localhost:3000", "http://127.0.0.1", "https://[::1]:8443", "http://app.localhost"] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in ["null", "https://evil.example", "http://127.0.0.1.evil.example", "file://", "chrome-extension://x"]
        {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }
}
