//! (in progress)
use crate::cli::{CallArgs, Settings};
use crate::error::Exit;
pub async fn run(_settings: &Settings, _args: CallArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("voxa call is not built yet")
}
