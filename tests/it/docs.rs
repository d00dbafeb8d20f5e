//! The docs name what exists: every path a document names (`src/…`, `web/…`, a module's file such
//! as `agent/peers.rs`) is a file or folder of this checkout, so a file renamed or removed cannot
//! leave a page pointing at nothing. CHANGELOG.md is history and may name what has gone.

use std::path::Path;

/// The documents held to the code.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/ARCHITECTURE.md",
    "docs/GUIDE.md",
    "docs/OPERATIONS.md",
    "docs/PERFORMANCE.md",
    "docs/PROTOCOL.md",
    "docs/SECURITY.md",
];

/// Where a path a document names may start: the checkout, or a folder docs name files relative to
/// (`agent/peers.rs` is `src/agent/peers.rs`, `js/session.js` is `web/js/session.js`).
const ROOTS: &[&str] = &["", "src/", "web/", "web/js/", "tests/", "tests/it/", "benches/", "benches/voxa_bench/"];

/// Endings of the files documents name.
const ENDINGS: &[&str] = &[
    ".rs",
    ".js",
    ".mjs",
    ".css",
    ".html",
    ".md",
    ".toml",
    ".json",
    ".sh",
    ".conf",
    ".service",
    ".webmanifest",
    ".svg",
    ".png",
];

/// Folders whose paths a document names even without a file ending (`src/relay/`, `web/js/seal`).
const TOP_FOLDERS: &[&str] =
    &["src/", "web/", "tests/", "benches/", "deploy/", "docs/", "examples/", "fuzz/", "man/", "completions/", ".ci/"];

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// The path-like words of `text`: runs of path characters with a `/` in them that name a file (by
/// its ending) or start with one of [`TOP_FOLDERS`]. URLs, globs and elisions are left out.
fn named_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(start) = rest.find(|c: char| is_path_char(c)) {
            let word_len = rest[start..].find(|c: char| !is_path_char(c)).unwrap_or(rest.len() - start);
            let word = &rest[start..start + word_len];
            let before = rest[..start].chars().next_back();
            let after = rest[start + word_len..].chars().next();
            rest = &rest[start + word_len..];
            // Part of a URL, a glob, an elided path (`src/…/x`), a template (`{a,b}`) or a home path.
            if matches!(before, Some(':' | '*' | '…' | '~' | '$' | '{' | '<' | '@' | '\\'))
                || matches!(after, Some('*' | '…' | '{' | '}' | '<' | '>' | ':'))
            {
                continue;
            }
            let word = word.trim_end_matches(['.', '-']);
            if !word.contains('/') || word.starts_with('/') || word.starts_with("..") || word.contains("//") {
                continue;
            }
            let names_file = ENDINGS.iter().any(|ending| word.ends_with(ending));
            let names_folder = TOP_FOLDERS.iter().any(|folder| word.starts_with(folder));
            if names_file || names_folder {
                found.push(word.to_owned());
            }
        }
    }
    found
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    for document in DOCUMENTS {
        let text = std::fs::read_to_string(root.join(document)).unwrap_or_else(|err| panic!("{document}: {err}"));
        for path in named_paths(&text) {
            if !ROOTS.iter().any(|prefix| root.join(format!("{prefix}{path}")).exists()) {
                missing.push(format!("{document}: {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "the docs name paths that do not exist:\n  {}", missing.join("\n  "));
}

#[test]
fn the_path_finder_finds_paths_and_leaves_urls_alone() {
    let found = named_paths(
        "see `src/agent/peers.rs`, agent/gate.rs and web/js/seal/ (or https://example.com/a/b.js), \
         src/…/x.rs, ~/.voxa/config.toml, tests/it/*.rs and docs/PROTOCOL.md.",
    );
    assert_eq!(found, ["src/agent/peers.rs", "agent/gate.rs", "web/js/seal/", "docs/PROTOCOL.md"]);
}
