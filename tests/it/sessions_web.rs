//! The web client's agent view in Chromium at 390×844, against `voxa run` with the real Claude
//! Code CLI (tests/agents) and only the model faked ([`crate::support::fake_model`]): a prompt starts a
//! session, a Write approval tapped in the page happens, the answer's markdown renders and hostile
//! HTML in it stays text, a follow-up streams and is interrupted, and a reloaded page shows the
//! history once; a page that was offline gets what the session did meanwhile, once; a question
//! is answered by its option's button. Also the pictures docs/web-agent.png (light: the approval
//! waiting), docs/web-agent-list.png (the sessions) and docs/web-agent-dark.png (dark: the
//! session reopened after the reload).

use std::path::Path;

use serde_json::{json, Value};

use crate::support::agents::agents_bin;
use crate::support::browser::{Browser, Scheme};
use crate::support::fake_model::{FakeModel, Reply};
use crate::support::harness::TestRelay;
use crate::support::laptop::Laptop;

/// The answer the model gives once the file is written: markdown, and HTML meant to run.
const ANSWER: &str = "## Notes written\n\nI wrote `notes.md` with:\n\n- a **greeting**\n- a list\n\n```sh\ncat notes.md\n```\n\nHostile: <img src=x onerror=\"window.__pwned=1\"> and <script>window.__pwned=2</script> end.";

/// Text of the open session's conversation.
const CONVERSATION: &str = "#agent-conversation";

/// The number of times `needle` occurs in `haystack`.
fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_view_streams_asks_renders_safely_and_shows_the_history_once_after_a_reload() {
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start().await else { return };
    let model = FakeModel::start().await;
    let laptop = Laptop::start(&bin, &model);
    let notes = laptop.workspace.join("notes.md");
    model.script([
        Reply::tool("Write", json!({"file_path": notes.to_str().unwrap(), "content": "hello from the phone\n"})),
        Reply::text(ANSWER),
    ]);

    browser.pair(&laptop.link).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
    browser.type_into("Prompt", "Write a greeting to notes.md").await;
    browser.press("Ask").await;

    // The session opens on its conversation; the Write waits for the phone, with its diff.
    let asked = browser.wait_text(CONVERSATION, "the Write approval", |t| t.contains("Allow")).await;
    assert!(asked.contains("Write a greeting to notes.md"), "the prompt is shown: {asked}");
    assert!(asked.contains("write notes.md"), "{asked}");
    assert!(!notes.exists(), "written before anyone allowed it");
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        picture(&browser, "web-agent.png").await;
    }
    browser.press("Allow").await;
    let answered = browser.wait_text(CONVERSATION, "the turn's end", |t| t.contains("Done ·")).await;
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello from the phone\n");
    assert!(answered.contains("Allowed — on a phone"), "{answered}");
    assert!(answered.contains("+hello from the phone"), "the diff is on the tool card: {answered}");
    // The answer once (its `turn_end` repeats it), with the turn's cost.
    assert_eq!(count(&answered, "Notes written"), 1, "{answered}");
    assert!(answered.contains('$'), "the cost: {answered}");

    // Markdown became elements; the HTML in it stayed characters and ran nothing.
    let rendered = browser
        .script(
            "const c = document.querySelector('#agent-conversation');
             return {
               heading: [...c.querySelectorAll('h4')].map((h) => h.textContent),
               items: [...c.querySelectorAll('.md li')].map((li) => li.textContent),
               strong: [...c.querySelectorAll('.md strong')].map((s) => s.textContent),
               code: [...c.querySelectorAll('.md code')].map((s) => s.textContent),
               block: [...c.querySelectorAll('.md pre.md-code')].map((s) => s.textContent),
               imgs: c.querySelectorAll('img').length,
               scripts: c.querySelectorAll('script').length,
               pwned: window.__pwned === undefined ? null : window.__pwned,
               text: c.textContent,
             };",
            vec![],
        )
        .await;
    assert_eq!(rendered["heading"], json!(["Notes written"]), "{rendered}");
    assert_eq!(rendered["items"], json!(["a greeting", "a list"]), "{rendered}");
    assert_eq!(rendered["strong"], json!(["greeting"]), "{rendered}");
    assert!(rendered["code"].as_array().unwrap().contains(&json!("notes.md")), "{rendered}");
    assert_eq!(rendered["block"], json!(["cat notes.md"]), "{rendered}");
    assert_eq!((rendered["imgs"].clone(), rendered["scripts"].clone()), (json!(0), json!(0)), "{rendered}");
    assert_eq!(rendered["pwned"], Value::Null, "agent text ran in the page");
    let text = rendered["text"].as_str().unwrap();
    assert!(text.contains("<img src=x onerror=\"window.__pwned=1\">"), "{text}");
    assert!(text.contains("<script>window.__pwned=2</script>"), "{text}");

    // A follow-up streams: its text shows while the turn still runs, and Interrupt ends the turn.
    model.script([Reply::Stall("Still thinking about the second step".into())]);
    browser.type_into("Follow-up", "Now the second step").await;
    browser.press("Send").await;
    browser.wait_text(CONVERSATION, "the streamed text", |t| t.contains("Still thinking about the second step")).await;
    let state = browser.wait_text("#agent-state", "working", |t| t == "working").await;
    assert_eq!(state, "working");
    browser.press("Interrupt").await;
    let ended = browser.wait_text(CONVERSATION, "the interrupted turn", |t| count(t, "Interrupted") == 1).await;
    assert_eq!(count(&ended, "Failed"), 0, "an interrupt is no failure: {ended}");
    browser.wait_text("#agent-state", "idle", |t| t == "idle").await;

    // A reload holds nothing: the page gets every event again, and shows each once.
    browser.open(&format!("{}/", laptop.link.split('#').next().unwrap().trim_end_matches('/'))).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
    browser.wait_text("#agent-sessions", "the session listed", |t| t.contains("idle")).await;
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        picture(&browser, "web-agent-list.png").await;
    }
    browser.press("Write a greeting to notes.md").await;
    let again = browser.wait_text(CONVERSATION, "the history", |t| t.contains("Still thinking")).await;
    for once in
        ["Write a greeting to notes.md", "Notes written", "Now the second step", "Still thinking", "Interrupted"]
    {
        assert_eq!(
            count(&again, once),
            count(&ended, once),
            "{once:?} after the reload:\n{again}\n---before:\n{ended}"
        );
        assert_eq!(count(&again, once), 1, "{once:?}: {again}");
    }
    // Stop ends the agent's process; the session stays, ended.
    browser.press("Stop").await;
    browser.wait_text("#agent-state", "ended", |t| t == "ended").await;
    browser.press("All sessions").await;
    browser.wait_text("#agent-sessions", "the session listed as ended", |t| t.contains("ended")).await;
    browser.close().await;

    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        let Some(dark) = Browser::start_with(Scheme::Dark).await else { return };
        dark.pair(&laptop.another_link()).await;
        dark.wait_connection("online").await;
        dark.press("Agent").await;
        dark.press("Write a greeting to notes.md").await;
        dark.wait_text(CONVERSATION, "the history", |t| t.contains("Still thinking")).await;
        picture(&dark, "web-agent-dark.png").await;
        dark.close().await;
    }
    laptop.run.stop();
}

/// Writes a picture of the page, scrolled to the top of the conversation, to docs/.
async fn picture(browser: &Browser, name: &str) {
    browser.script("window.scrollTo(0, 0);", vec![]).await;
    let png = browser.screenshot().await;
    std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name), png).unwrap();
}

/// What the connection line says.
async fn connection(browser: &Browser) -> String {
    let said = browser.script("return document.getElementById('connection-text').textContent;", vec![]).await;
    said.as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_was_offline_gets_what_the_session_did_meanwhile_once() {
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start().await else { return };
    let model = FakeModel::start().await;
    let relay = TestRelay::start().await;
    let addr = relay.addr;
    let laptop = Laptop::start_with(&bin, &model, &["--relay", &format!("http://{addr}")]);
    model.script([Reply::text("The first answer.")]);
    browser.pair(&laptop.link).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
    browser.type_into("Prompt", "First question").await;
    browser.press("Ask").await;
    browser.wait_text(CONVERSATION, "the first turn", |t| t.contains("Done ·")).await;

    // The phone loses the relay; on the laptop, the session takes another turn meanwhile.
    relay.kill().await;
    browser.wait_connection("offline").await;
    model.script([Reply::text("The second answer, written while the phone was away.")]);
    let home = laptop.home.clone();
    let sent = tokio::task::spawn_blocking(move || {
        let listed = crate::support::voxa(&home, &["agent", "list", "--json"]);
        let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
        let session = listed["sessions"][0]["session"].as_str().unwrap().to_owned();
        crate::support::voxa(&home, &["agent", "send", &session, "Second question"])
    })
    .await
    .unwrap();
    assert_eq!(sent.status.code(), Some(0), "{}", String::from_utf8_lossy(&sent.stderr));

    // The relay comes back; the page reconnects and follows from the last seq it held.
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let relay = TestRelay::start_with(listener, voxa::relay::RelayConfig::default()).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    while !connection(&browser).await.contains("online") {
        assert!(tokio::time::Instant::now() < deadline, "the page never came back: {}", connection(&browser).await);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let shown = browser.wait_text(CONVERSATION, "the missed turn", |t| t.contains("while the phone was away")).await;
    for once in ["First question", "The first answer.", "Second question", "while the phone was away"] {
        assert_eq!(count(&shown, once), 1, "{once:?}: {shown}");
    }
    assert_eq!(count(&shown, "Done ·"), 2, "{shown}");
    browser.close().await;
    laptop.run.stop();
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_by_its_options_button_in_the_conversation() {
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start().await else { return };
    let model = FakeModel::start().await;
    let laptop = Laptop::start(&bin, &model);
    let question = json!({"questions": [{
        "question": "Which colour should the button be?", "header": "Colour", "multiSelect": false,
        "options": [{"label": "Red", "description": "Warm"}, {"label": "Blue", "description": "Calm"}]
    }]});
    model.script([Reply::tool("AskUserQuestion", question), Reply::text("Blue it is.")]);
    browser.pair(&laptop.link).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
    browser.type_into("Prompt", "Style the button").await;
    browser.press("Ask").await;
    browser.wait_text(CONVERSATION, "the question", |t| t.contains("Which colour should the button be?")).await;
    // The card ends up in the conversation only (the list above the tabs leaves it there once the
    // conversation shows it; the question's text may be drawn a moment before either).
    let only_in_conversation = format!(
        "return document.querySelectorAll('.approval-card:not([hidden])').length === 1 \
         && document.querySelectorAll('{CONVERSATION} .approval-card:not([hidden])').length === 1;"
    );
    browser.wait_script("the question's card in the conversation only", &only_in_conversation).await;
    browser.press("Blue").await;
    let shown = browser.wait_text(CONVERSATION, "the answer", |t| t.contains("Blue it is.")).await;
    // The decision is told twice (the session's event with the answer, the laptop's notice
    // without); whichever the page hears last, the conversation names the option chosen.
    assert!(shown.contains("Answered: Blue — on a phone"), "{shown}");
    let asked = model.turn_requests().pop().unwrap();
    let results = crate::support::fake_model::tool_results(&asked);
    assert!(results.iter().any(|r| r.contains("Blue")), "the agent read the answer: {results:?}");
    browser.close().await;
    laptop.run.stop();
}
