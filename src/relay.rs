//! (in progress)
use crate::cli::{RelayArgs, Settings};
pub async fn command(_settings: &Settings, _args: RelayArgs) -> anyhow::Result<()> {
    anyhow::bail!("voxa relay is not built yet")
}
/// Relay settings.
#[derive(Default)]
pub struct RelayConfig {}
pub async fn run(
    _listener: tokio::net::TcpListener,
    _config: RelayConfig,
    _shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    anyhow::bail!("relay not built")
}
