//! `voxa run --lan` (docs/GUIDE.md, "A phone on the same Wi-Fi"), on loopback addresses only —
//! 127.0.0.2 stands in for this machine's address on the network, and no test ever listens on a
//! real one: the relay inside the agent serves HTTPS with a certificate made for that address
//! (kept 0600 and reused across runs), the fingerprint printed beside the link is the one a TLS
//! client pinning it meets, and through that client the page loads, `/config` names the same
//! fingerprint and a sealed session runs a tool. `status` and `pair` speak of that relay.

use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::harness::*;
use crate::support::run::fresh_home;
use crate::support::{voxa, voxa_cmd, RunningVoxa};

/// The loopback address that plays this machine's address on the network.
const LAN: &str = "127.0.0.2";

/// `voxa run --json --lan 127.0.0.2` in `home`, waited on until its relay link is up; the
/// `embedded_relay` and `pairing` events.
fn start_lan(home: &std::path::Path, workspace: &std::path::Path) -> (RunningVoxa, Value, Value) {
    let mut cmd = voxa_cmd(home);
    cmd.args(["run", "--json", "--lan", LAN, "--workspace"]).arg(workspace);
    let mut run = RunningVoxa::start(cmd);
    let relay = run.wait_event("embedded_relay");
    let pairing = run.wait_event("pairing");
    run.wait_event("relay_connected");
    (run, relay, pairing)
}

/// Accepts exactly the server certificate whose SHA-256 is `pin` (signatures checked as usual):
/// what a phone's user does who compared the fingerprint and accepted it.
#[derive(Debug)]
struct Pinned {
    pin: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let seen: Vec<String> = Sha256::digest(end_entity.as_ref()).iter().map(|b| format!("{b:02X}")).collect();
        if seen.join(":") == self.pin {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("not the pinned certificate".into()))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connection to `addr` that trusts only the certificate `pin` names.
async fn pinned_tls(addr: &str, pin: &str) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { pin: pin.to_owned(), provider }))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from(LAN.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await
}

/// `GET path` over a pinned connection: the status line and headers, and the body.
async fn get(addr: &str, pin: &str, path: &str) -> (String, String) {
    let mut tls = pinned_tls(addr, pin).await.expect("the pinned certificate is the one served");
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (head.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_relay_serves_https_with_the_printed_fingerprint_to_a_client_that_pins_it() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let (run, relay, pairing) = start_lan(&home, workspace.path());
    let url = relay["url"].as_str().unwrap().to_owned();
    let addr = relay["listen"].as_str().unwrap().to_owned();
    let pin = relay["certificate_sha256"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("https://{LAN}:")) && addr.starts_with(LAN), "{relay}");
    assert_eq!(relay["certificate_new"], true, "{relay}");
    assert_eq!(pin.len(), 95, "{pin}");
    assert_eq!(pairing["reaches"], "this-network", "{pairing}");
    assert_eq!(pairing["relay_certificate_sha256"], pin.as_str(), "{pairing}");
    let link = pairing["url"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&format!("{url}/#code=")), "{link}");
    for file in ["lan-cert.pem", "lan-key.pem"] {
        let mode = std::fs::metadata(home.join(file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }

    // The page and its `/config` through a client that trusts that fingerprint and nothing else.
    let (head, page) = get(&addr, &pin, "/").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-security-policy:"), "{head}");
    assert!(page.contains("<title>voxa</title>"), "{page}");
    let (_, config) = get(&addr, &pin, "/config").await;
    let config: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["certificate_sha256"], pin.as_str(), "the page learns the same fingerprint: {config}");
    let other = format!("00{}", &pin[2..]);
    assert!(pinned_tls(&addr, &other).await.is_err(), "a client pinning another certificate refuses this one");

    // A sealed session over that connection, as the page opens one: a tool runs.
    let fragment = url::Url::parse(&link).unwrap().fragment().unwrap().to_owned();
    let secrets: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(fragment.as_bytes()).into_owned().collect();
    let tls = pinned_tls(&addr, &pin).await.unwrap();
    let request = format!("wss://{addr}/ws?code={}", secrets["code"]);
    let (socket, _) =
        tokio_tungstenite::client_async(request, Box::new(tls) as Box<dyn voxa::net::dial::Io>).await.unwrap();
    let mut phone = voxa::seal::Socket::plain(socket);
    // The link carries a one-time ticket; a client holding the pairing says the home's token.
    let token = std::fs::read_to_string(home.join(voxa::state::AUTH_TOKEN_FILE)).unwrap();
    say_hello(&mut phone, token.trim()).await;
    assert!(phone.is_sealed());
    std::fs::write(workspace.path().join("note.txt"), "on the same Wi-Fi\n").unwrap();
    send(&mut phone, json!({"type": "tool_call", "id": "l1", "name": "read_file", "args": {"path": "note.txt"}})).await;
    let result = recv_result(&mut phone, "l1").await;
    assert!(result.to_string().contains("on the same Wi-Fi"), "{result}");
    drop(phone);

    // status and pair speak of that relay and its certificate.
    let shown = tokio::task::spawn_blocking({
        let home = home.clone();
        move || (voxa(&home, &["status"]), voxa(&home, &["pair", "--no-qr"]))
    })
    .await
    .unwrap();
    let status = String::from_utf8_lossy(&shown.0.stdout).into_owned();
    assert!(status.contains(&format!("relay:   {url} (in the running agent, for this network (--lan))")), "{status}");
    assert!(status.contains(&format!("certificate: SHA-256 {pin}")), "{status}");
    let paired = String::from_utf8_lossy(&shown.1.stdout).into_owned();
    // The same link, with a ticket of its own (a link's ticket works once).
    let (before_ticket, _) = link.split_once("&ticket=").unwrap();
    assert!(paired.lines().any(|line| line.starts_with(&format!("{before_ticket}&ticket="))), "{paired}");
    assert!(paired.contains(&format!("  {pin}\n")) && paired.contains("a phone on this network"), "{paired}");
    for words in ["warns once", "secure page", "another machine could answer first", "a network you trust"] {
        assert!(paired.contains(words), "{words:?} missing from {paired}");
    }
    run.stop();

    // Another run takes the same certificate (the phone accepted it once) and the same port.
    let (again, relay_again, _) = start_lan(&home, workspace.path());
    assert_eq!(relay_again["certificate_sha256"], pin.as_str(), "{relay_again}");
    assert_eq!(
        (relay_again["certificate_new"].as_bool(), relay_again["url"].as_str()),
        (Some(false), Some(url.as_str()))
    );
    again.stop();
}

#[test]
fn lan_prints_its_fingerprint_beside_the_qr_code_and_is_refused_a_public_address() {
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--lan", LAN, "--workspace"]).arg(workspace.path());
    let run = RunningVoxa::spawn(cmd);
    let deadline = std::time::Instant::now() + STEP;
    while !home.join("agent.json").exists() {
        assert!(std::time::Instant::now() < deadline, "voxa run never started: {:?}", run.drain());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (text, _) = run.stop();
    let hex = |f: &&str| f.len() == 95 && f.chars().all(|c| c.is_ascii_hexdigit() || c == ':');
    let fingerprint = text.lines().find_map(|line| line.strip_prefix("  ").filter(hex));
    let fingerprint = fingerprint.unwrap_or_else(|| panic!("no fingerprint line: {text}"));
    let qr = text.find(['▀', '▄', '█']).unwrap_or_else(|| panic!("no QR code: {text}"));
    assert!(qr < text.find(fingerprint).unwrap(), "the fingerprint is printed with the QR code: {text}");
    assert!(text.contains("Scan the code with the camera of a phone on this network"), "{text}");

    for refused in [&["--lan", "8.8.8.8"][..], &["--lan", "0.0.0.0"], &["--lan", "--embedded-relay"]] {
        let out = voxa_cmd(&home).arg("run").args(refused).arg("--workspace").arg(workspace.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{refused:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let public = voxa_cmd(&home).args(["run", "--lan", "8.8.8.8"]).output().unwrap();
    assert!(String::from_utf8_lossy(&public.stderr).contains("voxa relay --domain"), "{public:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_from_a_lan_relay_goes_online_sealed_and_shows_the_certificate_it_was_served_with() {
    use crate::support::browser::{Browser, Scheme};
    // The browser takes the certificate as a user who accepted the warning once.
    let accept = ["--ignore-certificate-errors".to_owned()];
    let Some(browser) = Browser::start_with_args(Scheme::Light, &accept).await else { return };
    let (_dir, home) = fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    let (run, relay, pairing) = tokio::task::spawn_blocking({
        let (home, workspace) = (home.clone(), workspace.path().to_path_buf());
        move || start_lan(&home, &workspace)
    })
    .await
    .unwrap();
    let pin = relay["certificate_sha256"].as_str().unwrap().to_owned();
    browser.pair(pairing["url"].as_str().unwrap()).await;
    browser.wait_connection("online").await;
    // Over TLS the page and its files come on one HTTP/2 connection, the socket on HTTP/1.1.
    let protocols = browser
        .script(
            "return [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]
               .filter((e) => e.transferSize > 0).map((e) => e.nextHopProtocol);",
            vec![],
        )
        .await;
    let protocols = protocols.as_array().unwrap();
    assert!(protocols.len() > 20 && protocols.iter().all(|protocol| protocol == "h2"), "{protocols:?}");
    browser.press("Status").await;
    let facts = browser.wait_text("#facts", "the certificate", |text| text.contains("Certificate")).await;
    let shown = facts.lines().skip_while(|line| !line.contains("SHA-256")).collect::<String>().replace([' ', '\n'], "");
    assert!(shown.contains(&format!("SHA-256{pin}")), "{facts}");
    if let Some(dir) = std::env::var_os("VOXA_ENGINE_PICTURES") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join("lan-status.png"), browser.screenshot().await).unwrap();
    }
    browser.close().await;
    run.stop();
}
