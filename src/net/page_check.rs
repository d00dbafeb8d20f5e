//! Whether a relay serves this binary's web client. The page a phone loads from the relay holds
//! the pairing's token, and whoever serves it could serve a script that sends the token elsewhere:
//! sealed sessions keep the relay out of the session, not out of the page. So `voxa run` fetches
//! every file a browser may load from the relay when it connects and compares each one's SHA-256
//! with its own embedded copy; `status`, `doctor`, the run output and the phones that follow say
//! what it found.
//!
//! It fetches as a phone's Chromium does, so that a relay cannot serve the genuine page to the
//! check alone: the page as a navigation, then what the page names, then the rest, on kept-alive
//! connections (HTTP/2 when the relay's TLS offers it, as a browser's ALPN asks for it first),
//! each request with the headers Chromium sends for its kind (`Sec-Fetch-*`, client hints, a
//! mobile `User-Agent` of the current major version, `Accept-Encoding: gzip, deflate, br, zstd`,
//! no `Referer` under the page's `no-referrer`), the bodies decoded before they are compared. What
//! it cannot hide: the laptop's address, and its TLS handshake's own fingerprint (docs/SECURITY.md).

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use rustls_pki_types::ServerName;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dial::{open_stream, tls_client_config, DialOptions, Io};
use super::web;
use crate::config::RelayUrl;
pub use crate::protocol::RelayPage;

/// Time one file may take, connection included.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes read for one file beyond its embedded size (headers, and an altered file's growth).
const SLACK: usize = 64 << 10;
/// Chrome's stable major version on a known day, and its release cadence: the check's
/// `User-Agent` names the version a phone would run today, not one that ages.
const CHROME_MAJOR_ON: (u32, u64) = (131, 1_731_369_600); // 2024-11-12
const CHROME_CADENCE_DAYS: u64 = 28;
/// What every request of Chromium asks for.
const ACCEPT_ENCODING: &str = "gzip, deflate, br, zstd";
const ACCEPT_LANGUAGE: &str = "en-US,en;q=0.9";

/// Fetches every file of the client from `relay` and compares it with the embedded copy.
pub async fn check(relay: &RelayUrl, dial: &DialOptions) -> RelayPage {
    match compare(relay, dial).await {
        Ok((files, altered)) if altered.is_empty() => RelayPage::Same { files },
        Ok((_, paths)) => RelayPage::Altered { paths },
        Err(err) => RelayPage::Unchecked { why: format!("{err:#}") },
    }
}

/// What a browser's request for one file says it is for (`Sec-Fetch-Dest` and its companions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dest {
    Document,
    Style,
    /// A classic `<script src>`.
    Script,
    /// A module, imported or preloaded.
    Module,
    Image,
    Manifest,
    ServiceWorker,
}

/// One file to fetch: the path asked for, its name in web/, its bytes, and how a browser asks.
struct Wanted {
    path: &'static str,
    plain: &'static str,
    body: &'static [u8],
    dest: Dest,
}

/// The files as a browser meets them: the page, what it names in its order, then the rest. Files
/// a page never loads (licence texts) are not asked for.
fn wanted() -> Vec<Wanted> {
    let assets: Vec<_> = web::assets().collect();
    let page = assets.iter().find(|(path, ..)| *path == "/").map(|(_, _, body)| *body).unwrap_or_default();
    let page = String::from_utf8_lossy(page);
    let named: Vec<&str> = page.split('"').skip(1).step_by(2).collect();
    let classic: Vec<&str> = page.split("<script src=\"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    let position = |path: &str| match path {
        "/" => 0,
        _ => named.iter().position(|n| *n == path).map_or(usize::MAX, |at| at + 1),
    };
    let mut wanted: Vec<Wanted> = assets
        .iter()
        .filter(|(_, plain, _)| !plain.contains("LICENSE"))
        .map(|&(path, plain, body)| Wanted { path, plain, body, dest: dest_of(path, classic.contains(&path)) })
        .collect();
    wanted.sort_by_key(|file| position(file.path));
    wanted
}

fn dest_of(path: &str, classic: bool) -> Dest {
    let extension = path.rsplit_once('.').map_or("", |(_, ext)| ext);
    match (path, extension) {
        ("/", _) | (_, "html") => Dest::Document,
        ("/sw.js", _) => Dest::ServiceWorker,
        (_, "js" | "mjs") if classic => Dest::Script,
        (_, "js" | "mjs") => Dest::Module,
        (_, "css") => Dest::Style,
        (_, "webmanifest") => Dest::Manifest,
        _ => Dest::Image,
    }
}

/// The major version of Chrome's stable channel today, as its four-week cadence gives it.
fn chrome_major() -> u32 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (major, since) = CHROME_MAJOR_ON;
    let releases = now.saturating_sub(since) / (CHROME_CADENCE_DAYS * 86_400);
    major + u32::try_from(releases).unwrap_or(0)
}

/// The headers Chromium on Android sends for a request of this kind, in its order, `Host` and
/// `Connection` aside (HTTP/2 carries neither).
fn headers(dest: Dest) -> Vec<(&'static str, String)> {
    let major = chrome_major();
    let user_agent =
        format!("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{major}.0.0.0 Mobile Safari/537.36");
    let brands = format!("\"Chromium\";v=\"{major}\", \"Google Chrome\";v=\"{major}\", \"Not_A Brand\";v=\"99\"");
    let (accept, mode, site) = match dest {
        Dest::Document => (
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,\
             application/signed-exchange;v=b3;q=0.7",
            "navigate",
            "none",
        ),
        Dest::Style => ("text/css,*/*;q=0.1", "no-cors", "same-origin"),
        Dest::Script => ("*/*", "no-cors", "same-origin"),
        Dest::Module | Dest::Manifest => ("*/*", "cors", "same-origin"),
        Dest::Image => ("image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8", "no-cors", "same-origin"),
        Dest::ServiceWorker => ("*/*", "same-origin", "same-origin"),
    };
    let dest_name = match dest {
        Dest::Document => "document",
        Dest::Style => "style",
        Dest::Script | Dest::Module => "script",
        Dest::Image => "image",
        Dest::Manifest => "manifest",
        Dest::ServiceWorker => "serviceworker",
    };
    let mut list = Vec::new();
    if dest == Dest::ServiceWorker {
        list.push(("cache-control", "max-age=0".to_owned()));
    }
    list.extend([
        ("sec-ch-ua", brands),
        ("sec-ch-ua-mobile", "?1".to_owned()),
        ("sec-ch-ua-platform", "\"Android\"".to_owned()),
    ]);
    if dest == Dest::Document {
        list.push(("upgrade-insecure-requests", "1".to_owned()));
    }
    if dest == Dest::ServiceWorker {
        list.push(("service-worker", "script".to_owned()));
    }
    list.extend([
        ("user-agent", user_agent),
        ("accept", accept.to_owned()),
        ("sec-fetch-site", site.to_owned()),
        ("sec-fetch-mode", mode.to_owned()),
    ]);
    if dest == Dest::Document {
        list.push(("sec-fetch-user", "?1".to_owned()));
    }
    list.extend([
        ("sec-fetch-dest", dest_name.to_owned()),
        ("accept-encoding", ACCEPT_ENCODING.to_owned()),
        ("accept-language", ACCEPT_LANGUAGE.to_owned()),
    ]);
    list
}

/// Where the relay is.
struct Target {
    host: String,
    port: u16,
    tls: bool,
    /// Its path prefix (a relay behind a front end's sub-path), without a trailing `/`.
    base: String,
}

impl Target {
    fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// The files compared, and those that differ (named as in web/).
async fn compare(relay: &RelayUrl, dial: &DialOptions) -> Result<(usize, Vec<String>)> {
    let url = url::Url::parse(relay.as_str()).context("relay URL")?;
    let host = url.host_str().ok_or_else(|| anyhow!("the relay URL has no host"))?;
    let target = Target {
        host: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
        port: url.port_or_known_default().unwrap_or(443),
        tls: relay.is_tls(),
        base: url.path().trim_end_matches('/').to_owned(),
    };
    let files = wanted();
    let mut browser = Fetcher::new(&target, dial);
    let mut altered = Vec::new();
    for file in &files {
        let fetch = browser.get(file.path, file.dest, file.body.len() + SLACK);
        let (status, served) = tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| anyhow!("GET {} took more than {} s", file.path, FETCH_TIMEOUT.as_secs()))?
            .with_context(|| format!("GET {}", file.path))?;
        // Named as in web/, whatever the content hash in the name fetched.
        if status != 200 {
            altered.push(format!("{} (answered {status})", file.plain));
        } else if Sha256::digest(&served) != Sha256::digest(file.body) {
            altered.push(file.plain.to_owned());
        }
    }
    Ok((files.len(), altered))
}

/// A browser's connections to the relay: one kept alive, opened again when the relay closes it.
struct Fetcher<'a> {
    target: &'a Target,
    dial: &'a DialOptions,
    connection: Option<Connection>,
}

enum Connection {
    Http1(Box<dyn Io>, Vec<u8>),
    Http2(h2::client::SendRequest<bytes::Bytes>, tokio::task::JoinHandle<()>),
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Connection::Http2(_, driver) = self {
            driver.abort();
        }
    }
}

impl<'a> Fetcher<'a> {
    fn new(target: &'a Target, dial: &'a DialOptions) -> Self {
        Fetcher { target, dial, connection: None }
    }

    /// One `GET`: the status and the decoded body (at most `limit` bytes kept: more means it is
    /// not the file it stands for).
    async fn get(&mut self, path: &str, dest: Dest, limit: usize) -> Result<(u16, Vec<u8>)> {
        let target = format!("{}{path}", self.target.base);
        if self.connection.is_none() {
            self.connection = Some(connect(self.target, self.dial).await?);
        }
        let (status, encoding, body, keep) = match self.connection.as_mut() {
            Some(Connection::Http1(stream, buffer)) => http1(stream, buffer, self.target, &target, dest, limit).await?,
            Some(Connection::Http2(client, _)) => http2(client, self.target, &target, dest, limit).await?,
            None => bail!("no connection"),
        };
        if !keep {
            self.connection = None;
        }
        Ok((status, decode(encoding.as_deref(), &body, limit)?))
    }
}

/// A connection as a browser opens it: TLS offering HTTP/2 first, as Chromium's ALPN does.
async fn connect(target: &Target, dial: &DialOptions) -> Result<Connection> {
    if !target.tls {
        return Ok(Connection::Http1(open_stream(&target.host, target.port, false, dial).await?, Vec::new()));
    }
    let tcp = match dial.proxy.as_ref().filter(|_| !dial.bypasses_proxy(&target.host)) {
        Some(proxy) => proxy.connect(&target.host, target.port).await?,
        None => {
            tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await.context("TCP connect failed")?
        }
    };
    let _ = tcp.set_nodelay(true);
    let mut config = (*tls_client_config(&dial.extra_roots)?).clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let name = ServerName::try_from(target.host.clone()).context("invalid TLS server name")?;
    let tls =
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.context("TLS handshake failed")?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Ok(Connection::Http1(Box::new(tls), Vec::new()));
    }
    let (client, connection) = h2::client::handshake(tls).await.context("HTTP/2 handshake failed")?;
    // The connection's frames are read while it lives; it ends with the fetcher.
    let driver = tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(%err, "page check: HTTP/2 connection ended");
        }
    });
    Ok(Connection::Http2(client, driver))
}

/// Status, content coding, body and whether the connection may carry the next request.
type Answer = (u16, Option<String>, Vec<u8>, bool);

async fn http1(
    stream: &mut Box<dyn Io>,
    buffer: &mut Vec<u8>,
    relay: &Target,
    path: &str,
    dest: Dest,
    limit: usize,
) -> Result<Answer> {
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n", relay.authority());
    for (name, value) in headers(dest) {
        request.push_str(&format!("{}: {value}\r\n", http1_name(name)));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut chunk = [0u8; 16 << 10];
    // The head.
    let (status, head_len, length, chunked, encoding, keep) = loop {
        let mut slots = [httparse::EMPTY_HEADER; 48];
        let mut response = httparse::Response::new(&mut slots);
        if let httparse::Status::Complete(len) = response.parse(buffer).context("the answer is not HTTP")? {
            let header = |name: &str| {
                response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .map(|v| v.trim().to_owned())
            };
            let length = header("content-length").map(|v| v.parse::<usize>()).transpose().context("Content-Length")?;
            let chunked = header("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
            let keep = !header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"))
                && response.version == Some(1)
                && (length.is_some() || chunked);
            break (response.code.unwrap_or(0), len, length, chunked, header("content-encoding"), keep);
        }
        if buffer.len() > 64 << 10 {
            bail!("the answer's head is too long");
        }
        let n = read_some(stream, &mut chunk, !buffer.is_empty()).await?;
        if n == 0 {
            bail!("the answer ended early");
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    buffer.drain(..head_len);
    // The body: by its length, chunked, or up to the close.
    let body = loop {
        if let Some(len) = length {
            if buffer.len() >= len {
                let body = buffer[..len].to_vec();
                buffer.drain(..len);
                break body;
            }
        } else if chunked {
            if let Some((body, used)) = dechunk(buffer)? {
                buffer.drain(..used);
                break body;
            }
        }
        if buffer.len() > limit {
            // Far larger than the file it stands for: it is not that file.
            return Ok((status, None, std::mem::take(buffer), false));
        }
        let n = read_some(stream, &mut chunk, true).await?;
        if n == 0 {
            if length.is_none() && !chunked {
                break std::mem::take(buffer);
            }
            bail!("the answer ended early");
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    Ok((status, encoding, body, keep))
}

/// Reads what arrives; a TLS peer that closes without close_notify after sending something has
/// still ended its answer.
async fn read_some(stream: &mut Box<dyn Io>, chunk: &mut [u8], started: bool) -> Result<usize> {
    match stream.read(chunk).await {
        Ok(n) => Ok(n),
        Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof && started => Ok(0),
        Err(err) => Err(err.into()),
    }
}

/// A header's name as Chromium writes it on HTTP/1.1 (`sec-ch-ua` stays lowercase).
fn http1_name(name: &str) -> String {
    if name.starts_with("sec-ch-") {
        return name.to_owned();
    }
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or(String::new(), |first| first.to_ascii_uppercase().to_string() + chars.as_str())
        })
        .collect::<Vec<_>>()
        .join("-")
}

async fn http2(
    client: &mut h2::client::SendRequest<bytes::Bytes>,
    relay: &Target,
    path: &str,
    dest: Dest,
    limit: usize,
) -> Result<Answer> {
    let uri = format!("https://{}{path}", relay.authority());
    let mut request = http::Request::get(uri);
    for (name, value) in headers(dest) {
        request = request.header(name, value);
    }
    let request = request.body(()).context("a request")?;
    let mut ready = client.clone().ready().await.context("HTTP/2 connection")?;
    let (response, _) = ready.send_request(request, true).context("HTTP/2 request")?;
    let response = response.await.context("HTTP/2 answer")?;
    let status = response.status().as_u16();
    let encoding = response.headers().get("content-encoding").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.context("HTTP/2 body")?;
        let _ = body.flow_control().release_capacity(data.len());
        bytes.extend_from_slice(&data);
        if bytes.len() > limit {
            break;
        }
    }
    Ok((status, encoding, bytes, true))
}

/// A complete chunked body at the start of `buffer`, and the bytes it took; `None` while more is
/// to come.
fn dechunk(buffer: &[u8]) -> Result<Option<(Vec<u8>, usize)>> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_end) = buffer[at..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let size = std::str::from_utf8(&buffer[at..at + line_end]).ok().and_then(|line| {
            let size = line.split(';').next().unwrap_or_default().trim();
            usize::from_str_radix(size, 16).ok()
        });
        let size = size.ok_or_else(|| anyhow!("a malformed chunk size"))?;
        at += line_end + 2;
        if size == 0 {
            // The last chunk, then any trailers, up to an empty line.
            if buffer[at..].starts_with(b"\r\n") {
                return Ok(Some((out, at + 2)));
            }
            let Some(end) = buffer[at..].windows(4).position(|w| w == b"\r\n\r\n") else { return Ok(None) };
            return Ok(Some((out, at + end + 4)));
        }
        if buffer.len() < at + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&buffer[at..at + size]);
        at += size + 2;
    }
}

/// The body as the browser would read it, its content coding undone (at most `limit` bytes).
fn decode(encoding: Option<&str>, body: &[u8], limit: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX) + 1;
    match encoding.map(str::trim).map(str::to_ascii_lowercase).as_deref() {
        None | Some("identity") => return Ok(body.to_vec()),
        Some("br") => brotli::Decompressor::new(body, 4096).take(cap).read_to_end(&mut out),
        Some("gzip" | "x-gzip") => flate2::read::GzDecoder::new(body).take(cap).read_to_end(&mut out),
        Some("deflate") => flate2::read::ZlibDecoder::new(body).take(cap).read_to_end(&mut out),
        Some(other) => bail!("the relay answered in {other}, which voxa's relay never sends"),
    }
    .context("a body that does not decode")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn chunked_bodies_are_joined_once_complete() {
        let chunked = b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\nNEXT";
        assert_eq!(dechunk(chunked).unwrap(), Some((b"hello world".to_vec(), chunked.len() - 4)));
        assert_eq!(dechunk(b"5\r\nhel").unwrap(), None);
        assert!(dechunk(b"zz\r\n").is_err());
    }

    #[test]
    fn bodies_are_decoded_as_a_browser_reads_them() {
        let text = b"the page as served".repeat(100);
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gzip.write_all(&text).unwrap();
        assert_eq!(decode(Some("gzip"), &gzip.finish().unwrap(), 1 << 20).unwrap(), text);
        let mut brotli = Vec::new();
        brotli::BrotliCompress(&mut &text[..], &mut brotli, &Default::default()).unwrap();
        assert_eq!(decode(Some("br"), &brotli, 1 << 20).unwrap(), text);
        assert_eq!(decode(None, &text, 1 << 20).unwrap(), text);
        // A bomb is cut at the limit, and a coding voxa never sends is said.
        assert_eq!(decode(Some("br"), &brotli, 10).unwrap().len(), 11);
        assert!(format!("{:#}", decode(Some("zstd"), b"x", 10).unwrap_err()).contains("zstd"));
    }

    #[test]
    fn requests_carry_what_chromium_sends_for_their_kind() {
        let navigation = headers(Dest::Document);
        let names: Vec<&str> = navigation.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            names,
            [
                "sec-ch-ua",
                "sec-ch-ua-mobile",
                "sec-ch-ua-platform",
                "upgrade-insecure-requests",
                "user-agent",
                "accept",
                "sec-fetch-site",
                "sec-fetch-mode",
                "sec-fetch-user",
                "sec-fetch-dest",
                "accept-encoding",
                "accept-language",
            ]
        );
        let value = |list: &[(&str, String)], name: &str| list.iter().find(|(n, _)| *n == name).unwrap().1.clone();
        assert!(value(&navigation, "user-agent").contains(&format!("Chrome/{}.0.0.0 Mobile", chrome_major())));
        assert!(!value(&navigation, "user-agent").contains("voxa"));
        assert!(chrome_major() >= CHROME_MAJOR_ON.0);
        let module = headers(Dest::Module);
        assert_eq!(
            (value(&module, "sec-fetch-dest"), value(&module, "sec-fetch-mode")),
            ("script".into(), "cors".into())
        );
        assert!(headers(Dest::ServiceWorker)
            .iter()
            .any(|(name, value)| *name == "service-worker" && value == "script"));
        assert_eq!(http1_name("accept-encoding"), "Accept-Encoding");
        assert_eq!(http1_name("sec-ch-ua-mobile"), "sec-ch-ua-mobile");
    }

    #[test]
    fn the_page_comes_first_then_what_it_names_and_no_licence_text() {
        let files = wanted();
        assert_eq!((files[0].path, files[0].dest), ("/", Dest::Document));
        let stylesheet = files.iter().position(|f| f.plain == "/app.css").unwrap();
        let lazy = files.iter().position(|f| f.plain == "/js/voice/panel.js").unwrap();
        assert!(stylesheet < lazy, "what the page names comes before the lazy views");
        assert!(files.iter().all(|f| !f.plain.contains("LICENSE")));
        let dest = |plain: &str| files.iter().find(|f| f.plain == plain).unwrap().dest;
        assert_eq!(dest("/js/address.js"), Dest::Script);
        assert_eq!(dest("/js/main.js"), Dest::Module);
        assert_eq!(dest("/sw.js"), Dest::ServiceWorker);
        assert_eq!(dest("/icon.svg"), Dest::Image);
    }
}
