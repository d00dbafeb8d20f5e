//! Prepares the web client for src/net/web.rs (see docs/PROTOCOL.md, "Web client"): every file
//! under `web/`, each but the entry points also under a name carrying its content hash, each text
//! file compressed with brotli and gzip, and the page (`index.html`) as served: its references
//! to the hashed names, an import map that sends every module's plain path to its hashed name,
//! and a `modulepreload` for each module of the first screen (what `main.js` imports statically).
//! Writes `web_assets.rs` into `OUT_DIR` and sets `VOXA_IMPORT_MAP_CSP`, the import map's
//! `'sha256-…'` for the Content-Security-Policy.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// Files fetched under their plain names only: the page, the service worker (its scope and its
/// updates follow its name) and the manifest.
const ENTRY_POINTS: [&str; 3] = ["/index.html", "/sw.js", "/manifest.webmanifest"];
/// The module the page starts from.
const MAIN: &str = "/js/main.js";
/// Hex digits of the content hash in a file name and in an ETag.
const HASH_LEN: usize = 12;

struct File {
    path: String,
    body: Vec<u8>,
    hash: String,
}

fn main() {
    if let Err(err) = run() {
        println!("cargo::error=preparing the web client: {err}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?).join("web");
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?);
    println!("cargo::rerun-if-changed=web");
    println!("cargo::rerun-if-changed=build.rs");
    let mut files = Vec::new();
    collect(&root, &root, &mut files)?;
    files.sort_by(|a, b| a.path.cmp(&b.path));

    let hashed: BTreeMap<String, String> = files
        .iter()
        .filter(|file| !ENTRY_POINTS.contains(&file.path.as_str()))
        .map(|file| (file.path.clone(), hashed_name(&file.path, &file.hash)))
        .collect();
    let modules: BTreeMap<&str, &[u8]> = files
        .iter()
        .filter(|file| file.path.ends_with(".js") || file.path.ends_with(".mjs"))
        .map(|file| (file.path.as_str(), file.body.as_slice()))
        .collect();
    let first_screen = static_closure(MAIN, &modules)?;

    let index = files.iter_mut().find(|file| file.path == "/index.html").ok_or("web/index.html is missing")?;
    let (page, import_map) = page(&index.body, &hashed, &first_screen)?;
    let digest = Sha256::digest(import_map.as_bytes());
    let csp = format!("sha256-{}", base64::engine::general_purpose::STANDARD.encode(digest));
    println!("cargo::rustc-env=VOXA_IMPORT_MAP_CSP={csp}");
    index.body = page;
    index.hash = content_hash(&index.body);

    let dir = out.join("web");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut table = String::from("&[\n");
    for (n, file) in files.iter().enumerate() {
        let body = dir.join(format!("{n}"));
        write(&body, &file.body)?;
        let compressed = |suffix: &str, bytes: Vec<u8>| -> Result<String, String> {
            if !is_text(&file.path) || bytes.len() >= file.body.len() {
                return Ok("None".to_owned());
            }
            let path = dir.join(format!("{n}.{suffix}"));
            write(&path, &bytes)?;
            Ok(format!("Some(include_bytes!({:?}))", path.display().to_string()))
        };
        let brotli = compressed("br", brotli(&file.body)?)?;
        let gzip = compressed("gz", gzip(&file.body)?)?;
        let hashed = hashed.get(&file.path).map_or("None".to_owned(), |name| format!("Some({name:?})"));
        table.push_str(&format!(
            "    Asset {{ path: {:?}, hashed: {hashed}, mime: {:?}, body: include_bytes!({:?}), hash: {:?}, \
             brotli: {brotli}, gzip: {gzip} }},\n",
            file.path,
            mime(&file.path)?,
            body.display().to_string(),
            file.hash,
        ));
    }
    table.push_str("]\n");
    write(&out.join("web_assets.rs"), table.as_bytes())
}

/// Every file under `dir`, its path from `root` with a leading `/`.
fn collect(root: &Path, dir: &Path, files: &mut Vec<File>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files)?;
            continue;
        }
        let relative = path.strip_prefix(root).map_err(|e| e.to_string())?;
        let name = relative.to_str().ok_or_else(|| format!("{}: not UTF-8", path.display()))?;
        let body = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let hash = content_hash(&body);
        files.push(File { path: format!("/{}", name.replace('\\', "/")), body, hash });
    }
    Ok(())
}

fn content_hash(body: &[u8]) -> String {
    Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect::<String>()[..HASH_LEN].to_owned()
}

/// `/js/dom.js` → `/js/dom.0123456789ab.js`: the same folder, so relative imports between
/// hashed modules resolve to plain paths the import map maps again.
fn hashed_name(path: &str, hash: &str) -> String {
    let slash = path.rfind('/').unwrap_or(0);
    match path[slash..].rfind('.') {
        Some(dot) if dot > 1 => format!("{}.{hash}{}", &path[..slash + dot], &path[slash + dot..]),
        _ => format!("{path}.{hash}"),
    }
}

/// The modules `start` imports statically, itself included, directly or not.
fn static_closure(start: &str, modules: &BTreeMap<&str, &[u8]>) -> Result<BTreeSet<String>, String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![start.to_owned()];
    while let Some(path) = todo.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let text = modules.get(path.as_str()).ok_or_else(|| format!("{path} is imported but not under web/"))?;
        let text = std::str::from_utf8(text).map_err(|_| format!("{path}: not UTF-8"))?;
        for specifier in static_imports(text) {
            todo.push(resolve(&path, &specifier)?);
        }
    }
    Ok(seen)
}

/// Specifiers of a module's static `import … from '…'` and `import '…'` statements (each at the
/// start of a line, as the client writes them; `import()` and JSDoc `import('…')` types are not
/// statements).
fn static_imports(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut statement: Option<String> = None;
    for line in text.lines().map(str::trim_end) {
        let current = match statement.take() {
            Some(open) => open + " " + line.trim(),
            None if line.starts_with("import ") || line.starts_with("import{") => line.to_owned(),
            None => continue,
        };
        let quoted = current.trim_end_matches(';');
        let Some(quote) = quoted.chars().last().filter(|c| *c == '\'' || *c == '"') else {
            statement = Some(current);
            continue;
        };
        let inner = &quoted[..quoted.len() - 1];
        if let Some(start) = inner.rfind(quote) {
            found.push(inner[start + 1..].to_owned());
        }
    }
    found
}

/// `specifier` as imported from `from`: relative (`./`, `../`) or absolute (`/`) only.
fn resolve(from: &str, specifier: &str) -> Result<String, String> {
    let mut parts: Vec<&str> = if specifier.starts_with('/') {
        Vec::new()
    } else if specifier.starts_with("./") || specifier.starts_with("../") {
        let dir = &from[..from.rfind('/').unwrap_or(0)];
        dir.split('/').filter(|p| !p.is_empty()).collect()
    } else {
        return Err(format!("{from} imports {specifier:?}: only relative and absolute paths are served"));
    };
    for part in specifier.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop().ok_or_else(|| format!("{from} imports {specifier:?}, above web/"))?;
            }
            part => parts.push(part),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The page as served, and its import map's text (what the CSP hash covers). Every `"/path"`
/// attribute naming a hashed file names its hashed name; the import map and the preloads go just
/// before the page's module script.
fn page(
    source: &[u8],
    hashed: &BTreeMap<String, String>,
    first_screen: &BTreeSet<String>,
) -> Result<(Vec<u8>, String), String> {
    let mut text = String::from_utf8(source.to_vec()).map_err(|_| "web/index.html: not UTF-8")?;
    for (plain, name) in hashed {
        text = text.replace(&format!("=\"{plain}\""), &format!("=\"{name}\""));
    }
    let imports: BTreeMap<&str, &str> = hashed
        .iter()
        .filter(|(plain, _)| plain.ends_with(".js") || plain.ends_with(".mjs"))
        .map(|(plain, name)| (plain.as_str(), name.as_str()))
        .collect();
    let import_map = format!("{{\"imports\":{}}}", json_object(&imports));
    let main = hashed.get(MAIN).ok_or("web/js/main.js is missing")?;
    let script = format!("<script type=\"module\" src=\"{main}\"></script>");
    let at = text.find(&script).ok_or("web/index.html has no module script for /js/main.js")?;
    let mut head = format!("<script type=\"importmap\">{import_map}</script>\n");
    for module in first_screen.iter().filter(|module| module.as_str() != MAIN) {
        let name = hashed.get(module).ok_or_else(|| format!("{module} has no hashed name"))?;
        head.push_str(&format!("<link rel=\"modulepreload\" href=\"{name}\">\n"));
    }
    text.insert_str(at, &head);
    Ok((text.into_bytes(), import_map))
}

/// A JSON object of plain strings (paths: no character needs escaping but these two).
fn json_object(entries: &BTreeMap<&str, &str>) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let pairs: Vec<String> = entries.iter().map(|(k, v)| format!("{}:{}", quote(k), quote(v))).collect();
    format!("{{{}}}", pairs.join(","))
}

fn mime(path: &str) -> Result<&'static str, String> {
    let extension = path.rsplit_once('.').map_or("", |(_, ext)| ext);
    let name = path.rsplit('/').next().unwrap_or_default();
    Ok(match extension {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "webmanifest" => "application/manifest+json",
        _ if name.contains("LICENSE") => "text/plain; charset=utf-8",
        _ => return Err(format!("{path}: no content type for this kind of file")),
    })
}

fn is_text(path: &str) -> bool {
    !path.ends_with(".png")
}

fn brotli(body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams { quality: 11, lgwin: 22, ..Default::default() };
    brotli::BrotliCompress(&mut &body[..], &mut out, &params).map_err(|e| format!("brotli: {e}"))?;
    Ok(out)
}

fn gzip(body: &[u8]) -> Result<Vec<u8>, String> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(body).map_err(|e| format!("gzip: {e}"))?;
    encoder.finish().map_err(|e| format!("gzip: {e}"))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    // Unchanged files keep their time, so nothing that includes them is rebuilt for nothing.
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
