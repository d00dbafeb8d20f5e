//! Back fast (docs/PROTOCOL.md, "Back fast" and "Receipts"): headless Chromium at a 150 ms round
//! trip loses its network with a command typed into the outbox, then gets it back; the figure is
//! the time from the page's `online` event to that command's result applied on the page, read in
//! the page (`performance.now()`), so WebDriver's polling adds nothing to it.

use crate::child::start_agent;
use crate::report::Report;
use crate::web::browser::Browser;

const AREA: &str = "back fast";
/// The emulated phone network's round trip.
const RTT_MS: f64 = 150.0;

pub fn run(report: &mut Report, samples: usize) {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("back bench skipped: no runtime: {err}");
            return;
        }
    };
    runtime.block_on(measure(report, samples));
}

async fn network(browser: &Browser, online: bool) {
    let conditions = serde_json::json!({
        "offline": !online, "latency": RTT_MS, "downloadThroughput": -1, "uploadThroughput": -1,
    });
    browser.cdp("Network.emulateNetworkConditions", conditions).await;
}

async fn measure(report: &mut Report, samples: usize) {
    let Some(browser) = Browser::start().await else { return };
    let agent = start_agent(&[], &["--embedded-relay"], &[], &["embedded_relay", "started"]);
    let relay = agent.embedded_relay.clone().expect("the embedded relay's address");
    browser.cdp("Network.enable", serde_json::json!({})).await;
    network(&browser, true).await;
    browser.open(&format!("http://{relay}/#code={}&token={}", agent.code, agent.token)).await;
    browser.add_laptop().await;
    browser.wait_connection("laptop online").await;
    let mut times = Vec::with_capacity(samples);
    for n in 0..samples {
        network(&browser, false).await;
        browser.wait_connection("reconnecting").await;
        let label = format!("back-{n}");
        browser.type_into("Command", &format!("echo {label}")).await;
        browser.press("Run").await;
        let watch = format!(
            "window.__back = {{}}; \
             addEventListener('online', () => {{ window.__back.online = performance.now(); }}, {{ once: true }}); \
             const list = document.getElementById('outbox'); \
             new MutationObserver((_, observer) => {{ \
               const done = [...list.children].some((li) => li.dataset.state === 'applied' && li.textContent.includes('{label}')); \
               if (done && window.__back.online) {{ window.__back.applied = performance.now(); observer.disconnect(); }} \
             }}).observe(list, {{ subtree: true, childList: true, characterData: true, attributes: true }});"
        );
        browser.script(&watch, vec![]).await;
        network(&browser, true).await;
        browser.wait_script("the command applied", "return !!(window.__back && window.__back.applied);").await;
        let took = browser.script("return window.__back.applied - window.__back.online;", vec![]).await;
        times.push(took.as_f64().unwrap_or(f64::NAN));
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| times.get(((times.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(f64::NAN);
    let (p50, p95) = (at(0.5), at(0.95));
    report.add(
        AREA,
        format!("`online` → the command typed offline applied, Chromium at {RTT_MS:.0} ms round trip (p50, p95 of {samples})"),
        format!("{p50:.0} ms, {p95:.0} ms"),
        "≤ 2 s",
    );
    browser.close().await;
}
