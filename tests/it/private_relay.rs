//! A team's private relay (one started with a relay token) from a phone's browser, with the link
//! `voxa run` prints, and the link's socket the page opens while it loads: the real relay, the
//! real `voxa run` and headless Chromium.

use crate::support::browser::Browser;
use crate::support::harness::*;
use crate::support::run::start_run_with_env;
use crate::support::RunningVoxa;

/// The relay token of the tests' private relay: the characters a link must carry safely.
const RELAY_TOKEN: &str = "team relay/token+9c4d";

/// A private relay asking for [`RELAY_TOKEN`], and `voxa run` on it with that token; what the run
/// holds (its home and folders) lives as long as the returned value.
async fn private_relay_and_run() -> (TestRelay, RunningVoxa, impl Sized) {
    let token = Some(voxa::secret::Secret::from_string(RELAY_TOKEN.into()));
    let relay = TestRelay::with_config(voxa::relay::RelayConfig { token, ..Default::default() }).await;
    let relay_url = format!("http://{}", relay.addr);
    let (run, home, dirs) = start_run_with_env(&["--relay", &relay_url], &[("VOXA_RELAY_TOKEN", RELAY_TOKEN)]);
    (relay, run, (home, dirs))
}

/// A team's private relay works from a phone with the link `voxa run` prints: the agent's relay
/// token rides in the link's fragment, the page presents it and goes online; the same link
/// without it is refused by the relay and the page never gets online.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_link_voxa_run_prints_for_a_private_relay_goes_online_in_a_browser() {
    let Some(browser) = Browser::start().await else { return };
    let (_relay, mut run, _kept) = private_relay_and_run().await;
    let pairing = run.wait_event("pairing");
    assert_eq!(pairing["relay_token_in_link"], true, "{pairing}");
    let link = pairing["url"].as_str().unwrap().to_owned();
    let parsed = url::Url::parse(&link).unwrap();
    assert_eq!(parsed.query(), None, "the token is never in the query: {link}");
    run.wait_event("relay_connected");

    let without: String = link.split("&relay_token=").next().unwrap().to_owned();
    // A relay that refuses the page's socket: the page says why before any laptop could answer.
    browser.pair(&without).await;
    let said = browser.wait_connection("private relay: this link lacks its token").await;
    assert!(said.contains("open the one voxa pair prints"), "{said}");
    // The whole link: the laptop proves the pairing this time, and is added with its name.
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    browser.close().await;
    run.stop();
}

/// Counts the page's WebSockets from before its first script: each with the script that made it
/// (a classic script's address; `module` for the page's modules) and the socket itself.
const COUNT_SOCKETS: &str = "const Native = WebSocket; const made = []; \
    Object.defineProperty(window, 'testSockets', { value: made }); \
    window.WebSocket = class extends Native { constructor(url, protocols) { super(url, protocols); \
    made.push({ by: document.currentScript ? document.currentScript.src : 'module', socket: this }); } };";

/// The page's sockets so far: who made each, and its `readyState`.
async fn sockets(browser: &Browser) -> Vec<(String, u64)> {
    let made = browser.script("return testSockets.map((s) => [s.by, s.socket.readyState]);", vec![]).await;
    let made: Vec<(String, u64)> = serde_json::from_value(made).unwrap();
    made.into_iter().map(|(by, state)| (by.rsplit('/').next().unwrap_or_default().to_owned(), state)).collect()
}

/// A browser whose pages count their sockets ([`COUNT_SOCKETS`]), and `voxa run` on a private
/// relay, connected, with its pairing link.
async fn counting_page() -> Option<(Browser, RunningVoxa, String, impl Sized)> {
    let browser = Browser::start().await?;
    let (relay, mut run, kept) = private_relay_and_run().await;
    let link = run.wait_event("pairing")["url"].as_str().unwrap().to_owned();
    run.wait_event("relay_connected");
    browser.cdp("Page.addScriptToEvaluateOnNewDocument", serde_json::json!({ "source": COUNT_SOCKETS })).await;
    Some((browser, run, link, (relay, kept)))
}

/// A link's session socket opens while the page's modules download (address.js), with the relay
/// token as the session's own would offer it, and the session takes it over: a first visit makes
/// one socket, not two. A link the page refuses leaves no socket open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_links_socket_opens_while_the_page_loads_and_its_session_takes_it_over() {
    let Some((browser, run, link, _kept)) = counting_page().await else { return };

    // A link whose ticket is damaged: the page says so, and the socket it opened early is closed.
    let ticket = link.split("ticket=").nth(1).unwrap().split('&').next().unwrap().to_owned();
    browser.open("about:blank").await;
    browser.open(&link.replace(&ticket, "not-a-ticket")).await;
    browser
        .wait_script(
            "the damaged link's message",
            "return document.body.innerText.includes('This pairing link is damaged');",
        )
        .await;
    browser.wait_script("the early socket closed", "return testSockets.every((s) => s.socket.readyState === 3);").await;
    let made = sockets(&browser).await;
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].0.starts_with("address."), "made by address.js: {made:?}");

    // The whole link: online on the one socket address.js opened.
    browser.open("about:blank").await;
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    let made = sockets(&browser).await;
    assert_eq!(made.len(), 1, "one socket: {made:?}");
    assert!(made[0].0.starts_with("address.") && made[0].1 == 1, "address.js's, open: {made:?}");
    browser.close().await;
    run.stop();
}

/// On a network so slow that the page's modules take longer than the laptop's hello deadline, the
/// laptop refuses the session on the early socket and the page connects again and goes online.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_slower_than_the_hello_deadline_connects_again_and_goes_online() {
    let Some((browser, run, link, _kept)) = counting_page().await else { return };
    browser.cdp("Network.enable", serde_json::json!({})).await;
    // 64 kbit/s: the first screen's 90 KiB take about 11 s, past the 5 s deadline.
    let slow =
        serde_json::json!({"offline": false, "latency": 0, "downloadThroughput": 8000, "uploadThroughput": 8000});
    browser.cdp("Network.emulateNetworkConditions", slow).await;
    browser.open("about:blank").await;
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    let made = sockets(&browser).await;
    assert_eq!(made.len(), 2, "the early socket and one more: {made:?}");
    assert!(made[0].0.starts_with("address.") && made[0].1 == 3, "the early one, closed: {made:?}");
    assert_eq!(made[1], ("module".to_owned(), 1), "{made:?}");
    browser.close().await;
    run.stop();
}
