//! The relay's answers over HTTP/2, on TLS connections whose client chose `h2` (every browser
//! does): a page's first screen is about thirty files, and on one HTTP/2 connection they are all
//! asked for at once, where HTTP/1.1 gives a browser six connections taking turns, each turn a
//! round trip of the phone's network. Served here is what the relay answers without an upgrade:
//! the web app, `/healthz` and push receipts, decided by the same [`route`] as on HTTP/1.1. A
//! WebSocket stays on HTTP/1.1: the relay offers no extended CONNECT, so a browser opens its
//! socket on a connection of its own.

use std::borrow::Cow;
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::server::SendResponse;
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use super::receipt::{self, Admitted, Plain};
use super::route::{route, Route};
use super::Edge;
use crate::net::http::{RequestHead, HEAD_TIMEOUT, MAX_HEAD_LEN};
use crate::net::web::{HTTP2_REQUESTS, KEEP_ALIVE_IDLE};

/// Requests one connection may have open at once: a page's first screen asks for about 30 files.
const MAX_STREAMS: u32 = 64;
/// What a client may send before it is read, per request: only a receipt has a body.
const RECEIVE_WINDOW: u32 = 16 << 10;
/// Time a connection asked to close (idle, its requests used up, the relay stopping) may take.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Headers of HTTP/1.1 that name the connection; HTTP/2 forbids them.
const CONNECTION_HEADERS: [&str; 5] = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];

/// Serves one HTTP/2 connection until the client leaves, it is idle for [`KEEP_ALIVE_IDLE`], it
/// has carried [`HTTP2_REQUESTS`] requests, or the relay stops.
pub(super) async fn serve<S>(edge: &Edge, stream: S, client: IpAddr) -> anyhow::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(MAX_HEAD_LEN as u32)
        .initial_window_size(RECEIVE_WINDOW)
        .initial_connection_window_size(RECEIVE_WINDOW);
    let mut connection = tokio::time::timeout(HEAD_TIMEOUT, builder.handshake::<_, Bytes>(stream))
        .await
        .context("no HTTP/2 preface in time")?
        .context("HTTP/2 handshake failed")?;
    let mut receipts = FuturesUnordered::new();
    let mut served = 0;
    loop {
        let accepted = tokio::select! {
            () = edge.core.cancel().cancelled() => break,
            Some(()) = receipts.next(), if !receipts.is_empty() => continue,
            accepted = tokio::time::timeout(KEEP_ALIVE_IDLE, connection.accept()) => accepted,
        };
        let (request, respond) = match accepted {
            // Idle: nothing asked for in a while.
            Err(_) => break,
            Ok(None) => return Ok(()),
            Ok(Some(Err(err))) => {
                debug!(%err, "HTTP/2 connection ended with an error");
                return Ok(());
            }
            Ok(Some(Ok(exchange))) => exchange,
        };
        if let Some(receipt) = answer(edge, request, respond, client) {
            receipts.push(receipt);
        }
        served += 1;
        if served == HTTP2_REQUESTS {
            // The client opens another connection for what it asks next; what it asked is answered.
            connection.graceful_shutdown();
        }
    }
    connection.graceful_shutdown();
    let close = async {
        loop {
            tokio::select! {
                Some(()) = receipts.next(), if !receipts.is_empty() => {}
                accepted = connection.accept() => match accepted {
                    Some(Ok((request, respond))) => receipts.extend(answer(edge, request, respond, client)),
                    Some(Err(_)) | None => break,
                },
            }
        }
    };
    if tokio::time::timeout(CLOSE_GRACE, close).await.is_err() {
        debug!("HTTP/2 connection not closed in time; leaving it");
    }
    Ok(())
}

/// Answers one request at once, or returns what answers a receipt once its body has arrived.
fn answer<'a>(
    edge: &'a Edge,
    request: ::http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    client: IpAddr,
) -> Option<impl Future<Output = ()> + 'a> {
    let (parts, body) = request.into_parts();
    let target = parts.uri.path_and_query().map_or("/", |target| target.as_str());
    let host = parts.uri.authority().map(|authority| ("host", authority.as_str().as_bytes()));
    let headers = host.into_iter().chain(parts.headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes())));
    let head = match RequestHead::from_parts(parts.method.as_str(), target, headers) {
        Ok(head) => head,
        Err(_) => {
            edge.core.metrics().refused(431);
            send_plain(&mut respond, (431, "", "request head too large"), &[]);
            return None;
        }
    };
    match route(&head, edge.token.as_ref(), edge.service.as_deref()) {
        Route::Web => match edge.web.response(&head) {
            Some(response) => {
                let (status, headers, body) = response.into_parts();
                let headers = headers.iter().map(|(name, value)| (*name, value.as_str()));
                send(&mut respond, status, headers, body.map(bytes_of));
            }
            None => send_plain(&mut respond, (404, "", "not found"), &[]),
        },
        Route::Health => send_plain(&mut respond, (200, "", "ok"), &[]),
        Route::Refuse(refusal) => {
            edge.core.metrics().refused(refusal.status);
            send_plain(&mut respond, (refusal.status, "", refusal.body), refusal.headers);
        }
        Route::Receipt { code } => match receipt::admit(&edge.core, &edge.receipts, &head, code, client) {
            Admitted::Answer(plain) => send_plain(&mut respond, plain, &[]),
            Admitted::Read(len) => {
                return Some(async move {
                    match tokio::time::timeout(receipt::BODY_TIMEOUT, read_body(body, len)).await {
                        Ok(Some(Ok(body))) => send_plain(&mut respond, receipt::pass(&edge.core, code, &body), &[]),
                        Ok(Some(Err(()))) => send_plain(&mut respond, receipt::too_long(&edge.core), &[]),
                        // Cut short, or too slow: the stream is reset when `respond` goes.
                        Ok(None) | Err(_) => {}
                    }
                });
            }
        },
        // A socket's request without its upgrade, which HTTP/2 cannot carry; `route` refuses those
        // before naming a socket, so this is for completeness.
        Route::Agent { .. } | Route::Phone { .. } | Route::Service { .. } => {
            send_plain(&mut respond, (426, "", "websocket upgrade required over HTTP/1.1"), &[])
        }
    }
    None
}

/// A receipt's body of exactly `len` bytes: `None` when the client ended it early or broke it,
/// `Err` when it sent more than it said.
async fn read_body(mut body: RecvStream, len: usize) -> Option<Result<Vec<u8>, ()>> {
    let mut bytes = Vec::with_capacity(len);
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if bytes.len() + chunk.len() > len {
            return Some(Err(()));
        }
        bytes.extend_from_slice(&chunk);
    }
    (bytes.len() == len).then_some(Ok(bytes))
}

fn bytes_of(body: Cow<'static, [u8]>) -> Bytes {
    match body {
        Cow::Borrowed(bytes) => Bytes::from_static(bytes),
        Cow::Owned(bytes) => Bytes::from(bytes),
    }
}

/// A plain-text answer, as HTTP/1.1's `respond_with` writes it, less what names the connection.
fn send_plain(respond: &mut SendResponse<Bytes>, (status, _, text): Plain, extra: &[(&str, &str)]) {
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let length = text.len().to_string();
    let headers = [
        ("date", date.as_str()),
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", length.as_str()),
        ("cache-control", "no-store"),
    ];
    send(respond, status, extra.iter().copied().chain(headers), Some(Bytes::from_static(text.as_bytes())));
}

/// Sends an answer: its head, then its body in one piece (buffered by the connection, which sends
/// it as the client's window allows).
fn send<'h>(
    respond: &mut SendResponse<Bytes>,
    status: u16,
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    body: Option<Bytes>,
) {
    let mut response = ::http::Response::builder().status(status);
    for (name, value) in headers {
        if !CONNECTION_HEADERS.contains(&name) {
            response = response.header(name, value);
        }
    }
    let Ok(response) = response.body(()) else {
        respond.send_reset(h2::Reason::INTERNAL_ERROR);
        return;
    };
    let body = body.filter(|body| !body.is_empty());
    match respond.send_response(response, body.is_none()) {
        Ok(mut stream) => {
            if let Some(body) = body {
                if let Err(err) = stream.send_data(body, true) {
                    debug!(%err, "could not send an answer's body");
                }
            }
        }
        Err(err) => debug!(%err, "could not send an answer"),
    }
}
