//! Supervising from the phone in Chromium at 390×844, against `voxa run` with the real Claude Code
//! CLI and only the model faked: a new session started in a folder chosen in the picker with an
//! agent chosen from those installed; the address names the session (`#/agent/<id>`) and a reload
//! opens it again; "Allow for session" says what it lets through and makes a grant that the
//! approvals view (`#/approvals`, opened from the sessions list) lists, `voxa approvals grants`
//! prints, and Revoke ends — the next Write asks again; the badge opens the approvals view, whose
//! card names the session by its title; an Interrupt reads "Interrupted", not a failure. Also the
//! pictures docs/web-grants.png (light) and docs/web-grants-dark.png (dark).

use std::path::Path;

use serde_json::json;

use crate::support::agents::agents_bin;
use crate::support::browser::{Browser, Scheme};
use crate::support::fake_model::{FakeModel, Reply};
use crate::support::laptop::Laptop;

const CONVERSATION: &str = "#agent-conversation";

async fn hash(browser: &Browser) -> String {
    browser.script("return location.hash;", vec![]).await.as_str().unwrap_or_default().to_owned()
}

/// Waits for the address to name `place`: the page writes it when the store changes, which a
/// click's return does not wait for.
async fn wait_hash(browser: &Browser, place: &str) {
    let script = format!("return location.hash === {};", serde_json::to_string(place).unwrap());
    browser.wait_script(&format!("the address {place}"), &script).await;
}

async fn voxa_cli(home: &Path, args: &[&str]) -> std::process::Output {
    let home = home.to_path_buf();
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        crate::support::voxa(&home, &args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_keeps_the_place_and_a_grant_is_seen_and_revoked_from_the_phone() {
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start().await else { return };
    let model = FakeModel::start().await;
    let laptop = Laptop::start(&bin, &model);
    let app = laptop.workspace.join("app");
    std::fs::create_dir_all(app.join("src")).unwrap();
    let file = |name: &str| app.join(name).to_str().unwrap().to_owned();
    model
        .script([Reply::tool("Write", json!({"file_path": file("a.txt"), "content": "a\n"})), Reply::text("Wrote a.")]);

    browser.pair(&laptop.link).await;
    browser.wait_connection("online").await;
    browser.press("Agent").await;
    assert_eq!(hash(&browser).await, "#/agent", "the tab is in the address");
    // The agents installed are offered; the folder is chosen in the picker.
    browser
        .wait_script(
            "the agents offered",
            "return [...document.querySelectorAll('#agent-kind option')].some((o) => o.value === 'claude');",
        )
        .await;
    browser.press("Folder: workspace").await;
    browser.press("app (folder)").await;
    browser.wait_text("#folder-path", "the folder shown", |t| t == "app").await;
    browser.wait_text("#folder-list", "its folders", |t| t.contains("src")).await;
    browser.press("Use this folder").await;
    browser.wait_text("#agent-folder", "the folder chosen", |t| t == "Folder: app").await;
    browser.type_into("Prompt", "Write a.txt in app").await;
    browser.press("Ask").await;

    let card = browser.wait_text(CONVERSATION, "the Write approval", |t| t.contains("Allow for session")).await;
    assert!(
        card.contains("Allow for session lets through every Write in this session, of any file"),
        "the card says what the grant lets through: {card}"
    );
    let route = hash(&browser).await;
    let session =
        route.strip_prefix("#/agent/").unwrap_or_else(|| panic!("the address names the session: {route}")).to_owned();
    assert!(session.starts_with("s-"), "{route}");
    let listed = voxa_cli(&laptop.home, &["agent", "list", "--json"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains(&app.display().to_string()), "the session runs in the folder chosen: {listed}");

    // A reload (the same address) opens the same place: the session, by its title.
    let base = laptop.link.split('#').next().unwrap().trim_end_matches('/').to_owned();
    browser.open(&format!("{base}/{route}")).await;
    browser.wait_connection("online").await;
    browser.wait_text("#agent-title", "the session reopened", |t| t == "Write a.txt in app").await;
    browser.wait_text(CONVERSATION, "its approval again", |t| t.contains("Allow for session")).await;
    browser.press("Allow for session").await;
    let done = browser.wait_text(CONVERSATION, "the turn's end", |t| t.contains("Done ·")).await;
    assert!(done.contains("Allowed for this session — on a phone"), "{done}");
    assert_eq!(std::fs::read_to_string(file("a.txt")).unwrap(), "a\n");

    // The grant, as the laptop's CLI prints it and as the approvals view lists it.
    let grants = voxa_cli(&laptop.home, &["approvals", "grants"]).await;
    let printed = String::from_utf8_lossy(&grants.stdout).into_owned();
    assert!(grants.status.success() && printed.contains(&session) && printed.contains("every Write"), "{printed}");
    browser.press("All sessions").await;
    browser.press("Approvals and grants").await;
    wait_hash(&browser, "#/approvals").await;
    // The decided card stays a moment saying how it ended (RESOLVED_LINGER_MS), then goes.
    let view = browser
        .wait_text("#approvals", "the grants listed, nothing waiting", |t| {
            t.contains("Revoke") && t.contains("Nothing is waiting for you.")
        })
        .await;
    assert!(
        view.contains("Write a.txt in app: every Write in this session"),
        "the grant names its session by title: {view}"
    );
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        browser.script("window.scrollTo(0, 0);", vec![]).await;
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/web-grants.png"), browser.screenshot().await)
            .unwrap();
    }
    // Back goes to the place before.
    browser.script("history.back();", vec![]).await;
    browser
        .wait_script(
            "back on the sessions",
            "return location.hash === '#/agent' && document.getElementById('approvals').hidden;",
        )
        .await;
    browser.script("history.forward();", vec![]).await;
    browser.wait_script("the approvals view again", "return location.hash === '#/approvals';").await;
    browser.press("Revoke: Write every Write in this session, of any file").await;
    browser.wait_script("the grant gone", "return document.querySelectorAll('#grant-list li').length === 0;").await;
    let after = voxa_cli(&laptop.home, &["approvals", "grants"]).await;
    assert!(String::from_utf8_lossy(&after.stdout).contains("no grants"), "{after:?}");

    // Revoked, the next Write asks again: the badge opens the approvals view, and the card names
    // the session by its title.
    browser.press("Close").await;
    browser.press("Agent").await;
    browser.press("Write a.txt in app").await;
    model.script([
        Reply::tool("Write", json!({"file_path": file("b.txt"), "content": "b\n"})),
        Reply::text("Not written."),
    ]);
    browser.type_into("Follow-up", "Now b.txt").await;
    browser.press("Send").await;
    browser.press("All sessions").await;
    let badge = browser.wait_text("#approvals-badge", "the badge", |t| t == "1 approval waiting").await;
    assert_eq!(badge, "1 approval waiting");
    browser.press("1 approval waiting").await;
    wait_hash(&browser, "#/approvals").await;
    let card = browser.wait_text("#approval-list", "the card", |t| t.contains("write b.txt")).await;
    assert!(card.contains("session “Write a.txt in app”"), "the card names the session by its title: {card}");
    browser.press("Deny").await;
    browser.wait_script("no heading over nothing", "return document.querySelectorAll('#approval-list li').length === 0 && !document.getElementById('approvals-none').hidden;").await;
    assert!(!Path::new(&file("b.txt")).exists());

    // An interrupt is said as one.
    browser.press("Close").await;
    browser.press("Agent").await;
    browser.press("Write a.txt in app").await;
    browser.wait_text(CONVERSATION, "the denied turn's end", |t| t.matches("Done ·").count() == 2).await;
    model.script([Reply::Stall("Thinking for a long time".into())]);
    browser.type_into("Follow-up", "Think").await;
    browser.press("Send").await;
    browser.wait_text(CONVERSATION, "the streamed text", |t| t.contains("Thinking for a long time")).await;
    browser.press("Interrupt").await;
    let ended = browser.wait_text(CONVERSATION, "the interrupt", |t| t.contains("Interrupted")).await;
    assert!(
        !ended.contains("Failed") && !ended.contains("agent-error") && !ended.contains("ede_diagnostic"),
        "{ended}"
    );
    browser.close().await;

    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        let Some(dark) = Browser::start_with(Scheme::Dark).await else { return };
        dark.pair(&laptop.another_link()).await;
        dark.wait_connection("online").await;
        dark.press("Agent").await;
        dark.press("Folder: workspace").await;
        dark.wait_text("#folder-list", "the folders", |t| t.contains("app")).await;
        dark.script("window.scrollTo(0, 0);", vec![]).await;
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/web-grants-dark.png"), dark.screenshot().await)
            .unwrap();
        dark.close().await;
    }
    laptop.run.stop();
}
