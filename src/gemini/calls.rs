//! The model's function calls in one call's bridge: each runs at once beside the others (through
//! [`VoiceTools`](super::VoiceTools)), its activity goes to the phone, its answer to the connection
//! that asked. An `approve` with `allow` runs only with the user's spoken consent ([`consent`]).

use serde_json::Value;
use tracing::{debug, info_span, Instrument};

use super::bridge::{Bridge, Conn, Running, ToolDone, Unsettled};
use super::consent::NoConsent;
use super::socket::GeminiSocket;
use super::wire::{self, FunctionCall};
use super::MAX_UNSETTLED;
use crate::protocol::{self, AgentMessage, ErrorCode, ToolActivityState, ToolError};
use crate::tools::{ToolOutput, ENV_ARG};

#[cfg(doc)]
use super::consent;

/// The tool whose `allow` needs the user's spoken consent.
const APPROVE_TOOL: &str = "approve";

/// What an `approve` call asks: the approval, whether it allows, and the options it picks for a
/// question.
struct Answering {
    approval: String,
    allows: bool,
    labels: Vec<String>,
}

impl Answering {
    fn of(name: &str, args: &Value) -> Option<Answering> {
        if name != APPROVE_TOOL {
            return None;
        }
        let text = |field: &str| args.get(field).and_then(Value::as_str);
        let allows = matches!(text("decision"), Some("allow" | "allow_session"));
        let mut labels: Vec<String> = text("answer").map(str::to_owned).into_iter().collect();
        if let Some(Value::Object(answers)) = args.get("answers") {
            labels.extend(answers.values().filter_map(Value::as_str).map(str::to_owned));
        }
        Some(Answering { approval: text("approval").unwrap_or_default().to_owned(), allows, labels })
    }
}

impl Bridge {
    /// Runs one of Gemini's function calls at once, beside any others.
    pub(super) async fn start_tool(&mut self, call: FunctionCall, link: Option<&GeminiSocket>) {
        let FunctionCall { id, name, args } = call;
        if self.running.contains_key(&id) {
            debug!(%id, "ignored a repeated tool call id that is still running");
            return;
        }
        if self.running.len() >= protocol::MAX_CALLS_IN_FLIGHT {
            let error = ToolError::new(ErrorCode::Busy, "too many tool calls are running; try again shortly");
            if let Some(link) = link {
                self.to_gemini(link, wire::tool_response(&id, &name, wire::tool_result(&Err(error)))).await;
            }
            return;
        }
        let answering = Answering::of(&name, &args);
        let approval = answering.as_ref().map(|answering| answering.approval.clone());
        self.to_phone(activity(&id, &name, ToolActivityState::Started, None, approval.clone())).await;
        if let Some(Answering { approval, allows: true, labels }) = &answering {
            if let Err(refused) = self.consent.check(approval, labels) {
                return self.refuse_approval(&id, &name, approval, refused, link).await;
            }
        }
        let cancel = self.end.child_token();
        let running = Running { cancel: cancel.clone(), generation: self.generation, approval };
        self.running.insert(id.clone(), running);
        let call = self.voice_tools.run(tool_call(id.clone(), name.clone(), args), cancel.clone());
        let span = info_span!("gemini_tool", %id, tool = %name);
        self.tools.spawn(
            async move {
                tokio::pin!(call);
                let outcome = tokio::select! {
                    outcome = &mut call => outcome,
                    _ = cancel.cancelled() => match tokio::time::timeout(protocol::CANCEL_GRACE, &mut call).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(ToolError::new(ErrorCode::Cancelled, "the call was cancelled")),
                    },
                };
                ToolDone { id, name, outcome }
            }
            .instrument(span),
        );
    }

    /// The model allowed an approval the user's words do not back: nothing runs, the model hears
    /// `no-spoken-consent`, the phone sees the call fail with that code (its card stays open).
    async fn refuse_approval(
        &mut self,
        id: &str,
        name: &str,
        approval: &str,
        refused: NoConsent,
        link: Option<&GeminiSocket>,
    ) {
        debug!(?refused, "an approve without the user's spoken consent was refused");
        let error = ToolError::new(ErrorCode::NoSpokenConsent, refused.message(approval));
        let shown = Some(approval.to_owned());
        self.to_phone(activity(id, name, ToolActivityState::Finished, Some(&error), shown)).await;
        let response = wire::tool_response(id, name, wire::tool_result(&Err(error)));
        match link {
            Some(link) => self.to_gemini(link, response).await,
            None => debug!("no connection to answer the refused approve on"),
        }
    }

    /// A tool finished: the image to the phone, `tool_activity`, and Gemini's answer unless it
    /// cancelled the call. A call from an earlier connection is told to the current session as a
    /// note (held until one is ready).
    pub(super) async fn on_tool_done(&mut self, done: ToolDone, conn: &mut Conn) {
        let ToolDone { id, name, outcome } = done;
        if let Ok(ToolOutput { image: Some(shot), .. }) = &outcome {
            self.to_phone(shot.image_frame(&id)).await;
        }
        let approval = self.running.get(&id).and_then(|running| running.approval.clone());
        if let (Some(approval), true) = (&approval, outcome.is_ok()) {
            self.consent.settled(approval);
        }
        let failure = outcome.as_ref().err();
        self.to_phone(activity(&id, &name, ToolActivityState::Finished, failure, approval)).await;
        let Some(running) = self.running.remove(&id) else { return };
        let response = wire::tool_result(&outcome);
        match conn.link() {
            Some(link) if running.generation == self.generation => {
                self.to_gemini(link, wire::tool_response(&id, &name, response.clone())).await;
                if self.unsettled.len() == MAX_UNSETTLED {
                    self.unsettled.pop_front();
                }
                self.unsettled.push_back(Unsettled { id, name, response });
                self.resume_when_settled(conn);
            }
            Some(link) => {
                debug!(%id, "tool finished after its Gemini connection was replaced; told as a note");
                self.say(link, &wire::late_outcome(&id, &name, &response)).await;
            }
            None => self.hold_text(wire::late_outcome(&id, &name, &response)),
        }
    }
}

/// The `tool_activity` frame of a call: started, or finished (`failure` when it failed).
fn activity(
    id: &str,
    name: &str,
    state: ToolActivityState,
    failure: Option<&ToolError>,
    approval: Option<String>,
) -> AgentMessage {
    let ok = (state == ToolActivityState::Finished).then_some(failure.is_none());
    AgentMessage::ToolActivity {
        id: id.to_owned(),
        name: name.to_owned(),
        state,
        ok,
        code: failure.map(|error| error.code),
        approval,
    }
}

/// A Gemini function call as a `tool_call` (docs/PROTOCOL.md): an `env` argument routes it to another environment.
fn tool_call(id: String, name: String, mut args: Value) -> protocol::ToolCall {
    let env = match args.as_object_mut().and_then(|map| map.remove(ENV_ARG)) {
        Some(Value::String(env)) if !env.is_empty() => Some(env),
        _ => None,
    };
    protocol::ToolCall { id, name, args, env, caller: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_env_argument_becomes_the_calls_environment() {
        let call = tool_call("1".into(), "run_command".into(), serde_json::json!({"command": "ls", "env": "devbox"}));
        assert_eq!(call.env.as_deref(), Some("devbox"));
        assert_eq!(call.args, serde_json::json!({"command": "ls"}));
        let call = tool_call("2".into(), "run_command".into(), serde_json::json!({"command": "ls", "env": ""}));
        assert_eq!(call.env, None);
        assert_eq!(call.args, serde_json::json!({"command": "ls"}));
    }

    #[test]
    fn only_an_approve_that_allows_asks_for_consent() {
        let allow = serde_json::json!({"approval": "a-1", "decision": "allow"});
        let answering = Answering::of("approve", &allow).unwrap();
        assert!(answering.allows && answering.approval == "a-1" && answering.labels.is_empty());
        let session = serde_json::json!({"approval": "a-1", "decision": "allow_session"});
        assert!(Answering::of("approve", &session).unwrap().allows);
        let deny = serde_json::json!({"approval": "a-1", "decision": "deny"});
        assert!(!Answering::of("approve", &deny).unwrap().allows, "a no by voice needs no consent");
        let question = serde_json::json!({"approval": "a-2", "decision": "allow", "answers": {"Which?": "SQLite"}});
        assert_eq!(Answering::of("approve", &question).unwrap().labels, ["SQLite"]);
        assert!(Answering::of("run_command", &allow).is_none());
    }
}
