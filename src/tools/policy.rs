//! The policy from `config.toml` (`allow`, `deny`, `read_only`, `ask`), in one place: [`verdict`]
//! says what it makes of one call, and only the dispatcher asks it ([`super::Dispatcher::dispatch`]).

use std::path::Path;

use serde_json::Value;

use super::spec::ToolSpec;
use crate::approvals::{ask_rule, Ask};
use crate::config::{Config, Policy};
use crate::protocol::{ErrorCode, ToolError};

/// Why the policy refused a tool; recorded as the audit line's `policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyRule {
    Deny,
    Allow,
    ReadOnly,
    /// Under `ask`, and the user denied it or nobody answered in time.
    Ask,
}

impl PolicyRule {
    /// The rule's name in the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyRule::Deny => "deny",
            PolicyRule::Allow => "allow",
            PolicyRule::ReadOnly => "read_only",
            PolicyRule::Ask => "ask",
        }
    }

    /// Why the rule refuses a tool, for the caller.
    pub fn reason(self) -> &'static str {
        match self {
            PolicyRule::Deny => "it is on the policy's deny list",
            PolicyRule::Allow => "it is not on the policy's allow list",
            PolicyRule::ReadOnly => "this agent is read-only and the tool can change the machine",
            PolicyRule::Ask => "the user did not approve it",
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
    /// The checked arguments of a call this machine runs, which `ask` may hold for the user;
    /// `None` for calls `ask` does not cover (router tools, calls routed to environments, bad arguments).
    pub askable: Option<&'a Value>,
    /// Where relative paths of the arguments resolve.
    pub workspace: &'a Path,
}

/// The verdict on a call: refused when on the deny list, missing from a non-empty allow list, or
/// able to change the machine while the agent is read-only; else held for the user when the `ask`
/// list and the `[approvals]` rules say so; else allowed. Calls this machine runs, router tools and
/// calls routed to environments all go through here.
pub fn verdict(config: &Config, call: &Judged<'_>) -> Verdict {
    match refusal(&config.policy, call.name, call.changes_machine) {
        Some(rule) => Verdict::Deny(rule),
        None => call
            .askable
            .and_then(|args| ask_rule(config, call.name, args, call.workspace, call.changes_machine))
            .map_or(Verdict::Allow, Verdict::Ask),
    }
}

/// The rule of `allow`, `deny` and `read_only` that refuses a call, if one does.
fn refusal(policy: &Policy, name: &str, changes_machine: bool) -> Option<PolicyRule> {
    let listed = |list: &[String]| list.iter().any(|entry| entry == name);
    if listed(&policy.deny) {
        Some(PolicyRule::Deny)
    } else if !policy.allow.is_empty() && !listed(&policy.allow) {
        Some(PolicyRule::Allow)
    } else if policy.read_only && changes_machine {
        Some(PolicyRule::ReadOnly)
    } else {
        None
    }
}

/// Whether the tool is offered (in `hello_ok` and to the voice model): some call of it can pass
/// (one it asks for counts). Each call is judged again by [`verdict`].
pub fn offers(policy: &Policy, spec: &ToolSpec) -> bool {
    refusal(policy, spec.name, !spec.effect.can_only_read()).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolKind;

    fn config(allow: &[&str], deny: &[&str], read_only: bool) -> Config {
        let list = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect();
        let policy = Policy { allow: list(allow), deny: list(deny), read_only, ask: list(&["write_file"]) };
        Config { policy, ..Default::default() }
    }

    fn judge(config: &Config, name: &str, changes_machine: bool, askable: Option<&Value>) -> Verdict {
        verdict(config, &Judged { name, changes_machine, askable, workspace: Path::new("/ws") })
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
        let args = serde_json::json!({"path": "notes.txt", "content": "hi"});
        assert!(
            matches!(judge(&open, "write_file", true, Some(&args)), Verdict::Ask(ask) if ask.summary.contains("notes.txt"))
        );
        assert_eq!(judge(&open, "write_file", true, None), Verdict::Allow);
        assert_eq!(judge(&read_only, "write_file", true, Some(&args)), Verdict::Deny(PolicyRule::ReadOnly));
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
