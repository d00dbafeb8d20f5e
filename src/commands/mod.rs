//! One module per command (`voxa run`, `relay`, `pair`, `status`, `call`, `approvals`, `approve`, `agent`, `env`, `open`, `service`,
//! `doctor`, `notify`, `completions`): each validates its arguments, calls into the library and prints the human or
//! JSON output.

pub mod agent;
pub mod approvals;
pub mod call;
pub mod completions;
pub mod doctor;
pub mod env;
pub mod lan;
pub mod notify;
pub mod open;
pub mod output;
pub mod pair;
pub mod reach;
pub mod relay;
pub mod run;
pub mod service;
pub mod shutdown;
pub mod status;

use std::path::Path;

use anyhow::Result;

use self::output::Printer;
use crate::cli::{Cli, Command, RunArgs};
use crate::config::{relay_list, Config, RelayUrl, DEFAULT_RELAY};
use crate::error::{ConfigError, Exit};
use crate::secret::{EnvSecrets, Secret};
use crate::state::Home;

/// Settings shared by every command, validated.
#[derive(Clone, Debug)]
pub struct Settings {
    pub home: Home,
    /// `--relay` (repeated) or `VOXA_RELAY`, unvalidated; empty when none names a relay.
    pub relay_flags: Vec<String>,
    pub self_hosted: bool,
    pub printer: Printer,
    /// Secrets the process was started with, already removed from its environment.
    pub env_secrets: EnvSecrets,
}

impl Settings {
    pub fn from_cli(cli: &Cli, env_secrets: EnvSecrets) -> Result<Self> {
        Ok(Settings {
            home: Home::locate(cli.home.clone())?,
            relay_flags: cli.relay.iter().filter(|r| !r.trim().is_empty()).cloned().collect(),
            self_hosted: cli.self_hosted,
            printer: Printer::new(cli.json, cli.quiet),
            env_secrets,
        })
    }

    /// The pairing's first relay, by the precedence of [`Settings::relays`].
    pub fn relay(&self, saved: &Config) -> Result<RelayUrl> {
        let relays = self.relays(saved)?;
        relays.into_iter().next().ok_or_else(|| anyhow::anyhow!("no relay is named"))
    }

    /// The pairing's relays (at most [`crate::config::MAX_RELAYS`], none twice), by precedence:
    /// flags > `VOXA_RELAY` > saved config > default.
    pub fn relays(&self, saved: &Config) -> Result<Vec<RelayUrl>> {
        if !self.relay_flags.is_empty() {
            return Ok(relay_list(&self.relay_flags)?);
        }
        let saved = saved.saved_relays();
        if saved.is_empty() {
            return Ok(vec![RelayUrl::parse(DEFAULT_RELAY)?]);
        }
        // Say where a bad saved value comes from, and how to replace it.
        relay_list(&saved).map_err(|err| {
            let path = self.home.path(crate::state::CONFIG_FILE);
            ConfigError::new(format!("{err} (saved in {}; pass --relay to replace it)", path.display())).into()
        })
    }
}

/// Where the relay a command speaks of comes from. While an agent runs, every command speaks of
/// the relay that agent dials; otherwise of the one `voxa run` would dial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelaySource {
    /// The running agent dials it, and it is the relay inside that agent (`--embedded-relay` or
    /// `--lan`): it lives as long as the agent does, and nothing about it is saved.
    Embedded,
    /// The running agent dials it.
    RunningAgent,
    /// `--relay` or `VOXA_RELAY`.
    Flag,
    /// Saved in `config.toml` (by `pair` or `run`).
    Saved,
    /// Nothing names another: the default relay.
    Default,
}

impl RelaySource {
    /// The word `--json` output uses.
    pub fn as_str(self) -> &'static str {
        match self {
            RelaySource::Embedded => "embedded",
            RelaySource::RunningAgent => "running-agent",
            RelaySource::Flag => "flag",
            RelaySource::Saved => "saved",
            RelaySource::Default => "default",
        }
    }

    /// Where it comes from, in words.
    pub fn describe(self) -> &'static str {
        match self {
            RelaySource::Embedded => "in the running agent, which dials it",
            RelaySource::RunningAgent => "dialed by the running agent",
            RelaySource::Flag => "from --relay or VOXA_RELAY",
            RelaySource::Saved => "saved in config.toml",
            RelaySource::Default => "the default",
        }
    }
}

impl Settings {
    /// Where [`Settings::relay`] takes the relay from.
    pub fn relay_source(&self, saved: &Config) -> RelaySource {
        match (self.relay_flags.is_empty(), saved.saved_relays().is_empty()) {
            (false, _) => RelaySource::Flag,
            (true, false) => RelaySource::Saved,
            (true, true) => RelaySource::Default,
        }
    }

    /// The relay a running agent says it dials (`agent_relay`), and whether it is the agent's own.
    pub fn running_relay(&self, agent_relay: &str) -> Result<(RelayUrl, RelaySource)> {
        let relay = RelayUrl::parse(agent_relay)?;
        let source = match run::is_embedded_relay(&self.home, &relay) {
            true => RelaySource::Embedded,
            false => RelaySource::RunningAgent,
        };
        Ok((relay, source))
    }
}

/// Longest first line of a relay token file that is read.
const MAX_TOKEN_FILE_LINE: u64 = 4096;

/// The relay token: the first line of `file` when given (a file others can read is refused, like
/// the secrets in the home), else `value` (`--relay-token` or `VOXA_RELAY_TOKEN`). Empty is none.
pub fn relay_token(value: Option<&str>, file: Option<&Path>) -> Result<Option<Secret>> {
    let Some(file) = file else { return Ok(token_value(value)) };
    secret_file(file, "relay token file").map(Some)
}

/// A token given as a value (a flag or the environment), trimmed; empty is none.
pub fn token_value(value: Option<&str>) -> Option<Secret> {
    value.map(str::trim).filter(|token| !token.is_empty()).map(|token| Secret::from_string(token.to_owned()))
}

/// The secret on the first line of `file` (e.g. "relay token file"): refused when group or others
/// can read the file, or when the line is empty. Errors name the file, never its content.
pub fn secret_file(file: &Path, what: &str) -> Result<Secret> {
    use std::io::{BufRead, Read};
    crate::state::check_private(file, false)?;
    let mut text = String::new();
    std::fs::File::open(file)
        .map(|opened| std::io::BufReader::new(opened.take(MAX_TOKEN_FILE_LINE)))
        .and_then(|mut reader| reader.read_line(&mut text))
        .map_err(|err| ConfigError::new(format!("could not read the {what} {}: {err}", file.display())))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(ConfigError::new(format!("the {what} {} is empty", file.display())).into());
    }
    Ok(Secret::from_string(secret.to_owned()))
}

/// Runs the parsed command line and returns the exit status. `env_secrets` are the secrets taken
/// out of the environment at start ([`EnvSecrets::take`]).
pub fn execute(cli: Cli, env_secrets: EnvSecrets) -> Result<Exit> {
    let settings = Settings::from_cli(&cli, env_secrets)?;
    match cli.command {
        Some(Command::Pair(args)) => block_on(pair::run_pair(&settings, &args)).map(|()| Exit::Ok),
        Some(Command::Completions { shell }) => {
            completions::print_completions(shell, &mut std::io::stdout())?;
            Ok(Exit::Ok)
        }
        Some(Command::Env(args)) => block_on(env::run_env(&settings, args.command)),
        Some(Command::Status) => block_on(status::run_status(&settings)),
        Some(Command::Service(args)) => service::run_service(&settings, args.command),
        Some(Command::Doctor(args)) => block_on(doctor::run_doctor(&settings, args)),
        Some(Command::Notify(args)) => block_on(notify::run_notify(&settings, args.command)),
        Some(Command::Open(args)) => open::run_open(&settings, &args).map(|()| Exit::Ok),
        Some(Command::Call(args)) => block_on(call::run_call(&settings, args)),
        Some(Command::Approvals(args)) => block_on(approvals::run(&settings, args)),
        Some(Command::Approve(args)) => block_on(approvals::run_approve(&settings, args)),
        Some(Command::Agent(args)) => block_on(agent::run_agent_command(&settings, args.command)),
        Some(Command::Relay(args)) => block_on(relay::run_relay(&settings, *args)).map(|()| Exit::Ok),
        Some(Command::Run(args)) => block_on(run::run_agent(&settings, args)).map(|()| Exit::Ok),
        None => block_on(run::run_agent(&settings, RunArgs::default())).map(|()| Exit::Ok),
    }
}

fn block_on<T>(future: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| anyhow::anyhow!("could not start the async runtime: {err}"))?;
    runtime.block_on(future)
}
