//! The one policy boundary (docs/SECURITY.md, "One policy, every door"): `config.toml`'s
//! `[policy]` (`allow`, `deny`, `read_only`, `ask`, `[policy.hosted]`) in one place. Every door
//! asks it the same question — a tool call from any caller ([`verdict`], asked only by
//! [`super::Dispatcher::dispatch`]) and a session frame that acts ([`frame_verdict`], asked
//! through [`super::Dispatcher::judge_frame`]). Lists name tools or families ([`FAMILIES`]).

use std::path::Path;

use serde_json::Value;

use super::spec::ToolSpec;
use crate::approvals::{ask_for, describe, Ask};
use crate::config::{Config, Policy};
use crate::protocol::{ErrorCode, Risk, ToolError};

pub use crate::config::Family;

/// Which family each tool, and each session frame that acts on its own, belongs to: the one
/// table the policy's `@family` names are read from. `approve` is in none: it answers what the
/// policy already asked, and only its own name governs it.
pub const FAMILIES: &[(&str, Family)] = &[
    ("run_command", Family::Exec),
    ("read_file", Family::Read),
    ("write_file", Family::Write),
    ("list_dir", Family::Read),
    ("move_file", Family::Write),
    ("delete_file", Family::Write),
    ("list_trash", Family::Read),
    ("restore_file", Family::Write),
    ("upload_file", Family::Write),
    ("screenshot", Family::Read),
    ("coding_agent", Family::Exec),
    ("approvals", Family::Read),
    ("fleet", Family::Network),
    ("agent_start", Family::Exec),
    ("agent_send", Family::Exec),
    ("agent_interrupt", Family::Exec),
    ("agent_stop", Family::Exec),
    ("agent_sessions", Family::Exec),
    ("agent_log", Family::Exec),
    ("brief", Family::Read),
    ("term_open", Family::Exec),
    ("term_attach", Family::Exec),
    ("term_input", Family::Exec),
    ("term_resize", Family::Exec),
    ("term_close", Family::Exec),
    ("term_list", Family::Exec),
    ("term_screen", Family::Exec),
    (PUSH_SUBSCRIBE, Family::Notify),
];

/// The frame (and policy name) that makes the laptop send pushes to an endpoint.
pub const PUSH_SUBSCRIBE: &str = "push_subscribe";

/// The family of a tool or acting frame named `name`, if it has one.
pub fn family_of(name: &str) -> Option<Family> {
    FAMILIES.iter().find(|(listed, _)| *listed == name).map(|(_, family)| *family)
}

/// Why the policy refused a tool; recorded as the audit line's `policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyRule {
    Deny,
    Allow,
    ReadOnly,
    /// Under `ask`, and the user denied it or nobody answered in time.
    Ask,
    /// `[policy.hosted] deny`: a relay-hosted voice call may not use it.
    Hosted,
    /// A relay-hosted voice call answering an approval.
    HostedApproval,
}

impl PolicyRule {
    /// The rule's name in the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyRule::Deny => "deny",
            PolicyRule::Allow => "allow",
            PolicyRule::ReadOnly => "read_only",
            PolicyRule::Ask => "ask",
            PolicyRule::Hosted | PolicyRule::HostedApproval => "hosted",
        }
    }

    /// Why the rule refuses a tool, for the caller.
    pub fn reason(self) -> &'static str {
        match self {
            PolicyRule::Deny => "it is on the policy's deny list",
            PolicyRule::Allow => "it is not on the policy's allow list",
            PolicyRule::ReadOnly => "this agent is read-only and the tool can change the machine",
            PolicyRule::Ask => "the user did not approve it",
            PolicyRule::Hosted => "a voice call hosted by the relay may not use it ([policy.hosted] deny)",
            PolicyRule::HostedApproval => {
                "a voice call hosted by the relay cannot answer approvals; answer on the phone"
            }
        }
    }

    /// The `denied-by-policy` answer to a call of `name` this rule refuses.
    pub fn refusal(self, name: &str) -> ToolError {
        let shown = crate::text::prefix(name, 64);
        ToolError::new(ErrorCode::DeniedByPolicy, format!("{shown} is not allowed here: {}", self.reason()))
    }
}

/// What the policy makes of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Run it once the user approves it (`ask`); what they are shown.
    Ask(Ask),
    /// Refuse it `denied-by-policy`, naming the rule.
    Deny(PolicyRule),
}

/// A call as the policy judges it.
pub struct Judged<'a> {
    pub name: &'a str,
    /// Whether the call can change a machine (`read_only` refuses it).
    pub changes_machine: bool,
    /// The call's arguments as they came.
    pub args: &'a Value,
    /// The checked arguments of a call this machine runs, which `[policy] ask` may hold for the
    /// user; `None` for calls it does not cover (router tools, calls routed to environments, bad
    /// arguments).
    pub askable: Option<&'a Value>,
    /// The call comes from a voice call the relay hosts (`caller:"gemini-hosted"`).
    pub hosted: bool,
    /// Where relative paths of the arguments resolve.
    pub workspace: &'a Path,
}

/// The verdict on a call. Refused when on the deny list, missing from a non-empty allow list, or
/// able to change the machine while the agent is read-only; a hosted call also when `[policy.hosted]`
/// denies it or it answers an approval. Else held for the user when the `ask` list and the
/// `[approvals]` rules say so, and a hosted call whenever `[policy.hosted] trust` does not name it
/// (whatever its arguments and wherever it runs). Else allowed.
pub fn verdict(config: &Config, call: &Judged<'_>) -> Verdict {
    let family = family_of(call.name);
    let policy = &config.policy;
    if call.hosted && call.name == "approve" {
        return Verdict::Deny(PolicyRule::HostedApproval);
    }
    if let Some(rule) = refusal(policy, call.name, family, call.changes_machine) {
        return Verdict::Deny(rule);
    }
    if call.hosted && listed(&policy.hosted.deny, call.name, family) {
        return Verdict::Deny(PolicyRule::Hosted);
    }
    let asked = listed(&policy.ask, call.name, family)
        .then_some(call.askable)
        .flatten()
        .and_then(|args| ask_for(config, call.name, args, call.workspace, call.changes_machine));
    if let Some(ask) = asked {
        return Verdict::Ask(ask);
    }
    if call.hosted && !listed(&policy.hosted.trust, call.name, family) {
        let args = call.askable.unwrap_or(call.args);
        return Verdict::Ask(describe(config, call.name, args, call.workspace, call.changes_machine));
    }
    Verdict::Allow
}

/// The rule of `allow`, `deny` and `read_only` that refuses a call, if one does.
fn refusal(policy: &Policy, name: &str, family: Option<Family>, changes_machine: bool) -> Option<PolicyRule> {
    if listed(&policy.deny, name, family) {
        Some(PolicyRule::Deny)
    } else if !policy.allow.is_empty() && !listed(&policy.allow, name, family) {
        Some(PolicyRule::Allow)
    } else if policy.read_only && changes_machine {
        Some(PolicyRule::ReadOnly)
    } else {
        None
    }
}

/// True when `list` names the tool or its family.
fn listed(list: &[String], name: &str, family: Option<Family>) -> bool {
    list.iter().any(|entry| entry == name || family.is_some_and(|family| entry == family.name()))
}

/// Whether the tool is offered (in `hello_ok` and to the voice model): some call of it can pass
/// (one it asks for counts). Each call is judged again by [`verdict`].
pub fn offers(policy: &Policy, spec: &ToolSpec) -> bool {
    refusal(policy, spec.name, family_of(spec.name), !spec.effect.can_only_read()).is_none()
}

/// A sentence for the log when the policy refuses `run_command` but lets other tools that run
/// programs through (a shell in `term_open`, a coding agent): those are not refused by the name
/// `run_command`, and the family `@exec` would refuse them all.
pub fn exec_advice(policy: &Policy) -> Option<String> {
    let exec = Some(Family::Exec);
    if !listed(&policy.deny, "run_command", exec) || listed(&policy.deny, "@exec", None) {
        return None;
    }
    let open: Vec<&str> = FAMILIES
        .iter()
        .filter(|(name, family)| *family == Family::Exec && *name != "run_command")
        .filter(|(name, _)| refusal(policy, name, exec, true).is_none())
        .map(|(name, _)| *name)
        .filter(|name| matches!(*name, "term_open" | "term_input" | "agent_start" | "agent_send" | "coding_agent"))
        .collect();
    (!open.is_empty()).then(|| {
        format!(
            "[policy] deny lists run_command, but {} run programs too; deny \"@exec\" to refuse every tool that does",
            open.join(", ")
        )
    })
}

/// What a session frame does, as the policy judges it: each is the question of the tools it
/// stands for (one row of docs/SECURITY.md's table). A frame that only stops, lists or removes
/// something (`cancel`, `calls`, `status`, `unfollow`, `push_unsubscribe`) asks nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameAction {
    /// `approve`: answers an approval, exactly as the `approve` tool does.
    Approve,
    /// `follow`'s approvals: every open approval with its full input, for a client that may both
    /// list them (`approvals`) and answer them (`approve`).
    FollowApprovals,
    /// `follow`'s session events, which `agent_log` reads.
    FollowSessions,
    /// `term_ack`: lets a terminal this session watches go on writing to it, as the `term_open`
    /// or `term_attach` that made it watch did.
    TermAck,
    /// `push_subscribe`: the laptop will send requests to the endpoint's `host`.
    PushSubscribe { host: String },
}

impl FrameAction {
    /// The frame's `type` on the wire.
    pub fn frame(&self) -> &'static str {
        match self {
            FrameAction::Approve => "approve",
            FrameAction::FollowApprovals | FrameAction::FollowSessions => "follow",
            FrameAction::TermAck => "term_ack",
            FrameAction::PushSubscribe { .. } => PUSH_SUBSCRIBE,
        }
    }

    /// The tools (or acting frames) whose rules the frame follows.
    pub fn names(&self) -> &'static [&'static str] {
        match self {
            FrameAction::Approve => &["approve"],
            FrameAction::FollowApprovals => &["approvals", "approve"],
            FrameAction::FollowSessions => &["agent_log"],
            FrameAction::TermAck => &["term_open", "term_attach"],
            FrameAction::PushSubscribe { .. } => &[PUSH_SUBSCRIBE],
        }
    }

    /// Whether one name passing is enough (else every one must).
    fn any(&self) -> bool {
        matches!(self, FrameAction::TermAck)
    }

    /// What a frame the policy holds under `ask` shows the user.
    fn ask(&self) -> Ask {
        match self {
            FrameAction::PushSubscribe { host } => Ask {
                risk: Risk::Network,
                summary: format!("Send notifications to {}", crate::text::prefix(host, 128)),
            },
            _ => Ask { risk: Risk::Read, summary: "Follow the coding-agent sessions (their events and output)".into() },
        }
    }
}

/// The verdict on a session frame: refused as its tools are refused; held under `ask` when it acts
/// on its own (`push_subscribe`) or reads what a held tool reads (`follow`'s session events);
/// `term_ack` only goes on with a terminal an allowed call gave, so a held `term_open` lets it.
pub fn frame_verdict(config: &Config, action: &FrameAction) -> Verdict {
    let policy = &config.policy;
    let judged: Vec<Option<PolicyRule>> =
        action.names().iter().map(|name| refusal(policy, name, family_of(name), false)).collect();
    let refused = if action.any() {
        judged.iter().all(Option::is_some).then(|| judged[0]).flatten()
    } else {
        judged.iter().flatten().next().copied()
    };
    if let Some(rule) = refused {
        return Verdict::Deny(rule);
    }
    let held = action
        .names()
        .iter()
        .any(|name| !matches!(*name, "approve" | "approvals") && listed(&policy.ask, name, family_of(name)));
    if held && !action.any() {
        return Verdict::Ask(action.ask());
    }
    Verdict::Allow
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostedPolicy;
    use crate::tools::{ToolKind, TOOLS};
    use serde_json::json;

    fn config(allow: &[&str], deny: &[&str], read_only: bool) -> Config {
        let list = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect();
        let policy = Policy {
            allow: list(allow),
            deny: list(deny),
            read_only,
            ask: list(&["write_file"]),
            hosted: HostedPolicy::default(),
        };
        Config { policy, ..Default::default() }
    }

    fn judge(config: &Config, name: &str, changes_machine: bool, askable: Option<&Value>) -> Verdict {
        let args = askable.cloned().unwrap_or_default();
        let call = Judged { name, changes_machine, args: &args, askable, hosted: false, workspace: Path::new("/ws") };
        verdict(config, &call)
    }

    fn hosted(config: &Config, name: &str, args: Value) -> Verdict {
        let changes_machine = ToolKind::parse(name).is_none_or(|kind| kind.spec().effect.changes_machine(&args));
        let call = Judged {
            name,
            changes_machine,
            args: &args,
            askable: Some(&args),
            hosted: true,
            workspace: Path::new("/ws"),
        };
        verdict(config, &call)
    }

    #[test]
    fn every_tool_is_in_one_family_but_approve_and_the_table_names_only_tools_and_acting_frames() {
        for spec in TOOLS {
            let rows = FAMILIES.iter().filter(|(name, _)| *name == spec.name).count();
            assert_eq!(rows, usize::from(spec.name != "approve"), "{} has {rows} rows", spec.name);
        }
        for (name, _) in FAMILIES {
            assert!(ToolKind::parse(name).is_some() || *name == PUSH_SUBSCRIBE, "{name} is no tool");
        }
        for family in Family::ALL {
            assert!(FAMILIES.iter().any(|(_, listed)| *listed == family), "{} is empty", family.name());
            assert_eq!(Family::parse(family.name()), Some(family));
        }
    }

    #[test]
    fn deny_outranks_allow_read_only_refuses_only_changes_and_ask_holds_the_rest() {
        let open = config(&[], &[], false);
        assert_eq!(judge(&open, "run_command", true, None), Verdict::Allow);
        let denied = config(&["run_command"], &["run_command"], false);
        assert_eq!(judge(&denied, "run_command", false, None), Verdict::Deny(PolicyRule::Deny));
        let allow_list = config(&["read_file"], &[], false);
        assert_eq!(judge(&allow_list, "read_file", true, None), Verdict::Allow);
        assert_eq!(judge(&allow_list, "list_dir", false, None), Verdict::Deny(PolicyRule::Allow));
        let read_only = config(&[], &[], true);
        assert_eq!(judge(&read_only, "write_file", true, None), Verdict::Deny(PolicyRule::ReadOnly));
        assert_eq!(judge(&read_only, "read_file", false, None), Verdict::Allow);
        // A name this build does not know is judged by its name and effect like any other.
        assert_eq!(judge(&denied, "someday_tool", true, None), Verdict::Deny(PolicyRule::Allow));
        // `ask` holds a call this machine runs; one it cannot judge (routed, bad arguments) is not held.
        let args = json!({"path": "notes.txt", "content": "hi"});
        assert!(
            matches!(judge(&open, "write_file", true, Some(&args)), Verdict::Ask(ask) if ask.summary.contains("notes.txt"))
        );
        assert_eq!(judge(&open, "write_file", true, None), Verdict::Allow);
        assert_eq!(judge(&read_only, "write_file", true, Some(&args)), Verdict::Deny(PolicyRule::ReadOnly));
    }

    #[test]
    fn a_family_stands_for_each_of_its_tools_in_every_list() {
        let exec = config(&[], &["@exec"], false);
        for name in ["run_command", "coding_agent", "term_open", "term_input", "agent_start", "agent_send"] {
            assert_eq!(judge(&exec, name, true, None), Verdict::Deny(PolicyRule::Deny), "{name}");
        }
        assert_eq!(judge(&exec, "read_file", false, None), Verdict::Allow);
        let reads_only = config(&["@read"], &[], false);
        assert_eq!(judge(&reads_only, "list_dir", false, None), Verdict::Allow);
        assert_eq!(judge(&reads_only, "upload_file", true, None), Verdict::Deny(PolicyRule::Allow));
        let mut asking = config(&[], &[], false);
        asking.policy.ask = vec!["@write".into()];
        let args = json!({"from": "a", "to": "b"});
        assert!(matches!(judge(&asking, "move_file", true, Some(&args)), Verdict::Ask(_)));
        assert_eq!(judge(&asking, "run_command", true, Some(&json!({"command": "ls"}))), Verdict::Allow);
    }

    #[test]
    fn denying_run_command_alone_is_told_to_deny_the_family() {
        let advice = exec_advice(&config(&[], &["run_command"], false).policy).unwrap();
        for tool in ["term_open", "term_input", "agent_start", "agent_send", "coding_agent"] {
            assert!(advice.contains(tool), "{advice}");
        }
        assert!(advice.contains("deny \"@exec\""), "{advice}");
        assert_eq!(exec_advice(&config(&[], &["@exec"], false).policy), None);
        assert_eq!(exec_advice(&config(&[], &["read_file"], false).policy), None);
        let all = ["run_command", "term_open", "term_input", "agent_start", "agent_send", "coding_agent"];
        assert_eq!(exec_advice(&config(&[], &all, false).policy), None);
    }

    #[test]
    fn a_hosted_call_runs_reads_asks_for_the_rest_and_never_answers_an_approval() {
        let open = config(&[], &[], false);
        assert_eq!(hosted(&open, "read_file", json!({"path": "a"})), Verdict::Allow);
        assert_eq!(hosted(&open, "approvals", json!({})), Verdict::Allow);
        for (name, args) in [
            ("run_command", json!({"command": "git status"})),
            ("write_file", json!({"path": "a", "content": ""})),
            ("agent_send", json!({"session": "s-1", "text": "go on"})),
            ("fleet", json!({})),
            ("someday_tool", json!({})),
        ] {
            assert!(matches!(hosted(&open, name, args), Verdict::Ask(_)), "{name}");
        }
        assert_eq!(hosted(&open, "approve", json!({})), Verdict::Deny(PolicyRule::HostedApproval));
        // `allow_commands` lets a phone's command through; a hosted one still asks.
        let mut allowing = open.clone();
        allowing.approvals.allow_commands = vec!["git status".into()];
        allowing.policy.ask = vec!["run_command".into()];
        assert!(matches!(hosted(&allowing, "run_command", json!({"command": "git status"})), Verdict::Ask(_)));
        let mut strict = open.clone();
        strict.policy.hosted = HostedPolicy { trust: vec![], deny: vec!["@write".into()] };
        assert!(matches!(hosted(&strict, "read_file", json!({"path": "a"})), Verdict::Ask(_)));
        assert_eq!(hosted(&strict, "delete_file", json!({"path": "a"})), Verdict::Deny(PolicyRule::Hosted));
        let mut trusting = open.clone();
        trusting.policy.hosted.trust = vec!["@read".into(), "run_command".into()];
        assert_eq!(hosted(&trusting, "run_command", json!({"command": "ls"})), Verdict::Allow);
        // The agent's own deny covers hosted calls too.
        let denied = config(&[], &["read_file"], false);
        assert_eq!(hosted(&denied, "read_file", json!({"path": "a"})), Verdict::Deny(PolicyRule::Deny));
    }

    #[test]
    fn frames_ask_the_question_of_the_tools_they_stand_for() {
        let open = config(&[], &[], false);
        let subscribe = FrameAction::PushSubscribe { host: "push.example".into() };
        for action in
            [FrameAction::Approve, FrameAction::FollowApprovals, FrameAction::FollowSessions, FrameAction::TermAck]
        {
            assert_eq!(frame_verdict(&open, &action), Verdict::Allow, "{action:?}");
        }
        let no_approve = config(&[], &["approve"], false);
        assert_eq!(frame_verdict(&no_approve, &FrameAction::Approve), Verdict::Deny(PolicyRule::Deny));
        assert_eq!(frame_verdict(&no_approve, &FrameAction::FollowApprovals), Verdict::Deny(PolicyRule::Deny));
        assert_eq!(frame_verdict(&no_approve, &FrameAction::FollowSessions), Verdict::Allow);
        let no_exec = config(&[], &["@exec"], false);
        assert_eq!(frame_verdict(&no_exec, &FrameAction::FollowSessions), Verdict::Deny(PolicyRule::Deny));
        assert_eq!(frame_verdict(&no_exec, &FrameAction::TermAck), Verdict::Deny(PolicyRule::Deny));
        let only_open = config(&[], &["term_attach"], false);
        assert_eq!(frame_verdict(&only_open, &FrameAction::TermAck), Verdict::Allow);
        let no_notify = config(&[], &["@notify"], false);
        assert_eq!(frame_verdict(&no_notify, &subscribe), Verdict::Deny(PolicyRule::Deny));
        let reads_only = config(&["@read"], &[], false);
        assert_eq!(frame_verdict(&reads_only, &subscribe), Verdict::Deny(PolicyRule::Allow));
        assert_eq!(frame_verdict(&reads_only, &FrameAction::Approve), Verdict::Deny(PolicyRule::Allow));
        let mut asking = open.clone();
        asking.policy.ask = vec!["@notify".into(), "agent_log".into(), "term_open".into(), "approve".into()];
        assert!(
            matches!(frame_verdict(&asking, &subscribe), Verdict::Ask(ask) if ask.summary.contains("push.example"))
        );
        assert!(matches!(frame_verdict(&asking, &FrameAction::FollowSessions), Verdict::Ask(_)));
        assert_eq!(frame_verdict(&asking, &FrameAction::TermAck), Verdict::Allow);
        assert_eq!(frame_verdict(&asking, &FrameAction::Approve), Verdict::Allow, "approve never asks");
    }

    #[test]
    fn a_read_only_agent_still_offers_what_can_only_read_sometimes() {
        let read_only = config(&[], &[], true).policy;
        let offered: Vec<_> =
            ToolKind::ALL.into_iter().filter(|kind| offers(&read_only, kind.spec())).map(ToolKind::name).collect();
        assert_eq!(
            offered,
            [
                "read_file",
                "list_dir",
                "list_trash",
                "screenshot",
                "approve",
                "approvals",
                "fleet",
                "agent_interrupt",
                "agent_stop",
                "agent_sessions",
                "agent_log",
                "brief",
                "term_attach",
                "term_resize",
                "term_close",
                "term_list",
                "term_screen"
            ]
        );
        let refusal = PolicyRule::ReadOnly.refusal(&"x".repeat(100));
        assert_eq!(refusal.code, ErrorCode::DeniedByPolicy);
        assert!(refusal.message.starts_with(&"x".repeat(64)) && !refusal.message.contains(&"x".repeat(65)));
    }
}
