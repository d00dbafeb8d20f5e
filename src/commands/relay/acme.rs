//! A relay's own certificate (`voxa relay --domain`): obtained and renewed by ACME (RFC 8555),
//! proving control of the domain with TLS-ALPN-01 (RFC 8737) on the relay's own TLS listener.
//!
//! - [`CertResolver`] picks the certificate of every TLS handshake: the domain's current one, or,
//!   for a validation handshake (ALPN `acme-tls/1`), the challenge certificate of an order in
//!   progress. Renewal swaps the current certificate in place: connections already open keep
//!   theirs, new ones get the new one, and nothing is dropped.
//! - [`Acme::run`] orders a certificate when there is none, and a new one once two thirds of the
//!   current one's lifetime have passed (30 days before the end of a 90-day certificate); a failed
//!   order is retried with backoff while the current certificate keeps serving.
//! - The account key and the certificate with its key are kept 0600 under
//!   `<home>/acme/<directory tag>/`, so a restart serves the stored certificate at once and asks the
//!   CA for nothing until renewal is due. Switching to another CA (`--acme-directory`) starts a new
//!   account and certificate beside the old ones.

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus,
    RetryPolicy,
};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use crate::state::{check_private, read_if_exists, write_atomic};

/// The ALPN protocol of a TLS-ALPN-01 validation handshake (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
/// The first pause after a failed order; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(30);
const MAX_RETRY: Duration = Duration::from_secs(3600);
/// How long an order may wait for the CA to validate and then to issue.
const ORDER_POLL: RetryPolicy = RetryPolicy::new().timeout(Duration::from_secs(120));
const ACCOUNT_FILE: &str = "account.json";

/// Where and from whom a relay gets its certificate.
#[derive(Clone, Debug)]
pub struct AcmeConfig {
    /// The relay's DNS name; it must resolve to this relay, reachable on port 443.
    pub domain: String,
    /// The CA's ACME directory URL.
    pub directory: String,
    /// A PEM root to trust for the CA's own HTTPS (a private or test CA); system roots when `None`.
    pub ca_file: Option<PathBuf>,
    /// The relay's state directory (its voxa home); certificates go in `acme/` inside it.
    pub state_dir: PathBuf,
}

/// What happened to the relay's certificate, for the operator.
#[derive(Clone, Debug)]
pub enum AcmeEvent {
    /// A certificate is being served: one read back from the state directory at start, or one
    /// just issued.
    Ready { serial: String, not_after: SystemTime, issued: bool },
    /// An order failed; the current certificate (if any) keeps serving until the retry.
    Failed { error: String, retry_in: Duration },
}

/// Chooses the certificate of each TLS handshake (see the module docs).
pub struct CertResolver {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// TLS-ALPN-01 challenge certificates by the name they answer for, while an order runs.
    challenges: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let has_current = self.current.read().map(|current| current.is_some()).unwrap_or(false);
        f.debug_struct("CertResolver").field("has_certificate", &has_current).finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let validating = hello.alpn().is_some_and(|mut offered| offered.any(|alpn| alpn == ACME_TLS_ALPN));
        if validating {
            // Only a validation handshake gets a challenge certificate, and only the one for the
            // name it asks for; it never gets the real certificate.
            let name = hello.server_name()?.to_ascii_lowercase();
            return self.challenges.lock().ok()?.get(&name).cloned();
        }
        self.current.read().ok()?.clone()
    }
}

impl CertResolver {
    fn new() -> Arc<CertResolver> {
        Arc::new(CertResolver { current: RwLock::new(None), challenges: Mutex::default() })
    }

    /// Serves `key` to every handshake from now on; open connections keep the one they have.
    fn install(&self, key: Arc<CertifiedKey>) {
        if let Ok(mut current) = self.current.write() {
            *current = Some(key);
        }
    }

    fn set_challenge(&self, name: &str, key: Option<Arc<CertifiedKey>>) {
        if let Ok(mut challenges) = self.challenges.lock() {
            match key {
                Some(key) => challenges.insert(name.to_owned(), key),
                None => challenges.remove(name),
            };
        }
    }
}

/// A relay's certificate manager: the resolver its TLS listener uses, and the task that keeps it
/// supplied ([`Acme::run`]).
pub struct Acme {
    config: AcmeConfig,
    dir: PathBuf,
    resolver: Arc<CertResolver>,
    /// The certificate being served, as read for renewal.
    current: Option<Stored>,
}

impl fmt::Debug for Acme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acme").field("config", &self.config).field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// A certificate chain and its key, with what renewal needs to know about it.
#[derive(Clone)]
struct Stored {
    key: Arc<CertifiedKey>,
    serial: String,
    not_before: SystemTime,
    not_after: SystemTime,
}

impl Stored {
    /// When to order its successor: once two thirds of its lifetime have passed.
    fn renew_at(&self) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + lifetime * 2 / 3
    }
}

impl Acme {
    /// Checks the domain, prepares the state directory (0700) and loads the stored certificate,
    /// if one is there and still valid, so the relay can serve it before anything is ordered.
    pub fn new(config: AcmeConfig) -> anyhow::Result<Acme> {
        check_domain(&config.domain)?;
        let dir = config.state_dir.join("acme").join(directory_tag(&config.directory));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("could not create the certificate directory {}", dir.display()))?;
        check_private(&dir, true)?;
        let acme = Acme { resolver: CertResolver::new(), current: None, dir, config };
        let current = acme.load_stored()?;
        if let Some(stored) = &current {
            acme.resolver.install(Arc::clone(&stored.key));
        }
        Ok(Acme { current, ..acme })
    }

    /// The resolver to serve TLS with (see [`server_config`]).
    pub fn resolver(&self) -> Arc<CertResolver> {
        Arc::clone(&self.resolver)
    }

    /// The certificate file (PEM chain) of the domain in the state directory.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(format!("{}.crt", self.config.domain))
    }

    /// The private key file (PEM, PKCS#8) of the domain's certificate.
    pub fn key_path(&self) -> PathBuf {
        self.dir.join(format!("{}.key", self.config.domain))
    }

    /// The ACME account file (credentials with the account key) for this CA.
    pub fn account_path(&self) -> PathBuf {
        self.dir.join(ACCOUNT_FILE)
    }

    /// Keeps a valid certificate installed until `cancel`: reports the stored one, orders when
    /// there is none or renewal is due, retries failures with backoff. The relay's listener must
    /// already accept connections, as the CA validates through it.
    pub async fn run(mut self, cancel: CancellationToken, report: impl Fn(AcmeEvent) + Send) {
        if let Some(stored) = &self.current {
            report(AcmeEvent::Ready { serial: stored.serial.clone(), not_after: stored.not_after, issued: false });
        }
        let mut retry = FIRST_RETRY;
        let mut failed = false;
        loop {
            let due = match (&self.current, failed) {
                (_, true) => retry,
                (None, false) => Duration::ZERO,
                (Some(stored), false) => stored.renew_at().duration_since(SystemTime::now()).unwrap_or_default(),
            };
            if failed {
                retry = (retry * 2).min(MAX_RETRY);
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(due) => {}
            }
            let ordered = tokio::select! {
                () = cancel.cancelled() => return,
                ordered = self.order() => ordered,
            };
            match ordered {
                Ok(stored) => {
                    self.resolver.install(Arc::clone(&stored.key));
                    report(AcmeEvent::Ready {
                        serial: stored.serial.clone(),
                        not_after: stored.not_after,
                        issued: true,
                    });
                    self.current = Some(stored);
                    (failed, retry) = (false, FIRST_RETRY);
                }
                Err(err) => {
                    report(AcmeEvent::Failed { error: format!("{err:#}"), retry_in: retry });
                    failed = true;
                }
            }
        }
    }

    /// One order from account to stored certificate.
    async fn order(&self) -> anyhow::Result<Stored> {
        let account = self.account().await?;
        let domain = &self.config.domain;
        let identifiers = [Identifier::Dns(domain.clone())];
        let mut order = account.new_order(&NewOrder::new(&identifiers)).await.context("the CA refused a new order")?;
        // The challenge certificate is served until the CA has decided, whatever it decides.
        let validated = match self.validate(&mut order).await {
            Ok(()) => order.poll_ready(&ORDER_POLL).await.context("the CA did not validate the domain"),
            Err(err) => Err(err),
        };
        self.resolver.set_challenge(domain, None);
        let status = validated?;
        if status != OrderStatus::Ready {
            bail!("the CA did not validate {domain} (order {status:?}); does it resolve to this relay, reachable on port 443?");
        }
        let key = rcgen::KeyPair::generate().context("could not make a certificate key")?;
        let mut params = rcgen::CertificateParams::new(vec![domain.clone()]).context("bad domain for a certificate")?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key).context("could not make the certificate request")?;
        order.finalize_csr(csr.der()).await.context("the CA refused the certificate request")?;
        let chain = order.poll_certificate(&ORDER_POLL).await.context("the CA did not issue the certificate")?;
        let key_pem = key.serialize_pem();
        let stored = parse_stored(chain.as_bytes(), key_pem.as_bytes())?;
        // Key first: a crash between the two writes leaves a pair that does not match, which the
        // next start ignores and orders again.
        write_atomic(&self.key_path(), key_pem.as_bytes())?;
        write_atomic(&self.cert_path(), chain.as_bytes())?;
        Ok(stored)
    }

    /// Answers the order's pending authorizations by TLS-ALPN-01.
    async fn validate(&self, order: &mut instant_acme::Order) -> anyhow::Result<()> {
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization.context("could not read an authorization")?;
            match authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                status => bail!("the CA's authorization is {status:?}"),
            }
            let mut challenge = authorization
                .challenge(ChallengeType::TlsAlpn01)
                .context("the CA offers no tls-alpn-01 challenge, the only kind this relay answers")?;
            let name = challenge.identifier().to_string().to_ascii_lowercase();
            let certificate = challenge_certificate(&name, challenge.key_authorization().digest().as_ref())?;
            self.resolver.set_challenge(&name, Some(certificate));
            challenge.set_ready().await.context("could not tell the CA the challenge is ready")?;
        }
        Ok(())
    }

    /// The account for this CA: the stored one, else a new one, stored 0600.
    async fn account(&self) -> anyhow::Result<Account> {
        let builder = || match &self.config.ca_file {
            Some(file) => Account::builder_with_root(file)
                .with_context(|| format!("could not use {} as the ACME server's CA", file.display())),
            None => Account::builder().context("could not set up HTTPS to the ACME server"),
        };
        let path = self.account_path();
        if let Some(bytes) = read_if_exists(&path)? {
            check_private(&path, false)?;
            let credentials: AccountCredentials = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not an ACME account file", path.display()))?;
            return builder()?.from_credentials(credentials).await.context("could not reach the ACME server");
        }
        let new = NewAccount { contact: &[], terms_of_service_agreed: true, only_return_existing: false };
        let (account, credentials) = builder()?
            .create(&new, self.config.directory.clone(), None)
            .await
            .with_context(|| format!("could not open an account with the ACME server {}", self.config.directory))?;
        let bytes = serde_json::to_vec(&credentials).context("could not encode the ACME account")?;
        write_atomic(&path, &bytes)?;
        Ok(account)
    }

    /// The stored certificate, if its files are there, private, matching and not expired.
    fn load_stored(&self) -> anyhow::Result<Option<Stored>> {
        let (cert_path, key_path) = (self.cert_path(), self.key_path());
        let (Some(chain), Some(key)) = (read_if_exists(&cert_path)?, read_if_exists(&key_path)?) else {
            return Ok(None);
        };
        check_private(&key_path, false)?;
        let stored = match parse_stored(&chain, &key) {
            Ok(stored) => stored,
            Err(err) => {
                tracing::warn!("ignoring the stored certificate {}: {err:#}", cert_path.display());
                return Ok(None);
            }
        };
        Ok((stored.not_after > SystemTime::now()).then_some(stored))
    }
}

/// A rustls server configuration that takes its certificates from `resolver` and speaks
/// HTTP/2 and HTTP/1.1, plus `acme-tls/1` for validation handshakes.
pub fn server_config(resolver: Arc<CertResolver>) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider supports no protocol version")?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), ACME_TLS_ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// A self-signed certificate for `name` carrying the key authorization's digest in the
/// `acmeIdentifier` extension (RFC 8737 §3).
fn challenge_certificate(name: &str, digest: &[u8]) -> anyhow::Result<Arc<CertifiedKey>> {
    let key = rcgen::KeyPair::generate().context("could not make a challenge key")?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).context("bad name for a challenge")?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).context("could not make the challenge certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not checked with `keys_match`, which refuses the critical extension; made together above.
    Ok(Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing_key(key)?)))
}

fn signing_key(key: PrivateKeyDer<'static>) -> anyhow::Result<Arc<dyn rustls::sign::SigningKey>> {
    let provider = rustls::crypto::ring::default_provider();
    provider.key_provider.load_private_key(key).context("the certificate key is not supported")
}

/// Parses a PEM chain (leaf first) and its PEM key into what the resolver serves.
fn parse_stored(chain: &[u8], key: &[u8]) -> anyhow::Result<Stored> {
    let certs = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| anyhow::anyhow!("the certificate chain is not valid PEM"))?;
    let leaf = certs.first().context("the certificate chain is empty")?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(leaf).map_err(|_| anyhow::anyhow!("the certificate is not valid X.509"))?;
    let validity = parsed.validity();
    let time = |at: &x509_parser::time::ASN1Time| {
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(at.timestamp()).unwrap_or(0))
    };
    let (not_before, not_after) = (time(&validity.not_before), time(&validity.not_after));
    let serial = parsed.raw_serial_as_string();
    let key =
        PrivateKeyDer::from_pem_slice(key).map_err(|_| anyhow::anyhow!("the certificate key is not valid PEM"))?;
    let certified = CertifiedKey::new(certs, signing_key(key)?);
    certified.keys_match().context("the certificate and its key do not match")?;
    Ok(Stored { key: Arc::new(certified), serial, not_before, not_after })
}

/// Refuses what cannot be a public DNS name for a certificate: IP addresses, wildcards, single
/// labels, and anything but letters, digits, dots and hyphens.
pub fn check_domain(domain: &str) -> anyhow::Result<()> {
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |label: &&str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
    };
    let all_digits = labels.last().is_some_and(|last| last.bytes().all(|byte| byte.is_ascii_digit()));
    if domain.len() > 253 || labels.len() < 2 || !labels.iter().all(label_ok) || all_digits {
        bail!("--domain {domain:?} is not a DNS name like relay.example.com (lowercase; no IP address, no wildcard)");
    }
    Ok(())
}

/// A directory name per CA, so accounts and certificates of different CAs never mix.
fn directory_tag(directory: &str) -> String {
    let host = url::Url::parse(directory)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect::<String>();
    let digest = Sha256::digest(directory.as_bytes());
    format!("{host}-{}", hex::encode(&digest[..6]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_must_be_dns_names() {
        for good in ["relay.example.com", "a-b.example.org", "x1.y2.z3"] {
            check_domain(good).unwrap();
        }
        for bad in
            ["", "localhost", "127.0.0.1", "*.example.com", "Relay.example.com", "a..b", "-a.b", "a.b/c", "a b.c"]
        {
            assert!(check_domain(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn each_directory_has_its_own_tag() {
        let staging = directory_tag("https://acme-staging-v02.api.letsencrypt.org/directory");
        let production = directory_tag(crate::cli::LETS_ENCRYPT_DIRECTORY);
        assert!(staging.starts_with("acme-staging-v02.api.letsencrypt.org-"), "{staging}");
        assert_ne!(staging, production);
        assert_eq!(directory_tag("https://127.0.0.1:1/../x"), directory_tag("https://127.0.0.1:1/../x"));
        assert!(!directory_tag("https://a/b").contains('/'));
    }

    #[test]
    fn renewal_is_due_after_two_thirds_of_the_lifetime() {
        let certified = rcgen::generate_simple_self_signed(vec!["relay.example.com".to_owned()]).unwrap();
        let stored =
            parse_stored(certified.cert.pem().as_bytes(), certified.signing_key.serialize_pem().as_bytes()).unwrap();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let stored = Stored { not_before: start, not_after: start + Duration::from_secs(90 * 86400), ..stored };
        assert_eq!(stored.renew_at(), start + Duration::from_secs(60 * 86400));
    }
}
