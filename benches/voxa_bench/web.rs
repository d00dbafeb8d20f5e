//! Web client figures: the page's weight, the time from opening the pairing link to "online"
//! through the embedded relay in headless Chromium, and from pressing "Run" to the command's first
//! output on screen. Both times are read from the page's own performance marks, so WebDriver's
//! polling adds nothing to them.

#[path = "../../tests/it/browser.rs"]
mod browser;

use self::browser::Browser;
use crate::child::start_agent;
use crate::report::{percentiles, Report};

const AREA: &str = "web client";

pub fn run(report: &mut Report, samples: usize) {
    let weight = voxa::net::web::page_weight();
    report.add(
        AREA,
        "page weight (every file, uncompressed)",
        format!("{:.1} KiB", weight as f64 / 1024.0),
        "≤ 150 KiB",
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("web bench skipped: no runtime: {err}");
            return;
        }
    };
    runtime.block_on(measure(report, samples));
}

async fn measure(report: &mut Report, samples: usize) {
    let Some(browser) = Browser::start().await else { return };
    let agent = start_agent(&[], &["--embedded-relay"], &[], &["embedded_relay", "started"]);
    let relay = agent.embedded_relay.clone().expect("the embedded relay's address");
    let link = format!("http://{relay}/?code={}&token={}", agent.code, agent.token);

    let mut online = Vec::with_capacity(samples);
    for _ in 0..samples {
        browser.open(&link).await;
        browser.wait_connection("online").await;
        online.push(mark(&browser, "voxa:online").await);
    }
    let (median, _) = percentiles(&mut online);
    report.add(
        AREA,
        format!("open the link → \"online\" via the embedded relay, Chromium (median of {samples})"),
        format!("{median:.0} ms"),
        "",
    );

    let mut first_output = Vec::with_capacity(samples);
    for n in 0..samples {
        browser.script("performance.clearMarks();", vec![]).await;
        browser.type_into("Command", &format!("echo sample-{n}")).await;
        browser.press("Run").await;
        browser.wait_script("the command's end", "return !document.getElementById('run').disabled;").await;
        first_output.push(mark(&browser, "voxa:first-output").await - mark(&browser, "voxa:run").await);
    }
    let (median, _) = percentiles(&mut first_output);
    report.add(
        AREA,
        format!("\"Run\" → first output on screen, `echo` (median of {samples})"),
        format!("{median:.0} ms"),
        "",
    );
    browser.close().await;
}

/// Time of a performance mark, in ms since the page's navigation started.
async fn mark(browser: &Browser, name: &str) -> f64 {
    browser.wait_script(name, &format!("return performance.getEntriesByName('{name}').length > 0;")).await;
    let value = browser.script(&format!("return performance.getEntriesByName('{name}')[0].startTime;"), vec![]).await;
    value.as_f64().unwrap_or(f64::NAN)
}
