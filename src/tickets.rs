//! Pairing tickets (docs/SECURITY.md, "A link whose secret works once"): what a pairing link
//! carries instead of the auth token. A ticket is a fresh 128-bit secret that keys one sealed
//! hello; the agent spends it at that hello (before it answers) and hands the pairing's token
//! inside the sealed session. So the link a browser writes into its history opens nothing once
//! the phone has used it, and nothing at all after [`TICKET_LIFETIME`].
//!
//! The tickets live in `tickets.json` (0600) in the home, written by `voxa pair` / `voxa open` and
//! spent by the running agent; both hold `.tickets.lock` while they read and write it, so one
//! ticket is spent once however many hellos race for it. At most [`MAX_OUTSTANDING`] unspent
//! tickets are kept (a new one replaces the oldest); spent and expired ones are remembered for
//! [`REMEMBERED_FOR`] so that a second use is told "used already" rather than "unknown".

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::secret::Secret;
use crate::state::{check_private, read_text_if_exists, Home};

/// The home file of the tickets.
pub use crate::state::TICKETS_FILE;
/// Held while the tickets are read and written.
use crate::state::TICKETS_LOCK;
/// How long a ticket opens a hello after it was made.
pub const TICKET_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Unspent tickets kept at once; making one more drops the oldest.
pub const MAX_OUTSTANDING: usize = 8;
/// How long a spent or expired ticket is remembered, to tell its next use why it is refused.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(24 * 60 * 60);
/// Spent and expired tickets remembered at most (the oldest are forgotten first).
const MAX_REMEMBERED: usize = 64;

/// A ticket just made: the secret the link carries and when it stops working.
#[derive(Debug)]
pub struct Ticket {
    pub secret: Secret,
    pub expires: SystemTime,
}

/// What a hello keyed by a ticket found.
#[derive(Debug)]
pub enum Redeemed<T> {
    /// The ticket was unspent and in time: it is spent now, and this is what its check gave.
    Fresh(T),
    /// The ticket was spent already, by an earlier hello.
    Used,
    /// The ticket expired, was replaced by `pair --rotate`, or is none of this home's.
    Expired,
}

/// One ticket as `tickets.json` keeps it (unix seconds).
#[derive(Serialize, Deserialize)]
struct Entry {
    ticket: String,
    expires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    used: Option<u64>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("expires", &self.expires).field("used", &self.used).finish_non_exhaustive()
    }
}

impl Entry {
    fn live(&self, now: u64) -> bool {
        self.used.is_none() && now < self.expires
    }

    /// When it stopped working: its use, else its expiry.
    fn ended(&self) -> u64 {
        self.used.unwrap_or(self.expires)
    }
}

fn secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Makes a ticket that works until [`TICKET_LIFETIME`] from now or its first use.
pub fn issue(home: &Home) -> Result<Ticket> {
    issue_at(home, SystemTime::now())
}

/// [`issue`] at `now`.
pub fn issue_at(home: &Home, now: SystemTime) -> Result<Ticket> {
    home.ensure()?;
    let _lock = home.lock_file(TICKETS_LOCK)?;
    let mut entries = load(home)?;
    let secret = Secret::generate()?;
    let expires = now + TICKET_LIFETIME;
    entries.push(Entry { ticket: secret.expose().to_owned(), expires: secs(expires), used: None });
    save(home, entries, secs(now))?;
    Ok(Ticket { secret, expires })
}

/// Spends the ticket that `check` accepts, if one does: `check` is tried on every ticket this
/// home remembers (it reads the hello's handshake message keyed by that ticket) and the ticket
/// it accepts is written spent before this returns, so nothing is answered on an unspent one.
pub fn redeem<T>(home: &Home, now: SystemTime, mut check: impl FnMut(&Secret) -> Option<T>) -> Result<Redeemed<T>> {
    let _lock = home.lock_file(TICKETS_LOCK)?;
    let mut entries = load(home)?;
    let now = secs(now);
    let mut found = None;
    for (index, entry) in entries.iter().enumerate() {
        let Ok(secret) = Secret::parse_hex128(&entry.ticket) else { continue };
        if let Some(value) = check(&secret) {
            found = Some((index, value));
            break;
        }
    }
    let Some((index, value)) = found else { return Ok(Redeemed::Expired) };
    let entry = &mut entries[index];
    if entry.used.is_some() {
        return Ok(Redeemed::Used);
    }
    if !entry.live(now) {
        return Ok(Redeemed::Expired);
    }
    entry.used = Some(now);
    save(home, entries, now)?;
    Ok(Redeemed::Fresh(value))
}

/// Forgets every ticket: `pair --rotate` makes every link printed before it open nothing.
pub fn clear(home: &Home) -> Result<()> {
    home.forget_tickets()
}

/// Unspent tickets in time, for `status`.
pub fn outstanding(home: &Home, now: SystemTime) -> Result<usize> {
    let _lock = home.lock_file(TICKETS_LOCK)?;
    let now = secs(now);
    Ok(load(home)?.iter().filter(|entry| entry.live(now)).count())
}

/// The tickets, oldest first. A file that does not read is refused with the fix (it is voxa's
/// alone to write).
fn load(home: &Home) -> Result<Vec<Entry>> {
    let path = home.path(TICKETS_FILE);
    let Some(text) = read_text_if_exists(&path)? else { return Ok(Vec::new()) };
    check_private(&path, false)?;
    serde_json::from_str(&text).map_err(|_| {
        crate::error::ConfigError::new(format!(
            "{} is not a list of pairing tickets; remove it (every link printed before opens nothing)",
            path.display()
        ))
        .into()
    })
}

/// Writes the tickets back, bounded: the newest [`MAX_OUTSTANDING`] live ones, and the spent or
/// expired ones of the last [`REMEMBERED_FOR`], at most [`MAX_REMEMBERED`].
fn save(home: &Home, entries: Vec<Entry>, now: u64) -> Result<()> {
    let (mut live, mut ended): (Vec<Entry>, Vec<Entry>) = entries.into_iter().partition(|entry| entry.live(now));
    let replaced = live.len().saturating_sub(MAX_OUTSTANDING);
    live.drain(..replaced);
    ended.retain(|entry| now.saturating_sub(entry.ended()) < REMEMBERED_FOR.as_secs());
    ended.sort_by_key(Entry::ended);
    let forgotten = ended.len().saturating_sub(MAX_REMEMBERED);
    ended.drain(..forgotten);
    ended.extend(live);
    let json = serde_json::to_vec(&ended).context("could not encode the pairing tickets")?;
    home.write_atomic(TICKETS_FILE, &json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn home() -> (tempfile::TempDir, Home) {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("voxa"));
        home.ensure().unwrap();
        (tmp, home)
    }

    /// The check a hello makes, here: "is this the ticket I hold?".
    fn holding(ticket: &Secret) -> impl FnMut(&Secret) -> Option<()> + '_ {
        move |candidate| (candidate == ticket).then_some(())
    }

    #[test]
    fn a_ticket_works_once() {
        let (_tmp, home) = home();
        let now = SystemTime::now();
        let ticket = issue_at(&home, now).unwrap();
        assert_eq!(std::fs::metadata(home.path(TICKETS_FILE)).unwrap().mode() & 0o777, 0o600);
        assert_eq!(outstanding(&home, now).unwrap(), 1);
        assert!(matches!(redeem(&home, now, holding(&ticket.secret)).unwrap(), Redeemed::Fresh(())));
        assert_eq!(outstanding(&home, now).unwrap(), 0);
        assert!(matches!(redeem(&home, now, holding(&ticket.secret)).unwrap(), Redeemed::Used));
        let stranger = Secret::generate().unwrap();
        assert!(matches!(redeem(&home, now, holding(&stranger)).unwrap(), Redeemed::Expired));
        assert!(!format!("{ticket:?}").contains(ticket.secret.expose()));
    }

    #[test]
    fn a_ticket_expires_and_a_spent_one_is_forgotten_after_a_day() {
        let (_tmp, home) = home();
        let made = SystemTime::now();
        let ticket = issue_at(&home, made).unwrap();
        assert_eq!(ticket.expires, made + TICKET_LIFETIME);
        let late = made + TICKET_LIFETIME;
        assert!(matches!(redeem(&home, late, holding(&ticket.secret)).unwrap(), Redeemed::Expired));
        let early = issue_at(&home, made).unwrap();
        let just_in_time = made + TICKET_LIFETIME - Duration::from_secs(1);
        assert!(matches!(redeem(&home, just_in_time, holding(&early.secret)).unwrap(), Redeemed::Fresh(())));
        // A day on, saving forgets both: a use is then "expired" (unknown), never "fresh".
        let next_day = just_in_time + REMEMBERED_FOR;
        issue_at(&home, next_day).unwrap();
        assert!(matches!(redeem(&home, next_day, holding(&early.secret)).unwrap(), Redeemed::Expired));
        assert!(!std::fs::read_to_string(home.path(TICKETS_FILE)).unwrap().contains(early.secret.expose()));
    }

    #[test]
    fn at_most_eight_are_outstanding_and_rotation_clears_them() {
        let (_tmp, home) = home();
        let now = SystemTime::now();
        let tickets: Vec<Ticket> = (0..MAX_OUTSTANDING + 2).map(|_| issue_at(&home, now).unwrap()).collect();
        assert_eq!(outstanding(&home, now).unwrap(), MAX_OUTSTANDING);
        assert!(matches!(redeem(&home, now, holding(&tickets[0].secret)).unwrap(), Redeemed::Expired));
        assert!(matches!(redeem(&home, now, holding(&tickets[2].secret)).unwrap(), Redeemed::Fresh(())));
        clear(&home).unwrap();
        assert!(matches!(redeem(&home, now, holding(&tickets[3].secret)).unwrap(), Redeemed::Expired));
        assert_eq!(outstanding(&home, now).unwrap(), 0);
    }

    #[test]
    fn a_file_that_does_not_read_is_refused_without_its_content() {
        let (_tmp, home) = home();
        home.write_atomic(TICKETS_FILE, b"[{\"ticket\": 00112233445566778899aabbccddeeff").unwrap();
        let err = format!("{:#}", issue(&home).unwrap_err());
        assert!(err.contains("not a list of pairing tickets") && !err.contains("00112233"), "{err}");
    }
}
