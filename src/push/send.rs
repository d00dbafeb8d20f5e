//! One push, sent straight to the push service (RFC 8030): a `POST` of the encrypted payload to the
//! subscription's endpoint with its VAPID `Authorization`, `TTL`, `Topic` and `Urgency`. The
//! endpoint is checked again first ([`super::endpoint`]) and the connection goes to an address
//! that was checked; through `HTTPS_PROXY`, as the relay link goes, the proxy resolves the name
//! itself. Only the status line and headers of the answer are read.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::endpoint::{self, Checked};
use crate::net::dial::{self, DialOptions, Io};

/// Time allowed for one push: connect, send and the answer's head.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest answer head read.
const MAX_RESPONSE_HEAD: usize = 16 * 1024;

/// What the push service said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: accepted for delivery.
    Delivered(u16),
    /// 404 or 410: the subscription is gone; forget it.
    Gone(u16),
    /// 429 or 5xx: try again later (after `Retry-After` when given).
    Later { status: u16, retry_after: Option<Duration> },
    /// Any other status: refused (a bad request or a bad VAPID signature); not retried.
    Refused(u16),
}

impl Outcome {
    fn of(status: u16, retry_after: Option<Duration>) -> Outcome {
        match status {
            200..=299 => Outcome::Delivered(status),
            404 | 410 => Outcome::Gone(status),
            429 | 500..=599 => Outcome::Later { status, retry_after },
            _ => Outcome::Refused(status),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match *self {
            Outcome::Delivered(s) | Outcome::Gone(s) | Outcome::Refused(s) => s,
            Outcome::Later { status, .. } => status,
        }
    }
}

/// Sends `request` (built by web-push-native, with the headers voxa adds) and reads the status;
/// the endpoint must pass [`endpoint::check`] again first.
pub async fn post(request: &http::Request<Vec<u8>>, options: &DialOptions, allow_private: bool) -> Result<Outcome> {
    let uri = request.uri();
    let host = uri.host().ok_or_else(|| anyhow!("the push endpoint has no host"))?.to_owned();
    let attempt = async {
        let checked = endpoint::check(&uri.to_string(), allow_private).await?;
        let (tls, port) = (checked.tls, checked.port);
        let mut stream = connect(&checked, options).await?;
        stream.write_all(&request_bytes(request, &host, port, tls)).await.context("could not send the push")?;
        stream.flush().await.context("could not send the push")?;
        read_outcome(&mut stream).await
    };
    tokio::time::timeout(SEND_TIMEOUT, attempt)
        .await
        .map_err(|_| anyhow!("timed out after {} s", SEND_TIMEOUT.as_secs()))
        .and_then(|r| r)
        .with_context(|| format!("could not push to {host}"))
}

/// A connection to the checked endpoint: to one of its checked addresses, or through the proxy.
async fn connect(checked: &Checked, options: &DialOptions) -> Result<Box<dyn Io>> {
    if checked.tls && options.proxy.is_some() && !options.bypasses_proxy(&checked.host) {
        return dial::open_stream(&checked.host, checked.port, checked.tls, options).await;
    }
    let tcp = tokio::net::TcpStream::connect(&checked.addrs[..]).await.context("TCP connect failed")?;
    let _ = tcp.set_nodelay(true);
    if !checked.tls {
        return Ok(Box::new(tcp));
    }
    let config = dial::tls_client_config(&options.extra_roots)?;
    let name = rustls_pki_types::ServerName::try_from(checked.host.clone()).context("invalid TLS server name")?;
    let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.context("TLS handshake failed")?;
    Ok(Box::new(tls))
}

/// The request as HTTP/1.1 bytes (`Connection: close`).
fn request_bytes(request: &http::Request<Vec<u8>>, host: &str, port: u16, tls: bool) -> Vec<u8> {
    let path = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let default_port = if tls { 443 } else { 80 };
    let authority = if port == default_port { host.to_owned() } else { format!("{host}:{port}") };
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (name, value) in request.headers() {
        if let Ok(value) = value.to_str() {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(request.body());
    bytes
}

async fn read_outcome<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Result<Outcome> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream.read(&mut chunk).await.context("could not read the push service's answer")?;
        if n == 0 {
            bail!("the push service closed the connection without an answer");
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                let status = response.code.ok_or_else(|| anyhow!("the push service's answer has no status"))?;
                let retry_after = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("retry-after"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                return Ok(Outcome::of(status, retry_after));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_RESPONSE_HEAD => continue,
            Ok(httparse::Status::Partial) => bail!("the push service's answer head is too long"),
            Err(err) => bail!("the push service's answer is not HTTP: {err}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_what_the_sender_does() {
        assert_eq!(Outcome::of(201, None), Outcome::Delivered(201));
        assert_eq!(Outcome::of(410, None), Outcome::Gone(410));
        assert_eq!(Outcome::of(404, None), Outcome::Gone(404));
        assert_eq!(Outcome::of(429, Some(Duration::from_secs(3))).status(), 429);
        assert!(matches!(Outcome::of(503, None), Outcome::Later { .. }));
        assert_eq!(Outcome::of(403, None), Outcome::Refused(403));
    }

    #[tokio::test]
    async fn an_answer_split_across_reads_is_read_whole() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for part in ["HTTP/1.1 42", "9 Too Many\r\nRetry-", "After: 7\r\n", "\r\n"] {
                server.write_all(part.as_bytes()).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let outcome = read_outcome(&mut client).await.unwrap();
        writer.await.unwrap();
        assert_eq!(outcome, Outcome::Later { status: 429, retry_after: Some(Duration::from_secs(7)) });
    }
}
