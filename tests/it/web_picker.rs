//! The page as a person holding a phone uses it, in a real Chromium at 390×844 against the real
//! relay and agents: the machine picker (laptops, their environments, names the user gives them,
//! forgetting), the reconnect countdown, and two separate browsers on one link.

use std::time::Duration;

use fantoccini::Locator;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::support::browser::{Browser, Scheme};
use crate::support::harness::*;
use crate::support::scene::{Machine, Scene, SMALL_CONTROLS, TERMINAL};

/// How long a test waits for the page to come back by itself after a relay restart: its backoff
/// (full jitter, doubling to 30 s) and the agent's may each take their longest wait.
const BACK_ONLINE: Duration = Duration::from_secs(120);

/// The laptop's host name, as its hello names it (every agent of a test runs on this machine).
fn host() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// What the header's machine button shows.
async fn header_names(browser: &Browser) -> String {
    browser.wait_text("#machine-name", "the machine's name in the header", |t| !t.is_empty()).await
}

/// Opens the machine sheet from the header, as a tap on the machine's name does.
async fn open_machines(browser: &Browser) {
    browser.client.find(Locator::Css("#machine")).await.expect("the machine button").click().await.expect("tap");
    browser.wait_script("the machine sheet to open", "return document.getElementById('machines').open;").await;
}

/// The laptops the sheet lists, by the names their buttons carry.
async fn listed(browser: &Browser) -> Value {
    browser
        .script(
            "return [...document.querySelectorAll('#machine-list > li > .machine-choice')].map((b) => b.getAttribute('aria-label'));",
            vec![],
        )
        .await
}

/// Waits for the header to say `name` with the page online again.
async fn online_as(browser: &Browser, name: &str) {
    browser.wait_connection("online").await;
    browser.wait_text("#machine-name", "the machine in use", |t| t == name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_picker_switches_laptops_and_environments_and_keeps_the_names_given() {
    use voxa::environments::{self, store};
    use voxa::state::Home;
    let Some(scene) = Scene::start().await else { return };
    std::fs::write(scene.workspace().join("on-the-laptop.txt"), "laptop").unwrap();
    // A second laptop, which this laptop also reaches as its environment "devbox".
    let devbox = Machine::start(&scene.relay, "on-the-devbox.txt").await;
    let env_home = Home::at(devbox.home.path().join("voxa"));
    let env_token = store::load_or_create_host_token(&env_home).unwrap();
    let issued = environments::issue(&env_home, &scene.relay.url(), env_token.expose()).unwrap();
    let host_home = Home::at(scene.home.path().join("voxa"));
    let host_token = store::load_or_create_host_token(&host_home).unwrap();
    environments::add(&host_home, &issued.line.encode(), Some("devbox"), host_token.expose()).unwrap();
    let mut probe = phone_socket(&scene.relay, issued.line.code.expose()).await;
    wait_agent_joined(&mut probe).await;
    drop(probe);

    let browser = &scene.browser;
    let (code, token) = (devbox.secrets.relay_code.expose(), devbox.secrets.auth_token.expose());
    browser.pair(&format!("http://{}/#code={code}&token={token}", scene.relay.addr)).await;
    browser.wait_connection("online").await;
    // One laptop: the header names it, and that is all it adds.
    assert_eq!(header_names(browser).await, host());
    scene.open_online().await;
    // Two laptops with one host name are told apart by their codes.
    let laptop = format!("{} · {}", host(), &scene.code()[..4]);
    let other = format!("{} · {}", host(), &code[..4]);
    online_as(browser, &laptop).await;
    browser.press("Files").await;
    browser.control("button", "on-the-laptop.txt").await;

    // The sheet: both laptops, the one in use marked, its environment nested under it.
    open_machines(browser).await;
    assert_eq!(listed(browser).await, json!([laptop, other]));
    let current = browser.control("button", &laptop).await;
    assert_eq!(current.attr("aria-current").await.unwrap().as_deref(), Some("true"));
    let nested = browser
        .script(
            "const [first, second] = document.querySelectorAll('#machine-list > li');
             return [[...first.querySelectorAll('.machine-envs button')].map((b) => b.getAttribute('aria-label')),
                     second.querySelectorAll('.machine-envs').length];",
            vec![],
        )
        .await;
    assert_eq!(nested, json!([[format!("devbox on {laptop}")], 0]), "environments nest under their laptop");
    let small = browser.script(SMALL_CONTROLS, vec![]).await;
    assert_eq!(small, json!([]), "controls in the sheet under 44 × 44 px");
    // Escape closes it and gives the focus back to the header button.
    browser.client.active_element().await.unwrap().send_keys("\u{E00C}").await.unwrap();
    browser
        .wait_script(
            "the sheet to close",
            "return !document.getElementById('machines').open && document.activeElement.id === 'machine';",
        )
        .await;

    // Choosing the environment sends the calls there; the header says where they go.
    open_machines(browser).await;
    browser.press(&format!("devbox on {laptop}")).await;
    browser.wait_text("#machine-name", "the environment in the header", |t| t == format!("{laptop} › devbox")).await;
    browser.control("button", "on-the-devbox.txt").await;
    // The header stays one line at phone width: logo, machine, Call.
    let line = browser
        .script(
            "const bar = document.querySelector('.bar-top');
             const tops = [...bar.children].filter((c) => c.getClientRects().length)
               .map((c) => Math.round(c.getBoundingClientRect().top + c.getBoundingClientRect().height / 2));
             return {rows: new Set(tops).size, fits: bar.scrollWidth <= bar.clientWidth};",
            vec![],
        )
        .await;
    assert_eq!(line, json!({"rows": 1, "fits": true}), "the header wrapped or overflowed");
    browser.press("Terminal").await;
    browser.type_into("Command", "ls").await;
    browser.press("Run").await;
    let shown = browser.wait_text(TERMINAL, "the listing", |t| t.contains("exit 0")).await;
    assert!(shown.contains("on-the-devbox.txt") && !shown.contains("on-the-laptop.txt"), "{shown}");

    // The other laptop gets a name of the user's; it holds over a reload.
    open_machines(browser).await;
    browser.press(&format!("Rename {other}")).await;
    let field = browser.control("textbox", &format!("Name for {other}")).await;
    field.clear().await.unwrap();
    field.send_keys("  build   box ").await.unwrap();
    browser.press("Save").await;
    browser.control("button", "build box").await;
    // With the twin renamed, the first laptop is its host name alone.
    assert_eq!(listed(browser).await, json!([host(), "build box"]));
    browser.press("build box").await;
    online_as(browser, "build box").await;
    browser.press("Files").await;
    browser.control("button", "on-the-devbox.txt").await;
    browser.client.refresh().await.unwrap();
    online_as(browser, "build box").await;
    open_machines(browser).await;
    assert_eq!(listed(browser).await, json!([host(), "build box"]), "the laptops keep their places");
    let current = browser.control("button", "build box").await;
    assert_eq!(current.attr("aria-current").await.unwrap().as_deref(), Some("true"));
    // The laptop not in use still lists the environment it had.
    browser.control("button", &format!("devbox on {}", host())).await;
    // A name given and taken back: an empty name shows the host name again.
    browser.press(&format!("Rename {}", host())).await;
    let work = format!("{} (work)", host());
    let field = browser.control("textbox", &format!("Name for {}", host())).await;
    field.clear().await.unwrap();
    field.send_keys(&work).await.unwrap();
    browser.press("Save").await;
    assert_eq!(listed(browser).await, json!([work, "build box"]));
    browser.press(&format!("Rename {work}")).await;
    browser.control("textbox", &format!("Name for {work}")).await.clear().await.unwrap();
    browser.press("Save").await;
    assert_eq!(listed(browser).await, json!([host(), "build box"]));

    // Forgetting asks first; "Keep it" keeps it, "Forget it" moves to the other laptop.
    browser.press("Forget build box").await;
    let question = browser.wait_text(".forget-question", "the question", |t| !t.is_empty()).await;
    assert!(question.starts_with("Forget build box? This browser will need its pairing link again"), "{question}");
    browser.press("Keep it").await;
    assert_eq!(listed(browser).await, json!([host(), "build box"]));
    browser.press("Forget build box").await;
    browser.press("Forget it").await;
    online_as(browser, &host()).await;
    assert_eq!(listed(browser).await, json!([host()]));
    let stored = browser.script("return localStorage.getItem('voxa.pairings');", vec![]).await;
    let stored = stored.as_str().unwrap();
    assert!(!stored.contains(code) && !stored.contains("build box"), "the forgotten laptop stayed stored: {stored}");
    devbox.agent.stop().await;
    scene.close().await;
}

/// The number in "reconnecting in N s", if the connection says that.
fn countdown(text: &str) -> Option<u64> {
    text.split("reconnecting in ").nth(1)?.split(" s").next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconnect_countdown_counts_and_a_relay_back_on_its_port_brings_the_page_online() {
    let Some(mut scene) = Scene::start().await else { return };
    scene.open_online().await;
    let addr = scene.relay.addr;
    let stand_in = TestRelay::start().await;
    std::mem::replace(&mut scene.relay, stand_in).kill().await;
    let browser = &scene.browser;
    let region = browser.control("status", "Connection").await;
    // Read the countdown, a second and more later read it again: it went down. (A short wait of
    // the backoff may end between the two readings; then the next one is read.)
    let deadline = tokio::time::Instant::now() + BACK_ONLINE;
    let counted = loop {
        assert!(tokio::time::Instant::now() < deadline, "the countdown never counted");
        let first = region.text().await.unwrap_or_default();
        let Some(before) = countdown(&first).filter(|n| *n >= 3) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let second = region.text().await.unwrap_or_default();
        if let Some(after) = countdown(&second) {
            if after < before {
                break (first, second);
            }
        }
    };
    assert!(counted.0.starts_with("offline — reconnecting in"), "{counted:?}");
    // The relay back on the same port: the page is online again by itself, no reload, no tap.
    let restarted = TestRelay::start_with(TcpListener::bind(addr).await.unwrap(), Default::default()).await;
    let _ = std::mem::replace(&mut scene.relay, restarted);
    let deadline = tokio::time::Instant::now() + BACK_ONLINE;
    loop {
        let text = region.text().await.unwrap_or_default();
        if text.contains("online") && !text.contains("offline") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the page never came back online; it says {text:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.type_into("Command", "echo back-again").await;
    browser.press("Run").await;
    browser.wait_text(TERMINAL, "the command after the restart", |t| t.contains("back-again\n")).await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_on_one_link_both_stay_online_and_both_see_a_command() {
    let Some(scene) = Scene::start().await else { return };
    let first = &scene.browser;
    scene.open_online().await;
    // Another device: its own Chromium, its own profile and storage.
    let second = first.another(Scheme::Dark).await;
    second.pair(&scene.link()).await;
    second.wait_connection("online").await;
    let command = "echo begun; sleep 2; echo from-the-second-browser";
    second.type_into("Command", command).await;
    second.press("Run").await;
    second.wait_text(TERMINAL, "the command's end", |t| t.contains("exit 0")).await;

    // The first browser was not put aside: still online, and it shows the other's command.
    let said = first.wait_connection("online").await;
    assert!(!said.contains("another window"), "{said}");
    let shown = first.wait_text(TERMINAL, "the other browser's command", |t| t.contains("exit 0")).await;
    assert!(shown.contains(&format!("$ {command}\nbegun\nfrom-the-second-browser")), "{shown}");
    // And the other way round.
    first.type_into("Command", "echo from-the-first-browser").await;
    first.press("Run").await;
    let seen =
        second.wait_text(TERMINAL, "the first browser's command", |t| t.contains("from-the-first-browser\n")).await;
    assert!(seen.contains("$ echo from-the-first-browser"), "{seen}");
    second.wait_connection("online").await;
    // Both are listed as connected.
    first.press("Status").await;
    first.wait_text("#connected", "both browsers listed", |t| t.matches("phone or browser").count() == 2).await;
    second.close().await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_environments_read_back_from_storage_are_bounded_and_shown_as_text() {
    let Some(scene) = Scene::start().await else { return };
    let browser = &scene.browser;
    scene.open_online().await;
    // Storage written by anything else on the origin: a long name with markup, environments of
    // every wrong shape, one right.
    let planted = browser
        .script(
            "const stored = JSON.parse(localStorage.getItem('voxa.pairings'));
             stored.list[0].alias = '<img src=x onerror=\"window.ran = 1\">' + 'x'.repeat(500);
             stored.list[0].environments = [null, 7, {envKey: 3, name: 'n'}, {envKey: '', name: 'empty'},
               {envKey: 'k'.repeat(300), name: 'kept'}];
             localStorage.setItem('voxa.pairings', JSON.stringify(stored));
             return stored.list.length;",
            vec![],
        )
        .await;
    assert_eq!(planted, json!(1));
    browser.client.refresh().await.unwrap();
    browser.wait_connection("online").await;
    open_machines(browser).await;
    let shown = browser
        .script(
            "const label = document.querySelector('#machine-list .machine-label').textContent;
             return [label.length, label.startsWith('<img src=x'), document.querySelectorAll('#machines img').length,
                     window.ran === undefined, localStorage.getItem('voxa.pairings').includes('x'.repeat(41))];",
            vec![],
        )
        .await;
    assert_eq!(
        shown,
        json!([40, true, 0, true, false]),
        "the name is cut to 40 characters, kept as text, stored back cut"
    );
    // The laptop's own answer (no `fleet` here) replaces what storage said about environments.
    let environments =
        browser.script("return document.querySelectorAll('#machine-list .machine-envs button').length;", vec![]).await;
    assert_eq!(environments, json!(0));
    scene.close().await;
}
