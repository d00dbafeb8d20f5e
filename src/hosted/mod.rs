//! Hosted voice (docs/PROTOCOL.md, "Hosted voice"): `GET /live?code=` is a page's call socket,
//! served beside the relay as its [`PhoneService`]. The relay talks to the page only: nothing of
//! the pairing crosses this socket (no challenge, no hello, no session frame), and the relay never
//! takes a place in the pairing. It hosts the Gemini Live session with the operator's key and
//! sends the model's function calls to the page as `tool_call` frames; the page runs each inside
//! its own sealed session, labelled [`HOSTED_CALLER`] (so the laptop's `[policy] hosted` and audit
//! decide and record them), and answers with the laptop's `tool_result`.
//!
//! Decisions:
//! - A call starts only while a laptop holds the code at this relay, so the operator's key serves
//!   paired laptops; the page's `call_start` names the tools (its sealed `hello_ok` list), and
//!   exactly those, but `approve`, are declared.
//! - The relay's calls use ids starting with [`CALL_ID_PREFIX`] and a random part per socket.
//! - What the page does not answer, the relay never learns: a stranger holding a code reaches no
//!   tool, since its calls go to its own page, which has no session with the laptop.

pub mod budget;
pub mod limits;
pub mod metrics;
mod page;
mod session;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use tokio::time::timeout;
use tracing::{debug, info};

use self::budget::Budget;
use self::limits::{AddressLimits, AddressRefusal, AddressSlot};
use self::metrics::HostedMetrics;
use self::session::LiveSession;
use crate::gemini::{self, GeminiConfig};
#[cfg(doc)]
use crate::protocol::HOSTED_CALLER;
use crate::protocol::{AgentMessage, CallErrorCode, LIVE_CALL_PREFIX};
use crate::relay::{PhoneService, ServiceLine};
use crate::secret::Secret;

/// Hosted calls one relay runs at once unless its operator says otherwise.
pub const DEFAULT_MAX_CALLS: usize = 100;
/// Longest hosted call unless its operator says otherwise.
pub const DEFAULT_MAX_CALL_TIME: Duration = Duration::from_secs(30 * 60);
/// Start of the ids of the tool calls the relay makes for Gemini.
pub const CALL_ID_PREFIX: &str = LIVE_CALL_PREFIX;
/// Characters of the code's SHA-256 (hex) that name a call in the log.
pub const CODE_TAG_LEN: usize = 12;
/// Most tool names of a `hello_ok` declared to Gemini; the rest are left out.
pub const MAX_DECLARED_TOOLS: usize = 128;
/// Frames from the voice bridge waiting for the page.
const BRIDGE_QUEUE: usize = 64;
/// The model's `tool_call` and `cancel` frames waiting to go to the page.
const TO_PAGE_QUEUE: usize = 64;
/// Time a call gets to send its last frames when the relay shuts down (within the relay's grace).
const WIND_DOWN: Duration = Duration::from_secs(3);

/// What the relay needs to host voice calls.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// The operator's Gemini settings; the key never leaves the relay but in its header to Gemini.
    pub gemini: Arc<GeminiConfig>,
    /// Calls hosted at once; `call_start` beyond it gets `call_error` `at-capacity`.
    pub max_calls: usize,
    /// Longest call; it then ends with `call_ended`.
    pub max_call_time: Duration,
    /// Token `/live` requires instead of the relay token (`Authorization: Bearer`).
    pub proxy_token: Option<Secret>,
    /// Calls one client address runs at once; more get `call_error` `too-many-calls`.
    pub calls_per_address: usize,
    /// Calls one client address starts per minute; more get `call_error` `too-many-calls`.
    pub starts_per_minute: usize,
    /// The request header a trusted proxy sets to the client's address; `None`: the TCP peer's.
    pub client_header: Option<String>,
    /// The operator's daily call time; when spent, calls are refused and running ones end.
    pub budget: Arc<Budget>,
}

impl LiveConfig {
    /// Hosting with `gemini`, the default limits and no daily budget.
    pub fn new(gemini: GeminiConfig) -> Self {
        LiveConfig {
            gemini: Arc::new(gemini),
            max_calls: DEFAULT_MAX_CALLS,
            max_call_time: DEFAULT_MAX_CALL_TIME,
            proxy_token: None,
            calls_per_address: limits::DEFAULT_CALLS_PER_ADDRESS,
            starts_per_minute: limits::DEFAULT_STARTS_PER_MINUTE,
            client_header: None,
            budget: Arc::new(Budget::unlimited()),
        }
    }
}

/// A relay's hosting: its settings and the calls it runs. Give it to the relay as its
/// [`PhoneService`] (`RelayConfig::service`).
pub struct Hosting {
    config: LiveConfig,
    running: Arc<AtomicUsize>,
    per_address: Arc<AddressLimits>,
    metrics: Arc<HostedMetrics>,
}

/// Why a `call_start` was refused.
#[derive(Debug)]
enum Refusal {
    AtCapacity,
    Address(AddressRefusal),
    BudgetSpent,
}

impl Refusal {
    /// The `reason` label of the `live_refusals` metric.
    fn metric(&self) -> &'static str {
        match self {
            Refusal::AtCapacity => "at-capacity",
            Refusal::Address(refusal) => refusal.metric(),
            Refusal::BudgetSpent => "budget-spent",
        }
    }

    /// The `call_error` the phone gets.
    fn to_message(&self) -> AgentMessage {
        let (code, message) = match self {
            Refusal::AtCapacity => (CallErrorCode::AtCapacity, "the relay is at capacity; try again later".to_owned()),
            Refusal::Address(refusal) => (CallErrorCode::TooManyCalls, refusal.message()),
            Refusal::BudgetSpent => (CallErrorCode::BudgetSpent, BUDGET_SPENT.to_owned()),
        };
        AgentMessage::CallError { code, message }
    }
}

/// What the phone hears when the day's call time is spent.
const BUDGET_SPENT: &str = "the relay's voice minutes for today are spent (they come back at midnight UTC)";

impl Hosting {
    pub fn new(config: LiveConfig) -> Self {
        let per_address = AddressLimits::new(config.calls_per_address, config.starts_per_minute);
        let metrics = Arc::new(HostedMetrics::new());
        let (used, left) = config.budget.state();
        metrics.budget(used, left);
        Hosting { config, running: Arc::default(), per_address, metrics }
    }

    /// The relay's service for this hosting.
    pub fn service(config: LiveConfig) -> Arc<dyn PhoneService> {
        Arc::new(Hosting::new(config))
    }

    /// A place for one more call from `client`, if the day's budget, the limits of its address
    /// and the relay's limit allow it.
    fn admit(&self, client: IpAddr) -> Result<CallGuard, Refusal> {
        if self.config.budget.spent() {
            return Err(Refusal::BudgetSpent);
        }
        let address = self.per_address.admit(client).map_err(Refusal::Address)?;
        let previous = self.running.fetch_add(1, Ordering::AcqRel);
        if previous >= self.config.max_calls {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::AtCapacity);
        }
        self.metrics.call(1);
        Ok(CallGuard { running: Arc::clone(&self.running), metrics: Arc::clone(&self.metrics), _address: address })
    }

    /// Calls running now.
    fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }
}

impl PhoneService for Hosting {
    fn path(&self) -> &'static str {
        "/live"
    }

    /// `/live` takes the proxy token when one is set, else the relay token, as `/ws` does.
    fn token(&self) -> Option<&Secret> {
        self.config.proxy_token.as_ref()
    }

    fn serve(&self, line: ServiceLine) -> BoxFuture<'_, ()> {
        Box::pin(serve(line, self))
    }

    fn client_header(&self) -> Option<&str> {
        self.config.client_header.as_deref()
    }

    fn register(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    fn limits(&self) -> Vec<(&'static str, usize)> {
        let config = &self.config;
        let daily = config.budget.daily().map_or(0, |daily| daily.as_secs() as usize);
        vec![
            ("live_max_calls", config.max_calls),
            ("live_max_call_seconds", config.max_call_time.as_secs() as usize),
            ("live_calls_per_address", self.per_address.calls()),
            ("live_call_starts_per_minute", self.per_address.starts()),
            ("live_budget_seconds_per_day", daily),
        ]
    }
}

/// Counts a call against the limits (and in the metrics) until its Gemini session is closed.
struct CallGuard {
    running: Arc<AtomicUsize>,
    metrics: Arc<HostedMetrics>,
    _address: AddressSlot,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.metrics.call(-1);
    }
}

/// A code as the log names it: the first [`CODE_TAG_LEN`] hex characters of its SHA-256.
pub fn code_tag(code: &str) -> String {
    let digest = Sha256::digest(code.as_bytes());
    hex::encode(digest)[..CODE_TAG_LEN].to_owned()
}

/// Serves a `/live` socket until the page leaves, or the relay stops.
async fn serve(line: ServiceLine, hosting: &Hosting) {
    debug!("a page opened /live");
    let calls = LiveSession::new(hosting, line).run().await;
    // The call ends on its own once the session is gone; waiting for it here lets the relay's
    // shutdown see its log line written, unless Gemini is slower to close than the relay's
    // shutdown grace. The relay closes the socket meanwhile.
    if timeout(WIND_DOWN, calls.wait()).await.is_err() {
        debug!("hosted call still ending; leaving it");
    }
}

/// The one log line of a hosted call.
fn log_call(code: &str, started: SystemTime, summary: &gemini::CallSummary, failure: &str) {
    let usage = summary.usage;
    info!(
        code,
        start = %humantime::format_rfc3339_seconds(started),
        end = %humantime::format_rfc3339_seconds(SystemTime::now()),
        duration_s = summary.duration_s.unwrap_or(0.0),
        prompt_tokens = usage.prompt_token_count,
        response_tokens = usage.response_token_count,
        total_tokens = usage.total_token_count,
        failure,
        "hosted call"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_tags_are_short_sha256_prefixes() {
        let code = "0123456789abcdef0123456789abcdef";
        let tag = code_tag(code);
        assert_eq!(tag.len(), CODE_TAG_LEN);
        assert_eq!(tag, hex::encode(Sha256::digest(code.as_bytes()))[..CODE_TAG_LEN]);
        assert!(!code.contains(&tag));
    }

    #[test]
    fn the_call_limit_admits_up_to_its_maximum_and_frees_on_drop() {
        let gemini = GeminiConfig {
            api_key: Secret::from_string("k".into()),
            url: "ws://127.0.0.1:1".into(),
            model: "m".into(),
            voice: "Kore".into(),
            heartbeat: gemini::HEARTBEAT,
        };
        let hosting = Hosting::new(LiveConfig { max_calls: 2, calls_per_address: 9, ..LiveConfig::new(gemini) });
        let client = IpAddr::from([127, 0, 0, 1]);
        let first = hosting.admit(client).unwrap();
        let _second = hosting.admit(client).unwrap();
        assert!(matches!(hosting.admit(client), Err(Refusal::AtCapacity)));
        let metrics = &hosting.metrics;
        assert!(metrics.encode().contains("voxa_relay_hosted_calls 2"), "{}", metrics.encode());
        drop(first);
        let _third = hosting.admit(client).expect("the freed place");
        assert!(metrics.encode().contains("voxa_relay_hosted_calls 2"), "{}", metrics.encode());
    }
}
