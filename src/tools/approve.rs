//! The approval tools, `approve` and `approvals`: they run on the agent's approval broker, which
//! the dispatcher holds (the agent's context owns it), not on the toolbox.

use serde_json::{json, Value};

use super::args::Args;
use super::spec::ApprovalTool;
use crate::approvals::{self, Broker};
use crate::protocol::{Approve, ToolError};

/// One call of an approval tool, its arguments read.
pub(crate) enum ApprovalCall {
    Approve(Approve),
    List,
}

impl ApprovalCall {
    /// The call of `tool` these checked arguments make (an `answer` label is matched against the
    /// approval's questions, so the broker is asked).
    pub(crate) fn parse(tool: ApprovalTool, args: &Args<'_>, broker: &Broker) -> Result<Self, ToolError> {
        Ok(match tool {
            ApprovalTool::Approve => ApprovalCall::Approve(approvals::approve_from_args(broker, &args.value())?),
            ApprovalTool::List => ApprovalCall::List,
        })
    }

    /// Answers or lists; `caller` says who the answer counts as.
    pub(crate) fn run(self, broker: &Broker, caller: &str) -> Result<Value, ToolError> {
        match self {
            ApprovalCall::Approve(approve) => approvals::answer(broker, approve, caller).map(|()| json!({})),
            ApprovalCall::List => Ok(json!({ "approvals": broker.open() })),
        }
    }
}
