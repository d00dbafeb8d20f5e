//! The running agent named by `agent.json` (alive, holding the home's lock, proving it holds this
//! home's token, this version) and the installed service.

use std::path::Path;

use anyhow::{anyhow, Result};

use super::{Check, NET_TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::net::dial::{ClientSocket, DialOptions};
use crate::protocol::{AgentMessage, AgentStatus, ClientMessage, HelloOk};
use crate::secret::Secret;
use crate::state::{read_if_exists, AgentFile, Home, AGENT_FILE, AUTH_TOKEN_FILE};

/// The agent named by `agent.json`: process alive, holding the home's agent lock, proving on its
/// port that it holds this home's auth token (the token itself never crosses the socket), and
/// the same version as this binary. With it, what the agent reports in `status`, when it does.
pub(super) async fn check_agent(home: &Path) -> (Check, Option<AgentStatus>) {
    let path = home.join(AGENT_FILE);
    let info = match recorded_agent(home, &path) {
        Ok(info) => info,
        Err(check) => return (check, None),
    };
    let Some(token) =
        std::fs::read_to_string(home.join(AUTH_TOKEN_FILE)).ok().and_then(|t| Secret::parse_hex128(&t).ok())
    else {
        let check = Check::warn(
            AGENT_CHECK,
            format!("pid {} on port {}: not verified without a valid auth token", info.pid, info.port),
            "see the secrets check",
        );
        return (check, None);
    };
    answering_agent(&info, &token, &path).await
}

/// The relay link as the running agent reports it.
pub(super) fn check_agent_relay(status: &AgentStatus) -> Check {
    const NAME: &str = "agent relay";
    if status.relay_replaced {
        return Check::warn(
            NAME,
            format!("another agent keeps taking this laptop's code at {} (this one keeps dialing)", status.relay),
            "if that other agent is not yours, someone holds your code: voxa pair --rotate",
        );
    }
    if status.relay_connected {
        return Check::ok(NAME, format!("the agent is connected to {}", status.relay));
    }
    Check::warn(
        NAME,
        format!("the agent is not connected to {} (it keeps retrying)", status.relay),
        "see the relay checks above; the agent reconnects by itself once the relay answers",
    )
}

/// Name of the agent check.
pub(super) const AGENT_CHECK: &str = "agent";

/// The agent `agent.json` at `path` names, if it is a live process holding the home's agent lock;
/// otherwise the check's warning.
pub(super) fn recorded_agent(home: &Path, path: &Path) -> Result<AgentFile, Check> {
    let bytes = match read_if_exists(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(Check::warn(
                AGENT_CHECK,
                "not running",
                "voxa run (or voxa service install to run it at login)",
            ))
        }
        Err(err) => return Err(Check::warn(AGENT_CHECK, format!("{err:#}"), "check its owner and permissions")),
    };
    let stale_fix = format!("rm {}, then voxa run", path.display());
    let Ok(info) = serde_json::from_slice::<AgentFile>(&bytes) else {
        return Err(Check::warn(AGENT_CHECK, format!("{} is not valid", path.display()), stale_fix));
    };
    if !crate::state::process_alive(info.pid) {
        return Err(Check::warn(
            AGENT_CHECK,
            format!("stale {}: pid {} is not running (the agent did not exit cleanly)", path.display(), info.pid),
            stale_fix,
        ));
    }
    // A live agent holds its home's lock for its whole life; a live pid without it was reused.
    match Home::at(home).agent_lock_held() {
        Ok(true) => Ok(info),
        Ok(false) => Err(Check::warn(
            AGENT_CHECK,
            format!(
                "stale {}: pid {} is alive but is not this home's agent (it holds no agent lock)",
                path.display(),
                info.pid
            ),
            stale_fix,
        )),
        Err(err) => Err(Check::warn(AGENT_CHECK, format!("{err:#}"), "check the home's permissions")),
    }
}

/// Whether the recorded agent proves on its port that it is this laptop's, and runs this version;
/// with its `status` answer.
pub(super) async fn answering_agent(info: &AgentFile, token: &Secret, path: &Path) -> (Check, Option<AgentStatus>) {
    let (answered, status) = match verify_loopback(info.port, token).await {
        Ok(answers) => answers,
        Err(err) => {
            let check = Check::fail(
                AGENT_CHECK,
                format!("pid {} on port {} did not answer as this laptop's agent: {err:#}", info.pid, info.port),
                format!(
                    "restart the agent (one started before `voxa pair --rotate` still holds the old token; a stuck one \
                     needs stopping): voxa service install restarts the service; if pid {} is not voxa, rm {}",
                    info.pid,
                    path.display()
                ),
            );
            return (check, None);
        }
    };
    if answered.agent != crate::agent_name() {
        let check = Check::warn(
            AGENT_CHECK,
            format!(
                "pid {} on port {} runs {}, this binary is {}",
                info.pid,
                info.port,
                answered.agent,
                crate::agent_name()
            ),
            "restart the agent so it runs this version (voxa service install restarts the service)",
        );
        return (check, status);
    }
    let check = Check::ok(
        AGENT_CHECK,
        format!(
            "pid {} answering on 127.0.0.1:{} as this laptop's agent, version {}",
            info.pid, info.port, info.version
        ),
    );
    (check, status)
}

/// The protocol-2 session start on the loopback port: whatever answers must prove it holds the
/// token before anything else happens, and only a proof (never the token) is sent. Then one
/// `status` exchange (`None` if the agent does not answer it) and the socket is closed.
pub(super) async fn verify_loopback(port: u16, token: &Secret) -> Result<(HelloOk, Option<AgentStatus>)> {
    let url = format!("ws://127.0.0.1:{port}/");
    let attempt = async {
        let mut socket = crate::net::dial::connect(&url, &DialOptions::default()).await?;
        let client = format!("voxa-doctor/{}", crate::VERSION);
        let hello_ok = crate::net::client::hello(&mut socket, token, &client).await?;
        Ok::<_, anyhow::Error>((socket, hello_ok))
    };
    let (mut socket, hello_ok) = tokio::time::timeout(NET_TIMEOUT, attempt)
        .await
        .map_err(|_| anyhow!("no answer within {} s", NET_TIMEOUT.as_secs()))??;
    let status = tokio::time::timeout(NET_TIMEOUT, ask_status(&mut socket)).await.ok().flatten();
    let _ = socket.close(None).await;
    Ok((hello_ok, status))
}

/// Sends `status` on a proven session and waits for the answer.
async fn ask_status(socket: &mut ClientSocket) -> Option<AgentStatus> {
    socket.send(Message::text(ClientMessage::Status.to_json())).await.ok()?;
    while let Some(Ok(frame)) = socket.next().await {
        if let Message::Text(text) = frame {
            if let Ok(AgentMessage::Status(status)) = serde_json::from_str::<AgentMessage>(&text) {
                return Some(status);
            }
        }
    }
    None
}

/// The installed service, if any, still starts a binary that exists (a moved or removed binary
/// fails at every login, silently).
pub(super) fn check_service() -> Check {
    use crate::commands::service::{installed_file, program_of, Platform};
    const NAME: &str = "service";
    let Ok(file) = installed_file() else {
        return Check::ok(NAME, "cannot locate your home directory; not checked");
    };
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Check::ok(NAME, "not installed (voxa service install runs voxa at login)");
    };
    let Some(program) = program_of(Platform::current(), &text) else {
        return Check::warn(NAME, format!("{} names no program", file.display()), "voxa service install (rewrites it)");
    };
    if !Path::new(&program).is_file() {
        return Check::fail(
            NAME,
            format!("{} starts {program}, which does not exist any more", file.display()),
            "voxa service install (rewrites it for this binary)",
        );
    }
    let current = std::env::current_exe().and_then(|exe| exe.canonicalize()).ok();
    if current.as_deref() != Some(Path::new(&program)) {
        return Check::warn(
            NAME,
            format!("{} starts {program}, not this binary", file.display()),
            "voxa service install, to run this binary at login",
        );
    }
    Check::ok(NAME, format!("{} starts this binary", file.display()))
}
