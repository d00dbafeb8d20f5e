//! Pictures of the page at a phone's viewport: into docs/ when `VOXA_DOCS_SCREENSHOTS` is set,
//! else into the test's scratch directory.

use std::path::Path;

use crate::support::browser::{Browser, VIEWPORT};

/// Where pictures go: docs/ when `VOXA_DOCS_SCREENSHOTS` is set, else `scratch`.
pub(crate) fn pictures_dir(scratch: &Path) -> std::path::PathBuf {
    match std::env::var_os("VOXA_DOCS_SCREENSHOTS") {
        Some(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"),
        None => scratch.to_owned(),
    }
}

/// Saves a screenshot of `browser` as `dir/name`, checked to be at the phone's viewport.
pub async fn save_picture(browser: &Browser, dir: &Path, name: &str) {
    let png = browser.screenshot().await;
    let info = png::Decoder::new(std::io::Cursor::new(&png)).read_info().unwrap().info().clone();
    assert_eq!((info.width, info.height), VIEWPORT, "{name}");
    std::fs::write(dir.join(name), png).unwrap();
}
