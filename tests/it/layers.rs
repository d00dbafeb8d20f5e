//! The module layers point one way, as the table in docs/ARCHITECTURE.md says: reads every `src/**/*.rs`, maps each
//! `crate::…`, `super::…` and `self::…` path outside test code to the module it names, and fails
//! on an import from a higher layer, on modules that import each other (directly or round a
//! longer circle), on a leaf (the relay, its core) importing more than it may, or on the relay's
//! core naming a crate of HTTP, TLS or ACME. And the tests' own layout: what test files share
//! lives in tests/it/support/, and no file of tests/it/ names a test file other than itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The rule as docs/ARCHITECTURE.md's "Layers" tables give it: the layer of each top-level module
/// (a module may import from its own layer and those below), the leaves that may import only the
/// modules listed (and their own children) whatever their layer, and the crates a module (and its
/// children) never names.
struct Rules {
    layers: Vec<(String, u8)>,
    leaves: Vec<(String, Vec<String>)>,
    forbidden: Vec<(String, Vec<String>)>,
}

/// The rule, read from docs/ARCHITECTURE.md: the one place it is written.
fn rules() -> Rules {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md");
    parse_rules(&std::fs::read_to_string(&page).unwrap())
}

/// The words in backticks of one table cell.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The rows of the tables in the page's "Layers" section: `| 3 | `agent`, … |` is a layer,
/// `| `relay` | `net`, … | `rustls`, … |` a leaf and the crates it never names.
fn parse_rules(page: &str) -> Rules {
    let section = page.split("\n## Layers\n").nth(1).expect("a Layers section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut rules = Rules { layers: Vec::new(), leaves: Vec::new(), forbidden: Vec::new() };
    for line in section.lines().filter(|line| line.starts_with('|') && !line.starts_with("|--")) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if let Ok(rank) = cells[0].parse::<u8>() {
            rules.layers.extend(quoted(cells[1]).into_iter().map(|module| (module, rank)));
        } else if let [leaf] = quoted(cells[0]).as_slice() {
            rules.leaves.push((leaf.clone(), quoted(cells.get(1).unwrap_or(&""))));
            let crates = quoted(cells.get(2).unwrap_or(&""));
            if !crates.is_empty() {
                rules.forbidden.push((leaf.clone(), crates));
            }
        }
    }
    rules
}

#[test]
fn the_rule_is_read_from_the_architecture_page() {
    let rules = rules();
    let rank = |name: &str| rules.layers.iter().find(|(module, _)| module == name).map(|(_, rank)| *rank);
    assert_eq!(
        (rank("commands"), rank("cli"), rank("agent"), rank("tools"), rank("protocol")),
        (Some(5), Some(4), Some(3), Some(2), Some(1))
    );
    assert!(rules.layers.len() > 20, "{} modules in the table", rules.layers.len());
    let leaf = |name: &str| rules.leaves.iter().find(|(leaf, _)| leaf == name).map(|(_, allowed)| allowed.clone());
    assert_eq!(leaf("relay::core"), Some(vec!["protocol".to_owned(), "secret".to_owned(), "text".to_owned()]));
    assert!(rules
        .forbidden
        .iter()
        .any(|(leaf, crates)| leaf == "relay::core" && crates.contains(&"rustls".to_owned())));
}

#[test]
fn imports_never_point_up_and_never_close_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = BTreeMap::new();
    collect(&root, &root, &mut sources);
    assert!(sources.len() > 20, "read only {} files under {}", sources.len(), root.display());
    let problems = check(&sources, &rules());
    assert!(problems.is_empty(), "layering broken:\n{}", problems.join("\n"));
}

#[test]
fn the_checker_finds_an_upward_import_and_a_circle() {
    let sources: BTreeMap<String, String> = [
        ("lib.rs", "pub mod agent; pub mod net; pub mod protocol;"),
        ("agent/mod.rs", "pub mod link; pub mod session;\npub use link::Link;"),
        ("agent/link.rs", "use super::session::Session;\nuse crate::net::dial;"),
        ("agent/session.rs", "use crate::{protocol, agent::link::Link};"),
        ("net/mod.rs", "pub mod dial;\n#[cfg(test)]\nmod tests;"),
        // Test code in a file of its own, by its module's name or by a path beside its parent.
        ("net/tests.rs", "use crate::agent::session::Session;"),
        ("net/dial_tests.rs", "use crate::agent::session::Session;"),
        // An upward import, in a path inside code rather than a `use`.
        ("net/dial.rs", "fn f() { let _ = crate::agent::session::Session::new(); }\n#[cfg(test)]\n#[path = \"dial_tests.rs\"]\nmod tests;"),
        // Not imports: comments, strings and test code.
        (
            "protocol.rs",
            "// crate::agent\nconst S: &str = \"crate::agent\";\n#[cfg(test)]\nmod tests { use crate::agent; }",
        ),
    ]
    .into_iter()
    .map(|(path, text)| (path.to_owned(), text.to_owned()))
    .collect();
    let problems = check(&sources, &rules());
    assert!(problems.iter().any(|p| p.contains("net::dial imports agent::session")), "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("circle") && p.contains("agent::link")), "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("circle: agent → net → agent")), "{problems:#?}");
    assert!(!problems.iter().any(|p| p.starts_with("protocol")), "{problems:#?}");
    assert!(!problems.iter().any(|p| p.contains("net::tests") || p.contains("dial_tests")), "{problems:#?}");
}

#[test]
fn the_checker_holds_the_relay_and_its_core_to_their_leaf_imports() {
    let sources: BTreeMap<String, String> = [
        ("lib.rs", "pub mod relay; pub mod gemini; pub mod net; pub mod protocol;"),
        ("relay/mod.rs", "mod core; mod edge; mod web; use crate::net::http; use crate::protocol::PeerRole;"),
        // Same layer, so no upward import: only the leaf rule catches it.
        ("relay/edge.rs", "use super::super::gemini::GeminiConfig; use super::core::Core; use crate::net::http;"),
        // Inside the relay, but the core may not reach its edge, HTTP or TLS.
        ("relay/core/mod.rs", "mod hub; use crate::protocol::relay; use super::web::WebApp;"),
        ("relay/web.rs", "use crate::net::web;"),
        ("relay/core/hub.rs", "use crate::net::http::RequestHead; fn f() { let _ = rustls::ServerConfig::builder(); }"),
        ("gemini/mod.rs", "use crate::net::dial;"),
        ("net/mod.rs", "pub mod http; pub mod dial;"),
        ("net/http.rs", ""),
        ("net/dial.rs", ""),
        ("protocol/mod.rs", "pub mod relay;"),
        ("protocol/relay.rs", ""),
    ]
    .into_iter()
    .map(|(path, text)| (path.to_owned(), text.to_owned()))
    .collect();
    let problems = check(&sources, &rules());
    assert_eq!(
        problems,
        [
            "relay::core::hub names the crate rustls, which relay::core never uses",
            "relay::core imports relay::web, and relay::core may import only protocol, secret, text",
            "relay::core::hub imports net::http, and relay::core may import only protocol, secret, text",
            "relay::edge imports gemini, and relay may import only net, protocol, secret, text",
        ]
    );
}

/// The integration tests' rule: a test file (a file beside tests/it/main.rs) holds its tests and
/// its own helpers; what more than one uses lives in tests/it/support/. No test file, and no
/// support module, names another test file.
#[test]
fn no_test_file_names_another() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut sources = BTreeMap::new();
    collect(&dir, &dir, &mut sources);
    assert!(
        sources.len() > 50 && sources.contains_key("main.rs") && sources.contains_key("support/mod.rs"),
        "read only {} files under {}",
        sources.len(),
        dir.display()
    );
    let problems = test_files_named(&sources);
    assert!(
        problems.is_empty(),
        "test files name other test files; move what they share to tests/it/support/:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_finds_a_test_file_naming_another() {
    let sources: BTreeMap<String, String> = [
        ("main.rs", "mod a; mod b; mod c; mod d; mod support;"),
        // Its own items and the support modules are fine.
        ("a.rs", "use crate::support::x::X;\nfn f() { crate::a::g(); }\nfn g() {}"),
        // Not imports: comments and strings.
        (
            "b.rs",
            "//! Like [`crate::a`].\n// crate::a::g\nconst S: &str = \"crate::a::g\";\nmod inner { use super::*; }",
        ),
        // An import, a group, a glob and a path inside code.
        ("c.rs", "use crate::a::g;\nuse crate::{support::x, b::{S, T}};\nuse crate::d::*;"),
        ("d.rs", "fn f() { let _ = crate::a::g(); }"),
        // A support module naming a test file: a helper that depends on a test.
        ("support/mod.rs", "pub mod x;"),
        ("support/x.rs", "use crate::support::harness::*;\nuse crate::b::S;"),
    ]
    .into_iter()
    .map(|(path, text)| (path.to_owned(), text.to_owned()))
    .collect();
    assert_eq!(
        test_files_named(&sources),
        [
            "c.rs names crate::a, the test file a.rs",
            "c.rs names crate::b, the test file b.rs",
            "c.rs names crate::d, the test file d.rs",
            "d.rs names crate::a, the test file a.rs",
            "support/x.rs names crate::b, the test file b.rs",
        ]
    );
}

/// Every test file another file of tests/it/ (`path → text`, paths from tests/it/) names by a
/// `crate::` path, one sentence each. A test file may name its own items.
fn test_files_named(sources: &BTreeMap<String, String>) -> Vec<String> {
    let tests: BTreeSet<&str> = sources
        .keys()
        .filter(|file| !file.contains('/') && *file != "main.rs")
        .filter_map(|file| file.strip_suffix(".rs"))
        .collect();
    let mut problems = Vec::new();
    for (file, text) in sources.iter().filter(|(file, _)| *file != "main.rs") {
        let own = if file.contains('/') { None } else { file.strip_suffix(".rs") };
        let named: BTreeSet<String> = paths(&code_only(text))
            .into_iter()
            .filter(|path| path.first().is_some_and(|first| first == "crate"))
            .filter_map(|path| path.get(1).cloned())
            .filter(|name| tests.contains(name.as_str()) && Some(name.as_str()) != own)
            .collect();
        problems.extend(named.into_iter().map(|name| format!("{file} names crate::{name}, the test file {name}.rs")));
    }
    problems
}

/// `path → text` of every `.rs` file under `dir`, paths relative to `root`.
fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(root, &path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            out.insert(relative, std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// Module path of a source file (`agent/mod.rs` → `agent`, `net/dial.rs` → `net::dial`); `None`
/// for the binary's `main.rs`.
fn module_of(file: &str) -> Option<String> {
    if file == "main.rs" {
        return None;
    }
    let trimmed = file.trim_end_matches(".rs");
    let trimmed = trimmed.strip_suffix("/mod").unwrap_or(trimmed);
    Some(if trimmed == "lib" { String::new() } else { trimmed.replace('/', "::") })
}

/// Every problem found, one sentence each.
fn check(sources: &BTreeMap<String, String>, rules: &Rules) -> Vec<String> {
    let modules: BTreeSet<String> = sources.keys().filter_map(|f| module_of(f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let test_modules = test_modules(sources);
    let mut problems = Vec::new();
    for (file, text) in sources {
        let Some(module) = module_of(file) else { continue };
        // A file that is a `#[cfg(test)] mod …;` holds tests only, like an inline test module.
        if test_modules.contains(&module) {
            continue;
        }
        let code = strip_tests(&code_only(text));
        for (holder, crates) in rules.forbidden.iter().filter(|(holder, _)| is_at_or_within(&module, holder)) {
            for name in crates_named(&code).into_iter().filter(|name| crates.contains(name)) {
                problems.push(format!("{module} names the crate {name}, which {holder} never uses"));
            }
        }
        let targets = edges.entry(module.clone()).or_default();
        for path in paths(&code) {
            let Some(absolute) = resolve(&module, &path) else { continue };
            if let Some(target) = longest_module(&modules, &absolute) {
                // A module owns its children: naming them (`mod`, `pub use`) is not a dependency.
                if target != module && !is_within(&target, &module) {
                    targets.insert(target);
                }
            }
        }
    }
    let rank = |module: &str| rules.layers.iter().find(|(name, _)| name == top(module)).map(|(_, rank)| *rank);
    for (from, targets) in &edges {
        for to in targets {
            if let (Some(low), Some(high)) = (rank(from), rank(to)) {
                if high > low {
                    problems.push(format!("{from} imports {to}, a higher layer"));
                }
            }
            for (leaf, allowed) in rules.leaves.iter().filter(|(leaf, _)| is_at_or_within(from, leaf)) {
                if !is_at_or_within(to, leaf) && !to.is_empty() && !allowed.iter().any(|module| module == top(to)) {
                    problems.push(format!("{from} imports {to}, and {leaf} may import only {}", allowed.join(", ")));
                }
            }
            if rank(to).is_none() && !to.is_empty() {
                problems.push(format!("{to} (imported by {from}) has no layer in docs/ARCHITECTURE.md's table"));
            }
        }
    }
    for module in &modules {
        if !module.is_empty() && rank(module).is_none() {
            problems.push(format!("{module} has no layer in docs/ARCHITECTURE.md's table"));
        }
    }
    if let Some(circle) = find_circle(&edges) {
        problems.push(format!("modules import each other in a circle: {}", circle.join(" → ")));
    }
    let mut top_edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in &edges {
        for to in targets {
            if top(from) != top(to) && !to.is_empty() {
                top_edges.entry(top(from).to_owned()).or_default().insert(top(to).to_owned());
            }
        }
    }
    if let Some(circle) = find_circle(&top_edges) {
        problems.push(format!("top-level modules import each other in a circle: {}", circle.join(" → ")));
    }
    problems
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or_default()
}

fn is_within(inner: &str, outer: &str) -> bool {
    outer.is_empty() || inner.starts_with(&format!("{outer}::"))
}

fn is_at_or_within(inner: &str, outer: &str) -> bool {
    inner == outer || is_within(inner, outer)
}

/// Every name that starts a path outside the crate (`rustls::…`, `use rustls;`), once each.
fn crates_named(code: &str) -> BTreeSet<String> {
    let tokens = tokenize(code);
    let mut found = BTreeSet::new();
    for (i, token) in tokens.iter().enumerate() {
        let after_colons = i > 0 && tokens[i - 1] == "::";
        let starts_path = tokens.get(i + 1).map(String::as_str) == Some("::") && !after_colons;
        let used_whole = i > 0 && tokens[i - 1] == "use" && tokens.get(i + 1).map(String::as_str) == Some(";");
        if (starts_path || used_whole) && is_ident(token.chars().next().as_ref()) {
            found.insert(token.clone());
        }
    }
    found
}

/// The longest known module that `path` starts with (`""` for the crate root).
fn longest_module(modules: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (0..=path.len()).rev().map(|n| path[..n].join("::")).find(|candidate| modules.contains(candidate))
}

/// `path` made absolute from `module`: `crate::a::b`, `super::x` and `self::y` forms.
fn resolve(module: &str, path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> =
        if module.is_empty() { Vec::new() } else { module.split("::").map(str::to_owned).collect() };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// A circle in `edges`, as the modules round it, if there is one.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = stack.iter().position(|n| n == node)?;
                let mut circle = stack[start..].to_vec();
                circle.push(node.to_owned());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        stack.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, marks, stack) {
                return Some(circle);
            }
        }
        stack.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        let mut stack = Vec::new();
        if let Some(circle) = visit(node, edges, &mut marks, &mut stack) {
            return Some(circle);
        }
    }
    None
}

/// The source with comments and the contents of string and char literals blanked out.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        if rest.starts_with(&['/', '/']) {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if rest.starts_with(&['/', '*']) {
            i += 2;
            while i < chars.len() && !chars[i..].starts_with(&['*', '/']) {
                i += 1;
            }
            i += 2;
        } else if chars[i] == 'r' && matches!(rest.get(1), Some('"' | '#')) && !is_ident(chars.get(i.wrapping_sub(1))) {
            let hashes = rest[1..].iter().take_while(|c| **c == '#').count();
            if rest.get(1 + hashes) != Some(&'"') {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            let mut close = vec!['"'];
            close.extend(std::iter::repeat_n('#', hashes));
            while i < chars.len() && !chars[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if chars[i] == '\'' && rest.get(2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else if chars[i] == '\'' && rest.get(1) == Some(&'\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Modules declared `#[cfg(test)] mod name;` in their parent's file: test code in a file of its own,
/// named by the module (`hub/tests.rs`) or by a `#[path = "hub_tests.rs"]` beside the file.
fn test_modules(sources: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (file, text) in sources {
        let Some(parent) = module_of(file) else { continue };
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let mut item = rest.trim_start();
            let mut path = None;
            while let Some(attribute) = item.strip_prefix("#[") {
                let Some((inside, after)) = attribute.split_once(']') else { break };
                path = inside.strip_prefix("path = \"").and_then(|tail| tail.strip_suffix('"')).or(path);
                item = after.trim_start();
            }
            let Some(name) =
                item.strip_prefix("mod ").and_then(|tail| tail.split_once(';')).map(|(name, _)| name.trim())
            else {
                continue;
            };
            if !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            match path {
                Some(path) => {
                    let dir = file.rsplit_once('/').map_or("", |(dir, _)| dir);
                    let beside = if dir.is_empty() { path.to_owned() } else { format!("{dir}/{path}") };
                    found.extend(module_of(&beside));
                }
                None => {
                    found.insert(if parent.is_empty() { name.to_owned() } else { format!("{parent}::{name}") });
                }
            }
        }
    }
    found
}

/// The code without items marked `#[cfg(test)]` (their imports serve the tests only).
fn strip_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its closing brace, or at a `;` before any brace (`mod tests;`).
        let end = match (item.find('{'), item.find(';')) {
            (Some(open), Some(semi)) if semi < open => semi + 1,
            (Some(open), _) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (offset, c) in item[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + offset + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(semi)) => semi + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Every path starting with `crate`, `super` or `self`, with `use` groups expanded
/// (`use crate::{a, b::{c, d}}` gives `crate::a`, `crate::b::c`, `crate::b::d`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(code);
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts_path = matches!(tokens[i].as_str(), "crate" | "super" | "self")
            && tokens.get(i + 1).map(String::as_str) == Some("::")
            && (i == 0 || tokens[i - 1] != "::");
        if !starts_path {
            i += 1;
            continue;
        }
        let (mut expanded, next) = path_tree(&tokens, i);
        found.append(&mut expanded);
        i = next;
    }
    found
}

/// Reads one path (possibly a `{…}` group) from `tokens[start..]`; returns its expansions and
/// the index after it.
fn path_tree(tokens: &[String], start: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = start;
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                let mut all = Vec::new();
                i += 1;
                loop {
                    match tokens.get(i).map(String::as_str) {
                        Some("}") => return (all, i + 1),
                        Some(",") => i += 1,
                        Some(_) => {
                            let (inner, next) = path_tree(tokens, i);
                            for tail in inner {
                                let mut full = prefix.clone();
                                full.extend(tail.into_iter().filter(|s| s != "self"));
                                all.push(full);
                            }
                            if next == i {
                                i += 1;
                            } else {
                                i = next;
                            }
                        }
                        None => return (all, i),
                    }
                }
            }
            Some(word) if is_ident(word.chars().next().as_ref()) => {
                prefix.push(word.to_owned());
                i += 1;
                if tokens.get(i).map(String::as_str) == Some("::") {
                    i += 1;
                } else {
                    return (vec![prefix], i);
                }
            }
            Some("*") => return (vec![prefix], i + 1),
            _ => return (vec![prefix], i),
        }
    }
}

/// Identifiers, `::` and single punctuation characters.
fn tokenize(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".to_owned());
            i += 2;
        } else {
            if !c.is_whitespace() {
                tokens.push(c.to_string());
            }
            i += 1;
        }
    }
    tokens
}
