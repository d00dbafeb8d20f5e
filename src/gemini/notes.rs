//! Notes for a call's model (narration of what the sessions did, an approval's read-back) go in
//! only while nobody holds the floor: a text turn sent while the user speaks would cut them off,
//! and one sent while the model answers would interrupt it. A note that comes meanwhile waits
//! until the turn is over — `turnComplete`, the model done generating, or the model waiting for
//! its function calls (so an approval one of them opens reaches it) — or until nothing has been
//! heard of the turn for [`TURN_STALE`] (a turn the service never closed).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// A turn with no sign of life for this long no longer holds notes back.
pub const TURN_STALE: Duration = Duration::from_secs(10);
/// Notes held at once; the oldest is dropped first.
pub const MAX_HELD_NOTES: usize = 16;

/// A note for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub text: String,
    /// The approval this note reads back: what the user says after it is sent may answer it.
    pub approval: Option<String>,
}

impl Note {
    /// A note that answers nothing.
    pub fn plain(text: impl Into<String>) -> Note {
        Note { text: text.into(), approval: None }
    }
}

/// Who holds the floor, and the notes waiting for it.
#[derive(Default)]
pub(super) struct Floor {
    /// The user or the model holds the turn until then (each sign of the turn moves it on).
    busy_until: Option<Instant>,
    held: VecDeque<Note>,
    /// Notes dropped because too many waited.
    pub dropped: u64,
}

impl Floor {
    /// The user spoke or the model answered: the turn goes on.
    pub fn activity(&mut self) {
        self.busy_until = Some(Instant::now() + TURN_STALE);
    }

    fn busy(&self) -> bool {
        self.busy_until.is_some_and(|until| until > Instant::now())
    }

    /// A note to send now (`Some`), or held until the floor is free (`None`).
    pub fn offer(&mut self, note: Note) -> Option<Note> {
        if !self.busy() && self.held.is_empty() {
            return Some(note);
        }
        if self.held.len() == MAX_HELD_NOTES {
            self.held.pop_front();
            self.dropped += 1;
        }
        self.held.push_back(note);
        None
    }

    /// The turn is over: every held note, oldest first.
    pub fn turn_over(&mut self) -> Vec<Note> {
        self.busy_until = None;
        self.held.drain(..).collect()
    }

    /// When held notes go even without a `turnComplete`.
    pub fn due(&self) -> Option<Instant> {
        self.busy_until.filter(|_| !self.held.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn notes_wait_for_the_turn_to_end_or_go_stale() {
        let mut floor = Floor::default();
        assert_eq!(floor.offer(Note::plain("idle")), Some(Note::plain("idle")), "a free floor takes it at once");
        floor.activity();
        assert_eq!(floor.offer(Note::plain("one")), None);
        assert_eq!(floor.offer(Note::plain("two")), None);
        assert_eq!(floor.turn_over(), [Note::plain("one"), Note::plain("two")]);
        assert_eq!(floor.offer(Note::plain("three")), Some(Note::plain("three")));

        floor.activity();
        assert_eq!(floor.offer(Note::plain("late")), None);
        let due = floor.due().unwrap();
        tokio::time::sleep(TURN_STALE / 2).await;
        floor.activity();
        assert!(floor.due().unwrap() > due, "the user still speaking holds it longer");
        tokio::time::sleep(TURN_STALE).await;
        assert_eq!(floor.offer(Note::plain("after")), None, "held notes go first, in order");
        assert_eq!(floor.turn_over(), [Note::plain("late"), Note::plain("after")]);
        floor.activity();
        for n in 0..MAX_HELD_NOTES + 2 {
            floor.offer(Note::plain(n.to_string()));
        }
        assert_eq!((floor.held.len(), floor.dropped), (MAX_HELD_NOTES, 2));
        assert_eq!(floor.turn_over()[0], Note::plain("2"));
    }
}
