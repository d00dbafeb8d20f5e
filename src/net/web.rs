//! The web client (see docs/PROTOCOL.md, "Web client"): static files embedded in the binary and
//! served by the relay at `/` and by the agent on its loopback port, with the security headers
//! every answer carries and `ETag` revalidation.

use std::sync::LazyLock;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::http::RequestHead;

/// Content-Security-Policy of every answer: scripts and styles from this origin only (no inline
/// script), sockets to this origin only, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' blob: data:; connect-src 'self'; manifest-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Headers sent with every web answer, whatever its status.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// One embedded file.
struct Asset {
    path: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $mime:literal) => {
        Asset { path: $path, mime: $mime, body: include_bytes!(concat!("../../web", $path)) }
    };
}

/// Every file of the client. `/` answers `index.html` whatever its query.
const ASSETS: &[Asset] = &[
    asset!("/index.html", "text/html; charset=utf-8"),
    asset!("/app.css", "text/css; charset=utf-8"),
    asset!("/icon.svg", "image/svg+xml"),
    asset!("/manifest.webmanifest", "application/manifest+json"),
    asset!("/sw.js", "text/javascript; charset=utf-8"),
    asset!("/js/main.js", "text/javascript; charset=utf-8"),
    asset!("/js/app.js", "text/javascript; charset=utf-8"),
    asset!("/js/store.js", "text/javascript; charset=utf-8"),
    asset!("/js/protocol.js", "text/javascript; charset=utf-8"),
    asset!("/js/session.js", "text/javascript; charset=utf-8"),
    asset!("/js/seal/noise.js", "text/javascript; charset=utf-8"),
    asset!("/js/seal/channel.js", "text/javascript; charset=utf-8"),
    asset!("/js/pairings.js", "text/javascript; charset=utf-8"),
    asset!("/js/dom.js", "text/javascript; charset=utf-8"),
    asset!("/js/shell/header.js", "text/javascript; charset=utf-8"),
    asset!("/js/shell/picker.js", "text/javascript; charset=utf-8"),
    asset!("/js/shell/welcome.js", "text/javascript; charset=utf-8"),
    asset!("/js/shell/workspace.js", "text/javascript; charset=utf-8"),
    asset!("/js/shell/status.js", "text/javascript; charset=utf-8"),
    asset!("/js/notify/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/terminal/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/terminal/output.js", "text/javascript; charset=utf-8"),
    asset!("/js/pty/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/pty/keys.js", "text/javascript; charset=utf-8"),
    asset!("/js/pty/styles.js", "text/javascript; charset=utf-8"),
    // xterm.js and its fit addon, vendored at a pinned version (tests/it/terminal.rs checks them).
    asset!("/vendor/xterm/xterm.mjs", "text/javascript; charset=utf-8"),
    asset!("/vendor/xterm/addon-fit.mjs", "text/javascript; charset=utf-8"),
    asset!("/vendor/xterm/xterm.css", "text/css; charset=utf-8"),
    asset!("/vendor/xterm/LICENSE", "text/plain; charset=utf-8"),
    asset!("/vendor/xterm/addon-fit.LICENSE", "text/plain; charset=utf-8"),
    asset!("/js/files/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/files/actions.js", "text/javascript; charset=utf-8"),
    asset!("/js/files/conflict.js", "text/javascript; charset=utf-8"),
    asset!("/js/files/transfer.js", "text/javascript; charset=utf-8"),
    asset!("/js/screen/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/agent/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/agent/conversation.js", "text/javascript; charset=utf-8"),
    asset!("/js/agent/markdown.js", "text/javascript; charset=utf-8"),
    asset!("/js/approvals/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/voice/panel.js", "text/javascript; charset=utf-8"),
    asset!("/js/voice/call.js", "text/javascript; charset=utf-8"),
    asset!("/js/voice/socket.js", "text/javascript; charset=utf-8"),
    asset!("/js/voice/resampler.js", "text/javascript; charset=utf-8"),
    asset!("/js/voice/audio-worklet.js", "text/javascript; charset=utf-8"),
];

/// Strong validators, one per asset in [`ASSETS`] order: a prefix of the SHA-256 of the body.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS.iter().map(|asset| format!("\"{}\"", hex::encode(&Sha256::digest(asset.body)[..12]))).collect()
});

/// Every file of the client as served: its path and body. `/` serves `/index.html`'s body.
pub fn assets() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    let index = ASSETS.iter().find(|asset| asset.path == "/index.html").map(|asset| asset.body).unwrap_or_default();
    std::iter::once(("/", index)).chain(ASSETS.iter().map(|asset| (asset.path, asset.body)))
}

/// Where the vendored libraries live: fetched only by the view that needs them (xterm.js by the
/// shell tab), never by the page load.
const VENDOR_PREFIX: &str = "/vendor/";

/// Most bytes the embedded client (its own files, uncompressed) may weigh.
#[cfg(test)]
const PAGE_BUDGET: usize = 320 << 10;

/// Total size of the embedded client in bytes, uncompressed, the vendored libraries left out.
pub fn page_weight() -> usize {
    ASSETS.iter().filter(|asset| !asset.path.starts_with(VENDOR_PREFIX)).map(|asset| asset.body.len()).sum()
}

/// Total size of the vendored libraries in bytes, uncompressed.
pub fn vendored_weight() -> usize {
    ASSETS.iter().filter(|asset| asset.path.starts_with(VENDOR_PREFIX)).map(|asset| asset.body.len()).sum()
}

/// What `GET /config` reports about the server that serves the page.
#[derive(Clone, Copy, Debug, Default)]
pub struct Offer {
    /// Hosted voice calls are available at `/live`.
    pub live: bool,
    /// The relay asks for its relay token: a page whose link lacks it cannot connect.
    pub relay_token: bool,
}

/// A complete answer to a web request.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    reason: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// Answer to `HEAD`: headers as for `GET`, no body.
    head_only: bool,
}

impl Response {
    fn new(status: u16, reason: &'static str, mime: &'static str, body: Vec<u8>) -> Response {
        let mut headers: Vec<(&'static str, String)> =
            SECURITY_HEADERS.iter().map(|(name, value)| (*name, (*value).to_owned())).collect();
        headers.push(("content-type", mime.to_owned()));
        Response { status, reason, headers, body, head_only: false }
    }

    /// Value of a header of this answer.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Writes the answer and ends the exchange (`connection: close`).
    pub async fn write<S: AsyncWrite + Unpin>(&self, stream: &mut S) -> std::io::Result<()> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, self.reason);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("content-length: {}\r\nconnection: close\r\n\r\n", self.body.len()));
        stream.write_all(head.as_bytes()).await?;
        if !self.head_only {
            stream.write_all(&self.body).await?;
        }
        stream.flush().await?;
        let _ = stream.shutdown().await;
        Ok(())
    }
}

/// True for the paths this module answers; the caller routes everything else (`/ws`, `/agent`,
/// `/healthz`, WebSocket upgrades) itself.
pub fn is_web_path(path: &str) -> bool {
    path == "/" || path == "/config" || ASSETS.iter().any(|asset| asset.path == path)
}

/// Answers a request for one of the client's paths, or `None` when the path is not one of them.
/// `GET` and `HEAD` only; `If-None-Match` with the current `ETag` gets `304`.
pub fn answer(head: &RequestHead, offer: Offer) -> Option<Response> {
    if !is_web_path(&head.path) {
        return None;
    }
    let head_only = head.method == "HEAD";
    if head.method != "GET" && !head_only {
        let mut response =
            Response::new(405, "Method Not Allowed", "text/plain; charset=utf-8", b"method not allowed".to_vec());
        response.headers.push(("allow", "GET, HEAD".to_owned()));
        return Some(response);
    }
    let mut response = if head.path == "/config" {
        let body =
            serde_json::json!({ "version": crate::VERSION, "live": offer.live, "relay_token": offer.relay_token })
                .to_string();
        let mut response = Response::new(200, "OK", "application/json", body.into_bytes());
        response.headers.push(("cache-control", "no-store".to_owned()));
        response
    } else {
        let path = if head.path == "/" { "/index.html" } else { head.path.as_str() };
        let index = ASSETS.iter().position(|asset| asset.path == path)?;
        let (asset, etag) = (&ASSETS[index], &ETAGS[index]);
        let fresh = head.header("if-none-match").is_some_and(|tags| matches_etag(tags, etag));
        let mut response = if fresh {
            Response::new(304, "Not Modified", asset.mime, Vec::new())
        } else {
            Response::new(200, "OK", asset.mime, asset.body.to_vec())
        };
        response.headers.push(("etag", etag.clone()));
        // Revalidate every time: a new voxa build must never be mixed with cached files.
        response.headers.push(("cache-control", "no-cache".to_owned()));
        response
    };
    response.head_only = head_only;
    Some(response)
}

/// `If-None-Match` semantics (weak comparison): `*` or any listed tag equal to `etag`.
fn matches_etag(header: &str, etag: &str) -> bool {
    header.split(',').map(str::trim).any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(target: &str, extra: &str) -> RequestHead {
        RequestHead::parse(format!("GET {target} HTTP/1.1\r\nHost: h\r\n{extra}\r\n").as_bytes()).unwrap().0
    }

    #[test]
    fn root_serves_the_page_whatever_the_query_with_every_security_header() {
        let response = answer(&get("/?code=0123&token=4567", ""), Offer::default()).unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.header("content-type"), Some("text/html; charset=utf-8"));
        assert!(std::str::from_utf8(response.body()).unwrap().contains("<title>voxa</title>"));
        for (name, value) in SECURITY_HEADERS {
            assert_eq!(response.header(name), Some(value), "{name}");
        }
        assert!(CONTENT_SECURITY_POLICY.contains("connect-src 'self'"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
    }

    #[test]
    fn etag_revalidation_answers_304_without_a_body() {
        let first = answer(&get("/app.css", ""), Offer::default()).unwrap();
        let etag = first.header("etag").unwrap().to_owned();
        assert!(etag.starts_with('"') && etag.ends_with('"'));
        let again = answer(&get("/app.css", &format!("If-None-Match: \"x\", W/{etag}\r\n")), Offer::default()).unwrap();
        assert_eq!((again.status, again.body().len()), (304, 0));
        assert_eq!(again.header("etag"), Some(etag.as_str()));
        let stale = answer(&get("/app.css", "If-None-Match: \"other\"\r\n"), Offer::default()).unwrap();
        assert_eq!(stale.status, 200);
        assert_eq!(stale.body(), first.body());
    }

    #[test]
    fn config_reports_version_and_the_offer_and_other_paths_are_not_ours() {
        let config = answer(&get("/config", ""), Offer { live: true, relay_token: false }).unwrap();
        let value: serde_json::Value = serde_json::from_slice(config.body()).unwrap();
        assert_eq!(value, serde_json::json!({"version": crate::VERSION, "live": true, "relay_token": false}));
        for path in ["/ws", "/agent", "/healthz", "/js/../index.html", "/index.html/", "/nope"] {
            assert!(answer(&get(path, ""), Offer::default()).is_none(), "{path}");
        }
        let post = RequestHead::parse(b"POST / HTTP/1.1\r\n\r\n").unwrap().0;
        assert_eq!(answer(&post, Offer::default()).unwrap().status, 405);
    }

    #[test]
    fn the_client_is_small_and_loads_nothing_from_elsewhere() {
        // Every file of the client's own together (files, terminals, sessions, sealing, voice),
        // whether or not the first screen loads it.
        assert!(page_weight() <= PAGE_BUDGET, "{} bytes", page_weight());
        assert!(vendored_weight() <= 512 << 10, "{} bytes vendored", vendored_weight());
        // A vendored library's text names sites (its licence, its project) without loading them.
        for asset in ASSETS.iter().filter(|asset| !asset.path.starts_with(VENDOR_PREFIX)) {
            // The SVG namespace (in the stylesheet's inline icons) names XML, not a site to load.
            let text = std::str::from_utf8(asset.body).unwrap().replace("http://www.w3.org/2000/svg", "");
            assert!(
                !text.contains("http://") && !text.contains("https://") || asset.path == "/icon.svg",
                "{}",
                asset.path
            );
        }
        let index = std::str::from_utf8(ASSETS[0].body).unwrap();
        let handler = index.split(" on").skip(1).any(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(!index.contains("<script>") && !index.contains(" style=") && !handler, "inline code in index.html");
    }
}
