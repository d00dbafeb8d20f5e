//! The policy from `config.toml` (`allow`, `deny`, `read_only`), in one place.

use crate::config::Policy;

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
}

/// The rule that refuses the tool `name`, if any: on the deny list, missing from a non-empty
/// allow list, or able to change the machine (`changes_machine`) while the agent is read-only.
/// Calls this machine runs, router tools and calls routed to environments all go through here.
pub fn refusal(policy: &Policy, name: &str, changes_machine: bool) -> Option<PolicyRule> {
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
