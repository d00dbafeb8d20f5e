//! Headless Chromium driven over WebDriver (chromedriver + fantoccini), at a phone's viewport, for
//! the web client's tests and the bench. Controls are found the way a screen reader finds them:
//! by their computed role and accessible name.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Phone viewport every page is shown at.
pub const VIEWPORT: (u32, u32) = (390, 844);
/// Longest a page may take to show something before a test fails (a loaded 2-core machine
/// starts Chromium slowly; this is a deadline, not a measurement).
pub const PAGE_STEP: Duration = Duration::from_secs(30);
/// How often a condition on the page is checked while waiting.
const POLL: Duration = Duration::from_millis(25);

/// One Chromium at a time: a dozen at once would starve the other tests of a small machine.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Colour scheme the page is shown in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Light,
    Dark,
}

/// A chromedriver process and one headless Chromium session; both end when dropped, even when the
/// test panics before [`Browser::close`].
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// The browser's profile (`--user-data-dir`); `None` once [`Browser::quit`] handed it out.
    profile: Option<tempfile::TempDir>,
    /// The one-browser turn; `None` for a second browser started beside one that holds it.
    _turn: Option<tokio::sync::MutexGuard<'static, ()>>,
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| names.iter().map(move |name| dir.join(name))).find(|p| p.is_file())
}

impl Browser {
    /// A browser at the phone viewport in the light scheme, or `None` (with a note on stderr) where
    /// Chromium or chromedriver is not installed outside CI. Under CI (`CI` set, as `.ci/run`
    /// runs, after installing both) a missing browser fails the test.
    pub async fn start() -> Option<Browser> {
        Self::start_with(Scheme::Light).await
    }

    pub async fn start_with(scheme: Scheme) -> Option<Browser> {
        Self::start_with_args(scheme, &[]).await
    }

    /// A browser with extra Chromium switches (fake media devices, for instance).
    pub async fn start_with_args(scheme: Scheme, extra: &[String]) -> Option<Browser> {
        Self::launch(scheme, extra, true).await
    }

    /// A second, separate browser (its own Chromium and profile: another device, not another
    /// tab) beside this one, within this one's turn.
    pub async fn another(&self, scheme: Scheme) -> Browser {
        Self::launch(scheme, &[], false).await.expect("a browser starts where one already runs")
    }

    async fn launch(scheme: Scheme, extra: &[String], take_turn: bool) -> Option<Browser> {
        let chromium = on_path(&["chromium", "chromium-browser", "google-chrome"]);
        let driver = on_path(&["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let advice = "Chromium or chromedriver is not installed: install chromium and chromium-driver \
                          (apt-get install chromium chromium-driver) to run the web client tests";
            if std::env::var_os("CI").is_some() {
                panic!("{advice}");
            }
            eprintln!("skipped: {advice}");
            return None;
        };
        let turn = if take_turn { Some(ONE_BROWSER.lock().await) } else { None };
        let mut child = Command::new(driver)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        // chromedriver prints the port it chose once it accepts connections.
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = tokio::time::timeout(PAGE_STEP, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    return rest.trim_end_matches('.').parse::<u16>().unwrap();
                }
            }
            panic!("chromedriver exited before it was ready");
        })
        .await
        .expect("chromedriver ready in time");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let profile = tempfile::tempdir().unwrap();
        let (width, height) = VIEWPORT;
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--hide-scrollbars".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
            format!("--window-size={width},{height}"),
        ];
        if scheme == Scheme::Dark {
            args.push("--force-dark-mode".to_owned());
        }
        args.extend(extra.iter().cloned());
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": args,
                "mobileEmulation": {"deviceMetrics": {"width": width, "height": height, "pixelRatio": 1.0, "touch": true}},
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = tokio::time::timeout(
            PAGE_STEP,
            ClientBuilder::new(connector).capabilities(capabilities).connect(&format!("http://127.0.0.1:{port}")),
        )
        .await
        .expect("Chromium starts in time")
        .expect("a WebDriver session");
        let browser = Browser { client, driver: child, profile: Some(profile), _turn: turn };
        if scheme == Scheme::Dark {
            browser
                .cdp(
                    "Emulation.setEmulatedMedia",
                    json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
                )
                .await;
        }
        Some(browser)
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

    /// Process ids of this browser's Chromium processes whose command line holds `kind`
    /// (`--type=renderer`, the audio service, …), read from /proc.
    pub fn processes(&self, kind: &str) -> Vec<u32> {
        let Some(profile) = &self.profile else { return Vec::new() };
        let profile = format!("--user-data-dir={}", profile.path().display());
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

    /// Ends the session (Chromium quits) and chromedriver, and lets the next browser start.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
    }

    /// Ends the session as a person quits the browser (Chromium writes its profile on the way
    /// out), waits until its last process has gone, and hands over the profile to read.
    pub async fn quit(mut self) -> tempfile::TempDir {
        let _ = self.client.clone().close().await;
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        while !self.processes("").is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "Chromium did not quit in time");
            tokio::time::sleep(POLL).await;
        }
        let _ = self.driver.kill().await;
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

    /// Runs a Chrome DevTools command in the page's tab.
    pub async fn cdp(&self, method: &str, params: Value) -> Value {
        self.client
            .issue_cmd(Raw::post("goog/cdp/execute", json!({"cmd": method, "params": params})))
            .await
            .unwrap_or_else(|err| panic!("{method}: {err}"))
    }

    pub async fn script(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.expect("script runs")
    }

    /// Computed accessible role and name of an element, as assistive technology gets them.
    pub async fn accessible(&self, element: &Element) -> (String, String) {
        let id = element.element_id().as_ref().to_owned();
        let role = self.client.issue_cmd(Raw::get(&format!("element/{id}/computedrole"))).await;
        let name = self.client.issue_cmd(Raw::get(&format!("element/{id}/computedlabel"))).await;
        let text = |value: Result<Value, _>| value.ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        (text(role), text(name))
    }

    /// The one displayed element with this role and accessible name, waiting until it appears.
    pub async fn control(&self, role: &str, name: &str) -> Element {
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        loop {
            let mut found = Vec::new();
            let candidates = self
                .client
                .find_all(Locator::Css("button, input, textarea, select, a, [role], img, dialog"))
                .await
                .unwrap_or_default();
            for element in candidates {
                if !element.is_displayed().await.unwrap_or(false) {
                    continue;
                }
                let (computed_role, computed_name) = self.accessible(&element).await;
                if computed_role == role && computed_name == name {
                    found.push(element);
                }
            }
            match found.len() {
                1 => return found.pop().unwrap(),
                0 => {}
                n => panic!("{n} displayed controls are {role} {name:?}: names must be unique"),
            }
            assert!(tokio::time::Instant::now() < deadline, "no displayed {role} named {name:?} on the page");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the button with this accessible name.
    pub async fn press(&self, name: &str) {
        let button = self.control("button", name).await;
        // Into the middle of the screen first: the header stays on top while the page scrolls and
        // would take a click meant for a button scrolled under it.
        let element = serde_json::to_value(&button).expect("an element reference");
        self.script("arguments[0].scrollIntoView({block: 'center'});", vec![element]).await;
        button.click().await.expect("click");
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
                last = element.text().await.unwrap_or_default();
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
            let text = region.text().await.unwrap_or_default();
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

impl Drop for Browser {
    fn drop(&mut self) {
        // Chromium outlives chromedriver when nobody ends the session: end its processes (those on
        // this browser's own profile), by id.
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
