//! A new pairing in Chromium (docs/SECURITY.md, "A new pairing is asked for"): a link to a laptop
//! the page does not know asks "Add this laptop?" with the name that laptop proved, and sends it
//! nothing but the sealed hello until Add; "Not now" leaves the laptop in use as it was. And the
//! link's secrets: out of the address before the page has a body, on the relay's page and the
//! loopback page; what Chromium's profile keeps of them after it quits.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::browser::Scheme;
use crate::support::harness::*;
use crate::support::pictures::{pictures_dir, save_picture};
use crate::support::profile::{files_holding, history_urls_holding};
use crate::support::scene::{Machine, Scene, TERMINAL};

/// The WebSocket frames a page sent on each `/ws?code=…` socket through a front, by code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sent {
    text: usize,
    binary: usize,
    /// Sockets of this code that ended.
    closed: usize,
}

type Counts = Arc<Mutex<HashMap<String, Sent>>>;

/// A front for a relay that passes everything on and counts, per relay code, the frames the page
/// sends on its session sockets (read off the raw WebSocket stream, masked client frames).
async fn counting_front(relay: SocketAddr) -> (SocketAddr, Counts) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts: Counts = Arc::default();
    let kept = counts.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let counts = kept.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let Ok(byte) = tcp.read_u8().await else { return };
                    head.push(byte);
                }
                let Ok(mut upstream) = TcpStream::connect(relay).await else { return };
                if upstream.write_all(&head).await.is_err() {
                    return;
                }
                let line = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_owned();
                let Some(code) = line.strip_prefix("GET /ws?code=").and_then(|rest| rest.split(' ').next()) else {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
                    return;
                };
                let code = code.to_owned();
                let (mut from_page, mut to_page) = tcp.into_split();
                let (mut from_relay, mut to_relay) = upstream.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut from_relay, &mut to_page).await });
                let (mut pending, mut chunk) = (Vec::new(), [0u8; 8192]);
                // The relay's 101 comes first; the page's frames follow it.
                loop {
                    let n = match from_page.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&chunk[..n]);
                    while let Some((opcode, used)) = client_frame(&pending) {
                        pending.drain(..used);
                        let mut counts = counts.lock().unwrap();
                        let sent = counts.entry(code.clone()).or_default();
                        match opcode {
                            1 => sent.text += 1,
                            2 => sent.binary += 1,
                            _ => {}
                        }
                    }
                    if to_relay.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                }
                counts.lock().unwrap().entry(code).or_default().closed += 1;
            });
        }
    });
    (addr, counts)
}

/// The opcode and length of the first whole WebSocket frame in `bytes`, if it is all there.
fn client_frame(bytes: &[u8]) -> Option<(u8, usize)> {
    let (first, second) = (*bytes.first()?, *bytes.get(1)?);
    let masked = second & 0x80 != 0;
    let (len, mut at) = match second & 0x7f {
        126 => (u64::from(u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?)), 4),
        127 => (u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?), 10),
        len => (u64::from(len), 2),
    };
    if masked {
        at += 4;
    }
    let end = at + usize::try_from(len).ok()?;
    (bytes.len() >= end).then_some((first & 0x0f, end))
}

fn sent(counts: &Counts, code: &str) -> Sent {
    counts.lock().unwrap().get(code).copied().unwrap_or_default()
}

/// The link of `machine` through `front`.
fn link_of(front: SocketAddr, machine: &Machine) -> String {
    let (code, token) = (machine.secrets.relay_code.expose(), machine.secrets.auth_token.expose());
    format!("http://{front}/#code={code}&token={token}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_to_a_laptop_the_page_does_not_know_asks_first_and_sends_it_nothing_before_add() {
    let Some(scene) = Scene::start().await else { return };
    let (front, counts) = counting_front(scene.relay.addr).await;
    let browser = &scene.browser;
    // The laptop in use, paired through the same origin.
    browser.pair(&format!("http://{front}/#code={}&token={}", scene.code(), scene.token())).await;
    browser.wait_connection("online").await;
    // Someone hands over a link of their own laptop, on the same relay.
    let stranger = Machine::start(&scene.relay, "theirs.txt").await;
    let stranger_code = stranger.secrets.relay_code.expose().to_owned();
    browser.open(&link_of(front, &stranger)).await;
    browser.control("dialog", "Add this laptop?").await;
    let state =
        browser.wait_text("#new-laptop-state", "the laptop to prove the pairing", |t| t.contains("proved")).await;
    assert_eq!(state, "It proved it holds this pairing.");
    // Its name is the one its hello gave: here the same machine's, so the page says it is another.
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    assert_eq!(browser.wait_text("#new-laptop-name", "the name", |t| !t.is_empty()).await, host);
    let twin = browser.wait_text("#new-laptop-twin", "the twin warning", |t| !t.is_empty()).await;
    assert_eq!(twin, format!("You already have a laptop named {host}. This is a different one."));
    // Nothing but its sealed hello went to it: no calls, status, follow or tool call.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(sent(&counts, &stranger_code), Sent { text: 1, binary: 0, closed: 0 });
    // The laptop in use stays the one in use, online, behind the question (which makes the rest
    // of the page inert, so it is read from the page itself).
    let connection = "return document.getElementById('connection-text').textContent;";
    assert_eq!(browser.script(connection, vec![]).await, json!("laptop online"));
    let stored = browser.script("return localStorage.getItem('voxa.pairings');", vec![]).await;
    assert!(!stored.as_str().unwrap().contains(&stranger_code), "the stranger's pairing was kept: {stored}");

    // "Not now": the question goes, its socket closes, and the laptop in use works as before.
    browser.press("Not now").await;
    eventually("the stranger's socket closes", || sent(&counts, &stranger_code).closed == 1).await;
    assert_eq!(sent(&counts, &stranger_code).binary, 0);
    browser.type_into("Command", "echo still-mine").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command", |t| t.contains("still-mine\n")).await;
    let audit = stranger.home.path().join("voxa").join("audit");
    let audited = std::fs::read_dir(&audit).map(|entries| entries.count()).unwrap_or(0);
    assert_eq!(audited, 0, "the stranger's laptop audited something");

    // Asked again and added: now it is the laptop in use, and the page speaks to it.
    browser.pair(&link_of(front, &stranger)).await;
    browser.wait_connection("online").await;
    eventually("the page asks the added laptop for its calls and status", || sent(&counts, &stranger_code).binary >= 2)
        .await;
    let stored = browser.script("return localStorage.getItem('voxa.pairings');", vec![]).await;
    assert!(stored.as_str().unwrap().contains(&stranger_code), "{stored}");
    // A laptop the page knows (the first one) is opened at once, with no question.
    browser.open(&format!("http://{front}/#code={}&token={}", scene.code(), scene.token())).await;
    browser.wait_connection("online").await;
    let asked = "const ask = document.getElementById('new-laptop'); return ask.open;";
    assert_eq!(browser.script(asked, vec![]).await, json!(false));
    scene.close().await;
}

/// Installs, before any of the page runs, a watch that records the page's address when its
/// `<body>` appears (nothing of a page is drawn before it has a body).
const ADDRESS_AT_BODY: &str = "new MutationObserver((_, observer) => {
      if (!document.body) return;
      window.__addressAtBody = location.href;
      observer.disconnect();
    }).observe(document, { childList: true, subtree: true });";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_links_secrets_leave_the_address_before_the_page_has_a_body() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    browser.cdp("Page.addScriptToEvaluateOnNewDocument", json!({"source": ADDRESS_AT_BODY})).await;
    let at_body = "return window.__addressAtBody || null;";
    browser.pair(&scene.link()).await;
    browser.wait_connection("online").await;
    assert_eq!(browser.script(at_body, vec![]).await, json!(format!("http://{}/", scene.relay.addr)));
    // The loopback page too, whose link `voxa open` hands to this machine's browser; what the
    // link carries beside the secrets (a notification's session) stays for the page to read.
    let page = format!("http://{}/", scene.loopback());
    browser.open(&format!("{page}#token={}&session=s-1", scene.token())).await;
    browser.wait_connection("online").await;
    assert_eq!(browser.script(at_body, vec![]).await, json!(format!("{page}#session=s-1")));
    let agent_tab = "return document.getElementById('tab-agent').getAttribute('aria-pressed') === 'true';";
    browser.wait_script("the notification's session opened", agent_tab).await;
    scene.close().await;
}

/// What the page can and cannot keep out of the browser's profile. The page takes the link out of
/// the address before it has a body (above), keeps the relay pairing in the origin's storage on
/// purpose, and writes it nowhere else; but Chromium writes the address it navigated to into
/// `History`, `Favicons` and the `Sessions` log when the navigation commits, before any script of
/// the page runs, and no page can take it back (docs/SECURITY.md, "Known limits"). This test reads
/// the profile after Chromium quits and holds both halves: if Chromium ever stops recording the
/// link, it fails, and the limit can leave the docs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_records_the_opened_link_in_its_profile_before_the_page_runs_and_the_page_adds_nothing() {
    let Some(scene) = Scene::start().await else { return };
    scene.open_online().await;
    let (link, token, code) = (scene.link(), scene.token().to_owned(), scene.code().to_owned());
    let page = format!("http://{}/", scene.relay.addr);
    scene.browser.open(&page).await;
    scene.browser.wait_connection("online").await;
    let Scene { browser, relay, mut agent, .. } = scene;
    let profile = browser.quit().await;
    if let Some(agent) = agent.take() {
        agent.stop().await;
    }
    drop(relay);
    let root = profile.path();
    // The browser's own records of the navigation: the link as it was opened, nothing more.
    let history = history_urls_holding(root, &token);
    assert_eq!(history, [(link.clone(), String::new())], "History rows holding the token");
    assert!(history_urls_holding(root, &page).iter().any(|(url, title)| url == &page && title == "voxa"));
    let holding: Vec<String> =
        files_holding(root, &token).into_iter().filter(|path| !path.starts_with("Default/Local Storage/")).collect();
    let recorded = |path: &String| {
        path == "Default/History"
            || path == "Default/Favicons"
            || path.starts_with("Default/Sessions/")
            || path.starts_with("segmentation_platform/")
    };
    assert!(holding.iter().any(|p| p == "Default/History"), "{holding:?}");
    let elsewhere: Vec<&String> = holding.iter().filter(|p| !recorded(p)).collect();
    assert!(elsewhere.is_empty(), "the token is in files beyond the browser's navigation records: {elsewhere:?}");
    // The relay code travels with it in those records only, beside the page's own storage (the
    // pairing, and the calls a tab showed, kept by code).
    let code_elsewhere: Vec<String> = files_holding(root, &code)
        .into_iter()
        .filter(|p| {
            !p.starts_with("Default/Local Storage/") && !p.starts_with("Default/Session Storage/") && !recorded(p)
        })
        .collect();
    assert!(code_elsewhere.is_empty(), "{code_elsewhere:?}");
}

/// The question at 390×844 in both schemes: a stranger's laptop named like the one in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pictures_of_the_question_light_and_dark() {
    let scratch = tempfile::tempdir().unwrap();
    let out = pictures_dir(scratch.path());
    for (scheme, suffix) in [(Scheme::Light, ""), (Scheme::Dark, "-dark")] {
        let Some(scene) = Scene::start_with(scheme).await else { return };
        scene.open_online().await;
        let stranger = Machine::start(&scene.relay, "theirs.txt").await;
        scene.browser.open(&link_of(scene.relay.addr, &stranger)).await;
        scene.browser.wait_text("#new-laptop-state", "the proof", |t| t.contains("proved")).await;
        scene.browser.wait_text("#new-laptop-twin", "the twin warning", |t| !t.is_empty()).await;
        save_picture(&scene.browser, &out, &format!("web-ask{suffix}.png")).await;
        scene.browser.press("Not now").await;
        scene.close().await;
    }
}
