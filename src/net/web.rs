//! The web client (see docs/PROTOCOL.md, "Web client"): static files embedded in the binary and
//! served by the relay at `/` and by the agent on its loopback port, with the security headers
//! every answer carries. build.rs prepares them: each file but the entry points also under a name
//! carrying its content hash (served `immutable`), brotli and gzip bodies chosen by
//! `Accept-Encoding`, and the page with its import map and `modulepreload` links. Plain names
//! stay served, revalidated by `ETag`, so a page from an older build still loads.

use std::borrow::Cow;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::http::RequestHead;

/// Content-Security-Policy of every answer: scripts and styles from this origin only (no inline
/// script but the page's import map, named by its hash), never framed. Requests go to this origin
/// only; sockets also to another relay of the pairing (`wss:`, or plain `ws:` on loopback, as
/// relays are validated), which the page opens when this one fails (docs/PROTOCOL.md, "More than
/// one relay").
pub const CONTENT_SECURITY_POLICY: &str = concat!(
    "default-src 'none'; script-src 'self' '",
    env!("VOXA_IMPORT_MAP_CSP"),
    "'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self' wss: ws://127.0.0.1:* ws://localhost:*; \
     manifest-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
);

/// Headers sent with every web answer, whatever its status.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// How an answer under a hashed name may be kept: its name changes whenever its bytes do.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// How an answer under a plain name may be kept: revalidated every time, so a new voxa build is
/// never mixed with cached files.
const REVALIDATE: &str = "no-cache";

/// Requests one kept-alive connection may carry (web answers only; an upgrade ends the count).
pub const KEEP_ALIVE_REQUESTS: usize = 100;
/// Requests one HTTP/2 connection may carry: a page load and its service worker's copy of every
/// file are a hundred or more on one connection, and a connection ending under a page's burst of
/// requests has been seen to fail some of them in Chromium (docs/PROTOCOL.md, "HTTP/2").
pub const HTTP2_REQUESTS: usize = 1000;
/// Time a kept-alive connection may wait for its next request.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(10);

/// Whether the connection stays open after answering `head`, the `served`-th web request on it:
/// while the client allows it and below [`KEEP_ALIVE_REQUESTS`].
pub fn keep_alive(served: usize, head: &RequestHead) -> bool {
    served < KEEP_ALIVE_REQUESTS && head.keeps_alive()
}

/// One embedded file, as build.rs prepared it.
struct Asset {
    /// Its plain path, such as `/js/dom.js`.
    path: &'static str,
    /// The path carrying its content hash; `None` for the entry points.
    hashed: Option<&'static str>,
    mime: &'static str,
    body: &'static [u8],
    /// Hex prefix of the SHA-256 of `body`: its `ETag`, with a suffix per encoding.
    hash: &'static str,
    brotli: Option<&'static [u8]>,
    gzip: Option<&'static [u8]>,
}

/// Every file of the client (everything under `web/`), in path order. `/` answers `index.html`
/// whatever its query.
const ASSETS: &[Asset] = include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|asset| asset.path == path)
}

/// Every file of the client as the page loads it: `/`, the entry points, and every other file
/// under its hashed name. Each with its plain name and the body served to
/// `Accept-Encoding: identity`.
pub fn assets() -> impl Iterator<Item = (&'static str, &'static str, &'static [u8])> {
    let index = asset("/index.html").map(|asset| asset.body).unwrap_or_default();
    let files = ASSETS.iter().map(|asset| (asset.hashed.unwrap_or(asset.path), asset.path, asset.body));
    std::iter::once(("/", "/", index)).chain(files)
}

/// The hashed name of the file at a plain path, if it has one.
pub fn hashed_path(path: &str) -> Option<&'static str> {
    asset(path)?.hashed
}

/// Where the vendored libraries live: fetched only by the view that needs them (xterm.js by the
/// shell tab), never by the page load.
const VENDOR_PREFIX: &str = "/vendor/";

/// Most bytes the embedded client (its own files, uncompressed, the home-screen icons aside) may
/// weigh: round 4's outbox, routes, grants, tickets and terminal answers brought it to 413 KiB, the
/// "While you were away" card and the Data view (bytes moved, low data) to 431 KiB, every
/// machine's terminals in the Shell's picker and cards naming their machine to 440 KiB, the Terminal
/// tab following its latest block's size to 445 KiB.
#[cfg(test)]
const PAGE_BUDGET: usize = 448 << 10;

/// Total size of the embedded client in bytes, uncompressed, the vendored libraries left out.
pub fn page_weight() -> usize {
    ASSETS
        .iter()
        .filter(|asset| !asset.path.starts_with(VENDOR_PREFIX) && asset.mime != "image/png")
        .map(|asset| asset.body.len())
        .sum()
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
    /// SHA-256 of the certificate the relay serves, when the page should show it to be compared
    /// with what `voxa run --lan` printed (a certificate no one the phone trusts signed).
    pub certificate_sha256: Option<[u8; 32]>,
}

/// A certificate's SHA-256 as browsers show it: upper-case hex pairs joined by colons.
pub fn fingerprint_text(sha256: &[u8; 32]) -> String {
    sha256.iter().map(|byte| format!("{byte:02X}")).collect::<Vec<_>>().join(":")
}

/// The headers of an answer: names are the module's constants.
pub type Headers = Vec<(&'static str, String)>;

/// A complete answer to a web request.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    reason: &'static str,
    headers: Headers,
    body: Cow<'static, [u8]>,
    /// Answer to `HEAD`: headers as for `GET`, no body.
    head_only: bool,
}

impl Response {
    fn new(status: u16, reason: &'static str, mime: &'static str, body: impl Into<Cow<'static, [u8]>>) -> Response {
        let mut headers: Vec<(&'static str, String)> =
            SECURITY_HEADERS.iter().map(|(name, value)| (*name, (*value).to_owned())).collect();
        headers.push(("content-type", mime.to_owned()));
        Response { status, reason, headers, body: body.into(), head_only: false }
    }

    /// Value of a header of this answer.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The answer as HTTP/2 sends it: its status, its headers with its length, and its body
    /// (`None` for `HEAD`). Nothing in it is tied to the connection.
    pub fn into_parts(self) -> (u16, Headers, Option<Cow<'static, [u8]>>) {
        let mut headers = self.headers;
        headers.push(("content-length", self.body.len().to_string()));
        (self.status, headers, (!self.head_only).then_some(self.body))
    }

    /// Writes the answer. With `keep_alive` the connection stays open for the next request
    /// (the caller counts them and bounds the wait); otherwise the exchange ends
    /// (`connection: close`).
    pub async fn write<S: AsyncWrite + Unpin>(&self, stream: &mut S, keep_alive: bool) -> std::io::Result<()> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, self.reason);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let connection = if keep_alive {
            format!("keep-alive\r\nkeep-alive: timeout={}", KEEP_ALIVE_IDLE.as_secs())
        } else {
            "close".to_owned()
        };
        head.push_str(&format!("content-length: {}\r\nconnection: {connection}\r\n\r\n", self.body.len()));
        stream.write_all(head.as_bytes()).await?;
        if !self.head_only {
            stream.write_all(&self.body).await?;
        }
        stream.flush().await?;
        if !keep_alive {
            let _ = stream.shutdown().await;
        }
        Ok(())
    }
}

/// True for the paths this module answers; the caller routes everything else (`/ws`, `/agent`,
/// `/healthz`, WebSocket upgrades) itself.
pub fn is_web_path(path: &str) -> bool {
    path == "/" || path == "/config" || find(path).is_some()
}

/// The file a path names, and whether the name carries its hash.
fn find(path: &str) -> Option<(&'static Asset, bool)> {
    let path = if path == "/" { "/index.html" } else { path };
    ASSETS.iter().find_map(|asset| {
        if asset.path == path {
            Some((asset, false))
        } else {
            (asset.hashed == Some(path)).then_some((asset, true))
        }
    })
}

/// A body encoding a client may be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Brotli,
    Gzip,
    Identity,
}

/// The best encoding `Accept-Encoding` allows among those the file has: brotli, then gzip, else
/// identity. A coding listed with `q=0` is refused; `*` stands for every coding not listed.
fn negotiate(header: Option<&str>, asset: &Asset) -> Encoding {
    let Some(header) = header else { return Encoding::Identity };
    let quality = |coding: &str| -> Option<bool> {
        let mut star = None;
        for item in header.split(',') {
            let mut parts = item.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .or_else(|| p.strip_prefix("Q="))
                    .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            if name.eq_ignore_ascii_case(coding) {
                return Some(!refused);
            }
            if name == "*" {
                star = Some(!refused);
            }
        }
        star
    };
    if asset.brotli.is_some() && quality("br") == Some(true) {
        Encoding::Brotli
    } else if asset.gzip.is_some() && quality("gzip") == Some(true) {
        Encoding::Gzip
    } else {
        Encoding::Identity
    }
}

/// Answers a request for one of the client's paths, or `None` when the path is not one of them.
/// `GET` and `HEAD` only; `If-None-Match` with the current `ETag` (of the encoding chosen) gets
/// `304`.
pub fn answer(head: &RequestHead, offer: Offer) -> Option<Response> {
    if !is_web_path(&head.path) {
        return None;
    }
    let head_only = head.method == "HEAD";
    if head.method != "GET" && !head_only {
        let mut response =
            Response::new(405, "Method Not Allowed", "text/plain; charset=utf-8", b"method not allowed".as_slice());
        response.headers.push(("allow", "GET, HEAD".to_owned()));
        return Some(response);
    }
    let mut response = if head.path == "/config" {
        let mut body =
            serde_json::json!({ "version": crate::VERSION, "live": offer.live, "relay_token": offer.relay_token });
        if let Some(sha256) = &offer.certificate_sha256 {
            body["certificate_sha256"] = fingerprint_text(sha256).into();
        }
        let body = body.to_string();
        let mut response = Response::new(200, "OK", "application/json", body.into_bytes());
        response.headers.push(("cache-control", "no-store".to_owned()));
        response
    } else {
        let (asset, immutable) = find(&head.path)?;
        let encoding = negotiate(head.header("accept-encoding"), asset);
        let (body, coding, etag) = match encoding {
            Encoding::Brotli => (asset.brotli.unwrap_or_default(), Some("br"), format!("\"{}-br\"", asset.hash)),
            Encoding::Gzip => (asset.gzip.unwrap_or_default(), Some("gzip"), format!("\"{}-gz\"", asset.hash)),
            Encoding::Identity => (asset.body, None, format!("\"{}\"", asset.hash)),
        };
        let fresh = head.header("if-none-match").is_some_and(|tags| matches_etag(tags, &etag));
        let mut response = if fresh {
            Response::new(304, "Not Modified", asset.mime, Vec::new())
        } else {
            Response::new(200, "OK", asset.mime, body)
        };
        if let (Some(coding), false) = (coding, fresh) {
            response.headers.push(("content-encoding", coding.to_owned()));
        }
        if asset.brotli.is_some() || asset.gzip.is_some() {
            response.headers.push(("vary", "accept-encoding".to_owned()));
        }
        response.headers.push(("etag", etag));
        response.headers.push(("cache-control", if immutable { IMMUTABLE } else { REVALIDATE }.to_owned()));
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
    use base64::Engine as _;
    use sha2::{Digest, Sha256};

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
        let config = answer(&get("/config", ""), Offer { live: true, ..Offer::default() }).unwrap();
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
        // The SVG namespace (in icon.svg, and in the tab icons app.css draws from `data:` URLs)
        // is a name, never fetched.
        for asset in ASSETS.iter().filter(|asset| !asset.path.starts_with(VENDOR_PREFIX) && asset.mime != "image/png") {
            let text = std::str::from_utf8(asset.body).unwrap().replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("http://") && !text.contains("https://"), "{}", asset.path);
        }
        let index = std::str::from_utf8(asset("/index.html").unwrap().body).unwrap();
        let handler = index.split(" on").skip(1).any(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        // The one inline script is the import map, allowed by its hash alone; before it, the one
        // classic script, which takes a pairing link out of the address before the first paint.
        let scripts: Vec<&str> = index.split("<script").skip(1).collect();
        assert_eq!(scripts.len(), 3, "address.js, the import map and main.js");
        let address = format!(" src=\"{}\"></script>", hashed_path("/js/address.js").unwrap());
        assert!(scripts[0].starts_with(&address), "{}", scripts[0]);
        assert!(index.find("<script").unwrap() < index.find("<title>").unwrap(), "address.js runs first");
        assert!(scripts[1].starts_with(" type=\"importmap\">") && scripts[2].starts_with(" type=\"module\" src="));
        assert!(!index.contains(" style=") && !handler, "inline code in index.html");
    }

    /// The import map as the page carries it.
    fn import_map(index: &str) -> serde_json::Value {
        let start = index.find("<script type=\"importmap\">").unwrap() + "<script type=\"importmap\">".len();
        let end = start + index[start..].find("</script>").unwrap();
        let text = &index[start..end];
        let digest = Sha256::digest(text.as_bytes());
        let expected = format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest));
        assert!(CONTENT_SECURITY_POLICY.contains(&expected), "the CSP allows this import map and no other");
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn every_file_but_the_entry_points_has_a_hashed_immutable_name_the_page_uses() {
        let index = String::from_utf8(answer(&get("/", ""), Offer::default()).unwrap().body().to_vec()).unwrap();
        let map = import_map(&index);
        for file in ASSETS {
            let entry = ["/index.html", "/sw.js", "/manifest.webmanifest"].contains(&file.path);
            assert_eq!(file.hashed.is_none(), entry, "{}", file.path);
            let plain = answer(&get(file.path, ""), Offer::default()).unwrap();
            assert_eq!((plain.status, plain.header("cache-control")), (200, Some(REVALIDATE)), "{}", file.path);
            let Some(hashed) = file.hashed else { continue };
            assert!(hashed.contains(&hex::encode(&Sha256::digest(file.body)[..6])), "{hashed}");
            let response = answer(&get(hashed, ""), Offer::default()).unwrap();
            assert_eq!((response.status, response.header("cache-control")), (200, Some(IMMUTABLE)), "{hashed}");
            assert_eq!(response.body(), plain.body());
            if file.mime.starts_with("text/javascript") {
                assert_eq!(map["imports"][file.path], hashed, "{} in the import map", file.path);
            }
        }
        // The page names the hashed files, and preloads the first screen's modules.
        let main = hashed_path("/js/main.js").unwrap();
        assert!(index.contains(&format!("<script type=\"module\" src=\"{main}\">")));
        assert!(index.contains(&format!("href=\"{}\"", hashed_path("/app.css").unwrap())));
        let preload =
            |path: &str| index.contains(&format!("rel=\"modulepreload\" href=\"{}\"", hashed_path(path).unwrap()));
        assert!(preload("/js/app.js") && preload("/js/session.js") && preload("/js/seal/noise.js"));
        for lazy in [
            "/js/voice/panel.js",
            "/js/voice/call.js",
            "/js/terminal/panel.js",
            "/js/agent/panel.js",
            "/js/files/panel.js",
        ] {
            assert!(!preload(lazy), "{lazy} is preloaded");
        }
    }

    #[test]
    fn brotli_and_gzip_bodies_decompress_to_the_file_and_are_chosen_by_accept_encoding() {
        use std::io::Read;
        for file in ASSETS {
            // Pictures are compressed already: served as they are.
            if file.mime.starts_with("image/png") {
                assert!(file.brotli.is_none() && file.gzip.is_none(), "{}", file.path);
                continue;
            }
            let brotli = file.brotli.unwrap_or_else(|| panic!("{} has no brotli body", file.path));
            let mut unpacked = Vec::new();
            brotli::Decompressor::new(brotli, 4096).read_to_end(&mut unpacked).unwrap();
            assert_eq!(unpacked, file.body, "{} (brotli)", file.path);
            let gzip = file.gzip.unwrap_or_else(|| panic!("{} has no gzip body", file.path));
            let mut unpacked = Vec::new();
            flate2::read::GzDecoder::new(gzip).read_to_end(&mut unpacked).unwrap();
            assert_eq!(unpacked, file.body, "{} (gzip)", file.path);
        }
        let file = asset("/js/session.js").unwrap();
        let cases = [
            ("Accept-Encoding: gzip, deflate, br, zstd\r\n", Some("br"), file.brotli.unwrap()),
            ("Accept-Encoding: gzip\r\n", Some("gzip"), file.gzip.unwrap()),
            ("Accept-Encoding: br;q=0, gzip;q=0.5\r\n", Some("gzip"), file.gzip.unwrap()),
            ("Accept-Encoding: *\r\n", Some("br"), file.brotli.unwrap()),
            ("Accept-Encoding: *;q=0, identity\r\n", None, file.body),
            ("Accept-Encoding: identity\r\n", None, file.body),
            ("", None, file.body),
        ];
        let mut etags = std::collections::BTreeSet::new();
        for (header, coding, body) in cases {
            let response = answer(&get(file.hashed.unwrap(), header), Offer::default()).unwrap();
            assert_eq!(response.header("content-encoding"), coding, "{header}");
            assert_eq!(response.body(), body, "{header}");
            assert_eq!(response.header("vary"), Some("accept-encoding"));
            etags.insert(response.header("etag").unwrap().to_owned());
            // Its own validator revalidates it; another encoding's does not.
            let again = format!("{header}If-None-Match: {}\r\n", response.header("etag").unwrap());
            assert_eq!(answer(&get(file.path, &again), Offer::default()).unwrap().status, 304, "{header}");
        }
        assert_eq!(etags.len(), 3, "one ETag per encoding: {etags:?}");
        let br = format!("Accept-Encoding: gzip\r\nIf-None-Match: \"{}-br\"\r\n", file.hash);
        assert_eq!(answer(&get(file.path, &br), Offer::default()).unwrap().status, 200);
    }
}
