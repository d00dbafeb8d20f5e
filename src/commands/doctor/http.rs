//! The step-by-step connection the relay and Gemini checks make: TCP (through the proxy when
//! `voxa run` would use it), TLS, and one bounded `GET`, each with its own time limit.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::NET_TIMEOUT;
use crate::config::RelayUrl;
use crate::net::dial::{DialOptions, Io};
use crate::secret::Secret;

/// Largest HTTP response read from the relay.
const MAX_RESPONSE_LEN: usize = 16 << 10;

/// Where the relay is, split for the step-by-step connection.
pub(super) struct Target {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) tls: bool,
    /// The relay's base path, without a trailing slash.
    pub(super) base_path: String,
}

impl Target {
    pub(super) fn of(relay: &RelayUrl) -> Result<Target> {
        let url = url::Url::parse(relay.as_str()).context("relay URL")?;
        let host = url.host_str().ok_or_else(|| anyhow!("relay URL has no host"))?;
        Ok(Target {
            host: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
            port: url.port_or_known_default().unwrap_or(443),
            tls: relay.is_tls(),
            base_path: url.path().trim_end_matches('/').to_owned(),
        })
    }
}

pub(super) async fn connect_tcp(target: &Target, dial: &DialOptions) -> Result<TcpStream> {
    let attempt = async {
        match dial.proxy.as_ref().filter(|_| target.tls && !dial.bypasses_proxy(&target.host)) {
            Some(proxy) => proxy.connect(&target.host, target.port).await,
            None => TcpStream::connect((target.host.as_str(), target.port)).await.map_err(anyhow::Error::from),
        }
    };
    tokio::time::timeout(NET_TIMEOUT, attempt)
        .await
        .map_err(|_| anyhow!("timed out after {} s", NET_TIMEOUT.as_secs()))?
}

pub(super) async fn connect_tls(target: &Target, dial: &DialOptions, tcp: TcpStream) -> Result<Box<dyn Io>> {
    let config = crate::net::dial::tls_client_config(&dial.extra_roots)?;
    let name = rustls_pki_types::ServerName::try_from(target.host.clone()).context("invalid TLS server name")?;
    let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
    let stream = tokio::time::timeout(NET_TIMEOUT, handshake)
        .await
        .map_err(|_| anyhow!("timed out after {} s", NET_TIMEOUT.as_secs()))??;
    Ok(Box::new(stream))
}

pub(super) async fn open_stream(target: &Target, dial: &DialOptions) -> Result<Box<dyn Io>> {
    let tcp = connect_tcp(target, dial).await?;
    if target.tls {
        connect_tls(target, dial, tcp).await
    } else {
        Ok(Box::new(tcp))
    }
}

/// What an HTTP exchange returned.
pub(super) struct Response {
    pub(super) status: u16,
    pub(super) date: Option<SystemTime>,
    pub(super) body: String,
    pub(super) received: SystemTime,
    pub(super) elapsed: Duration,
}

/// One `GET` on its own connection (`Connection: close`), response bounded in size and time.
pub(super) async fn http_get(
    mut stream: Box<dyn Io>,
    target: &Target,
    path: &str,
    bearer: Option<&Secret>,
) -> Result<Response> {
    let started = Instant::now();
    let host = if target.host.contains(':') { format!("[{}]", target.host) } else { target.host.clone() };
    let mut request = format!(
        "GET {}{path} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: voxa-doctor/{}\r\nConnection: close\r\n",
        target.base_path,
        target.port,
        crate::VERSION
    );
    if let Some(bearer) = bearer {
        request.push_str(&format!("Authorization: Bearer {}\r\n", bearer.expose()));
    }
    request.push_str("\r\n");
    let exchange = async {
        stream.write_all(request.as_bytes()).await?;
        stream.flush().await?;
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        loop {
            let n = match stream.read(&mut chunk).await {
                Ok(n) => n,
                // A TLS peer that closes without close_notify still sent a complete response.
                Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => 0,
                Err(err) => return Err(anyhow::Error::from(err)),
            };
            if n == 0 {
                return Ok(buf);
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_RESPONSE_LEN {
                bail!("response larger than {MAX_RESPONSE_LEN} bytes");
            }
        }
    };
    let bytes = tokio::time::timeout(NET_TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow!("no answer within {} s", NET_TIMEOUT.as_secs()))??;
    let received = SystemTime::now();
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(&bytes).context("the answer is not HTTP")? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => bail!("the answer ended early"),
    };
    let date = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("date"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|value| httpdate::parse_http_date(value.trim()).ok());
    Ok(Response {
        status: response.code.unwrap_or(0),
        date,
        body: String::from_utf8_lossy(&bytes[head_len..]).into_owned(),
        received,
        elapsed: started.elapsed(),
    })
}
