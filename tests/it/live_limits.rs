//! What hosted voice lets one caller and one day spend (docs/PROTOCOL.md, "Hosted voice"): calls
//! per client address at once and per minute, the operator's daily minutes budget (kept across a
//! restart), and all of it in `/metrics` — with the real relay, a real agent and the test Gemini
//! server.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use voxa::hosted::budget::{Budget, BUDGET_FILE};
use voxa::hosted::{Hosting, LiveConfig};
use voxa::net::dial::DialOptions;
use voxa::relay::metrics::RelayMetrics;
use voxa::relay::RelayConfig;
use voxa::secret::Secret;

use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::support::harness::*;
use crate::support::live::{hosted_agent, live_phone, live_phone_with, start_call};
use crate::support::phone::{Phone, KEY};

/// A relay hosting voice against `fake` with `tweak` applied, and the metrics it counts in.
async fn relay_with(fake: &FakeGemini, tweak: impl FnOnce(&mut LiveConfig)) -> (TestRelay, Arc<RelayMetrics>) {
    let mut live = LiveConfig::new(fake.config(KEY));
    tweak(&mut live);
    let metrics = Arc::new(RelayMetrics::new());
    let config =
        RelayConfig { service: Some(Hosting::service(live)), metrics: Arc::clone(&metrics), ..Default::default() };
    (TestRelay::with_config(config).await, metrics)
}

/// The value of the metric line `name` (with its labels, if any).
fn metric(metrics: &str, name: &str) -> f64 {
    let line = metrics.lines().find(|line| line.split_once(' ').is_some_and(|(key, _)| key == name));
    let line = line.unwrap_or_else(|| panic!("{name} missing from\n{metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The phone's answer to `call_start`: `call_started` or `call_error`.
async fn call_start_answer(phone: &mut Phone) -> serde_json::Value {
    phone.send(json!({"type":"call_start"})).await;
    loop {
        if let crate::support::phone::Frame::Json(value) = phone.next().await {
            if value["type"] == "call_started" || value["type"] == "call_error" {
                return value;
            }
        }
    }
}

#[tokio::test]
async fn an_address_runs_at_most_its_calls_and_a_trusted_proxy_header_names_the_address() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let (relay, metrics) = relay_with(&fake, |live| {
        live.calls_per_address = 1;
        live.client_header = Some("X-Forwarded-For".into());
    })
    .await;
    let agent = hosted_agent(&relay).await;
    let mut first = live_phone(&relay, &agent).await;
    let (conn, _) = start_call(&mut first, &mut fake).await;

    // A second phone from the same address (no header: the TCP peer's, 127.0.0.1) is refused.
    let mut second = live_phone(&relay, &agent).await;
    let refused = call_start_answer(&mut second).await;
    assert_eq!(refused["code"], "too-many-calls", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("already runs as many calls on the relay as its operator allows (1 at once)"),
        "{refused}"
    );

    // Behind the proxy the last entry of the header is the client: another address, its own share.
    let forwarded = |value: &str| DialOptions {
        headers: vec![("X-Forwarded-For".into(), Secret::from_string(value.into()))],
        ..Default::default()
    };
    let mut elsewhere = live_phone_with(&relay, &agent, forwarded("127.0.0.1, 203.0.113.9")).await;
    let (other, _) = start_call(&mut elsewhere, &mut fake).await;
    assert_ne!(other, conn);
    // The same address however it is written before its last entry: refused.
    let mut same = live_phone_with(&relay, &agent, forwarded("198.51.100.1, 203.0.113.9")).await;
    assert_eq!(call_start_answer(&mut same).await["code"], "too-many-calls");

    // The first call's end frees its address's place.
    first.send(json!({"type":"call_end"})).await;
    first.expect("call_ended").await;
    fake.expect_closed(conn).await;
    let mut admitted = false;
    for _ in 0..100 {
        if call_start_answer(&mut second).await["type"] == "call_started" {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(admitted, "the place comes free once the call's Gemini session is closed");

    let text = metrics.encode();
    assert!(metric(&text, r#"voxa_relay_live_refusals_total{reason="address-calls"}"#) >= 2.0, "{text}");
    assert_eq!(metric(&text, r#"voxa_relay_live_refusals_total{reason="budget-spent"}"#), 0.0);
    assert_eq!(metric(&text, r#"voxa_relay_limit{limit="live_calls_per_address"}"#), 1.0);
    assert_eq!(metric(&text, r#"voxa_relay_limit{limit="live_call_starts_per_minute"}"#), 10.0);
    assert_eq!(metric(&text, "voxa_relay_live_budget_left_seconds"), -1.0, "no budget: -1");
}

#[tokio::test]
async fn an_address_starts_at_most_its_calls_per_minute() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let (relay, metrics) = relay_with(&fake, |live| live.starts_per_minute = 2).await;
    let agent = hosted_agent(&relay).await;
    let mut phone = live_phone(&relay, &agent).await;
    for _ in 0..2 {
        let (conn, _) = start_call(&mut phone, &mut fake).await;
        phone.send(json!({"type":"call_end"})).await;
        phone.expect("call_ended").await;
        fake.expect_closed(conn).await;
    }
    let refused = call_start_answer(&mut phone).await;
    assert_eq!(refused["code"], "too-many-calls", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("in the last minute") && message.contains("(2 a minute); try again in"), "{message}");
    let text = metrics.encode();
    assert_eq!(metric(&text, r#"voxa_relay_live_refusals_total{reason="address-starts"}"#), 1.0, "{text}");
    assert_eq!(metric(&text, r#"voxa_relay_live_refusals_total{reason="address-calls"}"#), 0.0);
}

#[tokio::test]
async fn a_spent_budget_ends_the_running_call_refuses_the_next_and_stays_spent_after_a_restart() {
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(BUDGET_FILE);
    let daily = Duration::from_millis(1_500);
    let budget = || Arc::new(Budget::open(Some(daily), Some(file.clone())).unwrap());
    let (relay, metrics) = relay_with(&fake, |live| live.budget = budget()).await;
    let agent = hosted_agent(&relay).await;
    let mut phone = live_phone(&relay, &agent).await;

    // The call runs until the day's time is spent: then call_error budget-spent, then call_ended.
    let (conn, _) = start_call(&mut phone, &mut fake).await;
    let spent = phone.expect("call_error").await;
    assert_eq!(spent["code"], "budget-spent", "{spent}");
    assert!(spent["message"].as_str().unwrap().contains("midnight UTC"), "{spent}");
    phone.expect("call_ended").await;
    fake.expect_closed(conn).await;
    // The next call is refused before Gemini is dialled.
    let refused = call_start_answer(&mut phone).await;
    assert_eq!(refused["code"], "budget-spent", "{refused}");

    let text = metrics.encode();
    assert!(metric(&text, "voxa_relay_live_budget_used_seconds") >= 1.5, "{text}");
    assert_eq!(metric(&text, "voxa_relay_live_budget_left_seconds"), 0.0, "{text}");
    assert_eq!(metric(&text, "voxa_relay_live_budget_cutoffs_total"), 1.0);
    assert_eq!(metric(&text, r#"voxa_relay_live_refusals_total{reason="budget-spent"}"#), 1.0);
    assert_eq!(metric(&text, r#"voxa_relay_limit{limit="live_budget_seconds_per_day"}"#), 1.0, "whole seconds");
    relay.kill().await;
    drop(agent);

    // A restarted relay reads the day's count back: still spent, and its metrics say so at once.
    let (relay, metrics) = relay_with(&fake, |live| live.budget = budget()).await;
    let agent = hosted_agent(&relay).await;
    let text = metrics.encode();
    assert!(metric(&text, "voxa_relay_live_budget_used_seconds") >= 1.5, "{text}");
    assert_eq!(metric(&text, "voxa_relay_live_budget_left_seconds"), 0.0, "{text}");
    let mut phone = live_phone(&relay, &agent).await;
    let setups = || fake.received().iter().filter(|event| matches!(event.kind, Kind::Setup(_))).count();
    let before = setups();
    assert_eq!(call_start_answer(&mut phone).await["code"], "budget-spent");
    assert_eq!(setups(), before, "Gemini is not dialled for a refused call");
}

#[tokio::test]
async fn voxa_relay_takes_the_limits_as_flags_and_serves_them_and_the_budget_in_metrics() {
    use crate::support::{voxa_bin, RunningVoxa};
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let key_file = dir.path().join("gemini.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // Today's count as a relay of this home left it: 90 s of a 2-minute day.
    let today = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()[..10].to_owned();
    std::fs::write(home.join(BUDGET_FILE), json!({"day": today, "used_ms": 90_000}).to_string()).unwrap();
    let relay = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(voxa_bin());
        cmd.env("VOXA_HOME", &home).env("VOXA_GEMINI_URL", "ws://127.0.0.1:1");
        for name in ["VOXA_RELAY_TOKEN", "VOXA_PROXY_TOKEN", "GEMINI_API_KEY", "RUST_LOG"] {
            cmd.env_remove(name);
        }
        cmd.args(["relay", "--json", "--listen", "127.0.0.1:0", "--open-live", "--gemini-key-file"]).arg(&key_file);
        cmd.args(extra);
        cmd
    };
    let refused = relay(&["--live-calls-per-address", "0"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--live-calls-per-address"), "{refused:?}");

    let flags = [
        "--metrics-listen",
        "127.0.0.1:0",
        "--live-calls-per-address",
        "3",
        "--live-starts-per-minute",
        "7",
        "--live-minutes-per-day",
        "2",
        "--live-client-header",
        "X-Real-IP",
    ];
    let mut child = RunningVoxa::spawn(relay(&flags));
    let listening = child.wait_event("relay_listening");
    let url = listening["metrics"].as_str().unwrap().to_owned();
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").trim_end_matches("/metrics").parse().unwrap();
    // The metrics server answers as soon as it listens; the relay records its limits as it starts.
    let mut text = String::new();
    for _ in 0..500 {
        let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n").await;
        assert_eq!(status, 200);
        text = body;
        if text.contains("live_calls_per_address") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(&text, r#"voxa_relay_limit{limit="live_calls_per_address"}"#), 3.0, "{text}");
    assert_eq!(metric(&text, r#"voxa_relay_limit{limit="live_call_starts_per_minute"}"#), 7.0);
    assert_eq!(metric(&text, r#"voxa_relay_limit{limit="live_budget_seconds_per_day"}"#), 120.0);
    assert_eq!(metric(&text, "voxa_relay_live_budget_used_seconds"), 90.0, "the day's count survives the restart");
    assert_eq!(metric(&text, "voxa_relay_live_budget_left_seconds"), 30.0);
    child.stop();

    // A file the relay did not write is refused, naming it; nothing is overwritten.
    std::fs::write(home.join(BUDGET_FILE), "not json").unwrap();
    let refused = relay(&[]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains(BUDGET_FILE), "{refused:?}");
    assert_eq!(std::fs::read_to_string(home.join(BUDGET_FILE)).unwrap(), "not json");
}
