//! Answers: the `approve` tool and frame, from whoever may give one.

use serde_json::{Map, Value};

use super::{Broker, DecideError};
use crate::protocol::{self, Approve, DecidedBy, Decision, ErrorCode, ToolError, MAX_APPROVAL_TEXT_LEN};

/// Longest approval id accepted.
const MAX_ID_LEN: usize = 64;
/// Largest `answers` accepted, in bytes of JSON.
const MAX_ANSWERS_LEN: usize = 16 << 10;

/// Who an answer from `caller` counts as: `voice` for the self-hosted call's model, `cli` for local
/// clients (`voxa approve`, scripts), `phone` for the relay's clients. `None` for a relay-hosted
/// voice call: the relay's model never decides, the phone does.
pub fn decided_by(caller: &str) -> Option<DecidedBy> {
    match caller {
        "gemini" => Some(DecidedBy::Voice),
        protocol::HOSTED_CALLER => None,
        "loopback" => Some(DecidedBy::Cli),
        _ => Some(DecidedBy::Phone),
    }
}

/// Applies an answer from `caller`; `not-found` when the approval was decided or has expired.
pub fn answer(broker: &Broker, approve: Approve, caller: &str) -> Result<(), ToolError> {
    let Some(by) = decided_by(caller) else {
        return Err(ToolError::new(
            ErrorCode::DeniedByPolicy,
            "a voice call hosted by the relay cannot answer approvals; answer on the phone",
        ));
    };
    if approve.approval.is_empty() || approve.approval.len() > MAX_ID_LEN {
        return Err(ToolError::new(ErrorCode::InvalidArgs, "field `approval` must be an approval id (a-…)"));
    }
    if approve.message.as_ref().is_some_and(|message| message.len() > MAX_APPROVAL_TEXT_LEN) {
        return Err(ToolError::new(
            ErrorCode::TooLarge,
            format!("field `message` is longer than {MAX_APPROVAL_TEXT_LEN} bytes"),
        ));
    }
    if let Some(answers) = &approve.answers {
        if !answers.is_object() {
            return Err(ToolError::new(ErrorCode::InvalidArgs, "field `answers` must be an object"));
        }
        if serde_json::to_vec(answers).map_or(true, |bytes| bytes.len() > MAX_ANSWERS_LEN) {
            return Err(ToolError::new(
                ErrorCode::TooLarge,
                format!("field `answers` is larger than {MAX_ANSWERS_LEN} bytes"),
            ));
        }
    }
    let message = approve.message.filter(|message| !message.trim().is_empty());
    broker.decide(&approve.approval, approve.decision, message, approve.answers, by).map_err(|err| {
        let code = match err {
            DecideError::NotFound => ErrorCode::NotFound,
            DecideError::SessionNotOffered | DecideError::NeedsExplicitAllow => ErrorCode::InvalidArgs,
        };
        ToolError::new(code, err.to_string())
    })
}

/// The `approve` tool's arguments as an answer. `answer` (a chosen label, the form a voice model
/// gives) answers every question of the approval; `answers` maps each question to its label.
pub fn approve_from_args(broker: &Broker, args: &Value) -> Result<Approve, ToolError> {
    let text = |field: &str| args.get(field).and_then(Value::as_str);
    let approval = text("approval").unwrap_or_default().to_owned();
    let decision = match text("decision").unwrap_or_default() {
        "allow" => Decision::Allow,
        "allow_session" => Decision::AllowSession,
        "deny" => Decision::Deny,
        other => {
            return Err(ToolError::new(
                ErrorCode::InvalidArgs,
                format!(
                    "field `decision` must be allow, allow_session or deny, not {:?}",
                    crate::text::prefix(other, 32)
                ),
            ))
        }
    };
    let mut answers = args.get("answers").filter(|value| !value.is_null()).cloned();
    if let (None, Some(label)) = (&answers, text("answer")) {
        let questions = broker.get(&approval).and_then(|frame| frame.questions).unwrap_or_default();
        let map: Map<String, Value> = questions
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|question| question.get("question").and_then(Value::as_str))
            .map(|question| (question.to_owned(), Value::from(label)))
            .collect();
        answers = (!map.is_empty()).then_some(Value::Object(map));
    }
    Ok(Approve { approval, decision, message: text("message").map(str::to_owned), answers, receipt: None, env: None })
}
