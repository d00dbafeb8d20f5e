//! Outbound WebSocket connections: TCP (through an HTTP CONNECT proxy when the environment names
//! one), TLS with rustls and the web's root certificates plus any extra CA the user trusts, then
//! the WebSocket handshake.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::WebSocketStream;

use super::proxy::{self, Proxy};
use crate::config::is_loopback_host;
use crate::secret::Secret;

/// Time allowed for TCP, proxy, TLS and WebSocket handshakes together.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Any byte stream a WebSocket can run over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A client WebSocket over TCP or TLS; sealed once a protocol-3 hello completes on it.
pub type ClientSocket = crate::seal::Socket<WebSocketStream<Box<dyn Io>>>;

/// How to dial.
#[derive(Clone, Default)]
pub struct DialOptions {
    /// Certificates trusted in addition to the web's roots (`--ca-cert`).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Sent as `Authorization: Bearer …` (the relay token).
    pub bearer: Option<Secret>,
    /// HTTP CONNECT proxy for `wss://`, if any.
    pub proxy: Option<Proxy>,
    /// Hosts that bypass the proxy (`NO_PROXY`).
    pub no_proxy: Vec<String>,
    /// Extra request headers.
    pub headers: Vec<(String, Secret)>,
    /// The WebSocket subprotocols to offer, comma-separated, preferred first (the relay framing
    /// on `/agent`); the server must choose one of them, or the connection fails.
    pub subprotocol: Option<&'static str>,
}

impl std::fmt::Debug for DialOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DialOptions")
            .field("extra_roots", &self.extra_roots.len())
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .field("proxy", &self.proxy)
            .field("no_proxy", &self.no_proxy)
            .finish_non_exhaustive()
    }
}

impl DialOptions {
    /// Reads `HTTPS_PROXY`/`https_proxy`/`ALL_PROXY` and `NO_PROXY`/`no_proxy`.
    pub fn with_proxy_from_env(mut self) -> Result<Self> {
        if let Some(proxy) = proxy::from_env()? {
            self.proxy = Some(proxy);
        }
        if let Some(list) = proxy::no_proxy_from_env() {
            self.no_proxy = list;
        }
        Ok(self)
    }

    /// Adds the certificates of a PEM file to the trusted roots.
    pub fn trust_pem_file(mut self, path: &Path) -> Result<Self> {
        let certs = CertificateDer::pem_file_iter(path)
            .with_context(|| format!("could not read CA certificate {}", path.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("{} is not a PEM certificate file", path.display()))?;
        if certs.is_empty() {
            bail!("{} holds no certificate", path.display());
        }
        self.extra_roots.extend(certs);
        Ok(self)
    }

    pub fn bypasses_proxy(&self, host: &str) -> bool {
        proxy::bypasses(&self.no_proxy, host)
    }
}

/// Rustls client settings: the web's roots plus `extra_roots`.
pub fn tls_client_config(extra_roots: &[CertificateDer<'static>]) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in extra_roots {
        roots.add(cert.clone()).context("an extra CA certificate is not valid")?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .context("TLS setup failed")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Opens a WebSocket to `url` (`ws://` or `wss://`). Errors name the host, never the query.
pub async fn connect(url: &str, options: &DialOptions) -> Result<ClientSocket> {
    connect_negotiated(url, options).await.map(|(socket, _)| socket)
}

/// [`connect`], and the subprotocol the server chose among those offered (`None` when none was
/// offered).
pub async fn connect_negotiated(url: &str, options: &DialOptions) -> Result<(ClientSocket, Option<String>)> {
    let parsed = url::Url::parse(url).map_err(|err| anyhow!("invalid WebSocket URL: {err}"))?;
    let host = parsed.host_str().ok_or_else(|| anyhow!("WebSocket URL has no host"))?.to_owned();
    let bare_host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let tls = match parsed.scheme() {
        "wss" => true,
        "ws" if is_loopback_host(&host) => false,
        "ws" => bail!("refusing unencrypted ws:// to {host}: only loopback hosts may use it"),
        other => bail!("unsupported WebSocket scheme {other}"),
    };
    let port = parsed.port().unwrap_or(if tls { 443 } else { 80 });
    let shown = format!("{host}:{port}");
    let attempt = async {
        let stream = open_stream(&bare_host, port, tls, options).await?;
        let mut request = url.into_client_request().context("invalid WebSocket request")?;
        let headers = request.headers_mut();
        if let Some(bearer) = &options.bearer {
            let value = HeaderValue::from_str(&format!("Bearer {}", bearer.expose())).context("invalid bearer")?;
            headers.insert("authorization", value);
        }
        if let Some(protocol) = options.subprotocol {
            headers.insert("sec-websocket-protocol", HeaderValue::from_static(protocol));
        }
        for (name, value) in &options.headers {
            let name: tokio_tungstenite::tungstenite::http::HeaderName = name.parse().context("invalid header name")?;
            headers.insert(name, HeaderValue::from_str(value.expose()).context("invalid header value")?);
        }
        let (socket, response) =
            tokio_tungstenite::client_async_with_config(request, stream, Some(super::http::websocket_config()))
                .await
                .map_err(describe_handshake_error)?;
        let chosen = response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|value| value.to_str().ok())
            .map(|value| value.trim().to_owned());
        Ok::<_, anyhow::Error>((crate::seal::Socket::plain(socket), chosen))
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .map_err(|_| anyhow!("timed out after {} s", CONNECT_TIMEOUT.as_secs()))
        .and_then(|r| r)
        .with_context(|| format!("could not reach {shown}"))
}

/// A byte stream to `host:port`: TCP (through the proxy for TLS hosts it does not bypass), then
/// TLS when `tls`. The WebSocket dialer and the push sender share it.
pub async fn open_stream(host: &str, port: u16, tls: bool, options: &DialOptions) -> Result<Box<dyn Io>> {
    let tcp = match options.proxy.as_ref().filter(|_| tls && !options.bypasses_proxy(host)) {
        Some(proxy) => proxy.connect(host, port).await?,
        None => TcpStream::connect((host, port)).await.context("TCP connect failed")?,
    };
    let _ = tcp.set_nodelay(true);
    if !tls {
        return Ok(Box::new(tcp));
    }
    let config = tls_client_config(&options.extra_roots)?;
    let name = ServerName::try_from(host.to_owned()).context("invalid TLS server name")?;
    let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.context("TLS handshake failed")?;
    Ok(Box::new(tls))
}

/// Handshake errors without URLs: an HTTP refusal shows its status only.
fn describe_handshake_error(err: tokio_tungstenite::tungstenite::Error) -> anyhow::Error {
    use tokio_tungstenite::tungstenite::Error;
    match err {
        Error::Http(response) => {
            anyhow!(HttpRefusal(response.status().as_u16()))
        }
        other => anyhow!("WebSocket handshake failed: {other}"),
    }
}

/// The server answered the upgrade with this HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpRefusal(pub u16);

impl std::fmt::Display for HttpRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reason = tokio_tungstenite::tungstenite::http::StatusCode::from_u16(self.0)
            .ok()
            .and_then(|status| status.canonical_reason())
            .unwrap_or("");
        write!(f, "refused with HTTP {} {reason}", self.0)
    }
}

impl std::error::Error for HttpRefusal {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plain_ws_to_a_public_host_is_refused_before_connecting() {
        let err = connect("ws://example.com/agent?code=00", &DialOptions::default()).await.err().unwrap();
        let text = format!("{err:#}");
        assert!(text.contains("only loopback"), "{text}");
        assert!(!text.contains("code="), "{text}");
    }
}
