//! What turns into a notification while no client follows (the phone is in a pocket with the
//! page closed): an approval that opens, a coding-agent turn that ends, a session that fails.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::context::LiveStatus;
use crate::approvals::Broker;
use crate::protocol::{AgentMessage, ApprovalFrame, Frame};
use crate::protocol::{Event, SessionEvent};
use crate::push::{Notice, Notifier, NotifyEvent, Urgency};
use crate::sessions::SessionHost;
use crate::tools::{EnvRouter, FollowScope};

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

/// Approvals of environments remembered as pushed, so one told again (after the environment's
/// link came back) is pushed once; as many environments' names are kept.
const ENV_APPROVALS_REMEMBERED: usize = 1024;
/// How often the host follows its environments anew, to cover one paired (or a browser
/// subscribed) since.
const ENV_FOLLOW_RENEWED: Duration = Duration::from_secs(30);

/// Pushes every approval an environment opens while nobody follows this host, named with its
/// machine ("buildbox asks for your approval"), until `cancel`. While a browser is subscribed,
/// the host follows its environments for this itself, approvals only.
pub async fn watch_env_approvals(
    router: Arc<dyn EnvRouter>,
    notifier: Notifier,
    status: Arc<LiveStatus>,
    cancel: CancellationToken,
) {
    let scope = FollowScope { approvals: true, sessions: false };
    let mut names: HashMap<String, String> = HashMap::new();
    let mut pushed: VecDeque<String> = VecDeque::new();
    let (mut frames, mut following) = (None, CancellationToken::new());
    let mut renew = tokio::time::interval(ENV_FOLLOW_RENEWED);
    loop {
        let frame = tokio::select! {
            _ = cancel.cancelled() => return following.cancel(),
            // Followed again now and then, so an environment paired since is followed too (what
            // the others say again is pushed once); only while a browser takes this laptop's
            // pushes, for without one the host dials its environments only when a client follows.
            _ = renew.tick() => {
                following.cancel();
                let subscribed = notifier.subscriptions().load().is_ok_and(|kept| !kept.is_empty());
                if !subscribed || !notifier.wants(NotifyEvent::Approval) {
                    frames = None;
                    continue;
                }
                following = cancel.child_token();
                let (out, receiver) = tokio::sync::mpsc::channel(64);
                frames = Some(receiver);
                tokio::spawn(router.follow(HashMap::new(), scope, out, following.clone()));
                continue;
            }
            frame = next_frame(&mut frames) => match frame {
                Some(frame) => frame,
                // Nothing to follow (no environment yet): until the next renewal.
                None => { frames = None; continue }
            },
        };
        let Some(value) = frame.as_text().and_then(|text| serde_json::from_str::<Value>(text).ok()) else { continue };
        let env = value.get("env").and_then(Value::as_str).unwrap_or_default().to_owned();
        match value.get("type").and_then(Value::as_str) {
            // The feed says each environment's state, with its name, before anything of it.
            Some("environment") => {
                if let Some(name) = value.get("name").and_then(Value::as_str) {
                    if names.len() < ENV_APPROVALS_REMEMBERED || names.contains_key(&env) {
                        names.insert(env, name.to_owned());
                    }
                }
            }
            Some("approval") if status.followers.load(Ordering::SeqCst) == 0 => {
                let Ok(approval) = serde_json::from_value::<ApprovalFrame>(value) else { continue };
                if pushed.contains(&approval.approval) {
                    continue;
                }
                if pushed.len() == ENV_APPROVALS_REMEMBERED {
                    pushed.pop_front();
                }
                pushed.push_back(approval.approval.clone());
                let machine = names.get(&env).cloned().unwrap_or_else(|| crate::text::prefix(&env, 12).to_owned());
                notifier.notify(env_approval_notice(&approval, &machine));
            }
            _ => {}
        }
    }
}

/// The next frame of the host's follow of its environments; none while it follows nothing.
async fn next_frame(frames: &mut Option<tokio::sync::mpsc::Receiver<Frame>>) -> Option<Frame> {
    match frames {
        Some(frames) => frames.recv().await,
        None => std::future::pending().await,
    }
}

/// An environment's approval as a notification: its machine in the title.
pub fn env_approval_notice(frame: &ApprovalFrame, machine: &str) -> Notice {
    let mut notice = approval_notice(frame);
    notice.title = format!("{} asks for your approval", crate::text::prefix(machine, 64));
    notice
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

#[cfg(test)]
mod tests {
    use futures_util::future::BoxFuture;
    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::protocol::{ToolCall, ToolError};
    use crate::tools::ToolKind;

    /// A host's router over one environment "buildbox" whose follow says its state, then the
    /// same open approval twice (as after its link came back), then waits.
    struct OneEnvironment;

    impl EnvRouter for OneEnvironment {
        fn route(
            &self,
            _env: String,
            _call: ToolCall,
            _progress: mpsc::Sender<String>,
            _viewer: Option<mpsc::Sender<Frame>>,
            _cancel: CancellationToken,
        ) -> BoxFuture<'static, Result<Value, ToolError>> {
            Box::pin(std::future::pending())
        }

        fn follow(
            &self,
            _after: HashMap<String, HashMap<String, u64>>,
            scope: FollowScope,
            out: mpsc::Sender<Frame>,
            cancel: CancellationToken,
        ) -> BoxFuture<'static, ()> {
            assert_eq!(scope, FollowScope { approvals: true, sessions: false });
            Box::pin(async move {
                let state = json!({"type": "environment", "env": "K1", "name": "buildbox", "state": "reachable"});
                let approval = json!({"type": "approval", "approval": "a-1", "source": {"session": "s-1"},
                    "tool": "Write", "input": {}, "summary": "Claude wants to write notes.md", "risk": "write",
                    "expires_at": u64::MAX, "env": "K1"});
                for frame in [state, approval.clone(), approval] {
                    let _ = out.send(Frame::text(frame.to_string())).await;
                }
                cancel.cancelled().await;
            })
        }

        fn run_tool(&self, _kind: ToolKind, _args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn an_environments_approval_is_pushed_once_with_its_machine_and_not_while_a_client_follows() {
        let dir = tempfile::tempdir().unwrap();
        let home = crate::state::Home::at(dir.path().join("home"));
        home.ensure().unwrap();
        let settings = crate::config::NotificationSettings::default();
        let (notifier, mut queue) = Notifier::new(
            &home,
            "p".into(),
            settings,
            crate::config::PushSettings::default(),
            crate::net::dial::DialOptions::default(),
        )
        .unwrap();
        // Nothing is followed, so nothing pushed, before a browser takes the pushes.
        let quiet = CancellationToken::new();
        let status = Arc::new(LiveStatus::default());
        let watch =
            tokio::spawn(watch_env_approvals(Arc::new(OneEnvironment), notifier.clone(), status, quiet.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        quiet.cancel();
        watch.await.unwrap();
        assert!(queue.try_next().is_none(), "pushed with no browser subscribed");
        let point = [&[4u8][..], &[7u8; 64][..]].concat();
        let encode = |bytes: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes);
        let subscription = crate::protocol::PushSubscription {
            endpoint: "http://127.0.0.1:9/push".into(),
            keys: crate::protocol::PushKeys { p256dh: encode(&point), auth: encode(&[1u8; 16]) },
        };
        notifier.subscriptions().add("p", subscription, 1).unwrap();
        for followers in [0, 1] {
            let status = Arc::new(LiveStatus::default());
            status.followers.store(followers, Ordering::SeqCst);
            let cancel = CancellationToken::new();
            let watch =
                tokio::spawn(watch_env_approvals(Arc::new(OneEnvironment), notifier.clone(), status, cancel.clone()));
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
            watch.await.unwrap();
            let pushed: Vec<Notice> = std::iter::from_fn(|| queue.try_next()).collect();
            if followers == 0 {
                assert_eq!(pushed.len(), 1, "told twice, pushed once: {pushed:?}");
                assert_eq!(pushed[0].title, "buildbox asks for your approval");
                assert_eq!(pushed[0].body, "Claude wants to write notes.md");
                assert_eq!(pushed[0].open, "#approval=a-1");
            } else {
                assert!(pushed.is_empty(), "a client follows the host: {pushed:?}");
            }
        }
    }
}
