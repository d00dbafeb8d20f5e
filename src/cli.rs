//! The command line: one clap-derive `Cli` and its arguments, nothing else. `commands` turns it
//! into validated settings and runs it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Drive this laptop from your phone by voice.
#[derive(Debug, Parser)]
#[command(name = "voxa", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// State directory holding the secrets and settings [default: ~/.voxa]
    #[arg(long, global = true, env = "VOXA_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3,
    /// each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]
    #[arg(long, global = true, env = "VOXA_RELAY", value_name = "URL", action = clap::ArgAction::Append)]
    pub relay: Vec<String>,

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
    /// List the approvals waiting for a decision in the running agent; its grants; revoke one
    Approvals(ApprovalsArgs),
    /// Answer an approval: allow or deny it
    Approve(ApproveArgs),
    /// Coding-agent sessions of the running agent: start, send, log, list, interrupt, stop
    #[command(after_help = AGENT_EXIT_CODES)]
    Agent(AgentArgs),
    /// Run a relay server
    Relay(Box<RelayArgs>),
    /// Drive other machines from this one (multi-environment pairing)
    Env(EnvArgs),
    /// Open the web client of the running agent in the default browser
    Open(OpenArgs),
    /// Keep `voxa run` running at login (systemd user unit on Linux, launchd agent on macOS)
    Service(ServiceArgs),
    /// Check this setup, one line per check, and say how to fix what is wrong
    Doctor(DoctorArgs),
    /// Phone notifications (Web Push): send a test to every subscribed browser
    Notify(NotifyArgs),
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
    /// Token the relay requires, put in the link's fragment for the page to present (else the one
    /// saved in the home); prefer VOXA_RELAY_TOKEN or --relay-token-file
    #[arg(long, env = "VOXA_RELAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub relay_token: Option<String>,
    /// Read the relay token for the link from this file (first line; not readable by others)
    #[arg(long, value_name = "FILE")]
    pub relay_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct NotifyArgs {
    #[command(subcommand)]
    pub command: NotifyCommand,
}

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Send one notification to every subscribed browser and show what each push service answered
    Test,
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
    /// Run a relay inside this process for phones on this network: on this machine's address there
    /// (or ADDR, as 192.168.1.20 or 192.168.1.20:8443), over HTTPS with a certificate of its own,
    /// whose fingerprint it prints (for a network you trust; docs/GUIDE.md)
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "auto", conflicts_with = "embedded_relay")]
    pub lan: Option<String>,
    /// Extra CA certificate (PEM) to trust for the relay's TLS, e.g. a self-signed relay
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Token the relay requires (sent as Authorization: Bearer); prefer VOXA_RELAY_TOKEN or
    /// --relay-token-file, a flag's value is visible to every user in `ps`
    #[arg(long, env = "VOXA_RELAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub relay_token: Option<String>,
    /// Read the relay token from this file (first line; the file must not be readable by others)
    #[arg(long, value_name = "FILE")]
    pub relay_token_file: Option<PathBuf>,
    /// Gemini Live model for self-hosted mode (default gemini-3.8-live, or [gemini] model in config.toml)
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// Tool name (run_command, read_file, write_file, list_dir, screenshot, coding_agent, …)
    pub tool: String,
    /// Arguments: one JSON object, or key=value pairs (each value of the type the tool declares)
    pub args: Vec<String>,
    /// Route the call to a paired environment (its envKey or name)
    #[arg(long, value_name = "ENV")]
    pub env: Option<String>,
    /// Where `screenshot` saves the image [default: screenshot-<UTC time>.png in the current directory]
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: Option<ApprovalsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List the grants "Allow for session" made: what each lets through without asking
    Grants,
    /// End a grant: what it let through asks again
    Revoke {
        /// The grant's id (g-…), as `voxa approvals grants` lists it
        grant: String,
    },
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The approval's id (a-…), as `voxa approvals` lists it
    pub approval: String,
    /// The decision
    #[arg(value_enum)]
    pub decision: ApproveDecision,
    /// Why: the asker reads it (a coding agent, or the caller of a denied tool)
    #[arg(long, short)]
    pub message: Option<String>,
}

/// Exit statuses of `voxa agent`, shown in its help.
pub const AGENT_EXIT_CODES: &str = "Exit status: 0 the turn ended well (or the command was done); 1 no agent running \
or the connection failed; 2 usage; 3 the session tool failed (unknown session, agent not installed) or the session \
failed or ended before its turn did; 4 refused; 5 the turn ended with an error or was interrupted.";

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    pub command: AgentAction,
}

#[derive(Debug, Subcommand)]
pub enum AgentAction {
    /// Start a session with PROMPT and follow its first turn until it ends
    Start {
        /// What the coding agent should do
        prompt: String,
        /// Which coding agent (claude, or one configured in config.toml [agents])
        #[arg(long)]
        agent: Option<String>,
        /// Where it works, relative to the workspace [default: the workspace]
        #[arg(long)]
        cwd: Option<String>,
        /// The session's title [default: the prompt's first line]
        #[arg(long)]
        title: Option<String>,
        /// Print the session's id and return at once
        #[arg(long)]
        detach: bool,
    },
    /// Send SESSION a turn and follow it until it ends (an ended session is resumed first)
    Send {
        /// The session's id (s-…), as `voxa agent list` shows it
        session: String,
        /// The turn's text
        text: String,
        /// Return once it is sent
        #[arg(long)]
        detach: bool,
    },
    /// Print SESSION's events, oldest first
    Log {
        session: String,
        /// Only the events after this seq
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Then wait for more, until interrupted
        #[arg(long, short)]
        follow: bool,
    },
    /// List the sessions, most recent first
    List,
    /// End SESSION's running turn (the session stays)
    Interrupt { session: String },
    /// End SESSION's agent process (the session stays listed and resumable)
    Stop { session: String },
}

/// What `voxa approve` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ApproveDecision {
    /// Let it run, this once
    Allow,
    /// Let it run, and the same kind of action for the rest of the session (where offered)
    AllowSession,
    /// Refuse it
    Deny,
}

/// The CA `--domain` uses unless `--acme-directory` names another.
pub const LETS_ENCRYPT_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:8787", value_name = "ADDR")]
    pub listen: String,
    /// TLS certificate chain (PEM); serve wss:// with --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key", conflicts_with = "domain")]
    pub tls_cert: Option<PathBuf>,
    /// Serve wss:// for this DNS name with a certificate the relay obtains and renews itself by
    /// ACME (TLS-ALPN-01: the name must resolve here and reach --listen on port 443); kept in the home
    #[arg(long, value_name = "NAME")]
    pub domain: Option<String>,
    /// ACME directory of the CA that issues the --domain certificate (a staging or company CA)
    #[arg(long, value_name = "URL", requires = "domain", default_value = LETS_ENCRYPT_DIRECTORY)]
    pub acme_directory: String,
    /// Trust this PEM root for the ACME server's own HTTPS (one not in the system roots)
    #[arg(long, value_name = "FILE", requires = "domain")]
    pub acme_ca_file: Option<PathBuf>,
    /// TLS private key (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require this token from both sides (Authorization: Bearer); prefer VOXA_RELAY_TOKEN or
    /// --relay-token-file, a flag's value is visible to every user in `ps`
    #[arg(long, env = "VOXA_RELAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub relay_token: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (keep it private: no authentication)
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Connections one client address (IPv4, or IPv6 /64) may hold; 0 for no limit (behind a proxy)
    #[arg(long, value_name = "N", default_value_t = crate::relay::MAX_CONNECTIONS_PER_IP)]
    pub max_connections_per_ip: usize,
    /// Memory for messages in flight, in MiB (default 256); over it the oldest heavy socket is closed
    #[arg(long = "memory-budget", value_name = "MIB", value_parser = clap::value_parser!(u64).range(32..))]
    pub memory_budget_mib: Option<u64>,
    /// Read the relay token from this file (first line; the file must not be readable by others)
    #[arg(long, value_name = "FILE")]
    pub relay_token_file: Option<PathBuf>,
    /// Host voice calls at /live with the Gemini API key in this file (else GEMINI_API_KEY)
    #[arg(long, value_name = "FILE")]
    pub gemini_key_file: Option<PathBuf>,
    /// Hosted voice calls at once; more get call_error at-capacity
    #[arg(long, default_value_t = crate::hosted::DEFAULT_MAX_CALLS, value_name = "N")]
    pub live_max_calls: usize,
    /// Longest hosted voice call, in minutes
    #[arg(long, default_value_t = crate::hosted::DEFAULT_MAX_CALL_TIME.as_secs() / 60, value_name = "MINUTES")]
    pub live_max_minutes: u64,
    /// Hosted voice calls one client address runs at once; more get call_error too-many-calls
    #[arg(long, default_value_t = crate::hosted::limits::DEFAULT_CALLS_PER_ADDRESS, value_name = "N")]
    pub live_calls_per_address: usize,
    /// Hosted voice calls one client address starts per minute; more get call_error too-many-calls
    #[arg(long, default_value_t = crate::hosted::limits::DEFAULT_STARTS_PER_MINUTE, value_name = "N")]
    pub live_starts_per_minute: usize,
    /// Take a /live client's address from this request header (e.g. X-Forwarded-For), set by a
    /// trusted proxy in front of the relay; only when clients cannot reach the relay but through it
    #[arg(long, value_name = "NAME")]
    pub live_client_header: Option<String>,
    /// Minutes of hosted calls per UTC day on your Gemini key (0 for no limit); counted in the home
    #[arg(long, default_value_t = crate::hosted::budget::DEFAULT_MINUTES_PER_DAY, value_name = "MINUTES")]
    pub live_minutes_per_day: u64,
    /// Gemini Live model for hosted calls
    #[arg(long = "live-model", value_name = "MODEL")]
    pub live_model: Option<String>,
    /// Host /live for anyone who asks, without VOXA_PROXY_TOKEN or a relay token: every call spends
    /// your Gemini key (without it, a relay with a key and no token refuses to start)
    #[arg(long)]
    pub open_live: bool,
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
        /// The pasted line, or - to read it from standard input (keeps the bearer out of `ps` and
        /// the shell history)
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

#[derive(Debug, Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    pub command: ServiceCommand,
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write the service file and start it now and at every login (twice is harmless)
    Install {
        /// Root the service's tools are confined to [default: the current directory]
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Extra CA certificate (PEM) the service trusts for the relay's TLS
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        /// Token the relay requires; saved in the home (0600) for the service, never in its file
        #[arg(long, env = "VOXA_RELAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
        relay_token: Option<String>,
        /// Print the service file and where it would go; change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Stop the service and remove its file
    Uninstall {
        /// Say what would be stopped and removed; change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Whether the service is installed, enabled and running
    Status,
    /// Show the service's recent log lines
    Logs {
        /// Keep printing new lines as they come
        #[arg(short, long)]
        follow: bool,
        /// How many recent lines to show
        #[arg(short = 'n', long, default_value_t = 100, value_name = "N")]
        lines: u32,
    },
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Extra CA certificate (PEM) to trust for the relay's TLS, as `voxa run --ca-cert`
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Token the relay requires (checked against the relay, never printed) [default: saved in the home]
    #[arg(long, env = "VOXA_RELAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub relay_token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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
        let pair =
            Cli::try_parse_from(["voxa", "pair", "--relay", "https://a.example", "--relay", "https://b.example"]);
        assert_eq!(pair.unwrap().relay, ["https://a.example", "https://b.example"]);
        let bare = Cli::try_parse_from(["voxa", "--self-hosted"]).unwrap();
        assert!(bare.self_hosted && bare.command.is_none());
    }
}
