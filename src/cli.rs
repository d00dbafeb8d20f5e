//! The command line (SPEC §2): one clap-derive `Cli`, turned into validated settings before any
//! work is done, then dispatched.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::config::{Config, RelayUrl, DEFAULT_RELAY};
use crate::error::{ConfigError, Exit};
use crate::output::Printer;
use crate::state::Home;

/// Drive this laptop from your phone by voice.
#[derive(Debug, Parser)]
#[command(name = "voxa", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// State directory holding the secrets and settings [default: ~/.voxa]
    #[arg(long, global = true, env = "VOXA_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Relay to pair with and dial (https://…; http:// only for loopback) [default: saved, else https://api.voxa.space]
    #[arg(long, global = true, env = "VOXA_RELAY", value_name = "URL")]
    pub relay: Option<String>,

    /// Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)
    #[arg(long, global = true)]
    pub self_hosted: bool,

    /// Print JSON (one object per line for event streams) instead of text
    #[arg(long, global = true)]
    pub json: bool,

    /// More log output on stderr (-v info, -vv debug, -vvv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Only errors
    #[arg(short, long, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the secrets if missing and print the QR code and pairing URL
    Pair(PairArgs),
    /// Stay connected: loopback server plus relay dialer, until Ctrl-C (the default command)
    Run(RunArgs),
    /// Show whether this machine is paired and what the running agent is doing
    Status,
    /// Run one tool through the running agent and print its result
    Call(CallArgs),
    /// Run a relay server
    Relay(RelayArgs),
    /// Drive other machines from this one (multi-environment pairing)
    Env(EnvArgs),
    /// Open the web client of the running agent in the default browser
    Open(OpenArgs),
    /// Print a shell completion script
    Completions {
        /// Shell to generate for
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct PairArgs {
    /// Replace both secrets (the phone must scan the new code)
    #[arg(long)]
    pub rotate: bool,
    /// Print the URL without the QR code
    #[arg(long)]
    pub no_qr: bool,
}

#[derive(Debug, Args)]
pub struct OpenArgs {
    /// Print the link (with the token in its fragment) instead of opening a browser
    #[arg(long)]
    pub no_browser: bool,
}

#[derive(Debug, Args, Default, Clone)]
pub struct RunArgs {
    /// Loopback port for local clients (0 picks a free one)
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Root that file tools and commands are confined to [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Run a relay inside this process on a loopback address and dial it (for trying voxa offline)
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    pub embedded_relay: Option<String>,
    /// Extra CA certificate (PEM) to trust for the relay's TLS, e.g. a self-signed relay
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Token the relay requires (sent as Authorization: Bearer)
    #[arg(long, env = "VOXA_RELAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub relay_token: Option<String>,
    /// Gemini Live model for self-hosted mode (default gemini-3.8-live, or [gemini] model in config.toml)
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// Tool name (run_command, read_file, write_file, list_dir, screenshot, coding_agent, …)
    pub tool: String,
    /// Arguments: one JSON object, or key=value pairs (values that parse as JSON are taken as JSON)
    pub args: Vec<String>,
    /// Route the call to a paired environment (its envKey or name)
    #[arg(long, value_name = "ENV")]
    pub env: Option<String>,
}

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:8787", value_name = "ADDR")]
    pub listen: String,
    /// TLS certificate chain (PEM); serve wss:// with --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require this token from both sides (Authorization: Bearer)
    #[arg(long, env = "VOXA_RELAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub relay_token: Option<String>,
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(subcommand)]
    pub command: EnvCommand,
}

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// On an environment: issue a pairing and print the line to paste on the host
    Issue,
    /// On the host: record an environment from the line `voxa env issue` printed
    Add {
        /// The pasted line
        line: String,
        /// A short name for the environment
        #[arg(long)]
        name: Option<String>,
    },
    /// List known environments and whether they answer
    List,
    /// On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions
    Revoke {
        /// The pairing id (p_…), its bearer (vbx_…), or an envKey (every pairing bound to it)
        target: String,
    },
    /// On the host: forget an environment
    Remove {
        /// envKey or name
        target: String,
    },
}

/// Settings shared by every command, validated.
#[derive(Clone, Debug)]
pub struct Settings {
    pub home: Home,
    pub relay_flag: Option<String>,
    pub self_hosted: bool,
    pub printer: Printer,
}

impl Settings {
    pub fn from_cli(cli: &Cli) -> Result<Self> {
        Ok(Settings {
            home: Home::locate(cli.home.clone())?,
            relay_flag: cli.relay.clone().filter(|r| !r.trim().is_empty()),
            self_hosted: cli.self_hosted,
            printer: Printer::new(cli.json, cli.quiet),
        })
    }

    /// Relay by precedence: flag > `VOXA_RELAY` > saved config > default.
    pub fn relay(&self, saved: &Config) -> Result<RelayUrl> {
        if let Some(flag) = self.relay_flag.as_deref() {
            return Ok(RelayUrl::parse(flag)?);
        }
        match saved.relay.as_deref() {
            // Say where a bad saved value comes from, and how to replace it.
            Some(saved) => RelayUrl::parse(saved).map_err(|err| {
                let path = self.home.path(crate::state::CONFIG_FILE);
                ConfigError::new(format!("{err} (saved in {}; pass --relay to replace it)", path.display())).into()
            }),
            None => Ok(RelayUrl::parse(DEFAULT_RELAY)?),
        }
    }
}

/// Runs the parsed command line and returns the exit status.
pub fn run(cli: Cli) -> Result<Exit> {
    let settings = Settings::from_cli(&cli)?;
    match cli.command {
        Some(Command::Pair(args)) => crate::pair::run(&settings, &args).map(|()| Exit::Ok),
        Some(Command::Completions { shell }) => {
            print_completions(shell, &mut std::io::stdout())?;
            Ok(Exit::Ok)
        }
        Some(Command::Env(args)) => block_on(crate::environments::command(&settings, args.command)),
        Some(Command::Status) => block_on(crate::status::run(&settings)),
        Some(Command::Open(args)) => crate::open::run(&settings, &args).map(|()| Exit::Ok),
        Some(Command::Call(args)) => block_on(crate::call::run(&settings, args)),
        Some(Command::Relay(args)) => block_on(crate::relay::command(&settings, args)).map(|()| Exit::Ok),
        Some(Command::Run(args)) => block_on(crate::agent::command(&settings, args)).map(|()| Exit::Ok),
        None => block_on(crate::agent::command(&settings, RunArgs::default())).map(|()| Exit::Ok),
    }
}

fn block_on<T>(future: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| anyhow::anyhow!("could not start the async runtime: {err}"))?;
    runtime.block_on(future)
}

/// Writes the completion script for `shell`.
pub fn print_completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) -> Result<()> {
    clap_complete::generate(shell, &mut Cli::command(), "voxa", out);
    Ok(())
}

/// Turns `voxa call` arguments into a JSON object.
pub fn parse_call_args(args: &[String]) -> Result<serde_json::Value, ConfigError> {
    use serde_json::{Map, Value};
    if let [single] = args {
        if single.trim_start().starts_with('{') {
            return match serde_json::from_str::<Value>(single) {
                Ok(Value::Object(map)) => Ok(Value::Object(map)),
                Ok(_) => Err(ConfigError::new("tool arguments must be a JSON object")),
                Err(err) => Err(ConfigError::new(format!("tool arguments are not valid JSON: {err}"))),
            };
        }
    }
    let mut map = Map::new();
    for pair in args {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(ConfigError::new(format!("argument {pair:?} is not key=value (or pass one JSON object)")));
        };
        if key.is_empty() {
            return Err(ConfigError::new(format!("argument {pair:?} has an empty key")));
        }
        // Numbers, booleans, objects and arrays are taken as JSON; anything else is a string.
        let parsed = match serde_json::from_str::<Value>(value) {
            Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Object(_) | Value::Array(_) | Value::Null)) => v,
            _ => Value::String(value.to_owned()),
        };
        map.insert(key.to_owned(), parsed);
    }
    Ok(Value::Object(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_work_before_and_after_the_command() {
        let before = Cli::try_parse_from(["voxa", "--json", "pair"]).unwrap();
        let after = Cli::try_parse_from(["voxa", "pair", "--json"]).unwrap();
        assert!(before.json && after.json);
        assert!(matches!(after.command, Some(Command::Pair(_))));
        let bare = Cli::try_parse_from(["voxa", "--self-hosted"]).unwrap();
        assert!(bare.self_hosted && bare.command.is_none());
    }

    #[test]
    fn call_args_accept_json_or_pairs() {
        let json = parse_call_args(&[r#"{"command":"ls"}"#.into()]).unwrap();
        assert_eq!(json, serde_json::json!({"command":"ls"}));
        let pairs = parse_call_args(&["command=echo hi".into(), "timeout_ms=500".into(), "x=true".into()]).unwrap();
        assert_eq!(pairs, serde_json::json!({"command":"echo hi","timeout_ms":500,"x":true}));
        assert!(parse_call_args(&["oops".into()]).is_err());
        assert!(parse_call_args(&["[1]".into()]).is_err());
        assert!(parse_call_args(&["{bad".into()]).is_err());
    }
}
