//! Claude Code as a long-lived process: stream-json on both pipes, permission prompts over stdio
//! (`control_request` `can_use_tool`, answered with a `control_response`), the text as it
//! streams (`--include-partial-messages`), `--resume=<id>` after the process ended.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::adapter::{line, Adapter, Ask, Launch, Output};
use super::describe::{edit_diff, risk, summary};
use super::event::{bounded_input, capped, MAX_TEXT_LEN, MAX_TOOL_OUTPUT};
use crate::approvals::{Answer, Request};
use crate::protocol::Event;
use crate::protocol::{ApprovalSource, Decision};

/// What the CLI says when it has no credentials.
const NOT_LOGGED_IN: &str = "Not logged in";

/// The Claude Code adapter of one session.
pub struct Claude {
    program: PathBuf,
    /// voxa's id of the session, the source of its approvals.
    session: String,
    cwd: PathBuf,
    requests: u64,
    /// Set when the CLI printed the "not logged in" notice this turn.
    not_logged_in: bool,
    /// The process's `total_cost_usd` at the end of the last turn: Claude reports a running
    /// total per process (from 0 again in a resumed one), a turn costs what it added.
    cost_so_far: f64,
    /// An interrupt was sent during the running turn: its end is not a failure.
    interrupted: bool,
}

impl Claude {
    pub fn new(program: PathBuf, session: String, cwd: PathBuf) -> Self {
        Claude { program, session, cwd, requests: 0, not_logged_in: false, cost_so_far: 0.0, interrupted: false }
    }

    fn next_request_id(&mut self) -> String {
        self.requests += 1;
        format!("voxa-{}", self.requests)
    }

    fn assistant(&mut self, value: &Value, out: &mut Vec<Output>) {
        let Some(items) = value.pointer("/message/content").and_then(Value::as_array) else { return };
        for item in items {
            match item.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = item.get("text").and_then(Value::as_str).unwrap_or_default();
                    if text.starts_with(NOT_LOGGED_IN) {
                        self.not_logged_in = true;
                    }
                    out.push(Output::Event(Event::Text { text: capped(text, MAX_TEXT_LEN), partial: false }));
                }
                Some("tool_use") => {
                    let name = str_at(item, "/name");
                    let input = item.get("input").cloned().unwrap_or(Value::Null);
                    let summary = summary(&name, &input, &self.cwd);
                    let diff = edit_diff(&name, &input);
                    out.push(Output::Event(Event::ToolUse {
                        tool_use_id: str_at(item, "/id"),
                        input: bounded_input(input, &summary),
                        name,
                        summary,
                        diff,
                    }));
                }
                _ => {}
            }
        }
    }

    fn tool_results(value: &Value, out: &mut Vec<Output>) {
        let Some(items) = value.pointer("/message/content").and_then(Value::as_array) else { return };
        for item in items.iter().filter(|item| item.get("type").and_then(Value::as_str) == Some("tool_result")) {
            let output = match item.get("content") {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .filter_map(|block| block.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            out.push(Output::Event(Event::ToolResult {
                tool_use_id: str_at(item, "/tool_use_id"),
                ok: !item.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                output: capped(&output, MAX_TOOL_OUTPUT),
            }));
        }
    }

    fn control_request(&self, value: &Value, out: &mut Vec<Output>) {
        let Some(request) = value.get("request") else { return };
        let id = str_at(value, "/request_id");
        if request.get("subtype").and_then(Value::as_str) != Some("can_use_tool") || id.is_empty() {
            // Nothing else is asked of a host today; answering keeps the CLI from waiting.
            let subtype = str_at(request, "/subtype");
            out.push(Output::Write(vec![line(&json!({
                "type": "control_response",
                "response": {"subtype": "error", "request_id": id, "error": format!("voxa does not handle {subtype}")}
            }))]));
            return;
        }
        let tool = str_at(request, "/tool_name");
        let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
        let questions = (tool == "AskUserQuestion").then(|| input.get("questions").cloned()).flatten();
        let summary = summary(&tool, &input, &self.cwd);
        let request = Request {
            source: ApprovalSource::Session(self.session.clone()),
            risk: risk(&tool, &input, &self.cwd),
            diff: edit_diff(&tool, &input),
            input: bounded_input(input.clone(), &summary),
            tool,
            summary,
            offers_session: questions.is_none(),
            questions,
        };
        out.push(Output::Ask { ask: Ask { id, input }, request });
    }

    fn result(&mut self, value: &Value, out: &mut Vec<Output>) {
        let subtype = str_at(value, "/subtype");
        let is_error = value.get("is_error").and_then(Value::as_bool).unwrap_or(false);
        let ok = subtype == "success" && !is_error;
        let interrupted = std::mem::take(&mut self.interrupted) && !ok;
        let mut result = str_at(value, "/result");
        // An interrupted turn ends as `error_during_execution` with the CLI's diagnostics: the
        // user asked for it, so it is told as an interrupt, not as errors.
        if interrupted {
            result = "Interrupted".to_owned();
        } else if let Some(errors) = value.get("errors").and_then(Value::as_array) {
            let errors: Vec<&str> = errors.iter().filter_map(Value::as_str).collect();
            if !errors.is_empty() {
                out.push(Output::Event(Event::error("agent-error", capped(&errors.join("; "), MAX_TEXT_LEN))));
                if result.is_empty() {
                    result = errors.join("; ");
                }
            }
        }
        if std::mem::take(&mut self.not_logged_in) {
            out.push(Output::Event(Event::error(
                "unavailable",
                "Claude Code is not logged in on this computer: run `claude` once in a terminal and log in, or \
                 set ANTHROPIC_API_KEY for voxa",
            )));
        }
        if let Some(id) = value.get("session_id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
            out.push(Output::ResumeId(id.to_owned()));
        }
        let cost_usd =
            value.get("total_cost_usd").and_then(Value::as_f64).filter(|total| total.is_finite()).map(|total| {
                // A total below the last one is a new process's (resumed): it started from 0.
                let turn = if total >= self.cost_so_far { total - self.cost_so_far } else { total };
                self.cost_so_far = total;
                turn.max(0.0)
            });
        out.push(Output::Event(Event::TurnEnd {
            ok,
            result: capped(&result, MAX_TEXT_LEN),
            cost_usd,
            duration_ms: value.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
            interrupted,
        }));
        out.push(Output::TurnEnded);
    }
}

fn str_at(value: &Value, pointer: &str) -> String {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned()
}

impl Adapter for Claude {
    fn launch(&self, resume: Option<&str>, _turn: Option<&str>) -> Launch {
        let mut args: Vec<String> = [
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
            "--permission-prompt-tool",
            "stdio",
            "--include-partial-messages",
        ]
        .map(String::from)
        .to_vec();
        if let Some(id) = resume {
            // The `=` form: an id can never be read as a flag.
            args.push(format!("--resume={id}"));
        }
        Launch { program: self.program.clone(), args, env: Vec::new() }
    }

    fn turn(&mut self, text: &str) -> Vec<String> {
        vec![line(&json!({
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": null,
            "session_id": "default",
        }))]
    }

    fn hello(&mut self, _resume: Option<&str>) -> Vec<String> {
        // A new process: its running total starts from 0.
        self.cost_so_far = 0.0;
        Vec::new()
    }

    fn interrupt(&mut self) -> Vec<String> {
        self.interrupted = true;
        let id = self.next_request_id();
        vec![line(&json!({"type": "control_request", "request_id": id, "request": {"subtype": "interrupt"}}))]
    }

    fn answer(&mut self, ask: &Ask, answer: &Answer) -> Vec<String> {
        let response = match answer.decision {
            Decision::Allow | Decision::AllowSession => {
                let mut input = ask.input.clone();
                if let (Some(answers), Value::Object(map)) = (&answer.answers, &mut input) {
                    map.insert("answers".into(), answers.clone());
                }
                // Never `updatedPermissions`: Claude would remember the rule where nothing can
                // take it back. "Allow for session" is voxa's grant, which answers later prompts.
                json!({"behavior": "allow", "updatedInput": input})
            }
            Decision::Deny => json!({
                "behavior": "deny",
                "message": answer.denial_message(),
            }),
        };
        vec![line(&json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": ask.id, "response": response},
        }))]
    }

    fn on_line(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        // Anything but a JSON object (a warning on stdout) is not the protocol: skipped.
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else { return out };
        match value.get("type").and_then(Value::as_str) {
            Some("system") if value.get("subtype").and_then(Value::as_str) == Some("init") => {
                if let Some(id) = value.get("session_id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
                    out.push(Output::ResumeId(id.to_owned()));
                }
            }
            Some("stream_event") => {
                let delta = value.pointer("/event/delta");
                let is_text = delta.and_then(|d| d.get("type")).and_then(Value::as_str) == Some("text_delta");
                if let (true, Some(text)) = (is_text, delta.and_then(|d| d.get("text")).and_then(Value::as_str)) {
                    out.push(Output::Event(Event::Text { text: capped(text, MAX_TEXT_LEN), partial: true }));
                }
            }
            Some("assistant") => self.assistant(&value, &mut out),
            Some("user") => Self::tool_results(&value, &mut out),
            Some("control_request") => self.control_request(&value, &mut out),
            Some("control_cancel_request") => out.push(Output::Withdrawn(str_at(&value, "/request_id"))),
            Some("result") => self.result(&value, &mut out),
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::DecidedBy;

    fn claude() -> Claude {
        Claude::new("claude".into(), "s-1".into(), "/work".into())
    }

    fn events(adapter: &mut Claude, line: &str) -> Vec<Output> {
        adapter.on_line(line.as_bytes())
    }

    #[test]
    fn the_command_line_has_both_pipes_and_the_stdio_prompt_and_resumes_in_one_argument() {
        let launch = claude().launch(Some("abc"), None);
        assert!(!launch.args.contains(&"-p".to_owned()));
        for needed in
            ["--input-format", "--permission-prompt-tool", "stdio", "--include-partial-messages", "--resume=abc"]
        {
            assert!(launch.args.contains(&needed.to_owned()), "{needed}");
        }
        assert!(!claude().launch(None, None).args.iter().any(|arg| arg.starts_with("--resume")));
    }

    #[test]
    fn stream_lines_become_events() {
        let mut adapter = claude();
        assert_eq!(
            events(
                &mut adapter,
                r#"{"type":"system","subtype":"init","session_id":"abc","cwd":"/work","new_field":1}"#
            ),
            [Output::ResumeId("abc".into())]
        );
        assert_eq!(
            events(
                &mut adapter,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}}"#
            ),
            [Output::Event(Event::Text { text: "Hel".into(), partial: true })]
        );
        let tool = events(
            &mut adapter,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
        );
        assert_eq!(tool[0], Output::Event(Event::Text { text: "Hello".into(), partial: false }));
        let Output::Event(Event::ToolUse { tool_use_id, summary, diff, .. }) = &tool[1] else { panic!("{tool:?}") };
        assert_eq!((tool_use_id.as_str(), summary.as_str(), diff), ("t1", "ls (in /work)", &None));
        assert_eq!(
            events(
                &mut adapter,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a\nb"}],"is_error":true}]}}"#
            ),
            [Output::Event(Event::ToolResult { tool_use_id: "t1".into(), ok: false, output: "a\nb".into() })]
        );
        let end = events(
            &mut adapter,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done","session_id":"abc","total_cost_usd":0.5,"duration_ms":7}"#,
        );
        assert_eq!(
            end,
            [
                Output::ResumeId("abc".into()),
                Output::Event(Event::TurnEnd {
                    ok: true,
                    result: "Done".into(),
                    cost_usd: Some(0.5),
                    duration_ms: 7,
                    interrupted: false
                }),
                Output::TurnEnded
            ]
        );
        assert!(events(&mut adapter, "warning: not json").is_empty());
        assert!(events(&mut adapter, r#"{"type":"rate_limit_event"}"#).is_empty());
    }

    #[test]
    fn a_permission_prompt_is_asked_and_answered_in_the_clis_words() {
        let mut adapter = claude();
        let asked = events(
            &mut adapter,
            r#"{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Write","input":{"file_path":"/work/a.txt","content":"hi"},"permission_suggestions":[{"type":"setMode","mode":"acceptEdits","destination":"session"}]}}"#,
        );
        let [Output::Ask { ask, request }] = asked.as_slice() else { panic!("{asked:?}") };
        assert_eq!(
            (request.tool.as_str(), request.summary.as_str(), request.offers_session),
            ("Write", "write a.txt", true)
        );
        let allow = Answer { decision: Decision::AllowSession, message: None, answers: None, by: DecidedBy::Phone };
        let written: Value = serde_json::from_str(&adapter.answer(ask, &allow)[0]).unwrap();
        assert_eq!(written["response"]["request_id"], "r1");
        assert_eq!(written["response"]["response"]["behavior"], "allow");
        assert_eq!(written["response"]["response"]["updatedInput"]["content"], "hi");
        // voxa keeps the grant: Claude is never told to remember a rule it could not forget.
        assert!(written["response"]["response"].get("updatedPermissions").is_none(), "{written}");
        let deny = Answer { decision: Decision::Deny, message: Some("no".into()), answers: None, by: DecidedBy::Cli };
        let written: Value = serde_json::from_str(&adapter.answer(ask, &deny)[0]).unwrap();
        assert_eq!(written["response"]["response"], json!({"behavior": "deny", "message": "no"}));
        assert_eq!(
            events(&mut adapter, r#"{"type":"control_cancel_request","request_id":"r1"}"#),
            [Output::Withdrawn("r1".into())]
        );
    }

    #[test]
    fn a_turn_costs_what_it_added_to_the_running_total_and_an_interrupt_is_no_failure() {
        let mut adapter = claude();
        let cost = |adapter: &mut Claude, line: &str| {
            let out = events(adapter, line);
            out.iter()
                .find_map(|o| match o {
                    Output::Event(Event::TurnEnd { cost_usd, .. }) => Some(cost_usd.unwrap()),
                    _ => None,
                })
                .unwrap()
        };
        let result = |total: f64| format!(r#"{{"type":"result","subtype":"success","total_cost_usd":{total}}}"#);
        assert!((cost(&mut adapter, &result(0.0017)) - 0.0017).abs() < 1e-9);
        assert!((cost(&mut adapter, &result(0.0031)) - 0.0014).abs() < 1e-9, "the second turn, not the total");
        // A resumed process counts from 0 again.
        adapter.hello(Some("abc"));
        assert!((cost(&mut adapter, &result(0.0009)) - 0.0009).abs() < 1e-9);
        assert!(
            (cost(&mut adapter, &result(0.0002)) - 0.0002).abs() < 1e-9,
            "a total below the last is a new process's"
        );

        adapter.interrupt();
        let out = events(
            &mut adapter,
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["[ede_diagnostic] aborted"],"total_cost_usd":0.0003}"#,
        );
        assert!(!out.iter().any(|o| matches!(o, Output::Event(Event::Error { .. }))), "{out:?}");
        assert!(
            out.iter().any(|o| matches!(o, Output::Event(Event::TurnEnd { ok: false, interrupted: true, result, .. }) if result == "Interrupted")),
            "{out:?}"
        );
        // The next failure is a failure again.
        let out = events(
            &mut adapter,
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["boom"]}"#,
        );
        assert!(out.iter().any(|o| matches!(o, Output::Event(Event::Error { .. }))), "{out:?}");
    }

    #[test]
    fn a_question_carries_its_answers_back() {
        let mut adapter = claude();
        let asked = events(
            &mut adapter,
            r#"{"type":"control_request","request_id":"q","request":{"subtype":"can_use_tool","tool_name":"AskUserQuestion","input":{"questions":[{"question":"Which?","options":[{"label":"A"},{"label":"B"}]}]}}}"#,
        );
        let [Output::Ask { ask, request }] = asked.as_slice() else { panic!("{asked:?}") };
        assert_eq!(request.questions.as_ref().unwrap()[0]["question"], "Which?");
        let answer = Answer {
            decision: Decision::Allow,
            message: None,
            answers: Some(json!({"Which?": "B"})),
            by: DecidedBy::Phone,
        };
        let written: Value = serde_json::from_str(&adapter.answer(ask, &answer)[0]).unwrap();
        assert_eq!(written["response"]["response"]["updatedInput"]["answers"]["Which?"], "B");
        assert_eq!(written["response"]["response"]["updatedInput"]["questions"][0]["question"], "Which?");
    }

    #[test]
    fn other_control_requests_are_refused_and_a_missing_login_is_explained() {
        let mut adapter = claude();
        let out = events(
            &mut adapter,
            r#"{"type":"control_request","request_id":"h","request":{"subtype":"hook_callback"}}"#,
        );
        let [Output::Write(lines)] = out.as_slice() else { panic!("{out:?}") };
        assert!(lines[0].contains(r#""subtype":"error""#) && lines[0].contains(r#""request_id":"h""#));
        events(
            &mut adapter,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Not logged in · Please run /login"}]}}"#,
        );
        let out =
            events(&mut adapter, r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in"}"#);
        assert!(
            out.iter().any(|o| matches!(o, Output::Event(Event::Error { code, .. }) if code == "unavailable")),
            "{out:?}"
        );
        let interrupt: Value = serde_json::from_str(&adapter.interrupt()[0]).unwrap();
        assert_eq!(interrupt["request"]["subtype"], "interrupt");
    }
}
