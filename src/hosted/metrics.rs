//! Hosted voice's metrics: the calls it runs, the `call_start`s it refused and the daily budget.
//! They join the relay's registry ([`PhoneService::register`](crate::relay::PhoneService)), so
//! `/metrics` shows them as `voxa_relay_…` beside the relay's; every label value is one of the
//! constants here.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Why `/live` refused a `call_start` (the `reason` label of `live_refusals`).
pub const LIVE_REFUSALS: [&str; 4] = ["at-capacity", "address-calls", "address-starts", "budget-spent"];

type Labels = [(&'static str, &'static str); 1];
type Seconds = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Counters and gauges of one relay's hosting.
pub struct HostedMetrics {
    calls: Gauge,
    refusals_family: Family<Labels, Counter>,
    refusals: [Counter; LIVE_REFUSALS.len()],
    budget_used: Seconds,
    budget_left: Seconds,
    budget_cutoffs: Counter,
}

impl std::fmt::Debug for HostedMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedMetrics").finish_non_exhaustive()
    }
}

impl Default for HostedMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl HostedMetrics {
    /// A fresh set of metrics, all zero.
    pub fn new() -> Self {
        let refusals_family = Family::<Labels, Counter>::default();
        let refusals = LIVE_REFUSALS.map(|reason| refusals_family.get_or_create(&[("reason", reason)]).clone());
        HostedMetrics {
            calls: Gauge::default(),
            refusals_family,
            refusals,
            budget_used: Seconds::default(),
            budget_left: Seconds::default(),
            budget_cutoffs: Counter::default(),
        }
    }

    /// Adds them to `registry` (the relay's, prefixed `voxa_relay_`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("hosted_calls", "Voice calls the relay hosts at /live", self.calls.clone());
        let refusals = self.refusals_family.clone();
        registry.register("live_refusals", "Hosted calls refused at call_start, by reason", refusals);
        registry.register(
            "live_budget_used_seconds",
            "Call time hosted today (UTC) against the daily budget",
            self.budget_used.clone(),
        );
        registry.register(
            "live_budget_left_seconds",
            "Call time left today (UTC); -1 without a daily budget",
            self.budget_left.clone(),
        );
        registry.register(
            "live_budget_cutoffs",
            "Hosted calls ended because the daily budget was spent",
            self.budget_cutoffs.clone(),
        );
    }

    /// A hosted voice call started (`1`) or ended (`-1`).
    pub(crate) fn call(&self, change: i64) {
        self.calls.inc_by(change);
    }

    /// Counts a refused `call_start`; `reason` is one of [`LIVE_REFUSALS`].
    pub(crate) fn refused(&self, reason: &'static str) {
        if let Some(index) = LIVE_REFUSALS.iter().position(|known| *known == reason) {
            self.refusals[index].inc();
        }
    }

    /// The daily budget's state: time used today and time left (`None`: no budget).
    pub(crate) fn budget(&self, used: Duration, left: Option<Duration>) {
        self.budget_used.set(used.as_secs_f64());
        self.budget_left.set(left.map_or(-1.0, |left| left.as_secs_f64()));
    }

    /// A hosted call was ended because the daily budget was spent.
    pub(crate) fn budget_cutoff(&self) {
        self.budget_cutoffs.inc();
    }

    /// The metrics in the Prometheus text format, as the relay's registry prints them.
    #[cfg(test)]
    pub(crate) fn encode(&self) -> String {
        let mut registry = Registry::with_prefix("voxa_relay");
        self.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_up_in_the_text_format_under_the_relay_s_prefix() {
        let metrics = HostedMetrics::new();
        metrics.refused("address-calls");
        metrics.refused("budget-spent");
        metrics.refused("budget-spent");
        metrics.refused("made-up");
        metrics.budget(Duration::from_millis(90_500), Some(Duration::from_secs(30)));
        metrics.budget_cutoff();
        metrics.call(1);
        let text = metrics.encode();
        for line in [
            r#"voxa_relay_live_refusals_total{reason="address-calls"} 1"#,
            r#"voxa_relay_live_refusals_total{reason="budget-spent"} 2"#,
            r#"voxa_relay_live_refusals_total{reason="at-capacity"} 0"#,
            "voxa_relay_live_budget_used_seconds 90.5",
            "voxa_relay_live_budget_left_seconds 30.0",
            "voxa_relay_live_budget_cutoffs_total 1",
            "voxa_relay_hosted_calls 1",
        ] {
            assert!(text.lines().any(|got| got == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("made-up"), "unknown reasons are not counted");
    }
}
