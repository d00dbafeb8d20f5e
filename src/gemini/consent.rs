//! Consent is the user's own words (docs/GUIDE.md, "What you can say, and what voice will never
//! do"): an `approve` with `allow` from a call's model counts only when what the user said (input
//! transcription) or typed (`say`) since that approval was read to the model holds an affirmative
//! and nothing that refuses or hesitates. The two word lists are [`AFFIRMATIVES`] and
//! [`REFUSALS`], the one table of them in voxa.
//!
//! Words are matched whole, case and punctuation aside, after the apostrophes of contractions are
//! dropped (`don't`, `don’t` and `dont` are one word); a phrase matches as consecutive words.

use std::collections::{HashMap, VecDeque};

/// Words and phrases that say yes.
pub const AFFIRMATIVES: &[&str] =
    &["yes", "yeah", "yep", "yup", "allow", "approve", "go ahead", "do it", "sure", "okay", "ok"];

/// Words and phrases that refuse or hesitate; any of them anywhere withholds consent. The `n't`
/// contractions are written without their apostrophe, as words are compared.
pub const REFUSALS: &[&str] = &[
    "no", "nope", "nah", "not", "never", "dont", "stop", "wait", "hold", "cancel", "but", "maybe", "hang on", "cant",
    "cannot", "wont", "shouldnt", "wouldnt", "didnt", "doesnt", "isnt", "arent", "wasnt", "werent", "havent", "hasnt",
    "mustnt", "neednt", "couldnt",
];

/// Characters of words kept per announced approval; beyond it the user said too much to tell, and
/// the model is refused until the window starts again.
pub const MAX_HEARD: usize = 4 << 10;
/// Approvals whose windows are kept at once; the oldest goes first.
pub const MAX_WINDOWS: usize = 64;

/// What the user's words since an announcement come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// An affirmative and no refusal.
    Yes,
    /// A refusal or hesitation (whatever else was said).
    Refused,
    /// Neither.
    Nothing,
}

/// The words of `text`, lower case, apostrophes dropped, everything that is not a letter or a digit
/// a boundary.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || matches!(c, '\'' | '’' | '‘' | '`')))
        .map(|word| word.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect::<String>())
        .filter(|word| !word.is_empty())
        .collect()
}

/// True when `phrase` (one or more words) occurs in `said` as consecutive words.
fn contains(said: &[String], phrase: &str) -> bool {
    let phrase: Vec<&str> = phrase.split(' ').collect();
    said.windows(phrase.len()).any(|window| window.iter().zip(&phrase).all(|(word, want)| word == want))
}

/// What `text` says, by the two lists.
pub fn judge(text: &str) -> Heard {
    let said = words(text);
    if REFUSALS.iter().any(|phrase| contains(&said, phrase)) {
        Heard::Refused
    } else if AFFIRMATIVES.iter().any(|phrase| contains(&said, phrase)) {
        Heard::Yes
    } else {
        Heard::Nothing
    }
}

/// True when `label` (an option of a coding agent's question) was said as words of `text`.
fn names(text: &str, label: &str) -> bool {
    let label = words(label);
    !label.is_empty() && words(text).windows(label.len()).any(|window| window == label.as_slice())
}

/// Why an `approve` with `allow` was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoConsent {
    /// The approval was never read to this call's model.
    NotAnnounced,
    /// The user refused or hesitated since.
    Refused,
    /// The user said nothing that allows it since.
    NotSaid,
    /// The user said more than [`MAX_HEARD`] since.
    TooMuchSaid,
}

impl NoConsent {
    /// The sentence the model gets with `no-spoken-consent`.
    pub fn message(self, approval: &str) -> String {
        let why = match self {
            NoConsent::NotAnnounced => "voxa never read this approval to you in this call".to_owned(),
            NoConsent::Refused => {
                "since it was read to you the user said something that refuses or hesitates (such as no, wait, \
                 don't, stop or but)"
                    .to_owned()
            }
            NoConsent::NotSaid => "the user has not said yes to it since it was read to you".to_owned(),
            NoConsent::TooMuchSaid => "the user said too much since it was read to you to tell".to_owned(),
        };
        format!(
            "Not allowed: {why}. Approval {approval:?} stays open: ask the user plainly whether to allow it and wait \
             for their answer, or tell them they can tap Allow on their phone."
        )
    }
}

/// What the user said since each approval was announced in one call.
#[derive(Default)]
pub struct Ledger {
    windows: HashMap<String, Window>,
    /// Approvals in the order their windows opened.
    order: VecDeque<String>,
}

#[derive(Default)]
struct Window {
    heard: String,
    overflowed: bool,
}

impl Ledger {
    /// The approval was just read to the model: what the user says from now on is its window.
    pub fn announced(&mut self, approval: &str) {
        if self.windows.insert(approval.to_owned(), Window::default()).is_none() {
            self.order.push_back(approval.to_owned());
        }
        while self.order.len() > MAX_WINDOWS {
            if let Some(oldest) = self.order.pop_front() {
                self.windows.remove(&oldest);
            }
        }
    }

    /// The approval is settled: its window goes.
    pub fn settled(&mut self, approval: &str) {
        if self.windows.remove(approval).is_some() {
            self.order.retain(|open| open != approval);
        }
    }

    /// A piece of what the user said or typed, as it came (pieces of one utterance are joined as
    /// they are; call [`Ledger::pause`] between utterances).
    pub fn heard(&mut self, piece: &str) {
        for window in self.windows.values_mut() {
            if window.heard.len() + piece.len() > MAX_HEARD {
                window.overflowed = true;
            } else {
                window.heard.push_str(piece);
            }
        }
    }

    /// An utterance ended: its last word ends with it.
    pub fn pause(&mut self) {
        self.heard(" ");
    }

    /// Whether the model may allow `approval` (choosing `labels` for its questions, if any). A
    /// refusal starts the window again, so the user's next answer is judged on its own.
    pub fn check(&mut self, approval: &str, labels: &[String]) -> Result<(), NoConsent> {
        let Some(window) = self.windows.get_mut(approval) else { return Err(NoConsent::NotAnnounced) };
        let verdict = if window.overflowed {
            Err(NoConsent::TooMuchSaid)
        } else {
            match judge(&window.heard) {
                Heard::Refused => Err(NoConsent::Refused),
                Heard::Yes => Ok(()),
                // Answering a question: the option's own words are the user's choice.
                Heard::Nothing if !labels.is_empty() && labels.iter().all(|label| names(&window.heard, label)) => {
                    Ok(())
                }
                Heard::Nothing => Err(NoConsent::NotSaid),
            }
        };
        if verdict.is_err() {
            *window = Window::default();
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_affirmative_alone_is_a_yes_in_any_case_and_punctuation() {
        for word in AFFIRMATIVES {
            for said in
                [word.to_string(), word.to_uppercase(), format!("{word}."), format!("Um, {word}!"), format!("«{word}»")]
            {
                assert_eq!(judge(&said), Heard::Yes, "{said:?}");
            }
        }
    }

    #[test]
    fn each_refusal_withholds_consent_even_beside_a_yes() {
        for word in REFUSALS {
            assert_eq!(judge(word), Heard::Refused, "{word:?}");
            for said in [format!("yes {word}"), format!("{word}, yes"), format!("Yes — {}!", word.to_uppercase())] {
                assert_eq!(judge(&said), Heard::Refused, "{said:?}");
            }
        }
    }

    #[test]
    fn the_combinations_people_say() {
        for (said, heard) in [
            ("yes — wait", Heard::Refused),
            ("no, go ahead", Heard::Refused),
            ("don't stop", Heard::Refused),
            ("okay, wait, don't run that", Heard::Refused),
            ("Okay… wait. Don’t run that.", Heard::Refused),
            ("yeah do it", Heard::Yes),
            ("sure", Heard::Yes),
            ("Yes please, go ahead.", Heard::Yes),
            ("yes but only the tests", Heard::Refused),
            ("do not", Heard::Refused),
            ("dont", Heard::Refused),
            ("I can't say", Heard::Refused),
            ("hang on a second", Heard::Refused),
            ("hold it", Heard::Refused),
            ("maybe", Heard::Refused),
            ("never mind, yes", Heard::Refused),
            // Word boundaries: these hold no listed word.
            ("yesterday I noticed the button", Heard::Nothing),
            ("know nothing of a stopwatch", Heard::Nothing),
            ("a notebook, okra, butter", Heard::Nothing),
            ("doit", Heard::Nothing),
            ("go", Heard::Nothing),
            ("ahead", Heard::Nothing),
            ("", Heard::Nothing),
        ] {
            assert_eq!(judge(said), heard, "{said:?}");
        }
    }

    #[test]
    fn only_words_after_the_announcement_count_and_a_refusal_starts_again() {
        let mut ledger = Ledger::default();
        ledger.heard("yes");
        assert_eq!(ledger.check("a-1", &[]), Err(NoConsent::NotAnnounced));
        ledger.announced("a-1");
        assert_eq!(ledger.check("a-1", &[]), Err(NoConsent::NotSaid), "the yes before it does not count");
        // Pieces of one utterance join as they came: "ye" + "s" is one word.
        ledger.heard("ye");
        ledger.heard("s");
        ledger.pause();
        assert_eq!(ledger.check("a-1", &[]), Ok(()));

        ledger.announced("a-2");
        ledger.heard("okay, wait");
        ledger.pause();
        ledger.heard("yes");
        assert_eq!(ledger.check("a-2", &[]), Err(NoConsent::Refused), "the wait stands");
        assert_eq!(ledger.check("a-2", &[]), Err(NoConsent::NotSaid), "judged afresh after a refusal");
        ledger.heard("yes, do it");
        assert_eq!(ledger.check("a-2", &[]), Ok(()));
        ledger.settled("a-2");
        assert_eq!(ledger.check("a-2", &[]), Err(NoConsent::NotAnnounced));
    }

    #[test]
    fn a_question_is_answered_by_saying_its_option_and_too_much_talk_is_no_answer() {
        let mut ledger = Ledger::default();
        ledger.announced("a-q");
        ledger.heard("use SQLite please");
        assert_eq!(ledger.check("a-q", &["SQLite".into()]), Ok(()));
        ledger.heard("use SQLite please");
        assert_eq!(ledger.check("a-q", &["Postgres".into()]), Err(NoConsent::NotSaid));

        ledger.announced("a-3");
        for _ in 0..MAX_HEARD {
            ledger.heard("la ");
        }
        ledger.heard("yes");
        assert_eq!(ledger.check("a-3", &[]), Err(NoConsent::TooMuchSaid));
        for n in 0..MAX_WINDOWS + 5 {
            ledger.announced(&format!("a-many-{n}"));
        }
        assert_eq!(ledger.windows.len(), MAX_WINDOWS);
        assert_eq!(ledger.check("a-many-0", &[]), Err(NoConsent::NotAnnounced), "the oldest went");
    }
}
