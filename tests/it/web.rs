//! The web client in a real headless Chromium at a phone's viewport, against a real relay and agent
//! on 127.0.0.1:0: what a person sees after opening the pairing link. Plus its HTTP answers
//! (security headers, `ETag`) from the relay and the loopback port.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::support::browser::{Browser, Scheme, VIEWPORT};
use crate::support::harness::*;
use crate::support::pictures::save_picture;
use crate::support::run::start_run_with_env;
use crate::support::scene::{Scene, SMALL_CONTROLS, TERMINAL};
use crate::support::voxa_cmd;

// ---------------------------------------------------------------------------------------------
// HTTP answers

/// A raw HTTP/1.1 GET: status, headers (lowercase names) and body.
async fn http_get(addr: SocketAddr, target: &str, extra: &str) -> (u16, HashMap<String, String>, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n{extra}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let response = tokio::time::timeout(STEP, read_response(&mut stream)).await.expect("an answer in time");
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head");
    let head = String::from_utf8(response[..split].to_vec()).unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, response[split + 4..].to_vec())
}

async fn check_served(addr: SocketAddr) {
    let (status, headers, body) = http_get(addr, "/?code=0123456789abcdef0123456789abcdef&token=x", "").await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("<title>voxa</title>"));
    let csp = &headers["content-security-policy"];
    for directive in ["script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "default-src 'none'"] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");

    let (status, headers, script) = http_get(addr, "/js/session.js", "").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/javascript; charset=utf-8");
    let etag = headers["etag"].clone();
    assert!(headers.contains_key("content-security-policy"));
    let (status, headers, body) = http_get(addr, "/js/session.js", &format!("If-None-Match: {etag}\r\n")).await;
    assert_eq!((status, body.len()), (304, 0));
    assert_eq!(headers["etag"], etag);
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let (status, _, again) = http_get(addr, "/js/session.js", "If-None-Match: \"stale\"\r\n").await;
    assert_eq!((status, again), (200, script));

    let (status, headers, body) = http_get(addr, "/config", "").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    let config: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(config, json!({"version": voxa::VERSION, "live": false, "relay_token": false}));

    let (status, _, _) = http_get(addr, "/js/nothing.js", "").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn relay_and_loopback_serve_the_client_with_security_headers_and_etags() {
    let relay = TestRelay::start().await;
    check_served(relay.addr).await;
    let agent = TestAgent::start(None).await;
    check_served(agent.agent.loopback).await;
    // A page elsewhere may not load the loopback client's files into its own origin.
    let (status, _, _) = http_get(agent.agent.loopback, "/", "Origin: https://evil.example\r\n").await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_relay_that_requires_a_token_still_serves_the_page_but_not_the_sockets() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = voxa::relay::RelayConfig {
        token: Some(voxa::secret::Secret::from_string("relay-secret".into())),
        service: Some(voxa::hosted::Hosting::service(voxa::hosted::LiveConfig::new(voxa::gemini::GeminiConfig {
            api_key: voxa::secret::Secret::from_string("unused-key".into()),
            url: "ws://127.0.0.1:9/".into(),
            model: "models/m".into(),
            voice: "Kore".into(),
            heartbeat: voxa::gemini::HEARTBEAT,
        }))),
        ..Default::default()
    };
    let relay = TestRelay::start_with(listener, config).await;
    let (status, _, body) = http_get(relay.addr, "/config", "").await;
    assert_eq!(status, 200);
    let offer = serde_json::from_slice::<Value>(&body).unwrap();
    assert_eq!(offer["live"], true, "the relay's offer is reported: {offer}");
    assert_eq!(offer["relay_token"], true, "and that it asks for its token (never the token): {offer}");
    assert!(!String::from_utf8_lossy(&body).contains("relay-secret"));
    let (status, _, _) = http_get(relay.addr, "/ws?code=0123456789abcdef0123456789abcdef", "").await;
    assert_eq!(status, 401);
}

// ---------------------------------------------------------------------------------------------
// The page's sources

/// The client's source folder in this checkout.
fn web_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("web")
}

/// The quoted names of `export const NAME = /** @type {const} */ ([ … ]);` in protocol.js.
fn js_list(source: &str, name: &str) -> Vec<String> {
    let opening = format!("export const {name} = /** @type {{const}} */ ([");
    let from = source.find(&opening).unwrap_or_else(|| panic!("protocol.js has no list {name}")) + opening.len();
    let body = &source[from..from + source[from..].find("]);").unwrap_or_else(|| panic!("{name} never ends"))];
    let names = body.split(',').map(str::trim).filter(|item| !item.is_empty());
    names
        .map(|item| {
            let name = item.strip_prefix('\'').and_then(|rest| rest.strip_suffix('\''));
            name.unwrap_or_else(|| panic!("{item:?} in protocol.js is not one quoted name")).to_owned()
        })
        .collect()
}

/// The number of `export const NAME = …;` in protocol.js.
fn js_number(source: &str, name: &str) -> u64 {
    let opening = format!("export const {name} = ");
    let from = source.find(&opening).unwrap_or_else(|| panic!("protocol.js has no {name}")) + opening.len();
    let value = &source[from..from + source[from..].find(';').unwrap()];
    match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
        None => value.parse().unwrap_or_else(|_| panic!("{name} = {value:?} is not a number")),
    }
}

/// Every wire name serde knows for the enum `T`: the list it reports when asked for a name it
/// does not know, caught by an error type of our own. `tagged`: the enum is tagged by `type`.
fn wire_names<T: serde::de::DeserializeOwned + std::fmt::Debug>(tagged: bool) -> Vec<String> {
    use serde::de::value::{MapDeserializer, StrDeserializer};
    #[derive(Debug)]
    struct Expected(Vec<&'static str>);
    impl std::fmt::Display for Expected {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "expected one of {:?}", self.0)
        }
    }
    impl std::error::Error for Expected {}
    impl serde::de::Error for Expected {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Expected(Vec::new())
        }
        fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
            Expected(expected.to_vec())
        }
    }
    let unknown = "\u{1}no such name";
    let outcome = if tagged {
        T::deserialize(MapDeserializer::<_, Expected>::new(std::iter::once(("type", unknown))))
    } else {
        T::deserialize(StrDeserializer::<Expected>::new(unknown))
    };
    match outcome {
        Err(Expected(names)) if !names.is_empty() => names.into_iter().map(str::to_owned).collect(),
        other => panic!("serde named no variants: {other:?}"),
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// The names of every `export const` of protocol.js, in order.
fn js_exports(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| line.strip_prefix("export const "))
        .map(|rest| rest.split([' ', '=']).next().unwrap_or_default().to_owned())
        .collect()
}

/// The text of `export const NAME = '…';` in protocol.js, its `\uXXXX` escapes read.
fn js_string(source: &str, name: &str) -> String {
    let opening = format!("export const {name} = '");
    let from = source.find(&opening).unwrap_or_else(|| panic!("protocol.js has no string {name}")) + opening.len();
    let quoted = &source[from..from + source[from..].find("';").unwrap()];
    let mut text = String::new();
    let mut rest = quoted;
    while let Some(at) = rest.find("\\u") {
        text.push_str(&rest[..at]);
        let code = u32::from_str_radix(&rest[at + 2..at + 6], 16).expect("a \\uXXXX escape");
        text.push(char::from_u32(code).unwrap());
        rest = &rest[at + 6..];
    }
    text + rest
}

#[test]
fn protocol_js_names_what_the_rust_protocol_names() {
    use voxa::protocol::{AgentMessage, CallErrorCode, ClientMessage, ErrorCode};
    let source = std::fs::read_to_string(web_dir().join("js/protocol.js")).unwrap();
    let codes: Vec<String> = ErrorCode::ALL.iter().map(|code| code.as_str().to_owned()).collect();
    // ALL itself holds every variant serde knows.
    assert_eq!(sorted(wire_names::<ErrorCode>(false)), sorted(codes.clone()));
    // Every list of protocol.js against the Rust names it stands for, both ways (equal sets).
    let lists = [
        ("ERROR_CODES", codes),
        ("CALL_ERROR_CODES", wire_names::<CallErrorCode>(false)),
        ("CLIENT_FRAMES", wire_names::<ClientMessage>(true)),
        ("AGENT_FRAMES", wire_names::<AgentMessage>(true)),
        ("LIVE_FRAMES", wire_names::<voxa::protocol::LiveMessage>(true)),
    ];
    for (name, rust) in &lists {
        let js = sorted(js_list(&source, name));
        let missing: Vec<&String> = rust.iter().filter(|n| !js.contains(n)).collect();
        let unknown: Vec<&String> = js.iter().filter(|n| !rust.contains(n)).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "{name}: not in protocol.js {missing:?}, not in Rust {unknown:?}"
        );
    }
    // Every number and mark against its constant.
    let numbers = [
        ("PROTOCOL", u64::from(voxa::protocol::PROTOCOL_VERSION)),
        ("SEALED_PROTOCOL", u64::from(voxa::protocol::PROTOCOL_SEALED)),
        ("AUDIO_PREFIX", u64::from(voxa::protocol::AUDIO_PREFIX)),
    ];
    for (name, rust) in numbers {
        assert_eq!(js_number(&source, name), rust, "{name}");
    }
    assert_eq!(js_string(&source, "NOTICE_PREFIX"), voxa::protocol::relay::NOTICE_MARK.to_string());
    // And nothing else: a constant protocol.js adds must be held against Rust here too.
    let checked: Vec<&str> = lists
        .iter()
        .map(|(name, _)| *name)
        .chain(numbers.iter().map(|(name, _)| *name))
        .chain(["NOTICE_PREFIX"])
        .collect();
    for export in js_exports(&source) {
        assert!(checked.contains(&export.as_str()), "protocol.js exports {export}, which no Rust name is held against");
    }
}

#[test]
fn the_protocol_check_reads_what_it_claims() {
    // The readers above fail loudly on a list they cannot read, and see a missing name.
    let source = "export const A = /** @type {const} */ ([\n  'one',\n  'two',\n]);\nexport const N = 0x01;";
    assert_eq!(js_list(source, "A"), ["one", "two"]);
    assert_eq!(js_number(source, "N"), 1);
    assert!(std::panic::catch_unwind(|| js_list("export const A = /** @type {const} */ ([one]);", "A")).is_err());
    assert!(std::panic::catch_unwind(|| js_list(source, "B")).is_err());
    assert_eq!(js_exports(source), ["A", "N"]);
    assert_eq!(js_string("export const M = 'a\\u0001b';", "M"), "a\u{1}b");
    let names = wire_names::<voxa::protocol::ClientMessage>(true);
    assert!(names.contains(&"tool_call".to_owned()) && names.contains(&"hello".to_owned()), "{names:?}");
}

/// Most lines a module of the web client may have.
const MAX_MODULE_LINES: usize = 450;
/// The folders of `web/js/` that are one panel each; a panel imports none of another's.
const PANEL_FOLDERS: [&str; 10] =
    ["agent", "approvals", "commands", "files", "notify", "page", "screen", "status", "terminal", "voice"];

/// Every module under `web/js/`, as its path from `web/js/` and its text.
fn web_modules() -> Vec<(String, String)> {
    let root = web_dir().join("js");
    let mut found = Vec::new();
    let mut pending = vec![root.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "js") {
                let name = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
                found.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    found.sort();
    found
}

/// What a module names with `from '…'`, `import('…')` or `import '…'` (JSDoc types included),
/// resolved against its own folder: paths from `web/js/`.
fn imports_of(module: &str, text: &str) -> Vec<String> {
    let dir: Vec<&str> = module.split('/').collect::<Vec<_>>()[..module.matches('/').count()].to_vec();
    let mut found = Vec::new();
    for opening in ["from '", "import('", "import '"] {
        for rest in text.split(opening).skip(1) {
            let Some(specifier) = rest.split('\'').next().filter(|s| s.starts_with('.')) else { continue };
            let mut parts = dir.clone();
            for part in specifier.split('/') {
                match part {
                    "." => {}
                    ".." => {
                        parts.pop();
                    }
                    part => parts.push(part),
                }
            }
            found.push(parts.join("/"));
        }
    }
    found
}

#[test]
fn web_modules_stay_small_and_no_panel_imports_another_panels_module() {
    let modules = web_modules();
    assert!(modules.len() > 30, "only {} modules", modules.len());
    let long: Vec<String> = modules
        .iter()
        .filter(|(_, text)| text.lines().count() > MAX_MODULE_LINES)
        .map(|(name, text)| format!("{name}: {} lines", text.lines().count()))
        .collect();
    assert!(long.is_empty(), "modules over {MAX_MODULE_LINES} lines: {long:?}");
    let mut crossing = Vec::new();
    for (name, text) in &modules {
        let Some(folder) = name.split_once('/').map(|(folder, _)| folder) else { continue };
        if !PANEL_FOLDERS.contains(&folder) {
            continue;
        }
        for imported in imports_of(name, text) {
            let into = imported.split_once('/').map(|(folder, _)| folder);
            if into.is_some_and(|into| into != folder && PANEL_FOLDERS.contains(&into)) {
                crossing.push(format!("{name} imports {imported}"));
            }
        }
    }
    assert!(crossing.is_empty(), "a panel imports another panel's module: {crossing:?}");
    // The readers read what they claim: a crossing import is seen, resolved from its folder.
    let sample = "import { a } from '../approvals/panel.js';\n/** @type {import('./x.js').T} */";
    assert_eq!(imports_of("agent/panel.js", sample), ["approvals/panel.js", "agent/x.js"]);
}

#[test]
fn every_file_of_the_web_client_is_served() {
    let root = web_dir();
    let mut pending = vec![root.clone()];
    let mut seen = 0;
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let served = format!("/{}", path.strip_prefix(&root).unwrap().to_string_lossy());
            assert!(voxa::net::web::is_web_path(&served), "{served} is under web/ but not in the embedded list");
            seen += 1;
        }
    }
    assert!(seen > 10, "only {seen} files under web/");
}

// ---------------------------------------------------------------------------------------------
// In the browser

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pairing_link_in_the_fragment_goes_online_and_leaves_no_token_in_the_address_bar() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    let address = browser.page_address().await;
    assert!(!address.contains(scene.token()), "token left in the address bar: {address}");
    assert!(!address.contains('?') && !address.contains('#'), "{address}");
    // The status panel shows what the laptop said in hello_ok.
    browser.press("Status").await;
    let facts = browser.wait_text("#facts", "the agent's version", |t| t.contains("voxa/")).await;
    assert!(facts.contains("hosted"), "{facts}");
    // The pairing is named after the laptop, from hello_ok.
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    assert!(facts.contains(&format!("Laptop\n{host}")), "{facts}");
    let tools = browser.wait_text("#tools", "the tools", |t| t.contains("run_command")).await;
    assert!(tools.contains("screenshot") && tools.contains("read_file"), "{tools}");
    // The next visit needs no link: the pairing is remembered.
    browser.open(&format!("http://{}/", scene.relay.addr)).await;
    browser.wait_connection("online").await;
    scene.close().await;
}

/// Everything this origin's localStorage holds, as one JSON text.
async fn stored(browser: &Browser) -> String {
    browser.script("return JSON.stringify(Object.entries(localStorage));", vec![]).await.as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_query_link_still_pairs_and_leaves_the_address_bar() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    browser.pair(&scene.old_link()).await;
    browser.wait_connection("online").await;
    // What stays is the page and, after `#/`, the place the user is (a route, never a secret).
    let address = browser.page_address().await;
    assert_eq!(address, format!("http://{}/", scene.relay.addr), "the secrets stay out of the address bar");
    // The relay pairing is kept in the relay's origin, so the next visit needs no link.
    assert!(stored(browser).await.contains(scene.code()));
    browser.open(&format!("http://{}/", scene.relay.addr)).await;
    browser.wait_connection("online").await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_page_keeps_its_token_in_memory_and_removes_what_older_pages_stored() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    let page = format!("http://{}/", scene.loopback());
    // An older page stored the loopback pairing, token and all, under this origin.
    browser.open(&page).await;
    let old = json!({"list": [{"id": "loopback", "kind": "loopback", "token": scene.token()}], "current": "loopback"});
    browser.script("localStorage.setItem('voxa.pairings', arguments[0]);", vec![json!(old.to_string())]).await;
    assert!(stored(browser).await.contains(scene.token()));
    // The page removes it when it loads, and has no pairing to use.
    browser.open(&page).await;
    browser.wait_script("the welcome", "return !document.getElementById('welcome').hidden;").await;
    let kept = stored(browser).await;
    assert!(!kept.contains(scene.token()) && !kept.contains("loopback"), "left in localStorage: {kept}");
    // The link `voxa open` hands out, opened on that same page (only the fragment changes).
    browser.open(&format!("{page}#token={}", scene.token())).await;
    browser.wait_connection("online").await;
    assert_eq!(browser.page_address().await, page);
    let kept = stored(browser).await;
    assert!(!kept.contains(scene.token()) && !kept.contains("loopback"), "left in localStorage: {kept}");
    browser.type_into("Command", "echo from-memory").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command", |t| t.contains("from-memory\n")).await;
    // A reload has nothing to read: the page asks for a fresh link.
    browser.open(&page).await;
    browser.wait_script("the welcome", "return !document.getElementById('welcome').hidden;").await;
    let welcome = browser.wait_text("#welcome", "the welcome", |t| t.contains("voxa open")).await;
    assert!(welcome.contains("voxa open"), "{welcome}");
    assert!(!stored(browser).await.contains(scene.token()));
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_computes_the_hello_proofs_of_the_documented_worked_example() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    browser.open(&format!("http://{}/", relay.addr)).await;
    // The worked example, read from the document other clients implement against.
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/PROTOCOL.md")).unwrap();
    let value = |name: &str| {
        let hex = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit());
        let found = doc.lines().filter(|line| line.starts_with(name)).find_map(|line| {
            let (_, value) = line.split_once(" = ")?;
            hex(value.trim()).then(|| value.trim().to_owned())
        });
        found.unwrap_or_else(|| panic!("no {name:?} in the worked example"))
    };
    let script = "const [token, agentNonce, clientNonce, done] = arguments;
        import('/js/session/hello.js').then(async (session) => {
            const key = await session.importToken(token);
            done([await session.helloProof(key, 'client', agentNonce, clientNonce),
                  await session.helloProof(key, 'agent', agentNonce, clientNonce)]);
        });";
    let args = vec![json!(value("T ")), json!(value("A ")), json!(value("C "))];
    let proofs = browser.client.execute_async(script, args).await.unwrap();
    assert_eq!(proofs, json!([value("client proof"), value("agent proof")]));
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_has_the_accessible_name_of_the_contract() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    std::fs::write(scene.workspace().join("a.txt"), "a").unwrap();
    scene.open_online().await;
    let region = browser.control("status", "Connection").await;
    assert_eq!(region.attr("aria-live").await.unwrap().as_deref(), Some("polite"));
    browser.control("textbox", "Command").await;
    browser.control("button", "Run").await;
    browser.control("button", "Cancel").await;
    browser.press("Files").await;
    browser.control("button", "a.txt").await.click().await.unwrap();
    browser.control("button", "Save").await;
    browser.press("Screen").await;
    browser.control("button", "Screenshot").await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_is_big_enough_for_a_finger_and_the_tabs_stay_in_reach() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    for i in 0..60 {
        std::fs::write(scene.workspace().join(format!("file-{i:02}.txt")), "x").unwrap();
    }
    scene.open_online().await;
    browser.control("button", "Call").await;
    browser.type_into("Command", "true").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command", |t| t.contains("exit 0")).await;
    browser.client.find(fantoccini::Locator::Css("#history-box summary")).await.unwrap().click().await.unwrap();
    let mut small = Vec::new();
    for tab in ["Terminal", "Files", "Screen", "Agent", "Status"] {
        browser.press(tab).await;
        if tab == "Files" {
            browser.control("button", "file-00.txt").await.click().await.unwrap();
            browser.control("textbox", "File content").await;
        }
        let found = browser.script(SMALL_CONTROLS, vec![]).await;
        small.extend(found.as_array().unwrap().iter().map(|v| format!("{tab}: {}", v.as_str().unwrap())));
    }
    assert!(small.is_empty(), "controls under 44 × 44 px: {small:?}");
    // The editor is monospace at 16 px or more (iOS zooms on focus below that).
    let font = browser
        .script(
            "const s = getComputedStyle(document.getElementById('file-text')); return [s.fontSize, s.fontFamily];",
            vec![],
        )
        .await;
    assert!(font[0].as_str().unwrap().trim_end_matches("px").parse::<f64>().unwrap() >= 16.0, "{font}");
    assert!(font[1].as_str().unwrap().contains("monospace"), "{font}");
    // Scrolled down a long folder, the tabs are still on screen, right under the header.
    browser.press("Files").await;
    browser.script("window.scrollTo(0, document.body.scrollHeight);", vec![]).await;
    let reach = browser
        .script(
            "const tabs = document.getElementById('tabs').getBoundingClientRect();
             const bar = document.getElementById('bar').getBoundingClientRect();
             return [window.scrollY > 0, Math.round(tabs.top) === Math.round(bar.bottom)];",
            vec![],
        )
        .await;
    assert_eq!(reach, json!([true, true]), "scrolled, the tabs left the screen");
    // Every tab is on screen whole at phone width: none scrolled away, none cut.
    let cut = browser
        .script(
            "return [...document.querySelectorAll('#tabs button')].filter((b) => {
               const r = b.getBoundingClientRect();
               return r.left < 0 || r.right > innerWidth || b.scrollWidth > b.clientWidth;
             }).map((b) => b.textContent);",
            vec![],
        )
        .await;
    assert_eq!(cut, json!([]), "tabs off screen or cut at {}px", VIEWPORT.0);
    browser.control("button", "Terminal").await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_streams_output_shows_exit_and_duration_and_cancel_ends_a_long_command() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    browser.type_into("Command", "echo hello-from-the-browser").await;
    browser.press("Run").await;
    let shown = browser.wait_text(TERMINAL, "the command's end", |t| t.contains("exit 0")).await;
    assert!(shown.contains("$ echo hello-from-the-browser\nhello-from-the-browser"), "{shown}");
    assert!(shown.contains(" ms") || shown.contains(" s"), "no duration: {shown}");

    // The first line arrives while the command still runs: it was streamed, not sent at the end.
    browser.type_into("Command", "echo started-streaming; sleep 30").await;
    browser.press("Run").await;
    let running = browser.wait_text(TERMINAL, "streamed output", |t| t.contains("started-streaming\n")).await;
    assert!(running.trim_end().ends_with("running…"), "{running}");
    browser.press("Cancel").await;
    let ended = browser.wait_text(TERMINAL, "the cancelled command's end", |t| t.contains("cancelled")).await;
    assert!(!ended.contains("running…"), "{ended}");
    // Both commands are in the session's history, newest first.
    browser.client.find(fantoccini::Locator::Css("#history-box summary")).await.unwrap().click().await.unwrap();
    let history = browser.wait_text("#history", "the history", |t| !t.is_empty()).await;
    assert!(history.find("sleep 30").unwrap() < history.find("echo hello-from-the-browser").unwrap(), "{history}");
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_browsed_opened_edited_saved_and_refusals_are_sentences() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    let workspace = scene.workspace().to_owned();
    std::fs::create_dir(workspace.join("notes")).unwrap();
    std::fs::write(workspace.join("notes/todo.txt"), "buy milk\n").unwrap();
    std::fs::write(workspace.join("dot.png"), tiny_png()).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", workspace.join("escape")).unwrap();
    scene.open_online().await;
    browser.press("Files").await;
    browser.control("button", "notes (folder)").await.click().await.unwrap();
    browser.control("button", "todo.txt").await.click().await.unwrap();
    browser.wait_text("#file-meta", "the size", |t| t == "9 B").await;
    let editor = browser.control("textbox", "File content").await;
    assert_eq!(editor.prop("value").await.unwrap().as_deref(), Some("buy milk\n"));
    editor.clear().await.unwrap();
    editor.send_keys("buy oat milk").await.unwrap();
    browser.press("Save").await;
    browser.wait_text("#file-saved", "the save", |t| t.starts_with("saved")).await;
    assert_eq!(std::fs::read_to_string(workspace.join("notes/todo.txt")).unwrap(), "buy oat milk");

    browser.press("Up one folder").await;
    browser.control("button", "dot.png").await.click().await.unwrap();
    browser
        .wait_script(
            "the image to be shown",
            "const i = document.getElementById('file-image'); return !i.hidden && i.complete && i.naturalWidth === 2;",
        )
        .await;

    browser.control("button", "escape").await.click().await.unwrap();
    let refusal = browser.wait_text("#files-error", "the refusal", |t| !t.is_empty()).await;
    assert!(
        refusal.starts_with("That path is outside the workspace") && refusal.ends_with("(outside-workspace)"),
        "{refusal}"
    );
    scene.close().await;
}

/// A 2×1 PNG.
fn tiny_png() -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, 2, 1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header().unwrap().write_image_data(&[255, 0, 0, 0, 0, 255]).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_agent_shows_offline_and_comes_back_without_a_reload() {
    let Some(mut scene) = Scene::start().await else { return };
    scene.open_online().await;
    scene.browser.type_into("Command", "echo before-the-restart").await;
    scene.browser.press("Run").await;
    scene.browser.wait_text(TERMINAL, "the first command", |t| t.contains("exit 0")).await;
    scene.stop_agent().await;
    scene.browser.wait_connection("laptop offline").await;
    scene.start_agent().await;
    let browser = &scene.browser;
    browser.wait_connection("online").await;
    // Same page, not a reload: what was on screen before is still there, and it works again.
    browser.type_into("Command", "echo after-the-restart").await;
    browser.press("Run").await;
    let shown = browser.wait_text(TERMINAL, "the second command", |t| t.contains("after-the-restart\n")).await;
    assert!(shown.contains("before-the-restart"), "{shown}");
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_the_laptop_no_longer_accepts_says_scan_the_new_code_and_stops_trying() {
    let Some(mut scene) = Scene::start().await else { return };
    scene.open_online().await;
    // The laptop's token changes under the same relay code while the page holds the old one.
    scene.stop_agent().await;
    let fresh = voxa::secret::Secret::generate().unwrap();
    std::fs::write(scene.home.path().join("voxa").join("auth_token"), format!("{}\n", fresh.expose())).unwrap();
    scene.start_agent().await;
    let said = scene.browser.wait_connection("scan the new code").await;
    assert_eq!(said, "this link is no longer valid — scan the new code");
    // No loop: the page left the relay and does not come back.
    scene.stop_agent().await;
    let mut laptop = connect(&format!("ws://{}/agent?code={}", scene.relay.addr, scene.code())).await;
    assert_silent(&mut laptop, Duration::from_millis(1500)).await;
    assert_eq!(scene.browser.wait_connection("scan").await, said);
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_pair_rotate_the_old_link_says_scan_the_new_code_and_the_new_link_works() {
    let Some(mut scene) = Scene::start().await else { return };
    scene.open_online().await;
    let old_code = scene.code().to_owned();
    // The user rotates with the real command while the page holds the old link, then restarts.
    scene.stop_agent().await;
    let home = scene.home.path().join("voxa");
    let relay = scene.relay.url().to_string();
    let out = tokio::task::spawn_blocking(move || {
        voxa_cmd(&home).args(["--json", "--relay", &relay, "pair", "--rotate"]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let paired: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ne!(paired["code"], old_code.as_str());
    scene.start_agent().await;
    assert_eq!(scene.code(), paired["code"]);
    let said = scene.browser.wait_connection("scan the new code").await;
    assert_eq!(said, "this link is no longer valid — scan the new code");
    // No loop: the page left the old code and does not come back to it.
    scene.stop_agent().await;
    let mut laptop = connect(&format!("ws://{}/agent?code={old_code}", scene.relay.addr)).await;
    assert_silent(&mut laptop, Duration::from_millis(1500)).await;
    assert_eq!(scene.browser.wait_connection("scan").await, said);
    drop(laptop);
    // The new link from `pair --rotate` goes online.
    scene.start_agent().await;
    scene.browser.pair(paired["url"].as_str().unwrap()).await;
    scene.browser.wait_connection("online").await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_laptop_that_cannot_prove_the_pairing_is_not_your_laptop() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    // Someone who learned the code (not the token) waits at the relay as the laptop.
    let code = voxa::secret::Secret::generate().unwrap();
    let token = voxa::secret::Secret::generate().unwrap();
    let mut impostor = connect(&format!("ws://{}/agent?code={}", relay.addr, code.expose())).await;
    browser.open(&format!("http://{}/?code={}&token={}", relay.addr, code.expose(), token.expose())).await;
    loop {
        let frame = recv_json(&mut impostor).await;
        if frame["type"] == "presence" && frame["state"] == "joined" {
            break;
        }
    }
    let nonce = "0123456789abcdef0123456789abcdef";
    send(&mut impostor, json!({"type":"challenge","protocol":2,"nonce": nonce})).await;
    let hello = recv_type(&mut impostor, "hello").await;
    assert!(hello.get("token").is_none() && !hello.to_string().contains(token.expose()), "the token crossed: {hello}");
    let forged = json!({"type":"hello_ok","protocol":2,"agent":"voxa/0.1.0","mode":"hosted",
        "tools":["run_command"],"proof": "0".repeat(64)});
    send(&mut impostor, forged).await;
    // A laptop the page does not know is asked about, never made the one in use: the question
    // says why it cannot be added, and Add cannot be tapped.
    let said = browser.wait_text("#new-laptop-state", "the refusal", |t| t.contains("not your laptop")).await;
    assert!(said.starts_with("It cannot be added: this is not your laptop"), "{said}");
    let add = browser.control("button", "Add").await;
    assert!(!add.is_enabled().await.unwrap(), "Add stays disabled for an impostor");
    assert!(!stored(&browser).await.contains(code.expose()), "the impostor's pairing was kept");
    // The page closed the connection and sent nothing after its hello.
    loop {
        match next_frame(&mut impostor).await {
            Some(Message::Text(text)) => {
                let frame: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(frame["type"], "presence", "the page sent {frame} to an impostor");
                if frame["state"] == "left" {
                    break;
                }
            }
            Some(Message::Close(_)) | None => panic!("the relay closed the impostor"),
            Some(_) => {}
        }
    }
    browser.close().await;
}

// ---------------------------------------------------------------------------------------------
// The binary, as a user runs it

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_relay_link_opens_the_client_and_a_screenshot_is_shown_at_its_size() {
    let Some(xvfb) = crate::support::xvfb::Xvfb::start("320x200x24") else { return };
    let Some(browser) = Browser::start().await else { return };
    let (mut run, _home, _dirs) = start_run_with_env(&["--embedded-relay"], &[("DISPLAY", &xvfb.display)]);
    let link = run.wait_event("pairing")["url"].as_str().unwrap().to_owned();
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    browser.press("Screen").await;
    browser.press("Screenshot").await;
    let image = browser.control("image", "Screenshot of the laptop's screen, 320 × 200").await;
    browser
        .wait_script(
            "the screenshot to load",
            "const i = document.getElementById('shot'); return i.complete && i.naturalWidth > 0;",
        )
        .await;
    let size = browser
        .script("const i = document.getElementById('shot'); return [i.naturalWidth, i.naturalHeight];", vec![])
        .await;
    assert_eq!(size, json!([320, 200]));
    assert!(image.attr("src").await.unwrap().unwrap().starts_with("blob:"));
    let download = browser.control("link", "Download").await;
    assert!(download.attr("download").await.unwrap().unwrap().ends_with(".png"));
    // Zoom shows it at its own size.
    browser.press("Zoom").await;
    browser.wait_script("zoomed", "return document.getElementById('shot-frame').classList.contains('zoomed');").await;
    browser.close().await;
    run.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voxa_open_prints_the_loopback_link_and_the_page_works_from_it() {
    let Some(browser) = Browser::start().await else { return };
    let (run, home, _dirs) = start_run_with_env(&["--embedded-relay"], &[]);
    let port = run.port;
    let at = home.clone();
    let opened = tokio::task::spawn_blocking(move || voxa_cmd(&at).args(["open", "--no-browser", "--json"]).output())
        .await
        .unwrap()
        .unwrap();
    assert!(opened.status.success(), "{}", String::from_utf8_lossy(&opened.stderr));
    let printed: Value = serde_json::from_slice(&opened.stdout).unwrap();
    assert_eq!(printed["opened"], false);
    let url = printed["url"].as_str().unwrap().to_owned();
    let token = std::fs::read_to_string(home.join("auth_token")).unwrap().trim().to_owned();
    let ticket = url.strip_prefix(&format!("http://127.0.0.1:{port}/#ticket=")).unwrap_or_else(|| panic!("{url}"));
    assert!(!url.contains(&token), "the link carries a ticket, never the token: {url}");
    assert!(voxa::secret::Secret::parse_hex128(ticket).is_ok(), "{url}");

    // Without --no-browser the link goes to the desktop's opener (a stand-in here).
    let opener_dir = tempfile::tempdir().unwrap();
    let handed = opener_dir.path().join("handed");
    let script = format!("#!/bin/sh\nprintf '%s' \"$1\" > '{}'\n", handed.display());
    std::fs::write(opener_dir.path().join("xdg-open"), script).unwrap();
    std::fs::set_permissions(opener_dir.path().join("xdg-open"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let path = format!("{}:{}", opener_dir.path().display(), std::env::var("PATH").unwrap_or_default());
    let at = home.clone();
    let opened = tokio::task::spawn_blocking(move || voxa_cmd(&at).args(["open", "--json"]).env("PATH", path).output())
        .await
        .unwrap()
        .unwrap();
    assert!(opened.status.success(), "{}", String::from_utf8_lossy(&opened.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&opened.stdout).unwrap()["opened"], true);
    let handed = std::fs::read_to_string(&handed).unwrap();
    assert!(
        handed.starts_with(&format!("http://127.0.0.1:{port}/#ticket=")) && handed != url,
        "a new ticket: {handed}"
    );

    browser.open(&url).await;
    browser.wait_connection("online").await;
    let address = browser.page_address().await;
    assert_eq!(address, format!("http://127.0.0.1:{port}/"), "the token stays out of the address bar");
    browser.type_into("Command", "echo through-the-loopback-page").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command", |t| t.contains("through-the-loopback-page\n")).await;
    // A laptop in hosted mode on its own page: nobody hosts voice, and "Call" says why.
    browser.press("Call").await;
    let said = browser.wait_text("#call-error", "why there is no voice", |t| !t.is_empty()).await;
    assert!(said.starts_with("There is no voice on this laptop") && said.ends_with("(no-voice-laptop)"), "{said}");
    browser.close().await;
    run.stop();

    // With no agent running, it says what to do.
    let at = home.clone();
    let refused = tokio::task::spawn_blocking(move || voxa_cmd(&at).args(["open", "--no-browser"]).output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("not running") && !said.contains(&token), "{said}");
}

// ---------------------------------------------------------------------------------------------
// Pictures for the README

/// Screenshots of the real page at 390×844: terminal, files, screenshot view, offline, dark.
/// Written to `docs/` when `VOXA_DOCS_SCREENSHOTS` is set, else to a temporary directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pictures_of_the_real_page_at_phone_size() {
    let Some(xvfb) = crate::support::xvfb::Xvfb::start("1280x800x24") else { return };
    // A patterned desktop, so the screenshot shows what it is.
    let _ = std::process::Command::new("xsetroot")
        .args(["-display", &xvfb.display, "-mod", "16", "16", "-fg", "#4d6fa8", "-bg", "#2e4a78"])
        .status();
    let Some(browser) = Browser::start().await else { return };
    let scratch = tempfile::tempdir().unwrap();
    let out = match std::env::var_os("VOXA_DOCS_SCREENSHOTS") {
        Some(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"),
        None => scratch.path().to_owned(),
    };
    std::fs::create_dir_all(&out).unwrap();
    let relay = TestRelay::start().await;
    let relay_flag = format!("http://{}", relay.addr);
    let (mut run, _home, _dirs) = start_run_with_env(&["--relay", &relay_flag], &[("DISPLAY", &xvfb.display)]);
    let link = run.wait_event("pairing")["url"].as_str().unwrap().to_owned();
    browser.pair(&link).await;
    browser.wait_connection("online").await;

    for command in [
        "mkdir -p src docs && printf '# Notes\\n\\n- ship the web client\\n- measure the page\\n' > NOTES.md",
        "printf 'fn main() {\\n    println!(\"hello\");\\n}\\n' > src/main.rs && ls -l",
        "git --version; uname -sr",
    ] {
        browser.type_into("Command", command).await;
        browser.press("Run").await;
        browser.wait_script("the command's end", "return !document.getElementById('run').disabled;").await;
    }
    save_picture(&browser, &out, "web-terminal.png").await;

    browser.press("Files").await;
    browser.control("button", "NOTES.md").await.click().await.unwrap();
    browser.control("textbox", "File content").await;
    browser.script("window.scrollTo(0, 0);", vec![]).await;
    save_picture(&browser, &out, "web-files.png").await;

    // No voice on this laptop: Call says so before it is pressed, and why once it is.
    browser.press("Status").await;
    browser.press("Call").await;
    browser.wait_text("#call-error", "why there is no voice", |t| !t.is_empty()).await;
    browser.script("window.scrollTo(0, 0);", vec![]).await;
    save_picture(&browser, &out, "web-status.png").await;
    browser.press("Close").await;
    browser.wait_script("the call panel to close", "return document.getElementById('call-panel').hidden;").await;

    browser.press("Screen").await;
    browser.press("Screenshot").await;
    browser
        .wait_script(
            "the screenshot to load",
            "const i = document.getElementById('shot'); return i.complete && i.naturalWidth > 0;",
        )
        .await;
    save_picture(&browser, &out, "web-screenshot.png").await;

    // The machine sheet, Forget asking first.
    machine_sheet(&browser, &out, "web-machines.png", false).await;

    browser.press("Terminal").await;
    run.stop();
    browser.wait_connection("laptop offline").await;
    save_picture(&browser, &out, "web-offline.png").await;
    browser.close().await;

    let Some(dark) = Browser::start_with(Scheme::Dark).await else { return };
    let (mut run, _home, _dirs) = start_run_with_env(&["--relay", &relay_flag], &[]);
    let link = run.wait_event("pairing")["url"].as_str().unwrap().to_owned();
    dark.pair(&link).await;
    dark.wait_connection("online").await;
    assert_eq!(dark.script("return matchMedia('(prefers-color-scheme: dark)').matches;", vec![]).await, json!(true));
    for command in ["echo 'dark mode follows the system setting'", "ls -a"] {
        dark.type_into("Command", command).await;
        dark.press("Run").await;
        dark.wait_script("the command's end", "return !document.getElementById('run').disabled;").await;
    }
    save_picture(&dark, &out, "web-dark.png").await;
    machine_sheet(&dark, &out, "web-machines-dark.png", true).await;
    dark.close().await;
    run.stop();
}

/// The machine sheet opened from the header (its laptop asking "Forget …?" when `ask`), then
/// closed again.
async fn machine_sheet(browser: &Browser, out: &Path, name: &str, ask: bool) {
    browser.client.find(fantoccini::Locator::Css("#machine")).await.unwrap().click().await.unwrap();
    browser.wait_script("the sheet to open", "return document.getElementById('machines').open;").await;
    if ask {
        let forget = browser
            .script(
                "return document.querySelector('#machine-list [aria-label^=\"Forget \"]').getAttribute('aria-label');",
                vec![],
            )
            .await;
        browser.press(forget.as_str().unwrap()).await;
        browser.wait_text(".forget-question", "the question", |t| !t.is_empty()).await;
    }
    save_picture(browser, out, name).await;
    if ask {
        browser.press("Keep it").await;
    }
    browser.press("Done").await;
    browser.wait_script("the sheet to close", "return !document.getElementById('machines').open;").await;
}

/// A private relay (one with a relay token) works from a browser: the page carries the token from
/// the link's fragment as a WebSocket subprotocol, the relay checks it and names back only
/// `voxa.1`; a link without it gets nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_reaches_a_relay_that_asks_for_a_relay_token() {
    const RELAY_TOKEN: &str = "team relay/token+7f3e";
    let Some(browser) = Browser::start().await else { return };
    let token = Some(voxa::secret::Secret::from_string(RELAY_TOKEN.into()));
    let relay = TestRelay::with_config(voxa::relay::RelayConfig { token: token.clone(), ..Default::default() }).await;
    let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut options, secrets) = options(&home, &workspace, Some(relay.url()));
    options.dial.bearer = token;
    let agent = voxa::agent::start(options, TcpListener::bind("127.0.0.1:0").await.unwrap(), CancellationToken::new())
        .await
        .unwrap();
    let (code, auth) = (secrets.relay_code.expose(), secrets.auth_token.expose());
    let encoded = RELAY_TOKEN.replace(' ', "%20").replace('/', "%2F").replace('+', "%2B");

    // Without the relay token the relay refuses the page's socket before the upgrade.
    browser.pair(&format!("http://{}/#code={code}&token={auth}", relay.addr)).await;
    browser.wait_connection("reconnecting").await;
    // With it, in the fragment only: online, and a tool call goes through.
    browser.open(&format!("http://{}/#code={code}&token={auth}&relay_token={encoded}", relay.addr)).await;
    browser.wait_connection("online").await;
    let protocol = browser
        .script(
            "return new Promise((done) => { const s = new WebSocket(arguments[0], ['voxa.1', arguments[1]]); \
             s.onopen = () => { done(s.protocol); s.close(); }; s.onerror = () => done('refused'); });",
            vec![
                json!(format!("ws://{}/ws?code={code}", relay.addr)),
                json!(format!("voxa-relay-token.{}", base64_url(RELAY_TOKEN))),
            ],
        )
        .await;
    assert_eq!(protocol, "voxa.1");
    agent.stop().await;
    browser.close().await;
}

fn base64_url(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}
