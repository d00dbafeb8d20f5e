//! The table of tools: one [`ToolSpec`] per [`ToolKind`], the single source of `hello_ok`'s list,
//! Gemini's declarations ([`super::declare`]), argument checks and the policy's view of a tool.

use serde_json::Value;

/// JSON type of a tool parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    String,
    Integer,
    Boolean,
    /// A JSON object; not declared to Gemini (its schema needs properties).
    Object,
}

impl ParamType {
    /// The OpenAPI type name Gemini expects.
    pub fn gemini_name(self) -> &'static str {
        match self {
            ParamType::String => "STRING",
            ParamType::Integer => "INTEGER",
            ParamType::Boolean => "BOOLEAN",
            ParamType::Object => "OBJECT",
        }
    }

    pub(super) fn noun(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Boolean => "boolean",
            ParamType::Object => "object",
        }
    }
}

/// One parameter of a tool.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// Field name in `args`.
    pub name: &'static str,
    /// JSON type the field must have.
    pub kind: ParamType,
    /// Absent (or `null`) is `invalid-args` when true.
    pub required: bool,
    /// Written for the voice model.
    pub description: &'static str,
}

/// What a tool can do to the machine, for the `read_only` policy (and Gemini's `BLOCKING`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Only reads: a read-only agent runs it.
    Reads,
    /// Can change the machine: a read-only agent refuses it, and the voice model waits for it.
    Changes,
    /// Reads when its `action` is absent or `"list"`, changes otherwise (`fleet`'s pairing actions).
    ChangesUnlessListing,
}

impl Effect {
    /// Whether a call with `args` can change the machine.
    pub fn changes_machine(self, args: &Value) -> bool {
        match self {
            Effect::Reads => false,
            Effect::Changes => true,
            Effect::ChangesUnlessListing => match args.get("action") {
                None | Some(Value::Null) => false,
                Some(action) => action != "list",
            },
        }
    }

    /// Whether some call of the tool only reads (what a read-only agent still offers).
    pub fn can_only_read(self) -> bool {
        !matches!(self, Effect::Changes)
    }
}

/// Where a tool runs when the call names no other environment, and which code parses its
/// arguments and runs it: the dispatcher only routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// On this machine's [`Toolbox`](super::Toolbox), by the file of `tools/` its group names.
    Toolbox(Local),
    /// On the agent's approval broker (`tools/approve.rs`).
    Approvals(ApprovalTool),
    /// On the environment router of a host ([`EnvRouter`](super::EnvRouter)); offered only where there is one.
    Router,
    /// On the coding-agent session host ([`AgentSessions`](super::AgentSessions)); offered only
    /// where one runs.
    Sessions,
    /// On the terminal host ([`Terminals`](super::Terminals)); offered only where one runs.
    Terminals,
}

impl Runs {
    /// A tool every machine runs itself (its toolbox or its approval broker): a call of it may
    /// name another environment, and Gemini is told so.
    pub fn routable(self) -> bool {
        matches!(self, Runs::Toolbox(_) | Runs::Approvals(_))
    }
}

/// This machine's own tools, by the file of `tools/` that parses their arguments and runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// `tools/files.rs`: the workspace's files.
    Files(FileTool),
    /// `tools/command.rs`: `run_command`.
    Command,
    /// `tools/screenshot.rs`: `screenshot`.
    Screenshot,
    /// `tools/coding_agent.rs`: `coding_agent`.
    CodingAgent,
}

/// The file tools (`tools/files.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileTool {
    Read,
    Write,
    List,
    Move,
    Delete,
    ListTrash,
    Restore,
    Upload,
}

/// The approval tools (`tools/approve.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalTool {
    /// `approve`: answers one.
    Approve,
    /// `approvals`: lists the open ones.
    List,
}

/// One tool: the single source for `hello_ok`, Gemini's declarations, argument checks and the
/// policy's view of it.
#[derive(Clone, Copy, Debug)]
pub struct ToolSpec {
    pub kind: ToolKind,
    /// Name on the wire, in `hello_ok` and in Gemini's declarations.
    pub name: &'static str,
    /// One line, written for the voice model.
    pub description: &'static str,
    /// The arguments, declared to the voice model; a [`Runs::Toolbox`] tool accepts exactly these
    /// (any other field is `invalid-args`), a router tool checks its own.
    pub params: &'static [ParamSpec],
    pub effect: Effect,
    pub runs: Runs,
}

/// Every tool voxa knows. A wire name is parsed into one once ([`ToolKind::parse`]); from then on
/// the call is dispatched by this enum, never by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolKind {
    RunCommand,
    ReadFile,
    WriteFile,
    ListDir,
    MoveFile,
    DeleteFile,
    ListTrash,
    RestoreFile,
    UploadFile,
    Screenshot,
    CodingAgent,
    Approve,
    Approvals,
    Fleet,
    AgentStart,
    AgentSend,
    AgentInterrupt,
    AgentStop,
    AgentSessions,
    AgentLog,
    Brief,
    TermOpen,
    TermAttach,
    TermInput,
    TermResize,
    TermClose,
    TermList,
    TermScreen,
}

impl ToolKind {
    /// Every kind, in table order.
    pub const ALL: [ToolKind; 28] = [
        ToolKind::RunCommand,
        ToolKind::ReadFile,
        ToolKind::WriteFile,
        ToolKind::ListDir,
        ToolKind::MoveFile,
        ToolKind::DeleteFile,
        ToolKind::ListTrash,
        ToolKind::RestoreFile,
        ToolKind::UploadFile,
        ToolKind::Screenshot,
        ToolKind::CodingAgent,
        ToolKind::Approve,
        ToolKind::Approvals,
        ToolKind::Fleet,
        ToolKind::AgentStart,
        ToolKind::AgentSend,
        ToolKind::AgentInterrupt,
        ToolKind::AgentStop,
        ToolKind::AgentSessions,
        ToolKind::AgentLog,
        ToolKind::Brief,
        ToolKind::TermOpen,
        ToolKind::TermAttach,
        ToolKind::TermInput,
        ToolKind::TermResize,
        ToolKind::TermClose,
        ToolKind::TermList,
        ToolKind::TermScreen,
    ];

    /// The kind of a wire name; `None` for a name this build does not know.
    pub fn parse(name: &str) -> Option<ToolKind> {
        TOOLS.iter().find(|spec| spec.name == name).map(|spec| spec.kind)
    }

    /// The table entry.
    pub fn spec(self) -> &'static ToolSpec {
        &TOOLS[self as usize]
    }

    /// The name on the wire.
    pub fn name(self) -> &'static str {
        self.spec().name
    }
}

/// Name of the environment router's tool that lists (and, with the host token, unpairs) environments.
pub const FLEET_TOOL: &str = "fleet";

const fn param(name: &'static str, kind: ParamType, required: bool, description: &'static str) -> ParamSpec {
    ParamSpec { name, kind, required, description }
}

/// Every tool, in the order they are listed, indexed by [`ToolKind`].
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        kind: ToolKind::RunCommand,
        name: "run_command",
        description:
            "Run a shell command (/bin/sh) on the user's computer, in the workspace, and return its exit code \
                      and output. Use it for git, builds, tests and quick checks. It cannot answer questions the \
                      command asks: input is empty. Output is capped at 256 KiB.",
        params: &[
            param("command", ParamType::String, true, "The command line to run, for example: git status"),
            param(
                "cwd",
                ParamType::String,
                false,
                "Directory to run in, relative to the workspace. Default: the workspace.",
            ),
            param(
                "timeout_ms",
                ParamType::Integer,
                false,
                "Stop the command after this many milliseconds. Default 120000, at most 3600000.",
            ),
        ],
        effect: Effect::Changes,
        runs: Runs::Toolbox(Local::Command),
    },
    ToolSpec {
        kind: ToolKind::ReadFile,
        name: "read_file",
        description: "Read a file in the workspace. Returns its text (base64 when the file is binary), its size in \
                      bytes, and whether it was cut short.",
        params: &[
            param("path", ParamType::String, true, "Path of the file, relative to the workspace."),
            param("max_bytes", ParamType::Integer, false, "Read at most this many bytes. Default and maximum 262144."),
            param("offset", ParamType::Integer, false, "Start at this byte, to read a large file in parts. Default 0."),
            param(
                "encoding",
                ParamType::String,
                false,
                "\"base64\" to get the bytes as base64 even when they are text.",
            ),
        ],
        effect: Effect::Reads,
        runs: Runs::Toolbox(Local::Files(FileTool::Read)),
    },
    ToolSpec {
        kind: ToolKind::WriteFile,
        name: "write_file",
        description: "Create or replace a file in the workspace with the given content, in one atomic step.",
        params: &[
            param("path", ParamType::String, true, "Path of the file, relative to the workspace."),
            param("content", ParamType::String, true, "The complete new content of the file."),
            param("create_dirs", ParamType::Boolean, false, "Create missing parent directories. Default false."),
            param("encoding", ParamType::String, false, "\"utf-8\" (default) or \"base64\" for binary content."),
            VERSION_PARAM,
        ],
        effect: Effect::Changes,
        runs: Runs::Toolbox(Local::Files(FileTool::Write)),
    },
    ToolSpec {
        kind: ToolKind::ListDir,
        name: "list_dir",
        description: "List a directory in the workspace: each entry's name, kind (file, dir or symlink) and size.",
        params: &[param(
            "path",
            ParamType::String,
            false,
            "Directory, relative to the workspace. Default: the workspace.",
        )],
        effect: Effect::Reads,
        runs: Runs::Toolbox(Local::Files(FileTool::List)),
    },
    ToolSpec {
        kind: ToolKind::MoveFile,
        name: "move_file",
        description: "Rename or move a file or folder inside the workspace. Never replaces: a name that is taken \
                      is refused.",
        params: &[
            param("from", ParamType::String, true, "Path of the file or folder, relative to the workspace."),
            param("to", ParamType::String, true, "Its new path, relative to the workspace."),
        ],
        effect: Effect::Changes,
        runs: Runs::Toolbox(Local::Files(FileTool::Move)),
    },
    ToolSpec {
        kind: ToolKind::DeleteFile,
        name: "delete_file",
        description: "Delete a file or folder of the workspace by moving it to voxa's trash, from where \
                      restore_file brings it back.",
        params: &[param("path", ParamType::String, true, "Path of the file or folder, relative to the workspace.")],
        effect: Effect::Changes,
        runs: Runs::Toolbox(Local::Files(FileTool::Delete)),
    },
    ToolSpec {
        kind: ToolKind::ListTrash,
        name: "list_trash",
        description: "List what was deleted and can be restored, newest first: id, original path, kind, size, when.",
        params: &[],
        effect: Effect::Reads,
        runs: Runs::Toolbox(Local::Files(FileTool::ListTrash)),
    },
    ToolSpec {
        kind: ToolKind::RestoreFile,
        name: "restore_file",
        description: "Bring a deleted file or folder back from the trash, to where it was or to a new path.",
        params: &[
            param("id", ParamType::String, true, "The trash entry's id, as list_trash gives it."),
            param("to", ParamType::String, false, "Where to put it, relative to the workspace. Default: where it was."),
        ],
        effect: Effect::Changes,
        runs: Runs::Toolbox(Local::Files(FileTool::Restore)),
    },
    ToolSpec {
        kind: ToolKind::UploadFile,
        name: "upload_file",
        description: "Receive a file from the user's phone in chunks; the file appears whole with the last chunk.",
        params: &[
            param("path", ParamType::String, true, "Path of the file, relative to the workspace."),
            param("data", ParamType::String, true, "This chunk's bytes, base64, at most 1 MiB decoded."),
            param(
                "offset",
                ParamType::Integer,
                true,
                "Where this chunk starts in the file: 0, then the bytes sent so far.",
            ),
            param("done", ParamType::Boolean, false, "True on the last chunk: the file is put in place."),
            VERSION_PARAM,
        ],
        effect: Effect::Changes,
        runs: Runs::Toolbox(Local::Files(FileTool::Upload)),
    },
    ToolSpec {
        kind: ToolKind::Screenshot,
        name: "screenshot",
        description: "Take a screenshot of the computer's screen. The user sees the image on their phone; you get its \
                      size only.",
        params: &[param("display", ParamType::String, false, "X display such as \":0\". Default: the user's display.")],
        effect: Effect::Reads,
        runs: Runs::Toolbox(Local::Screenshot),
    },
    ToolSpec {
        kind: ToolKind::CodingAgent,
        name: "coding_agent",
        description: "Hand a programming task to a coding agent (Claude Code by default) working in the workspace. It \
                      can read and change code and run commands, may take minutes, and returns its final answer.",
        params: &[
            param(
                "prompt",
                ParamType::String,
                true,
                "The task in full sentences, with everything the agent needs to know.",
            ),
            param("agent", ParamType::String, false, "Which coding agent to use. Default \"claude\"."),
            param(
                "cwd",
                ParamType::String,
                false,
                "Directory to work in, relative to the workspace. Default: the workspace.",
            ),
        ],
        effect: Effect::Changes,
        runs: Runs::Toolbox(Local::CodingAgent),
    },
    ToolSpec {
        kind: ToolKind::Approve,
        name: "approve",
        description: "Answer an approval voxa told you about, with the user's own decision. Call it only after you \
                      read the approval's summary to the user and they answered: allow when they said yes to it, deny \
                      when they said no.",
        params: &[
            param("approval", ParamType::String, true, "The approval's id, as given (a-…)."),
            param("decision", ParamType::String, true, "\"allow\" or \"deny\" (\"allow_session\" where offered)."),
            param("message", ParamType::String, false, "The user's reason, told to whoever asked."),
            param("answer", ParamType::String, false, "For a question: the label of the option the user chose."),
            param(
                "answers",
                ParamType::Object,
                false,
                "For questions: each question's text mapped to its chosen label.",
            ),
        ],
        effect: Effect::Reads,
        runs: Runs::Approvals(ApprovalTool::Approve),
    },
    ToolSpec {
        kind: ToolKind::Approvals,
        name: "approvals",
        description: "List the approvals waiting for the user's decision: id, summary, risk and expiry of each.",
        params: &[],
        effect: Effect::Reads,
        runs: Runs::Approvals(ApprovalTool::List),
    },
    ToolSpec {
        kind: ToolKind::Fleet,
        name: FLEET_TOOL,
        // Declared for listing only: pairing actions need the host token, which a voice model never holds.
        description: "List the other machines (environments) this laptop can drive and whether each answers. \
                      To act on one, pass its name as `env` to any other tool.",
        params: &[],
        effect: Effect::ChangesUnlessListing,
        runs: Runs::Router,
    },
    ToolSpec {
        kind: ToolKind::AgentStart,
        name: "agent_start",
        description: "Start a coding-agent session (Claude Code by default) working in the workspace, with a first \
                      task. It keeps running after this returns: follow it, answer its questions, send follow-ups.",
        params: &[
            param("prompt", ParamType::String, true, "The first task in full sentences."),
            param(
                "agent",
                ParamType::String,
                false,
                "Which coding agent: \"claude\" (default), \"codex\" or a configured one.",
            ),
            param("cwd", ParamType::String, false, "Directory to work in, relative to the workspace."),
            param("title", ParamType::String, false, "A short title for the session list."),
        ],
        effect: Effect::Changes,
        runs: Runs::Sessions,
    },
    ToolSpec {
        kind: ToolKind::AgentSend,
        name: "agent_send",
        description: "Send a follow-up to a coding-agent session. It waits behind a running turn; an ended session \
                      is resumed with its context.",
        params: &[SESSION_PARAM, param("text", ParamType::String, true, "What to tell the agent.")],
        effect: Effect::Changes,
        runs: Runs::Sessions,
    },
    ToolSpec {
        kind: ToolKind::AgentInterrupt,
        name: "agent_interrupt",
        description: "Interrupt the running turn of a coding-agent session; the session stays.",
        params: &[SESSION_PARAM],
        effect: Effect::Reads,
        runs: Runs::Sessions,
    },
    ToolSpec {
        kind: ToolKind::AgentStop,
        name: "agent_stop",
        description: "Stop a coding-agent session's process; it stays listed and can be resumed.",
        params: &[SESSION_PARAM],
        effect: Effect::Reads,
        runs: Runs::Sessions,
    },
    ToolSpec {
        kind: ToolKind::AgentSessions,
        name: "agent_sessions",
        description: "List the coding-agent sessions: title, agent, state, turns, cost, open approvals.",
        params: &[],
        effect: Effect::Reads,
        runs: Runs::Sessions,
    },
    ToolSpec {
        kind: ToolKind::AgentLog,
        name: "agent_log",
        description: "Read a coding-agent session's events after a sequence number.",
        params: &[
            SESSION_PARAM,
            param("after", ParamType::Integer, false, "Events after this seq. Default 0, from the start."),
            param("limit", ParamType::Integer, false, "At most this many events. Default 200, at most 1000."),
        ],
        effect: Effect::Reads,
        runs: Runs::Sessions,
    },
    ToolSpec {
        kind: ToolKind::Brief,
        name: "brief",
        description: "What happened in every coding-agent session since the user last looked: turns finished, files \
                      changed, approvals waiting and cost, as a few spoken sentences. Call it when the user asks \
                      what happened, what they missed or where things stand.",
        params: &[],
        effect: Effect::Reads,
        runs: Runs::Sessions,
    },
    ToolSpec {
        kind: ToolKind::TermOpen,
        name: "term_open",
        description: "Open an interactive terminal on the computer, in the workspace, that the user sees and types \
                      into on their phone. It keeps running until closed or its program ends.",
        params: &[
            param("cols", ParamType::Integer, true, "Width in characters, 1 to 1000."),
            param("rows", ParamType::Integer, true, "Height in lines, 1 to 1000."),
            param("cwd", ParamType::String, false, "Directory to start in, relative to the workspace."),
            param(
                "command",
                ParamType::String,
                false,
                "Command line to run, for example: tmux new -A -s main. Default: the user's login shell.",
            ),
        ],
        effect: Effect::Changes,
        runs: Runs::Terminals,
    },
    ToolSpec {
        kind: ToolKind::TermAttach,
        name: "term_attach",
        description: "Watch a terminal: its recent output is sent again, then what it writes from now on.",
        params: &[TERM_PARAM],
        effect: Effect::Reads,
        runs: Runs::Terminals,
    },
    ToolSpec {
        kind: ToolKind::TermInput,
        name: "term_input",
        description: "Type into a terminal: text, and keys as the characters a terminal sends (\"\\r\" is Enter, \
                      \"\\u0003\" is Ctrl-C).",
        params: &[TERM_PARAM, param("data", ParamType::String, true, "What to type.")],
        effect: Effect::Changes,
        runs: Runs::Terminals,
    },
    ToolSpec {
        kind: ToolKind::TermResize,
        name: "term_resize",
        description: "Change a terminal's size; its program is told.",
        params: &[
            TERM_PARAM,
            param("cols", ParamType::Integer, true, "Width in characters, 1 to 1000."),
            param("rows", ParamType::Integer, true, "Height in lines, 1 to 1000."),
        ],
        effect: Effect::Reads,
        runs: Runs::Terminals,
    },
    ToolSpec {
        kind: ToolKind::TermClose,
        name: "term_close",
        description: "Close a terminal: its program and everything it started are stopped.",
        params: &[TERM_PARAM],
        effect: Effect::Reads,
        runs: Runs::Terminals,
    },
    ToolSpec {
        kind: ToolKind::TermList,
        name: "term_list",
        description: "List the open terminals: id, command, directory, size, when each started and whether it ended.",
        params: &[],
        effect: Effect::Reads,
        runs: Runs::Terminals,
    },
    ToolSpec {
        kind: ToolKind::TermScreen,
        name: "term_screen",
        description: "Read what a terminal shows right now, as text: its screen and the lines above it. Use it \
                      to tell the user what a build, a test run or a server in a terminal is saying.",
        params: &[
            TERM_PARAM,
            param(
                "lines",
                ParamType::Integer,
                false,
                "Lines above the screen to include too. Default 0, at most 1000.",
            ),
        ],
        effect: Effect::Reads,
        runs: Runs::Terminals,
    },
];

/// The `version` argument of the tools that replace a file's content.
const VERSION_PARAM: ParamSpec = param(
    "version",
    ParamType::String,
    false,
    "The version read_file returned: the write is refused (conflict) if the file changed since. \"new\" for a \
     file that must not exist yet.",
);

/// The `term` argument of the terminal tools.
const TERM_PARAM: ParamSpec = param("term", ParamType::String, true, "The terminal's id (t-…), as term_list lists it.");

/// The `session` argument of the session tools.
const SESSION_PARAM: ParamSpec =
    param("session", ParamType::String, true, "The session's id, as agent_sessions lists it.");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_from_its_name_and_back() {
        assert_eq!(TOOLS.len(), ToolKind::ALL.len());
        for (index, kind) in ToolKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, index, "ALL is in declaration order");
            assert_eq!(kind.spec().kind, kind, "TOOLS[{index}] is {kind:?}'s entry");
            assert_eq!(ToolKind::parse(kind.name()), Some(kind));
        }
        let names: std::collections::HashSet<_> = TOOLS.iter().map(|spec| spec.name).collect();
        assert_eq!(names.len(), TOOLS.len(), "names are unique");
        for unknown in ["", "Run_command", "run_command ", "fleet2", "__peer"] {
            assert_eq!(ToolKind::parse(unknown), None, "{unknown:?}");
        }
    }

    #[test]
    fn fleet_reads_only_when_it_lists() {
        let effect = ToolKind::Fleet.spec().effect;
        for reads in [serde_json::json!({}), serde_json::json!({"action": null}), serde_json::json!({"action": "list"})]
        {
            assert!(!effect.changes_machine(&reads), "{reads}");
        }
        for changes in [
            serde_json::json!({"action": "remove"}),
            serde_json::json!({"action": 1}),
            serde_json::json!({"action": "LIST"}),
        ] {
            assert!(effect.changes_machine(&changes), "{changes}");
        }
        assert!(effect.can_only_read() && !Effect::Changes.can_only_read());
    }
}
