//! How a relay runs: its settings (the edge's admission limits, the core's socket limits and
//! budget, the service beside them) and its TLS certificate.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::core::{metrics, SocketLimits, MEMORY_BUDGET};
use super::service::PhoneService;
use crate::net::http;
use crate::secret::Secret;

/// Connections (upgraded or not) one relay process serves at once; more are refused.
pub const MAX_CONNECTIONS: usize = 50_000;
/// Connections one client address (an IPv4 address, an IPv6 /64) may hold at once.
pub const MAX_CONNECTIONS_PER_IP: usize = 128;
/// Time a client has to finish its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = http::HEAD_TIMEOUT;

/// How a relay runs: TLS, the optional relay token, and the limits every socket gets.
#[derive(Clone)]
pub struct RelayConfig {
    /// Serve `wss://` with this configuration; plain `ws://` when `None`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Token both sides must present as `Authorization: Bearer`; open relay when `None`.
    pub token: Option<Secret>,
    /// Per-socket timing and size limits.
    pub limits: SocketLimits,
    /// Connections served at once; further ones are refused (`503` on plain HTTP).
    pub max_connections: usize,
    /// Connections one client address may hold (`429` beyond it); 0 for no limit, as behind a
    /// proxy where every connection comes from the proxy's address.
    pub max_connections_per_ip: usize,
    /// Bytes of messages held at once across all sockets (at least two largest messages).
    pub memory_budget: usize,
    /// Where the relay counts what it does; serve them with [`super::serve_metrics`].
    pub metrics: Arc<metrics::RelayMetrics>,
    /// A socket kind served beside `/agent` and `/ws` (hosted voice at `/live`, docs/PROTOCOL.md,
    /// "Hosted voice"); its path is 404 when `None`. The web client's `GET /config` reports
    /// whether voice is offered.
    pub service: Option<Arc<dyn PhoneService>>,
    /// SHA-256 of the certificate `tls` serves, for the web client's `GET /config` to show: set by
    /// `voxa run --lan`, whose certificate no one the phone trusts signed.
    pub certificate_sha256: Option<[u8; 32]>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            tls: None,
            token: None,
            limits: SocketLimits::default(),
            max_connections: MAX_CONNECTIONS,
            max_connections_per_ip: MAX_CONNECTIONS_PER_IP,
            memory_budget: MEMORY_BUDGET,
            metrics: Arc::default(),
            service: None,
            certificate_sha256: None,
        }
    }
}

impl std::fmt::Debug for RelayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayConfig")
            .field("tls", &self.tls.is_some())
            .field("token", &self.token)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_ip", &self.max_connections_per_ip)
            .field("memory_budget", &self.memory_budget)
            .field("service", &self.service.as_ref().map(|service| service.path()))
            .finish_non_exhaustive()
    }
}

/// Loads a PEM certificate chain and private key (PKCS#8, PKCS#1 or SEC1) for `wss://`.
pub fn load_tls(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|err| pem_error(err, "TLS certificate", cert))?;
    if certs.is_empty() {
        bail!("TLS certificate {} holds no PEM certificate", cert.display());
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|err| pem_error(err, "TLS private key", key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider supports no protocol version")?
        .with_no_client_auth()
        .with_single_cert(certs, private_key)
        .with_context(|| {
            format!("TLS certificate {} and key {} do not match or are not supported", cert.display(), key.display())
        })?;
    // HTTP/2 first: a browser then asks for every file of the page at once (edge/http2.rs).
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Describes a PEM loading failure without quoting the file, which may hold key material.
fn pem_error(err: rustls_pki_types::pem::Error, what: &str, path: &Path) -> anyhow::Error {
    use rustls_pki_types::pem::Error;
    match err {
        Error::Io(err) => anyhow::anyhow!("could not read {what} {}: {err}", path.display()),
        Error::NoItemsFound => anyhow::anyhow!("{what} {} holds no PEM item of the expected kind", path.display()),
        _ => anyhow::anyhow!("{what} {} is not valid PEM", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_hides_the_token() {
        let config = RelayConfig { token: Some(Secret::from_string("hunter2-token".into())), ..Default::default() };
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn load_tls_explains_bad_files_without_quoting_them() {
        let dir = tempfile::tempdir().unwrap();
        let cert_path = dir.path().join("cert.pem");
        let key_path = dir.path().join("key.pem");
        let missing = load_tls(&cert_path, &key_path).unwrap_err();
        assert!(format!("{missing:#}").contains("could not read TLS certificate"), "{missing:#}");

        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&cert_path, certified.cert.pem()).unwrap();
        std::fs::write(&key_path, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n").unwrap();
        let broken = format!("{:#}", load_tls(&cert_path, &key_path).unwrap_err());
        assert!(broken.contains("TLS private key") && !broken.contains("c2VjcmV0"), "{broken}");

        std::fs::write(&key_path, certified.signing_key.serialize_pem()).unwrap();
        let config = load_tls(&cert_path, &key_path).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);

        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&key_path, other.signing_key.serialize_pem()).unwrap();
        let mismatch = format!("{:#}", load_tls(&cert_path, &key_path).unwrap_err());
        assert!(mismatch.contains("do not match"), "{mismatch}");
    }
}
