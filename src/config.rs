//! Settings: the relay URL rules (README, "Usage") and `config.toml` (docs/SECURITY.md, "The state
//! directory").

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::secret::Secret;

/// Relay used when neither flag, environment nor saved config names one.
pub const DEFAULT_RELAY: &str = "https://api.voxa.space";
/// Most relays one pairing names: `voxa run` keeps a link to each, the page tries them in turn.
pub const MAX_RELAYS: usize = 3;
/// Gemini Live model used when none is configured: Google's stable Live model (late 2026).
/// `--model` or `[gemini] model` in `config.toml` picks another.
pub const DEFAULT_GEMINI_MODEL: &str = "models/gemini-3.8-live";

/// A validated relay address. `https`/`wss` anywhere; `http`/`ws` only to loopback hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayUrl {
    /// Normalised `https://host[:port][/path]` or `http://…` form, no trailing slash.
    base: String,
    tls: bool,
}

impl RelayUrl {
    /// Validates a relay URL before anything is dialled.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let shown = redact_url(text.trim());
        let trimmed = shown.as_str();
        let text = text.trim();
        let url = url::Url::parse(text)
            .map_err(|err| ConfigError::new(format!("relay URL {trimmed:?} is not a valid URL: {err}")))?;
        let tls = match url.scheme() {
            "https" | "wss" => true,
            "http" | "ws" => false,
            other => {
                return Err(ConfigError::new(format!(
                    "relay URL {trimmed:?} has scheme {other:?}; use https:// (or http:// for a relay on this machine)"
                )))
            }
        };
        let host = url.host_str().ok_or_else(|| ConfigError::new(format!("relay URL {trimmed:?} has no host")))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ConfigError::new("relay URL must not carry a user name or password"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(ConfigError::new("relay URL must not carry a query or fragment"));
        }
        if !tls && !is_loopback_host(host) {
            return Err(ConfigError::new(format!(
                "relay URL {trimmed:?} is not encrypted; plain http:// and ws:// are allowed only for \
                 loopback hosts (127.0.0.1, ::1, localhost). Use https://"
            )));
        }
        let scheme = if tls { "https" } else { "http" };
        let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
        let host = match url.host() {
            Some(url::Host::Ipv6(addr)) => format!("[{addr}]"),
            _ => host.to_owned(),
        };
        let path = url.path().trim_end_matches('/');
        Ok(RelayUrl { base: format!("{scheme}://{host}{port}{path}"), tls })
    }

    /// The URL as users see it (`https://…`), used in the pairing link.
    pub fn as_str(&self) -> &str {
        &self.base
    }

    /// True for `https`/`wss`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// WebSocket URL of an endpoint (`/agent`, `/ws`) for a code.
    pub fn socket_url(&self, endpoint: &str, code: &str) -> String {
        let rest = self.base.split_once("://").map(|(_, rest)| rest).unwrap_or(&self.base);
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{rest}{endpoint}?code={code}")
    }

    /// The pairing link the phone scans: `{relay}/#code=<code>&token=<token>`, and
    /// `&relay_token=<percent-encoded>` for a relay that asks for one. The secrets sit in the
    /// fragment, which a browser never sends: the relay (and any front end logging request lines)
    /// sees only `GET /`; the page presents the relay token as a WebSocket subprotocol.
    pub fn pairing_url(&self, code: &str, token: &str, relay_token: Option<&Secret>) -> String {
        self.link(code, "token", token, relay_token)
    }

    /// The pairing link `voxa pair` prints: the relay code and a one-time pairing ticket
    /// (`#code=…&ticket=…`), with the relay's token when it asks for one.
    pub fn ticket_url(&self, code: &str, ticket: &str, relay_token: Option<&Secret>) -> String {
        self.link(code, "ticket", ticket, relay_token)
    }

    fn link(&self, code: &str, key: &str, value: &str, relay_token: Option<&Secret>) -> String {
        let mut url = format!("{}/#code={code}&{key}={value}", self.base);
        if let Some(relay_token) = relay_token {
            url.push_str("&relay_token=");
            url.extend(url::form_urlencoded::byte_serialize(relay_token.expose().as_bytes()));
        }
        url
    }
}

/// The relays a pairing names, in order, each validated as [`RelayUrl::parse`] does: at most
/// [`MAX_RELAYS`], none twice (compared as normalised, so `https://r.example/` is `https://r.example`).
pub fn relay_list<S: AsRef<str>>(texts: &[S]) -> Result<Vec<RelayUrl>, ConfigError> {
    if texts.len() > MAX_RELAYS {
        return Err(ConfigError::new(format!(
            "a pairing names at most {MAX_RELAYS} relays, and {} were given",
            texts.len()
        )));
    }
    let mut relays: Vec<RelayUrl> = Vec::with_capacity(texts.len());
    for text in texts {
        let relay = RelayUrl::parse(text.as_ref())?;
        if relays.contains(&relay) {
            return Err(ConfigError::new(format!("relay {relay} is named twice; name each relay once")));
        }
        relays.push(relay);
    }
    Ok(relays)
}

/// The link's other relays, after its own: one `&relay=<percent-encoded URL>` each, in order. A
/// page that knows them moves to the next when one fails; an older page ignores them.
pub fn link_relays(url: &mut String, others: &[RelayUrl]) {
    for relay in others {
        url.push_str("&relay=");
        url.extend(url::form_urlencoded::byte_serialize(relay.as_str().as_bytes()));
    }
}

impl std::fmt::Display for RelayUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)
    }
}

/// A URL as messages may show it: `scheme://user:password@host/path?query#fragment` becomes
/// `scheme://…@host/path?…` — a pasted pairing link (`?code=…&token=…`) or credentials in the
/// URL never reach an error, a log or CI output. Works on text that does not parse as a URL too.
pub fn redact_url(text: &str) -> String {
    let (text, hidden) = match text.find(['?', '#']) {
        Some(cut) => (&text[..cut], "?…"),
        None => (text, ""),
    };
    let shown = match text.rfind('@') {
        Some(at) => match text[..at].find("://") {
            Some(scheme_end) => format!("{}…{}", &text[..scheme_end + 3], &text[at..]),
            None => format!("…{}", &text[at..]),
        },
        None => text.to_owned(),
    };
    format!("{shown}{hidden}")
}

/// True for `localhost`, `127.0.0.0/8` and `::1`: hosts that may be dialled without TLS.
/// (`*.localhost` names are not: a resolver may send them anywhere.)
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `config.toml`: saved relay and the user's settings. Unknown keys are kept out of the way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Relay saved at `pair` time, when the pairing names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<String>,
    /// Relays saved at `pair` time, when the pairing names more than one (then `relay` is unset).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub relays: Vec<String>,
    /// Which tools may run.
    pub policy: Policy,
    /// Coding agents for the `coding_agent` tool, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, AgentCommand>,
    /// Tool calls running at once per agent before new ones get `busy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_calls: Option<usize>,
    /// Self-hosted voice settings.
    pub gemini: GeminiSettings,
    /// Resource limits of the processes tools start.
    #[serde(skip_serializing_if = "ProcessLimits::is_default")]
    pub limits: ProcessLimits,
    /// Session security (docs/PROTOCOL.md, "Sealed sessions (protocol 3)").
    #[serde(skip_serializing_if = "Security::is_default")]
    pub security: Security,
    /// How long an approval waits, and what the `ask` policy lets through without one.
    #[serde(skip_serializing_if = "ApprovalSettings::is_default")]
    pub approvals: ApprovalSettings,
    /// Which events reach the phone as Web Push notifications.
    #[serde(skip_serializing_if = "NotificationSettings::is_default")]
    pub notifications: NotificationSettings,
    /// Which push endpoints the laptop sends to.
    #[serde(skip_serializing_if = "PushSettings::is_default")]
    pub push: PushSettings,
    /// What a voice call's model is told as it happens.
    #[serde(skip_serializing_if = "VoiceSettings::is_default")]
    pub voice: VoiceSettings,
    /// Coding-agent sessions: when an idle agent's process is stopped.
    #[serde(skip_serializing_if = "SessionSettings::is_default")]
    pub sessions: SessionSettings,
}

/// How long a coding agent's process with nothing to do is kept, by default: then it is stopped
/// and the next message resumes it.
pub const DEFAULT_IDLE_SECS: u64 = 300;

/// `[sessions]`: coding-agent sessions (docs/GUIDE.md, "Coding-agent sessions").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionSettings {
    /// Seconds an agent's process with no turn and no open prompt is kept before it is stopped
    /// (the session stays, resumable: the next message starts it again with `--resume`).
    pub idle_secs: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings { idle_secs: DEFAULT_IDLE_SECS }
    }
}

impl SessionSettings {
    fn is_default(&self) -> bool {
        *self == SessionSettings::default()
    }
}

/// `[push]`: where a `push_subscribe` may make the laptop send requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PushSettings {
    /// Accept push endpoints on loopback, private, link-local, unique-local and CGNAT addresses
    /// (and plain `http://` to loopback): for a push service of your own on your network. Off, an
    /// endpoint must be `https://` on a public address, checked when it is subscribed and again
    /// before every push.
    pub allow_private_endpoints: bool,
    /// Seconds an approval's push waits for its receipt before it is sent again, once (default
    /// 20).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resend_after_secs: Option<u64>,
}

impl PushSettings {
    fn is_default(&self) -> bool {
        *self == PushSettings::default()
    }
}

/// `[voice]`: how a call supervises (docs/GUIDE.md, "What you can say").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VoiceSettings {
    /// What the model is told without asking.
    pub narrate: Narrate,
}

impl VoiceSettings {
    fn is_default(&self) -> bool {
        *self == VoiceSettings::default()
    }
}

/// `[voice] narrate`: which events a call's model is told of as text turns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Narrate {
    /// A session's turn that ended, a session that failed, and every approval (opened, with its
    /// read-back, or decided elsewhere).
    #[default]
    Changes,
    /// Approvals only.
    Approvals,
    /// Nothing: the model learns only what it asks for (`brief`, `approvals`, `agent_sessions`).
    Off,
}

/// `[notifications]`: which events notify a phone that is not following, and the contact the
/// VAPID signature names (push services write to it when a sender misbehaves).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NotificationSettings {
    /// Any of `approval`, `turn_end`, `session_failed`; empty turns notifications off.
    pub events: Vec<String>,
    /// `mailto:` or `https:` contact for the VAPID `sub` claim.
    pub contact: String,
}

/// The events that notify when `config.toml` names none.
pub const DEFAULT_NOTIFY_EVENTS: [&str; 3] = ["approval", "turn_end", "session_failed"];
/// The VAPID contact when `config.toml` names none.
pub const DEFAULT_VAPID_CONTACT: &str = "mailto:voxa@localhost";

impl Default for NotificationSettings {
    fn default() -> Self {
        NotificationSettings {
            events: DEFAULT_NOTIFY_EVENTS.iter().map(|e| e.to_string()).collect(),
            contact: DEFAULT_VAPID_CONTACT.into(),
        }
    }
}

impl NotificationSettings {
    fn is_default(&self) -> bool {
        *self == NotificationSettings::default()
    }
}

/// `[security]`: which sessions the agent accepts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Security {
    /// Refuse protocol-2 sessions through the relay (`sealed-session-required`): every client
    /// there must seal (protocol 3). The loopback socket keeps protocol 2 for local scripts.
    pub require_sealed: bool,
}

impl Default for Security {
    fn default() -> Self {
        Security { require_sealed: true }
    }
}

impl Security {
    fn is_default(&self) -> bool {
        *self == Security::default()
    }
}

/// `[approvals]`: the expiry of an open approval and the allow lists of the `ask` rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApprovalSettings {
    /// Seconds an approval waits for an answer before it is denied.
    pub timeout_secs: u64,
    /// `run_command` lines that run without asking: an entry matches the whole command, word for
    /// word (`"git status"` is `git status` and nothing else); an entry ending in ` *` also matches
    /// the command followed by more words (`"cargo test *"`), handing over whatever that program's
    /// options can do. Never a line with shell operators (`;`, `&`, `|`, `$`, redirections, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_commands: Vec<String>,
    /// Workspace directories (or files) `write_file` writes to without asking.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_paths: Vec<String>,
}

/// Default of [`ApprovalSettings::timeout_secs`]: ten minutes.
pub const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 600;

impl Default for ApprovalSettings {
    fn default() -> Self {
        ApprovalSettings {
            timeout_secs: DEFAULT_APPROVAL_TIMEOUT_SECS,
            allow_commands: Vec::new(),
            allow_paths: Vec::new(),
        }
    }
}

impl ApprovalSettings {
    fn is_default(&self) -> bool {
        *self == ApprovalSettings::default()
    }
}

/// Resource limits for every process a tool starts (`run_command`, coding agents), applied soft
/// and hard before the program runs, so nothing it starts can lift them. 0 means no limit; a limit
/// this process already has that is stricter stays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessLimits {
    /// Most processes (and threads) this user may have while a tool process forks (`RLIMIT_NPROC`):
    /// stops a fork bomb. Not enforced by the kernel for root.
    pub max_processes: u64,
    /// Most virtual memory one tool process may map, in MiB (`RLIMIT_AS`). Generous on purpose:
    /// coding agents' runtimes reserve far more address space than they use.
    pub max_address_space_mb: u64,
}

/// Default of [`ProcessLimits::max_processes`].
pub const DEFAULT_MAX_PROCESSES: u64 = 8192;
/// Default of [`ProcessLimits::max_address_space_mb`]: 256 GiB. JIT and WebAssembly runtimes (Node, Bun,
/// which coding agents run on) reserve tens of GiB of address space they never touch; a lower
/// default would break them. It stops runaway mappings, not memory use.
pub const DEFAULT_MAX_ADDRESS_SPACE_MB: u64 = 256 << 10;

impl Default for ProcessLimits {
    fn default() -> Self {
        ProcessLimits { max_processes: DEFAULT_MAX_PROCESSES, max_address_space_mb: DEFAULT_MAX_ADDRESS_SPACE_MB }
    }
}

impl ProcessLimits {
    fn is_default(&self) -> bool {
        *self == ProcessLimits::default()
    }
}

/// A family of tools, as `[policy]` lists name it (`deny = ["@exec"]`). Which tool is in which
/// family is one table, `tools::policy::FAMILIES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Runs programs: `run_command`, `coding_agent`, the `term_*` and `agent_*` tools.
    Exec,
    /// Changes files: `write_file`, `upload_file`, `move_file`, `delete_file`, `restore_file`.
    Write,
    /// Only reads: `read_file`, `list_dir`, `list_trash`, `screenshot`, `approvals`, `brief`.
    Read,
    /// Reaches other machines: `fleet`.
    Network,
    /// Makes the laptop send requests to an endpoint a client names: `push_subscribe`.
    Notify,
}

impl Family {
    /// Every family, in the order the docs list them.
    pub const ALL: [Family; 5] = [Family::Exec, Family::Write, Family::Read, Family::Network, Family::Notify];

    /// The name a policy list uses: `@exec`, `@write`, `@read`, `@network`, `@notify`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Exec => "@exec",
            Family::Write => "@write",
            Family::Read => "@read",
            Family::Network => "@network",
            Family::Notify => "@notify",
        }
    }

    /// The family a policy entry names, if it names one.
    pub fn parse(entry: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|family| family.name() == entry)
    }
}

/// Tool policy: `denied-by-policy` for what it excludes. Every list names tools (`run_command`)
/// or families (`@exec`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// When non-empty, only these tools run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// These tools never run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Refuse every tool that can change the machine (`write_file`, `run_command`, `coding_agent`).
    pub read_only: bool,
    /// These tools wait for the user's decision (an approval) before they run, within the rules
    /// of `[approvals]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<String>,
    /// What a voice call hosted by the relay may do (`[policy.hosted]`), on top of all the above.
    #[serde(skip_serializing_if = "HostedPolicy::is_default")]
    pub hosted: HostedPolicy,
}

/// `[policy.hosted]`: the calls a relay-hosted voice call makes (`caller:"gemini-hosted"`). The
/// relay runs that model and writes its transcript, so by default only what reads runs at once;
/// every other tool waits for the phone's yes, and the call can never answer an approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostedPolicy {
    /// Tools (or families) a hosted call runs without asking the phone; default `["@read"]`.
    pub trust: Vec<String>,
    /// Tools (or families) a hosted call may never run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl Default for HostedPolicy {
    fn default() -> Self {
        HostedPolicy { trust: vec![Family::Read.name().to_owned()], deny: Vec::new() }
    }
}

impl HostedPolicy {
    fn is_default(&self) -> bool {
        *self == HostedPolicy::default()
    }
}

/// How to start a coding agent. `{prompt}` in `args` is replaced by the prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCommand {
    pub program: String,
    pub args: Vec<String>,
    /// Output format: `stream-json` (Claude Code) or `text`.
    #[serde(default = "default_agent_format")]
    pub format: String,
}

fn default_agent_format() -> String {
    "text".into()
}

/// Gemini Live settings for self-hosted mode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GeminiSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub voice: Option<String>,
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Config =
            toml::from_str(text).map_err(|err| ConfigError::new(format!("config.toml is not valid: {err}")))?;
        config.check()?;
        Ok(config)
    }

    /// Refuses what would quietly weaken the policy: a family name that names no family (a
    /// misspelt `deny = ["@exce"]` would deny nothing), an `allow_commands` entry that is empty or
    /// only `*`.
    pub fn check(&self) -> Result<(), ConfigError> {
        let policy = &self.policy;
        let lists = [
            ("[policy] allow", &policy.allow),
            ("[policy] deny", &policy.deny),
            ("[policy] ask", &policy.ask),
            ("[policy.hosted] trust", &policy.hosted.trust),
            ("[policy.hosted] deny", &policy.hosted.deny),
        ];
        for (list, entries) in lists {
            if let Some(entry) = entries.iter().find(|entry| entry.starts_with('@') && Family::parse(entry).is_none()) {
                let known: Vec<&str> = Family::ALL.iter().map(|family| family.name()).collect();
                return Err(ConfigError::new(format!(
                    "config.toml: {list} names {:?}, which is no family (families: {})",
                    crate::text::prefix(entry, 32),
                    known.join(", ")
                )));
            }
        }
        for entry in &self.approvals.allow_commands {
            let words: Vec<&str> = entry.split_whitespace().collect();
            if words.is_empty() || words == ["*"] {
                return Err(ConfigError::new(format!(
                    "config.toml: [approvals] allow_commands holds {:?}, which names no command; list each command \
                     (\"git status\"), or a program with ` *` for any arguments (\"cargo test *\")",
                    crate::text::prefix(entry, 32)
                )));
            }
        }
        Ok(())
    }

    /// The relays saved at `pair` time: `relays`, else the single `relay` of older homes.
    pub fn saved_relays(&self) -> Vec<String> {
        match self.relays.is_empty() {
            true => self.relay.iter().cloned().collect(),
            false => self.relays.clone(),
        }
    }

    /// Saves the pairing's relays: one as `relay` (what every voxa reads), more as `relays`.
    pub fn set_relays(&mut self, relays: &[RelayUrl]) {
        let urls: Vec<String> = relays.iter().map(|relay| relay.as_str().to_owned()).collect();
        match urls.as_slice() {
            [one] => (self.relay, self.relays) = (Some(one.clone()), Vec::new()),
            _ => (self.relay, self.relays) = (None, urls),
        }
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_relays_become_wss_sockets() {
        let relay = RelayUrl::parse("https://relay.example.com/").unwrap();
        assert_eq!(relay.as_str(), "https://relay.example.com");
        assert_eq!(relay.socket_url("/agent", "ab"), "wss://relay.example.com/agent?code=ab");
        assert_eq!(relay.pairing_url("c", "t", None), "https://relay.example.com/#code=c&token=t");
        let team = Secret::from_string("team relay/token+7f3e&x=1".into());
        let link = relay.pairing_url("c", "t", Some(&team));
        assert_eq!(link, "https://relay.example.com/#code=c&token=t&relay_token=team+relay%2Ftoken%2B7f3e%26x%3D1");
        let fragment = url::Url::parse(&link).unwrap().fragment().unwrap().to_owned();
        let read: Vec<_> = url::form_urlencoded::parse(fragment.as_bytes()).collect();
        assert_eq!(read[2], ("relay_token".into(), team.expose().into()), "it reads back as it was");
        let relay = RelayUrl::parse("wss://relay.example.com:8443/base").unwrap();
        assert_eq!(relay.socket_url("/ws", "ab"), "wss://relay.example.com:8443/base/ws?code=ab");
    }

    #[test]
    fn plain_relays_only_on_loopback() {
        for ok in ["http://127.0.0.1:8787", "ws://localhost:1", "http://[::1]:9", "http://127.3.2.1"] {
            let relay = RelayUrl::parse(ok).unwrap();
            assert!(!relay.is_tls(), "{ok}");
        }
        assert_eq!(RelayUrl::parse("http://[::1]:9").unwrap().socket_url("/agent", "c"), "ws://[::1]:9/agent?code=c");
        for bad in ["http://example.com", "ws://10.0.0.1:80", "http://127.0.0.1.example.com", "http://relay.localhost"]
        {
            let err = RelayUrl::parse(bad).unwrap_err();
            assert!(err.to_string().contains("https://"), "{bad}: {err}");
        }
    }

    #[test]
    fn refusals_never_repeat_a_password() {
        for bad in [
            "ftp://user:hunter2@host",
            "http://user:hunter2@example.com",
            "https://user:hunter2@x.y",
            "user:hunter2@host",
        ] {
            let err = RelayUrl::parse(bad).unwrap_err().to_string();
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn refusals_never_repeat_a_query_or_fragment() {
        let token = "0123456789abcdef0123456789abcdef";
        for bad in [
            format!("htps://relay.example/?code=c&token={token}"),
            format!("https://exa mple.com/?token={token}"),
            format!("http://relay.example/#token={token}"),
            format!("https://u:{token}@relay.example/?token={token}"),
            format!("relay.example/?token={token}"),
        ] {
            let err = RelayUrl::parse(&bad).unwrap_err().to_string();
            assert!(!err.contains(token), "{err}");
        }
        assert_eq!(redact_url("https://u:p@h.example/x?token=t#f"), "https://…@h.example/x?…");
        assert_eq!(redact_url("https://h.example/x"), "https://h.example/x");
    }

    #[test]
    fn junk_relays_are_refused_with_a_sentence() {
        for bad in ["", "relay", "ftp://x.y", "https://", "https://u:p@x.y", "https://x.y/?code=1"] {
            assert!(RelayUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn config_round_trips_and_tolerates_missing_sections() {
        let config = Config::from_toml("relay = \"https://r.example\"\n[policy]\nread_only = true\n").unwrap();
        assert_eq!(config.relay.as_deref(), Some("https://r.example"));
        assert!(config.policy.read_only);
        assert_eq!(Config::from_toml(&config.to_toml()).unwrap(), config);
        assert!(Config::from_toml("relay = [").is_err());
    }

    #[test]
    fn a_pairing_names_up_to_three_relays_each_once() {
        let relays = relay_list(&["https://a.example/", "http://127.0.0.1:9", "wss://c.example"]).unwrap();
        let shown: Vec<&str> = relays.iter().map(RelayUrl::as_str).collect();
        assert_eq!(shown, ["https://a.example", "http://127.0.0.1:9", "https://c.example"]);
        let err = relay_list(&["https://a.example", "https://b.example", "https://c.example", "https://d.example"])
            .unwrap_err();
        assert_eq!(err.to_string(), "a pairing names at most 3 relays, and 4 were given");
        let err = relay_list(&["https://a.example", "https://a.example/"]).unwrap_err();
        assert_eq!(err.to_string(), "relay https://a.example is named twice; name each relay once");
        let err = relay_list(&["https://a.example", "http://b.example"]).unwrap_err();
        assert!(err.to_string().contains("not encrypted"), "{err}");
        assert!(relay_list::<&str>(&[]).unwrap().is_empty());
        let mut url = String::from("https://a.example/#code=c&ticket=t");
        link_relays(&mut url, &relays[1..]);
        assert_eq!(
            url,
            "https://a.example/#code=c&ticket=t&relay=http%3A%2F%2F127.0.0.1%3A9&relay=https%3A%2F%2Fc.example"
        );
    }

    #[test]
    fn relays_are_saved_as_a_list_and_the_single_relay_is_still_read() {
        let old = Config::from_toml("relay = \"https://r.example\"\n").unwrap();
        assert_eq!(old.saved_relays(), ["https://r.example"]);
        let mut config = Config::default();
        assert!(config.saved_relays().is_empty());
        config.set_relays(&relay_list(&["https://a.example", "https://b.example"]).unwrap());
        assert!(config.to_toml().starts_with("relays = [\n    \"https://a.example\",\n    \"https://b.example\",\n]"));
        let back = Config::from_toml(&config.to_toml()).unwrap();
        assert_eq!(back.saved_relays(), ["https://a.example", "https://b.example"]);
        assert_eq!(back.relay, None);
        config.set_relays(&relay_list(&["https://a.example"]).unwrap());
        assert_eq!(config.to_toml().lines().next(), Some("relay = \"https://a.example\""));
        assert!(config.relays.is_empty());
    }

    #[test]
    fn ask_and_approvals_parse_with_a_ten_minute_default() {
        let config = Config::from_toml("[policy]\nask = [\"run_command\"]\n").unwrap();
        assert_eq!(config.policy.ask, ["run_command"]);
        assert_eq!(config.approvals.timeout_secs, 600);
        let text = "[approvals]\ntimeout_secs = 30\nallow_commands = [\"git status\"]\nallow_paths = [\"notes\"]\n";
        let config = Config::from_toml(text).unwrap();
        assert_eq!(config.approvals.timeout_secs, 30);
        assert_eq!(config.approvals.allow_commands, ["git status"]);
        assert_eq!(config.approvals.allow_paths, ["notes"]);
        assert_eq!(Config::from_toml(&config.to_toml()).unwrap(), config);
        assert!(!Config::default().to_toml().contains("approvals"));
        assert!(Config::from_toml("[approvals]\ntimeout_secs = -1\n").is_err());
    }
}
