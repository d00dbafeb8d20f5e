//! The Shell tab coming back to a running terminal (docs/PROTOCOL.md, "Terminal sessions"), in
//! Chromium at phone size, against the real agent and relay: the page draws the screen the agent
//! sends and types nothing of its own into the program.

use std::path::Path;
use std::time::Duration;

use fantoccini::Locator;
use serde_json::json;

use crate::support::browser::Browser;
use crate::support::harness::*;
use crate::support::terminal::Watcher;

/// The text xterm.js shows in its rows.
const ROWS: &str = "#shell-screen .xterm-rows";

/// The rows the page's emulator shows, one line each, as `term_screen` reads a screen.
const SHOWN: &str = "return [...document.querySelectorAll('#shell-screen .xterm-rows > div')]
      .map((row) => row.textContent.replace(/\\u00a0/g, ' ').trimEnd()).join('\\n').trimEnd();";

/// A program that asks its terminal every question xterm.js answers, in raw mode, under frames
/// of a full-screen program, then writes down every byte it is given as input.
const PROBE: &str = r#"import os, sys, termios, tty
tty.setraw(0)
out = lambda text: os.write(1, text.encode())
for n in (1, 2, 3):
    out('\x1b[H\x1b[2Jold-frame-%d\r\n' % n)
out('\x1b[6n\x1b[?6n\x1b[5n\x1b[c\x1b[>c\x1b[=c\x1b]10;?\x07\x1b]11;?\x1b\\\x1b]4;1;?\x07')
out('\x1b[?1$p\x1b[18t\x1b[14t\x1bP$qm\x1b\\\x1b[>q')
out('\x1b[H\x1b[2J\x1b[31mnew-frame\x1b[0m\r\nreader-ready\r\n')
with open(sys.argv[1], 'wb', buffering=0) as received:
    while True:
        received.write(os.read(0, 4096))
"#;

/// A page paired with an agent, its Shell open on a terminal; the agent's own socket beside it.
async fn shell_page() -> (TestRelay, TestAgent, Browser, String) {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let browser = Browser::start().await.expect("Chromium");
    let link = format!("http://{}/#code={}&token={}", relay.addr, agent.code(), agent.token());
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    browser.press("Shell").await;
    let term = browser.wait_text("#shell-status", "the terminal to open", |text| text.starts_with("t-")).await;
    (relay, agent, browser, term)
}

async fn keys(browser: &Browser, text: &str) {
    let input = browser.client.find(Locator::Css("#shell-screen textarea")).await.unwrap();
    input.send_keys(text).await.unwrap();
}

/// Reloads the page and opens the Shell again; returns once the terminal is attached.
async fn reload(browser: &Browser, term: &str) {
    browser.client.refresh().await.unwrap();
    browser.wait_connection("online").await;
    browser.press("Shell").await;
    browser.wait_text("#shell-status", "the terminal to be attached again", |text| text == term).await;
}

/// Waits until `path` holds something `check` accepts; returns it.
async fn file_until(path: &Path, what: &str, check: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + 3 * STEP;
    loop {
        let body = std::fs::read(path).unwrap_or_default();
        if check(&body) {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "waited for {what}; got {:?}", String::from_utf8_lossy(&body));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 38: a reload made the page's emulator answer the questions in the replayed output, and
/// those answers reached the program as typed input; the screen came back with old frames under
/// new lines. Now the page draws the agent's screen and the program hears only the keys typed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_reloaded_shell_shows_the_agents_screen_and_types_nothing_into_a_raw_reader() {
    let (_relay, agent, browser, term) = shell_page().await;
    let workspace = agent.workspace.path();
    std::fs::write(workspace.join("probe.py"), PROBE).unwrap();
    let received = workspace.join("received");
    keys(&browser, &format!("python3 {} {}\u{E007}", workspace.join("probe.py").display(), received.display())).await;
    browser.wait_text(ROWS, "the reader", |text| text.contains("reader-ready")).await;
    // Watching live, the page answers as a terminal does: the program asked now.
    let before = file_until(&received, "the answers to the live questions", |body| {
        let text = String::from_utf8_lossy(body);
        text.contains("R\x1b") && text.contains("\x1b[>0;276;0c") && text.contains("rgb:")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before_reload = std::fs::read(&received).unwrap();
    assert_eq!(before, before_reload, "every live answer came at once");

    reload(&browser, &term).await;
    let mut laptop = Watcher::new(agent.local_client().await);
    let agents = laptop.call("term_screen", json!({"term": term})).await["text"].as_str().unwrap().to_owned();
    assert!(agents.contains("new-frame") && !agents.contains("old-frame"), "{agents}");
    browser.wait_text(ROWS, "the screen drawn again", |text| text.contains("reader-ready")).await;
    let shown = browser.script(SHOWN, vec![]).await;
    assert_eq!(shown.as_str().unwrap(), agents, "the page shows the agent's screen, nothing under it");
    let red = browser
        .script(
            "const span = [...document.querySelectorAll('#shell-screen .xterm-rows span')]
               .find((s) => s.textContent === 'new-frame');
             return span ? getComputedStyle(span).color : null;",
            vec![],
        )
        .await;
    let rgb: Vec<u64> = red
        .as_str()
        .unwrap_or_else(|| panic!("no span holds new-frame: {red}"))
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|part| part.trim().parse().unwrap())
        .collect();
    assert!(rgb[0] > 150 && rgb[1] < 100 && rgb[2] < 100, "new-frame is drawn in red again: {red}");
    // A key typed now reaches the reader right after what it had: nothing came between.
    keys(&browser, "z").await;
    let after = file_until(&received, "the key typed after the reload", |body| body.ends_with(b"z")).await;
    assert_eq!(
        String::from_utf8_lossy(&after[before_reload.len()..]),
        "z",
        "the reload typed nothing into the program"
    );
    browser.close().await;
    agent.agent.stop().await;
}

/// Issue 38: an open vim in insert mode dropped to normal mode with a pending `y` after a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_vim_in_insert_mode_keeps_typing_after_a_reload() {
    let (_relay, agent, browser, term) = shell_page().await;
    let file = agent.workspace.path().join("notes.txt");
    keys(&browser, &format!("vim -u NONE -N {}\u{E007}", file.display())).await;
    browser.wait_text(ROWS, "vim", |text| text.contains("notes.txt")).await;
    keys(&browser, "ifirst-half").await;
    browser.wait_text(ROWS, "insert mode", |text| text.contains("-- INSERT --") && text.contains("first-half")).await;
    reload(&browser, &term).await;
    browser
        .wait_text(ROWS, "vim drawn again", |text| text.contains("-- INSERT --") && text.contains("first-half"))
        .await;
    keys(&browser, "-second\u{E00C}").await;
    browser.wait_text(ROWS, "normal mode", |text| !text.contains("-- INSERT --")).await;
    keys(&browser, ":wq\u{E007}").await;
    let saved = file_until(&file, "vim to save", |body| !body.is_empty()).await;
    assert_eq!(String::from_utf8_lossy(&saved), "first-half-second\n", "vim took only the keys typed");
    browser.close().await;
    agent.agent.stop().await;
}

/// Where the Shell's parts are against the visual viewport, and the rows its emulator has.
const LAYOUT: &str = "const bar = document.getElementById('keybar').getBoundingClientRect();
    const screen = document.getElementById('shell-screen').getBoundingClientRect();
    const view = visualViewport;
    return {rows: document.querySelectorAll('#shell-screen .xterm-rows > div').length,
      bar_top: bar.top, bar_bottom: bar.bottom, screen_top: screen.top,
      view_top: view.offsetTop, view_bottom: view.offsetTop + view.height,
      panel_top: document.getElementById('panel-shell').getBoundingClientRect().top, scroll_y: scrollY,
      max_scroll: document.documentElement.scrollHeight - innerHeight, inner: innerHeight,
      compact: document.documentElement.className, head: document.querySelector('.shell-head').getBoundingClientRect().top};";

/// Waits until the key bar is whole within the visual viewport, the terminal on screen with at
/// least `rows` rows, and the laptop's terminal has the rows the page shows; returns those rows.
async fn fitted(browser: &Browser, laptop: &mut Watcher, term: &str, rows: u64, what: &str) -> u64 {
    let deadline = tokio::time::Instant::now() + 3 * STEP;
    loop {
        let seen = browser.script(LAYOUT, vec![]).await;
        let number = |key: &str| seen[key].as_f64().unwrap();
        let shown = seen["rows"].as_u64().unwrap();
        let listed = laptop.call("term_list", json!({})).await["terminals"].as_array().unwrap().clone();
        let program = listed.iter().find(|t| t["term"] == term).map(|t| t["rows"].as_u64().unwrap());
        let whole = number("bar_bottom") <= number("view_bottom") + 1.0
            && number("screen_top") >= number("view_top") - 1.0
            && number("bar_top") > number("screen_top");
        if whole && shown >= rows && program == Some(shown) {
            return shown;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {seen}, the program has {program:?} rows");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 38: in landscape the terminal got 180 px and the key bar was off screen, and nothing kept
/// the terminal in view when the keyboard opened. The key bar has Shift+Tab, PgUp and PgDn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_shell_keeps_its_rows_and_key_bar_in_view_in_landscape_and_with_the_keyboard_open() {
    let (_relay, agent, browser, term) = shell_page().await;
    let mut laptop = Watcher::new(agent.local_client().await);
    // The three keys are 11 bytes; the shell comes back once they are read.
    keys(&browser, "stty raw -echo; head -c 11 | cat -v; stty sane; echo\u{E007}").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for key in ["Shift Tab", "Page Up", "Page Down"] {
        browser.press(key).await;
    }
    browser.wait_text(ROWS, "the keys of the bar", |text| text.contains("^[[Z^[[5~^[[6~")).await;
    let portrait = fitted(&browser, &mut laptop, &term, 30, "portrait").await;
    let metrics = |width: u32, height: u32, angle: u32| {
        let kind = if angle == 0 { "portraitPrimary" } else { "landscapePrimary" };
        json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": true,
               "screenOrientation": {"type": kind, "angle": angle}})
    };
    browser.cdp("Emulation.setDeviceMetricsOverride", metrics(844, 390, 90)).await;
    let landscape = fitted(&browser, &mut laptop, &term, 14, "landscape").await;
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        keys(&browser, "clear; printf '\\033[1mlandscape\\033[0m: %s rows\\n' $(tput lines)\u{E007}").await;
        browser
            .wait_text(ROWS, "the rows counted", |text| text.contains(&format!("landscape: {landscape} rows")))
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let png = browser.screenshot().await;
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/web-terminal-shell-landscape.png"), png)
            .unwrap();
    }
    // The keyboard open in portrait: what stays in view above it (Chromium is told the screen is
    // that high; a phone's browser shrinks its visual viewport).
    browser.cdp("Emulation.setDeviceMetricsOverride", metrics(390, 844 - 336, 0)).await;
    let keyboard = fitted(&browser, &mut laptop, &term, 20, "the keyboard open").await;
    browser.cdp("Emulation.setDeviceMetricsOverride", metrics(390, 844, 0)).await;
    // Back to the whole screen, the terminal gets its rows back (waited for: the page refits once
    // the resize settles, and a passing moment may hold fewer), give or take the row the page's
    // own scroll position moves it by.
    let again = fitted(&browser, &mut laptop, &term, portrait - 1, "portrait again").await;
    assert!(again.abs_diff(portrait) <= 1, "{again} rows, then {portrait}");
    println!("rows: portrait {portrait}, landscape {landscape}, keyboard open {keyboard}");
    browser.close().await;
    agent.agent.stop().await;
}

/// Issue 38: after a 256 KiB output the Terminal tab stopped following, hiding the next command's
/// output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_terminal_tab_follows_a_256_kib_output_and_the_next_command() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let browser = Browser::start().await.expect("Chromium");
    let link = format!("http://{}/#code={}&token={}", relay.addr, agent.code(), agent.token());
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    let ended = "const out = document.getElementById('commands-out');
        const end = out.lastElementChild && out.lastElementChild.querySelector('.end');
        return !!end && /exit/.test(end.textContent);";
    let in_view = "const out = document.getElementById('commands-out');
        const box = out.getBoundingClientRect();
        const end = out.lastElementChild.querySelector('.end').getBoundingClientRect();
        return end.bottom <= box.bottom + 1 && end.top >= box.top - 1
          && out.scrollHeight - out.scrollTop - out.clientHeight < 2;";
    for command in
        ["yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c 262144", "echo next-$((6*7))"]
    {
        browser.type_into("Command", command).await;
        browser.press("Run").await;
        browser.wait_script("the command's end", ended).await;
        browser.wait_script("the end of the output in view", in_view).await;
    }
    let shown =
        browser.script("return document.getElementById('commands-out').lastElementChild.textContent;", vec![]).await;
    assert!(shown.as_str().unwrap().contains("next-42"), "{shown}");
    browser.close().await;
    agent.agent.stop().await;
}
