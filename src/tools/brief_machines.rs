//! `brief` over every machine: this machine's own brief, then each of its environments' (asked
//! through the router side by side, each given a few seconds), their sessions named with their
//! machine and their sentences after this machine's. An environment that does not answer in time
//! is named as one that could not be reached; nothing waits longer than [`ENV_BRIEF_WAIT`].

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};

use crate::protocol::{ErrorCode, ToolError};

/// Longest an environment's brief is waited for.
pub const ENV_BRIEF_WAIT: Duration = Duration::from_secs(3);
/// Environments asked for one brief; more are counted, not asked.
const MAX_ENVIRONMENTS: usize = 16;

/// This machine's `brief` (`local`) with each paired environment's beside it: `listed` is the
/// router's `fleet` listing, `ask` asks one environment (by envKey) for its brief.
pub async fn everywhere<F>(local: Value, listed: Result<Value, ToolError>, ask: impl Fn(String) -> F) -> Value
where
    F: Future<Output = Result<Value, ToolError>>,
{
    let environments: Vec<(String, String)> = listed
        .ok()
        .and_then(|list| list.get("environments").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter(|env| env.get("self").and_then(Value::as_bool) != Some(true))
        .filter_map(|env| Some((env.get("envKey")?.as_str()?.to_owned(), env.get("name")?.as_str()?.to_owned())))
        .take(MAX_ENVIRONMENTS)
        .collect();
    if environments.is_empty() {
        return local;
    }
    let asked = environments.iter().map(|(key, _)| {
        let answer = tokio::time::timeout(ENV_BRIEF_WAIT, ask(key.clone()));
        async move { answer.await.unwrap_or_else(|_| Err(ToolError::new(ErrorCode::Timeout, "no brief in time"))) }
    });
    let answers = futures_util::future::join_all(asked).await;
    merge(local, environments.into_iter().map(|(_, name)| name).zip(answers))
}

/// Adds each machine's brief to this machine's: its sessions (each with `machine`), its sentences
/// ("On buildbox: …"), and the names of those that could not be reached.
fn merge(mut local: Value, remote: impl Iterator<Item = (String, Result<Value, ToolError>)>) -> Value {
    let mut digest = local.get("digest").and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut sessions = local.get("sessions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut unreachable = Vec::new();
    for (name, answer) in remote {
        let Ok(brief) = answer else {
            unreachable.push(name);
            continue;
        };
        let theirs = brief.get("sessions").and_then(Value::as_array).cloned().unwrap_or_default();
        if theirs.is_empty() {
            continue;
        }
        if let Some(said) = brief.get("digest").and_then(Value::as_str) {
            digest.push_str(&format!(" On {}: {}", crate::text::prefix(&name, 64), crate::text::prefix(said, 2000)));
        }
        for mut session in theirs {
            session["machine"] = Value::String(name.clone());
            sessions.push(session);
        }
    }
    if !unreachable.is_empty() {
        let names = unreachable.iter().map(|n| crate::text::prefix(n, 64)).collect::<Vec<_>>().join(", ");
        digest.push_str(&format!(" {names} could not be reached."));
        local["unreachable_machines"] = json!(unreachable);
    }
    local["digest"] = Value::String(digest);
    local["sessions"] = Value::Array(sessions);
    local
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_machine_is_named_after_the_laptops_own_and_the_unreachable_are_said() {
        let local = json!({"digest": "Since you last looked (in the last minute): \"fix\" (claude) finished 1 turn.",
            "sessions": [{"session": "s-1", "title": "fix"}], "more_sessions": 0});
        let remote = vec![
            (
                "buildbox".to_owned(),
                Ok(json!({"digest": "Since you last looked: \"box job\" (claude) finished 2 turns.",
                "sessions": [{"session": "s-2", "title": "box job"}]})),
            ),
            ("quiet".to_owned(), Ok(json!({"digest": "Nothing happened.", "sessions": []}))),
            ("gone".to_owned(), Err(ToolError::new(ErrorCode::Timeout, "no brief in time"))),
        ];
        let merged = merge(local, remote.into_iter());
        let digest = merged["digest"].as_str().unwrap();
        assert!(digest.starts_with("Since you last looked (in the last minute): \"fix\""), "{digest}");
        assert!(digest.contains(" On buildbox: Since you last looked: \"box job\""), "{digest}");
        assert!(!digest.contains("quiet") && !digest.contains("Nothing happened"), "{digest}");
        assert!(digest.ends_with(" gone could not be reached."), "{digest}");
        assert_eq!(merged["sessions"][0].get("machine"), None, "this laptop's own");
        assert_eq!(merged["sessions"][1]["machine"], "buildbox");
        assert_eq!(merged["unreachable_machines"], json!(["gone"]));
    }
}
