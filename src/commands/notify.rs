//! `voxa notify test`: one notification to every browser that turned notifications on, and what
//! each push service answered. Sent from this process with the home's VAPID key, as the agent
//! would send it; endpoints show by host only (the rest of the URL lets anyone push to that browser).

use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::Settings;
use crate::cli::NotifyCommand;
use crate::error::Exit;
use crate::net::dial::DialOptions;
use crate::push::{Notice, Notifier, NotifyEvent, Outcome, Urgency};

/// `voxa notify …`.
pub async fn run_notify(settings: &Settings, command: NotifyCommand) -> Result<Exit> {
    match command {
        NotifyCommand::Test => test(settings).await,
    }
}

async fn test(settings: &Settings) -> Result<Exit> {
    let home = &settings.home;
    home.check()?;
    let config = home.load_config()?;
    let dial = DialOptions::default().with_proxy_from_env()?;
    let pairing = home.load_secrets()?.map(|s| crate::push::pairing_id(&s.relay_code)).unwrap_or_default();
    let (notifier, _queue) = Notifier::new(home, pairing, config.notifications, config.push, dial)?;
    let notice = Notice {
        event: NotifyEvent::Test,
        topic: "voxa-notify-test".into(),
        title: "voxa".into(),
        body: "Notifications work: this laptop can reach you.".into(),
        open: String::new(),
        urgency: Urgency::Normal,
        ttl: Duration::from_secs(10 * 60),
    };
    let deliveries = notifier.send_to_all(&notice).await?;
    let mut human = String::new();
    if deliveries.is_empty() {
        human.push_str(
            "No browser has turned notifications on yet. Open the web client, tap \"Turn on notifications\" \
             and allow them (on iPhone: add the page to the home screen first, then open it from there).\n",
        );
    }
    let mut all_delivered = !deliveries.is_empty();
    let mut rows = Vec::new();
    for d in &deliveries {
        let (status, answer) = match &d.result {
            Ok(Outcome::Delivered(s)) => (Some(*s), format!("delivered (HTTP {s})")),
            Ok(Outcome::Gone(s)) => (Some(*s), format!("gone (HTTP {s}); subscription removed")),
            Ok(Outcome::Later { status, .. }) => (Some(*status), format!("busy (HTTP {status}) after retries")),
            Ok(Outcome::Refused(s)) => (Some(*s), format!("refused (HTTP {s})")),
            Err(err) => (None, format!("failed: {err:#}")),
        };
        all_delivered &= matches!(d.result, Ok(Outcome::Delivered(_)));
        human.push_str(&format!("{}: {answer}\n", d.host));
        rows.push(json!({"host": d.host, "status": status, "answer": answer, "removed": d.removed}));
    }
    settings.printer.result(&json!({"sent": rows.len(), "deliveries": rows}), human)?;
    Ok(if all_delivered { Exit::Ok } else { Exit::Failure })
}
