//! `voxa relay --domain` against a real ACME server: Debian's `pebble`, started here with a
//! certificate made here for its own HTTPS, validating TLS-ALPN-01 challenges on the relay's
//! loopback port, and resolving the relay's name through a small DNS responder in this file.
//! Issuance, a connection that validates against Pebble's root, renewal while a socket stays open,
//! and a restart that serves the stored certificate with the CA gone.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::support::harness::STEP;
use crate::support::{installed, voxa_cmd, RunningVoxa};

const DOMAIN: &str = "relay.voxa.test";
/// Pebble's certificates live this long, so a renewal (after two thirds of it) comes in the test.
const VALIDITY_SECS: u64 = 30;
const CODE: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_gets_renews_and_reuses_its_certificate_from_pebble() {
    if !installed("pebble", "pebble") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    let dns = dns_responder().await;
    let relay_port = free_port();
    let mut pebble = Pebble::start(work.path(), dns, relay_port);

    // Issuance: the relay orders at start, Pebble validates through the relay's own listener.
    let mut relay = start_relay(&home, relay_port, &pebble);
    let listening = relay.wait_event("relay_listening");
    assert_eq!(listening["url"], format!("wss://{DOMAIN}:{relay_port}"));
    let first = next_certificate(&mut relay, STEP);
    assert_eq!(first["issued"], true, "{first}");
    let root = pebble.root().await;
    let served = served_serial(relay_port, &root).await;
    assert_eq!(served, first["serial"].as_str().unwrap());
    assert_eq!(health(relay_port, &root).await, "ok");

    // Kept private in the home: the account key, the certificate and its key.
    let acme_dir = std::fs::read_dir(home.join("acme")).unwrap().next().unwrap().unwrap().path();
    assert_eq!(mode(&acme_dir), 0o700);
    for name in ["account.json", &format!("{DOMAIN}.key"), &format!("{DOMAIN}.crt")] {
        assert_eq!(mode(&acme_dir.join(name)), 0o600, "{name}");
    }

    // Renewal: a socket opened on the first certificate stays up across the swap, and a phone
    // that connects afterwards gets the new certificate and reaches it.
    let mut agent = websocket(relay_port, &root, &format!("/agent?code={CODE}")).await;
    let renewed = next_certificate(&mut relay, Duration::from_secs(VALIDITY_SECS * 2));
    assert_eq!(renewed["issued"], true, "{renewed}");
    assert_ne!(renewed["serial"], first["serial"]);
    let renewed_serial = renewed["serial"].as_str().unwrap().to_owned();
    assert_eq!(served_serial(relay_port, &root).await, renewed_serial);
    let mut phone = websocket(relay_port, &root, &format!("/ws?code={CODE}")).await;
    phone.send(Message::text(r#"{"type":"ping","id":"across-renewal"}"#)).await.unwrap();
    wait_for_text(&mut agent, "across-renewal").await;

    // Restart with the CA gone: the stored certificate is served at once.
    drop((agent, phone));
    let (stdout, stderr) = relay.stop();
    let key_pem = std::fs::read_to_string(acme_dir.join(format!("{DOMAIN}.key"))).unwrap();
    let key_line = key_pem.lines().nth(1).unwrap();
    assert!(!stdout.contains(key_line) && !stderr.contains(key_line), "the key reached the output");
    pebble.stop();
    let mut relay = start_relay(&home, relay_port, &pebble);
    let reused = relay.wait_event("certificate_ready");
    assert_eq!(reused["issued"], false, "{reused}");
    // Several renewals may have happened by now; the restart serves the last one stored.
    let stored = std::fs::read(acme_dir.join(format!("{DOMAIN}.crt"))).unwrap();
    let stored_serial = serial_of(&CertificateDer::pem_slice_iter(&stored).next().unwrap().unwrap());
    assert_eq!(reused["serial"], stored_serial.as_str());
    assert_eq!(served_serial(relay_port, &root).await, stored_serial);
    relay.stop();
}

/// The next `certificate_ready` event within `limit`; a failed order fails the test with its error.
fn next_certificate(relay: &mut RunningVoxa, limit: Duration) -> serde_json::Value {
    let event = relay.wait_event_within(&["certificate_ready", "certificate_failed"], limit);
    if event["event"] != "certificate_ready" {
        relay.signal(rustix::process::Signal::TERM);
        panic!("the relay could not get a certificate: {event}\n{}", crate::support::tail(&relay.drain().1, 3000));
    }
    event
}

fn start_relay(home: &Path, port: u16, pebble: &Pebble) -> RunningVoxa {
    let mut cmd = voxa_cmd(home);
    cmd.env("RUST_LOG", "voxa=debug").args(["relay", "--json", "--listen", &format!("127.0.0.1:{port}")]);
    cmd.args(["--domain", DOMAIN, "--acme-directory", &pebble.directory]);
    cmd.arg("--acme-ca-file").arg(&pebble.ca_file);
    RunningVoxa::spawn(cmd)
}

/// A Pebble server on loopback ports, killed on drop.
struct Pebble {
    child: Option<Child>,
    directory: String,
    ca_file: std::path::PathBuf,
    management: SocketAddr,
}

impl Pebble {
    /// Starts Pebble validating on `relay_port` and resolving names through `dns`.
    fn start(dir: &Path, dns: SocketAddr, relay_port: u16) -> Pebble {
        let (listen, management) = (loopback(free_port()), loopback(free_port()));
        let mut pebble = Pebble {
            child: None,
            directory: format!("https://{listen}/dir"),
            ca_file: dir.join("pebble.crt"),
            management,
        };
        let key = dir.join("pebble.key");
        std::fs::write(&key, own_certificate(&pebble.ca_file)).unwrap();
        let config = serde_json::json!({"pebble": {
            "listenAddress": listen.to_string(),
            "managementListenAddress": management.to_string(),
            "certificate": pebble.ca_file,
            "privateKey": key,
            "httpPort": free_port(),
            "tlsPort": relay_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "certificateValidityPeriod": VALIDITY_SECS,
        }});
        let config_file = dir.join("pebble.json");
        std::fs::write(&config_file, config.to_string()).unwrap();
        let child = Command::new("pebble")
            .arg("-config")
            .arg(&config_file)
            .args(["-dnsserver", &dns.to_string()])
            // No random pauses before validating; no rejected nonces; every order validated anew.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        pebble.child = Some(child);
        let deadline = Instant::now() + STEP;
        while std::net::TcpStream::connect(listen).is_err() || std::net::TcpStream::connect(management).is_err() {
            assert!(Instant::now() < deadline, "pebble did not start listening");
            std::thread::sleep(Duration::from_millis(50));
        }
        pebble
    }

    /// Stops the server; its directory URL now refuses connections.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The root of the certificates Pebble issues, from its management interface.
    async fn root(&self) -> CertificateDer<'static> {
        let own = CertificateDer::from_pem_file(&self.ca_file).unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = tls_connect(self.management, name, &own).await;
        tls.write_all(b"GET /roots/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut response = Vec::new();
        tokio::time::timeout(STEP, tls.read_to_end(&mut response)).await.unwrap().unwrap();
        let text = String::from_utf8(response).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        CertificateDer::from_pem_slice(text.as_bytes()).unwrap()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes a self-signed certificate for 127.0.0.1 to `cert` (Pebble's HTTPS and the root the
/// relay is told to trust with `--acme-ca-file`); returns its key's PEM.
fn own_certificate(cert: &Path) -> String {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    std::fs::write(cert, certified.cert.pem()).unwrap();
    certified.signing_key.serialize_pem()
}

/// A DNS server on UDP loopback answering every A question with 127.0.0.1 and every other
/// question with no records, so Pebble finds the relay at the name it validates.
async fn dns_responder() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((len, from)) = socket.recv_from(&mut buf).await {
            if let Some(answer) = dns_answer(&buf[..len]) {
                let _ = socket.send_to(&answer, from).await;
            }
        }
    });
    addr
}

/// The answer to one DNS query (RFC 1035 §4.1): its header and question echoed, plus an A record
/// for a question of type A.
fn dns_answer(query: &[u8]) -> Option<Vec<u8>> {
    let header = query.get(..12)?;
    let mut end = 12;
    while *query.get(end)? != 0 {
        end += usize::from(query[end]) + 1;
    }
    let question = query.get(12..end + 5)?;
    let qtype = u16::from_be_bytes([query[end + 1], query[end + 2]]);
    let answers: u16 = (qtype == 1).into();
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&header[..2]);
    out.extend_from_slice(&[0x81 | (header[2] & 0x78), 0x80]);
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&answers.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(question);
    if answers == 1 {
        // The name by pointer to the question, type A, class IN, TTL 60, 4 bytes: 127.0.0.1.
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
    }
    Some(out)
}

#[test]
fn dns_answers_a_questions_only() {
    let mut query = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    query.extend_from_slice(b"\x05relay\x04voxa\x04test\x00\x00\x01\x00\x01");
    let answer = dns_answer(&query).unwrap();
    assert_eq!(&answer[..4], &[0xab, 0xcd, 0x81, 0x80]);
    assert_eq!(&answer[6..8], &[0, 1]);
    assert_eq!(&answer[answer.len() - 4..], &[127, 0, 0, 1]);
    let aaaa = [&query[..query.len() - 3], b"\x1c\x00\x01"].concat();
    let answer = dns_answer(&aaaa).unwrap();
    assert_eq!(&answer[6..8], &[0, 0]);
    assert_eq!(answer.len(), aaaa.len());
    assert!(dns_answer(&query[..14]).is_none());
}

/// A TLS connection to the relay as `DOMAIN`, trusting only `root`.
async fn relay_tls(port: u16, root: &CertificateDer<'static>) -> TlsStream<TcpStream> {
    tls_connect(loopback(port), ServerName::try_from(DOMAIN).unwrap(), root).await
}

async fn tls_connect(
    addr: SocketAddr,
    name: ServerName<'static>,
    root: &CertificateDer<'static>,
) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tokio::time::timeout(STEP, connector.connect(name, tcp)).await.unwrap().unwrap()
}

/// The serial of the certificate the relay serves now, over a connection that validated it.
async fn served_serial(port: u16, root: &CertificateDer<'static>) -> String {
    let tls = relay_tls(port, root).await;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    serial_of(&leaf)
}

fn serial_of(cert: &CertificateDer<'_>) -> String {
    x509_parser::parse_x509_certificate(cert).unwrap().1.raw_serial_as_string()
}

async fn health(port: u16, root: &CertificateDer<'static>) -> String {
    let mut tls = relay_tls(port, root).await;
    tls.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {DOMAIN}\r\n\r\n").as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(STEP, tls.read_to_end(&mut response)).await.unwrap().unwrap();
    let text = String::from_utf8(response).unwrap();
    text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned()
}

/// A WebSocket to the relay at `path`; an agent's (`/agent`) offers the relay framing.
async fn websocket(port: u16, root: &CertificateDer<'static>, path: &str) -> WebSocketStream<TlsStream<TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let tls = relay_tls(port, root).await;
    let mut request = format!("wss://{DOMAIN}:{port}{path}").into_client_request().unwrap();
    if path.starts_with("/agent") {
        request.headers_mut().insert("sec-websocket-protocol", "voxa-relay.2".parse().unwrap());
    }
    let (socket, _) = tokio::time::timeout(STEP, tokio_tungstenite::client_async(request, tls)).await.unwrap().unwrap();
    socket
}

/// Reads frames until one carrying `needle` arrives (text, or binary in the agent's framing).
async fn wait_for_text(socket: &mut WebSocketStream<TlsStream<TcpStream>>, needle: &str) {
    tokio::time::timeout(STEP, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) if text.contains(needle) => return,
                Some(Ok(Message::Binary(bytes))) if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) => {
                    return
                }
                Some(Ok(_)) => continue,
                other => panic!("the socket ended before {needle:?} arrived: {other:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{needle:?} did not arrive"));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_vps_unit_passes_systemds_own_checks_and_binds_443_with_one_capability() {
    const UNIT: &str = include_str!("../../deploy/systemd/voxa-relay-domain.service");
    if !installed("systemd-analyze", "systemd") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // systemd checks that ExecStart's program exists: point it at the built binary.
    let unit = UNIT.replace("/usr/local/bin/voxa", env!("CARGO_BIN_EXE_voxa"));
    assert_ne!(unit, UNIT, "the unit no longer runs /usr/local/bin/voxa");
    let path = dir.path().join("voxa-relay-domain.service");
    std::fs::write(&path, unit).unwrap();
    let verify = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && complaints.trim().is_empty(), "systemd-analyze verify:\n{complaints}");
    for directive in [
        "--listen [::]:443 --domain ${VOXA_DOMAIN}",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "StateDirectory=voxa-relay-domain",
        "Environment=VOXA_HOME=%S/voxa-relay-domain",
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
    ] {
        assert!(UNIT.contains(directive), "the unit lacks {directive}");
    }
    let script = include_str!("../../deploy/vps.sh");
    assert!(script.contains("voxa-relay-domain.service") && script.contains("VOXA_DOMAIN="));
}
