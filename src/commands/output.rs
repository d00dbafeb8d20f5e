//! What commands print on stdout: a sentence for people, or one JSON object per line with
//! `--json`. Logs go to stderr through `tracing`.

use std::io::{IsTerminal, Write};

use serde_json::Value;

/// Prints results and events in the chosen form.
#[derive(Clone, Copy, Debug)]
pub struct Printer {
    json: bool,
    quiet: bool,
}

impl Printer {
    pub fn new(json: bool, quiet: bool) -> Self {
        Printer { json, quiet }
    }

    pub fn is_json(&self) -> bool {
        self.json
    }

    /// True when stdout is a terminal (colours, QR styling, prompts).
    pub fn is_terminal(&self) -> bool {
        std::io::stdout().is_terminal()
    }

    /// An event of a long-running command: `{"event":name, ...fields}` or the human line.
    pub fn event(&self, name: &str, fields: Value, human: impl std::fmt::Display) {
        if self.json {
            let mut object = match fields {
                Value::Object(map) => map,
                _ => Default::default(),
            };
            // Keys come out sorted (serde_json's map), `event` among them.
            object.insert("event".into(), Value::String(name.into()));
            self.line(&Value::Object(object).to_string());
        } else if !self.quiet {
            self.line(&human.to_string());
        }
    }

    /// An event the user must not miss: as [`Printer::event`], with `"alarm": true` in JSON, and
    /// its human text printed even under `--quiet`.
    pub fn alarm(&self, name: &str, fields: Value, human: impl std::fmt::Display) {
        let mut fields = match fields {
            Value::Object(map) => map,
            _ => Default::default(),
        };
        fields.insert("alarm".into(), Value::Bool(true));
        if self.json {
            self.event(name, Value::Object(fields), human);
        } else {
            self.line(&human.to_string());
        }
    }

    /// A command's one result: the JSON value, or the human text.
    pub fn result(&self, json: &Value, human: impl std::fmt::Display) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{json}")?;
        } else {
            write!(out, "{human}")?;
        }
        out.flush()
    }

    fn line(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        // A closed stdout must not bring the agent down.
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
}
