//! What turns into a notification: an approval that opens while no client follows (the phone is
//! in a pocket with the page closed). The session host's turn ends and failures join it once the
//! sessions are wired into the agent's context.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::context::LiveStatus;
use crate::approvals::Broker;
use crate::protocol::{AgentMessage, ApprovalFrame};
use crate::push::{Notice, Notifier, NotifyEvent, Urgency};

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
