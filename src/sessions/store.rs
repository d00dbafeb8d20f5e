//! The sessions' log on disk: SQLite (bundled, WAL) in `<home>/sessions/events.db`, the
//! directory 0700 and its files 0600. One row per session, one per event; an event is
//! committed before anyone is told of it, so a replay after `seq` is exact.
//!
//! Bounded: sessions that ended more than [`MAX_AGE`] ago are deleted, and while the events take
//! more than [`MAX_BYTES`], the sessions with the oldest activity go first (a live session
//! never). Pruning runs when the store opens and every [`PRUNE_EVERY`].

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

use super::event::now_ms;
use crate::protocol::{Event, SessionEvent, SessionState};

/// Sessions whose last event is older than this are deleted.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// Most bytes of events kept across all sessions.
pub const MAX_BYTES: u64 = 256 << 20;
/// How often the store is pruned while the agent runs.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60 * 60);
/// Most events one `agent_log` page or replay step returns.
pub const MAX_PAGE: usize = 1000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    title TEXT NOT NULL,
    cwd TEXT NOT NULL,
    resume TEXT,
    state TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    last_event_at INTEGER NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    turns INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL
);
CREATE TABLE IF NOT EXISTS events (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
";

/// A session as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    pub id: String,
    pub agent: String,
    pub title: String,
    pub cwd: PathBuf,
    /// The agent's own id, to resume it (`--resume`, `thread/resume`).
    pub resume: Option<String>,
    pub state: SessionState,
    pub started_at: u64,
    pub last_event_at: u64,
    pub last_seq: u64,
    pub turns: u64,
    pub cost_usd: Option<f64>,
}

/// The sessions' log.
pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl Store {
    /// Opens (or creates) the store in `dir`. Sessions the store still shows as live had their
    /// process die with the previous agent: they are marked ended (an event says so).
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("could not make {} private", dir.display()))?;
        let path = dir.join("events.db");
        // Created 0600 before SQLite opens it; SQLite keeps an existing file's mode for its
        // journal files, and the directory is private either way.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("could not create {}", path.display()))?;
        let conn = Connection::open(&path).with_context(|| format!("could not open {}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(5)).context("could not configure the session store")?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .context("could not switch the session store to WAL")?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(anyhow!("the session store at {} refused WAL mode ({mode})", path.display()));
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL;").context("could not configure the session store")?;
        conn.execute_batch(SCHEMA).with_context(|| format!("could not set up {}", path.display()))?;
        for suffix in ["-wal", "-shm"] {
            let extra = dir.join(format!("events.db{suffix}"));
            if extra.exists() {
                std::fs::set_permissions(&extra, std::fs::Permissions::from_mode(0o600))
                    .with_context(|| format!("could not make {} private", extra.display()))?;
            }
        }
        let store = Store { conn: Mutex::new(conn), path };
        store.end_orphans()?;
        store.prune(&HashSet::new(), MAX_AGE, MAX_BYTES)?;
        Ok(store)
    }

    fn conn(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        self.conn.lock().map_err(|_| anyhow!("the session store is unusable after a panic"))
    }

    fn end_orphans(&self) -> Result<()> {
        let orphans: Vec<String> = {
            let conn = self.conn()?;
            let mut statement =
                conn.prepare("SELECT id FROM sessions WHERE state IN ('starting','working','waiting','idle')")?;
            let rows = statement.query_map([], |row| row.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for id in orphans {
            self.append(&id, &Event::State { state: SessionState::Ended })?;
        }
        Ok(())
    }

    /// Adds a session.
    pub fn create(&self, row: &SessionRow) -> Result<()> {
        self.conn()?
            .execute(
                "INSERT INTO sessions (id, agent, title, cwd, resume, state, started_at, last_event_at, last_seq, turns, cost_usd)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0, NULL)",
                params![
                    row.id,
                    row.agent,
                    row.title,
                    row.cwd.to_string_lossy(),
                    row.resume,
                    row.state.as_str(),
                    to_i64(row.started_at),
                    to_i64(row.last_event_at)
                ],
            )
            .context("could not record the session")?;
        Ok(())
    }

    /// Appends an event to a session's log, numbered one past its last; a `state` event also
    /// sets the session's state, a `turn_end` counts the turn and its cost.
    pub fn append(&self, session: &str, event: &Event) -> Result<SessionEvent> {
        let at = now_ms();
        let text = serde_json::to_string(event).context("could not encode the event")?;
        let mut conn = self.conn()?;
        let tx = conn.transaction().context("could not write the session log")?;
        let last: i64 = tx
            .query_row("SELECT last_seq FROM sessions WHERE id = ?1", [session], |row| row.get(0))
            .optional()?
            .ok_or_else(|| anyhow!("no session {session}"))?;
        let seq = last + 1;
        tx.execute(
            "INSERT INTO events (session, seq, at, event) VALUES (?1, ?2, ?3, ?4)",
            params![session, seq, to_i64(at), text],
        )?;
        tx.execute(
            "UPDATE sessions SET last_seq = ?2, last_event_at = ?3 WHERE id = ?1",
            params![session, seq, to_i64(at)],
        )?;
        match event {
            Event::State { state } => {
                tx.execute("UPDATE sessions SET state = ?2 WHERE id = ?1", params![session, state.as_str()])?;
            }
            Event::TurnEnd { cost_usd, .. } => {
                tx.execute(
                    "UPDATE sessions SET turns = turns + 1, cost_usd = CASE WHEN ?2 IS NULL THEN cost_usd ELSE coalesce(cost_usd, 0) + ?2 END WHERE id = ?1",
                    params![session, cost_usd],
                )?;
            }
            _ => {}
        }
        tx.commit().context("could not write the session log")?;
        Ok(SessionEvent { session: session.to_owned(), seq: to_u64(seq), at, event: event.clone() })
    }

    /// Records the agent's own id for resuming the session.
    pub fn set_resume(&self, session: &str, resume: &str) -> Result<()> {
        self.conn()?
            .execute("UPDATE sessions SET resume = ?2 WHERE id = ?1", params![session, resume])
            .context("could not record the session's resume id")?;
        Ok(())
    }

    /// Up to `limit` (at most [`MAX_PAGE`]) events of `session` after `after`, in order.
    pub fn events(&self, session: &str, after: u64, limit: usize) -> Result<Vec<SessionEvent>> {
        let conn = self.conn()?;
        let mut statement = conn.prepare_cached(
            "SELECT seq, at, event FROM events WHERE session = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )?;
        let limit = i64::try_from(limit.min(MAX_PAGE)).unwrap_or(0);
        let rows = statement.query_map(params![session, to_i64(after), limit], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, String>(2)?))
        })?;
        let mut events = Vec::new();
        for row in rows {
            let (seq, at, text) = row?;
            // An event this build cannot read is shown as what it is, never skipped: a gap
            // would read as lost events.
            let event = serde_json::from_str(&text)
                .unwrap_or_else(|err| Event::error("internal", format!("unreadable event: {err}")));
            events.push(SessionEvent { session: session.to_owned(), seq: to_u64(seq), at: to_u64(at), event });
        }
        Ok(events)
    }

    /// One session.
    pub fn session(&self, id: &str) -> Result<Option<SessionRow>> {
        Ok(self.query_sessions("WHERE id = ?1", &[&id])?.into_iter().next())
    }

    /// Every session, the most recently active first.
    pub fn sessions(&self) -> Result<Vec<SessionRow>> {
        self.query_sessions("ORDER BY last_event_at DESC, id", &[])
    }

    fn query_sessions(&self, rest: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<SessionRow>> {
        let conn = self.conn()?;
        let mut statement = conn.prepare_cached(&format!(
            "SELECT id, agent, title, cwd, resume, state, started_at, last_event_at, last_seq, turns, cost_usd FROM sessions {rest}"
        ))?;
        let rows = statement.query_map(args, |row| {
            Ok(SessionRow {
                id: row.get(0)?,
                agent: row.get(1)?,
                title: row.get(2)?,
                cwd: PathBuf::from(row.get::<_, String>(3)?),
                resume: row.get(4)?,
                state: SessionState::parse(&row.get::<_, String>(5)?).unwrap_or(SessionState::Ended),
                started_at: to_u64(row.get(6)?),
                last_event_at: to_u64(row.get(7)?),
                last_seq: to_u64(row.get(8)?),
                turns: to_u64(row.get(9)?),
                cost_usd: row.get(10)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes sessions (never one in `live`) idle for more than `max_age`, then the least
    /// recently active until the events take at most `max_bytes`. Returns the deleted ids.
    pub fn prune(&self, live: &HashSet<String>, max_age: Duration, max_bytes: u64) -> Result<Vec<String>> {
        let oldest_first: Vec<(String, u64, u64)> = {
            let conn = self.conn()?;
            let mut statement = conn.prepare(
                "SELECT s.id, s.last_event_at, coalesce((SELECT sum(length(e.event)) FROM events e WHERE e.session = s.id), 0)
                 FROM sessions s ORDER BY s.last_event_at, s.id",
            )?;
            let rows = statement
                .query_map([], |row| Ok((row.get::<_, String>(0)?, to_u64(row.get(1)?), to_u64(row.get(2)?))))?;
            rows.collect::<Result<_, _>>()?
        };
        let cutoff = now_ms().saturating_sub(u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX));
        let mut total: u64 = oldest_first.iter().map(|(_, _, bytes)| bytes).sum();
        let mut doomed = Vec::new();
        for (id, last_event_at, bytes) in oldest_first {
            if live.contains(&id) {
                continue;
            }
            if last_event_at < cutoff || total > max_bytes {
                total = total.saturating_sub(bytes);
                doomed.push(id);
            }
        }
        if doomed.is_empty() {
            return Ok(doomed);
        }
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        for id in &doomed {
            tx.execute("DELETE FROM events WHERE session = ?1", [id])?;
            tx.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
        }
        tx.commit().context("could not prune the session store")?;
        Ok(doomed)
    }

    /// The last seq of every session.
    pub fn last_seqs(&self) -> Result<HashMap<String, u64>> {
        Ok(self.sessions()?.into_iter().map(|row| (row.id, row.last_seq)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> SessionRow {
        SessionRow {
            id: id.into(),
            agent: "claude".into(),
            title: "t".into(),
            cwd: "/tmp".into(),
            resume: None,
            state: SessionState::Starting,
            started_at: now_ms(),
            last_event_at: now_ms(),
            last_seq: 0,
            turns: 0,
            cost_usd: None,
        }
    }

    #[test]
    fn events_are_numbered_from_one_and_replayed_exactly_after_a_seq() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("sessions")).unwrap();
        store.create(&row("s-1")).unwrap();
        for n in 0..5 {
            let event = store.append("s-1", &Event::Text { text: format!("t{n}"), partial: false }).unwrap();
            assert_eq!(event.seq, n + 1);
        }
        let after = store.events("s-1", 2, 100).unwrap();
        assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(store.events("s-1", 0, 2).unwrap().len(), 2);
        assert!(store.append("s-missing", &Event::error("x", "y")).is_err());
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("sessions")), 0o700);
        assert_eq!(mode(&dir.path().join("sessions/events.db")), 0o600);
    }

    #[test]
    fn turns_and_cost_add_up_and_live_sessions_end_when_the_store_reopens() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store.create(&row("s-1")).unwrap();
            store.append("s-1", &Event::State { state: SessionState::Working }).unwrap();
            for cost in [Some(0.5), None, Some(0.25)] {
                let end = Event::TurnEnd {
                    ok: true,
                    result: String::new(),
                    cost_usd: cost,
                    duration_ms: 1,
                    interrupted: false,
                };
                store.append("s-1", &end).unwrap();
            }
            store.set_resume("s-1", "abc").unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let session = store.session("s-1").unwrap().unwrap();
        assert_eq!((session.turns, session.cost_usd, session.resume.as_deref()), (3, Some(0.75), Some("abc")));
        assert_eq!(session.state, SessionState::Ended);
        let last = store.events("s-1", 4, 10).unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].event, Event::State { state: SessionState::Ended });
    }

    #[test]
    fn pruning_drops_the_oldest_sessions_but_never_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for id in ["s-old", "s-live", "s-new"] {
            store.create(&row(id)).unwrap();
            store.append(id, &Event::Text { text: "x".repeat(1000), partial: false }).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let live: HashSet<String> = ["s-live".to_owned()].into();
        assert!(store.prune(&live, MAX_AGE, u64::MAX).unwrap().is_empty());
        assert_eq!(store.prune(&live, MAX_AGE, 2500).unwrap(), ["s-old"]);
        assert_eq!(store.prune(&live, Duration::ZERO, u64::MAX).unwrap(), ["s-new"]);
        assert_eq!(store.sessions().unwrap().iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["s-live"]);
        assert!(store.events("s-old", 0, 10).unwrap().is_empty());
    }
}
