//! The relay code `voxa pair --rotate` replaced. For [`RETIRED_CODE_WINDOW`] after the rotation
//! the agent still dials it, so a phone holding the old pairing link is answered instead of
//! waiting on a code nobody dials: it gets a normal challenge, and whatever its hello proves, it
//! is refused with `bearer-refused` (the web client then says the link is no longer valid). No
//! session ever opens on a retired code, so nothing there can run a tool. After the window the
//! code is no longer dialled.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, Instrument};

use super::context::AgentContext;
use super::gate::{Gate, HelloVerdict, TokenGate};
use super::link::{LinkEvent, RelayLink};
use crate::protocol::{ErrorCode, Hello};
use crate::state::RetiredCode;

/// How long after `pair --rotate` the replaced relay code is still answered.
pub const RETIRED_CODE_WINDOW: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The gate of a retired code: it challenges like the live one and refuses every hello.
pub struct RetiredGate {
    /// The current token, to tell apart in the log a stale link from a current one used on the
    /// wrong code. Both are refused.
    pub current: TokenGate,
}

impl Gate for RetiredGate {
    fn admit(&self, hello: &Hello, challenge: &str) -> Result<HelloVerdict, ErrorCode> {
        if self.current.admit(hello, challenge).is_ok() {
            info!("a client proved the current token on the retired relay code; refused: it must use the new link");
        }
        Err(ErrorCode::BearerRefused)
    }
}

/// Unix seconds of `time` (0 before the epoch).
pub fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Dials `retired` on `template`'s relay until `window` after its rotation has passed or the
/// agent stops. Does nothing when the window is already over.
pub fn spawn_retired_link(
    template: &RelayLink,
    retired: RetiredCode,
    window: Duration,
    ctx: &Arc<AgentContext>,
    shutdown: &CancellationToken,
) {
    let until = retired.rotated_at.checked_add(window).unwrap_or(retired.rotated_at);
    let Ok(left) = until.duration_since(SystemTime::now()) else { return };
    let events = template.events.clone();
    // Its own context: the retired link's connection state is not the live link's.
    let own = AgentContext::new(ctx.toolbox().clone(), ctx.tasks.clone());
    let link = RelayLink {
        url: template.relay.socket_url("/agent", retired.relay_code.expose()),
        ctx: Arc::new(own),
        events: None,
        ..template.clone()
    };
    if let Ok(mut shown) = ctx.status.retired_code_until.lock() {
        *shown = Some(unix_seconds(until));
    }
    if let Some(events) = &events {
        let _ = events.send(LinkEvent::RetiredCodeAnswered { until: unix_seconds(until) });
    }
    let stop = shutdown.child_token();
    let status = ctx.status.clone();
    let task = async move {
        let dialing = link.run(stop.clone());
        tokio::pin!(dialing);
        tokio::select! {
            _ = &mut dialing => return,
            _ = tokio::time::sleep(left) => stop.cancel(),
        }
        // Reported only once the link has closed its connection and stopped dialling.
        dialing.await;
        if let Ok(mut shown) = status.retired_code_until.lock() {
            *shown = None;
        }
        if let Some(events) = &events {
            let _ = events.send(LinkEvent::RetiredCodeEnded);
        }
    };
    ctx.tasks.spawn(task.instrument(info_span!("retired_relay_link")));
}
