//! The relay serving requests: refusals before the upgrade, the relay token, TLS, shutdown, the
//! connection limit, shards, and `voxa relay` as a user runs it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::{self, Message};
use voxa::protocol::PeerState;
use voxa::relay::RelayConfig;

use crate::support::harness::{http, parse_response, upgrade_request, TestRelay, STEP as WAIT};
use crate::support::relay::{
    connect_over, expect_close, expect_from, expect_joined, expect_presence, expect_text, new_code, next, pair,
    presence, sample, send, to, try_connect, Client, RelayCommand,
};
use voxa::secret::Secret;

#[tokio::test]
async fn bad_requests_are_refused_before_any_upgrade() {
    let relay = TestRelay::start().await;
    let code = new_code();
    let addr = relay.addr;

    assert_eq!(http(addr, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n").await, (200, "ok".into()));
    assert_eq!(http(addr, &upgrade_request("/nowhere", "")).await.0, 404);
    assert_eq!(http(addr, "POST /healthz HTTP/1.1\r\ncontent-length: 0\r\n\r\n").await.0, 405);
    let bad_codes = [
        String::new(),
        code.to_uppercase(),
        code[1..].to_owned(),
        format!("{code}0"),
        code.replace(|c: char| c.is_ascii_digit(), "z"),
        format!("%20{}", &code[3..]),
    ];
    for bad in &bad_codes {
        for path in ["/agent", "/ws"] {
            let (status, _) = http(addr, &upgrade_request(&format!("{path}?code={bad}"), "")).await;
            assert_eq!(status, 400, "{path} with code {bad:?}");
        }
    }
    assert_eq!(http(addr, &upgrade_request("/agent", "")).await.0, 400);
    // A plain GET of a socket path asks for the upgrade.
    let plain = format!("GET /ws?code={code} HTTP/1.1\r\nHost: relay\r\n\r\n");
    assert_eq!(http(addr, &plain).await.0, 426);
    // Junk instead of HTTP.
    assert_eq!(http(addr, "\x16\x03\x01 not http\r\n\r\n").await.0, 400);

    // And a real client sees the refusal as an HTTP error, not a socket.
    match try_connect(addr, "/agent?code=nothex", None).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 400),
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn relay_token_is_required_from_both_sides_when_set() {
    let token = "relay-token-4f1c9b";
    let relay =
        TestRelay::with_config(RelayConfig { token: Some(Secret::from_string(token.into())), ..Default::default() })
            .await;
    let code = new_code();
    for path in [format!("/agent?code={code}"), format!("/ws?code={code}")] {
        for presented in [None, Some("wrong"), Some("relay-token-4f1c9"), Some("relay-token-4f1c9bX")] {
            match try_connect(relay.addr, &path, presented).await {
                Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401, "{path} {presented:?}"),
                other => panic!("expected 401 for {presented:?}, got {other:?}"),
            }
        }
    }
    let (status, body) = http(relay.addr, &upgrade_request(&format!("/ws?code={code}"), "")).await;
    assert_eq!(status, 401);
    assert!(!body.contains(token));

    let mut laptop = try_connect(relay.addr, &format!("/agent?code={code}"), Some(token)).await.unwrap();
    let mut handset = try_connect(relay.addr, &format!("/ws?code={code}"), Some(token)).await.unwrap();
    expect_presence(&mut handset, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    send(&mut handset, Message::text("authorised")).await;
    expect_from(&mut laptop, peer, Message::text("authorised")).await;
    // The health check stays open for load balancers.
    assert_eq!(http(relay.addr, "GET /healthz HTTP/1.1\r\n\r\n").await.0, 200);
}

/// A self-signed certificate for localhost, written as PEM files.
pub(crate) struct TestCert {
    _dir: tempfile::TempDir,
    cert_path: std::path::PathBuf,
    key_path: std::path::PathBuf,
    der: CertificateDer<'static>,
}

fn test_cert() -> TestCert {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("relay.crt");
    let key_path = dir.path().join("relay.key");
    std::fs::write(&cert_path, certified.cert.pem()).unwrap();
    std::fs::write(&key_path, certified.signing_key.serialize_pem()).unwrap();
    TestCert { _dir: dir, cert_path, key_path, der: certified.cert.der().clone() }
}

fn tls_connector(trusted: Option<&CertificateDer<'static>>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(cert) = trusted {
        roots.add(cert.clone()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn connect_tls(
    addr: SocketAddr,
    connector: &tokio_rustls::TlsConnector,
    path: &str,
) -> anyhow::Result<Client<tokio_rustls::client::TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await?;
    let tls = timeout(WAIT, connector.connect(ServerName::try_from("localhost")?, tcp)).await??;
    Ok(connect_over(tls, &format!("wss://localhost:{}{path}", addr.port()), None).await?)
}

#[tokio::test]
async fn tls_relay_pairs_trusting_clients_and_refuses_the_rest() {
    let cert = test_cert();
    let tls = voxa::relay::load_tls(&cert.cert_path, &cert.key_path).unwrap();
    let relay = TestRelay::with_config(RelayConfig { tls: Some(tls), ..Default::default() }).await;
    let code = new_code();
    let trusting = tls_connector(Some(&cert.der));

    let mut laptop = connect_tls(relay.addr, &trusting, &format!("/agent?code={code}")).await.unwrap();
    let mut handset = connect_tls(relay.addr, &trusting, &format!("/ws?code={code}")).await.unwrap();
    expect_presence(&mut handset, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    send(&mut handset, Message::text("over wss")).await;
    expect_from(&mut laptop, peer, Message::text("over wss")).await;
    send(&mut laptop, to(peer, Message::binary(vec![7u8; 100_000]))).await;
    assert_eq!(next(&mut handset).await, Message::binary(vec![7u8; 100_000]));

    let untrusting = tls_connector(None);
    let refused = connect_tls(relay.addr, &untrusting, &format!("/ws?code={code}")).await.unwrap_err();
    assert!(format!("{refused:#}").contains("certificate"), "{refused:#}");
    // Plain WebSocket on the TLS port gets nowhere either.
    assert!(try_connect(relay.addr, &format!("/ws?code={code}"), None).await.is_err());
    // The pair is undisturbed by both attempts.
    send(&mut laptop, to(peer, Message::text("still secure"))).await;
    expect_text(&mut handset, "still secure").await;
    relay.shut_down(WAIT).await;
}

#[tokio::test]
async fn shutdown_closes_every_socket_and_run_returns() {
    let relay = TestRelay::start().await;
    let addr = relay.addr;
    let (mut laptop, mut handset, _, _) = pair(&relay).await;
    // A connection that never sends its request head must not hold shutdown up either.
    let _idle = TcpStream::connect(addr).await.unwrap();
    let closes = tokio::spawn(async move {
        let (laptop_close, handset_close) = tokio::join!(expect_close(&mut laptop), expect_close(&mut handset));
        (laptop_close.0, handset_close.0)
    });
    let started = Instant::now();
    relay.shut_down(Duration::from_secs(3)).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(timeout(WAIT, closes).await.unwrap().unwrap(), (1001, 1001));
    assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed");
}

#[tokio::test]
async fn a_full_relay_refuses_new_connections() {
    let relay = TestRelay::with_config(RelayConfig { max_connections: 2, ..Default::default() }).await;
    let (mut laptop, mut handset, _, peer) = pair(&relay).await;
    let mut extra = TcpStream::connect(relay.addr).await.unwrap();
    let mut response = Vec::new();
    timeout(WAIT, extra.read_to_end(&mut response)).await.unwrap().unwrap();
    assert_eq!(parse_response(&response).0, 503);
    // The pair keeps working.
    send(&mut laptop, to(peer, Message::text("unaffected"))).await;
    expect_text(&mut handset, "unaffected").await;
    // Once a socket leaves, its place is free again.
    drop(laptop);
    expect_presence(&mut handset, PeerState::Left).await;
    let started = Instant::now();
    loop {
        // A refused connection may be reset before its 503 is read: that counts as "not yet".
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").await.unwrap();
        let mut response = Vec::new();
        if let Ok(Ok(_)) = timeout(WAIT, tcp.read_to_end(&mut response)).await {
            if parse_response(&response).0 == 200 {
                break;
            }
        }
        assert!(started.elapsed() < WAIT, "the relay never freed the connection");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_sharded_relay_pairs_sockets_whichever_shard_accepted_them_and_stops() {
    const PAIRS: usize = 40;
    let first = voxa::relay::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = first.local_addr().unwrap();
    let listeners = vec![first, voxa::relay::bind_shared(addr).unwrap(), voxa::relay::bind_shared(addr).unwrap()];
    let stop = tokio_util::sync::CancellationToken::new();
    let config = RelayConfig { max_connections_per_ip: 0, ..Default::default() };
    let metrics = Arc::clone(&config.metrics);
    let relay = tokio::task::spawn_blocking({
        let stop = stop.clone();
        move || voxa::relay::run_sharded(listeners, config, stop)
    });
    // The kernel spreads these connections over the three listeners; each pair still meets.
    let mut pairs = Vec::new();
    for n in 0..PAIRS {
        let code = new_code();
        let mut laptop = try_connect(addr, &format!("/agent?code={code}"), None).await.unwrap();
        let mut handset = try_connect(addr, &format!("/ws?code={code}"), None).await.unwrap();
        expect_presence(&mut handset, PeerState::Joined).await;
        let peer = expect_joined(&mut laptop).await;
        send(&mut laptop, to(peer, Message::text(format!("to phone {n}")))).await;
        send(&mut handset, Message::binary(vec![n as u8; 64])).await;
        pairs.push((laptop, handset, peer));
    }
    for (n, (laptop, handset, peer)) in pairs.iter_mut().enumerate() {
        expect_text(handset, &format!("to phone {n}")).await;
        expect_from(laptop, *peer, Message::binary(vec![n as u8; 64])).await;
    }
    assert_eq!(sample(&metrics.encode(), "voxa_relay_pairs"), PAIRS as f64);
    assert_eq!(http(addr, "GET /healthz HTTP/1.1\r\n\r\n").await.0, 200);

    stop.cancel();
    // Every socket is closed 1001 (and answers, so the relay need not wait for it).
    let closes = futures_util::future::join_all(
        pairs
            .iter_mut()
            .flat_map(|(laptop, handset, _)| [laptop, handset])
            .map(|socket| async move { expect_close(socket).await.0 }),
    );
    assert!(closes.await.iter().all(|code| *code == 1001));
    drop(pairs);
    timeout(WAIT, relay).await.expect("the shards stop").unwrap().unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "every listener is closed");
}
#[tokio::test]
async fn relay_command_announces_its_address_relays_and_stops_on_sigterm() {
    let token = "cmd-relay-token-7d2e";
    let relay = RelayCommand::spawn(&[], &[("VOXA_RELAY_TOKEN", token), ("RUST_LOG", "trace")]).await;
    let code = new_code();
    let mut laptop = try_connect(relay.addr, &format!("/agent?code={code}"), Some(token)).await.unwrap();
    let mut handset = try_connect(relay.addr, &format!("/ws?code={code}"), Some(token)).await.unwrap();
    expect_presence(&mut handset, PeerState::Joined).await;
    let peer = expect_joined(&mut laptop).await;
    send(&mut laptop, to(peer, Message::text("through the binary"))).await;
    expect_text(&mut handset, "through the binary").await;
    // Refusals and a forged notice also pass through the log paths.
    let refused = try_connect(relay.addr, &format!("/ws?code={code}"), Some("not-the-token")).await;
    assert!(refused.is_err());
    send(&mut handset, Message::text(presence(PeerState::Left))).await;
    assert_eq!(http(relay.addr, &upgrade_request(&format!("/ws?code={}", code.to_uppercase()), "")).await.0, 401);

    let closes = tokio::spawn(async move {
        let (a, b) = tokio::join!(expect_close(&mut laptop), expect_close(&mut handset));
        (a.0, b.0)
    });
    let (status, stdout, stderr) = relay.terminate().await;
    assert!(status.success(), "{status:?} {stderr}");
    assert!(stdout.contains(r#""event":"relay_stopped""#), "{stdout}");
    assert_eq!(timeout(WAIT, closes).await.unwrap().unwrap(), (1001, 1001));
    // Even at trace level the log names connections by number and role only.
    let stderr = strip_ansi(&stderr);
    assert!(stderr.contains("conn=1 role=\"agent\""), "trace logging was on: {stderr}");
    for secret in [code.as_str(), &code.to_uppercase(), token, "not-the-token", "code="] {
        assert!(!stderr.contains(secret), "the log shows {secret:?}:\n{stderr}");
    }
}

/// The log without terminal colour sequences.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn relay_command_serves_wss_from_pem_files_and_refuses_bad_ones() {
    let cert = test_cert();
    let cert_arg = cert.cert_path.to_str().unwrap();
    let key_arg = cert.key_path.to_str().unwrap();
    let relay = RelayCommand::spawn(&["--tls-cert", cert_arg, "--tls-key", key_arg], &[]).await;
    let code = new_code();
    let mut laptop =
        connect_tls(relay.addr, &tls_connector(Some(&cert.der)), &format!("/agent?code={code}")).await.unwrap();
    let mut handset =
        connect_tls(relay.addr, &tls_connector(Some(&cert.der)), &format!("/ws?code={code}")).await.unwrap();
    expect_presence(&mut handset, PeerState::Joined).await;
    send(&mut handset, Message::text("wss from the command line")).await;
    let peer = expect_joined(&mut laptop).await;
    expect_from(&mut laptop, peer, Message::text("wss from the command line")).await;
    drop((laptop, handset));
    let (status, _, _) = relay.terminate().await;
    assert!(status.success());

    // A missing or mismatched key is a configuration error (exit 2) that names the file.
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("missing.key");
    let output = crate::support::voxa(
        home.path(),
        &["relay", "--listen", "127.0.0.1:0", "--tls-cert", cert_arg, "--tls-key", missing.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing.key"), "{stderr}");
}
