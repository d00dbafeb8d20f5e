//! (in progress)
use crate::cli::{EnvCommand, Settings};
use crate::error::Exit;
pub async fn command(_settings: &Settings, _command: EnvCommand) -> anyhow::Result<Exit> {
    anyhow::bail!("voxa env is not built yet")
}
