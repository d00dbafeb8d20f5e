//! The relay code `voxa pair --rotate` replaced. For [`RETIRED_CODE_WINDOW`] after the rotation
//! the agent still dials it, so a phone holding the old pairing link is answered instead of
//! waiting on a code nobody dials: it gets a normal challenge, and whatever its hello proves, it
//! is refused with `bearer-refused` (the web client then says the link is no longer valid). No
//! session ever opens on a retired code, so nothing there can run a tool. After the window the
//! code is no longer dialled.
//!
//! Also the rotation of a running agent ([`Rotation`]): it notices `pair --rotate` by the auth
//! token file changing, ends the sessions proven with the old token, moves its relay link to the
//! new code and answers the old one as above.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use super::context::AgentContext;
use super::gate::{Gate, HelloVerdict, TokenGate};
use super::link::{LinkEvent, RelayLink};
use crate::protocol::{ErrorCode, Hello};
use crate::secret::Secret;
use crate::state::{Home, RetiredCode, Secrets};

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
    let own = ctx.beside();
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

/// How often the running agent looks at the auth token file for a `pair --rotate`.
pub const ROTATION_POLL: Duration = Duration::from_millis(500);

/// The gate of this home's auth token as it is now. `pair --rotate` swaps the token underneath
/// ([`CurrentToken::rotate`]): every session proven with the old one has its revocation token
/// cancelled (the relay link and the loopback server end it `pairing-revoked`), and the next
/// hello is checked against the new token.
pub struct CurrentToken {
    now: RwLock<Generation>,
}

struct Generation {
    gate: Arc<TokenGate>,
    /// Cancelled when this token is replaced.
    replaced: CancellationToken,
}

impl CurrentToken {
    pub fn new(gate: TokenGate) -> Self {
        CurrentToken { now: RwLock::new(Generation { gate: Arc::new(gate), replaced: CancellationToken::new() }) }
    }

    fn current(&self) -> (Arc<TokenGate>, CancellationToken) {
        let now = self.now.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        (now.gate.clone(), now.replaced.clone())
    }

    /// From now on `token` opens sessions; the sessions of the previous token are ended.
    pub fn rotate(&self, token: Secret) {
        let mut now = self.now.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let gate = now.gate.with_token(token);
        let previous =
            std::mem::replace(&mut *now, Generation { gate: Arc::new(gate), replaced: CancellationToken::new() });
        previous.replaced.cancel();
    }
}

impl Gate for CurrentToken {
    fn admit(&self, hello: &Hello, challenge: &str) -> Result<HelloVerdict, ErrorCode> {
        let (gate, replaced) = self.current();
        match gate.admit(hello, challenge)? {
            HelloVerdict::Admitted(mut admission) => {
                admission.revoked = Some(replaced);
                Ok(HelloVerdict::Admitted(admission))
            }
            other => Ok(other),
        }
    }
}

/// What a rotation needs to move the agent: the gates to swap and the relay link to move.
pub struct Rotation {
    pub home: Home,
    pub gates: Vec<Arc<CurrentToken>>,
    /// The links on the current code (one per relay), each with the token that stops it; none
    /// without a relay.
    pub links: Vec<(RelayLink, CancellationToken)>,
    pub window: Duration,
    pub token: Secret,
    pub code: Secret,
}

impl Rotation {
    /// Watches the auth token file until `shutdown`; when `pair --rotate` changed the secrets,
    /// moves the agent to them at once: the old token's sessions end, the relay link dials the new
    /// code, and the old code is answered ("scan the new code") for the retired window.
    pub fn spawn(mut self, ctx: &Arc<AgentContext>, shutdown: &CancellationToken) {
        let tasks = ctx.tasks.clone();
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        let task = async move {
            let path = self.home.path(crate::state::AUTH_TOKEN_FILE);
            let mut seen = file_identity(&path);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(ROTATION_POLL) => {}
                }
                let now = file_identity(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                match self.home.load_secrets() {
                    Ok(Some(secrets)) if secrets.auth_token != self.token => self.apply(secrets, &ctx, &shutdown),
                    Ok(_) => {}
                    Err(err) => warn!("could not read the secrets after they changed: {err:#}"),
                }
            }
        };
        tasks.spawn(task.instrument(info_span!("rotation")));
    }

    /// Moves the agent to `secrets`.
    fn apply(&mut self, secrets: Secrets, ctx: &Arc<AgentContext>, shutdown: &CancellationToken) {
        for gate in &self.gates {
            gate.rotate(secrets.auth_token.clone());
        }
        info!("the pairing was rotated: sessions of the old token ended, the new token is in use");
        let old_code = std::mem::replace(&mut self.code, secrets.relay_code.clone());
        self.token = secrets.auth_token.clone();
        if old_code == secrets.relay_code {
            return;
        }
        for (index, (link, stop)) in std::mem::take(&mut self.links).into_iter().enumerate() {
            // The old code's connection closes (its phones heard `pairing-revoked` first); the same
            // gate, now on the new token, serves the new code.
            stop.cancel();
            let moved_stop = shutdown.child_token();
            let moved = RelayLink { url: link.relay.socket_url("/agent", secrets.relay_code.expose()), ..link.clone() };
            ctx.tasks.spawn(moved.clone().run(moved_stop.clone()).instrument(info_span!("relay_link")));
            let current = TokenGate::new(secrets.auth_token.clone(), "phone", false);
            // The retired code's window is told once, by the first relay's link.
            let events = link.events.clone().filter(|_| index == 0);
            let answering = RelayLink { gate: Arc::new(RetiredGate { current }), events, ..link };
            let retired = RetiredCode { relay_code: old_code.clone(), rotated_at: SystemTime::now() };
            spawn_retired_link(&answering, retired, self.window, ctx, shutdown);
            self.links.push((moved, moved_stop));
        }
    }
}

/// Identity of one version of a file (inode, size, mtime); `None` while it cannot be read.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}
