//! `voxa run --lan`: the embedded relay served on this machine's address on the local network,
//! over HTTPS with a certificate voxa makes for that address (docs/GUIDE.md, "A phone on the same
//! Wi-Fi"). The browser needs a secure page for the sealed session (WebCrypto, the service
//! worker), and no one can sign a certificate for a private address, so the certificate signs
//! itself: the phone warns once, and the SHA-256 fingerprint printed beside the QR code is what
//! to compare before accepting. The certificate and its key are kept in the home (0600) and
//! reused across runs while they cover the address and have time left.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::config::RelayUrl;
use crate::error::ConfigError;
use crate::state::Home;

/// The certificate, PEM, in the home.
pub const CERT_FILE: &str = "lan-cert.pem";
/// Its private key, PEM, in the home.
pub const KEY_FILE: &str = "lan-key.pem";
/// How long a certificate voxa makes is valid: under the 825 days Apple's platforms accept for
/// a TLS server certificate.
const VALIDITY: Duration = Duration::from_secs(800 * 24 * 3600);
/// A certificate with less time left than this is made anew.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// An address outside this machine, used only to ask the routing table which local address
/// reaches the network: connecting a UDP socket sends nothing. (TEST-NET-1, RFC 5737.)
const ROUTE_PROBE: &str = "192.0.2.1:9";

/// The relay's certificate for the local network.
pub struct LanCert {
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// SHA-256 of [`LanCert::der`].
    pub sha256: [u8; 32],
    /// The same as browsers show it: `AB:CD:…`.
    pub fingerprint: String,
    /// The certificate was made by this run (not reused).
    pub made: bool,
}

/// Where `--lan` listens: `auto` (the address this machine reaches the network from), an address,
/// or an address and port. A port of 0 takes the last run's port again when it is free.
pub fn listen_address(arg: &str) -> Result<SocketAddr> {
    let addr = match arg {
        "auto" => SocketAddr::new(this_machines_address()?, 0),
        _ => match arg.parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => SocketAddr::new(
                arg.parse::<IpAddr>().map_err(|_| {
                    ConfigError::new(format!("--lan {arg:?} is not an address like 192.168.1.20 or 192.168.1.20:8443"))
                })?,
                0,
            ),
        },
    };
    if !is_private(addr.ip()) {
        return Err(ConfigError::new(format!(
            "--lan {} is not an address of a private network; a relay on the internet needs a name and a \
             certificate a phone trusts: `voxa relay --domain <its name>` (docs/OPERATIONS.md)",
            addr.ip()
        ))
        .into());
    }
    Ok(addr)
}

/// The address this machine uses to reach the network, from the routing table.
fn this_machines_address() -> Result<IpAddr> {
    let found = UdpSocket::bind(("0.0.0.0", 0))
        .and_then(|socket| socket.connect(ROUTE_PROBE).map(|()| socket))
        .and_then(|socket| socket.local_addr());
    match found {
        Ok(addr) if !addr.ip().is_unspecified() => Ok(addr.ip()),
        _ => Err(ConfigError::new(
            "could not find this machine's address on the local network (no route to it): pass it, as in \
             `voxa run --lan 192.168.1.20`",
        )
        .into()),
    }
}

/// Private, link-local, shared (carrier-grade NAT and tailnets) or loopback: an address a phone
/// reaches only from a network it shares with this machine. Never the unspecified address.
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private() || v4.is_link_local() || v4.is_loopback() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// The certificate for `ip`: the one kept in the home when it covers `ip` and has time left,
/// else a new one (kept for the next run).
pub fn certificate_for(home: &Home, ip: IpAddr) -> Result<LanCert> {
    if let Some(kept) = kept(home)? {
        let (ips, not_after) = describe(&kept.der)?;
        let left = not_after.duration_since(SystemTime::now()).unwrap_or_default();
        if ips.contains(&ip) && left > RENEW_BEFORE {
            return Ok(kept);
        }
    }
    make(home, ip)
}

/// The certificate kept in the home, if any. A key file others can read is refused.
pub fn kept(home: &Home) -> Result<Option<LanCert>> {
    let Some(pem) = crate::state::read_if_exists(&home.path(CERT_FILE))? else { return Ok(None) };
    crate::state::check_private(&home.path(KEY_FILE), false)?;
    let der = rustls_pki_types::pem::PemObject::from_pem_slice(&pem)
        .map(|der: rustls_pki_types::CertificateDer<'_>| der.to_vec())
        .with_context(|| format!("{} is not a PEM certificate", home.path(CERT_FILE).display()))?;
    Ok(Some(LanCert::new(der, false)))
}

/// The fingerprint of the home's certificate when `relay` is served with it: `https://` on an
/// address the certificate names. `None` for any other relay.
pub fn fingerprint_of(home: &Home, relay: &RelayUrl) -> Option<String> {
    let url = url::Url::parse(relay.as_str()).ok()?;
    let ip = match url.host()? {
        url::Host::Ipv4(ip) => IpAddr::V4(ip),
        url::Host::Ipv6(ip) => IpAddr::V6(ip),
        url::Host::Domain(_) => return None,
    };
    let cert = kept(home).ok().flatten()?;
    let (ips, _) = describe(&cert.der).ok()?;
    (url.scheme() == "https" && ips.contains(&ip)).then_some(cert.fingerprint)
}

/// Makes a certificate for `ip` and keeps it (and its key) in the home, 0600.
fn make(home: &Home, ip: IpAddr) -> Result<LanCert> {
    let mut params = rcgen::CertificateParams::new(vec![ip.to_string()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("voxa on {ip}"));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    // A day's margin for a phone whose clock runs behind.
    params.not_before = epoch + since_epoch.saturating_sub(Duration::from_secs(24 * 3600));
    params.not_after = epoch + since_epoch + VALIDITY;
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    home.write_atomic(KEY_FILE, key.serialize_pem().as_bytes())?;
    home.write_atomic(CERT_FILE, cert.pem().as_bytes())?;
    Ok(LanCert::new(cert.der().to_vec(), true))
}

impl LanCert {
    fn new(der: Vec<u8>, made: bool) -> LanCert {
        let sha256: [u8; 32] = Sha256::digest(&der).into();
        LanCert { fingerprint: crate::net::web::fingerprint_text(&sha256), sha256, der, made }
    }
}

/// The addresses a certificate names and the end of its validity.
fn describe(der: &[u8]) -> Result<(Vec<IpAddr>, SystemTime)> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|err| anyhow::anyhow!("{err}"))?;
    let mut ips = Vec::new();
    if let Ok(Some(names)) = cert.subject_alternative_name() {
        for name in &names.value.general_names {
            if let GeneralName::IPAddress(bytes) = name {
                match bytes.len() {
                    4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap_or_default())),
                    16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap_or_default())),
                    _ => {}
                }
            }
        }
    }
    let not_after = UNIX_EPOCH + Duration::from_secs(cert.validity().not_after.timestamp().max(0) as u64);
    Ok((ips, not_after))
}

/// The lines beside a `--lan` link: the fingerprint, what the phone will show and why, and what
/// accepting it means.
pub fn note(relay: &RelayUrl, fingerprint: &str) -> String {
    let host =
        url::Url::parse(relay.as_str()).ok().and_then(|url| url.host_str().map(str::to_owned)).unwrap_or_default();
    format!(
        "Relay: {relay}, in this agent, on {host} (this network only), over HTTPS with a certificate voxa \
         made for it. Its SHA-256 fingerprint:\n\
         \x20 {fingerprint}\n\
         The phone warns once that the connection is not private: no one the phone trusts signed this \
         certificate (no one can, for an address on a private network). The page needs HTTPS all the same: \
         the sealed session's WebCrypto and the service worker work only on a secure page. Before you accept, \
         compare the fingerprint in the browser's certificate details with the one above; the page shows it \
         too, under Status → Certificate.\n\
         Accepting trusts whoever answers at {host} on this network: on a network you do not trust, another \
         machine could answer first and serve a different page. Use --lan on a network you trust.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_of_a_private_network_are_taken() {
        for ok in [
            "127.0.0.2",
            "192.168.1.20",
            "10.0.0.7:8443",
            "172.16.4.4",
            "100.101.102.103",
            "169.254.1.1",
            "[fd00::1]:9",
        ] {
            assert!(listen_address(ok).is_ok(), "{ok}");
        }
        for refused in ["8.8.8.8", "0.0.0.0", "[::]:1", "2001:db8::1", "somewhere", "192.168.1.300"] {
            assert!(listen_address(refused).is_err(), "{refused}");
        }
        assert_eq!(listen_address("10.0.0.7:8443").unwrap().port(), 8443);
        assert_eq!(listen_address("10.0.0.7").unwrap().port(), 0);
    }

    #[test]
    fn the_certificate_is_kept_private_reused_for_its_address_and_made_anew_for_another() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        home.ensure().unwrap();
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let first = certificate_for(&home, ip).unwrap();
        assert!(first.made);
        for file in [CERT_FILE, KEY_FILE] {
            let mode = std::fs::metadata(home.path(file)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{file}");
        }
        assert_eq!(first.fingerprint.len(), 32 * 3 - 1);
        assert_eq!(first.fingerprint, crate::net::web::fingerprint_text(&Sha256::digest(&first.der).into()));
        let again = certificate_for(&home, ip).unwrap();
        assert!(!again.made && again.fingerprint == first.fingerprint, "reused across runs");
        let (ips, not_after) = describe(&again.der).unwrap();
        assert_eq!(ips, [ip]);
        assert!(not_after > SystemTime::now() + Duration::from_secs(700 * 24 * 3600));
        let relay = RelayUrl::parse("https://127.0.0.2:8443").unwrap();
        assert_eq!(fingerprint_of(&home, &relay).as_deref(), Some(first.fingerprint.as_str()));
        assert_eq!(fingerprint_of(&home, &RelayUrl::parse("https://127.0.0.3:8443").unwrap()), None);
        assert_eq!(fingerprint_of(&home, &RelayUrl::parse("http://127.0.0.2:8443").unwrap()), None);

        let other = certificate_for(&home, "127.0.0.3".parse().unwrap()).unwrap();
        assert!(other.made && other.fingerprint != first.fingerprint, "another address, another certificate");

        std::fs::set_permissions(home.path(KEY_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(kept(&home).is_err(), "a key others can read is refused");
    }
}
