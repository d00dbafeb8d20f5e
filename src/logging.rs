//! Log setup for the binary: `RUST_LOG`, else the verbosity flags, on stderr — with the WebSocket
//! library held at `debug`, whatever is asked, because its `trace` level prints frame payloads and
//! request heads (hello tokens, bearer headers, relay codes in query strings).

use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt as _};
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
    filter_fn(is_secret_safe)
}

/// Installs the global subscriber: `RUST_LOG` overrides `default` (a level such as `warn`).
pub fn init(default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(false);
    // Both filters on the one layer: a span no layer wants (the relay's per-connection `debug`
    // spans at the default level) is then never created, rather than entered on every poll.
    let _ = tracing_subscriber::registry().with(fmt.with_filter(filter.and(filter_fn(is_secret_safe)))).try_init();
}
