//! How the web client travels (see docs/PROTOCOL.md, "Web client"): hashed names kept for a year,
//! entry points revalidated, brotli and gzip by `Accept-Encoding`, kept-alive connections on the
//! relay and the loopback port (an upgrade still works on one), and in Chromium: the first screen
//! fetches no voice, shell or files module, and a reload fetches no hashed file.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::harness::*;
use crate::support::mitm::altering_front;
use crate::support::scene::Scene;

/// Status, headers (lowercase names) and body of one answer read off `stream`: the head byte by
/// byte, then `Content-Length` bytes, so the next answer stays unread.
async fn answer_on(stream: &mut TcpStream) -> (u16, HashMap<String, String>, Vec<u8>) {
    let read = async {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(stream.read_u8().await.expect("an answer's head"));
        }
        let head = String::from_utf8(head).unwrap();
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers: HashMap<String, String> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let mut body = vec![0u8; headers["content-length"].parse().unwrap()];
        stream.read_exact(&mut body).await.expect("the answer's body");
        (status, headers, body)
    };
    tokio::time::timeout(STEP, read).await.expect("an answer in time")
}

async fn get_on(stream: &mut TcpStream, target: &str, extra: &str) -> (u16, HashMap<String, String>, Vec<u8>) {
    let host = stream.peer_addr().unwrap();
    stream.write_all(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").as_bytes()).await.unwrap();
    answer_on(stream).await
}

/// True once the peer has closed `stream` (no byte arrives, the read ends).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(tokio::time::timeout(STEP, stream.read(&mut byte)).await, Ok(Ok(0) | Err(_)))
}

fn hashed(path: &str) -> &'static str {
    voxa::net::web::hashed_path(path).unwrap_or_else(|| panic!("{path} has a hashed name"))
}

/// Several requests on one connection, two of them sent before either answer, then
/// `Connection: close` ends it.
async fn check_keep_alive(addr: SocketAddr) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let (status, headers, page) = get_on(&mut tcp, "/", "").await;
    assert_eq!((status, headers["connection"].as_str()), (200, "keep-alive"));
    assert!(String::from_utf8_lossy(&page).contains(hashed("/js/main.js")));
    let (status, headers, _) = get_on(&mut tcp, "/", &format!("If-None-Match: {}\r\n", headers["etag"])).await;
    assert_eq!((status, headers["cache-control"].as_str()), (304, "no-cache"), "the page is revalidated");
    let host = tcp.peer_addr().unwrap();
    let two = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\n\r\nGET /config HTTP/1.1\r\nHost: {host}\r\n\r\n",
        hashed("/app.css")
    );
    tcp.write_all(two.as_bytes()).await.unwrap();
    let (status, headers, css) = answer_on(&mut tcp).await;
    assert_eq!((status, headers["cache-control"].as_str()), (200, "public, max-age=31536000, immutable"));
    assert!(String::from_utf8_lossy(&css).contains('{'));
    let (status, _, config) = answer_on(&mut tcp).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&config).unwrap()["version"], voxa::VERSION);
    let (status, headers, _) = get_on(&mut tcp, "/icon.svg", "Connection: close\r\n").await;
    assert_eq!((status, headers["connection"].as_str()), (200, "close"));
    assert!(closed(&mut tcp).await, "closed after the answer to Connection: close");
}

#[tokio::test]
async fn the_relay_and_the_loopback_port_keep_connections_for_the_pages_requests() {
    let relay = TestRelay::start().await;
    check_keep_alive(relay.addr).await;
    let agent = TestAgent::start(None).await;
    check_keep_alive(agent.agent.loopback).await;
}

#[tokio::test]
async fn a_kept_alive_connection_still_upgrades_to_the_loopback_socket() {
    let agent = TestAgent::start(None).await;
    let mut tcp = TcpStream::connect(agent.agent.loopback).await.unwrap();
    let (status, _, _) = get_on(&mut tcp, hashed("/js/session.js"), "").await;
    assert_eq!(status, 200);
    // The page's socket, on the connection that just carried a file.
    let url = format!("ws://{}/", tcp.peer_addr().unwrap());
    let (socket, response) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    assert_eq!(response.status(), 101);
    let mut socket = socket;
    let first =
        tokio::time::timeout(STEP, futures_util::StreamExt::next(&mut socket)).await.expect("a challenge in time");
    let text = first.expect("a message").expect("a frame").into_text().expect("text").to_string();
    let challenge: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(challenge["type"], "challenge", "{challenge}");
}

#[tokio::test]
async fn bodies_are_brotli_or_gzip_as_the_client_accepts_and_identity_otherwise() {
    let relay = TestRelay::start().await;
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (_, plain_headers, plain) = get_on(&mut tcp, hashed("/js/session.js"), "").await;
    assert!(!plain_headers.contains_key("content-encoding"));
    assert_eq!(plain_headers["vary"], "accept-encoding");
    let (_, headers, brotli) = get_on(&mut tcp, hashed("/js/session.js"), "Accept-Encoding: gzip, br\r\n").await;
    assert_eq!(headers["content-encoding"], "br");
    assert!(brotli.len() * 2 < plain.len(), "{} bytes of brotli for {}", brotli.len(), plain.len());
    let mut unpacked = Vec::new();
    brotli::Decompressor::new(&brotli[..], 4096).read_to_end(&mut unpacked).unwrap();
    assert_eq!(unpacked, plain);
    let brotli_etag = headers["etag"].clone();
    let (_, headers, gzip) = get_on(&mut tcp, hashed("/js/session.js"), "Accept-Encoding: gzip\r\n").await;
    assert_eq!(headers["content-encoding"], "gzip");
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(&gzip[..]).read_to_end(&mut unpacked).unwrap();
    assert_eq!(unpacked, plain);
    assert!(brotli_etag != headers["etag"] && headers["etag"] != plain_headers["etag"], "an ETag per encoding");
    let (_, headers, body) = get_on(&mut tcp, "/js/session.js", "Accept-Encoding: identity\r\n").await;
    assert_eq!((headers.get("content-encoding"), body), (None, plain));
    assert_eq!(headers["cache-control"], "no-cache", "the plain name is revalidated");
}

/// A front for a relay that passes everything on and writes down each request line the browser
/// sends (`GET /path`, with ` revalidating` when it carries `If-None-Match`).
async fn recording_front(relay: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let Ok(upstream) = TcpStream::connect(relay).await else { return };
                let (mut from_client, mut to_client) = tcp.into_split();
                let (mut from_relay, mut to_relay) = upstream.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut from_relay, &mut to_client).await });
                let (mut pending, mut chunk, mut heads) = (Vec::new(), [0u8; 4096], true);
                loop {
                    let n = match from_client.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if heads {
                        pending.extend_from_slice(&chunk[..n]);
                        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&pending[..end]).into_owned();
                            pending.drain(..end + 4);
                            let line = head.lines().next().unwrap_or_default();
                            let target = line.split(' ').take(2).collect::<Vec<_>>().join(" ");
                            let lower = head.to_ascii_lowercase();
                            let revalidating = if lower.contains("\r\nif-none-match:") { " revalidating" } else { "" };
                            log.lock().unwrap().push(format!("{target}{revalidating}"));
                            // After an upgrade the bytes are WebSocket frames.
                            heads = !lower.contains("\r\nupgrade:");
                        }
                    }
                    if to_relay.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// The module paths a request list names under a folder of the client.
fn fetched_under<'a>(seen: &'a [String], folders: &[&str]) -> Vec<&'a String> {
    seen.iter().filter(|line| folders.iter().any(|folder| line.contains(folder))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_screen_loads_no_lazy_view_and_a_reload_fetches_no_hashed_file() {
    let Some(scene) = Scene::start().await else { return };
    let (front, seen) = recording_front(scene.relay.addr).await;
    let browser = &scene.browser;
    browser.pair(&format!("http://{front}/#code={}&token={}", scene.code(), scene.token())).await;
    browser.wait_connection("online").await;
    // (The agent view comes right after "online": it follows the laptop's sessions.)
    let lazy = ["/js/voice/", "/js/terminal/", "/js/files/", "/vendor/"];
    let loaded = browser
        .script("return performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname);", vec![])
        .await;
    let loaded: Vec<String> = serde_json::from_value(loaded).unwrap();
    assert!(loaded.iter().any(|path| path == hashed("/js/session.js")), "{loaded:?}");
    assert!(loaded.iter().all(|path| !lazy.iter().any(|folder| path.starts_with(folder))), "{loaded:?}");
    assert!(fetched_under(&seen.lock().unwrap(), &lazy).is_empty(), "{:?}", seen.lock().unwrap());

    // The service worker keeps the shell: a reload takes every hashed file from it, and only the
    // page is asked again, revalidated by its ETag.
    browser.wait_script("the service worker in control", "return !!navigator.serviceWorker.controller;").await;
    let first_visit = seen.lock().unwrap().len();
    browser.client.refresh().await.expect("reload");
    browser.wait_connection("online").await;
    eventually("the worker revalidates the page", || {
        seen.lock().unwrap()[first_visit..].iter().any(|line| line == "GET / revalidating")
    })
    .await;
    let again: Vec<String> = seen.lock().unwrap()[first_visit..].to_vec();
    let hashed_again: Vec<&String> = again.iter().filter(|line| is_hashed(line)).collect();
    assert!(hashed_again.is_empty(), "a reload fetched hashed files: {again:?}");

    // A lazy view arrives when its tab opens.
    browser.press("Shell").await;
    eventually("the shell module", || !fetched_under(&seen.lock().unwrap(), &["/js/terminal/panel."]).is_empty()).await;
    browser.wait_script("the terminal", "return !document.getElementById('panel-shell').hidden;").await;
    scene.close().await;
}

/// A request line for a name carrying a content hash (`.0123456789ab.` or a trailing one).
fn is_hashed(line: &str) -> bool {
    let path = line.split(' ').nth(1).unwrap_or_default();
    path.split('.')
        .any(|part| part.len() == 12 && part.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
}

/// What the page's `fetch` of `url` gets through its service worker: the status and the body.
const FETCH_THROUGH_WORKER: &str = "const [url, done] = arguments;
    fetch(url).then(async (r) => done([r.status, await r.text()]), (e) => done([0, String(e)]));";

/// Whether the worker's cache holds `url`.
const KEPT: &str = "const [url, done] = arguments;
    caches.match(url).then((r) => done(!!r), () => done(false));";

/// The service worker serves a hashed name only after checking the bytes against it: a relay
/// that alters a file under its hashed name gets it neither served nor kept, and a kept copy that
/// no longer matches is dropped and fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_worker_serves_a_hashed_file_only_when_its_bytes_match_its_name() {
    let Some(browser) = crate::support::browser::Browser::start().await else { return };
    let relay = TestRelay::start().await;
    let altered = hashed("/js/files/panel.js");
    let front = altering_front(relay.addr, altered).await;
    browser.open(&format!("http://{front}/")).await;
    browser.wait_script("the service worker in control", "return !!navigator.serviceWorker.controller;").await;
    let fetch = |path: &str| {
        let args = vec![serde_json::json!(path)];
        let client = browser.client.clone();
        async move { client.execute_async(FETCH_THROUGH_WORKER, args).await.unwrap() }
    };
    let kept = |path: &str| {
        let args = vec![serde_json::json!(path)];
        let client = browser.client.clone();
        async move { client.execute_async(KEPT, args).await.unwrap() }
    };
    // Altered under its hashed name: refused, and not kept.
    let answer = fetch(altered).await;
    assert_eq!(answer[0], 502, "{answer}");
    assert!(answer[1].as_str().unwrap().contains("is not the file its name says"), "{answer}");
    assert_eq!(kept(altered).await, serde_json::json!(false));
    // A file as built: served and kept.
    let genuine = hashed("/js/agent/markdown.js");
    let body = String::from_utf8(voxa::net::web::assets().find(|(p, ..)| *p == genuine).unwrap().2.to_vec()).unwrap();
    assert_eq!(fetch(genuine).await, serde_json::json!([200, body]));
    assert_eq!(kept(genuine).await, serde_json::json!(true));
    // A kept copy whose bytes no longer match its name is dropped and fetched again.
    let spoil = "const [url, done] = arguments;
        caches.keys().then(async ([name]) => { await (await caches.open(name)).put(url, new Response('bad')); done(true); });";
    browser.client.execute_async(spoil, vec![serde_json::json!(genuine)]).await.unwrap();
    assert_eq!(fetch(genuine).await, serde_json::json!([200, body]));
    browser.close().await;
}
