//! 256 KiB of command output drawn in each tab of the page, headless Chromium at 390×844, against
//! `voxa run --embedded-relay`: in the Terminal tab from "Run" to the frame where the command's end
//! line is in view with all of its output above it, and in the Shell from the Enter key to the
//! frame where the line after the output is on the screen. Both are read from the page's own clock
//! (a `requestAnimationFrame` watcher the bench puts in the page), so WebDriver's polling is not in
//! them. Each run adds to what the tab already holds, as a person's next command does.
//!
//! The floor is the same bytes drawn with voxa out of the way, in the same page: one text node of
//! 256 KiB appended to the Terminal tab's list, and the same bytes written straight into a new
//! terminal of the vendored emulator, of the Shell's size.

use fantoccini::Locator;
use serde_json::{json, Value};

use crate::child::start_agent;
use crate::report::{percentiles, Report};
use crate::web::browser::Browser;

const AREA: &str = "web client";
/// 256 KiB of the lines the issue's readers used, as the Terminal tab's `yes | head` makes them.
const LINE: &str = "the quick brown fox jumps over the lazy dog 0123456789";
const BYTES: usize = 262_144;

pub fn run(report: &mut Report, measuring: bool) {
    let runs = if measuring { 7 } else { 1 };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(measure(report, runs));
}

async fn measure(report: &mut Report, runs: usize) {
    let Some(browser) = Browser::start().await else { return };
    let agent = start_agent(&[], &["--embedded-relay"], &[], &["embedded_relay", "started"]);
    let relay = agent.embedded_relay.clone().expect("the embedded relay's address");
    browser.pair(&format!("http://{relay}/#code={}&token={}", agent.code, agent.token)).await;
    browser.wait_connection("online").await;
    let command = format!("yes '{LINE}' | head -c {BYTES}");

    let mut terminal = Vec::with_capacity(runs);
    let mut terminal_floor = Vec::with_capacity(runs);
    for _ in 0..runs {
        browser.script(TERMINAL_WATCH, vec![]).await;
        browser.type_into("Command", &command).await;
        browser.press("Run").await;
        terminal.push(result(&browser, "the Terminal tab's 256 KiB").await);
        let shown = browser
            .script("return document.getElementById('commands-out').lastElementChild.querySelector('.out').textContent.length;", vec![])
            .await;
        assert_eq!(shown, json!(BYTES), "all of the output is on the page");
        browser.script(TERMINAL_FLOOR, vec![json!(text(false))]).await;
        terminal_floor.push(result(&browser, "the floor's text node").await);
    }

    browser.press("Shell").await;
    browser.wait_text("#shell-status", "the terminal to open", |text| text.starts_with("t-")).await;
    let input = browser.client.find(Locator::Css("#shell-screen textarea")).await.expect("the Shell's input");
    let mut shell = Vec::with_capacity(runs);
    let mut shell_floor = Vec::with_capacity(runs);
    for n in 0..runs {
        // The line after the output is computed by the shell, so the typed command never matches it.
        let mark = format!("render-end-{}", 1000 + n);
        input.send_keys(&format!("{command}; echo render-end-$((1000+{n}))")).await.expect("typing into the Shell");
        browser.script(SHELL_WATCH, vec![json!(mark)]).await;
        input.send_keys("\u{E007}").await.expect("Enter in the Shell");
        shell.push(result(&browser, "the Shell's 256 KiB").await);
        browser.script(SHELL_FLOOR, vec![json!(format!("{}{mark}\r\n", text(true)))]).await;
        shell_floor.push(result(&browser, "the floor's emulator").await);
    }
    browser.close().await;
    drop(agent);

    for (label, mut values, mut floor) in [
        ("Terminal tab: \"Run\" → its end line in view, all of it drawn", terminal, terminal_floor),
        ("Shell tab: Enter → the line after it on the screen", shell, shell_floor),
    ] {
        let (median, _) = percentiles(&mut values);
        let (floor_median, _) = percentiles(&mut floor);
        report.add(
            AREA,
            format!("256 KiB of output, {label}, Chromium 390×844 (median of {runs})"),
            format!(
                "{median:.0} ms (runs {}; floor, the same bytes drawn without voxa: {floor_median:.0} ms)",
                list(&values)
            ),
            "≤ 300 ms",
        );
    }
}

/// The command's output as it reaches the page: the PTY ends each line with `\r\n`, a pipe `\n`.
fn text(pty: bool) -> String {
    let end = if pty { "\r\n" } else { "\n" };
    let line = format!("{LINE}\n");
    let whole: String = line.repeat(BYTES / line.len() + 1).chars().take(BYTES).collect();
    whole.replace('\n', end)
}

fn list(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(", ")
}

/// Waits for the page's `window.voxaRender` (milliseconds) and clears it.
async fn result(browser: &Browser, what: &str) -> f64 {
    browser.wait_script(what, "return typeof window.voxaRender === 'number';").await;
    let value: Value = browser.script("const v = window.voxaRender; window.voxaRender = null; return v;", vec![]).await;
    value.as_f64().expect("a time in milliseconds")
}

/// Watches the next block of the Terminal tab: done at the first frame where its end line says how
/// it exited, is in view at the bottom of the list, and all 256 KiB are above it.
const TERMINAL_WATCH: &str = r#"
window.voxaRender = null;
performance.clearMarks();
const out = document.getElementById('commands-out');
const before = out.childElementCount;
const check = () => {
  const block = out.childElementCount > before ? out.lastElementChild : null;
  const end = block && block.querySelector('.end');
  if (end && /exit/.test(end.textContent)) {
    const box = out.getBoundingClientRect();
    const line = end.getBoundingClientRect();
    const bottom = out.scrollHeight - out.scrollTop - out.clientHeight < 2;
    if (line.bottom <= box.bottom + 1 && bottom && block.querySelector('.out').textContent.length >= 262144) {
      const run = performance.getEntriesByName('voxa:run').pop();
      window.voxaRender = performance.now() - run.startTime;
      return;
    }
  }
  requestAnimationFrame(check);
};
requestAnimationFrame(check);
"#;

/// The Terminal tab's floor: the same text as one node at the end of the same list, scrolled to,
/// up to the next frame; then removed.
const TERMINAL_FLOOR: &str = r#"
window.voxaRender = null;
const out = document.getElementById('commands-out');
const started = performance.now();
const pre = document.createElement('pre');
pre.className = 'out';
pre.textContent = arguments[0];
out.append(pre);
out.scrollTop = out.scrollHeight;
requestAnimationFrame(() => {
  window.voxaRender = performance.now() - started;
  pre.remove();
});
"#;

/// Watches the Shell from the next key (the Enter the bench sends) to the frame whose rows show
/// `arguments[0]`.
const SHELL_WATCH: &str = r#"
window.voxaRender = null;
let started = null;
const input = document.querySelector('#shell-screen textarea');
input.addEventListener('keydown', () => { started = performance.now(); }, { capture: true, once: true });
const rows = document.querySelector('#shell-screen .xterm-rows');
const mark = arguments[0];
const check = () => {
  if (started !== null && rows.textContent.includes(mark)) {
    window.voxaRender = performance.now() - started;
    return;
  }
  requestAnimationFrame(check);
};
requestAnimationFrame(check);
"#;

/// The Shell's floor: a new terminal of the vendored emulator, the Shell's size and font, over the
/// Shell; the same bytes written into it, to the frame whose rows show the last line; then removed.
const SHELL_FLOOR: &str = r#"
window.voxaRender = null;
const bytes = arguments[0];
const mark = bytes.trimEnd().split('\n').pop();
import('/vendor/xterm/xterm.mjs').then(({ Terminal }) => {
  const screen = document.getElementById('shell-screen');
  const rect = screen.getBoundingClientRect();
  const box = document.createElement('div');
  Object.assign(box.style, { position: 'fixed', left: `${rect.left}px`, top: `${rect.top}px`,
    width: `${rect.width}px`, height: `${rect.height}px`, zIndex: 10 });
  document.body.append(box);
  // The Shell's own grid: its rows as drawn, its columns from the emulator's measured cell.
  const shown = screen.querySelector('.xterm-rows').children.length;
  const measure = screen.querySelector('.xterm-char-measure-element');
  const cell = measure && measure.textContent ? measure.getBoundingClientRect().width / measure.textContent.length : 8.4;
  const cols = Math.max(20, Math.floor(screen.querySelector('.xterm-screen').getBoundingClientRect().width / cell));
  const term = new Terminal({ cols, rows: shown || 24, scrollback: 5000,
    fontFamily: 'ui-monospace, "SF Mono", Menlo, Consolas, "DejaVu Sans Mono", monospace', fontSize: 14 });
  term.open(box);
  const rows = box.querySelector('.xterm-rows');
  requestAnimationFrame(() => {
    const started = performance.now();
    term.write(bytes);
    const check = () => {
      if (rows.textContent.includes(mark)) {
        window.voxaRender = performance.now() - started;
        term.dispose();
        box.remove();
        return;
      }
      requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
  });
});
"#;
