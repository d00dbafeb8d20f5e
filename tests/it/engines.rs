//! The web client in each phone's engine (docs/GUIDE.md, "Phones and browsers"): WebKitGTK (every
//! iOS browser is WebKit) and Firefox ESR beside Chromium, each at 390×844 against `voxa run
//! --embedded-relay` with the real Claude Code CLI (tests/agents) and only the model faked: the
//! pairing link goes online sealed, a command's output shows, the coding agent's Write waits
//! until a tap allows it, the Shell takes typed input and shows what it printed, and the six tab
//! icons are drawn — read from the pixels of a screenshot, in light and dark. Set
//! `VOXA_ENGINE_PICTURES=<dir>` to keep the screenshots.

use std::path::Path;

use serde_json::{json, Value};

use crate::sessions::agents_bin;
use crate::sessions_web::Laptop;
use crate::support::browser::{Browser, Engine, Scheme, VIEWPORT};
use crate::support::fake_model::{FakeModel, Reply};

/// The tabs, by element id, in the order they are shown.
const TABS: [&str; 6] = ["tab-terminal", "tab-pty", "tab-files", "tab-screen", "tab-agent", "tab-status"];
/// Text of the terminal output, of the Shell's rows, and of the open session's conversation.
const TERMINAL: &str = "#term-out";
const SHELL_ROWS: &str = "#pty-screen .xterm-rows";
const CONVERSATION: &str = "#agent-conversation";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_webkit_a_phone_pairs_sealed_runs_approves_types_and_sees_every_tab_icon() {
    phone_round(Engine::WebKit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_firefox_a_phone_pairs_sealed_runs_approves_types_and_sees_every_tab_icon() {
    phone_round(Engine::Firefox).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_phone_pairs_sealed_runs_approves_types_and_sees_every_tab_icon() {
    phone_round(Engine::Chromium).await;
}

/// Everything a phone does first, in one engine, light; then the same laptop in dark.
async fn phone_round(engine: Engine) {
    let Some(bin) = agents_bin("claude") else { return };
    let Some(browser) = Browser::start_in(engine, Scheme::Light).await else { return };
    let model = FakeModel::start().await;
    let laptop = Laptop::start(&bin, &model);
    let name = engine.name();

    browser.open(&laptop.link).await;
    browser.wait_connection("online").await;
    let mark = browser
        .script("const m = document.getElementById('seal-mark'); return m.hidden ? '' : m.textContent;", vec![])
        .await;
    assert_eq!(mark, json!("sealed"), "{name}: the page says its session is sealed");
    let status = cli_status(&laptop.home).await;
    assert_eq!(status["agent"]["plain_sessions"], json!(0), "{name}: {status}");
    let phones: Vec<&Value> =
        status["agent"]["connected"].as_array().unwrap().iter().filter(|c| c["via"] == "relay").collect();
    assert!(phones.len() == 1 && phones[0]["sealed"] == json!(true), "{name}: the page's session, sealed: {status}");
    check_tab_icons(&browser, "light").await;
    picture(&browser, &format!("{name}-light-online.png")).await;

    // A command and its output.
    browser.type_into("Command", "echo engine-$((6*7))").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command's output", |text| text.contains("engine-42")).await;
    picture(&browser, &format!("{name}-light-terminal.png")).await;

    // The Shell: typed into the emulator, read back from its rows.
    browser.press("Shell").await;
    browser.wait_text("#pty-status", "the terminal to open", |text| text.starts_with("t-")).await;
    let input = browser.client.find(fantoccini::Locator::Css("#pty-screen textarea")).await.expect("the Shell's input");
    input.send_keys("echo shell-$((6*7))\u{E007}").await.expect("typing into the Shell");
    browser.wait_text(SHELL_ROWS, "the Shell's output", |text| text.contains("shell-42")).await;
    picture(&browser, &format!("{name}-light-shell.png")).await;

    // The coding agent's Write waits for the phone; a tap allows it.
    let notes = laptop.workspace.join("notes.md");
    model.script([
        Reply::tool("Write", json!({"file_path": notes.to_str().unwrap(), "content": "written from a phone\n"})),
        Reply::text("Wrote notes.md."),
    ]);
    browser.press("Agent").await;
    browser.type_into("Prompt", "Write notes.md").await;
    browser.press("Ask").await;
    let asked = browser.wait_text(CONVERSATION, "the Write approval", |text| text.contains("Allow")).await;
    assert!(asked.contains("write notes.md"), "{name}: {asked}");
    assert!(!notes.exists(), "{name}: written before anyone allowed it");
    picture(&browser, &format!("{name}-light-approval.png")).await;
    browser.press("Allow").await;
    let done = browser.wait_text(CONVERSATION, "the turn's end", |text| text.contains("Done ·")).await;
    assert!(done.contains("Allowed — on a phone"), "{name}: {done}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "written from a phone\n", "{name}");
    browser.close().await;

    // Dark: the same laptop from another browser of the engine.
    let dark = Browser::start_in(engine, Scheme::Dark).await.expect("the engine started once already");
    dark.open(&laptop.link).await;
    dark.wait_connection("online").await;
    check_tab_icons(&dark, "dark").await;
    picture(&dark, &format!("{name}-dark-online.png")).await;
    dark.press("Shell").await;
    dark.wait_text(SHELL_ROWS, "the replayed Shell", |text| text.contains("shell-42")).await;
    picture(&dark, &format!("{name}-dark-shell.png")).await;
    dark.press("Agent").await;
    dark.press("Write notes.md").await;
    dark.wait_text(CONVERSATION, "the session's history", |text| text.contains("Done ·")).await;
    picture(&dark, &format!("{name}-dark-agent.png")).await;
    dark.close().await;
    laptop.run.stop();
}

/// `voxa status --json` of the laptop's home.
async fn cli_status(home: &Path) -> Value {
    let home = home.to_path_buf();
    let output = tokio::task::spawn_blocking(move || crate::support::voxa(&home, &["status", "--json"])).await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Writes a screenshot to `$VOXA_ENGINE_PICTURES/<name>`, when that is set.
async fn picture(browser: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("VOXA_ENGINE_PICTURES") else { return };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(Path::new(&dir).join(name), browser.screenshot().await).unwrap();
}

/// A screenshot as RGBA pixels at the viewport's size.
pub(crate) struct Pixels {
    width: usize,
    rgba: Vec<u8>,
}

impl Pixels {
    pub(crate) fn of(png_bytes: &[u8]) -> Pixels {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        decoder.set_transformations(png::Transformations::EXPAND);
        let mut reader = decoder.read_info().unwrap();
        let mut buffer = vec![0; reader.output_buffer_size()];
        let frame = reader.next_frame(&mut buffer).unwrap();
        buffer.truncate(frame.buffer_size());
        let channels = match frame.color_type {
            png::ColorType::Rgba => 4,
            png::ColorType::Rgb => 3,
            other => panic!("a screenshot in {other:?}"),
        };
        let rgba = buffer
            .chunks(channels)
            .flat_map(|px| [px[0], px[1], px[2], if channels == 4 { px[3] } else { 255 }])
            .collect();
        Pixels { width: frame.width as usize, rgba }
    }

    fn height(&self) -> usize {
        self.rgba.len() / 4 / self.width
    }

    fn at(&self, x: usize, y: usize) -> [u8; 4] {
        let i = (y * self.width + x) * 4;
        [self.rgba[i], self.rgba[i + 1], self.rgba[i + 2], self.rgba[i + 3]]
    }
}

/// How far apart two colours are: the largest difference of a channel.
fn distance(a: [u8; 4], b: [u8; 4]) -> u8 {
    (0..3).map(|c| a[c].abs_diff(b[c])).max().unwrap()
}

/// Each tab's icon as drawn: in the screenshot, the pixels of the tab above its label that differ
/// from the tab's own background — as a shape (offsets from its top left corner) and its box.
async fn tab_icons(browser: &Browser) -> Vec<(String, Vec<(usize, usize)>, (usize, usize))> {
    browser.script("window.scrollTo(0, 0);", vec![]).await;
    let boxes = browser
        .script(
            "return [...document.querySelectorAll('.tabs button')].map((tab) => {
               const box = tab.getBoundingClientRect();
               const label = document.createRange();
               label.selectNodeContents(tab);
               return { id: tab.id, left: box.left, top: box.top, right: box.right, label: label.getBoundingClientRect().top };
             });",
            vec![],
        )
        .await;
    let pixels = Pixels::of(&browser.screenshot().await);
    assert_eq!(
        (pixels.width, pixels.height()),
        (VIEWPORT.0 as usize, VIEWPORT.1 as usize),
        "a screenshot at the viewport's size"
    );
    let px = |value: &Value| value.as_f64().unwrap().round() as usize;
    boxes
        .as_array()
        .unwrap()
        .iter()
        .map(|tab| {
            let (left, top, right, label) = (px(&tab["left"]), px(&tab["top"]), px(&tab["right"]), px(&tab["label"]));
            // The tab's background: beside the icon, at its left edge, just above the label.
            let background = pixels.at(left + 3, label.saturating_sub(2));
            let mut ink = Vec::new();
            for y in top + 1..label.saturating_sub(1) {
                for x in left + 1..right.saturating_sub(1) {
                    if distance(pixels.at(x, y), background) > 48 {
                        ink.push((x, y));
                    }
                }
            }
            let (min_x, min_y) =
                (ink.iter().map(|p| p.0).min().unwrap_or(0), ink.iter().map(|p| p.1).min().unwrap_or(0));
            let (max_x, max_y) =
                (ink.iter().map(|p| p.0).max().unwrap_or(0), ink.iter().map(|p| p.1).max().unwrap_or(0));
            let shape = ink.iter().map(|(x, y)| (x - min_x, y - min_y)).collect();
            (tab["id"].as_str().unwrap().to_owned(), shape, (max_x + 1 - min_x, max_y + 1 - min_y))
        })
        .collect()
}

/// The six tabs each show their own icon: some ink, no more than an icon's square holds, within
/// that square, and no two alike (a fallback dot, a filled square or nothing would be the same
/// for all six).
async fn check_tab_icons(browser: &Browser, scheme: &str) {
    let name = format!("{} {scheme}", browser.engine.name());
    let icons = tab_icons(browser).await;
    let ids: Vec<&str> = icons.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, TABS, "{name}: the tabs");
    for (id, shape, (width, height)) in &icons {
        assert!(shape.len() >= 30, "{name}: #{id} draws no icon ({} pixels of ink)", shape.len());
        assert!(shape.len() <= 22 * 22 * 6 / 10, "{name}: #{id} fills its square ({} pixels)", shape.len());
        assert!(*width <= 24 && *height <= 24, "{name}: #{id}'s ink spans {width}×{height}, more than its icon");
    }
    for (n, (id, shape, _)) in icons.iter().enumerate() {
        for (other, other_shape, _) in &icons[n + 1..] {
            let (mut a, mut b) = (shape.clone(), other_shape.clone());
            a.sort_unstable();
            b.sort_unstable();
            assert_ne!(a, b, "{name}: #{id} and #{other} show the same picture");
        }
    }
}

#[test]
fn ci_builds_the_geckodriver_the_helper_drives() {
    let ci = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    let line = format!("\nGECKODRIVER_VERSION={}\n", crate::support::browser::launch::GECKODRIVER_VERSION);
    assert!(ci.contains(&line), ".ci/run builds another geckodriver than {line:?}");
    for package in ["firefox-esr", "webkit2gtk-driver", "xvfb"] {
        let installs =
            ci.lines().any(|l| l.starts_with("APT_PACKAGES=(") && l.split([' ', '(', ')']).any(|w| w == package));
        assert!(installs, ".ci/run installs {package}");
    }
}
