//! The command line as a user meets it: `voxa pair`, its files and refusals, `--help`,
//! `--version` and the committed completion scripts.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::support::{voxa, voxa_cmd};

const DEFAULT_RELAY: &str = "https://api.voxa.space";
const SECRET_FILES: [&str; 2] = ["relay_code", "auth_token"];

/// A fresh temporary directory and a voxa home inside it that does not exist yet.
fn fresh_home() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    (tmp, home)
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// Asserts success and returns the one JSON object `voxa … pair --json` printed.
fn pair_json(home: &Path, args: &[&str]) -> Value {
    let out = voxa(home, args);
    assert_eq!(out.status.code(), Some(0), "voxa {args:?} failed: {}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one JSON line expected: {text}");
    serde_json::from_str(&text).unwrap()
}

fn field<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_else(|| panic!("{key} missing in {value}"))
}

fn is_secret(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Every file of the home with its bytes, to prove a failing command changed nothing.
fn snapshot(home: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = fs::read_dir(home)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.file_name().into_string().unwrap(), fs::read(entry.path()).unwrap_or_default())
        })
        .collect();
    files.sort();
    files
}

/// The secret values stored in a home.
fn stored_secrets(home: &Path) -> Vec<String> {
    SECRET_FILES.iter().map(|name| fs::read_to_string(home.join(name)).unwrap().trim().to_owned()).collect()
}

/// Asserts a refusal a user can act on: the expected exit status, one line on stderr that starts
/// with `voxa: ` and contains `needle`, nothing on stdout, and no secret echoed.
fn assert_refused(out: &Output, code: i32, needle: &str, secrets: &[String]) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert_eq!(stdout(out), "", "a failing command prints nothing on stdout");
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    assert!(err.starts_with("voxa: "), "{err}");
    assert_eq!(err.matches("voxa:").count(), 1, "the chain is printed once: {err}");
    assert!(err.contains(needle), "{needle:?} not in: {err}");
    for secret in secrets {
        assert!(!err.contains(secret.as_str()), "a secret leaked into stderr: {err}");
    }
    err
}

/// What `pair --json` prints that stays from one run to the next: its ticket (and the link that
/// carries it) is new each time, and the first run says where the relay it saved came from.
fn steady(mut value: Value) -> Value {
    let object = value.as_object_mut().unwrap();
    for key in ["ticket", "ticket_expires", "url", "relay_source"] {
        object.remove(key);
    }
    value
}

/// The link `text` prints on a line of its own: `like`'s, with a ticket of its own.
fn printed_link(text: &str, like: &str) -> String {
    let (before_ticket, _) = like.split_once("&ticket=").expect("a ticket link");
    let line = text.lines().find(|line| line.starts_with(&format!("{before_ticket}&ticket=")));
    line.unwrap_or_else(|| panic!("the link on a line of its own: {text}")).to_owned()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn pair_json_creates_private_secrets_and_the_pairing_url() {
    let (_tmp, home) = fresh_home();
    let value = pair_json(&home, &["pair", "--json"]);
    let object = value.as_object().unwrap();
    let mut keys: Vec<_> = object.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "code",
            "reaches",
            "relay",
            "relay_certificate_sha256",
            "relay_saved",
            "relay_source",
            "relay_token_in_link",
            "relays",
            "ticket",
            "ticket_expires",
            "token",
            "url"
        ]
    );
    assert_eq!(value["relay_token_in_link"], false, "no relay token here: {value}");
    let (code, token) = (field(&value, "code"), field(&value, "token"));
    assert!(is_secret(code) && is_secret(token), "{value}");
    assert_ne!(code, token);
    assert_eq!(field(&value, "relay"), DEFAULT_RELAY);
    let ticket = field(&value, "ticket");
    assert!(is_secret(ticket) && ticket != token, "{value}");
    assert_eq!(field(&value, "url"), format!("{DEFAULT_RELAY}/#code={code}&ticket={ticket}"));

    assert_eq!(mode(&home), 0o700);
    for name in SECRET_FILES.iter().chain(&["config.toml"]) {
        assert_eq!(mode(&home.join(name)), 0o600, "{name}");
    }
    assert_eq!(stored_secrets(&home), [code, token]);
}

#[test]
fn pair_reuses_the_secrets_and_rotate_replaces_both() {
    let (_tmp, home) = fresh_home();
    // The secrets stay; each link carries a ticket of its own.
    let without_ticket = |mut value: Value| {
        let object = value.as_object_mut().unwrap();
        assert!(object.remove("ticket").is_some() && object.remove("ticket_expires").is_some());
        object.remove("url");
        // The first pair saves the relay it printed; later ones say it was saved.
        object.remove("relay_source");
        value
    };
    let first = pair_json(&home, &["pair", "--json"]);
    let again = pair_json(&home, &["pair", "--json"]);
    assert_ne!(first["ticket"], again["ticket"]);
    let (first, again) = (without_ticket(first), without_ticket(again));
    assert_eq!(first, again);

    let rotated = pair_json(&home, &["pair", "--rotate", "--json"]);
    assert_ne!(field(&rotated, "code"), field(&first, "code"));
    assert_ne!(field(&rotated, "token"), field(&first, "token"));
    assert_eq!(stored_secrets(&home), [field(&rotated, "code"), field(&rotated, "token")]);
    assert!(!home.join(".rotation").exists(), "the rotation journal is removed once applied");
    for name in SECRET_FILES {
        assert_eq!(mode(&home.join(name)), 0o600, "{name}");
    }
    // `--rotate` also says what happened to a running agent (none here).
    let mut rotated = without_ticket(rotated);
    let report = rotated.as_object_mut().unwrap().remove("rotated").expect("a rotation report");
    assert_eq!(report, serde_json::json!({"agent": null, "picked_up": false}));
    assert_eq!(without_ticket(pair_json(&home, &["pair", "--json"])), rotated);
}

#[test]
fn global_flags_work_before_and_after_the_command() {
    let (_tmp, home) = fresh_home();
    // Once paired, so that both say the relay is the saved one.
    voxa(&home, &["pair"]);
    let after = voxa(&home, &["pair", "--json"]);
    let before = voxa(&home, &["--json", "pair"]);
    assert_eq!(after.status.code(), Some(0));
    let printed = |out: &std::process::Output| steady(serde_json::from_str(&stdout(out)).unwrap());
    assert_eq!(printed(&before), printed(&after));

    let other = home.with_file_name("other");
    let flagged = pair_json(&home, &["pair", "--json", "--home", other.to_str().unwrap()]);
    assert_eq!(stored_secrets(&other), [field(&flagged, "code"), field(&flagged, "token")]);
    assert_ne!(stdout(&after).trim(), flagged.to_string(), "--home wins over VOXA_HOME");
}

#[test]
fn human_output_without_a_terminal_is_plain_text_with_a_scannable_qr() {
    let (_tmp, home) = fresh_home();
    let url = field(&pair_json(&home, &["pair", "--json"]), "url").to_owned();

    let out = voxa(&home, &["pair"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains('\x1b'), "no ANSI escape when piped: {text:?}");
    // Each pair makes a ticket of its own: the link is the same but for it.
    let url = printed_link(&text, &url);
    assert!(text.contains('▀') && text.contains('▄') && text.contains('█'), "QR half blocks: {text}");
    assert_eq!(decode_qr(&text), url);

    let out = voxa(&home, &["pair", "--no-qr"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0));
    printed_link(&text, &url);
    assert!(!text.contains(['▀', '▄', '█']), "--no-qr prints no blocks: {text}");
}

/// A private relay's token rides in the link's fragment (percent-encoded), never in its query, and
/// the output says so: from the flag's file, from the environment, or from the home.
#[test]
fn pair_puts_a_private_relays_token_in_the_links_fragment() {
    const TOKEN: &str = "team relay/token+7f3e&x";
    let (tmp, home) = fresh_home();
    let token_file = tmp.path().join("relay.token");
    fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    fs::set_permissions(&token_file, fs::Permissions::from_mode(0o600)).unwrap();
    let file_arg = token_file.to_str().unwrap();
    let value =
        pair_json(&home, &["pair", "--json", "--relay", "https://relay.example.com", "--relay-token-file", file_arg]);
    assert_eq!(value["relay_token_in_link"], true, "{value}");
    let url = url::Url::parse(field(&value, "url")).unwrap();
    assert_eq!(url.query(), None, "nothing in the query: {url}");
    let fragment: Vec<(String, String)> =
        url::form_urlencoded::parse(url.fragment().unwrap().as_bytes()).into_owned().collect();
    assert!(fragment.contains(&("relay_token".to_owned(), TOKEN.to_owned())), "{fragment:?}");
    assert!(!field(&value, "url").contains(TOKEN), "percent-encoded: {value}");

    let text = stdout(&voxa_cmd(&home).env("VOXA_RELAY_TOKEN", TOKEN).args(["pair", "--no-qr"]).output().unwrap());
    assert!(text.contains("The link carries the relay's token as well"), "{text}");
    assert!(text.contains("&relay_token=team+relay%2Ftoken%2B7f3e%26x"), "{text}");

    // A service's token, saved in the home, is the one a plain `pair` puts in the link.
    fs::write(home.join("relay_token"), format!("{TOKEN}\n")).unwrap();
    fs::set_permissions(home.join("relay_token"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(pair_json(&home, &["pair", "--json"])["relay_token_in_link"], true);
    fs::remove_file(home.join("relay_token")).unwrap();
    let plain = pair_json(&home, &["pair", "--json"]);
    assert!(!field(&plain, "url").contains("relay_token"), "{plain}");
}

#[test]
fn pair_says_what_the_link_reaches_and_who_runs_the_relay() {
    // The default relay: a phone opens the link; the output names who runs the relay.
    let (_tmp, home) = fresh_home();
    let text = stdout(&voxa(&home, &["pair"]));
    assert!(text.contains("Scan the code with the phone's camera"), "{text}");
    assert!(text.contains("https://api.voxa.space, the default relay, run by voxa's publisher, not by you"), "{text}");
    assert!(text.contains("there is no app to install") && !text.contains("Voxa app"), "{text}");
    let text = stdout(&voxa(&home, &["pair", "--no-qr"]));
    assert!(text.contains("Open this link in the phone's browser") && !text.contains("Scan"), "{text}");

    // A relay on loopback: this machine's browser only, no QR code, and the ways to reach a phone.
    let (_tmp, local) = fresh_home();
    let out = voxa(&local, &["pair", "--relay", "http://127.0.0.1:9"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains(['▀', '▄', '█']), "no QR code for a link no phone can open: {text}");
    assert!(text.contains("Open this link in a browser on this machine"), "{text}");
    assert!(text.contains("this machine's browser only"), "{text}");
    for way in
        ["voxa relay --domain <its name>", "tailscale serve --bg 8787", "`voxa run` dials https://api.voxa.space"]
    {
        assert!(text.contains(way), "{way:?} missing from {text}");
    }
}

#[test]
fn on_a_terminal_the_qr_is_drawn_black_on_white() {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};

    let (_tmp, home) = fresh_home();
    let url = field(&pair_json(&home, &["pair", "--json"]), "url").to_owned();

    let pty = native_pty_system().openpty(PtySize { rows: 60, cols: 120, ..PtySize::default() }).unwrap();
    let mut cmd = CommandBuilder::new(crate::support::voxa_bin());
    cmd.arg("pair");
    cmd.env("VOXA_HOME", &home);
    for var in ["VOXA_RELAY", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    let mut child = pty.slave.spawn_command(cmd).unwrap();
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let mut seen = Vec::new();
    // The read ends with EIO once the child has exited and the last slave handle is closed.
    let _ = std::io::Read::read_to_end(&mut reader, &mut seen);
    assert!(child.wait().unwrap().success());
    let text = String::from_utf8(seen).unwrap().replace("\r\n", "\n");

    let qr_lines: Vec<_> = text.lines().filter(|line| line.contains(['▀', '▄', '█'])).collect();
    assert!(!qr_lines.is_empty(), "{text}");
    assert!(qr_lines.iter().all(|line| line.starts_with("\x1b[30;107m") && line.ends_with("\x1b[0m")), "{text:?}");
    let url = printed_link(&text, &url);
    let plain = text.replace("\x1b[30;107m", "").replace("\x1b[0m", "");
    assert_eq!(decode_qr(&plain), url);
}

/// Reads the half-block QR code out of `text` as a phone camera would.
fn decode_qr(text: &str) -> String {
    let is_art = |line: &&str| !line.is_empty() && line.chars().all(|c| matches!(c, ' ' | '▀' | '▄' | '█'));
    let rows: Vec<Vec<char>> = text.lines().filter(is_art).map(|line| line.chars().collect()).collect();
    assert!(!rows.is_empty(), "no QR code in {text}");
    let width = rows.iter().map(Vec::len).max().unwrap();
    let scale = 4;
    let dark = |x: usize, y: usize| match rows[y / 2].get(x).copied().unwrap_or(' ') {
        '█' => true,
        '▀' => y % 2 == 0,
        '▄' => y % 2 == 1,
        _ => false,
    };
    let mut image = rqrr::PreparedImage::prepare_from_greyscale(width * scale, rows.len() * 2 * scale, |x, y| {
        if dark(x / scale, y / scale) {
            0
        } else {
            255
        }
    });
    let grids = image.detect_grids();
    assert_eq!(grids.len(), 1, "one QR code expected");
    grids[0].decode().unwrap().1
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    use std::process::{Command, Stdio};

    let (_tmp, home) = fresh_home();
    pair_json(&home, &["pair", "--json"]);
    // A pipe whose reader is gone, as in `voxa pair | head -0`: the reader exits first.
    let mut reader = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
    let orphaned = Stdio::from(reader.stdin.take().unwrap());
    assert!(reader.wait().unwrap().success());
    let out = voxa_cmd(&home).arg("pair").stdout(orphaned).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

#[test]
fn relay_precedence_is_flag_then_environment_then_saved_then_default() {
    let (_tmp, home) = fresh_home();
    let relay_of = |value: &Value| field(value, "relay").to_owned();

    let first = pair_json(&home, &["pair", "--json"]);
    assert_eq!(relay_of(&first), DEFAULT_RELAY);

    let with_env = |env: &str, args: &[&str]| -> Value {
        let out = voxa_cmd(&home).env("VOXA_RELAY", env).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let env = with_env("https://env.example", &["pair", "--json"]);
    assert_eq!(relay_of(&env), "https://env.example");
    let (code, ticket) = (field(&first, "code"), field(&env, "ticket"));
    assert_eq!(field(&env, "url"), format!("https://env.example/#code={code}&ticket={ticket}"));
    // The relay used at pair time is saved: without flag or environment it is used again.
    assert_eq!(relay_of(&pair_json(&home, &["pair", "--json"])), "https://env.example");

    let flag = with_env("https://env2.example", &["pair", "--json", "--relay", "https://flag.example/"]);
    assert_eq!(relay_of(&flag), "https://flag.example");
    // A bad environment value does not matter when the flag names a good relay.
    let flag = with_env("http://example.com", &["pair", "--json", "--relay", "https://flag.example"]);
    assert_eq!(relay_of(&flag), "https://flag.example");
    assert_eq!(relay_of(&pair_json(&home, &["pair", "--json"])), "https://flag.example");
    let config = fs::read_to_string(home.join("config.toml")).unwrap();
    assert!(config.contains("\"https://flag.example\""), "{config}");

    // Changing relays never touches the secrets.
    assert_eq!(stored_secrets(&home), [field(&first, "code"), field(&first, "token")]);
}

#[test]
fn a_plain_http_relay_is_accepted_only_on_loopback() {
    let (_tmp, home) = fresh_home();
    let value = pair_json(&home, &["pair", "--json", "--relay", "http://127.0.0.1:9"]);
    assert_eq!(field(&value, "relay"), "http://127.0.0.1:9");
    assert!(field(&value, "url").starts_with("http://127.0.0.1:9/#code="));

    let (_tmp, fresh) = fresh_home();
    let out = voxa(&fresh, &["pair", "--relay", "http://example.com"]);
    let err = assert_refused(&out, 2, "http://example.com", &[]);
    assert!(err.contains("https://"), "the message says what to use instead: {err}");
    assert!(!fresh.exists(), "a refused relay creates nothing");

    let before = snapshot(&home);
    let secrets = stored_secrets(&home);
    for args in [&["pair", "--relay", "http://example.com"][..], &["pair", "--rotate", "--relay", "ws://10.0.0.1"]] {
        assert_refused(&voxa(&home, args), 2, "not encrypted", &secrets);
        assert_eq!(snapshot(&home), before, "voxa {args:?} changed the home");
    }
}

#[test]
fn a_relay_that_is_not_a_url_is_refused_in_one_sentence() {
    let (_tmp, home) = fresh_home();
    pair_json(&home, &["pair", "--json"]);
    let before = snapshot(&home);
    let secrets = stored_secrets(&home);
    for relay in ["relay", "ftp://relay.example", "https://user:pw@relay.example", "https://relay.example/?code=1"] {
        for args in [&["pair", "--relay", relay][..], &["pair", "--rotate", "--relay", relay]] {
            assert_refused(&voxa(&home, args), 2, "relay URL", &secrets);
            assert_eq!(snapshot(&home), before, "voxa {args:?} changed the home");
        }
    }
}

#[test]
fn a_bad_saved_relay_names_the_config_file() {
    let (_tmp, home) = fresh_home();
    pair_json(&home, &["pair", "--json"]);
    fs::write(home.join("config.toml"), "relay = \"http://example.com\"\n").unwrap();
    let before = snapshot(&home);
    let out = voxa(&home, &["pair"]);
    assert_refused(&out, 2, &home.join("config.toml").display().to_string(), &stored_secrets(&home));
    assert_eq!(snapshot(&home), before);
    // The flag replaces it.
    let value = pair_json(&home, &["pair", "--json", "--relay", "https://good.example"]);
    assert_eq!(field(&value, "relay"), "https://good.example");
}

#[test]
fn loose_permissions_are_refused_with_the_chmod_that_fixes_them() {
    let (_tmp, home) = fresh_home();
    pair_json(&home, &["pair", "--json"]);
    let secrets = stored_secrets(&home);

    for (name, loose) in [("auth_token", 0o644), ("relay_code", 0o640), ("config.toml", 0o604)] {
        let path = home.join(name);
        chmod(&path, loose);
        let before = snapshot(&home);
        for args in [&["pair"][..], &["pair", "--json"]] {
            let out = voxa(&home, args);
            assert_refused(&out, 2, &format!("chmod 600 {}", path.display()), &secrets);
            assert_eq!(snapshot(&home), before, "voxa {args:?} changed the home");
            assert_eq!(mode(&path), loose, "voxa never fixes permissions behind the user's back");
        }
        chmod(&path, 0o600);
    }

    chmod(&home, 0o755);
    for args in [&["pair"][..], &["pair", "--rotate"]] {
        let out = voxa(&home, args);
        assert_refused(&out, 2, &format!("chmod 700 {}", home.display()), &secrets);
    }
    chmod(&home, 0o700);
    assert_eq!(stored_secrets(&home), secrets);

    // Rotation never reads the old secrets, so it is also the way out when one was exposed:
    // both are replaced by private files.
    chmod(&home.join("auth_token"), 0o644);
    let rotated = pair_json(&home, &["pair", "--rotate", "--json"]);
    assert_eq!(stored_secrets(&home), [field(&rotated, "code"), field(&rotated, "token")]);
    assert!(!stored_secrets(&home).iter().any(|s| secrets.contains(s)));
    for name in SECRET_FILES {
        assert_eq!(mode(&home.join(name)), 0o600, "{name}");
    }
}

#[test]
fn corrupt_secret_files_are_reported_and_kept_until_rotated() {
    let (_tmp, home) = fresh_home();
    pair_json(&home, &["pair", "--json"]);
    let token = fs::read(home.join("auth_token")).unwrap();
    let token_text = String::from_utf8(token.clone()).unwrap().trim().to_owned();

    let cases: [(&str, &[u8]); 4] = [
        ("truncated", &token[..16]),
        ("empty", b""),
        ("not hex", b"ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ\n"),
        ("not text", b"\xff\xfe\x00\x01\xff\xfe\x00\x01\xff\xfe\x00\x01\xff\xfe\x00\x01"),
    ];
    for (what, bytes) in cases {
        let path = home.join("relay_code");
        fs::write(&path, bytes).unwrap();
        let before = snapshot(&home);
        let out = voxa(&home, &["pair", "--json"]);
        let err = assert_refused(&out, 2, &path.display().to_string(), std::slice::from_ref(&token_text));
        assert!(err.contains("voxa pair --rotate"), "{what}: the fix is named: {err}");
        if bytes.len() >= 8 {
            let partial = String::from_utf8_lossy(&bytes[..8]).into_owned();
            assert!(!err.contains(&partial), "{what}: the bad value is not echoed: {err}");
        }
        assert_eq!(snapshot(&home), before, "{what}: nothing was overwritten");
    }

    let rotated = pair_json(&home, &["pair", "--rotate", "--json"]);
    assert_eq!(stored_secrets(&home), [field(&rotated, "code"), field(&rotated, "token")]);
    assert_ne!(field(&rotated, "token"), token_text);
}

#[test]
fn a_home_that_is_a_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    fs::write(&home, b"precious").unwrap();
    for args in [&["pair"][..], &["pair", "--rotate"], &["pair", "--json"]] {
        let out = voxa(&home, args);
        assert_refused(&out, 2, &format!("{} exists but is not a directory", home.display()), &[]);
        assert_eq!(fs::read(&home).unwrap(), b"precious");
    }
}

#[test]
fn a_read_only_home_keeps_its_secrets() {
    let (_tmp, home) = fresh_home();
    let paired = pair_json(&home, &["pair", "--json"]);
    chmod(&home, 0o500);
    // Reading the secrets needs no write (each link's ticket aside).
    assert_eq!(steady(pair_json(&home, &["pair", "--json"])), steady(paired.clone()));

    let out = voxa(&home, &["pair", "--rotate", "--json"]);
    if is_root() {
        // Root writes regardless of the mode bits, and voxa does not second-guess the kernel:
        // the rotation completes, whole.
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let rotated: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_ne!(rotated, paired);
        assert_eq!(stored_secrets(&home), [field(&rotated, "code"), field(&rotated, "token")]);
    } else {
        let secrets = stored_secrets(&home);
        let err = assert_refused(&out, 1, &format!("could not write {}", home.display()), &secrets);
        assert!(err.contains("ermission denied"), "{err}");
        assert_eq!(secrets, [field(&paired, "code"), field(&paired, "token")]);
    }
    assert!(!home.join(".rotation").exists(), "no journal is left behind");
    assert_eq!(mode(&home), 0o500, "voxa never fixes permissions behind the user's back");
    chmod(&home, 0o700);

    // A first pair in a read-only directory.
    let (_tmp, fresh) = fresh_home();
    fs::create_dir(&fresh).unwrap();
    chmod(&fresh, 0o500);
    let out = voxa(&fresh, &["pair", "--json"]);
    if is_root() {
        let value: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(stored_secrets(&fresh), [field(&value, "code"), field(&value, "token")]);
    } else {
        assert_refused(&out, 1, &format!("could not write {}", fresh.display()), &[]);
        assert_eq!(snapshot(&fresh), [], "no partial or temporary file is left");
    }
    chmod(&fresh, 0o700);
}

#[test]
fn usage_errors_exit_2_and_help_and_version_exit_0() {
    let (_tmp, home) = fresh_home();
    let out = voxa(&home, &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("invalid value 'tcsh'") && err.contains("bash"), "{err}");
    assert_eq!(stdout(&out), "");

    let out = voxa(&home, &["pair", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--bogus"), "{}", stderr(&out));
    assert!(!home.exists(), "usage errors create nothing");

    let out = voxa(&home, &["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), format!("voxa {}\n", env!("CARGO_PKG_VERSION")));

    let out = voxa(&home, &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    for word in ["pair", "run", "status", "call", "relay", "env", "completions", "--home", "--relay", "--json"] {
        assert!(help.contains(word), "{word} missing from --help:\n{help}");
    }
    let out = voxa(&home, &["pair", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("--rotate") && stdout(&out).contains("--no-qr"));
}

/// Shells and the file each completion script is committed as.
const COMPLETIONS: [(&str, &str); 5] = [
    ("bash", "voxa.bash"),
    ("zsh", "_voxa"),
    ("fish", "voxa.fish"),
    ("elvish", "voxa.elv"),
    ("powershell", "_voxa.ps1"),
];

#[test]
fn committed_completions_match_the_binary() {
    let (_tmp, home) = fresh_home();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("completions");
    let mut stale = Vec::new();
    for (shell, file) in COMPLETIONS {
        let out = voxa(&home, &["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(["pair", "rotate", "completions"].iter().all(|word| script.contains(word)), "{shell}: {script}");
        if fs::read_to_string(dir.join(file)).ok().as_deref() != Some(script.as_str()) {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "completions/{} out of date with the CLI; refresh with: completions/generate.sh",
        stale.join(", completions/")
    );
}

/// Set to regenerate `man/` from the CLI instead of checking it (`man/generate.sh` does).
const UPDATE_MAN: &str = "VOXA_UPDATE_MAN";

#[test]
fn committed_man_pages_match_the_cli() {
    use clap::CommandFactory;
    let generated = tempfile::tempdir().unwrap();
    clap_mangen::generate_to(voxa::cli::Cli::command(), generated.path()).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let pages = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.retain(|name| name.ends_with(".1"));
        names.sort();
        names
    };
    let wanted = pages(generated.path());
    for page in ["voxa.1", "voxa-service.1", "voxa-service-install.1", "voxa-doctor.1", "voxa-pair.1"] {
        assert!(wanted.iter().any(|name| name == page), "{page} not generated: {wanted:?}");
    }
    if std::env::var_os(UPDATE_MAN).is_some() {
        fs::create_dir_all(&dir).unwrap();
        for stale in pages(&dir) {
            fs::remove_file(dir.join(stale)).unwrap();
        }
        for page in &wanted {
            fs::copy(generated.path().join(page), dir.join(page)).unwrap();
        }
        return;
    }
    let mut stale: Vec<String> = wanted
        .iter()
        .filter(|page| fs::read(dir.join(page)).ok() != fs::read(generated.path().join(page)).ok())
        .cloned()
        .collect();
    stale.extend(pages(&dir).into_iter().filter(|page| !wanted.contains(page)));
    assert!(stale.is_empty(), "man/{} out of date with the CLI; refresh with: man/generate.sh", stale.join(", man/"));
}
