//! (in progress)
use crate::cli::{RunArgs, Settings};
pub async fn command(_settings: &Settings, _args: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("voxa run is not built yet")
}
