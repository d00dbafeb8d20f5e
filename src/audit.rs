//! The audit trail (docs/GUIDE.md, "Tools"): one JSON line per tool call under `audit/`. Never secrets, never
//! file contents, never command output — only who asked for what, when, and how it ended.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::Serialize;

/// Longest caller, tool, id or other free-form field kept in a record; the rest is cut so a
/// hostile client cannot bloat the trail with a megabyte tool name.
pub const MAX_AUDIT_FIELD_LEN: usize = 128;

/// Appends audit records to the home's `audit/` directory, one file per UTC day
/// (`audit/YYYY-MM-DD.jsonl`, 0600, directory 0700).
#[derive(Clone)]
pub struct Audit {
    pub dir: PathBuf,
    /// The open file of the current day. One lock for every clone: a line is one `write` under it,
    /// and the file is opened `O_APPEND`, so lines from concurrent calls (or processes) never
    /// interleave.
    current: Arc<Mutex<Option<DayFile>>>,
}

struct DayFile {
    date: String,
    file: File,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").field("dir", &self.dir).finish()
    }
}

/// One tool call, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallRecord {
    /// `phone`, `loopback`, `gemini`, `gemini-hosted`, `host:<envKey>`.
    pub caller: String,
    pub tool: String,
    pub id: String,
    /// `ok` or the error code.
    pub outcome: String,
    pub duration_ms: u64,
    /// The rule that decided the outcome, e.g. `denied-by-policy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Which part of the policy refused the call: `allow`, `deny` or `read_only`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The environment (envKey or name) a host routed the call to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

/// Something other than a tool call worth a line, e.g. a revoked pairing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EventRecord {
    /// Who did it: `cli`, `host:<envKey>`, …
    pub caller: String,
    /// What happened, e.g. `revoke`.
    pub event: String,
    /// `ok` or an error code.
    pub outcome: String,
    /// The rule involved, e.g. `pairing-revoked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What it was about, e.g. an envKey (public). Never a bearer or token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// An approval asked for or decided (docs/PROTOCOL.md, "Approvals"). The summary has had what
/// looks like a secret taken out; the input itself is never recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ApprovalRecord {
    /// `a-…`.
    pub approval: String,
    /// `session:s-…` or `call:<id>`.
    pub source: String,
    pub tool: String,
    pub summary: String,
    /// `read`, `write`, `exec`, `network` or `outside`.
    pub risk: String,
    /// `requested`, then `allow`, `allow_session` or `deny`.
    pub decision: String,
    /// Who decided: `phone`, `voice`, `cli`, `timeout`, `restart`, `withdrawn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

#[derive(Serialize)]
struct Line<'a, T: Serialize> {
    time: &'a str,
    #[serde(flatten)]
    record: &'a T,
}

impl Audit {
    /// An audit trail in `dir`; the directory is created (0700) on the first record.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Audit { dir: dir.into(), current: Arc::new(Mutex::new(None)) }
    }

    /// Appends one tool-call record.
    pub fn record_call(&self, record: &CallRecord) -> Result<()> {
        let record = CallRecord {
            caller: clip(&record.caller),
            tool: clip(&record.tool),
            id: clip(&record.id),
            outcome: clip(&record.outcome),
            duration_ms: record.duration_ms,
            rule: record.rule.as_deref().map(clip),
            policy: record.policy.as_deref().map(clip),
            env: record.env.as_deref().map(clip),
        };
        self.append(&record, SystemTime::now())
    }

    /// Appends one non-call record (a revocation, a refused pairing).
    pub fn record_event(&self, record: &EventRecord) -> Result<()> {
        let record = EventRecord {
            caller: clip(&record.caller),
            event: clip(&record.event),
            outcome: clip(&record.outcome),
            rule: record.rule.as_deref().map(clip),
            subject: record.subject.as_deref().map(clip),
        };
        self.append(&record, SystemTime::now())
    }

    /// Appends one approval record.
    pub fn record_approval(&self, record: &ApprovalRecord) -> Result<()> {
        let record = ApprovalRecord {
            approval: clip(&record.approval),
            source: clip(&record.source),
            tool: clip(&record.tool),
            // A summary is at most a line; it is kept whole up to twice a field's length.
            summary: clip_to(&record.summary, 2 * MAX_AUDIT_FIELD_LEN),
            risk: clip(&record.risk),
            decision: clip(&record.decision),
            by: record.by.as_deref().map(clip),
        };
        self.append(&record, SystemTime::now())
    }

    /// The file records made at `time` go to.
    pub fn file_for(&self, time: SystemTime) -> PathBuf {
        self.dir.join(format!("{}.jsonl", utc_date(&timestamp(time))))
    }

    fn append<T: Serialize>(&self, record: &T, time: SystemTime) -> Result<()> {
        let time = timestamp(time);
        let mut line = serde_json::to_vec(&Line { time: &time, record }).context("could not encode audit record")?;
        line.push(b'\n');
        let date = utc_date(&time);
        let mut current = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.as_ref().is_none_or(|day| day.date != date) {
            *current = Some(DayFile { file: open_day_file(&self.dir, date)?, date: date.to_owned() });
        }
        if let Some(day) = current.as_mut() {
            if let Err(err) = day.file.write_all(&line) {
                // Reopen next time: the file may have been rotated or removed under us.
                *current = None;
                return Err(err)
                    .with_context(|| format!("could not append to the audit trail in {}", self.dir.display()));
            }
        }
        Ok(())
    }
}

fn open_day_file(dir: &Path, date: &str) -> Result<File> {
    if !dir.is_dir() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
    }
    let path = dir.join(format!("{date}.jsonl"));
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("could not open {}", path.display()))
}

/// RFC 3339 UTC with milliseconds: `2026-05-01T12:00:00.123Z`.
fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

fn utc_date(timestamp: &str) -> &str {
    timestamp.get(..10).unwrap_or("unknown-date")
}

fn clip(text: &str) -> String {
    clip_to(text, MAX_AUDIT_FIELD_LEN)
}

fn clip_to(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}…", crate::text::prefix(text, max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn call(id: &str) -> CallRecord {
        CallRecord {
            caller: "loopback".into(),
            tool: "read_file".into(),
            id: id.into(),
            outcome: "ok".into(),
            duration_ms: 3,
            rule: None,
            policy: None,
            env: None,
        }
    }

    fn lines(audit: &Audit) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(audit.file_for(SystemTime::now())).unwrap();
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    #[test]
    fn records_are_json_lines_in_a_private_day_file() {
        let tmp = tempfile::tempdir().unwrap();
        let audit = Audit::new(tmp.path().join("audit"));
        audit.record_call(&call("c1")).unwrap();
        audit
            .record_event(&EventRecord {
                caller: "cli".into(),
                event: "revoke".into(),
                outcome: "ok".into(),
                rule: Some("pairing-revoked".into()),
                subject: Some("ab12".into()),
            })
            .unwrap();
        let file = audit.file_for(SystemTime::now());
        let name = file.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(name.len(), "YYYY-MM-DD.jsonl".len(), "{name}");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&audit.dir).unwrap().permissions().mode() & 0o777, 0o700);

        let lines = lines(&audit);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["tool"], "read_file");
        assert_eq!(lines[0]["id"], "c1");
        assert_eq!(lines[0]["outcome"], "ok");
        assert_eq!(lines[0]["duration_ms"], 3);
        assert!(lines[0].get("rule").is_none());
        let time = lines[0]["time"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(time).is_ok(), "{time}");
        assert!(time.ends_with('Z'));
        assert_eq!(lines[1]["event"], "revoke");
        assert_eq!(lines[1]["rule"], "pairing-revoked");
    }

    #[test]
    fn concurrent_appends_never_interleave() {
        let tmp = tempfile::tempdir().unwrap();
        let audit = Audit::new(tmp.path().join("audit"));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let audit = audit.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let mut record = call(&format!("t{t}-{i}"));
                        record.caller = "x".repeat(100);
                        audit.record_call(&record).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let lines = lines(&audit);
        assert_eq!(lines.len(), 1600);
        let mut ids: Vec<_> = lines.iter().map(|l| l["id"].as_str().unwrap().to_owned()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 1600);
    }

    #[test]
    fn hostile_fields_are_clipped_and_stay_on_one_line() {
        let tmp = tempfile::tempdir().unwrap();
        let audit = Audit::new(tmp.path());
        let mut record = call("c\n{\"forged\":true}");
        record.tool = "é".repeat(10_000);
        audit.record_call(&record).unwrap();
        let lines = lines(&audit);
        assert_eq!(lines.len(), 1);
        assert!(lines[0]["tool"].as_str().unwrap().len() <= MAX_AUDIT_FIELD_LEN + "…".len());
        assert!(lines[0].get("forged").is_none());
    }
}
