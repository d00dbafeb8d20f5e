//! Coding agents configured in `config.toml` (`[agents.<name>]`): one process per turn, the
//! turn's text in place of `{prompt}`. A `text` agent's output is its answer; a `stream-json` one
//! is read as Claude Code's stream.

use std::path::PathBuf;

use super::adapter::{Adapter, Ask, Launch, Output};
use super::claude::Claude;
use super::event::{capped, MAX_TEXT_LEN};
use crate::approvals::Answer;
use crate::config::AgentCommand;
use crate::protocol::Event;
use crate::tools::coding_agent::PROMPT_PLACEHOLDER;
use crate::tools::output::AnsiStripper;

/// A configured agent of one session.
pub struct Plain {
    program: PathBuf,
    command: AgentCommand,
    /// Set for `stream-json` agents.
    stream: Option<Claude>,
    text: String,
    ended: bool,
    stripper: AnsiStripper,
}

impl Plain {
    pub fn new(program: PathBuf, command: AgentCommand, session: String, cwd: PathBuf) -> Self {
        let stream = (command.format == "stream-json").then(|| Claude::new(program.clone(), session, cwd));
        Plain { program, command, stream, text: String::new(), ended: false, stripper: AnsiStripper::new() }
    }
}

impl Adapter for Plain {
    fn launch(&self, _resume: Option<&str>, turn: Option<&str>) -> Launch {
        let prompt = turn.unwrap_or_default();
        let args = self.command.args.iter().map(|arg| arg.replace(PROMPT_PLACEHOLDER, prompt)).collect();
        Launch { program: self.program.clone(), args, env: Vec::new() }
    }

    fn per_turn(&self) -> bool {
        true
    }

    fn turn(&mut self, _text: &str) -> Vec<String> {
        self.text.clear();
        self.ended = false;
        Vec::new()
    }

    fn interrupt(&mut self) -> Vec<String> {
        // A one-turn process is interrupted by ending it; the runner does that.
        Vec::new()
    }

    fn answer(&mut self, _ask: &Ask, _answer: &Answer) -> Vec<String> {
        Vec::new()
    }

    fn on_line(&mut self, line: &[u8]) -> Vec<Output> {
        if let Some(stream) = &mut self.stream {
            let mut out = stream.on_line(line);
            // Such an agent has no stdin to ask through: prompts are not asked.
            out.retain(|output| !matches!(output, Output::Ask { .. } | Output::Write(_)));
            if out.contains(&Output::TurnEnded) {
                self.ended = true;
            }
            return out;
        }
        let text = self.stripper.feed(line);
        if self.text.len() < MAX_TEXT_LEN {
            self.text.push_str(&text);
            self.text.push('\n');
        }
        vec![Output::Event(Event::Text { text: format!("{text}\n"), partial: true })]
    }

    fn on_exit(&mut self, exit_code: i32) -> Vec<Output> {
        if std::mem::take(&mut self.ended) {
            return Vec::new();
        }
        let result = capped(self.text.trim_end(), MAX_TEXT_LEN);
        vec![
            Output::Event(Event::TurnEnd {
                ok: exit_code == 0,
                result,
                cost_usd: None,
                duration_ms: 0,
                interrupted: false,
            }),
            Output::TurnEnded,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_agent_takes_the_prompt_as_an_argument_and_answers_with_its_output() {
        let command =
            AgentCommand { program: "echo".into(), args: vec!["--".into(), "{prompt}".into()], format: "text".into() };
        let mut plain = Plain::new("/bin/echo".into(), command, "s".into(), "/".into());
        assert!(plain.per_turn());
        assert_eq!(plain.launch(None, Some("-rf /")).args, ["--", "-rf /"]);
        plain.turn("x");
        plain.on_line(b"\x1b[1mone\x1b[0m");
        plain.on_line(b"two");
        let out = plain.on_exit(0);
        assert_eq!(
            out[0],
            Output::Event(Event::TurnEnd {
                ok: true,
                result: "one\ntwo".into(),
                cost_usd: None,
                duration_ms: 0,
                interrupted: false
            })
        );
        assert_eq!(out[1], Output::TurnEnded);
    }
}
