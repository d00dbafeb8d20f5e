//! The page's browsers driven over WebDriver with fantoccini, at a phone's viewport, for the web
//! client's tests and the bench: headless Chromium (chromedriver) by default, and beside it the
//! engines of the other phones — WebKitGTK (WebKitWebDriver, on a virtual display of its own) and
//! Firefox ESR (geckodriver, built from crates.io into the build directory when missing); see
//! [`Engine`]. Controls are found the way a screen reader finds them: by their computed role and
//! accessible name.
#![allow(dead_code)]

#[path = "browser/launch.rs"]
pub mod launch;

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::elements::{Element, ElementRef};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, Locator};
use serde_json::{json, Value};
use tokio::process::Child;

/// Phone viewport every page is shown at.
pub const VIEWPORT: (u32, u32) = (390, 844);
/// Longest a page may take to show something before a test fails (a loaded 2-core machine
/// starts a browser slowly, and a step may wait on a real coding agent's turn while other tests
/// build and run beside it; this is a deadline, not a measurement).
pub const PAGE_STEP: Duration = Duration::from_secs(60);
/// How often a condition on the page is checked while waiting.
const POLL: Duration = Duration::from_millis(25);
/// How long two controls of one name may both be shown before [`Browser::control`] fails.
const SETTLE: Duration = Duration::from_millis(500);
/// What [`Browser::control`] looks through: every element that can have a control's role.
const CANDIDATES: &str = "button, input, textarea, select, a, [role], img, dialog";
/// The key of an element reference in WebDriver's JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Two browsers at a time (each test with its own, and a second device within its turn): a dozen
/// at once would starve the other tests of a small machine.
static BROWSERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Colour scheme the page is shown in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Light,
    Dark,
}

/// The browser engine a page is shown in. Every iOS browser is WebKit; most other phones run
/// Chromium, some Gecko.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Headless Chromium through chromedriver, with a phone's touch screen emulated.
    Chromium,
    /// Firefox ESR through geckodriver, headless, in kiosk mode (no browser chrome).
    Firefox,
    /// WebKitGTK's MiniBrowser through WebKitWebDriver, full screen on its own Xvfb display.
    WebKit,
}

impl Engine {
    pub const ALL: [Engine; 3] = [Engine::Chromium, Engine::Firefox, Engine::WebKit];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Chromium => "chromium",
            Engine::Firefox => "firefox",
            Engine::WebKit => "webkit",
        }
    }
}

/// A WebDriver server and one browser session at the phone viewport; they end when dropped, even
/// when the test panics before [`Browser::close`].
pub struct Browser {
    pub client: Client,
    pub engine: Engine,
    driver: Child,
    /// WebKit's virtual X display; `None` for the headless engines.
    display: Option<Child>,
    /// The browser's profile; `None` once [`Browser::quit`] handed it out.
    profile: Option<tempfile::TempDir>,
    /// This test's browser turn ([`BROWSERS`]); `None` for a second browser started beside one
    /// that holds it.
    _turn: Option<tokio::sync::SemaphorePermit<'static>>,
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| names.iter().map(move |name| dir.join(name))).find(|p| p.is_file())
}

/// Where a browser cannot start for want of a package: outside CI a note and `None` (the test
/// skips), under CI (`CI` set, as `.ci/run` runs, after installing them) a failure.
fn missing<T>(advice: &str) -> Option<T> {
    if std::env::var_os("CI").is_some() {
        panic!("{advice}");
    }
    eprintln!("skipped: {advice}");
    None
}

impl Browser {
    /// Chromium at the phone viewport in the light scheme, or `None` (with a note on stderr) where
    /// Chromium or chromedriver is not installed outside CI. Under CI a missing browser fails the
    /// test.
    pub async fn start() -> Option<Browser> {
        Self::start_with(Scheme::Light).await
    }

    pub async fn start_with(scheme: Scheme) -> Option<Browser> {
        Self::start_with_args(scheme, &[]).await
    }

    /// Chromium with extra switches (fake media devices, for instance).
    pub async fn start_with_args(scheme: Scheme, extra: &[String]) -> Option<Browser> {
        Self::launch(Engine::Chromium, scheme, extra, true).await
    }

    /// A browser of `engine` at the phone viewport, or `None` where it is not installed (outside CI).
    pub async fn start_in(engine: Engine, scheme: Scheme) -> Option<Browser> {
        Self::launch(engine, scheme, &[], true).await
    }

    /// The same, with extra arguments for the browser itself (Chromium's switches, Firefox's
    /// command line, MiniBrowser's options such as `--user-agent=…`).
    pub async fn start_in_with_args(engine: Engine, scheme: Scheme, extra: &[String]) -> Option<Browser> {
        Self::launch(engine, scheme, extra, true).await
    }

    /// A second, separate browser of the same engine (its own process and profile: another
    /// device, not another tab) beside this one, within this one's turn.
    pub async fn another(&self, scheme: Scheme) -> Browser {
        Self::launch(self.engine, scheme, &[], false).await.expect("a browser starts where one already runs")
    }

    async fn launch(engine: Engine, scheme: Scheme, extra: &[String], take_turn: bool) -> Option<Browser> {
        let programs = launch::Programs::find(engine).await?;
        let turn = if take_turn {
            Some(BROWSERS.acquire().await.expect("the browsers' turns are never closed"))
        } else {
            None
        };
        let launched = launch::launch(engine, programs, scheme, extra).await;
        let browser = Browser {
            client: launched.client,
            engine,
            driver: launched.driver,
            display: launched.display,
            profile: Some(launched.profile),
            _turn: turn,
        };
        if engine == Engine::Chromium && scheme == Scheme::Dark {
            browser
                .cdp(
                    "Emulation.setEmulatedMedia",
                    json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
                )
                .await;
        }
        if engine != Engine::Chromium {
            browser.check_viewport(scheme).await;
        }
        Some(browser)
    }

    /// The window the helper sized shows pages at [`VIEWPORT`] in the scheme asked for: a test's
    /// pictures and pixel checks rely on it. (Chromium emulates the phone's screen itself: before
    /// a page with a viewport tag, it lays out at a desktop width.)
    async fn check_viewport(&self, scheme: Scheme) {
        let seen = self
            .script("return [innerWidth, innerHeight, matchMedia('(prefers-color-scheme: dark)').matches];", vec![])
            .await;
        let (width, height) = VIEWPORT;
        assert_eq!(seen, json!([width, height, scheme == Scheme::Dark]), "{} viewport and scheme", self.engine.name());
    }

    /// Chromium whose microphone plays `wav` (looped), with the permission granted as a user would.
    pub async fn with_microphone(wav: &std::path::Path, scheme: Scheme) -> Option<Browser> {
        let args = [
            "--use-fake-device-for-media-stream".to_owned(),
            "--use-fake-ui-for-media-stream".to_owned(),
            format!("--use-file-for-fake-audio-capture={}", wav.display()),
        ];
        Self::start_with_args(scheme, &args).await
    }

    /// Process ids of this browser's processes (Chromium's, Firefox's: those started on its own
    /// profile) whose command line holds `kind` (`--type=renderer`, the audio service, …), read
    /// from /proc. WebKit's end with their display.
    pub fn processes(&self, kind: &str) -> Vec<u32> {
        let Some(profile) = &self.profile else { return Vec::new() };
        let profile = match self.engine {
            Engine::Chromium => format!("--user-data-dir={}", profile.path().display()),
            Engine::Firefox => profile.path().display().to_string(),
            Engine::WebKit => return Vec::new(),
        };
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                cmdline.contains(&profile) && cmdline.contains(kind)
            })
            .collect()
    }

    /// Ends the session (the browser quits), its WebDriver server and display, and lets the next
    /// browser start.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
        if let Some(display) = self.display.as_mut() {
            let _ = display.kill().await;
        }
    }

    /// Ends the session as a person quits the browser (Chromium writes its profile on the way
    /// out), waits until its last process has gone, and hands over the profile to read.
    pub async fn quit(mut self) -> tempfile::TempDir {
        let _ = self.client.clone().close().await;
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        while !self.processes("").is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "the browser did not quit in time");
            tokio::time::sleep(POLL).await;
        }
        let _ = self.driver.kill().await;
        if let Some(display) = self.display.as_mut() {
            let _ = display.kill().await;
        }
        self.profile.take().expect("a profile")
    }

    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// Opens a pairing link to a laptop this browser does not know yet and answers the page's
    /// "Add this laptop?" with Add, as a person who just ran `voxa pair` on it does. (A link to a
    /// laptop the browser knows, or a loopback link, asks nothing: open it with [`Browser::open`].)
    pub async fn pair(&self, link: &str) {
        self.open(link).await;
        self.add_laptop().await;
    }

    /// Taps Add on the page's "Add this laptop?".
    pub async fn add_laptop(&self) {
        self.control("dialog", "Add this laptop?").await;
        self.press("Add").await;
    }

    /// The page's address as the address bar shows it.
    pub async fn address(&self) -> String {
        self.client.current_url().await.expect("current url").to_string()
    }

    /// The address without the route the page keeps after `#/` (the view the user is on),
    /// checked to be a route: a path, never a `key=value` a secret could ride in.
    pub async fn page_address(&self) -> String {
        let address = self.address().await;
        match address.split_once('#') {
            None => address,
            Some((page, route)) => {
                assert!(route.starts_with('/') && !route.contains(['=', '&', '?']), "not a route: {address}");
                page.to_owned()
            }
        }
    }

    /// Switches Chromium's emulated network off or on, as a phone that loses and finds it.
    pub async fn set_online(&self, online: bool) {
        self.cdp("Network.enable", json!({})).await;
        let conditions = json!({"offline": !online, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1});
        self.cdp("Network.emulateNetworkConditions", conditions).await;
    }

    /// Runs a Chrome DevTools command in the page's tab (Chromium only).
    pub async fn cdp(&self, method: &str, params: Value) -> Value {
        assert_eq!(self.engine, Engine::Chromium, "DevTools commands are Chromium's");
        self.client
            .issue_cmd(Raw::post("goog/cdp/execute", json!({"cmd": method, "params": params})))
            .await
            .unwrap_or_else(|err| panic!("{method}: {err}"))
    }

    pub async fn script(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.expect("script runs")
    }

    /// The browser's own computation of an element's `computedrole` or `computedlabel`, as
    /// assistive technology gets them; empty when the element has gone.
    async fn computed(&self, element: &Element, what: &str) -> String {
        let id = element.element_id();
        let value = self.client.issue_cmd(Raw::get(&format!("element/{}/{what}", id.as_ref()))).await;
        value.ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
    }

    /// The elements that may be controls and have a box: one script instead of a round trip each
    /// for the many that a hidden view holds. An element without a box is never shown (WebDriver's
    /// displayedness and [`Browser::displayed`] both need one), so none that could match is left out.
    async fn boxed_candidates(&self) -> Vec<Element> {
        let script =
            "return [...document.querySelectorAll(arguments[0])].filter((e) => e.getClientRects().length > 0);";
        let found = self.client.execute(script, vec![json!(CANDIDATES)]).await.unwrap_or_default();
        let Value::Array(found) = found else { return Vec::new() };
        found
            .iter()
            .filter_map(|reference| reference.get(ELEMENT_KEY)?.as_str())
            .map(|id| Element::from_element_id(self.client.clone(), ElementRef::from(id.to_owned())))
            .collect()
    }

    /// Whether the element is shown, by WebDriver's displayedness check. WebKit's says a button
    /// with `overflow: hidden` is hidden when the page shows it (the tabs): there, an element the
    /// check refuses counts as shown when it has a size and neither CSS nor an ancestor hides it.
    pub async fn displayed(&self, element: &Element) -> bool {
        if element.is_displayed().await.unwrap_or(false) {
            return true;
        }
        if self.engine != Engine::WebKit {
            return false;
        }
        let element = serde_json::to_value(element).expect("an element reference");
        let shown = "const [e] = arguments; const box = e.getBoundingClientRect();
                     return box.width > 0 && box.height > 0 && e.checkVisibility({opacityProperty: true, visibilityProperty: true});";
        self.script(shown, vec![element]).await == Value::Bool(true)
    }

    /// The element's text as shown (WebDriver's element text; in WebKit, where that check of being
    /// shown errs as [`Browser::displayed`] says, the `innerText` of an element that is shown).
    pub async fn text(&self, element: &Element) -> String {
        let text = element.text().await.unwrap_or_default();
        if !text.is_empty() || self.engine != Engine::WebKit || !self.displayed(element).await {
            return text;
        }
        let element = serde_json::to_value(element).expect("an element reference");
        self.script("return arguments[0].innerText;", vec![element]).await.as_str().unwrap_or_default().to_owned()
    }

    /// The one displayed element with this role and accessible name, waiting until it appears.
    /// Two or more such controls fail the test once they outlast [`SETTLE`]: a page between two
    /// frames of one redraw may show both the old and the new, a page at rest never does.
    pub async fn control(&self, role: &str, name: &str) -> Element {
        self.find_control(role, name, false).await
    }

    /// The same, among the controls that are enabled: a card that lingers to say how it was
    /// answered keeps its buttons, disabled, beside a new card's.
    pub async fn enabled_control(&self, role: &str, name: &str) -> Element {
        self.find_control(role, name, true).await
    }

    async fn find_control(&self, role: &str, name: &str, enabled: bool) -> Element {
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        let mut doubled_since = None;
        loop {
            let mut found = Vec::new();
            // The cheapest question first: most candidates have another role.
            for element in self.boxed_candidates().await {
                if self.computed(&element, "computedrole").await == role
                    && self.computed(&element, "computedlabel").await == name
                    && self.displayed(&element).await
                    && (!enabled || element.is_enabled().await.unwrap_or(false))
                {
                    found.push(element);
                }
            }
            match found.len() {
                1 => return found.pop().unwrap(),
                0 => doubled_since = None,
                n => {
                    let since = *doubled_since.get_or_insert_with(tokio::time::Instant::now);
                    assert!(
                        since.elapsed() < SETTLE,
                        "{n} displayed controls are {role} {name:?}: names must be unique"
                    );
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no displayed {role} named {name:?} on the page");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the enabled button with this accessible name.
    pub async fn press(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        loop {
            let button = self.enabled_control("button", name).await;
            // Into the middle of the screen first: the header stays on top while the page scrolls
            // and would take a click meant for a button scrolled under it.
            let element = serde_json::to_value(&button).expect("an element reference");
            let scrolled = self.client.execute("arguments[0].scrollIntoView({block: 'center'});", vec![element]).await;
            let clicked = match scrolled {
                Ok(_) => button.click().await.map(|_| ()),
                Err(err) => Err(err),
            };
            match clicked {
                Ok(()) => return,
                // The page drew that part again between finding the button and the click (a card
                // redrawn as another approval joins it): the same button is found again.
                Err(err) if is_stale(&err) && tokio::time::Instant::now() < deadline => continue,
                Err(err) => panic!("click {name:?}: {err}"),
            }
        }
    }

    /// Types into the textbox with this accessible name.
    pub async fn type_into(&self, name: &str, text: &str) {
        let field = self.control("textbox", name).await;
        field.send_keys(text).await.expect("type");
    }

    /// Waits until `check` holds for the text of the element matched by `css`; returns that text.
    pub async fn wait_text(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        let mut last = String::new();
        loop {
            if let Ok(element) = self.client.find(Locator::Css(css)).await {
                last = self.text(&element).await;
                if check(&last) {
                    return last;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "waited for {what}; {css} shows {last:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for the live region "Connection" to say something containing `words`.
    pub async fn wait_connection(&self, words: &str) -> String {
        let region = self.control("status", "Connection").await;
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        loop {
            let text = self.text(&region).await;
            if text.contains(words) {
                return text;
            }
            assert!(tokio::time::Instant::now() < deadline, "connection never said {words:?}; it says {text:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until a script returns `true`.
    pub async fn wait_script(&self, what: &str, script: &str) {
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        while self.script(script, vec![]).await != Value::Bool(true) {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        self.client.screenshot().await.expect("screenshot")
    }
}

/// A mono PCM16 WAV: `tone_s` seconds of `freq` at half scale, then `silence_s` seconds of silence.
pub fn tone_wav(path: &std::path::Path, rate: u32, freq: f64, tone_s: f64, silence_s: f64) {
    let tone = (rate as f64 * tone_s) as usize;
    let total = tone + (rate as f64 * silence_s) as usize;
    let mut data = Vec::with_capacity(total * 2);
    for n in 0..total {
        let phase = 2.0 * std::f64::consts::PI * freq * n as f64 / rate as f64;
        let value = if n < tone { 0.5 * phase.sin() } else { 0.0 };
        data.extend_from_slice(&((value * 32767.0) as i16).to_le_bytes());
    }
    let mut wav = Vec::with_capacity(44 + data.len());
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&(rate * 2).to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(data.len() as u32).to_le_bytes());
    wav.extend_from_slice(&data);
    std::fs::write(path, wav).expect("write the WAV");
}

/// The microphone's tone.
pub const TONE_HZ: f64 = 440.0;

/// Chromium whose microphone is the tone, then silence; `None` where Chromium is not installed.
pub(crate) async fn browser_with_tone(scratch: &tempfile::TempDir, scheme: Scheme) -> Option<Browser> {
    let wav = scratch.path().join("microphone.wav");
    tone_wav(&wav, 48000, TONE_HZ, 1.5, 1.5);
    Browser::with_microphone(&wav, scheme).await
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Chromium and Firefox outlive their driver when nobody ends the session: end their
        // processes (those on this browser's own profile), by id. WebKit's go with their display.
        for pid in self.processes("") {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// A WebDriver command fantoccini has no method for (computed label and role, CDP).
#[derive(Debug)]
struct Raw {
    post: Option<String>,
    path: String,
}

impl Raw {
    fn get(path: &str) -> Raw {
        Raw { post: None, path: path.to_owned() }
    }

    fn post(path: &str, body: Value) -> Raw {
        Raw { post: Some(body.to_string()), path: path.to_owned() }
    }
}

impl WebDriverCompatibleCommand for Raw {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/{}", session_id.unwrap_or_default(), self.path))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        match &self.post {
            Some(body) => (http::Method::POST, Some(body.clone())),
            None => (http::Method::GET, None),
        }
    }
}

/// Whether a WebDriver command failed because its element is no longer in the page.
fn is_stale(err: &fantoccini::error::CmdError) -> bool {
    matches!(err, fantoccini::error::CmdError::Standard(e) if e.error == fantoccini::error::ErrorStatus::StaleElementReference)
}
