//! What turns into a notification while no client follows (the phone is in a pocket with the
//! page closed): an approval that opens, a coding-agent turn that ends, a session that fails.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::context::LiveStatus;
use crate::approvals::Broker;
use crate::protocol::{AgentMessage, ApprovalFrame};
use crate::protocol::{Event, SessionEvent};
use crate::push::{Notice, Notifier, NotifyEvent, Urgency};
use crate::sessions::SessionHost;

/// Pushes every approval that opens while nobody follows, until `cancel`.
pub async fn watch_approvals(broker: Broker, notifier: Notifier, status: Arc<LiveStatus>, cancel: CancellationToken) {
    let (_open, mut notices) = broker.follow();
    loop {
        let notice = tokio::select! {
            _ = cancel.cancelled() => return,
            notice = notices.recv() => notice,
        };
        match notice {
            Ok(AgentMessage::Approval(frame)) if status.followers.load(Ordering::SeqCst) == 0 => {
                notifier.notify(approval_notice(&frame));
            }
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}

/// "Claude wants to run npm test": the approval's summary, a tap opening it.
pub fn approval_notice(frame: &ApprovalFrame) -> Notice {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let left = Duration::from_millis(frame.expires_at.saturating_sub(now));
    Notice {
        event: NotifyEvent::Approval,
        topic: frame.approval.clone(),
        title: "The laptop asks for your approval".into(),
        body: frame.summary.clone(),
        open: format!("#approval={}", frame.approval),
        urgency: Urgency::High,
        // Worth nothing once it expired.
        ttl: left.max(Duration::from_secs(1)),
    }
}

/// Pushes every turn that ends and every session error while nobody follows, until `cancel`.
pub async fn watch_sessions(host: SessionHost, notifier: Notifier, status: Arc<LiveStatus>, cancel: CancellationToken) {
    let mut events = host.live_events();
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            event = events.recv() => event,
        };
        match event {
            Ok(event) if status.followers.load(Ordering::SeqCst) == 0 => {
                if let Some(notice) = session_notice(&host, &event) {
                    notifier.notify(notice);
                }
            }
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}

/// "Turn finished: …" or "Session failed: …" for the events that notify; `None` for the rest.
pub fn session_notice(host: &SessionHost, event: &SessionEvent) -> Option<Notice> {
    let title = host.info(&event.session).map(|info| info.title).unwrap_or_default();
    let (notify, heading, line, urgency) = match &event.event {
        Event::TurnEnd { ok: true, result, .. } => {
            (NotifyEvent::TurnEnd, "Turn finished", result.clone(), Urgency::Normal)
        }
        Event::TurnEnd { ok: false, result, .. } => {
            (NotifyEvent::SessionFailed, "Turn failed", result.clone(), Urgency::High)
        }
        Event::Error { message, .. } => (NotifyEvent::SessionFailed, "Session failed", message.clone(), Urgency::High),
        _ => return None,
    };
    let line = line.lines().find(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_owned();
    Some(Notice {
        event: notify,
        topic: event.session.clone(),
        title: if title.is_empty() { heading.to_owned() } else { format!("{heading}: {title}") },
        body: if line.is_empty() { heading.to_owned() } else { line },
        open: format!("#session={}", event.session),
        urgency,
        ttl: Duration::from_secs(60 * 60),
    })
}
