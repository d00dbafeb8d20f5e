//! The relay's Prometheus metrics; the edge serves them on `--metrics-listen` as `GET /metrics`.
//!
//! Every label value is one of the relay's own constants (a role, a direction, a status code, a
//! limit's name): nothing a client sends ever becomes a label or a value. Per-frame counters are
//! resolved once at start, so counting a frame is an atomic add and no lookup. A service beside
//! the core registers its own metrics here too, under the same rule.

use std::sync::{Mutex, MutexGuard, PoisonError};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::protocol::PeerRole;

/// Media type of the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Statuses (HTTP) and close codes (WebSocket) the relay refuses or ends a client with.
pub const REFUSALS: [u16; 15] = [400, 401, 404, 405, 426, 429, 431, 503, 1002, 1007, 1009, 1013, 4001, 4003, 4004];

type Labels = [(&'static str, &'static str); 1];

/// Counters and gauges of one relay, and the registry that prints them (with the metrics a
/// service beside the core registers in it).
pub struct RelayMetrics {
    registry: Mutex<Registry>,
    connections: Gauge,
    sockets: [Gauge; 2],
    pairs: Gauge,
    frames: [Counter; 2],
    bytes: [Counter; 2],
    refusals: [(u16, Counter); REFUSALS.len()],
    queue_full: Counter,
    buffered: Gauge,
    limits: Family<Labels, Gauge>,
}

impl Default for RelayMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RelayMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayMetrics").finish_non_exhaustive()
    }
}

/// Index of a role in the per-role arrays; for directions, the sending role.
pub(super) fn role_index(role: PeerRole) -> usize {
    match role {
        PeerRole::Agent => 0,
        PeerRole::Phone => 1,
    }
}

impl RelayMetrics {
    /// A fresh set of metrics, all zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("voxa_relay");
        let connections = Gauge::default();
        registry.register("connections_open", "TCP connections open, upgraded or not", connections.clone());
        let sockets_family = Family::<Labels, Gauge>::default();
        registry.register("sockets", "Upgraded WebSockets by role", sockets_family.clone());
        let sockets = [PeerRole::Agent, PeerRole::Phone]
            .map(|role| sockets_family.get_or_create(&[("role", role.as_str())]).clone());
        let pairs = Gauge::default();
        registry.register("pairs", "Relay codes with both an agent and a phone connected", pairs.clone());

        let frames_family = Family::<Labels, Counter>::default();
        registry.register("frames_forwarded", "Data frames handed to the other side", frames_family.clone());
        let bytes_family = Family::<Labels, Counter>::default();
        registry.register("bytes_forwarded", "Payload bytes handed to the other side", bytes_family.clone());
        let directions = ["agent_to_phone", "phone_to_agent"];
        let frames = directions.map(|direction| frames_family.get_or_create(&[("direction", direction)]).clone());
        let bytes = directions.map(|direction| bytes_family.get_or_create(&[("direction", direction)]).clone());

        let refusals_family = Family::<Labels, Counter>::default();
        registry.register(
            "refusals",
            "Requests refused (HTTP status) and sockets ended by the relay (WebSocket close code)",
            refusals_family.clone(),
        );
        let refusals =
            REFUSALS.map(|code| (code, refusals_family.get_or_create(&[("reason", reason_label(code))]).clone()));
        let queue_full = Counter::default();
        registry.register(
            "queue_full_events",
            "Frames that found the receiver's queue full (the sender then waits)",
            queue_full.clone(),
        );
        let buffered = Gauge::default();
        registry.register(
            "buffered_bytes",
            "Bytes of messages held in queues and partial reads, counted against the memory budget",
            buffered.clone(),
        );
        let limits = Family::<Labels, Gauge>::default();
        registry.register("limit", "The limits this relay runs with", limits.clone());
        RelayMetrics {
            registry: Mutex::new(registry),
            connections,
            sockets,
            pairs,
            frames,
            bytes,
            refusals,
            queue_full,
            buffered,
            limits,
        }
    }

    /// The registry, locked (poisoning ignored: registering and encoding leave it whole).
    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets `add` register more metrics (a service's) beside the relay's, once at start.
    pub(crate) fn register(&self, add: impl FnOnce(&mut Registry)) {
        add(&mut self.registry());
    }

    /// Records one of the relay's limits (its name is the caller's constant).
    pub(crate) fn set_limit(&self, name: &'static str, value: usize) {
        self.limits.get_or_create(&[("limit", name)]).set(i64::try_from(value).unwrap_or(i64::MAX));
    }

    pub(crate) fn connection_opened(&self) {
        self.connections.inc();
    }

    pub(crate) fn connection_closed(&self) {
        self.connections.dec();
    }

    pub(super) fn socket_joined(&self, role: PeerRole) {
        self.sockets[role_index(role)].inc();
    }

    pub(super) fn socket_left(&self, role: PeerRole) {
        self.sockets[role_index(role)].dec();
    }

    pub(super) fn pair_formed(&self) {
        self.pairs.inc();
    }

    pub(super) fn pair_broken(&self) {
        self.pairs.dec();
    }

    /// Counts a part of a data frame `from` one side handed to the other (`fin`: its last part).
    pub(super) fn forwarded(&self, from: PeerRole, len: usize, fin: bool) {
        let direction = role_index(from);
        if fin {
            self.frames[direction].inc();
        }
        self.bytes[direction].inc_by(len as u64);
    }

    /// Counts a refusal or an ending by its status or close code.
    pub(crate) fn refused(&self, code: u16) {
        if let Some((_, counter)) = self.refusals.iter().find(|(known, _)| *known == code) {
            counter.inc();
        }
    }

    pub(super) fn queue_full(&self) {
        self.queue_full.inc();
    }

    /// Adds bytes held against the memory budget.
    pub(super) fn buffer(&self, bytes: usize) {
        self.buffered.inc_by(bytes as i64);
    }

    /// Removes bytes no longer held.
    pub(super) fn unbuffer(&self, bytes: usize) {
        self.buffered.dec_by(bytes as i64);
    }

    /// Bytes held against the memory budget.
    pub(super) fn buffered(&self) -> usize {
        usize::try_from(self.buffered.get()).unwrap_or(0)
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry());
        text
    }
}

fn reason_label(code: u16) -> &'static str {
    match code {
        400 => "400",
        401 => "401",
        404 => "404",
        405 => "405",
        426 => "426",
        429 => "429",
        431 => "431",
        503 => "503",
        1002 => "1002",
        1007 => "1007",
        1009 => "1009",
        1013 => "1013",
        4001 => "4001",
        4003 => "4003",
        4004 => "4004",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_up_in_the_text_format() {
        let metrics = RelayMetrics::new();
        metrics.forwarded(PeerRole::Agent, 32, true);
        metrics.forwarded(PeerRole::Agent, 8, true);
        metrics.forwarded(PeerRole::Phone, 5, true);
        metrics.refused(401);
        metrics.refused(4001);
        metrics.refused(4001);
        metrics.refused(1234);
        metrics.socket_joined(PeerRole::Phone);
        metrics.set_limit("max_connections", 7);
        let extra = Counter::<u64>::default();
        metrics.register(|registry| registry.register("extra", "A service's own counter", extra.clone()));
        extra.inc();
        let text = metrics.encode();
        for line in [
            r#"voxa_relay_frames_forwarded_total{direction="agent_to_phone"} 2"#,
            r#"voxa_relay_bytes_forwarded_total{direction="agent_to_phone"} 40"#,
            r#"voxa_relay_frames_forwarded_total{direction="phone_to_agent"} 1"#,
            r#"voxa_relay_refusals_total{reason="401"} 1"#,
            r#"voxa_relay_refusals_total{reason="4001"} 2"#,
            r#"voxa_relay_refusals_total{reason="503"} 0"#,
            r#"voxa_relay_sockets{role="phone"} 1"#,
            r#"voxa_relay_sockets{role="agent"} 0"#,
            r#"voxa_relay_limit{limit="max_connections"} 7"#,
            "voxa_relay_extra_total 1",
        ] {
            assert!(text.lines().any(|got| got == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("1234") && !text.contains(r#"reason="other""#), "unknown codes are not counted");
    }
}
