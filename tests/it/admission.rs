//! Who gets in before any hello: the pairing link keeps its secrets where a server never sees
//! them, and the loopback socket answers only to requests addressed to exactly itself.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::run::fresh_home;
use crate::support::harness::*;
use crate::support::voxa;

/// Every `http(s)://…` link in `text`.
fn links(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("http") {
        let tail = &rest[start..];
        let end = tail.find(|c: char| c.is_whitespace() || c == '"').unwrap_or(tail.len());
        if tail.starts_with("http://") || tail.starts_with("https://") {
            found.push(&tail[..end]);
        }
        rest = &tail[end.max(4)..];
    }
    found
}

/// The request target a browser sends for `link`: path and query, never the fragment.
fn request_target(link: &str) -> String {
    let url = url::Url::parse(link).unwrap();
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_printed_pairing_link_has_a_secret_before_its_fragment() {
    let relay = TestRelay::start().await;
    let (_dir, home) = fresh_home();
    let relay_url = relay.url().to_string();
    let json = voxa(&home, &["pair", "--json", "--relay", &relay_url]);
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
    let paired: Value = serde_json::from_slice(&json.stdout).unwrap();
    let (code, token) = (paired["code"].as_str().unwrap(), paired["token"].as_str().unwrap());
    let human = voxa(&home, &["pair", "--relay", &relay_url]);
    assert!(human.status.success());
    let printed = format!("{}{}", String::from_utf8_lossy(&human.stdout), paired["url"].as_str().unwrap());

    let found: Vec<&str> =
        links(&printed).into_iter().filter(|link| link.contains(code) || link.contains(token)).collect();
    assert_eq!(found.len(), 2, "one pairing link in the text, one in the JSON: {printed}");
    for link in found {
        assert_eq!(link, format!("{relay_url}/#code={code}&token={token}"));
        let fragment = link.find('#').unwrap();
        for secret in [code, token] {
            assert!(link.find(secret).unwrap() > fragment, "a secret before the fragment: {link}");
        }
        // What the relay receives when a browser opens the link: the page, and no secret.
        let target = request_target(link);
        assert_eq!(target, "/");
        let (status, body) =
            http(relay.addr, &format!("GET {target} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")).await;
        assert_eq!(status, 200);
        assert!(body.contains("<html") || body.contains("<!doctype") || body.contains("<!DOCTYPE"), "{body}");
    }
}

/// Sends a raw upgrade to the loopback socket with these header lines and returns the status.
async fn upgrade_status(port: u16, headers: &str) -> u16 {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\n{headers}Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(STEP, tcp.read(&mut buf)).await.unwrap().unwrap();
    parse_response(&buf[..n]).0
}

#[tokio::test]
async fn the_loopback_socket_takes_exactly_one_host_naming_itself() {
    let agent = TestAgent::start(None).await;
    let port = agent.agent.loopback.port();
    for good in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("LocalHost:{port}")] {
        assert_eq!(upgrade_status(port, &format!("Host: {good}\r\n")).await, 101, "{good}");
    }
    let refused = [
        // Read as 127.0.0.1 by a lenient parser, as evil.example by a URL parser.
        format!("Host: 127.0.0.1:{port}@evil.example\r\n"),
        format!("Host: 127.0.0.1:{port}\r\nHost: evil.example\r\n"),
        format!("Host: evil.example\r\nHost: 127.0.0.1:{port}\r\n"),
        format!("Host: 127.0.0.1:{port}\r\nHost: 127.0.0.1:{port}\r\n"),
        format!("Host: 127.0.0.1:{}\r\n", port.wrapping_add(1)),
        format!("Host: app.localhost:{port}\r\n"),
        format!("Host: 127.0.0.1:{port}/\r\n"),
        "Host: localhost\r\n".to_owned(),
        String::new(),
    ];
    for headers in refused {
        assert_eq!(upgrade_status(port, &headers).await, 403, "{headers:?}");
    }
}

#[tokio::test]
async fn the_loopback_socket_takes_only_its_own_origin_or_none() {
    let agent = TestAgent::start(None).await;
    let port = agent.agent.loopback.port();
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    for origin in
        ["".to_owned(), format!("Origin: http://127.0.0.1:{port}\r\n"), format!("Origin: http://localhost:{port}\r\n")]
    {
        assert_eq!(upgrade_status(port, &format!("{host}{origin}")).await, 101, "{origin:?}");
    }
    let other = port.wrapping_add(1);
    for origin in [
        format!("Origin: http://127.0.0.1:{other}\r\n"),
        format!("Origin: http://localhost:{other}\r\n"),
        "Origin: http://127.0.0.1\r\n".to_owned(),
        format!("Origin: http://voxa.localhost:{port}\r\n"),
        format!("Origin: http://evil.localhost:{port}\r\n"),
        format!("Origin: https://127.0.0.1:{port}\r\n"),
        format!("Origin: http://127.0.0.1:{port}\r\nOrigin: https://evil.example\r\n"),
        "Origin: null\r\n".to_owned(),
    ] {
        assert_eq!(upgrade_status(port, &format!("{host}{origin}")).await, 403, "{origin:?}");
    }
}
