//! `GET /metrics` on its own listener (`--metrics-listen`): the core's metrics in the Prometheus
//! text format, and nothing else.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use super::shard::ACCEPT_BACKOFF;
use crate::net::http::{self, HeadError};
use crate::relay::core::metrics::{RelayMetrics, CONTENT_TYPE};

/// Serves `GET /metrics` on an already-bound listener until `shutdown` resolves.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<RelayMetrics>,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(err) => {
                debug!(%err, "metrics: accept failed");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        let metrics = Arc::clone(&metrics);
        let cancel = cancel.clone();
        tracker.spawn(async move {
            tokio::select! {
                result = answer(tcp, &metrics) => if let Err(err) = result {
                    debug!(err = %format_args!("{err:#}"), "metrics request failed");
                },
                () = cancel.cancelled() => {}
            }
        });
    }
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
    Ok(())
}

async fn answer(mut tcp: TcpStream, metrics: &RelayMetrics) -> anyhow::Result<()> {
    let head = match http::read_head(&mut tcp, http::HEAD_TIMEOUT).await {
        Ok((head, _)) => head,
        Err(HeadError::Io(err)) => return Err(err).context("reading a metrics request"),
        Err(HeadError::TimedOut) => return Ok(()),
        Err(_) => return http::respond(&mut tcp, 400, "Bad Request", "bad request").await.context("answering"),
    };
    let answered = match (head.method.as_str(), head.path.as_str()) {
        ("GET", "/metrics") => http::respond_typed(&mut tcp, 200, "OK", CONTENT_TYPE, &metrics.encode()).await,
        (_, "/metrics") => http::respond_with(&mut tcp, 405, "Method Not Allowed", &[("allow", "GET")], "").await,
        _ => http::respond(&mut tcp, 404, "Not Found", "not found").await,
    };
    answered.context("answering a metrics request")
}
