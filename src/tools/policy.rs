//! The policy from `config.toml` (`allow`, `deny`, `read_only`), in one place: [`verdict`] says
//! what it makes of one call, and only the dispatcher asks it ([`super::Dispatcher::dispatch`]).

use super::spec::ToolSpec;
use crate::config::Policy;
use crate::protocol::{ErrorCode, ToolError};

/// Why the policy refused a tool; recorded as the audit line's `policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyRule {
    Deny,
    Allow,
    ReadOnly,
}

impl PolicyRule {
    /// The rule's name in the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyRule::Deny => "deny",
            PolicyRule::Allow => "allow",
            PolicyRule::ReadOnly => "read_only",
        }
    }

    /// Why the rule refuses a tool, for the caller.
    pub fn reason(self) -> &'static str {
        match self {
            PolicyRule::Deny => "it is on the policy's deny list",
            PolicyRule::Allow => "it is not on the policy's allow list",
            PolicyRule::ReadOnly => "this agent is read-only and the tool can change the machine",
        }
    }

    /// The `denied-by-policy` answer to a call of `name` this rule refuses.
    pub fn refusal(self, name: &str) -> ToolError {
        let shown = crate::text::prefix(name, 64);
        ToolError::new(ErrorCode::DeniedByPolicy, format!("{shown} is not allowed here: {}", self.reason()))
    }
}

/// What the policy makes of one call. Round 3 adds `Ask` (run once the user approves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Refuse it `denied-by-policy`, naming the rule.
    Deny(PolicyRule),
}

/// The verdict on a call of `name`: refused when on the deny list, missing from a non-empty allow
/// list, or able to change the machine (`changes_machine`) while the agent is read-only. Calls
/// this machine runs, router tools and calls routed to environments all go through here.
pub fn verdict(policy: &Policy, name: &str, changes_machine: bool) -> Verdict {
    let listed = |list: &[String]| list.iter().any(|entry| entry == name);
    if listed(&policy.deny) {
        Verdict::Deny(PolicyRule::Deny)
    } else if !policy.allow.is_empty() && !listed(&policy.allow) {
        Verdict::Deny(PolicyRule::Allow)
    } else if policy.read_only && changes_machine {
        Verdict::Deny(PolicyRule::ReadOnly)
    } else {
        Verdict::Allow
    }
}

/// Whether the tool is offered (in `hello_ok` and to the voice model): some call of it can pass.
/// Each call is judged again by [`verdict`].
pub fn offers(policy: &Policy, spec: &ToolSpec) -> bool {
    !matches!(verdict(policy, spec.name, !spec.effect.can_only_read()), Verdict::Deny(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolKind;

    fn policy(allow: &[&str], deny: &[&str], read_only: bool) -> Policy {
        let list = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect();
        Policy { allow: list(allow), deny: list(deny), read_only }
    }

    #[test]
    fn deny_outranks_allow_and_read_only_refuses_only_changes() {
        let open = Policy::default();
        assert_eq!(verdict(&open, "run_command", true), Verdict::Allow);
        let denied = policy(&["run_command"], &["run_command"], false);
        assert_eq!(verdict(&denied, "run_command", false), Verdict::Deny(PolicyRule::Deny));
        let allow_list = policy(&["read_file"], &[], false);
        assert_eq!(verdict(&allow_list, "read_file", true), Verdict::Allow);
        assert_eq!(verdict(&allow_list, "list_dir", false), Verdict::Deny(PolicyRule::Allow));
        let read_only = policy(&[], &[], true);
        assert_eq!(verdict(&read_only, "write_file", true), Verdict::Deny(PolicyRule::ReadOnly));
        assert_eq!(verdict(&read_only, "read_file", false), Verdict::Allow);
        // A name this build does not know is judged by its name and effect like any other.
        assert_eq!(verdict(&denied, "someday_tool", true), Verdict::Deny(PolicyRule::Allow));
    }

    #[test]
    fn a_read_only_agent_still_offers_what_can_only_read_sometimes() {
        let read_only = policy(&[], &[], true);
        let offered: Vec<_> =
            ToolKind::ALL.into_iter().filter(|kind| offers(&read_only, kind.spec())).map(ToolKind::name).collect();
        assert_eq!(offered, ["read_file", "list_dir", "screenshot", "fleet"]);
        let refusal = PolicyRule::ReadOnly.refusal(&"x".repeat(100));
        assert_eq!(refusal.code, ErrorCode::DeniedByPolicy);
        assert!(refusal.message.starts_with(&"x".repeat(64)) && !refusal.message.contains(&"x".repeat(65)));
    }
}
