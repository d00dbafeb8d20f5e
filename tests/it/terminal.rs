//! Terminal sessions (docs/PROTOCOL.md, "Terminal sessions") driven as a phone drives them: a real
//! agent and relay, a real PTY, the `term_*` tools, the `term_snapshot` of a terminal attached and
//! `term_output` frames acknowledged as read.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::support::harness::*;
use crate::support::terminal::Watcher;

async fn phone_and_agent() -> (TestRelay, TestAgent, Watcher) {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let phone = Watcher::new(agent.phone(&relay).await);
    (relay, agent, phone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_asks_a_question_is_answered_from_the_phone() {
    let (_relay, agent, mut phone) = phone_and_agent().await;
    let term = phone.open(None).await;
    assert!(term.starts_with("t-"), "{term}");
    phone.type_in(&term, "read x; echo got-$x\r").await;
    phone.type_in(&term, "hello\r").await;
    phone.until(&term, "got-hello").await;
    // Ctrl-C reaches the program as a signal: the shell abandons the line it was given. The mark is
    // printed by the job itself, so the job holds the terminal when Ctrl-C comes (a Ctrl-C between
    // an `echo` of the shell's own and the start of `sleep` would reach only the shell).
    phone.type_in(&term, "sh -c 'echo started-$((1+1)); exec sleep 600'; echo not-interrupted\r").await;
    phone.until(&term, "started-2").await;
    phone.type_in(&term, "\u{3}").await;
    phone.type_in(&term, "echo after-$((6*7))\r").await;
    phone.until(&term, "after-42").await;
    assert!(!phone.text(&term).contains("\nnot-interrupted"), "{}", phone.text(&term));
    let listed = phone.call("term_list", json!({})).await;
    let entry = &listed["terminals"][0];
    assert_eq!(
        (entry["term"].as_str(), entry["cols"].as_u64(), entry["exited"].as_bool()),
        (Some(&*term), Some(80), Some(false))
    );
    assert_eq!(entry["cwd"], ".");
    phone.type_in(&term, "exit 3\r").await;
    assert_eq!(phone.until_exit(&term).await, 3);
    // Each call left one audit line, the keystrokes included.
    let audit = std::fs::read_dir(agent.home.path().join("voxa").join("audit")).unwrap();
    let lines: usize = audit
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .map(|text| text.lines().filter(|line| line.contains("\"tool\":\"term_")).count())
        .sum();
    assert_eq!(lines, 8, "one line per call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vim_opens_takes_typed_text_and_saves_the_file() {
    if !crate::support::installed("vim", "vim") {
        return;
    }
    let (_relay, agent, mut phone) = phone_and_agent().await;
    let term = phone.open(Some("vim -u NONE -N notes.txt")).await;
    phone.until(&term, "notes.txt").await;
    phone.type_in(&term, "ihello from the phone\u{1b}").await;
    phone.type_in(&term, ":wq\r").await;
    assert_eq!(phone.until_exit(&term).await, 0);
    let saved = std::fs::read_to_string(agent.workspace.path().join("notes.txt")).unwrap();
    assert_eq!(saved, "hello from the phone\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_reaches_the_program_and_the_screen_reads_as_text() {
    let (_relay, _agent, mut phone) = phone_and_agent().await;
    let term = phone.open(Some("sh")).await;
    phone.call("term_resize", json!({"term": term, "cols": 123, "rows": 41})).await;
    phone.type_in(&term, "echo size-$(tput cols)x$(tput lines)\r").await;
    phone.until(&term, "size-123x41").await;
    // Colour codes are applied by the emulator, not shown.
    phone.type_in(&term, "printf '\\033[31mred-%s\\033[0m\\n' word\r").await;
    phone.until(&term, "red-word").await;
    let screen = phone.call("term_screen", json!({"term": term})).await;
    let text = screen["text"].as_str().unwrap();
    // The line is the output, after the prompt when the shell printed one before it.
    assert!(text.lines().any(|line| line.ends_with("red-word") && !line.contains('%')), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    let refused = phone.call_raw("term_resize", json!({"term": term, "cols": 0, "rows": 24})).await;
    assert_eq!(refused["error"]["code"], "invalid-args");
    let unknown = phone.call_raw("term_input", json!({"term": "t-0", "data": "x"})).await;
    assert_eq!(unknown["error"]["code"], "not-found");
    let outside = phone.call_raw("term_open", json!({"cols": 80, "rows": 24, "cwd": "../.."})).await;
    assert_eq!(outside["error"]["code"], "outside-workspace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_outlives_the_phone_and_comes_back_with_its_scrollback() {
    let (relay, agent, mut phone) = phone_and_agent().await;
    let term = phone.open(Some("sh")).await;
    phone.type_in(&term, "echo before-$((6*7))\r").await;
    phone.until(&term, "before-42").await;
    // Output while nobody is connected is kept too.
    phone.type_in(&term, "sleep 1; echo meanwhile-$((5*5))\r").await;
    drop(phone);
    let mut laptop = Watcher::new(agent.local_client().await);
    let mut screen = String::new();
    while !screen.contains("meanwhile-25") {
        tokio::time::sleep(Duration::from_millis(50)).await;
        screen = laptop.call("term_screen", json!({"term": term})).await["text"].as_str().unwrap().to_owned();
    }
    let mut phone = Watcher::new(agent.phone(&relay).await);
    let listed = phone.call("term_list", json!({})).await;
    assert_eq!(listed["terminals"][0]["term"], term.as_str());
    let attached = phone.call("term_attach", json!({"term": term})).await;
    // The screen came first, as it stands after the output before the offset live output starts at.
    let snapshot = &phone.snapshots[&term];
    assert_eq!(
        (&snapshot["offset"], snapshot["cols"].as_u64(), snapshot["rows"].as_u64()),
        (&attached["offset"], Some(80), Some(24))
    );
    assert!(attached["offset"].as_u64().unwrap() > 0);
    let replayed = phone.text(&term);
    assert!(replayed.contains("before-42") && replayed.contains("meanwhile-25"), "{replayed}");
    // Two clients watch; what one types, both see.
    laptop.call("term_attach", json!({"term": term})).await;
    phone.type_in(&term, "echo after-$((7*7))\r").await;
    phone.until(&term, "after-49").await;
    laptop.until(&term, "after-49").await;
    phone.call("term_close", json!({"term": term})).await;
    phone.until_exit(&term).await;
    laptop.until_exit(&term).await;
    assert_eq!(phone.call("term_list", json!({})).await["terminals"], json!([]));
}

/// The screen a parser of `cols` × `rows` shows after `bytes`, as `term_screen` gives it.
fn screen_after(bytes: &[u8], cols: u16, rows: u16) -> (String, vt100::Parser) {
    let mut parser = vt100::Parser::new(rows.try_into().unwrap(), cols.try_into().unwrap(), 0);
    parser.process(bytes);
    let rows: Vec<String> = parser.screen().rows(0, cols).map(|row| row.trim_end().to_owned()).collect();
    (rows.join("\n").trim_end().to_owned(), parser)
}

/// Issue 38: attaching replayed the output, queries included, which the page's emulator answered
/// into the program, and old frames of a full-screen program under new lines. The agent now sends
/// its screen: no query in it, the screen a terminal shows now, its colours and modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_attaching_gets_the_screen_as_it_stands_and_no_query_in_it() {
    let (relay, _agent, mut phone) = phone_and_agent().await;
    let term = phone.open(Some("sh")).await;
    // Frames of a full-screen program, cursor reports, device attributes and colour queries, a
    // mode for the cursor keys, then the last frame in colour.
    let script = r"for n in 1 2 3; do printf '\033[H\033[2Jold-frame-%s\n' $n; done; \
                   printf '\033[6n\033[c\033[>c\033]10;?\007\033]11;?\033\\\033[?1h'; \
                   printf '\033[H\033[2J\033[31mnew-frame\033[0m\n'; echo done-$((6*7))";
    phone.type_in(&term, &format!("{script}\r")).await;
    phone.until(&term, "done-42").await;
    let mut other = Watcher::new(_agent.phone(&relay).await);
    let attached = other.call("term_attach", json!({"term": term})).await;
    let snapshot = other.snapshots[&term].clone();
    assert_eq!(snapshot["offset"], attached["offset"]);
    let bytes = base64::engine::general_purpose::STANDARD.decode(snapshot["data"].as_str().unwrap()).unwrap();
    for query in [&b"\x1b[6n"[..], b"\x1b[c", b"\x1b[>c", b"\x1b]10;?", b"\x1b]11;?"] {
        assert!(
            !bytes.windows(query.len()).any(|w| w == query),
            "{:?} in {:?}",
            query,
            String::from_utf8_lossy(&bytes)
        );
    }
    let (shown, parser) = screen_after(&bytes, 80, 24);
    assert!(shown.contains("new-frame") && shown.contains("done-42") && !shown.contains("old-frame"), "{shown}");
    assert!(parser.screen().application_cursor(), "the cursor keys' mode is part of the screen");
    let red = parser.screen().cell(0, 0).unwrap();
    assert_eq!((red.contents(), red.fgcolor()), ("n", vt100::Color::Idx(1)));
    let screen = other.call("term_screen", json!({"term": term})).await;
    assert_eq!(shown, screen["text"].as_str().unwrap(), "the snapshot shows what term_screen reads");
    // Both watch from there on.
    other.type_in(&term, "echo both-$((7*7))\r").await;
    other.until(&term, "both-49").await;
    phone.until(&term, "both-49").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_terminal_asks_the_user_under_ask_and_is_refused_when_denied() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start_with(Some(relay.url()), |options| {
        options.config.policy.ask = vec!["term_open".into()];
    })
    .await;
    let mut phone = Watcher::new(agent.phone(&relay).await);
    send(&mut phone.socket, json!({"type":"follow"})).await;
    send(
        &mut phone.socket,
        json!({"type":"tool_call","id":"open","name":"term_open","args":{"cols":80,"rows":24,"command":"sh"}}),
    )
    .await;
    let approval = loop {
        let frame = phone.next_frame().await;
        if frame["type"] == "approval" {
            break frame;
        }
    };
    assert!(approval["summary"].as_str().unwrap().contains("sh"), "{approval}");
    let id = approval["approval"].as_str().unwrap();
    send(&mut phone.socket, json!({"type":"approve","approval":id,"decision":"deny"})).await;
    let answer = loop {
        let frame = phone.next_frame().await;
        if frame["type"] == "tool_result" {
            break frame;
        }
    };
    assert_eq!(answer["error"]["code"], "denied-by-policy", "{answer}");
    assert_eq!(phone.call("term_list", json!({})).await["terminals"], json!([]));
}

/// Issue 38: a sealed phone that left while its terminal was held at the window (a flood it never
/// acknowledged) kept the terminal held: its sealed writer waited for frames that never came, so
/// the agent counted the phone as watching. The phone that comes back gets the screen and then
/// every byte after it, and its keys are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_phone_that_left_during_a_flood_comes_back_to_a_terminal_that_answers() {
    use voxa::protocol::TERM_WINDOW;
    let (relay, agent, mut phone) = phone_and_agent().await;
    assert!(phone.socket.is_sealed(), "the phone speaks protocol 3, as the page does");
    let term = phone.open(Some("sh")).await;
    phone.type_in(&term, "echo ready-$((1+1))\r").await;
    phone.until(&term, "ready-2").await;
    // Output it never acknowledges: the agent stops at the window.
    phone.acking = false;
    phone.type_in(&term, "yes 0123456789abcdef | head -c 1000000; echo flood-$((40+2))\r").await;
    let held = phone.next.get(&term).copied().unwrap_or(0);
    let deadline = tokio::time::Instant::now() + 3 * STEP;
    while phone.next.get(&term).copied().unwrap_or(0) < held + TERM_WINDOW / 2 {
        let frame = tokio::time::timeout_at(deadline, phone.next_frame()).await;
        assert!(frame.is_ok(), "the flood arrives up to the window");
    }
    drop(phone);
    let mut phone = Watcher::new(agent.phone(&relay).await);
    assert!(phone.socket.is_sealed());
    phone.call("term_attach", json!({"term": term})).await;
    phone.until(&term, "flood-42").await;
    phone.type_in(&term, "echo back-$((6*7))\r").await;
    phone.until(&term, "back-42").await;
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() << 10
}

/// What one `term_output` frame carried: its offset and its bytes.
fn output_of(message: Message) -> Option<(u64, Vec<u8>)> {
    let Message::Text(text) = message else { return None };
    let frame: Value = serde_json::from_str(&text).unwrap();
    (frame["type"] == "term_output").then(|| {
        let data = base64::engine::general_purpose::STANDARD.decode(frame["data"].as_str().unwrap()).unwrap();
        (frame["offset"].as_u64().unwrap(), data)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_megabytes_through_a_slow_reader_keep_the_agent_and_the_relay_small() {
    use crate::support::{voxa, voxa_cmd, RunningVoxa};
    use voxa::protocol::{TERM_CHUNK, TERM_WINDOW};
    const FLOOD: u64 = 100_000_000;
    const GROWTH_LIMIT: u64 = 48 << 20;
    let relay = tokio::task::block_in_place(|| RunningVoxa::relay(0, "warn"));
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let workspace = tempfile::tempdir().unwrap();
    let paired = voxa(&home, &["pair", "--json", "--relay", &relay.relay_url()]);
    assert!(paired.status.success(), "{}", String::from_utf8_lossy(&paired.stderr));
    let paired: Value = serde_json::from_slice(&paired.stdout).unwrap();
    let (code, token) = (paired["code"].as_str().unwrap(), paired["token"].as_str().unwrap());
    let mut cmd = voxa_cmd(&home);
    cmd.env("RUST_LOG", "warn").args(["run", "--json", "--workspace"]).arg(workspace.path());
    let agent = tokio::task::block_in_place(|| {
        let mut agent = RunningVoxa::start(cmd);
        agent.wait_event("relay_connected");
        agent
    });
    let mut socket = connect(&format!("ws://127.0.0.1:{}/ws?code={code}", relay.port)).await;
    say_hello(&mut socket, token).await;
    let mut phone = Watcher::new(socket);
    let term = phone.open(Some("sh")).await;
    phone.type_in(&term, "echo ready-$((1+1))\r").await;
    phone.until(&term, "ready-2").await;
    let (agent_pid, relay_pid) = (agent.child.id(), relay.child.id());
    let baseline = (rss(agent_pid), rss(relay_pid));

    // A reader that acknowledges nothing: the agent stops at the window.
    let mut acked = phone.next.get(&term).copied().unwrap_or(0);
    let mut offset = acked;
    let flood = format!("yes 0123456789abcdef | head -c {FLOOD}; echo; echo flood-$((40+2))\r");
    send(
        &mut phone.socket,
        json!({"type":"tool_call","id":"flood","name":"term_input","args":{"term":term,"data":flood}}),
    )
    .await;
    let mut tail = Vec::new();
    let take = |offset: &mut u64, tail: &mut Vec<u8>, message: Message| {
        if let Some((at, data)) = output_of(message) {
            assert_eq!(at, *offset, "output in order");
            *offset += data.len() as u64;
            tail.extend_from_slice(&data);
            let keep = tail.len().saturating_sub(64);
            tail.drain(..keep);
        }
    };
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(500), next_frame(&mut phone.socket)).await
    {
        take(&mut offset, &mut tail, message);
    }
    assert!(offset - acked <= TERM_WINDOW + TERM_CHUNK as u64, "{} bytes unacknowledged", offset - acked);
    let mut peak = (rss(agent_pid), rss(relay_pid));
    // Then slowly, then as fast as it can: memory stays flat all the way through 100 MB.
    let mut frames = 0u64;
    while !String::from_utf8_lossy(&tail).contains("flood-42") {
        if acked < offset {
            acked = offset;
            send(&mut phone.socket, json!({"type":"term_ack","term":term,"offset":acked})).await;
        }
        let message = next_frame(&mut phone.socket).await.expect("the session goes on");
        take(&mut offset, &mut tail, message);
        frames += 1;
        if frames < 200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if frames % 500 == 0 {
            peak = (peak.0.max(rss(agent_pid)), peak.1.max(rss(relay_pid)));
        }
    }
    peak = (peak.0.max(rss(agent_pid)), peak.1.max(rss(relay_pid)));
    assert!(offset >= FLOOD, "only {offset} bytes arrived");
    let growth = (peak.0.saturating_sub(baseline.0), peak.1.saturating_sub(baseline.1));
    eprintln!(
        "terminal flood: {offset} bytes; agent RSS {} → {} KiB, relay RSS {} → {} KiB",
        baseline.0 >> 10,
        peak.0 >> 10,
        baseline.1 >> 10,
        peak.1 >> 10
    );
    assert!(growth.0 < GROWTH_LIMIT && growth.1 < GROWTH_LIMIT, "memory grew by {growth:?} bytes");
    tokio::task::block_in_place(|| agent.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmux_new_attach_reaches_the_same_session_after_the_terminal_closed() {
    if !crate::support::installed("tmux", "tmux") {
        return;
    }
    let (_relay, _agent, mut phone) = phone_and_agent().await;
    // A server of this test's own, so the user's tmux sessions are left alone.
    let socket = format!("voxa-test-{}", std::process::id());
    let command = format!("tmux -L {socket} -f /dev/null new -A -s main");
    let first = phone.open(Some(&command)).await;
    phone.type_in(&first, "echo in-tmux-$((2*21))\r").await;
    phone.until(&first, "in-tmux-42").await;
    phone.call("term_close", json!({"term": first})).await;
    phone.until_exit(&first).await;
    let again = phone.open(Some(&command)).await;
    let mut screen = String::new();
    for _ in 0..200 {
        screen = phone.call("term_screen", json!({"term": again})).await["text"].as_str().unwrap().to_owned();
        if screen.contains("in-tmux-42") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::process::Command::new("tmux").args(["-L", &socket, "kill-server"]).status();
    assert!(screen.contains("in-tmux-42"), "the tmux session kept its screen: {screen}");
}

// ---------------------------------------------------------------------------------------------
// The web client's shell view: xterm.js, vendored

/// The vendored files of xterm.js and its fit addon and the SHA-256 of each as the pinned npm
/// packages ship it (`@xterm/xterm@6.0.0`: lib/xterm.mjs, css/xterm.css, LICENSE;
/// `@xterm/addon-fit@0.11.0`: lib/addon-fit.mjs, LICENSE). To move to another version:
/// `npm pack @xterm/xterm@<v> @xterm/addon-fit@<v>`, unpack both, copy those files into
/// web/vendor/xterm/ under the names below, and record `sha256sum` of the unpacked files here.
const VENDORED: [(&str, &str); 5] = [
    ("xterm.mjs", "b336ec65a086c056d4804b3d4c2347da5663d3f23c3f25be866467bd8857ad59"),
    ("xterm.css", "854a7c0fb70e8b1a083c16797ab827299fb18744f5ad34f227b48337e33293c6"),
    ("LICENSE", "b569f629d00f2626a8100df2a1798210535621e42164dfd426a6fe5aac7b0ccd"),
    ("addon-fit.mjs", "2d87e1bddc73be9111de8beee5370c3bb7aac9c94e18e6f245f02ca741ef1769"),
    ("addon-fit.LICENSE", "e256f01188af527e4d06d21d06fbf785ae9c50d4b328bf03cbe0ba7f0aa4228f"),
];

#[test]
fn the_vendored_xterm_is_the_pinned_package_byte_for_byte_with_its_licences() {
    use sha2::Digest;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web/vendor/xterm");
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    let mut expected: Vec<String> = VENDORED.iter().map(|(name, _)| (*name).to_owned()).collect();
    expected.sort();
    assert_eq!(present, expected, "web/vendor/xterm holds exactly the pinned files");
    for (name, sha256) in VENDORED {
        let body = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(hex::encode(sha2::Sha256::digest(&body)), sha256, "{name} differs from the pinned package");
    }
    for licence in ["LICENSE", "addon-fit.LICENSE"] {
        let text = std::fs::read_to_string(dir.join(licence)).unwrap();
        assert!(
            text.contains("The xterm.js authors") && text.contains("MIT")
                || text.contains("Permission is hereby granted")
        );
    }
}

/// The text xterm.js shows in its rows.
const ROWS: &str = "#shell-screen .xterm-rows";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_shell_shows_coloured_output_and_the_key_bar_sends_ctrl_c() {
    use crate::support::browser::{Browser, Scheme};
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let link = format!("http://{}/#code={}&token={}", relay.addr, agent.code(), agent.token());
    browser.pair(&link).await;
    browser.wait_connection("online").await;
    // The emulator is not part of the page until the tab opens.
    let loaded = "return document.querySelectorAll('script[src]').length + performance.getEntriesByType('resource')\
                  .filter((r) => r.name.includes('/vendor/xterm/')).length;";
    let before = browser.script(loaded, vec![]).await;
    browser.press("Shell").await;
    browser.wait_text("#shell-status", "the terminal to open", |text| text.starts_with("t-")).await;
    assert_eq!(before, json!(2), "only address.js and main.js were loaded before the shell tab opened");
    let input = browser.client.find(fantoccini::Locator::Css("#shell-screen textarea")).await.unwrap();
    input.send_keys("printf '\\033[31m%s\\033[0m\\n' red-$((40+2))\u{E007}").await.unwrap();
    browser.wait_text(ROWS, "the coloured line", |text| text.contains("red-42")).await;
    let colour = browser
        .script(
            "const span = [...document.querySelectorAll('#shell-screen .xterm-rows span')]
               .find((s) => s.textContent === 'red-42');
             return span ? getComputedStyle(span).color : null;",
            vec![],
        )
        .await;
    let rgb: Vec<u64> = colour
        .as_str()
        .unwrap_or_else(|| panic!("no span holds red-42: {colour}"))
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|part| part.trim().parse().unwrap())
        .collect();
    assert!(rgb[0] > 150 && rgb[1] < 100 && rgb[2] < 100, "red-42 is drawn in red: {colour}");
    // Ctrl from the key bar, then c from the keyboard: the program is interrupted.
    // The job prints the mark itself, so it holds the terminal when Ctrl-C comes.
    input.send_keys("sh -c 'echo started-$((1+1)); exec sleep 600'; echo not-interrupted\u{E007}").await.unwrap();
    browser.wait_text(ROWS, "the command to start", |text| text.contains("started-2")).await;
    browser.press("Control").await;
    input.send_keys("c").await.unwrap();
    input.send_keys("echo after-$((6*7))\u{E007}").await.unwrap();
    browser.wait_text(ROWS, "the shell after Ctrl-C", |text| text.contains("after-42")).await;
    // The echo ran at once: `sleep 600` was interrupted, not waited out, and never echoed.
    let shown = browser.wait_text(ROWS, "the rows", |_| true).await;
    let after_ctrl_c = &shown[shown.find("^C").unwrap_or_else(|| panic!("no ^C shown: {shown}"))..];
    assert!(!after_ctrl_c.contains("not-interrupted"), "{shown}");
    let pictures = std::env::var_os("VOXA_DOCS_SCREENSHOTS").is_some();
    if pictures {
        let workspace = agent.workspace.path();
        for dir in ["src", "docs", "target"] {
            std::fs::create_dir_all(workspace.join(dir)).unwrap();
        }
        std::fs::write(workspace.join("README.md"), "# notes\n").unwrap();
        std::fs::write(workspace.join("Cargo.toml"), "[package]\n").unwrap();
        input.send_keys("clear; PS1='laptop $ '; ls -l --color=always; git --version\u{E007}").await.unwrap();
        browser.wait_text(ROWS, "the listing", |text| text.contains("git version")).await;
        save_picture(&browser, "web-terminal-shell.png").await;
    }
    browser.close().await;
    if pictures {
        let Some(dark) = Browser::start_with(Scheme::Dark).await else { return };
        dark.pair(&link).await;
        dark.wait_connection("online").await;
        dark.press("Shell").await;
        // The page comes back to the same terminal, its scrollback replayed.
        dark.wait_text(ROWS, "the replayed scrollback", |text| text.contains("git version")).await;
        save_picture(&dark, "web-terminal-shell-dark.png").await;
        dark.close().await;
    }
    agent.agent.stop().await;
}

async fn save_picture(browser: &crate::support::browser::Browser, name: &str) {
    browser.script("window.scrollTo(0, 0);", vec![]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let png = browser.screenshot().await;
    std::fs::write(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name), png).unwrap();
}
