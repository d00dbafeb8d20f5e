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

/// The files of `dir` (relative to the checkout) ending in `ending`, paths relative to `dir`.
fn files_under(root: &Path, dir: &str, ending: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.join(dir)];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(ending) {
                found.push(path.strip_prefix(root.join(dir)).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// The paragraphs of docs/ARCHITECTURE.md about one folder: from the one that opens with its name in
/// bold (**`agent/`**, **`cli`**) to the next such paragraph or heading.
fn section<'a>(text: &'a str, name: &str) -> &'a str {
    let opening = [format!("**`{name}/`**"), format!("**`{name}`**")];
    let Some(start) = opening.iter().filter_map(|open| text.find(open.as_str())).min() else { return "" };
    let rest = &text[start + 2..];
    let end = [rest.find("\n**`"), rest.find("\n#")].into_iter().flatten().min().unwrap_or(rest.len());
    &rest[..end]
}

/// Whether docs/ARCHITECTURE.md names the file `relative` of the folder `top` (`start.rs` of
/// `agent`): by its path from the checkout or from `src/`, or in the folder's own paragraphs by its
/// path inside the folder or, for a folder's `mod.rs`, by the folder itself.
fn names_module(text: &str, prefix: &str, top: &str, relative: &str) -> bool {
    let whole = format!("{top}/{relative}");
    if text.contains(&format!("`{prefix}{whole}`")) || text.contains(&format!("{whole}`")) {
        return true;
    }
    let own = section(text, top);
    if let Some(folder) = relative.strip_suffix("mod.rs") {
        return folder.is_empty() && !own.is_empty() || own.contains(&format!("`{folder}`"));
    }
    let name = relative.rsplit('/').next().unwrap_or(relative);
    own.contains(&format!("`{relative}`")) || own.contains(&format!("`{name}`")) || own.contains(&format!("/{name}`"))
}

#[test]
fn the_architecture_names_every_module_of_the_crate_and_of_the_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let mut unnamed = Vec::new();
    // Test code in files of its own (`tests.rs`, `hub_tests.rs`) is its module's.
    for file in files_under(root, "src", ".rs").into_iter().filter(|file| !file.ends_with("tests.rs")) {
        let named = match file.split_once('/') {
            Some((top, relative)) => names_module(&text, "src/", top, relative),
            // A file at the top: by its path, by its name, or by its own paragraph (**`cli`**).
            None => {
                let module = file.trim_end_matches(".rs");
                text.contains(&format!("src/{file}"))
                    || text.contains(&format!("`{file}`"))
                    || !section(&text, module).is_empty()
            }
        };
        if !named {
            unnamed.push(format!("src/{file}"));
        }
    }
    for file in files_under(root, "web/js", ".js") {
        if !names_module(&text, "web/", "js", &file) && !section(&text, "web").contains(&format!("`{file}`")) {
            let name = file.rsplit('/').next().unwrap();
            if !section(&text, "web").contains(&format!("`{name}`"))
                && !section(&text, "web").contains(&format!("/{name}`"))
            {
                unnamed.push(format!("web/js/{file}"));
            }
        }
    }
    assert!(unnamed.is_empty(), "docs/ARCHITECTURE.md does not name these modules:\n  {}", unnamed.join("\n  "));
}
