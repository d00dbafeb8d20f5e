//! The one dispatcher of tool calls. Every call — from a phone or local session, self-hosted or
//! hosted voice, a host driving this machine as an environment, the CLI — goes through
//! [`Dispatcher::dispatch`], which in this order resolves where it runs (this machine's toolbox,
//! the approval broker, the session or terminal host, the environment router's own tool, or
//! another environment), asks the policy (and, under `ask`, waits for the user's approval), runs
//! it and writes its one audit line. A session frame that acts asks the same policy through
//! [`Dispatcher::judge_frame`]. Nothing else checks the policy or writes a call to the audit trail.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::approve::ApprovalCall;
use super::args::Args;
use super::policy::{self, FrameAction, Judged, PolicyRule, Verdict};
use super::spec::{ApprovalTool, Runs, ToolKind, ToolSpec, TOOLS};
use super::{declare, plain, ToolOutput, ToolRequest, Toolbox};
use crate::approvals::{Ask, Broker, Request as ApprovalRequest};
use crate::audit::{Audit, CallRecord, EventRecord};
use crate::protocol::{ApprovalSource, ErrorCode, Frame, ToolCall, ToolError, HOSTED_CALLER};

/// Routes calls that name another environment (docs/PROTOCOL.md, "Environments") and runs the
/// router's own tools ([`Runs::Router`], e.g. `fleet`). Implemented by the host side of
/// multi-environment pairing.
pub trait EnvRouter: Send + Sync {
    /// Runs `call` on the environment `env`, streaming progress; the result carries `env`. A
    /// terminal the call opens or attaches there sends its output, tagged with the envKey, to
    /// `viewer`.
    fn route(
        &self,
        env: String,
        call: ToolCall,
        progress: mpsc::Sender<String>,
        viewer: Option<mpsc::Sender<Frame>>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>>;

    /// Follows the sessions and approvals of every paired environment for one client of this
    /// host, `after` its marks (`{"<envKey>":{"<session>":seq}}`), into `out` as frames tagged
    /// with the envKey, until `cancel`: what `follow` adds on a host (docs/PROTOCOL.md,
    /// "Environments"). Each side's policy was asked before: the host's here, the environment's there.
    fn follow(
        &self,
        _after: std::collections::HashMap<String, std::collections::HashMap<String, u64>>,
        _scope: FollowScope,
        _out: mpsc::Sender<Frame>,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Passes a frame that acts (`term_ack`) to the environment `env`, whose own session judges it.
    fn pass(&self, _env: String, _frame: crate::protocol::ClientMessage) -> BoxFuture<'static, Result<(), ToolError>> {
        Box::pin(std::future::ready(Err(ToolError::new(
            ErrorCode::UnknownEnvironment,
            "this agent has no environments",
        ))))
    }

    /// True when `env` names this machine itself (its own envKey or name).
    fn is_local(&self, _env: &str) -> bool {
        false
    }

    /// Runs one of the router's own tools, a [`Runs::Router`] kind, here on the host.
    fn run_tool(&self, kind: ToolKind, args: Value) -> BoxFuture<'static, Result<Value, ToolError>>;
}

/// What a host's follower may see of its environments, as the host's policy let it follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowScope {
    /// The sessions' `agent_event`s.
    pub sessions: bool,
    /// The approvals and their resolutions.
    pub approvals: bool,
}

/// Runs the coding-agent session tools ([`Runs::Sessions`]). Implemented by the session host.
pub trait AgentSessions: Send + Sync {
    /// Runs one session tool for `caller`; its arguments are checked against the table there.
    fn run_tool(&self, kind: ToolKind, args: Value, caller: &str) -> BoxFuture<'static, Result<Value, ToolError>>;
}

/// Runs the terminal tools ([`Runs::Terminals`]). Implemented by the terminal host.
pub trait Terminals: Send + Sync {
    /// Runs one terminal tool; a terminal it opens or attaches sends its output to `viewer`.
    fn run_tool(
        &self,
        kind: ToolKind,
        args: Value,
        viewer: Option<mpsc::Sender<Frame>>,
    ) -> BoxFuture<'static, Result<Value, ToolError>>;
}

/// Where a call runs, resolved from its name and `env` before anything else happens.
enum Target<'a> {
    /// This machine's toolbox.
    Toolbox(ToolKind),
    /// The agent's approval broker.
    Approvals(ToolKind, ApprovalTool),
    /// The environment router's own tool, on this machine.
    Router(&'a dyn EnvRouter, ToolKind),
    /// A coding-agent session tool, on this machine's session host.
    Sessions(&'a dyn AgentSessions, ToolKind),
    /// A terminal tool, on this machine's terminal host.
    Terminals(&'a dyn Terminals, ToolKind),
    /// Another environment; the name may be one this build does not know (a newer environment's).
    Remote { router: &'a dyn EnvRouter, env: String, kind: Option<ToolKind> },
}

impl Target<'_> {
    /// Whether the call can change a machine, as the `read_only` policy sees it: an unknown tool can.
    fn changes_machine(&self, args: &Value) -> bool {
        match self {
            Target::Toolbox(kind)
            | Target::Approvals(kind, _)
            | Target::Router(_, kind)
            | Target::Sessions(_, kind)
            | Target::Terminals(_, kind)
            | Target::Remote { kind: Some(kind), .. } => kind.spec().effect.changes_machine(args),
            Target::Remote { kind: None, .. } => true,
        }
    }

    /// The environment a call went to, for the audit line.
    fn env(&self) -> Option<&str> {
        match self {
            Target::Remote { env, .. } => Some(env),
            Target::Toolbox(_)
            | Target::Approvals(..)
            | Target::Router(..)
            | Target::Sessions(..)
            | Target::Terminals(..) => None,
        }
    }
}

/// The tools of this agent, the router to other environments and the session host, behind one
/// entry point, with the approval broker a call under `ask` waits in and the audit trail every
/// call is written to (both the agent's, handed over by its context).
#[derive(Clone)]
pub struct Dispatcher {
    toolbox: Toolbox,
    approvals: Broker,
    audit: Option<Audit>,
    router: Option<Arc<dyn EnvRouter>>,
    sessions: Option<Arc<dyn AgentSessions>>,
    terminals: Option<Arc<dyn Terminals>>,
}

impl Dispatcher {
    /// A dispatcher for this machine's tools only, waiting in `approvals` and writing to `audit`
    /// (`None` records nothing: benchmarks).
    pub fn new(toolbox: Toolbox, approvals: Broker, audit: Option<Audit>) -> Self {
        Dispatcher { toolbox, approvals, audit, router: None, sessions: None, terminals: None }
    }

    /// The same dispatcher, routing calls to environments through `router` and offering its tools.
    pub fn with_router(mut self, router: Arc<dyn EnvRouter>) -> Self {
        self.router = Some(router);
        self
    }

    /// The same dispatcher, running the session tools on `sessions` and offering them.
    pub fn with_sessions(mut self, sessions: Arc<dyn AgentSessions>) -> Self {
        self.sessions = Some(sessions);
        self
    }

    /// The same dispatcher, running the terminal tools on `terminals` and offering them.
    pub fn with_terminals(mut self, terminals: Arc<dyn Terminals>) -> Self {
        self.terminals = Some(terminals);
        self
    }

    /// The same dispatcher, routing to no environment: what a host driving this machine gets.
    pub fn without_router(&self) -> Self {
        Dispatcher { router: None, ..self.clone() }
    }

    /// The router to other environments, when there is one.
    pub fn router(&self) -> Option<&Arc<dyn EnvRouter>> {
        self.router.as_ref()
    }

    /// This machine's tools.
    pub fn toolbox(&self) -> &Toolbox {
        &self.toolbox
    }

    /// The approval broker calls under `ask` wait in.
    pub fn approvals(&self) -> &Broker {
        &self.approvals
    }

    /// True when calls can go to other environments.
    pub fn has_router(&self) -> bool {
        self.router.is_some()
    }

    /// The tools offered, in table order: the router's only with a router, the session tools only
    /// with a session host, and only those some call of which the policy allows.
    pub fn offered(&self) -> impl Iterator<Item = &'static ToolSpec> + '_ {
        TOOLS.iter().filter(|spec| {
            let runs_here = match spec.runs {
                Runs::Toolbox(_) | Runs::Approvals(_) => true,
                Runs::Router => self.router.is_some(),
                Runs::Sessions => self.sessions.is_some(),
                Runs::Terminals => self.terminals.is_some(),
            };
            runs_here && policy::offers(&self.toolbox.config().policy, spec)
        })
    }

    /// The names of [`Dispatcher::offered`], as `hello_ok` lists them.
    pub fn tool_names(&self) -> Vec<String> {
        self.offered().map(|spec| spec.name.to_owned()).collect()
    }

    /// Gemini function declarations of exactly the tools `hello_ok` lists.
    pub fn gemini_declarations(&self) -> Value {
        declare::gemini_declarations(&self.tool_names())
    }

    /// Runs one call: resolve the target, the policy's verdict (waiting for the user under `ask`),
    /// the tool, one audit line.
    pub async fn dispatch(&self, request: ToolRequest) -> Result<ToolOutput, ToolError> {
        let started = Instant::now();
        let ToolRequest { id, name, args, env, caller, progress, cancel, viewer } = request;
        let target = self.resolve(&name, env);
        let mut refused_by = None;
        let routed_to = target.as_ref().ok().and_then(Target::env).map(str::to_owned);
        let outcome = match target {
            Err(err) => Err(err),
            Ok(target) => {
                // Only this machine's calls with good arguments can be held by `[policy] ask`.
                let askable = match &target {
                    Target::Toolbox(kind)
                    | Target::Approvals(kind, _)
                    | Target::Sessions(_, kind)
                    | Target::Terminals(_, kind) => Args::check(kind.spec(), &args).ok().map(|checked| checked.value()),
                    Target::Router(..) | Target::Remote { .. } => None,
                };
                let call = |args| ToolCall { id: id.clone(), name: name.clone(), args, env: None, caller: None };
                let judged = Judged {
                    name: &name,
                    changes_machine: target.changes_machine(&args),
                    args: &args,
                    askable: askable.as_ref(),
                    hosted: caller == HOSTED_CALLER,
                    workspace: self.toolbox.workspace(),
                };
                match policy::verdict(self.toolbox.config(), &judged) {
                    Verdict::Allow => self.run(target, call(args), &caller, progress, cancel, viewer).await,
                    Verdict::Ask(ask) => match self
                        .approval(ask, &id, &name, Some(askable.unwrap_or_else(|| args.clone())), &cancel)
                        .await
                    {
                        Ok(()) => self.run(target, call(args), &caller, progress, cancel, viewer).await,
                        Err(refused) => {
                            refused_by = Some(PolicyRule::Ask);
                            Err(refused)
                        }
                    },
                    Verdict::Deny(rule) => {
                        refused_by = Some(rule);
                        Err(rule.refusal(&name))
                    }
                }
            }
        };
        let outcome_code = match &outcome {
            Ok(_) => "ok",
            Err(err) => err.code.as_str(),
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(
            tool = %crate::text::prefix(&name, 64),
            id = %crate::text::prefix(&id, 64),
            %caller,
            outcome = outcome_code,
            duration_ms,
            "tool call"
        );
        let denied = refused_by.is_some() || matches!(&outcome, Err(err) if err.code == ErrorCode::DeniedByPolicy);
        self.record(CallRecord {
            caller,
            tool: name,
            id,
            outcome: outcome_code.to_owned(),
            duration_ms,
            rule: denied.then(|| ErrorCode::DeniedByPolicy.as_str().to_owned()),
            policy: refused_by.map(|rule| rule.as_str().to_owned()),
            env: routed_to,
        });
        outcome
    }

    /// Where a call of `name` runs: another environment when `env` names one (whatever the name),
    /// else the table decides, and a name it lacks is `unknown-tool`.
    fn resolve(&self, name: &str, env: Option<String>) -> Result<Target<'_>, ToolError> {
        let kind = ToolKind::parse(name);
        let router = self.router.as_deref();
        match (router, env) {
            (None, Some(_)) => {
                return Err(ToolError::new(ErrorCode::UnknownEnvironment, "this agent has no environments"))
            }
            // This machine named by its own envKey or name: an ordinary local call.
            (Some(router), Some(env)) if !router.is_local(&env) => return Ok(Target::Remote { router, env, kind }),
            _ => {}
        }
        let Some(kind) = kind else { return Err(unknown_tool(name)) };
        match (kind.spec().runs, router, self.sessions.as_deref(), self.terminals.as_deref()) {
            (Runs::Toolbox(_), ..) => Ok(Target::Toolbox(kind)),
            (Runs::Approvals(tool), ..) => Ok(Target::Approvals(kind, tool)),
            (Runs::Router, Some(router), ..) => Ok(Target::Router(router, kind)),
            (Runs::Sessions, _, Some(sessions), _) => Ok(Target::Sessions(sessions, kind)),
            (Runs::Terminals, .., Some(terminals)) => Ok(Target::Terminals(terminals, kind)),
            (Runs::Router, None, ..) | (Runs::Sessions, _, None, _) | (Runs::Terminals, .., None) => {
                Err(unknown_tool(name))
            }
        }
    }

    /// Holds a call under `ask` until the user decides (without taking a place among the calls in
    /// flight); a denial or the expiry is `denied-by-policy` with the user's message.
    async fn approval(
        &self,
        ask: Ask,
        id: &str,
        name: &str,
        input: Option<Value>,
        cancel: &CancellationToken,
    ) -> Result<(), ToolError> {
        let request = ApprovalRequest {
            source: ApprovalSource::Call(id.to_owned()),
            tool: name.to_owned(),
            input: input.unwrap_or_default(),
            summary: ask.summary,
            risk: ask.risk,
            diff: None,
            questions: None,
            offers_session: false,
        };
        let answer = self.approvals.request(request).wait(cancel).await;
        if answer.decision.allows() {
            return Ok(());
        }
        if cancel.is_cancelled() {
            return Err(ToolError::new(ErrorCode::Cancelled, "cancelled while it waited for approval"));
        }
        let shown = crate::text::prefix(name, 64);
        Err(ToolError::new(ErrorCode::DeniedByPolicy, format!("{shown} was not approved: {}", answer.denial_message())))
    }

    async fn run(
        &self,
        target: Target<'_>,
        mut call: ToolCall,
        caller: &str,
        progress: Option<mpsc::Sender<String>>,
        cancel: CancellationToken,
        viewer: Option<mpsc::Sender<Frame>>,
    ) -> Result<ToolOutput, ToolError> {
        match target {
            Target::Toolbox(kind) => self.toolbox.run(kind, call.args, progress, cancel).await,
            Target::Approvals(kind, tool) => {
                let args = Args::check(kind.spec(), &call.args)?;
                ApprovalCall::parse(tool, &args, &self.approvals)?.run(&self.approvals, caller).map(plain)
            }
            Target::Router(router, kind) => router.run_tool(kind, call.args).await.map(plain),
            Target::Sessions(sessions, ToolKind::Brief) => {
                self.brief(sessions, call.args, caller, &cancel).await.map(plain)
            }
            Target::Sessions(sessions, kind) => sessions.run_tool(kind, call.args, caller).await.map(plain),
            Target::Terminals(terminals, kind) => terminals.run_tool(kind, call.args, viewer).await.map(plain),
            Target::Remote { router, env, .. } => {
                call.env = Some(env.clone());
                // Progress from an environment is sent without waiting; nobody listening drops it.
                let progress = progress.unwrap_or_else(|| mpsc::channel(1).0);
                // The environment audits what it runs; this line records that the host asked.
                router.route(env, call, progress, viewer, cancel).await.map(plain)
            }
        }
    }

    /// `brief`: this machine's, and on a host its environments' after it, each named with its
    /// machine; asked by a host as its environment, a machine briefs on its own (no circle).
    async fn brief(
        &self,
        sessions: &dyn AgentSessions,
        args: Value,
        caller: &str,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let local = sessions.run_tool(ToolKind::Brief, args, caller).await?;
        let Some(router) = self.router.as_deref().filter(|_| !caller.starts_with("host:")) else { return Ok(local) };
        let listed = router.run_tool(ToolKind::Fleet, json!({"action": "list", "probe": false})).await;
        let ask = |env: String| {
            let call = ToolCall { id: String::new(), name: "brief".into(), args: json!({}), env: None, caller: None };
            // Asked with the call's cancel: a brief given up on ends there too.
            router.route(env, call, mpsc::channel(1).0, None, cancel.child_token())
        };
        Ok(super::brief_machines::everywhere(local, listed, ask).await)
    }

    /// The audit line of a call, if this agent keeps a trail: the only place a call is recorded.
    fn record(&self, record: CallRecord) {
        if let Some(audit) = &self.audit {
            if let Err(err) = audit.record_call(&record) {
                tracing::warn!(err = format!("{err:#}"), "could not write the audit trail");
            }
        }
    }

    /// The policy's verdict on a session frame that acts, from `caller`'s session: the same
    /// question its tools ask ([`policy::frame_verdict`]). A refusal is written to the audit trail.
    pub fn judge_frame(&self, caller: &str, action: &FrameAction) -> Verdict {
        let verdict = policy::frame_verdict(self.toolbox.config(), action);
        if let (Verdict::Deny(rule), Some(audit)) = (&verdict, &self.audit) {
            let record = EventRecord {
                caller: caller.to_owned(),
                event: action.frame().to_owned(),
                outcome: ErrorCode::DeniedByPolicy.as_str().to_owned(),
                rule: Some(rule.as_str().to_owned()),
                subject: None,
            };
            if let Err(err) = audit.record_event(&record) {
                tracing::warn!(err = format!("{err:#}"), "could not write the audit trail");
            }
        }
        verdict
    }

    /// Holds a frame the policy holds under `ask` until the user decides; a denial or the expiry is
    /// `denied-by-policy` with the user's message.
    pub async fn frame_approval(
        &self,
        action: &FrameAction,
        ask: Ask,
        input: Value,
        cancel: &CancellationToken,
    ) -> Result<(), ToolError> {
        self.approval(ask, action.frame(), action.frame(), Some(input), cancel).await
    }
}

/// The answer to a call of a tool this agent does not have.
pub fn unknown_tool(name: &str) -> ToolError {
    let shown = crate::text::prefix(name, 64);
    let known = TOOLS.iter().filter(|spec| spec.runs.routable()).map(|spec| spec.name).collect::<Vec<_>>();
    ToolError::new(ErrorCode::UnknownTool, format!("no tool named {shown:?} (tools: {})", known.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Policy};
    use crate::tools::ToolboxOptions;
    use serde_json::json;

    /// An environment router that answers every routed call itself and lists no environments.
    struct OneEnvRouter;

    impl EnvRouter for OneEnvRouter {
        fn route(
            &self,
            env: String,
            call: ToolCall,
            _progress: mpsc::Sender<String>,
            _viewer: Option<mpsc::Sender<Frame>>,
            _cancel: CancellationToken,
        ) -> BoxFuture<'static, Result<Value, ToolError>> {
            Box::pin(async move {
                match call.name.as_str() {
                    "refused_there" => Err(ToolError::new(ErrorCode::DeniedByPolicy, "not on that machine")),
                    _ => Ok(json!({"ran_on": env, "tool": call.name, "args": call.args})),
                }
            })
        }

        fn is_local(&self, env: &str) -> bool {
            env == "this-laptop"
        }

        fn run_tool(&self, kind: ToolKind, _args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
            Box::pin(async move { Ok(json!({"router_ran": kind.name()})) })
        }
    }

    struct Fixture {
        workspace: tempfile::TempDir,
        tools: Dispatcher,
    }

    impl Fixture {
        fn new(router: bool, policy: Policy) -> Self {
            let workspace = tempfile::tempdir().unwrap();
            let toolbox = Toolbox::new(ToolboxOptions {
                workspace: workspace.path().to_owned(),
                config: Config { policy, ..Default::default() },
                ..Default::default()
            })
            .unwrap();
            let audit = Some(crate::audit::Audit::new(workspace.path().join("audit")));
            let mut tools = Dispatcher::new(toolbox, Broker::new(Default::default()), audit);
            if router {
                tools = tools.with_router(Arc::new(OneEnvRouter));
            }
            Fixture { workspace, tools }
        }

        async fn call(&self, id: &str, name: &str, env: Option<&str>) -> Result<ToolOutput, ToolError> {
            let call =
                ToolCall { id: id.into(), name: name.into(), args: json!({}), env: env.map(Into::into), caller: None };
            self.tools.dispatch(ToolRequest::from_call(call, "phone", None, CancellationToken::new())).await
        }

        fn audit(&self) -> Vec<Value> {
            let Ok(entries) = std::fs::read_dir(self.workspace.path().join("audit")) else { return Vec::new() };
            entries
                .flat_map(|entry| {
                    std::fs::read_to_string(entry.unwrap().path())
                        .unwrap()
                        .lines()
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .map(|line| serde_json::from_str(&line).unwrap())
                .collect()
        }
    }

    fn read_only() -> Policy {
        Policy { read_only: true, ..Default::default() }
    }

    fn declared(tools: &Dispatcher) -> Vec<String> {
        let declarations = tools.gemini_declarations();
        declarations.as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn gemini_is_declared_exactly_the_tools_hello_ok_lists() {
        let deny_fleet = Policy { deny: vec!["fleet".into(), "run_command".into()], ..Default::default() };
        let allow_two = Policy { allow: vec!["read_file".into(), "fleet".into()], ..Default::default() };
        for (router, policy) in [
            (false, Policy::default()),
            (true, Policy::default()),
            (false, read_only()),
            (true, read_only()),
            (true, deny_fleet),
            (true, allow_two),
        ] {
            let fixture = Fixture::new(router, policy.clone());
            assert_eq!(declared(&fixture.tools), fixture.tools.tool_names(), "router {router}, {policy:?}");
        }
        let plain = Fixture::new(false, Policy::default());
        let all = [
            "run_command",
            "read_file",
            "write_file",
            "list_dir",
            "move_file",
            "delete_file",
            "list_trash",
            "restore_file",
            "upload_file",
            "screenshot",
            "coding_agent",
            "approve",
            "approvals",
        ];
        assert_eq!(plain.tools.tool_names(), all);
        let host = Fixture::new(true, read_only());
        assert_eq!(
            host.tools.tool_names(),
            ["read_file", "list_dir", "list_trash", "screenshot", "approve", "approvals", "fleet"]
        );
    }

    #[test]
    fn gemini_sees_env_and_fleet_only_on_a_host_with_environments() {
        let plain = Fixture::new(false, Policy::default()).tools.gemini_declarations();
        assert!(plain.as_array().unwrap().iter().all(|d| d.pointer("/parameters/properties/env").is_none()));
        let host = Fixture::new(true, Policy::default()).tools.gemini_declarations();
        let run = host.as_array().unwrap().iter().find(|d| d["name"] == "run_command").unwrap();
        assert_eq!(run.pointer("/parameters/properties/env/type"), Some(&Value::from("STRING")));
        assert!(host.as_array().unwrap().iter().any(|d| d["name"] == "fleet"));
    }

    #[tokio::test]
    async fn calls_go_to_the_environment_they_name_and_stay_local_otherwise() {
        let host = Fixture::new(true, Policy::default());
        let routed = host.call("1", "list_dir", Some("devbox")).await.unwrap();
        assert_eq!(routed.result["ran_on"], "devbox");
        // A name this build lacks still goes to the environment, which may be newer.
        assert_eq!(host.call("2", "newer_tool", Some("devbox")).await.unwrap().result["tool"], "newer_tool");
        assert!(host.call("3", "list_dir", None).await.unwrap().result["entries"].is_array());
        assert!(host.call("4", "list_dir", Some("this-laptop")).await.unwrap().result["entries"].is_array());
        assert_eq!(host.call("5", "fleet", None).await.unwrap().result["router_ran"], "fleet");
        assert_eq!(host.call("6", "newer_tool", None).await.unwrap_err().code, ErrorCode::UnknownTool);
        let plain = Fixture::new(false, Policy::default());
        assert_eq!(plain.call("7", "list_dir", Some("x")).await.unwrap_err().code, ErrorCode::UnknownEnvironment);
        assert_eq!(plain.call("8", "fleet", None).await.unwrap_err().code, ErrorCode::UnknownTool);
    }

    #[tokio::test]
    async fn every_call_leaves_exactly_one_audit_line_whichever_way_it_went() {
        let host = Fixture::new(true, Policy { deny: vec!["write_file".into()], ..Default::default() });
        let calls = [
            ("local", "list_dir", None, "ok"),
            ("unknown", "nope", None, "unknown-tool"),
            ("denied", "write_file", None, "denied-by-policy"),
            ("args", "read_file", None, "invalid-args"),
            ("router", "fleet", None, "ok"),
            ("routed", "list_dir", Some("devbox"), "ok"),
            ("routed-denied", "write_file", Some("devbox"), "denied-by-policy"),
            ("refused-there", "refused_there", Some("devbox"), "denied-by-policy"),
        ];
        for (id, name, env, _) in calls {
            let _ = host.call(id, name, env).await;
        }
        let lines = host.audit();
        assert_eq!(lines.len(), calls.len(), "{lines:#?}");
        for (id, name, env, outcome) in calls {
            let line = lines.iter().find(|line| line["id"] == id).unwrap();
            assert_eq!((line["tool"].as_str(), line["outcome"].as_str()), (Some(name), Some(outcome)), "{line}");
            assert_eq!(line["caller"], "phone");
            assert_eq!(line["env"].as_str(), env, "{line}");
            assert_eq!(line["rule"].as_str(), (outcome == "denied-by-policy").then_some("denied-by-policy"), "{line}");
        }
        // The host's own policy names its rule; a refusal elsewhere is the environment's.
        let rule = |id: &str| lines.iter().find(|line| line["id"] == id).unwrap()["policy"].clone();
        assert_eq!(
            (rule("denied"), rule("routed-denied"), rule("refused-there")),
            (json!("deny"), json!("deny"), Value::Null)
        );
    }

    #[tokio::test]
    async fn the_hosts_policy_covers_router_tools_and_what_it_sends_to_environments() {
        let host = Fixture::new(true, Policy { read_only: true, deny: vec!["list_dir".into()], ..Default::default() });
        for (name, env) in
            [("write_file", Some("devbox")), ("list_dir", Some("devbox")), ("newer_tool", Some("devbox"))]
        {
            assert_eq!(host.call(name, name, env).await.unwrap_err().code, ErrorCode::DeniedByPolicy, "{name}");
        }
        assert!(host.call("ok", "read_file", Some("devbox")).await.is_ok());
        let fleet = |action: &str| {
            let call = ToolCall {
                id: action.into(),
                name: "fleet".into(),
                args: json!({"action": action}),
                env: None,
                caller: None,
            };
            host.tools.dispatch(ToolRequest::from_call(call, "phone", None, CancellationToken::new()))
        };
        assert!(fleet("list").await.is_ok(), "listing only reads");
        assert_eq!(fleet("revoke").await.unwrap_err().code, ErrorCode::DeniedByPolicy);
        let denied = Fixture::new(true, Policy { deny: vec!["fleet".into()], ..Default::default() });
        assert_eq!(denied.call("f", "fleet", None).await.unwrap_err().code, ErrorCode::DeniedByPolicy);
        assert!(!denied.tools.tool_names().contains(&"fleet".to_owned()));
    }

    #[tokio::test]
    async fn a_call_under_ask_waits_for_the_user_then_runs_or_is_refused_with_one_line_each() {
        use crate::protocol::{DecidedBy, Decision};
        let host = Fixture::new(false, Policy { ask: vec!["write_file".into()], ..Default::default() });
        let write = |id: &'static str| {
            let args = json!({"path": format!("{id}.txt"), "content": "hi"});
            let call = ToolCall { id: id.into(), name: "write_file".into(), args, env: None, caller: None };
            let tools = host.tools.clone();
            tokio::spawn(async move {
                tools.dispatch(ToolRequest::from_call(call, "phone", None, CancellationToken::new())).await
            })
        };
        for (id, decision) in [("yes", Decision::Allow), ("no", Decision::Deny)] {
            let running = write(id);
            let broker = host.tools.approvals().clone();
            let open = loop {
                if let Some(open) = broker.open().into_iter().next() {
                    break open;
                }
                tokio::task::yield_now().await;
            };
            assert!(open.summary.contains(&format!("{id}.txt")), "{}", open.summary);
            assert!(!host.workspace.path().join(format!("{id}.txt")).exists(), "nothing runs before the answer");
            broker.decide(&open.approval, decision, Some("not now".into()), None, DecidedBy::Phone).unwrap();
            let outcome = running.await.unwrap();
            assert_eq!(outcome.is_ok(), decision == Decision::Allow, "{outcome:?}");
            assert_eq!(host.workspace.path().join(format!("{id}.txt")).exists(), decision == Decision::Allow);
        }
        let lines: Vec<_> = host.audit().into_iter().filter(|line| line.get("outcome").is_some()).collect();
        let line = |id: &str| lines.iter().find(|line| line["id"] == id).unwrap().clone();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert_eq!(line("yes")["outcome"], "ok");
        assert_eq!(
            (line("no")["outcome"].as_str(), line("no")["policy"].as_str()),
            (Some("denied-by-policy"), Some("ask"))
        );
    }

    struct EchoSessions;

    impl AgentSessions for EchoSessions {
        fn run_tool(&self, kind: ToolKind, args: Value, caller: &str) -> BoxFuture<'static, Result<Value, ToolError>> {
            let answer = json!({"kind": kind.name(), "args": args, "caller": caller});
            Box::pin(async move { Ok(answer) })
        }
    }

    #[tokio::test]
    async fn session_tools_are_offered_and_run_only_with_a_session_host() {
        let plain = Fixture::new(false, Policy::default());
        assert!(!plain.tools.tool_names().iter().any(|name| name.starts_with("agent_")));
        assert_eq!(plain.call("s0", "agent_sessions", None).await.unwrap_err().code, ErrorCode::UnknownTool);
        let mut with = Fixture::new(false, Policy { deny: vec!["agent_stop".into()], ..Default::default() });
        with.tools = with.tools.clone().with_sessions(Arc::new(EchoSessions));
        let names = with.tools.tool_names();
        assert!(names.contains(&"agent_start".to_owned()) && !names.contains(&"agent_stop".to_owned()), "{names:?}");
        assert_eq!(declared(&with.tools), names);
        let ran = with.call("s1", "agent_sessions", None).await.unwrap().result;
        assert_eq!((ran["kind"].as_str(), ran["caller"].as_str()), (Some("agent_sessions"), Some("phone")));
        assert_eq!(with.call("s2", "agent_stop", None).await.unwrap_err().code, ErrorCode::DeniedByPolicy);
        assert_eq!(with.audit().iter().filter(|line| line.get("outcome").is_some()).count(), 2);
    }
}
