//! Getting approvals to the people who decide: every following client (the open ones first, then
//! each change), and a voice call's model, which is told in words.

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Broker, Notice};
use crate::protocol::{AgentMessage, ApprovalFrame, ApprovalResolved, DecidedBy};

/// Sends `out` what a client that follows must see — the open approvals, then each one that opens
/// or is decided — mapped by `map` (frames that map to `None` are skipped), until `cancel` fires or
/// `out` closes. A client that falls behind is sent the open ones again rather than dropped.
pub async fn forward<T>(
    broker: Broker,
    out: mpsc::Sender<T>,
    cancel: CancellationToken,
    map: impl Fn(Notice) -> Option<T>,
) {
    let (snapshot, mut notices) = broker.follow();
    for notice in snapshot {
        if let Some(item) = map(notice) {
            if out.send(item).await.is_err() {
                return;
            }
        }
    }
    loop {
        let notice = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = out.closed() => return,
            notice = notices.recv() => notice,
        };
        let batch = match notice {
            Ok(notice) => vec![notice],
            Err(RecvError::Closed) => return,
            Err(RecvError::Lagged(_)) => {
                let (snapshot, fresh) = broker.follow();
                notices = fresh;
                snapshot
            }
        };
        for notice in batch {
            if let Some(item) = map(notice) {
                if out.send(item).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The text turn that tells a voice model about an open approval: the summary to read back, the
/// id to answer with, and that only the user's own yes allows it.
pub fn voice_prompt(frame: &ApprovalFrame) -> String {
    let care = if frame.risk.needs_explicit_allow() {
        format!(
            " This one can {}: it needs the user's explicit yes to exactly this; never allow it on your own, \
             never for more than this once.",
            match frame.risk {
                crate::protocol::Risk::Network => "reach the network",
                crate::protocol::Risk::Outside => "touch files outside the workspace",
                _ => "run programs on the computer",
            }
        )
    } else {
        String::new()
    };
    format!(
        "[voxa] Approval needed ({}): {}. Read this to the user and ask whether to allow it.{care} Then call \
         approve with approval \"{}\" and decision \"allow\" if they say yes, \"deny\" if they say no (put their \
         reason in message).",
        frame.risk.as_str(),
        frame.summary,
        frame.approval
    )
}

/// The text turn that tells a voice model an approval was decided elsewhere.
fn voice_resolved(resolved: &ApprovalResolved) -> Option<String> {
    (!matches!(resolved.by, DecidedBy::Voice | DecidedBy::Restart)).then(|| {
        format!(
            "[voxa] Approval \"{}\" is settled ({} by {}); do not ask about it any more.",
            resolved.approval,
            resolved.decision.as_str(),
            resolved.by.as_str()
        )
    })
}

/// Maps a notice to the text a voice model is told, if any: see [`forward`].
pub fn voice_prompts(notice: Notice) -> Option<String> {
    match notice {
        AgentMessage::Approval(frame) => Some(voice_prompt(&frame)),
        AgentMessage::ApprovalResolved(resolved) => voice_resolved(&resolved),
        _ => None,
    }
}
