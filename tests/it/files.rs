//! Files without surprises and output for long work: the file tools driven as a phone drives them
//! through the real relay (versions and `conflict`, new, move, delete to the trash and restore,
//! upload and download in chunks, the fence for each), `run_command`'s head and tail, and the same
//! in the real page in headless Chromium at a phone's size.

use std::path::Path;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::support::browser::{Browser, Scheme, VIEWPORT};
use crate::support::harness::*;
use voxa::net::dial::ClientSocket;

/// One tool call from `socket`, answered by its result frame.
async fn call(socket: &mut ClientSocket, id: &str, name: &str, args: Value) -> Value {
    send(socket, json!({"type": "tool_call", "id": id, "name": name, "args": args})).await;
    recv_result(socket, id).await
}

fn ok(result: &Value) -> &Value {
    assert_eq!(result["ok"], true, "{result}");
    &result["result"]
}

fn refused(result: &Value) -> &str {
    assert_eq!(result["ok"], false, "{result}");
    result["error"]["code"].as_str().unwrap()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An agent on a relay, a phone through it, and a directory outside the workspace.
struct Phone {
    _relay: TestRelay,
    agent: TestAgent,
    socket: ClientSocket,
    outside: tempfile::TempDir,
}

impl Phone {
    async fn start() -> Phone {
        let relay = TestRelay::start().await;
        let agent = TestAgent::start(Some(relay.url())).await;
        let socket = agent.phone(&relay).await;
        Phone { _relay: relay, agent, socket, outside: tempfile::tempdir().unwrap() }
    }

    fn ws(&self) -> &Path {
        self.agent.workspace.path()
    }

    async fn call(&mut self, id: &str, name: &str, args: Value) -> Value {
        call(&mut self.socket, id, name, args).await
    }
}

#[tokio::test]
async fn a_save_over_a_change_made_on_the_laptop_is_refused_conflict_and_both_versions_are_offered() {
    let mut phone = Phone::start().await;
    std::fs::write(phone.ws().join("notes.md"), "first draft\n").unwrap();
    let read = phone.call("r1", "read_file", json!({"path": "notes.md"})).await;
    let mine_was = ok(&read)["version"].as_str().unwrap().to_owned();
    assert!(mine_was.starts_with("sha256:"), "{mine_was}");

    // Someone edits the file on the laptop meanwhile, same size and all.
    std::fs::write(phone.ws().join("notes.md"), "FIRST DRAFT\n").unwrap();
    let save = json!({"path": "notes.md", "content": "my edit\n", "version": mine_was});
    let refusal = phone.call("w1", "write_file", save).await;
    assert_eq!(refused(&refusal), "conflict", "{refusal}");
    assert!(refusal["error"]["message"].as_str().unwrap().contains("changed on the laptop"), "{refusal}");
    assert_eq!(std::fs::read_to_string(phone.ws().join("notes.md")).unwrap(), "FIRST DRAFT\n", "nothing replaced");

    // Theirs is one read away, with its version; keeping mine over it is a choice made with it.
    let theirs = phone.call("r2", "read_file", json!({"path": "notes.md"})).await;
    let theirs = ok(&theirs).clone();
    assert_eq!(theirs["content"], "FIRST DRAFT\n");
    assert_ne!(theirs["version"], mine_was);
    let keep_mine = json!({"path": "notes.md", "content": "my edit\n", "version": theirs["version"]});
    let saved = phone.call("w2", "write_file", keep_mine).await;
    let saved = ok(&saved);
    // The answer carries the new size and version: nothing shown after a save is stale.
    assert_eq!((saved["size"].as_u64(), saved["bytes_written"].as_u64()), (Some(8), Some(8)));
    let again = phone.call("r3", "read_file", json!({"path": "notes.md"})).await;
    assert_eq!(ok(&again)["version"], saved["version"]);
    assert_eq!(std::fs::read_to_string(phone.ws().join("notes.md")).unwrap(), "my edit\n");

    // A new file is created only where none is.
    let create = json!({"path": "notes.md", "content": "", "version": "new"});
    assert_eq!(refused(&phone.call("n1", "write_file", create).await), "conflict");
    let create = json!({"path": "todo.md", "content": "- one\n", "version": "new"});
    ok(&phone.call("n2", "write_file", create).await);
    assert_eq!(std::fs::read_to_string(phone.ws().join("todo.md")).unwrap(), "- one\n");
}

#[tokio::test]
async fn new_move_delete_restore_upload_and_download_work_and_are_audited() {
    let mut phone = Phone::start().await;
    std::fs::create_dir(phone.ws().join("src")).unwrap();
    std::fs::write(phone.ws().join("src/lib.rs"), "pub fn x() {}\n").unwrap();

    let moved = phone.call("m1", "move_file", json!({"from": "src/lib.rs", "to": "src/main.rs"})).await;
    assert_eq!(ok(&moved)["to"], "src/main.rs");
    assert!(phone.ws().join("src/main.rs").is_file() && !phone.ws().join("src/lib.rs").exists());
    std::fs::write(phone.ws().join("taken"), "keep").unwrap();
    let onto = phone.call("m2", "move_file", json!({"from": "src/main.rs", "to": "taken"})).await;
    assert_eq!(refused(&onto), "conflict");
    assert_eq!(std::fs::read_to_string(phone.ws().join("taken")).unwrap(), "keep");

    // Deleting moves to the trash in the home; the trash lists it and restore brings it back.
    let deleted = phone.call("d1", "delete_file", json!({"path": "src"})).await;
    let id = ok(&deleted)["trash"].as_str().unwrap().to_owned();
    assert!(!phone.ws().join("src").exists());
    let home_trash = phone.agent.home.path().join("voxa/trash").join(&id);
    assert!(home_trash.join("item/main.rs").is_file(), "the trash is in the home");
    let listed = phone.call("t1", "list_trash", json!({})).await;
    let items = ok(&listed)["items"].as_array().unwrap().clone();
    assert_eq!((items.len(), items[0]["path"].as_str(), items[0]["id"].as_str()), (1, Some("src"), Some(id.as_str())));
    let restored = phone.call("t2", "restore_file", json!({"id": id})).await;
    assert_eq!(ok(&restored)["path"], "src");
    assert_eq!(std::fs::read_to_string(phone.ws().join("src/main.rs")).unwrap(), "pub fn x() {}\n");
    assert_eq!(ok(&phone.call("t3", "list_trash", json!({})).await)["items"], json!([]));

    // An upload in chunks appears whole with the last one; a download reads it back in parts.
    let bytes: Vec<u8> = (0..700_000u32).map(|n| (n % 251) as u8).collect();
    let chunk = 300_000;
    for (index, part) in bytes.chunks(chunk).enumerate() {
        let offset = index * chunk;
        let done = offset + part.len() == bytes.len();
        let args = json!({"path": "big.bin", "data": b64(part), "offset": offset, "done": done, "version": "new"});
        let sent = phone.call(&format!("u{index}"), "upload_file", args).await;
        assert_eq!(ok(&sent)["received"], offset + part.len());
        assert_eq!(phone.ws().join("big.bin").exists(), done, "visible only once whole");
    }
    assert_eq!(std::fs::read(phone.ws().join("big.bin")).unwrap(), bytes);
    let mut back = Vec::new();
    while back.len() < bytes.len() {
        let args = json!({"path": "big.bin", "offset": back.len(), "max_bytes": 200_000, "encoding": "base64"});
        let part = phone.call(&format!("g{}", back.len()), "read_file", args).await;
        let part = ok(&part);
        assert_eq!(part["size"], bytes.len());
        back.extend(base64::engine::general_purpose::STANDARD.decode(part["content"].as_str().unwrap()).unwrap());
    }
    assert_eq!(back, bytes);

    // Every one of those calls left its line in the audit trail.
    let audit = std::fs::read_dir(phone.agent.home.path().join("voxa/audit")).unwrap();
    let lines: String = audit.map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap()).collect();
    for (tool, id) in [("move_file", "m2"), ("delete_file", "d1"), ("restore_file", "t2"), ("upload_file", "u2")] {
        let line = lines.lines().find(|line| line.contains(&format!("\"id\":\"{id}\""))).unwrap_or_default();
        assert!(line.contains(&format!("\"tool\":\"{tool}\"")), "no audit line for {tool}: {lines}");
    }
}

#[tokio::test]
async fn the_fence_holds_for_every_file_tool() {
    let mut phone = Phone::start().await;
    let outside = phone.outside.path().to_owned();
    std::fs::write(outside.join("secret"), "outside").unwrap();
    std::os::unix::fs::symlink(&outside, phone.ws().join("out")).unwrap();
    std::fs::write(phone.ws().join("inside"), "in").unwrap();
    let up = |path: &str| json!({"path": path, "data": b64(b"x"), "offset": 0, "done": true});
    let calls = [
        ("move_file", json!({"from": "inside", "to": "../moved"})),
        ("move_file", json!({"from": "inside", "to": "out/moved"})),
        ("move_file", json!({"from": "out/secret", "to": "stolen"})),
        ("move_file", json!({"from": "../", "to": "x"})),
        ("delete_file", json!({"path": "out/secret"})),
        ("delete_file", json!({"path": "../"})),
        ("upload_file", up("../dropped")),
        ("upload_file", up("out/dropped")),
        ("read_file", json!({"path": "out/secret", "offset": 1})),
        ("write_file", json!({"path": "out/secret", "content": "x", "version": "new"})),
    ];
    for (index, (tool, args)) in calls.into_iter().enumerate() {
        let answer = phone.call(&format!("f{index}"), tool, args.clone()).await;
        assert_eq!(refused(&answer), "outside-workspace", "{tool} {args}: {answer}");
    }
    let trashed = phone.call("r1", "delete_file", json!({"path": "inside"})).await;
    let id = ok(&trashed)["trash"].clone();
    for (index, to) in ["../restored", "out/restored"].into_iter().enumerate() {
        let answer = phone.call(&format!("r{}", index + 2), "restore_file", json!({"id": id, "to": to})).await;
        assert_eq!(refused(&answer), "outside-workspace", "restore to {to}: {answer}");
    }
    // A link is deleted as a link: the link goes to the trash, what it pointed at stays.
    ok(&phone.call("l1", "delete_file", json!({"path": "out"})).await);
    assert_eq!(std::fs::read_to_string(outside.join("secret")).unwrap(), "outside");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1, "nothing landed outside");
    // The home (here inside no workspace) cannot be reached either: the trash is not a path.
    let home = phone.agent.home.path().join("voxa/trash");
    let into_home = phone.call("h1", "list_dir", json!({"path": home.to_str().unwrap()})).await;
    assert_eq!(refused(&into_home), "outside-workspace");
}

#[tokio::test]
async fn a_long_command_output_keeps_its_head_and_its_tail_with_the_count_between() {
    let mut phone = Phone::start().await;
    let args = json!({"command": "seq 1 200000; echo 'error: the last line'; exit 3"});
    let answer = phone.call("c1", "run_command", args).await;
    let result = ok(&answer);
    let output = result["output"].as_str().unwrap();
    let omitted = result["omitted_bytes"].as_u64().unwrap();
    assert_eq!((result["exit_code"].as_i64(), result["truncated"].as_bool()), (Some(3), Some(true)));
    assert!(output.starts_with("1\n2\n3\n"));
    assert!(output.ends_with("199999\n200000\nerror: the last line\n"), "the tail is kept");
    assert!(output.contains(&format!("[\u{2026} {omitted} bytes left out \u{2026}]\n")), "the middle is counted");
    assert!(omitted > 1_000_000, "{omitted}");
}

// ---------------------------------------------------------------------------------------------
// In the browser

/// A relay, an agent and a browser.
struct Scene {
    relay: TestRelay,
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
    secrets: voxa::state::Secrets,
    agent: voxa::agent::RunningAgent,
    browser: Browser,
}

impl Scene {
    async fn start(scheme: Scheme) -> Option<Scene> {
        let browser = Browser::start_with(scheme).await?;
        let relay = TestRelay::start().await;
        let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (options, secrets) = options(&home, &workspace, Some(relay.url()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent = voxa::agent::start(options, listener, CancellationToken::new()).await.unwrap();
        Some(Scene { relay, home, workspace, secrets, agent, browser })
    }

    async fn open_online(&self) {
        let link = format!(
            "http://{}/#code={}&token={}",
            self.relay.addr,
            self.secrets.relay_code.expose(),
            self.secrets.auth_token.expose()
        );
        self.browser.pair(&link).await;
        self.browser.wait_connection("online").await;
    }

    fn ws(&self) -> &Path {
        self.workspace.path()
    }

    async fn close(self) {
        self.agent.stop().await;
        self.browser.close().await;
        drop(self.home);
    }
}

/// Runs `command` in the page and returns milliseconds from "Run" to the frame after its end was
/// shown, as the page's clock measures it (WebDriver's polling is not in it).
async fn timed_run(browser: &Browser, command: &str) -> f64 {
    browser
        .script(
            "window.__ran = null; const out = document.getElementById('commands-out');
             const seen = new MutationObserver(() => {
               const end = out.lastElementChild && out.lastElementChild.querySelector('.end');
               if (end && /exit/.test(end.textContent) && window.__ran === null) {
                 window.__ran = 0; seen.disconnect();
                 requestAnimationFrame(() => setTimeout(() => {
                   const run = performance.getEntriesByName('voxa:run').pop();
                   window.__ran = performance.now() - run.startTime;
                 }, 0));
               }
             });
             seen.observe(out, {subtree: true, childList: true, characterData: true});",
            vec![],
        )
        .await;
    browser.type_into("Command", command).await;
    browser.press("Run").await;
    browser
        .wait_script("the command's end on screen", "return typeof window.__ran === 'number' && window.__ran > 0;")
        .await;
    browser.script("return window.__ran;", vec![]).await.as_f64().unwrap()
}

/// Measures the page showing 256 KiB of output at 390×844 and prints the figures (docs/PERFORMANCE.md);
/// it asserts what was shown, never how fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure_256_kib_of_output_in_the_page() {
    let Some(scene) = Scene::start(Scheme::Light).await else { return };
    scene.open_online().await;
    let browser = &scene.browser;
    let command = "yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c 262144";
    let mut figures = Vec::new();
    for _ in 0..5 {
        figures.push(timed_run(browser, command).await);
    }
    let shown = browser
        .script(
            "return document.getElementById('commands-out').lastElementChild.querySelector('.out').textContent.length;",
            vec![],
        )
        .await;
    assert_eq!(shown, json!(262144), "all of it is on the page");
    let small = timed_run(browser, "echo hello").await;
    figures.sort_by(f64::total_cmp);
    println!(
        "256 KiB of output, Run to the frame after its end, {}x{}: median {:.0} ms, runs {:?} ms; `echo hello`: {:.0} ms",
        VIEWPORT.0,
        VIEWPORT.1,
        figures[figures.len() / 2],
        figures.iter().map(|f| f.round()).collect::<Vec<_>>(),
        small
    );
    scene.close().await;
}

/// Where the documentation's pictures go when `VOXA_DOCS_SCREENSHOTS` is set.
fn picture(browser_png: Vec<u8>, name: &str) {
    let info = png::Decoder::new(std::io::Cursor::new(&browser_png)).read_info().unwrap().info().clone();
    assert_eq!((info.width, info.height), VIEWPORT, "{name}");
    if std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some() {
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name), browser_png).unwrap();
    }
}

async fn value_of(browser: &Browser, role: &str, name: &str) -> String {
    browser.control(role, name).await.prop("value").await.unwrap().unwrap_or_default()
}

async fn wait_status(browser: &Browser, what: &str, check: impl Fn(&str) -> bool) -> String {
    browser.wait_text("#panel-files p.muted[role=status]", what, check).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_page_shows_both_versions_on_conflict_and_creates_moves_deletes_restores_uploads_downloads() {
    let Some(scene) = Scene::start(Scheme::Light).await else { return };
    let (browser, ws) = (&scene.browser, scene.ws().to_owned());
    std::fs::write(ws.join("notes.md"), "buy milk\n").unwrap();
    scene.open_online().await;
    browser.press("Files").await;
    browser.control("button", "notes.md").await.click().await.unwrap();
    let editor = browser.control("textbox", "File content").await;
    assert_eq!(editor.prop("value").await.unwrap().as_deref(), Some("buy milk\n"));
    // A monospace editor at 16 px or more: code lines up and iOS does not zoom on focus.
    let font = browser
        .script(
            "const s = getComputedStyle(document.getElementById('file-text')); return [s.fontSize, s.fontFamily];",
            vec![],
        )
        .await;
    let size: f64 = font[0].as_str().unwrap().trim_end_matches("px").parse().unwrap();
    assert!(size >= 16.0 && font[1].as_str().unwrap().contains("monospace"), "{font}");

    // The laptop changes the file while the phone edits it: the save is refused and both are shown.
    std::fs::write(ws.join("notes.md"), "buy bread\n").unwrap();
    editor.clear().await.unwrap();
    editor.send_keys("buy oat milk").await.unwrap();
    browser.press("Save").await;
    browser.wait_text("#file-saved", "the refused save", |t| t == "not saved").await;
    assert_eq!(value_of(browser, "textbox", "Laptop's version").await, "buy bread\n");
    assert_eq!(value_of(browser, "textbox", "File content").await, "buy oat milk");
    assert_eq!(std::fs::read_to_string(ws.join("notes.md")).unwrap(), "buy bread\n", "nothing replaced");
    picture(browser.screenshot().await, "web-files-conflict.png");
    browser.press("Keep mine").await;
    browser.wait_text("#file-saved", "the save", |t| t.starts_with("saved")).await;
    assert_eq!(std::fs::read_to_string(ws.join("notes.md")).unwrap(), "buy oat milk");
    // The size shown is the saved file's, not the one opened.
    browser.wait_text("#file-meta", "the new size", |t| t == "12 B").await;

    // Once more, and this time the laptop's version is taken.
    std::fs::write(ws.join("notes.md"), "third\n").unwrap();
    editor.send_keys(" and honey").await.unwrap();
    browser.press("Save").await;
    browser.control("textbox", "Laptop's version").await;
    browser.press("Take the laptop's").await;
    assert_eq!(value_of(browser, "textbox", "File content").await, "third\n");
    browser.press("Save").await;
    browser.wait_text("#file-saved", "the save of theirs", |t| t.starts_with("saved")).await;
    assert_eq!(std::fs::read_to_string(ws.join("notes.md")).unwrap(), "third\n");

    // Rename, refused outside the fence and done inside it.
    browser.press("Rename").await;
    let field = browser.control("textbox", "New path").await;
    field.clear().await.unwrap();
    field.send_keys("../escaped.md").await.unwrap();
    browser.press("Move").await;
    wait_status(browser, "the refusal", |t| t.contains("outside the workspace")).await;
    field.clear().await.unwrap();
    field.send_keys("renamed.md").await.unwrap();
    browser.press("Move").await;
    wait_status(browser, "the move", |t| t.starts_with("Moved notes.md to renamed.md")).await;
    assert!(ws.join("renamed.md").is_file() && !ws.join("notes.md").exists());

    // Download to the phone, in chunks.
    let downloads = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..500_000u32).map(|n| (n % 253) as u8).collect();
    std::fs::write(ws.join("data.bin"), &big).unwrap();
    browser.cdp("Page.setDownloadBehavior", json!({"behavior": "allow", "downloadPath": downloads.path()})).await;
    browser.press("Refresh").await;
    browser.control("button", "data.bin").await.click().await.unwrap();
    browser.press("Download").await;
    wait_status(browser, "the download", |t| t.starts_with("Downloaded data.bin")).await;
    let saved = downloads.path().join("data.bin");
    eventually("the downloaded file", || std::fs::read(&saved).is_ok_and(|bytes| bytes == big)).await;

    // Delete goes to the trash: Undo brings it back, and so does the trash's Restore.
    browser.press("Delete").await;
    wait_status(browser, "the delete", |t| t == "Moved data.bin to the trash.").await;
    assert!(!ws.join("data.bin").exists());
    browser.press("Undo").await;
    wait_status(browser, "the undo", |t| t == "Restored data.bin.").await;
    assert_eq!(std::fs::read(ws.join("data.bin")).unwrap(), big);
    browser.control("button", "data.bin").await.click().await.unwrap();
    browser.press("Delete").await;
    wait_status(browser, "the second delete", |t| t == "Moved data.bin to the trash.").await;
    browser.press("Trash").await;
    browser.press("Restore data.bin").await;
    wait_status(browser, "the restore", |t| t == "Restored data.bin.").await;
    assert_eq!(std::fs::read(ws.join("data.bin")).unwrap(), big);
    browser.press("Close trash").await;

    // Upload from the phone, in chunks, and a new empty file.
    let phone_files = tempfile::tempdir().unwrap();
    let photo: Vec<u8> = (0..450_000u32).map(|n| (n * 7 % 256) as u8).collect();
    std::fs::write(phone_files.path().join("photo.raw"), &photo).unwrap();
    let picker = browser.client.find(fantoccini::Locator::Css("#file-upload")).await.unwrap();
    picker.send_keys(phone_files.path().join("photo.raw").to_str().unwrap()).await.unwrap();
    wait_status(browser, "the upload", |t| t == "Uploaded photo.raw.").await;
    assert_eq!(std::fs::read(ws.join("photo.raw")).unwrap(), photo);
    browser.press("New file").await;
    browser.type_into("New file name", "fresh.txt").await;
    browser.press("Create").await;
    wait_status(browser, "the new file", |t| t == "Created fresh.txt.").await;
    assert_eq!(std::fs::read_to_string(ws.join("fresh.txt")).unwrap(), "");
    scene.close().await;
}

/// The files view in the dark scheme, for the documentation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_view_in_the_dark_scheme() {
    let Some(scene) = Scene::start(Scheme::Dark).await else { return };
    let (browser, ws) = (&scene.browser, scene.ws().to_owned());
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {\n    println!(\"hello\");\n}\n").unwrap();
    std::fs::write(ws.join("NOTES.md"), "# Notes\n\n- ship the files view\n").unwrap();
    scene.open_online().await;
    browser.press("Files").await;
    browser.control("button", "NOTES.md").await.click().await.unwrap();
    browser.control("textbox", "File content").await;
    let dark = browser.script("return matchMedia('(prefers-color-scheme: dark)').matches;", vec![]).await;
    assert_eq!(dark, json!(true));
    browser.script("window.scrollTo(0, 0);", vec![]).await;
    picture(browser.screenshot().await, "web-files-dark.png");
    scene.close().await;
}

/// Every file and directory voxa makes for itself is its user's alone: 0600 and 0700 from the
/// system call on (seen under `strace` where it is installed), whatever the umask, and still so
/// afterwards — the home (audit, approvals, sessions, push subscriptions, VAPID key, the trash and
/// each entry in it) and the temporary parts of writes and uploads in the workspace. What a deleted
/// entry was stays as it was inside its 0700 entry (so restoring gives it back), and files the
/// tools write into the workspace take the user's umask, as an editor's would.
#[test]
fn everything_voxa_creates_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, home) = crate::support::run::fresh_home();
    let workspace = tempfile::tempdir().unwrap();
    write_home_config(&home, "[policy]\nask = [\"move_file\"]\n\n[push]\nallow_private_endpoints = true\n");
    let trace = dir.path().join("trace");
    let traced = crate::support::installed("strace", "strace");
    let wrapper =
        ["strace", "-f", "-qq", "-e", "trace=openat,openat2,mkdir,mkdirat,creat", "-o", trace.to_str().unwrap()];
    let mut command =
        if traced { crate::support::voxa_cmd_via(&home, &wrapper) } else { crate::support::voxa_cmd(&home) };
    command.args(["run", "--json", "--relay", "http://127.0.0.1:1", "--workspace"]).arg(workspace.path());
    let mut run = crate::support::RunningVoxa::start(command);
    let agent_file: Value = serde_json::from_slice(&std::fs::read(home.join("agent.json")).unwrap()).unwrap();
    let agent_pid = agent_file["pid"].as_i64().unwrap();
    let token = std::fs::read_to_string(home.join("auth_token")).unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut socket = connect(&format!("ws://127.0.0.1:{}/", run.port)).await;
        say_hello(&mut socket, token.trim()).await;
        let args = json!({"path": "made/by/voxa.txt", "content": "hi", "create_dirs": true});
        ok(&call(&mut socket, "w", "write_file", args).await);
        let upload = json!({"path": "made/upload.bin", "data": b64(b"bytes"), "offset": 0, "done": true});
        ok(&call(&mut socket, "u", "upload_file", upload).await);
        ok(&call(&mut socket, "d", "delete_file", json!({"path": "made/by/voxa.txt"})).await);
        let subscription = crate::support::push::sample_subscription("http://127.0.0.1:9/push/modes");
        send(&mut socket, json!({"type":"push_subscribe","subscription":subscription})).await;
        recv_type(&mut socket, "push_subscribed").await;
        send(&mut socket, json!({"type":"follow"})).await;
        send(&mut socket, json!({"type":"tool_call","id":"m","name":"move_file","args":{"from":"made","to":"moved"}}))
            .await;
        let shown = recv_type(&mut socket, "approval").await;
        send(&mut socket, json!({"type":"approve","approval":shown["approval"],"decision":"deny"})).await;
        assert_eq!(refused(&recv_result(&mut socket, "m").await), "denied-by-policy");
    });
    let pid = rustix::process::Pid::from_raw(agent_pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert!(crate::support::wait_with_deadline(&mut run.child, STEP).success());

    let mode = |path: &Path| std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777;
    let mut seen = Vec::new();
    let mut stack = vec![home.clone()];
    while let Some(dir) = stack.pop() {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let shown = path.strip_prefix(&home).unwrap().display().to_string();
            seen.push(shown.clone());
            if shown.starts_with("trash/") && shown.ends_with("/item") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
            }
        }
    }
    for kept in ["audit", "agent.lock", "sessions", "push_subscriptions.json", "vapid_key", "trash", "config.toml"] {
        assert!(seen.iter().any(|path| path == kept), "{kept} in {seen:?}");
    }
    assert!(seen.iter().any(|path| path.starts_with("trash/") && path.ends_with("entry.json")), "{seen:?}");
    if traced {
        let trace = std::fs::read_to_string(trace).unwrap();
        // The workspace's own directories (`create_dirs`) are the user's, made with the umask.
        let creates: Vec<&str> = trace
            .lines()
            .filter(|line| line.contains("O_CREAT") || line.contains("mkdir(") || line.contains("mkdirat("))
            .filter(|line| !(line.contains("mkdirat(") && (line.contains("\"made\"") || line.contains("\"by\""))))
            .collect();
        assert!(creates.len() > 10, "{trace}");
        // A create of a path made private before it keeps that mode (SQLite opens the store the
        // agent made 0600 with its own default).
        let private = |line: &str| line.contains(", 0600)") || line.contains(", 0700)");
        let path_of = |line: &str| line.split('"').nth(1).unwrap_or_default().to_owned();
        let made: Vec<String> = creates.iter().filter(|line| private(line)).map(|line| path_of(line)).collect();
        let loose: Vec<&&str> =
            creates.iter().filter(|line| !private(line) && !made.contains(&path_of(line))).collect();
        assert!(loose.is_empty(), "not created private: {loose:#?}\n{creates:#?}");
    }
}
