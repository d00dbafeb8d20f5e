//! Grants (docs/PROTOCOL.md, "Grants"): what "Allow for session" leaves behind. A grant lets one
//! tool of one coding-agent session through without asking — a command tool only for the very
//! command allowed, any other tool for every use — until it is revoked. voxa answers the agent's
//! later prompts from its grants itself (the agent is never told to remember a rule), so a
//! revoked grant asks again. They are kept in the home (`grants.json`, 0600) and survive a restart.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::protocol::Risk;

/// The file in the home that keeps the grants.
pub const GRANTS_FILE: &str = "grants.json";
/// Grants kept at once; one more ends the oldest (a grant lost asks again: it never widens).
pub const MAX_GRANTS: usize = 256;
/// Largest `grants.json` read back; a larger one is taken as damaged.
const MAX_FILE_LEN: usize = 1 << 20;
/// Longest command a grant names, in bytes; a longer one is not offered as a grant.
pub const MAX_GRANT_COMMAND: usize = 4096;

pub use crate::protocol::{Grant, GrantScope as Scope};

/// The grant an "Allow for session" of `tool` with `input` would make: its scope, command and
/// words. `None` when none is offered (a question, a command too long to name).
pub fn scope_of(tool: &str, input: &Value, risk: Risk) -> Option<(Scope, Option<String>, String)> {
    if tool == "AskUserQuestion" {
        return None;
    }
    let command = input.get("command").and_then(|command| match command {
        Value::String(text) => Some(text.clone()),
        // Codex gives a command as its argv.
        Value::Array(parts) => {
            let parts: Option<Vec<&str>> = parts.iter().map(Value::as_str).collect();
            parts.map(|parts| parts.join(" "))
        }
        _ => None,
    });
    let runs = matches!(tool, "Bash" | "BashOutput" | "commandExecution") || risk == Risk::Exec && command.is_some();
    if runs {
        let command = command?.trim().to_owned();
        if command.is_empty() || command.len() > MAX_GRANT_COMMAND {
            return None;
        }
        let shown = crate::text::prefix(&command, 200);
        let words = format!("`{shown}` again in this session, exactly that command");
        return Some((Scope::Command, Some(command), words));
    }
    let words = match tool {
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => format!("every {tool} in this session, of any file"),
        "fileChange" => "every file change in this session, of any file".to_owned(),
        _ => format!("every use of {tool} in this session"),
    };
    Some((Scope::Tool, None, words))
}

impl Grant {
    /// Whether this grant lets `tool` with `input` of `session` through.
    pub fn covers(&self, session: &str, tool: &str, input: &Value) -> bool {
        if self.session != session || self.tool != tool {
            return false;
        }
        match self.scope {
            Scope::Tool => true,
            Scope::Command => {
                let asked = scope_of(tool, input, Risk::Exec).and_then(|(_, command, _)| command);
                asked.is_some() && asked == self.command
            }
        }
    }
}

/// The grants, in memory and in the home.
#[derive(Debug, Default)]
pub struct Grants {
    path: Option<PathBuf>,
    list: Vec<Grant>,
}

impl Grants {
    /// The grants kept at `path` (none when it does not exist; a damaged file is set aside empty
    /// and said so: a grant lost asks again).
    pub fn open(path: Option<PathBuf>) -> Self {
        let list = match &path {
            Some(path) => load(path).unwrap_or_else(|err| {
                tracing::warn!(error = %format!("{err:#}"), "could not read the grants; none are kept");
                Vec::new()
            }),
            None => Vec::new(),
        };
        Grants { path, list }
    }

    /// Every grant, oldest first.
    pub fn list(&self) -> &[Grant] {
        &self.list
    }

    /// The grant that lets this through, if any.
    pub fn covering(&self, session: &str, tool: &str, input: &Value) -> Option<&Grant> {
        self.list.iter().find(|grant| grant.covers(session, tool, input))
    }

    /// Keeps a new grant (the same one again is not doubled) and returns it.
    pub fn add(&mut self, grant: Grant) -> Grant {
        if let Some(same) = self.list.iter().find(|g| {
            g.session == grant.session && g.tool == grant.tool && g.scope == grant.scope && g.command == grant.command
        }) {
            return same.clone();
        }
        self.list.push(grant.clone());
        if self.list.len() > MAX_GRANTS {
            self.list.remove(0);
        }
        self.save();
        grant
    }

    /// Ends a grant; false when none has that id.
    pub fn revoke(&mut self, id: &str) -> bool {
        let before = self.list.len();
        self.list.retain(|grant| grant.grant != id);
        let removed = self.list.len() != before;
        if removed {
            self.save();
        }
        removed
    }

    fn save(&self) {
        let Some(path) = &self.path else { return };
        if let Err(err) = save(path, &self.list) {
            tracing::warn!(error = %format!("{err:#}"), "could not keep the grants");
        }
    }
}

fn load(path: &Path) -> Result<Vec<Grant>> {
    let Some(bytes) = crate::state::read_if_exists(path)? else { return Ok(Vec::new()) };
    if bytes.len() > MAX_FILE_LEN {
        anyhow::bail!("{} is larger than {MAX_FILE_LEN} bytes", path.display());
    }
    let mut list: Vec<Grant> =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not a list of grants", path.display()))?;
    list.truncate(MAX_GRANTS);
    Ok(list)
}

fn save(path: &Path, list: &[Grant]) -> Result<()> {
    let bytes = serde_json::to_vec(list).context("could not encode the grants")?;
    crate::state::write_atomic(path, &bytes)
}

/// A new grant id.
pub fn new_id() -> String {
    format!("g-{}", hex::encode(rand::random::<[u8; 8]>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grant(tool: &str, input: &Value) -> Grant {
        let (scope, command, allows) = scope_of(tool, input, Risk::Write).unwrap();
        Grant { grant: new_id(), session: "s-1".into(), tool: tool.into(), scope, command, allows, created_at: 1 }
    }

    #[test]
    fn a_command_grant_lets_that_command_only_and_an_edit_grant_every_edit_of_its_session() {
        let npm = grant("Bash", &json!({"command": "npm test"}));
        assert_eq!((npm.scope, npm.command.as_deref()), (Scope::Command, Some("npm test")));
        assert!(npm.covers("s-1", "Bash", &json!({"command": "npm test", "description": "x"})));
        assert!(!npm.covers("s-1", "Bash", &json!({"command": "npm test; rm -rf ~"})));
        assert!(!npm.covers("s-1", "Bash", &json!({"command": "npm publish"})));
        assert!(!npm.covers("s-2", "Bash", &json!({"command": "npm test"})));
        assert!(!npm.covers("s-1", "Bash", &json!({})));
        let edit = grant("Edit", &json!({"file_path": "a.rs"}));
        assert_eq!(edit.allows, "every Edit in this session, of any file");
        assert!(edit.covers("s-1", "Edit", &json!({"file_path": "b.rs"})));
        assert!(!edit.covers("s-1", "Write", &json!({"file_path": "b.rs"})));
        assert!(!edit.covers("s-2", "Edit", &json!({"file_path": "b.rs"})));
        // Codex's argv form is the same command.
        let codex = grant("commandExecution", &json!({"command": ["npm", "test"]}));
        assert!(codex.covers("s-1", "commandExecution", &json!({"command": "npm test"})));
        assert!(scope_of("AskUserQuestion", &json!({}), Risk::Read).is_none());
        assert!(scope_of("Bash", &json!({"command": "x".repeat(MAX_GRANT_COMMAND + 1)}), Risk::Exec).is_none());
    }

    #[test]
    fn grants_are_kept_in_the_home_bounded_and_revoked() {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join(GRANTS_FILE);
        let mut grants = Grants::open(Some(path.clone()));
        let kept = grants.add(grant("Edit", &json!({})));
        assert_eq!(grants.add(grant("Edit", &json!({}))).grant, kept.grant, "the same grant is not doubled");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let reopened = Grants::open(Some(path.clone()));
        assert_eq!(reopened.list(), std::slice::from_ref(&kept));
        assert!(reopened.covering("s-1", "Edit", &json!({})).is_some());
        let mut reopened = reopened;
        assert!(reopened.revoke(&kept.grant));
        assert!(!reopened.revoke(&kept.grant));
        assert!(Grants::open(Some(path.clone())).list().is_empty());
        for n in 0..MAX_GRANTS + 5 {
            reopened.add(grant("Bash", &json!({"command": format!("make {n}")})));
        }
        assert_eq!(reopened.list().len(), MAX_GRANTS);
        assert_eq!(reopened.list()[0].command.as_deref(), Some("make 5"), "the oldest go first");
        std::fs::write(&path, b"not json").unwrap();
        assert!(Grants::open(Some(path)).list().is_empty());
    }
}
