//! Coding agents in tests: the real CLIs pinned in tests/agents/ (installed by `npm ci`), their
//! environment against the fake model ([`crate::support::fake_model`]), a [`Rig`] holding a
//! session host whose agents talk to it, and the readers of a session's events and log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use voxa::config::Config;
use voxa::protocol::{DecidedBy, Decision};
use voxa::protocol::{Event, SessionEvent};
use voxa::sessions::{Follower, SessionHost, SessionHostOptions, StartRequest};
use voxa::tools::{Toolbox, ToolboxOptions};

use crate::support::fake_model::FakeModel;

/// Longest wait for one event of a real agent.
pub const WAIT: Duration = Duration::from_secs(90);

/// The installed CLIs' directory, or `None` (loudly) when they are not installed outside CI.
pub fn agents_bin(program: &str) -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/node_modules/.bin");
    if bin.join(program).exists() {
        return Some(bin);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{program} is not installed in tests/agents: run `npm ci --prefix tests/agents`"
    );
    eprintln!("\n!!! SKIPPED: {program} is not installed; run `npm ci --prefix tests/agents` to test against it !!!\n");
    None
}

/// The environment the agents run in: the CLIs on PATH, the fake model, a home of their own.
pub fn agent_env(bin: &Path, home: &Path, model: &FakeModel) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    [
        ("PATH", path),
        ("HOME", home.display().to_string()),
        ("CLAUDE_CONFIG_DIR", home.join("claude").display().to_string()),
        ("ANTHROPIC_BASE_URL", model.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("VOXA_TEST_MODEL_KEY", "sk-test".to_owned()),
    ]
    .into_iter()
    .map(|(key, value)| (key.into(), value.into()))
    .collect()
}

/// A `CODEX_HOME` whose configuration names the fake model as the provider. It is made outside
/// the system's temporary directory, where Codex refuses to put the helpers its sandbox runs —
/// under the user's cache directory, as the checkout (and so the build directory) may itself be
/// under the temporary directory.
pub fn codex_home(model: &FakeModel) -> TempDir {
    let parent = match std::env::var_os("HOME") {
        Some(home) => std::path::PathBuf::from(home).join(".cache").join("voxa-tests"),
        None => std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    };
    std::fs::create_dir_all(&parent).unwrap();
    let home = tempfile::tempdir_in(&parent).unwrap();
    let dir = home.path();
    let config = format!(
        "model = \"gpt-test\"\nmodel_provider = \"voxa-test\"\n\n[model_providers.voxa-test]\nname = \"voxa test\"\n\
         base_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"VOXA_TEST_MODEL_KEY\"\n",
        model.url()
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    home
}

pub struct Rig {
    pub host: SessionHost,
    pub model: FakeModel,
    pub workspace: TempDir,
    pub home: TempDir,
    _codex_home: TempDir,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    config: Config,
}

impl Rig {
    pub async fn new(config: Config) -> Option<Rig> {
        Rig::for_agent(config, "claude").await
    }

    /// A host whose agents (`program` must be installed) talk to a fresh fake model.
    pub async fn for_agent(config: Config, program: &str) -> Option<Rig> {
        let bin = agents_bin(program)?;
        let model = FakeModel::start().await;
        let home = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let codex_home = codex_home(&model);
        let mut env = agent_env(&bin, home.path(), &model);
        env.push(("CODEX_HOME".into(), codex_home.path().into()));
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let host = open_host(&home, &workspace, &config, &env, &shutdown, &tasks);
        Some(Rig { host, model, workspace, home, _codex_home: codex_home, shutdown, tasks, env, config })
    }

    /// The same home opened again, as a restarted agent would.
    pub fn reopen(&self) -> SessionHost {
        open_host(&self.home, &self.workspace, &self.config, &self.env, &self.shutdown, &self.tasks)
    }

    pub async fn start(&self, prompt: &str) -> String {
        let request = StartRequest { prompt: prompt.into(), by: "phone".into(), ..Default::default() };
        self.host.start(request).await.unwrap().session
    }

    pub fn answer(&self, approval: &str, decision: Decision, message: Option<&str>, answers: Option<Value>) {
        let answered =
            self.host.approvals().decide(approval, decision, message.map(str::to_owned), answers, DecidedBy::Phone);
        assert!(answered.is_ok(), "approval {approval} was not open: {answered:?}");
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.tasks.close();
        tokio::time::timeout(WAIT, self.tasks.wait()).await.expect("the sessions stopped");
    }
}

fn open_host(
    home: &TempDir,
    workspace: &TempDir,
    config: &Config,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    shutdown: &CancellationToken,
    tasks: &TaskTracker,
) -> SessionHost {
    let toolbox = Toolbox::new(ToolboxOptions {
        workspace: workspace.path().to_owned(),
        config: config.clone(),
        env: Some(env.to_vec()),
        ..Default::default()
    })
    .unwrap();
    SessionHost::open(SessionHostOptions {
        store_dir: home.path().join("voxa/sessions"),
        toolbox,
        approvals: voxa::approvals::Broker::new(Default::default()),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
    })
    .unwrap()
}

/// Reads events until one of `session` matches; panics after [`WAIT`].
pub async fn until(follower: &mut Follower, session: &str, what: &str, check: impl Fn(&Event) -> bool) -> SessionEvent {
    loop {
        let next = tokio::time::timeout(WAIT, follower.next()).await;
        let event = next.unwrap_or_else(|_| panic!("no {what} in time")).expect("the host is gone");
        if event.session == session && check(&event.event) {
            return event;
        }
        if let Event::Error { code, message } = &event.event {
            eprintln!("session error {code}: {message}");
        }
    }
}

pub fn approval_id(event: &SessionEvent) -> String {
    let Event::Approval { approval, .. } = &event.event else { panic!("not an approval: {event:?}") };
    approval.clone()
}

pub fn is_turn_end(event: &Event) -> bool {
    matches!(event, Event::TurnEnd { .. })
}

pub fn is_approval(tool: &'static str) -> impl Fn(&Event) -> bool {
    move |event| matches!(event, Event::Approval { tool: asked, .. } if asked == tool)
}

/// The agent's text as it streamed (the `partial` pieces), joined.
pub fn streamed_text(log: &[SessionEvent]) -> String {
    log.iter()
        .filter_map(|e| match &e.event {
            Event::Text { text, partial: true } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The whole log, checked to be numbered 1..n without a gap.
pub fn whole_log(host: &SessionHost, session: &str) -> Vec<SessionEvent> {
    let mut events = Vec::new();
    loop {
        let (page, next) = host.log(session, events.len() as u64, 1000).unwrap();
        if page.is_empty() {
            break;
        }
        events.extend(page);
        assert_eq!(next, events.len() as u64);
    }
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event.seq, index as u64 + 1, "gap or repeat at {index}: {events:#?}");
    }
    events
}
