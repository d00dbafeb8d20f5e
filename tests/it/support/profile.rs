//! What a browser's profile keeps after it quits: its files holding a string, and the URLs of
//! Chromium's `History` holding one.

use std::path::Path;

/// Files under `dir` whose bytes hold `needle`, as paths from `dir`.
pub(crate) fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(path.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// Every URL of Chromium's `History` database (rusqlite, the browser gone) that holds `needle`.
pub(crate) fn history_urls_holding(profile: &Path, needle: &str) -> Vec<(String, String)> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let db = rusqlite::Connection::open_with_flags(profile.join("Default/History"), flags).unwrap();
    let mut rows = db.prepare("SELECT url, title FROM urls").unwrap();
    let urls = rows.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))).unwrap();
    urls.map(Result::unwrap).filter(|(url, _)| url.contains(needle)).collect()
}
