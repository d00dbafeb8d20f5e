//! (in progress)
use crate::cli::Settings;
use crate::error::Exit;
pub async fn run(_settings: &Settings) -> anyhow::Result<Exit> {
    anyhow::bail!("voxa status is not built yet")
}
