//! `voxa doctor`: one line per check — ok, warn or fail — each problem with the command that fixes
//! it. Read-only (it creates, repairs and rotates nothing) and it never prints a secret: a key is
//! described by its shape only. The checks live by area: the home (`home.rs`), the relay and the
//! clock (`relay.rs`, over the step-by-step connection of `http.rs`), what the tools need on this
//! machine (`machine.rs`), self-hosted voice (`gemini.rs`), the running agent and the service
//! (`agent.rs`).

mod agent;
mod gemini;
mod home;
mod http;
mod machine;
mod relay;

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use serde_json::json;

use super::Settings;
use crate::cli::DoctorArgs;
use crate::error::Exit;

/// Longest any one network step (TCP, TLS, one HTTP exchange) may take.
pub const NET_TIMEOUT: Duration = Duration::from_secs(5);

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub status: Status,
    pub message: String,
    /// What to do about a warning or failure.
    pub fix: Option<String>,
}

impl Check {
    fn ok(check: &'static str, message: impl Into<String>) -> Check {
        Check { check, status: Status::Ok, message: message.into(), fix: None }
    }

    fn warn(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { check, status: Status::Warn, message: message.into(), fix: Some(fix.into()) }
    }

    fn fail(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { check, status: Status::Fail, message: message.into(), fix: Some(fix.into()) }
    }
}

/// `voxa doctor`: prints the report; exits 0 when no check failed, 1 otherwise.
pub async fn run_doctor(settings: &Settings, args: DoctorArgs) -> Result<Exit> {
    let checks = diagnose(settings, &args).await;
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
    let value = json!({"ok": failed == 0, "failures": failed, "warnings": warned, "checks": checks});
    let mut human = String::new();
    for check in &checks {
        let status = match check.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        };
        let _ = write!(human, "{status:<4}  {:<14} {}", check.check, check.message);
        if let Some(fix) = &check.fix {
            let _ = write!(human, " — fix: {fix}");
        }
        human.push('\n');
    }
    let _ = writeln!(
        human,
        "{}",
        match (failed, warned) {
            (0, 0) => "everything looks right".to_owned(),
            (0, w) => format!("nothing failed; {w} warning(s)"),
            (f, w) => format!("{f} check(s) failed, {w} warning(s)"),
        }
    );
    settings.printer.result(&value, human)?;
    Ok(if failed == 0 { Exit::Ok } else { Exit::Failure })
}

/// Runs every check in order. Never fails as a whole: each problem is a line of the report.
/// While an agent runs, the relay checked is the one it dials (unless `--relay` names another).
pub async fn diagnose(settings: &Settings, args: &DoctorArgs) -> Vec<Check> {
    let home = settings.home.dir();
    let mut checks = vec![home::check_home(home), home::check_files(home), home::check_secrets(home)];
    let (config_check, config) = home::check_config(home);
    checks.push(config_check);
    // What the running agent sees answers for the relay and the tools; the settings and this
    // shell only when no agent answers.
    let (agent_check, agent_status) = agent::check_agent(home).await;
    let relay = relay::relay_to_check(settings, &config, agent_status.as_ref(), &mut checks);
    let dial = relay::dial_options(args, &mut checks);
    if let (Some((relay, source)), Some(dial)) = (&relay, &dial) {
        let dial = relay::for_embedded(dial.clone(), &settings.home, relay, *source);
        relay::check_relay(relay, &dial, args, home, &mut checks).await;
    }
    let seen = match agent_status.as_ref().and_then(|status| status.sees.as_ref()) {
        Some(sees) => machine::Seen::Agent(sees),
        None => machine::Seen::Shell,
    };
    checks.push(machine::check_display(seen).await);
    checks.extend(machine::check_coding_agents(&config, seen));
    if settings.self_hosted {
        checks.push(gemini::check_gemini_key(settings.env_secrets.gemini_api_key.as_ref()));
        checks.push(gemini::check_gemini_reachable(dial.as_ref()).await);
    }
    checks.push(agent_check);
    if let Some(status) = &agent_status {
        checks.push(agent::check_agent_relay(status));
    }
    checks.push(agent::check_service());
    checks.push(machine::check_open_files());
    checks
}
