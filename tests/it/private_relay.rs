//! A team's private relay (one started with a relay token) from a phone's browser, with the link
//! `voxa run` prints: the real relay, the real `voxa run` and headless Chromium.

use crate::support::browser::Browser;
use crate::support::harness::*;
use crate::support::run::start_run_with_env;

/// A team's private relay works from a phone with the link `voxa run` prints: the agent's relay
/// token rides in the link's fragment, the page presents it and goes online; the same link
/// without it is refused by the relay and the page never gets online.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_link_voxa_run_prints_for_a_private_relay_goes_online_in_a_browser() {
    const RELAY_TOKEN: &str = "team relay/token+9c4d";
    let Some(browser) = Browser::start().await else { return };
    let token = Some(voxa::secret::Secret::from_string(RELAY_TOKEN.into()));
    let relay = TestRelay::with_config(voxa::relay::RelayConfig { token, ..Default::default() }).await;
    let relay_url = format!("http://{}", relay.addr);
    let (mut run, _home, _dirs) = start_run_with_env(&["--relay", &relay_url], &[("VOXA_RELAY_TOKEN", RELAY_TOKEN)]);
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
