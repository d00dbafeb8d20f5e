//! `voxa open`: the web client on the running agent's loopback port, in the default browser. The
//! link carries a one-time pairing ticket ([`crate::tickets`]) in its fragment, which the browser
//! never sends to a server: the page trades it for the token inside its sealed session, and the
//! link the browser keeps in its history opens nothing after that.

use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};
use serde_json::json;

use super::Settings;
use crate::cli::OpenArgs;
use crate::secret::Secret;

/// Program that opens a URL in the default browser on this platform.
#[cfg(target_os = "macos")]
const OPENER: &str = "open";
#[cfg(not(target_os = "macos"))]
const OPENER: &str = "xdg-open";

/// The loopback page's link: `http://127.0.0.1:<port>/#ticket=<ticket>`.
pub fn loopback_link(port: u16, ticket: &Secret) -> String {
    format!("http://127.0.0.1:{port}/#ticket={}", ticket.expose())
}

/// Runs `voxa open`.
pub fn run_open(settings: &Settings, args: &OpenArgs) -> Result<()> {
    let home = &settings.home;
    if home.load_secrets()?.is_none() {
        bail!("this machine is not paired yet: run `voxa pair` or `voxa run` first");
    }
    let Some(agent) = home.running_agent()? else {
        bail!("the agent is not running: start it with `voxa run`, then `voxa open`");
    };
    let ticket = crate::tickets::issue(home)?;
    let url = loopback_link(agent.port, &ticket.secret);
    let opened = !args.no_browser && open_in_browser(&url)?;
    let human = if opened {
        format!(
            "opened the web client in your browser; if nothing appeared, open this link (it works once, within 15 \
             minutes):\n{url}\n"
        )
    } else {
        format!("open this link in a browser on this machine (it works once, within 15 minutes):\n{url}\n")
    };
    settings.printer.result(&json!({ "url": url, "opened": opened }), human)?;
    Ok(())
}

/// Hands the link to the desktop's opener. `false` when there is none (a server without a
/// desktop): the link is printed instead.
fn open_in_browser(url: &str) -> Result<bool> {
    let spawned =
        Command::new(OPENER).arg(url).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    match spawned {
        Ok(mut child) => {
            let status = child.wait().with_context(|| format!("{OPENER} did not finish"))?;
            Ok(status.success())
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err).with_context(|| format!("could not start {OPENER}")),
    }
}
