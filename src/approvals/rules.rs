//! The `ask` policy (`[policy] ask`, `[approvals]` allow lists): which of voxa's own tool calls
//! wait for the user, with what summary and risk; and the risk of a coding agent's tool use.

use std::path::{Component, Path};

use serde_json::Value;

use crate::config::Config;
use crate::protocol::Risk;

/// A call that must wait for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub risk: Risk,
    /// One line for the card and the voice model.
    pub summary: String,
}

/// Characters that make a command line more than one plain command: such a line never matches
/// an allow-list entry.
const SHELL_OPERATORS: &[char] =
    &[';', '&', '|', '<', '>', '$', '`', '(', ')', '{', '}', '\\', '\n', '\r', '*', '?', '['];
/// Programs whose first job is to reach the network.
const NETWORK_PROGRAMS: &[&str] =
    &["curl", "wget", "ssh", "scp", "sftp", "rsync", "nc", "ncat", "telnet", "ftp", "http", "ping", "dig"];
/// Subcommands that reach the network (`git push`, `npm install`, …).
const NETWORK_SUBCOMMANDS: &[(&str, &[&str])] = &[
    ("git", &["push", "pull", "fetch", "clone", "remote", "submodule"]),
    ("npm", &["install", "i", "ci", "publish", "update", "add"]),
    ("pnpm", &["install", "add", "publish", "update"]),
    ("yarn", &["install", "add", "publish"]),
    ("pip", &["install", "download"]),
    ("pip3", &["install", "download"]),
    ("cargo", &["install", "publish", "update", "fetch", "add"]),
    ("apt", &["install", "update", "upgrade"]),
    ("apt-get", &["install", "update", "upgrade"]),
    ("docker", &["pull", "push", "login"]),
];
/// Modes and flags that let a coding agent act without asking.
const BYPASS_MARKERS: &[&str] = &[
    "bypasspermissions",
    "--dangerously-skip-permissions",
    "dontask",
    "danger-full-access",
    "--yolo",
    "--dangerously-bypass-approvals-and-sandbox",
];

/// Whether a call of voxa's own tool `tool`, which the policy's `ask` lists, must wait for the
/// user after the `[approvals]` rules: `run_command` asks unless the command is on the allow list;
/// `write_file` asks outside the allowed paths; `coding_agent` and `agent_start` ask when the agent
/// would run without permission prompts voxa can show (see [`Unprompted`]); any other listed tool
/// always asks.
/// `approve` and `approvals` never wait. `workspace` is the root relative paths resolve in;
/// `changes_machine` is the tool's own word on whether it can change something (the risk of a
/// tool without a rule of its own).
pub fn ask_for(config: &Config, tool: &str, args: &Value, workspace: &Path, changes_machine: bool) -> Option<Ask> {
    let text = |field: &str| args.get(field).and_then(Value::as_str).unwrap_or_default();
    let settings = &config.approvals;
    let let_through = match tool {
        // Answering an approval never waits for one.
        "approve" | "approvals" => true,
        "run_command" => settings.allow_commands.iter().any(|entry| command_matches(text("command"), entry)),
        "write_file" => settings.allow_paths.iter().any(|allowed| path_within(text("path"), allowed)),
        "coding_agent" | "agent_start" => unprompted(config, args).is_none(),
        _ => false,
    };
    (!let_through).then(|| describe(config, tool, args, workspace, changes_machine))
}

/// What an approval for this call shows: its one-line summary and its risk, for any tool.
pub fn describe(config: &Config, tool: &str, args: &Value, workspace: &Path, changes_machine: bool) -> Ask {
    let text = |field: &str| args.get(field).and_then(Value::as_str).unwrap_or_default();
    let cwd = args.get("cwd").and_then(Value::as_str);
    match tool {
        "run_command" => {
            let command = text("command");
            let place = cwd.map(|cwd| format!(" (in {cwd})")).unwrap_or_default();
            let risk = command_risk(command, workspace).max(path_risk(cwd));
            Ask { risk, summary: format!("Run: {}{place}", command.trim()) }
        }
        "write_file" => {
            let path = text("path");
            let bytes = text("content").len();
            let risk = path_risk(Some(path)).max(Risk::Write);
            Ask { risk, summary: format!("Write {bytes} bytes to {path}") }
        }
        "coding_agent" | "agent_start" => {
            let agent = args.get("agent").and_then(Value::as_str).unwrap_or("claude");
            let how = match unprompted(config, args) {
                Some(Unprompted::Bypass) => " without its permission prompts",
                Some(Unprompted::Configured) => " (a configured agent: it asks no permission)",
                None => "",
            };
            Ask { risk: Risk::Exec, summary: format!("Start {agent}{how}: {}", text("prompt")) }
        }
        "agent_send" => Ask { risk: Risk::Exec, summary: format!("Tell {}: {}", text("session"), text("text")) },
        "term_open" => {
            let command = args.get("command").and_then(Value::as_str).unwrap_or("the login shell");
            let risk = command_risk(command, workspace).max(path_risk(cwd));
            Ask { risk, summary: format!("Open a terminal running {}", command.trim()) }
        }
        "term_input" => Ask { risk: Risk::Exec, summary: format!("Type into {}: {}", text("term"), text("data")) },
        "read_file" | "list_dir" => {
            Ask { risk: path_risk(Some(text("path"))), summary: format!("Use {tool} on {}", text("path")) }
        }
        other => {
            let risk = if changes_machine { Risk::Exec } else { Risk::Read };
            Ask { risk, summary: format!("Use {other}") }
        }
    }
}

/// Why a coding agent would act without permission prompts voxa can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unprompted {
    /// A mode or flag that skips its prompts (`bypassPermissions`, `--dangerously-skip-permissions`,
    /// …), in the call's `mode` or the configured agent's args.
    Bypass,
    /// An agent configured in `[agents]`: voxa runs it as a plain program, and whatever it asks for
    /// never reaches an approval.
    Configured,
}

/// Whether the coding agent of this `coding_agent` or `agent_start` call would act without
/// prompts voxa can show; `None` for the built-in Claude Code and Codex in their usual modes.
fn unprompted(config: &Config, args: &Value) -> Option<Unprompted> {
    let text = |field: &str| args.get(field).and_then(Value::as_str).unwrap_or_default();
    let agent = args.get("agent").and_then(Value::as_str).unwrap_or("claude");
    let configured = config.agents.get(agent);
    let configured_args = configured.map(|command| command.args.join(" ")).unwrap_or_default();
    if bypasses(&[text("mode"), text("permission_mode"), &configured_args].join(" ")) {
        Some(Unprompted::Bypass)
    } else {
        configured.map(|_| Unprompted::Configured)
    }
}

/// True when `command` is the command `entry` names: the same words, or, for an entry ending in
/// ` *`, its words followed by any more. A line with a shell operator never matches, nor does an
/// entry that names no command.
fn command_matches(command: &str, entry: &str) -> bool {
    if command.contains(SHELL_OPERATORS) {
        return false;
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut wanted: Vec<&str> = entry.split_whitespace().collect();
    let open = wanted.last() == Some(&"*");
    if open {
        wanted.pop();
    }
    if wanted.is_empty() || wanted.iter().any(|word| word.contains(SHELL_OPERATORS)) {
        return false;
    }
    if open {
        words.len() >= wanted.len() && words[..wanted.len()] == wanted[..]
    } else {
        words == wanted
    }
}

/// The risk of a shell command line: `network` for programs that reach the network, `outside`
/// when it names a path outside the workspace, else `exec`.
pub fn command_risk(command: &str, workspace: &Path) -> Risk {
    let mut risk = Risk::Exec;
    for simple in command.split([';', '&', '|', '\n', '(', ')', '`']) {
        let words: Vec<&str> = simple.split_whitespace().skip_while(|word| word.contains('=')).collect();
        let Some(program) = words.first().map(|word| word.rsplit('/').next().unwrap_or(word)) else { continue };
        let program = if matches!(program, "sudo" | "env" | "nohup" | "time" | "exec") {
            words.get(1).copied().unwrap_or(program)
        } else {
            program
        };
        let network = NETWORK_PROGRAMS.contains(&program)
            || NETWORK_SUBCOMMANDS.iter().any(|(name, subcommands)| {
                *name == program && words.iter().skip(1).any(|word| subcommands.contains(word))
            });
        if network {
            risk = risk.max(Risk::Network);
        }
    }
    let names_outside = command
        .split(|c: char| c.is_whitespace() || matches!(c, '=' | '"' | '\'' | ';' | '&' | '|' | '<' | '>'))
        .any(|word| {
            (word.starts_with('/') && !Path::new(word).starts_with(workspace))
                || word.starts_with('~')
                || word.split('/').any(|part| part == "..")
        });
    if names_outside || command.contains("sudo ") {
        risk = Risk::Outside;
    }
    risk
}

/// `outside` for a path that is absolute or climbs with `..`, else `read` (a path only).
fn path_risk(path: Option<&str>) -> Risk {
    match path {
        Some(path) if escapes(path) => Risk::Outside,
        _ => Risk::Read,
    }
}

fn escapes(path: &str) -> bool {
    let path = Path::new(path);
    path.is_absolute() || path.starts_with("~") || path.components().any(|part| matches!(part, Component::ParentDir))
}

/// True when relative `path` lies inside relative `allowed` (the same path or below it), compared
/// component by component; a path that climbs out or is absolute is never inside.
fn path_within(path: &str, allowed: &str) -> bool {
    if escapes(path) || escapes(allowed) || allowed.trim().is_empty() {
        return false;
    }
    let parts = |text: &str| -> Vec<String> {
        Path::new(text)
            .components()
            .filter_map(|part| match part {
                Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    };
    let (path, allowed) = (parts(path), parts(allowed));
    !allowed.is_empty() && path.len() >= allowed.len() && path[..allowed.len()] == allowed[..]
}

fn bypasses(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    BYPASS_MARKERS.iter().any(|marker| lower.contains(marker))
}

/// The risk of a coding agent's tool use (Claude Code's tool names; Codex's command and file
/// change approvals map to `Bash` and `Edit`): reads, edits, commands and web access, `outside`
/// when a path leaves `cwd`.
pub fn coding_agent_risk(tool: &str, input: &Value, cwd: &Path) -> Risk {
    let text = |field: &str| input.get(field).and_then(Value::as_str);
    let path_outside = |path: Option<&str>| {
        path.is_some_and(|path| {
            let path = Path::new(path);
            (path.is_absolute() && !path.starts_with(cwd))
                || path.components().any(|part| matches!(part, Component::ParentDir))
        })
    };
    let path = text("file_path").or_else(|| text("path")).or_else(|| text("notebook_path"));
    match tool {
        "Bash" | "BashOutput" | "commandExecution" => command_risk(text("command").unwrap_or_default(), cwd),
        "WebFetch" | "WebSearch" => Risk::Network,
        _ if path_outside(path) => Risk::Outside,
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" | "fileChange" => Risk::Write,
        "Read" | "Glob" | "Grep" | "LS" | "AskUserQuestion" | "TodoWrite" | "ExitPlanMode" => Risk::Read,
        _ => Risk::Exec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ApprovalSettings, Policy};
    use serde_json::json;

    fn config(ask: &[&str], settings: ApprovalSettings) -> Config {
        Config {
            policy: Policy { ask: ask.iter().map(|s| s.to_string()).collect(), ..Default::default() },
            approvals: settings,
            ..Default::default()
        }
    }

    #[test]
    fn run_command_asks_unless_the_whole_command_is_allowed() {
        let entries = ["git status", "git diff", "cargo test", "ls *", "npm run build *"];
        let settings = ApprovalSettings { allow_commands: entries.map(String::from).to_vec(), ..Default::default() };
        let config = config(&["run_command"], settings);
        let ws = Path::new("/home/u/ws");
        let ask = |command: &str| ask_for(&config, "run_command", &json!({ "command": command }), ws, true);
        for allowed in
            ["git status", "  git   status ", "git diff", "cargo test", "ls", "ls -la", "npm run build --prod"]
        {
            assert_eq!(ask(allowed), None, "{allowed}");
        }
        // An entry without ` *` is the whole command: no option of the program gets through.
        for asked in [
            "git status -s",
            "git diff --no-index /etc/passwd ws",
            "git diff --output=/home/u/.bashrc",
            "cargo test --config target.x86_64-unknown-linux-gnu.runner=\"sh -c id\"",
            "git statusx",
            "git status; rm -rf ~",
            "ls $(rm -rf /)",
            "ls > out",
            "ls *.txt",
            "lsblk",
            "git",
            "git push",
            "FOO=1 git status",
            "npm run",
        ] {
            assert!(ask(asked).is_some(), "{asked}");
        }
        let asked = ask("npm test").unwrap();
        assert_eq!(asked, Ask { risk: Risk::Exec, summary: "Run: npm test".into() });
        let cwd = ask_for(&config, "run_command", &json!({"command": "make", "cwd": "app"}), ws, true).unwrap();
        assert_eq!(cwd.summary, "Run: make (in app)");
        // An entry that names no command matches nothing.
        let star = ApprovalSettings { allow_commands: vec!["*".into(), "".into()], ..Default::default() };
        let star = self::config(&["run_command"], star);
        assert!(ask_for(&star, "run_command", &json!({ "command": "ls" }), ws, true).is_some());
    }

    #[test]
    fn write_file_asks_outside_the_listed_paths() {
        let settings =
            ApprovalSettings { allow_paths: vec!["notes".into(), "docs/drafts/".into()], ..Default::default() };
        let config = config(&["write_file"], settings);
        let ws = Path::new("/ws");
        let ask = |path: &str| ask_for(&config, "write_file", &json!({ "path": path, "content": "hello" }), ws, true);
        assert_eq!(ask("notes/today.md"), None);
        assert_eq!(ask("./notes/a/b.md"), None);
        assert_eq!(ask("docs/drafts/x"), None);
        assert_eq!(
            ask("src/main.rs").unwrap(),
            Ask { risk: Risk::Write, summary: "Write 5 bytes to src/main.rs".into() }
        );
        assert_eq!(ask("notesx/a").unwrap().risk, Risk::Write);
        assert_eq!(ask("notes/../src/main.rs").unwrap().risk, Risk::Outside);
        assert_eq!(ask("/etc/passwd").unwrap().risk, Risk::Outside);
        assert_eq!(ask("docs/x").unwrap().risk, Risk::Write);
    }

    #[test]
    fn coding_agents_ask_only_when_they_would_act_without_prompts_voxa_can_show() {
        let mut config = config(&["coding_agent", "agent_start"], ApprovalSettings::default());
        let ws = Path::new("/ws");
        assert_eq!(ask_for(&config, "coding_agent", &json!({"prompt": "fix it"}), ws, true), None);
        assert_eq!(ask_for(&config, "agent_start", &json!({"prompt": "fix it", "agent": "codex"}), ws, true), None);
        config.agents.insert(
            "script".into(),
            crate::config::AgentCommand {
                program: "/bin/sh".into(),
                args: vec!["-c".into(), "{prompt}".into()],
                format: "text".into(),
            },
        );
        let plain = ask_for(&config, "agent_start", &json!({"prompt": "make", "agent": "script"}), ws, true).unwrap();
        assert_eq!(plain.summary, "Start script (a configured agent: it asks no permission): make");
        let bypass =
            ask_for(&config, "agent_start", &json!({"prompt": "fix it", "mode": "bypassPermissions"}), ws, true);
        assert_eq!(bypass.unwrap().risk, Risk::Exec);
        config.agents.insert(
            "claude".into(),
            crate::config::AgentCommand {
                program: "claude".into(),
                args: vec!["-p".into(), "--dangerously-skip-permissions".into(), "{prompt}".into()],
                format: "stream-json".into(),
            },
        );
        let ask = ask_for(&config, "coding_agent", &json!({"prompt": "fix it"}), ws, true).unwrap();
        assert_eq!(ask.summary, "Start claude without its permission prompts: fix it");
        // Session tools ask like any other listed tool.
        let send = ask_for(&config, "agent_send", &json!({"session": "s-1", "text": "use SQLite"}), ws, true).unwrap();
        assert_eq!(send, Ask { risk: Risk::Exec, summary: "Tell s-1: use SQLite".into() });
    }

    #[test]
    fn risks_of_commands_and_agent_tools() {
        let ws = Path::new("/home/u/ws");
        assert_eq!(command_risk("cargo test", ws), Risk::Exec);
        assert_eq!(command_risk("git push origin main", ws), Risk::Network);
        assert_eq!(command_risk("cd app && npm install", ws), Risk::Network);
        assert_eq!(command_risk("FOO=1 curl https://x", ws), Risk::Network);
        assert_eq!(command_risk("cat /etc/hosts", ws), Risk::Outside);
        assert_eq!(command_risk("cat /home/u/ws/a", ws), Risk::Exec);
        assert_eq!(command_risk("rm -rf ../other", ws), Risk::Outside);
        assert_eq!(command_risk("ls ~", ws), Risk::Outside);
        assert_eq!(coding_agent_risk("Read", &json!({"file_path": "/home/u/ws/a.rs"}), ws), Risk::Read);
        assert_eq!(coding_agent_risk("Edit", &json!({"file_path": "src/a.rs"}), ws), Risk::Write);
        assert_eq!(coding_agent_risk("Write", &json!({"file_path": "/etc/x"}), ws), Risk::Outside);
        assert_eq!(coding_agent_risk("Bash", &json!({"command": "npm test"}), ws), Risk::Exec);
        assert_eq!(coding_agent_risk("WebFetch", &json!({"url": "https://x"}), ws), Risk::Network);
        assert_eq!(coding_agent_risk("mcp__x__y", &json!({}), ws), Risk::Exec);
    }
}
