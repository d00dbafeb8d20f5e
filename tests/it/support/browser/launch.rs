//! Starting each engine's WebDriver server and one session at the phone viewport: chromedriver and
//! headless Chromium; geckodriver (built once into the build directory when missing) and headless
//! Firefox in kiosk mode; WebKitWebDriver and MiniBrowser full screen on an Xvfb display started
//! for it.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::{missing, on_path, Engine, Scheme, PAGE_STEP, VIEWPORT};

/// The geckodriver `.ci/run` and [`geckodriver`] build (crates.io, with its own lock file).
pub const GECKODRIVER_VERSION: &str = "0.37.1";

/// The programs one engine needs, found on this machine.
pub(super) struct Programs {
    browser: PathBuf,
    driver: PathBuf,
}

/// A started WebDriver server and its session.
pub(super) struct Launched {
    pub client: Client,
    pub driver: Child,
    pub display: Option<Child>,
    pub profile: tempfile::TempDir,
}

impl Programs {
    /// The browser and its driver, or `None` (outside CI) with the packages to install.
    pub async fn find(engine: Engine) -> Option<Programs> {
        match engine {
            Engine::Chromium => {
                let browser = on_path(&["chromium", "chromium-browser", "google-chrome"]);
                match (browser, on_path(&["chromedriver"])) {
                    (Some(browser), Some(driver)) => Some(Programs { browser, driver }),
                    _ => missing(
                        "Chromium or chromedriver is not installed: install chromium and chromium-driver \
                         (apt-get install chromium chromium-driver) to run the web client tests",
                    ),
                }
            }
            Engine::Firefox => {
                let Some(browser) = on_path(&["firefox-esr", "firefox"]) else {
                    return missing("Firefox is not installed: install firefox-esr (apt-get install firefox-esr)");
                };
                let driver = geckodriver().await?;
                Some(Programs { browser, driver })
            }
            Engine::WebKit => {
                if on_path(&["Xvfb"]).is_none() {
                    return missing("Xvfb is not installed: install xvfb (apt-get install xvfb) to run WebKit");
                }
                match on_path(&["WebKitWebDriver"]) {
                    // MiniBrowser, the driver's default browser, comes with WebKitGTK itself.
                    Some(driver) => Some(Programs { browser: PathBuf::new(), driver }),
                    None => missing(
                        "WebKitWebDriver is not installed: install webkit2gtk-driver \
                         (apt-get install webkit2gtk-driver) to run the WebKit tests",
                    ),
                }
            }
        }
    }
}

/// The build directory: where cargo put the `voxa` binary these tests run, two levels up.
fn build_dir() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_voxa"));
    bin.parent().and_then(Path::parent).expect("the voxa binary lies in <build dir>/<profile>/").to_path_buf()
}

/// geckodriver: on `PATH`, else in `<build dir>/geckodriver/bin` where `.ci/run` installs it;
/// built there from crates.io when missing (once per build directory: a few minutes). `None`
/// (outside CI) when it cannot be built.
pub(super) async fn geckodriver() -> Option<PathBuf> {
    static BUILT: tokio::sync::OnceCell<Option<PathBuf>> = tokio::sync::OnceCell::const_new();
    if let Some(found) = on_path(&["geckodriver"]) {
        return Some(found);
    }
    let root = build_dir().join("geckodriver");
    let program = root.join("bin/geckodriver");
    BUILT
        .get_or_init(|| async {
            if program.is_file() {
                return Some(program);
            }
            eprintln!("building geckodriver {GECKODRIVER_VERSION} into {} (once)", root.display());
            let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .args(["install", "geckodriver", "--locked", "--version", GECKODRIVER_VERSION, "--root"])
                .arg(&root)
                .env("CARGO_TARGET_DIR", root.join("build"))
                .stdin(Stdio::null())
                .status()
                .await;
            match status {
                Ok(status) if status.success() && program.is_file() => Some(program),
                _ => missing(&format!(
                    "geckodriver could not be built: run `cargo install geckodriver --locked --version \
                     {GECKODRIVER_VERSION} --root {}`",
                    root.display()
                )),
            }
        })
        .await
        .clone()
}

/// Starts the driver and a session of `engine` at the phone viewport in `scheme`.
pub(super) async fn launch(engine: Engine, programs: Programs, scheme: Scheme, extra: &[String]) -> Launched {
    let profile = tempfile::tempdir().unwrap();
    let (width, height) = VIEWPORT;
    let (driver, display, port, capabilities) = match engine {
        Engine::Chromium => {
            let (driver, port) = chromedriver(&programs.driver).await;
            (driver, None, port, chromium_capabilities(&programs.browser, profile.path(), scheme, extra))
        }
        Engine::Firefox => {
            let (driver, port) = gecko(&programs.driver).await;
            (driver, None, port, firefox_capabilities(&programs.browser, profile.path(), scheme, extra))
        }
        Engine::WebKit => {
            let (display, number) = xvfb().await;
            let (driver, port) = webkit_driver(&programs.driver, &number, profile.path()).await;
            (driver, Some(display), port, webkit_capabilities(scheme, extra))
        }
    };
    let Value::Object(capabilities) = capabilities else { unreachable!() };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = tokio::time::timeout(
        PAGE_STEP * 2,
        ClientBuilder::new(connector).capabilities(capabilities).connect(&format!("http://127.0.0.1:{port}")),
    )
    .await
    .unwrap_or_else(|_| panic!("{} starts in time", engine.name()))
    .unwrap_or_else(|err| panic!("a {} WebDriver session: {err}", engine.name()));
    if engine != Engine::Chromium {
        // Without browser chrome (kiosk, full screen), the window is the viewport.
        client.set_window_rect(0, 0, width, height).await.expect("the window takes the phone's size");
    }
    Launched { client, driver, display, profile }
}

fn chromium_capabilities(chromium: &Path, profile: &Path, scheme: Scheme, extra: &[String]) -> Value {
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
        format!("--user-data-dir={}", profile.display()),
        format!("--window-size={width},{height}"),
    ];
    if scheme == Scheme::Dark {
        args.push("--force-dark-mode".to_owned());
    }
    args.extend(extra.iter().cloned());
    json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": args,
            "mobileEmulation": {"deviceMetrics": {"width": width, "height": height, "pixelRatio": 1.0, "touch": true}},
        },
    })
}

/// Firefox's window keeps a minimum width for its toolbars even in kiosk mode; the profile's own
/// style sheet lets it be a phone's.
const FIREFOX_CHROME_CSS: &str =
    ":root, #main-window, #browser, #navigator-toolbox, #nav-bar, #TabsToolbar, #tabbrowser-tabs { min-width: 0 !important; }\n";

fn firefox_capabilities(firefox: &Path, profile: &Path, scheme: Scheme, extra: &[String]) -> Value {
    std::fs::create_dir_all(profile.join("chrome")).unwrap();
    std::fs::write(profile.join("chrome/userChrome.css"), FIREFOX_CHROME_CSS).unwrap();
    let mut args =
        vec!["-headless".to_owned(), "-kiosk".to_owned(), "-profile".to_owned(), profile.display().to_string()];
    args.extend(extra.iter().cloned());
    json!({
        "browserName": "firefox",
        "moz:firefoxOptions": {
            "binary": firefox,
            "args": args,
            "prefs": {
                "toolkit.legacyUserProfileCustomizations.stylesheets": true,
                // 0 dark, 1 light: what `prefers-color-scheme` says to pages.
                "layout.css.prefers-color-scheme.content-override": if scheme == Scheme::Dark { 0 } else { 1 },
                // Scrollbars over the page, as a phone draws them, not beside it.
                "ui.useOverlayScrollbars": 1,
                "browser.shell.checkDefaultBrowser": false,
                "datareporting.policy.dataSubmissionEnabled": false,
            },
        },
    })
}

fn webkit_capabilities(scheme: Scheme, extra: &[String]) -> Value {
    let mut args = vec!["--automation".to_owned(), "--full-screen".to_owned()];
    if scheme == Scheme::Dark {
        args.push("--dark-mode".to_owned());
    }
    args.extend(extra.iter().cloned());
    json!({"webkitgtk:browserOptions": {"args": args}})
}

/// chromedriver on a port of its choosing; it prints the port once it accepts connections.
async fn chromedriver(program: &Path) -> (Child, u16) {
    ready_driver("chromedriver", "started successfully on port ", || {
        let mut command = Command::new(program);
        command.arg("--port=0");
        command
    })
    .await
}

/// geckodriver on a port of its choosing, the screen of headless Firefox a phone's.
async fn gecko(program: &Path) -> (Child, u16) {
    let (width, height) = VIEWPORT;
    ready_driver("geckodriver", "Listening on 127.0.0.1:", || {
        let mut command = Command::new(program);
        command
            .args(["--port", "0"])
            .env("MOZ_HEADLESS_WIDTH", width.to_string())
            .env("MOZ_HEADLESS_HEIGHT", height.to_string());
        command
    })
    .await
}

/// Starts a driver made by `command` until it names its port, at most three times: on a
/// machine busy with other tests a driver now and then ends before it is ready (chromedriver
/// did, once in a few full runs), which says nothing of the page under test.
async fn ready_driver(name: &str, marker: &str, command: impl Fn() -> Command) -> (Child, u16) {
    let mut ended = Vec::new();
    for _ in 0..3 {
        let mut child = spawn(&mut command(), name);
        if let Some(port) = announced_port(child.stdout.take().unwrap(), marker, name).await {
            return (child, port);
        }
        ended.push(child.wait().await.map_or_else(|err| err.to_string(), |status| status.to_string()));
    }
    panic!("{name} exited before it was ready, three times: {ended:?}");
}

/// Reads a driver's output until it names its port (`None`: it ended first); the rest of its
/// output is read and dropped.
async fn announced_port(out: impl AsyncRead + Unpin + Send + 'static, marker: &str, name: &str) -> Option<u16> {
    let mut lines = BufReader::new(out).lines();
    let port = tokio::time::timeout(PAGE_STEP, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.split(marker).nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                return Some(digits.parse::<u16>().unwrap());
            }
        }
        None
    })
    .await
    .unwrap_or_else(|_| panic!("{name} ready in time"))?;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(port)
}

fn spawn(command: &mut Command, name: &str) -> Child {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("{name} starts: {err}"))
}

/// An Xvfb server on a free display; it writes the display's number once it accepts clients.
async fn xvfb() -> (Child, String) {
    let mut command = Command::new("Xvfb");
    command.args(["-displayfd", "1", "-screen", "0", "1280x1024x24", "-nolisten", "tcp"]);
    let mut child = spawn(&mut command, "Xvfb");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(PAGE_STEP, lines.next_line()).await.expect("Xvfb ready in time").unwrap();
    let number = line.unwrap_or_default();
    assert!(!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()), "Xvfb did not start: {number:?}");
    (child, format!(":{number}"))
}

/// WebKitWebDriver on `display`. It takes no port 0: a port free a moment ago is given, and the
/// driver is ready once a WebDriver answers its status there — not merely something listening,
/// since another process of a busy machine may have taken the port meanwhile (another port is
/// tried if the driver exits).
async fn webkit_driver(program: &Path, display: &str, profile: &Path) -> (Child, u16) {
    for _ in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut command = Command::new(program);
        command
            .arg(format!("--port={port}"))
            .env("DISPLAY", display)
            .env_remove("WAYLAND_DISPLAY")
            // The browser's caches and data in this browser's own directory.
            .env("XDG_CACHE_HOME", profile.join("cache"))
            .env("XDG_DATA_HOME", profile.join("data"))
            .env("XDG_CONFIG_HOME", profile.join("config"));
        let mut child = spawn(&mut command, "WebKitWebDriver");
        let deadline = tokio::time::Instant::now() + PAGE_STEP;
        loop {
            if answers_as_webdriver(port).await {
                return (child, port);
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "WebKitWebDriver ready in time");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    panic!("WebKitWebDriver did not start on a free port");
}

/// Whether a WebDriver server answers `GET /status` on `port` of loopback.
async fn answers_as_webdriver(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return false };
    let request = format!("GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PAGE_STEP, stream.read_to_end(&mut answer)).await;
    matches!(read, Ok(Ok(_))) && String::from_utf8_lossy(&answer).contains("\"ready\"")
}
