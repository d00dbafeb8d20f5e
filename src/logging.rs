//! Log setup for the binary: `RUST_LOG`, else the verbosity flags, on stderr — with the WebSocket
//! library held at `debug`, whatever is asked, because its `trace` level prints frame payloads and
//! request heads (hello tokens, bearer headers, relay codes in query strings).
//!
//! The filter tells its most verbose level, so an event below it (the WebSocket library's `trace`
//! on every poll and frame, through the `log` crate too) is skipped where it is written instead of
//! being built and judged: a terminal's flood costs no logging.

use tracing::level_filters::LevelFilter;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt as _, FilterFn};
use tracing_subscriber::prelude::*;
use tracing_subscriber::Layer;

/// Log targets whose `trace` output carries message contents.
const PAYLOAD_LOGGERS: [&str; 2] = ["tungstenite", "tokio_tungstenite"];

/// True for events that may be logged: anything but the payload loggers' `trace` level.
pub fn is_secret_safe(metadata: &Metadata<'_>) -> bool {
    let payload_logger = PAYLOAD_LOGGERS
        .iter()
        .any(|name| metadata.target().strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with("::")));
    !(payload_logger && *metadata.level() > Level::DEBUG)
}

/// A layer that vetoes what [`is_secret_safe`] refuses, for any subscriber.
pub fn secret_safe<S: Subscriber>() -> impl Layer<S> {
    secret_safe_filter()
}

/// [`is_secret_safe`] as a filter that lets every level through as far as it is concerned, so that
/// the filter it is combined with sets the most verbose level (without the hint, the combination
/// would have none, and every event would be built and judged).
fn secret_safe_filter() -> FilterFn<fn(&Metadata<'_>) -> bool> {
    filter_fn(is_secret_safe as fn(&Metadata<'_>) -> bool).with_max_level_hint(LevelFilter::TRACE)
}

/// Installs the global subscriber: `RUST_LOG` overrides `default` (a level such as `warn`).
pub fn init(default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(false);
    // Both filters on the one layer: a span no layer wants (the relay's per-connection `debug`
    // spans at the default level) is then never created, rather than entered on every poll. The
    // `log` crate's level follows the combined filter's (set by `try_init`).
    let _ = tracing_subscriber::registry().with(fmt.with_filter(filter.and(secret_safe_filter()))).try_init();
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::Filter;

    use super::*;

    #[test]
    fn the_filter_tells_the_most_verbose_level_it_lets_through() {
        let combined = |env: &str| {
            let filter = EnvFilter::new(env).and(secret_safe_filter());
            Filter::<tracing_subscriber::Registry>::max_level_hint(&filter)
        };
        assert_eq!(combined("warn"), Some(LevelFilter::WARN));
        assert_eq!(combined("info,voxa=debug"), Some(LevelFilter::DEBUG));
        assert_eq!(combined("trace"), Some(LevelFilter::TRACE));
    }
}
