//! (in progress)
use crate::cli::{RelayArgs, Settings};
pub async fn command(_settings: &Settings, _args: RelayArgs) -> anyhow::Result<()> {
    anyhow::bail!("voxa relay is not built yet")
}
