//! Whether a session is sealed, as each end shows it: the page's seal mark, and the agent's
//! count of sealed and plain sessions.

use serde_json::json;

use crate::support::browser::Browser;
use crate::support::harness::*;

/// The connection's seal mark, as shown (empty when hidden).
pub(crate) async fn seal_mark(browser: &Browser) -> String {
    let shown = "const mark = document.getElementById('seal-mark'); return mark.hidden ? '' : mark.textContent;";
    browser.script(shown, vec![]).await.as_str().unwrap_or_default().to_owned()
}

/// Sealed and plain sessions the agent holds, as its `status` says.
pub(crate) async fn session_counts(agent: &TestAgent) -> (u64, u64) {
    let mut local = agent.local_client().await;
    send(&mut local, json!({"type":"status"})).await;
    let status = recv_type(&mut local, "status").await;
    (status["sealed_sessions"].as_u64().unwrap(), status["plain_sessions"].as_u64().unwrap())
}
