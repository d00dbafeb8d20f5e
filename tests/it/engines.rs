//! The web client in each phone's engine (docs/GUIDE.md, "Phones and browsers"): WebKitGTK (every
//! iOS browser is WebKit) and Firefox ESR beside Chromium, each at 390×844 against `voxa run
//! --embedded-relay` with the real Claude Code CLI (tests/agents) and only the model faked: the
//! pairing link goes online sealed, a command's output shows, the coding agent's Write waits
//! until a tap allows it, the Shell takes typed input and shows what it printed, and the six tab
//! icons are drawn — read from the pixels of a screenshot, in light and dark. Set
//! `VOXA_ENGINE_PICTURES=<dir>` to keep the screenshots.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::agents::agents_bin;
use crate::support::browser::{Browser, Engine, Scheme, VIEWPORT};
use crate::support::fake_model::{FakeModel, Reply};
use crate::support::laptop::Laptop;

/// The tabs, by element id, in the order they are shown.
const TABS: [&str; 6] = ["tab-commands", "tab-shell", "tab-files", "tab-screen", "tab-agent", "tab-status"];
/// Text of the terminal output, of the Shell's rows, and of the open session's conversation.
const TERMINAL: &str = "#commands-out";
const SHELL_ROWS: &str = "#shell-screen .xterm-rows";
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

    browser.pair(&laptop.link).await;
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
    browser.wait_text("#shell-status", "the terminal to open", |text| text.starts_with("t-")).await;
    let input =
        browser.client.find(fantoccini::Locator::Css("#shell-screen textarea")).await.expect("the Shell's input");
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
    dark.pair(&laptop.another_link()).await;
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
    // An icon is an SVG mask, which an engine may decode after the first paint (WebKit did, on a
    // loaded machine): look again, for a few seconds, until every tab shows some ink.
    let deadline = Instant::now() + Duration::from_secs(5);
    let icons = loop {
        let icons = tab_icons(browser).await;
        if icons.iter().all(|(_, shape, _)| shape.len() >= 30) || Instant::now() > deadline {
            break icons;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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

// ---------------------------------------------------------------------------------------------
// Installable: the home screen's icons and manifest, and what iOS needs for notifications

/// The touch icons, drawn from web/icon.svg's picture edge to edge (the home screen rounds the
/// corners itself; an icon with transparent corners gets black ones on iOS).
const TOUCH_ICONS: [(&str, u32); 3] = [("apple-touch-icon.png", 180), ("icon-192.png", 192), ("icon-512.png", 512)];
/// icon.svg's picture, in its 32×32 units: the background, and the V drawn with round ends.
const ICON_BACKGROUND: [u8; 3] = [0x2f, 0x6b, 0xff];
const ICON_STROKE: [(f64, f64); 3] = [(8.0, 10.0), (16.0, 23.0), (24.0, 10.0)];
const ICON_STROKE_WIDTH: f64 = 3.2;

/// The icon at `size`×`size`, RGB: each pixel the share of its 4×4 samples under the stroke.
fn draw_icon(size: u32) -> Vec<u8> {
    let distance = |(px, py): (f64, f64), (ax, ay): (f64, f64), (bx, by): (f64, f64)| {
        let (dx, dy) = (bx - ax, by - ay);
        let t = (((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)).clamp(0.0, 1.0);
        ((px - ax - t * dx).powi(2) + (py - ay - t * dy).powi(2)).sqrt()
    };
    let scale = 32.0 / f64::from(size);
    let mut pixels = Vec::with_capacity((size * size * 3) as usize);
    for y in 0..size {
        for x in 0..size {
            let mut covered = 0;
            for sy in 0..4 {
                for sx in 0..4 {
                    let at = (
                        (f64::from(x) + (f64::from(sx) + 0.5) / 4.0) * scale,
                        (f64::from(y) + (f64::from(sy) + 0.5) / 4.0) * scale,
                    );
                    let near = ICON_STROKE.windows(2).map(|s| distance(at, s[0], s[1])).fold(f64::MAX, f64::min);
                    covered += u32::from(near <= ICON_STROKE_WIDTH / 2.0);
                }
            }
            for channel in ICON_BACKGROUND {
                let white = f64::from(covered) / 16.0;
                pixels.push((f64::from(channel) * (1.0 - white) + 255.0 * white).round() as u8);
            }
        }
    }
    pixels
}

fn encode_png(size: u32, rgb: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, size, size);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Best);
    encoder.write_header().unwrap().write_image_data(rgb).unwrap();
    out
}

/// A PNG's width, height, whether it is opaque, and its pixels as RGB.
fn decode_png(bytes: &[u8]) -> (u32, u32, bool, Vec<u8>) {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buffer).unwrap();
    buffer.truncate(frame.buffer_size());
    let opaque = matches!(frame.color_type, png::ColorType::Rgb);
    (frame.width, frame.height, opaque, buffer)
}

#[test]
fn the_touch_icons_are_the_page_icon_drawn_at_their_sizes() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("web");
    // The drawing follows icon.svg; a change to one must be made to the other.
    let svg = std::fs::read_to_string(web.join("icon.svg")).unwrap();
    for part in
        ["fill=\"#2f6bff\"", "M8 10l8 13 8-13", "stroke=\"#fff\"", "stroke-width=\"3.2\"", "stroke-linecap=\"round\""]
    {
        assert!(svg.contains(part), "icon.svg no longer has {part}: redraw the touch icons");
    }
    let rewrite = std::env::var_os("VOXA_WRITE_ICONS").is_some();
    for (name, size) in TOUCH_ICONS {
        let drawn = draw_icon(size);
        if rewrite {
            std::fs::write(web.join(name), encode_png(size, &drawn)).unwrap();
        }
        let committed = std::fs::read(web.join(name)).unwrap_or_default();
        assert!(
            !committed.is_empty(),
            "web/{name} is missing: VOXA_WRITE_ICONS=1 cargo test --test it engines::the_touch"
        );
        let (width, height, opaque, pixels) = decode_png(&committed);
        assert_eq!((width, height, opaque), (size, size, true), "web/{name}");
        assert!(
            pixels == drawn,
            "web/{name} is not icon.svg's picture: VOXA_WRITE_ICONS=1 cargo test --test it engines::the_touch"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_installable_on_a_home_screen_with_its_manifest_and_touch_icon() {
    let relay = crate::support::harness::TestRelay::start().await;
    let get = |path: String| {
        let addr = relay.addr;
        async move {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            tokio::io::AsyncWriteExt::write_all(&mut tcp, request.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut answer).await.unwrap();
            let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
            (head, answer[split + 4..].to_vec())
        }
    };
    let (_, page) = get("/".to_owned()).await;
    let page = String::from_utf8(page).unwrap();
    let head = &page[..page.find("</head>").unwrap()];
    for tag in [
        r#"<meta name="viewport" content="width=device-width, initial-scale=1, viewport-fit=cover">"#,
        r#"<meta name="apple-mobile-web-app-capable" content="yes">"#,
        r#"<meta name="mobile-web-app-capable" content="yes">"#,
        r#"<meta name="apple-mobile-web-app-title" content="voxa">"#,
        r#"<meta name="apple-mobile-web-app-status-bar-style" content="default">"#,
        r##"<meta name="theme-color" content="#ffffff" media="(prefers-color-scheme: light)">"##,
        r##"<meta name="theme-color" content="#181b22" media="(prefers-color-scheme: dark)">"##,
    ] {
        assert!(head.contains(tag), "the page's head lacks {tag}");
    }
    let attribute = |tag: &str, name: &str| -> String {
        let at = head.find(tag).unwrap_or_else(|| panic!("no {tag} in the head"));
        let rest = &head[at..];
        let value = &rest[rest.find(&format!("{name}=\"")).unwrap() + name.len() + 2..];
        value[..value.find('"').unwrap()].to_owned()
    };
    // The touch icon the page names (under its hashed name) is a 180×180 opaque PNG.
    let touch = attribute(r#"<link rel="apple-touch-icon""#, "href");
    let (headers, body) = get(touch.clone()).await;
    assert!(headers.starts_with("http/1.1 200") && headers.contains("content-type: image/png"), "{touch}: {headers}");
    let (width, height, opaque, _) = decode_png(&body);
    assert_eq!((width, height, opaque), (180, 180, true), "{touch}");
    // iOS also asks for it at the root by its well-known name.
    assert!(get("/apple-touch-icon.png".to_owned()).await.0.starts_with("http/1.1 200"));

    let manifest_path = attribute(r#"<link rel="manifest""#, "href");
    let (headers, body) = get(manifest_path).await;
    assert!(headers.contains("content-type: application/manifest+json"), "{headers}");
    let manifest: Value = serde_json::from_slice(&body).unwrap();
    for (field, value) in
        [("name", "voxa"), ("short_name", "voxa"), ("start_url", "/"), ("scope", "/"), ("display", "standalone")]
    {
        assert_eq!(manifest[field], value, "{manifest}");
    }
    for colour in ["theme_color", "background_color"] {
        let value = manifest[colour].as_str().unwrap_or_default();
        assert!(value.len() == 7 && value.starts_with('#'), "{colour}: {manifest}");
    }
    let mut sizes = Vec::new();
    for icon in manifest["icons"].as_array().unwrap().iter().filter(|icon| icon["type"] == "image/png") {
        let (headers, body) = get(icon["src"].as_str().unwrap().to_owned()).await;
        assert!(headers.starts_with("http/1.1 200"), "{icon}: {headers}");
        let (width, height, opaque, _) = decode_png(&body);
        assert_eq!(icon["sizes"], format!("{width}x{height}"), "{icon}");
        assert!(opaque && icon["purpose"].as_str().unwrap().contains("maskable"), "{icon}");
        sizes.push(width);
    }
    assert_eq!(sizes, [192, 512], "{manifest}");
}

/// Safari on an iPhone, as its user agent says.
const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) \
                      Version/18.5 Mobile/15E148 Safari/604.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_iphone_the_notifications_view_says_push_needs_the_home_screen_and_how() {
    use crate::support::harness::{TestAgent, TestRelay};
    let agent_of = |relay: &TestRelay, agent: &TestAgent| {
        format!("http://{}/#code={}&token={}", relay.addr, agent.code(), agent.token())
    };
    for (user_agent, on_ios) in [(Some(IPHONE), true), (None, false)] {
        let args: Vec<String> = user_agent.map(|ua| format!("--user-agent={ua}")).into_iter().collect();
        let Some(browser) = Browser::start_in_with_args(Engine::WebKit, Scheme::Light, &args).await else { return };
        let relay = TestRelay::start().await;
        let agent = TestAgent::start(Some(relay.url())).await;
        browser.pair(&agent_of(&relay, &agent)).await;
        browser.wait_connection("online").await;
        browser.press("Status").await;
        let said = browser.wait_text("#notify-status", "the notifications line", |_| true).await;
        let button = browser.client.find(fantoccini::Locator::Id("notify-on")).await.unwrap();
        let offered = browser.displayed(&button).await;
        if on_ios {
            let said = browser.wait_text("#notify-status", "the home screen", |t| t.contains("Home Screen")).await;
            assert!(said.contains("home screen") && said.contains("Share"), "{said}");
            assert!(said.contains("open voxa from its icon"), "{said}");
            assert!(!offered, "a button that cannot work in an iOS tab");
            picture(&browser, "webkit-iphone-notifications.png").await;
        } else {
            assert!(!said.contains("Home Screen"), "only iOS needs the home screen: {said:?}");
        }
        browser.close().await;
        agent.agent.stop().await;
    }
}
