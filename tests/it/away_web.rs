//! "While you were away" in Chromium at 390×844, against `voxa run` with the real Claude Code CLI
//! (tests/agents) and only the model faked: a session takes two turns that edit two files, the
//! page closes, and its last-looked mark is set to longer ago than `AWAY_MS` (web/js/agent/away.js)
//! while no page of the laptop is open; the page opened again shows the session's card with the
//! turns, the files and lines changed and the cost; "Review changes" shows each file's diff, and
//! the comment typed there reaches the agent as the session's next prompt. Also the pictures
//! docs/web-away-card.png and docs/web-review-changes.png (light) and their `-dark` twins.

use std::path::Path;

use serde_json::json;

use crate::support::agents::agents_bin;
use crate::support::browser::{Browser, Scheme};
use crate::support::fake_model::{user_text, FakeModel, Reply};
use crate::support::laptop::Laptop;

/// Longer ago than the page's `AWAY_MS` (10 min): when the test says the page last looked.
const LOOKED_MIN_AGO: u64 = 11;
const CONVERSATION: &str = "#agent-conversation";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_back_after_ten_minutes_sees_what_each_session_did_and_reviews_and_comments_on_its_changes() {
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start().await else { return };
    let model = FakeModel::start().await;
    let laptop = Laptop::start(&bin, &model);
    let notes = laptop.workspace.join("notes.md");
    let lib = laptop.workspace.join("lib.txt");
    std::fs::write(&lib, "one\ntwo\nthree\n").unwrap();
    model.script([
        Reply::tool("Write", json!({"file_path": notes.to_str().unwrap(), "content": "hello\nfrom the phone\n"})),
        Reply::text("Wrote the notes."),
    ]);

    browser.pair(&laptop.link).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
    browser.type_into("Prompt", "Write notes.md").await;
    browser.press("Ask").await;
    browser.wait_text(CONVERSATION, "the Write approval", |t| t.contains("Allow")).await;
    browser.press("Allow").await;
    browser.wait_text(CONVERSATION, "the first turn", |t| t.contains("Done ·")).await;
    model.script([
        Reply::tool("Edit", json!({"file_path": lib.to_str().unwrap(), "old_string": "two", "new_string": "2"})),
        Reply::text("Edited lib.txt."),
    ]);
    browser.type_into("Follow-up", "Now edit lib.txt").await;
    browser.press("Send").await;
    // The first turn's line says "Allowed"; the Edit's card is the one with a Deny.
    browser.wait_text(CONVERSATION, "the Edit approval", |t| t.contains("edit lib.txt") && t.contains("Deny")).await;
    browser.press("Allow").await;
    browser.wait_text(CONVERSATION, "the second turn", |t| t.matches("Done ·").count() == 2).await;
    assert_eq!(std::fs::read_to_string(&lib).unwrap(), "one\n2\nthree\n");
    // While the page watched, nothing was "while you were away".
    browser.press("All sessions").await;
    assert!(!away_shown(&browser).await, "a card while the page was looking");

    come_back(&browser, &laptop.link).await;
    let card = browser.wait_text("#away", "the away card", |t| t.contains("turns finished")).await;
    assert!(card.contains("Write notes.md"), "the card names its session: {card}");
    assert!(card.contains("2 turns finished"), "{card}");
    assert!(card.contains("2 files changed (+3 −1)"), "{card}");
    assert!(card.contains('$'), "the cost: {card}");
    assert!(!card.contains("approval"), "no approval waits: {card}");
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        picture(&browser, "web-away-card.png").await;
    }

    browser.press("Review changes").await;
    let review = browser.wait_text("#review-files", "the changes", |t| t.contains("lib.txt")).await;
    assert!(review.contains("notes.md +2 −0"), "{review}");
    assert!(review.contains("lib.txt +1 −1"), "{review}");
    assert!(review.contains("+hello\n+from the phone"), "the new file's diff: {review}");
    assert!(review.contains("-two\n+2"), "the edit's diff: {review}");
    assert!(review.find("notes.md") < review.find("lib.txt"), "files in the order they changed: {review}");
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        picture(&browser, "web-review-changes.png").await;
    }

    // The comment is the session's next prompt: the agent gets it, and the page opens the session.
    let comment = "Looks good; also add a line four to lib.txt";
    model.script([Reply::text("Adding line four.")]);
    browser.type_into("Comment", comment).await;
    browser.press("Send to the session").await;
    let request = model.wait_request("the comment", |r| user_text(r).contains(comment)).await;
    assert!(user_text(&request).contains(comment));
    let shown = browser.wait_text(CONVERSATION, "the comment's turn", |t| t.contains("Adding line four.")).await;
    assert_eq!(shown.matches(comment).count(), 1, "{shown}");
    browser.press("All sessions").await;
    assert!(!away_shown(&browser).await, "the card stays after its review was sent");
    browser.close().await;

    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        let Some(dark) = Browser::start_with(Scheme::Dark).await else { return };
        let link = laptop.another_link();
        dark.pair(&link).await;
        dark.wait_connection("online").await;
        dark.press("Agent").await;
        dark.wait_text("#agent-sessions", "the session listed", |t| t.contains("Write notes.md")).await;
        come_back(&dark, &link).await;
        dark.wait_text("#away", "the away card", |t| t.contains("turns finished")).await;
        picture(&dark, "web-away-card-dark.png").await;
        dark.press("Review changes").await;
        dark.wait_text("#review-files", "the changes", |t| t.contains("lib.txt")).await;
        picture(&dark, "web-review-changes-dark.png").await;
        dark.close().await;
    }
    laptop.run.stop();
}

/// Closes the page (the browser goes to another address of the relay, where no page of voxa
/// runs), sets every last-looked mark it left to `LOOKED_MIN_AGO` minutes ago, and opens the page
/// again on the agent view.
async fn come_back(browser: &Browser, link: &str) {
    let origin = link.split('#').next().unwrap().trim_end_matches('/').to_owned();
    browser.open(&format!("{origin}/app.css")).await;
    let set = browser
        .script(
            "const ago = Date.now() - arguments[0] * 60000;
             const keys = Object.keys(localStorage).filter((k) => k.startsWith('voxa.looked.'));
             for (const key of keys) {
               const marks = JSON.parse(localStorage.getItem(key));
               for (const id of Object.keys(marks)) marks[id] = ago;
               localStorage.setItem(key, JSON.stringify(marks));
             }
             return keys.length;",
            vec![json!(LOOKED_MIN_AGO)],
        )
        .await;
    assert_eq!(set, json!(1), "the page left its marks");
    browser.open(&format!("{origin}/")).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
}

/// Whether the "While you were away" cards show.
async fn away_shown(browser: &Browser) -> bool {
    browser.script("return !document.getElementById('away').hidden;", vec![]).await == json!(true)
}

/// Writes a picture of the page, scrolled to the top, to docs/.
async fn picture(browser: &Browser, name: &str) {
    browser.script("window.scrollTo(0, 0);", vec![]).await;
    let png = browser.screenshot().await;
    std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name), png).unwrap();
}
