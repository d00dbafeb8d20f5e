//! The web client's tests in a browser: a [`Scene`] (a relay and an agent in this process, and
//! Chromium at a phone's viewport), another [`Machine`] on the same relay, and what the tests
//! read of the page.

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::support::browser::{Browser, Scheme};
use crate::support::harness::*;

/// A relay and an agent in this process, and a browser.
pub(crate) struct Scene {
    pub(crate) relay: TestRelay,
    pub(crate) home: tempfile::TempDir,
    pub(crate) workspace: tempfile::TempDir,
    pub(crate) secrets: voxa::state::Secrets,
    pub(crate) agent: Option<voxa::agent::RunningAgent>,
    pub(crate) browser: Browser,
}

impl Scene {
    pub(crate) async fn start() -> Option<Scene> {
        Self::start_with(Scheme::Light).await
    }

    pub(crate) async fn start_with(scheme: Scheme) -> Option<Scene> {
        let browser = Browser::start_with(scheme).await?;
        let relay = TestRelay::start().await;
        let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_, secrets) = options(&home, &workspace, None);
        let mut scene = Scene { relay, home, workspace, secrets, agent: None, browser };
        scene.start_agent().await;
        Some(scene)
    }

    /// Starts the agent on this scene's home, as `voxa run` after a laptop restart would.
    pub(crate) async fn start_agent(&mut self) {
        let (options, secrets) = options(&self.home, &self.workspace, Some(self.relay.url()));
        self.secrets = secrets;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent = voxa::agent::start(options, listener, CancellationToken::new()).await.unwrap();
        self.agent = Some(agent);
    }

    pub(crate) async fn stop_agent(&mut self) {
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
    }

    pub(crate) fn code(&self) -> &str {
        self.secrets.relay_code.expose()
    }

    pub(crate) fn token(&self) -> &str {
        self.secrets.auth_token.expose()
    }

    /// The pairing link as voxa prints it: the secrets in the fragment, which the browser never sends.
    pub(crate) fn link(&self) -> String {
        format!("http://{}/#code={}&token={}", self.relay.addr, self.code(), self.token())
    }

    /// The link older versions printed (and their QR codes still hold): the secrets in the query.
    pub(crate) fn old_link(&self) -> String {
        format!("http://{}/?code={}&token={}", self.relay.addr, self.code(), self.token())
    }

    pub(crate) fn loopback(&self) -> SocketAddr {
        self.agent.as_ref().expect("the agent runs").loopback
    }

    /// Opens the pairing link, adds the laptop, and waits for "online".
    pub(crate) async fn open_online(&self) {
        self.browser.pair(&self.link()).await;
        self.browser.wait_connection("online").await;
    }

    pub(crate) fn workspace(&self) -> &Path {
        self.workspace.path()
    }

    pub(crate) async fn close(mut self) {
        self.stop_agent().await;
        self.browser.close().await;
    }
}

/// Another machine's agent on the same relay, with one file in its workspace.
pub(crate) struct Machine {
    pub(crate) home: tempfile::TempDir,
    _workspace: tempfile::TempDir,
    pub(crate) secrets: voxa::state::Secrets,
    pub(crate) agent: voxa::agent::RunningAgent,
}

impl Machine {
    pub(crate) async fn start(relay: &TestRelay, file: &str) -> Machine {
        let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(workspace.path().join(file), file).unwrap();
        let (options, secrets) = options(&home, &workspace, Some(relay.url()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent = voxa::agent::start(options, listener, CancellationToken::new()).await.unwrap();
        Machine { home, _workspace: workspace, secrets, agent }
    }
}

/// Text of the terminal output, as shown.
pub(crate) const TERMINAL: &str = "#commands-out";

/// Displayed controls smaller than a fingertip (44 × 44 CSS px): "id-or-text width×height".
/// A checkbox counts by its label, which is what takes the tap.
pub(crate) const SMALL_CONTROLS: &str = "const small = [];
    for (const el of document.querySelectorAll('button, a[href], select, input, textarea, summary')) {
      const target = el.matches('input[type=checkbox]') ? el.closest('label') : el;
      if (!target || target.getClientRects().length === 0) continue;
      const r = target.getBoundingClientRect();
      if (r.width < 44 || r.height < 44) {
        small.push(`${el.id || el.textContent.trim()} ${Math.round(r.width)}×${Math.round(r.height)}`);
      }
    }
    return small;";
