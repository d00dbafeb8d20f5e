//! The relay over HTTP/2 (docs/PROTOCOL.md, "Web client"): a TLS client that offers `h2` gets
//! it, and every file of the first screen comes on that one connection at once, each as on
//! HTTP/1.1 (the same bytes, encodings, ETags and refusals); push receipts reach their agent;
//! sockets stay on HTTP/1.1.

use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ::bytes::Bytes;
use h2::client::SendRequest;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use crate::support::harness::*;

/// One answer: status, headers (lowercase names) and the whole body.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// An HTTP/2 connection to the relay, as a browser opens one: ALPN `h2` first.
async fn connect(relay: &TestRelay, cert: &std::path::Path) -> SendRequest<Bytes> {
    let options = voxa::net::dial::DialOptions::default().trust_pem_file(cert).unwrap();
    let mut config = (*voxa::net::dial::tls_client_config(&options.extra_roots).unwrap()).clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(relay.addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "a browser's offer gets HTTP/2");
    let (client, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Sends a request (with `body`, if any) and returns the future of its answer.
async fn send(
    client: &mut SendRequest<Bytes>,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Option<&'static [u8]>,
) -> h2::client::ResponseFuture {
    let mut request = http::Request::builder().method(method).uri(format!("https://localhost{target}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut ready = client.clone().ready().await.unwrap();
    let (answer, mut stream) = ready.send_request(request.body(()).unwrap(), body.is_none()).unwrap();
    if let Some(body) = body {
        stream.send_data(Bytes::from_static(body), true).unwrap();
    }
    answer
}

async fn read(answer: h2::client::ResponseFuture) -> Answer {
    let response = tokio::time::timeout(STEP, answer).await.expect("an answer in time").unwrap();
    let (parts, mut stream) = response.into_parts();
    let mut body = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk.unwrap();
        let _ = stream.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    Answer { status: parts.status.as_u16(), headers: parts.headers, body }
}

async fn get(client: &mut SendRequest<Bytes>, target: &str, headers: &[(&str, &str)]) -> Answer {
    read(send(client, "GET", target, headers, None).await).await
}

#[tokio::test]
async fn over_tls_one_http2_connection_carries_the_whole_first_screen_at_once_and_sockets_stay_on_http_1_1() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, cert) = tls_relay(dir.path()).await;
    let url = voxa::config::RelayUrl::parse(&format!("https://localhost:{}", relay.addr.port())).unwrap();
    let agent = TestAgent::start_with(Some(url), |options| {
        options.dial = voxa::net::dial::DialOptions::default().trust_pem_file(&cert).unwrap();
    })
    .await;
    eventually("the agent connected", || agent.agent.ctx.status.relay_connected.load(Ordering::Relaxed)).await;
    let mut client = connect(&relay, &cert).await;

    // The page, then every module it preloads, all asked for before any answer is read.
    let page = get(&mut client, "/?code=0123", &[("accept-encoding", "identity")]).await;
    assert_eq!((page.status, page.header("content-type")), (200, Some("text/html; charset=utf-8")));
    assert!(page.header("content-security-policy").is_some_and(|csp| csp.contains("frame-ancestors 'none'")));
    let html = String::from_utf8(page.body).unwrap();
    let preloads: Vec<&str> =
        html.split("rel=\"modulepreload\" href=\"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    assert!(preloads.len() > 20, "the first screen's modules: {preloads:?}");
    let mut pending = Vec::new();
    for path in &preloads {
        pending.push(send(&mut client, "GET", path, &[("accept-encoding", "gzip, br")], None).await);
    }
    for (path, answer) in preloads.iter().zip(pending) {
        let answer = read(answer).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.header("content-encoding"), Some("br"), "{path}");
        assert_eq!(answer.header("cache-control"), Some("public, max-age=31536000, immutable"), "{path}");
        assert_eq!(answer.header("content-length"), Some(answer.body.len().to_string().as_str()), "{path}");
        let mut unpacked = Vec::new();
        brotli::Decompressor::new(&answer.body[..], 4096).read_to_end(&mut unpacked).unwrap();
        let served = voxa::net::web::assets().find(|(name, _, _)| name == path).expect("an embedded file").2;
        assert_eq!(unpacked, served, "{path}");
    }

    // Revalidation, HEAD and /config answer as on HTTP/1.1.
    let css = get(&mut client, "/app.css", &[]).await;
    let etag = css.header("etag").unwrap().to_owned();
    let again = get(&mut client, "/app.css", &[("if-none-match", &etag)]).await;
    assert_eq!((again.status, again.body.len()), (304, 0));
    let head = read(send(&mut client, "HEAD", "/app.css", &[], None).await).await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.header("content-length"), Some(css.body.len().to_string().as_str()));
    let config = get(&mut client, "/config", &[]).await;
    let config: serde_json::Value = serde_json::from_slice(&config.body).unwrap();
    assert_eq!(config["version"], voxa::VERSION);
    assert_eq!(get(&mut client, "/healthz", &[]).await.body, b"ok");

    // Refusals keep their status; a socket's request without its upgrade is refused, not served.
    assert_eq!(get(&mut client, "/nothing-here", &[]).await.status, 404);
    let post = read(send(&mut client, "POST", "/app.css", &[("content-length", "0")], None).await).await;
    assert_eq!(post.status, 405);
    let socket = get(&mut client, &format!("/ws?code={}", agent.code()), &[]).await;
    assert_eq!(socket.status, 426, "{}", String::from_utf8_lossy(&socket.body));
    assert!(socket.header("connection").is_none() && socket.header("upgrade").is_none());

    // A push receipt reaches the agent of its code; one without a length or too long does not.
    let ack = format!("/ack?code={}", agent.code());
    let passed = read(send(&mut client, "POST", &ack, &[("content-length", "5")], Some(b"hello")).await).await;
    assert_eq!((passed.status, passed.body.as_slice()), (202, &b"passed on"[..]));
    let unsized_receipt = read(send(&mut client, "POST", &ack, &[], Some(b"hello")).await).await;
    assert_eq!(unsized_receipt.status, 411);
    let long = read(send(&mut client, "POST", &ack, &[("content-length", "300")], Some(&[0; 300])).await).await;
    assert_eq!(long.status, 413);
    let lying = send(&mut client, "POST", &ack, &[("content-length", "2")], Some(b"hello")).await;
    let lying = tokio::time::timeout(STEP, lying).await.expect("an answer or a reset in time");
    assert!(lying.is_err() || lying.is_ok_and(|answer| answer.status() != 202), "more than its length is refused");

    // The phone's socket beside it: HTTP/1.1, as every browser opens a WebSocket here.
    let phone_options = voxa::net::dial::DialOptions::default().trust_pem_file(&cert).unwrap();
    let phone_url = format!("wss://localhost:{}/ws?code={}", relay.addr.port(), agent.code());
    let mut phone = voxa::net::dial::connect(&phone_url, &phone_options).await.unwrap();
    say_hello(&mut phone, agent.token()).await;
}

/// One HTTP/2 connection carries many page loads (each with its service worker's copy of every
/// file), and when it reaches its request limit in the middle of a burst it answers every
/// request it took; one it did not take is refused as not processed (`REFUSED_STREAM`), which a
/// browser sends again on a new connection. None fails in between.
#[tokio::test]
async fn a_connection_at_its_request_limit_answers_what_it_took_and_refuses_the_rest_as_unprocessed() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, cert) = tls_relay(dir.path()).await;
    let client = connect(&relay, &cert).await;
    let (mut answered, mut refused, mut failed) = (0, 0, Vec::new());
    // Bursts of 40 requests asked for at once, each read once all are asked, until the relay
    // has ended the connection.
    for _ in 0..(voxa::net::web::HTTP2_REQUESTS / 40 + 2) {
        let mut pending = Vec::new();
        for _ in 0..40 {
            let Ok(mut ready) = client.clone().ready().await else { break };
            let request = http::Request::get("https://localhost/js/dom.js").body(()).unwrap();
            match ready.send_request(request, true) {
                Ok((answer, _)) => pending.push(answer),
                Err(_) => break,
            }
        }
        if pending.is_empty() {
            break;
        }
        for answer in pending {
            match tokio::time::timeout(STEP, answer).await.expect("an answer in time") {
                Ok(response) if response.status() == 200 => answered += 1,
                Err(err) if err.reason() == Some(h2::Reason::REFUSED_STREAM) => refused += 1,
                Ok(response) => failed.push(format!("status {}", response.status())),
                Err(err) => failed.push(err.to_string()),
            }
        }
    }
    assert!(failed.is_empty(), "{answered} answered, {refused} refused, failed: {failed:?}");
    assert!(answered >= voxa::net::web::HTTP2_REQUESTS, "{answered} answered, {refused} refused");
}
