//! What a tool use means to the person following it: a one-line summary, its risk, and for file
//! edits a unified diff of the file as it is against what the edit would make of it.

use std::path::Path;

use serde_json::Value;
use similar::TextDiff;

use super::event::MAX_DIFF_LEN;
use crate::protocol::Risk;
use crate::text::prefix;

/// Largest file read to show an edit's diff; a larger one is diffed as the edit's text alone.
const MAX_DIFF_SOURCE: u64 = 1 << 20;
/// Longest summary.
const MAX_SUMMARY_LEN: usize = 200;

fn field<'a>(input: &'a Value, name: &str) -> &'a str {
    input.get(name).and_then(Value::as_str).unwrap_or_default()
}

/// `path` shown relative to `cwd` when inside it.
fn shown_path(path: &str, cwd: &Path) -> String {
    Path::new(path).strip_prefix(cwd).map_or_else(|_| path.to_owned(), |rel| rel.display().to_string())
}

/// One line saying what a tool use does, e.g. `npm test (in ~/src/app)` or `edit src/main.rs`.
pub fn summary(tool: &str, input: &Value, cwd: &Path) -> String {
    let path = || shown_path(field(input, "file_path"), cwd);
    let line = match tool {
        "Bash" => format!("{} (in {})", first_line(field(input, "command")), cwd.display()),
        "Write" => format!("write {}", path()),
        "Edit" | "MultiEdit" => format!("edit {}", path()),
        "NotebookEdit" => format!("edit {}", shown_path(field(input, "notebook_path"), cwd)),
        "Read" => format!("read {}", path()),
        "Glob" | "Grep" => format!("{} {}", tool.to_lowercase(), field(input, "pattern")),
        "WebFetch" => format!("fetch {}", field(input, "url")),
        "WebSearch" => format!("search the web for {}", field(input, "query")),
        "AskUserQuestion" => {
            let first = input.pointer("/questions/0/question").and_then(Value::as_str).unwrap_or("a question");
            format!("asks: {first}")
        }
        other => match input.get("description").and_then(Value::as_str) {
            Some(description) => format!("{other}: {description}"),
            None => other.to_owned(),
        },
    };
    prefix(&line, MAX_SUMMARY_LEN).to_owned()
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// What a tool use puts at stake: file tools outside `cwd` are `outside`.
pub fn risk(tool: &str, input: &Value, cwd: &Path) -> Risk {
    let outside = |name: &str| {
        let path = field(input, name);
        !path.is_empty() && Path::new(path).is_absolute() && !Path::new(path).starts_with(cwd)
    };
    match tool {
        "Write" | "Edit" | "MultiEdit" if outside("file_path") => Risk::Outside,
        "NotebookEdit" if outside("notebook_path") => Risk::Outside,
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => Risk::Write,
        "Read" | "Glob" | "Grep" | "LS" | "AskUserQuestion" | "TodoWrite" => Risk::Read,
        "WebFetch" | "WebSearch" => Risk::Network,
        _ => Risk::Exec,
    }
}

/// The unified diff of an edit (`Write`, `Edit`, `MultiEdit`), against the file as it is now.
pub fn edit_diff(tool: &str, input: &Value) -> Option<String> {
    let path = field(input, "file_path");
    if path.is_empty() || !matches!(tool, "Write" | "Edit" | "MultiEdit") {
        return None;
    }
    let current = read_small(Path::new(path));
    let (before, after) = match tool {
        "Write" => (current.unwrap_or_default(), field(input, "content").to_owned()),
        "Edit" => {
            let edits = [(field(input, "old_string"), field(input, "new_string"), replace_all(input))];
            apply(current, &edits)
        }
        _ => {
            let edits: Vec<(&str, &str, bool)> = input
                .get("edits")
                .and_then(Value::as_array)
                .map(|edits| {
                    edits
                        .iter()
                        .map(|edit| (field(edit, "old_string"), field(edit, "new_string"), replace_all(edit)))
                        .collect()
                })
                .unwrap_or_default();
            apply(current, &edits)
        }
    };
    Some(unified(path, &before, &after))
}

fn replace_all(input: &Value) -> bool {
    input.get("replace_all").and_then(Value::as_bool).unwrap_or(false)
}

/// The file before and after the edits; without the file, the edited pieces alone.
fn apply(current: Option<String>, edits: &[(&str, &str, bool)]) -> (String, String) {
    match current {
        Some(before) if edits.iter().all(|(old, _, _)| !old.is_empty()) => {
            let mut after = before.clone();
            for (old, new, all) in edits {
                after = if *all { after.replace(old, new) } else { after.replacen(old, new, 1) };
            }
            (before, after)
        }
        _ => {
            let lines = |piece: &str| if piece.ends_with('\n') { piece.to_owned() } else { format!("{piece}\n") };
            let before = edits.iter().map(|(old, _, _)| lines(old)).collect();
            let after = edits.iter().map(|(_, new, _)| lines(new)).collect();
            (before, after)
        }
    }
}

fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_DIFF_SOURCE {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// A unified diff with 3 lines of context, cut at [`MAX_DIFF_LEN`].
pub fn unified(path: &str, before: &str, after: &str) -> String {
    let diff = TextDiff::from_lines(before, after);
    let text = diff.unified_diff().context_radius(3).header(&format!("a/{path}"), &format!("b/{path}")).to_string();
    prefix(&text, MAX_DIFF_LEN).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_and_risks_say_what_a_tool_does() {
        let cwd = Path::new("/work/app");
        assert_eq!(summary("Bash", &json!({"command": "npm test\nmore"}), cwd), "npm test (in /work/app)");
        assert_eq!(summary("Write", &json!({"file_path": "/work/app/src/a.rs"}), cwd), "write src/a.rs");
        assert_eq!(summary("Grep", &json!({"pattern": "fn main"}), cwd), "grep fn main");
        assert_eq!(risk("Write", &json!({"file_path": "/work/app/a"}), cwd), Risk::Write);
        assert_eq!(risk("Edit", &json!({"file_path": "/etc/passwd"}), cwd), Risk::Outside);
        assert_eq!(risk("Bash", &json!({}), cwd), Risk::Exec);
        assert_eq!(risk("WebFetch", &json!({}), cwd), Risk::Network);
        assert_eq!(risk("Read", &json!({}), cwd), Risk::Read);
        assert!(summary("Bash", &json!({"command": "x".repeat(1000)}), cwd).len() <= MAX_SUMMARY_LEN);
    }

    #[test]
    fn edits_become_unified_diffs_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
        let path = file.to_str().unwrap();
        let edit = json!({"file_path": path, "old_string": "two", "new_string": "2"});
        let diff = edit_diff("Edit", &edit).unwrap();
        assert!(diff.contains(&format!("--- a/{path}")), "{diff}");
        assert!(diff.contains("-two\n+2\n") && diff.contains(" one\n"), "{diff}");
        let write = json!({"file_path": dir.path().join("new.txt").to_str().unwrap(), "content": "hello\n"});
        assert!(edit_diff("Write", &write).unwrap().contains("+hello\n"));
        let multi = json!({"file_path": path, "edits": [{"old_string": "one", "new_string": "1"}, {"old_string": "three", "new_string": "3"}]});
        let diff = edit_diff("MultiEdit", &multi).unwrap();
        assert!(diff.contains("-one\n") && diff.contains("+3\n"), "{diff}");
        assert!(edit_diff("Bash", &json!({"command": "ls"})).is_none());
        let missing = json!({"file_path": "/nonexistent/x", "old_string": "a", "new_string": "b"});
        assert!(edit_diff("Edit", &missing).unwrap().contains("-a\n+b"));
    }
}
