//! Whether a relay serves this binary's web client. The page a phone loads from the relay holds
//! the pairing's token, and whoever serves it could serve a script that sends the token elsewhere:
//! sealed sessions keep the relay out of the session, not out of the page. So `voxa run` fetches
//! every file of the client from the relay when it connects and compares each one's SHA-256 with
//! its own embedded copy; `status`, `doctor` and the run output say what it found.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dial::{open_stream, DialOptions};
use super::web;
use crate::config::RelayUrl;
pub use crate::protocol::RelayPage;

/// Time one file may take, connection included.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes read for one file beyond its embedded size (headers, and an altered file's growth).
const SLACK: usize = 64 << 10;

/// Fetches every file of the client from `relay` and compares it with the embedded copy.
pub async fn check(relay: &RelayUrl, dial: &DialOptions) -> RelayPage {
    match compare(relay, dial).await {
        Ok(altered) if altered.is_empty() => RelayPage::Same { files: web::assets().count() },
        Ok(paths) => RelayPage::Altered { paths },
        Err(err) => RelayPage::Unchecked { why: format!("{err:#}") },
    }
}

async fn compare(relay: &RelayUrl, dial: &DialOptions) -> Result<Vec<String>> {
    let url = url::Url::parse(relay.as_str()).context("relay URL")?;
    let host = url.host_str().ok_or_else(|| anyhow!("the relay URL has no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let base = url.path().trim_end_matches('/').to_owned();
    let mut altered = Vec::new();
    for (path, plain, body) in web::assets() {
        let target = format!("{base}{path}");
        let fetch = get(&host, port, relay.is_tls(), &target, body.len() + SLACK, dial);
        let (status, served) = tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| anyhow!("GET {path} took more than {} s", FETCH_TIMEOUT.as_secs()))?
            .with_context(|| format!("GET {path}"))?;
        // Named as in web/, whatever the content hash in the name fetched.
        if status != 200 {
            altered.push(format!("{plain} (answered {status})"));
        } else if Sha256::digest(&served) != Sha256::digest(body) {
            altered.push(plain.to_owned());
        }
    }
    Ok(altered)
}

/// One `GET` on its own connection: the status and the body (at most `limit` bytes read).
async fn get(host: &str, port: u16, tls: bool, path: &str, limit: usize, dial: &DialOptions) -> Result<(u16, Vec<u8>)> {
    let mut stream = open_stream(host, port, tls, dial).await?;
    let shown_host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {shown_host}:{port}\r\nUser-Agent: voxa/{}\r\nAccept-Encoding: identity\r\n\
         Connection: close\r\n\r\n",
        crate::VERSION
    );
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            // A TLS peer that closes without close_notify still sent a complete response.
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof && !bytes.is_empty() => 0,
            Err(err) => return Err(err.into()),
        };
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
        if bytes.len() > limit {
            // Far larger than the file it stands for: it is not that file.
            return Ok((200, bytes));
        }
    }
    parse(&bytes)
}

/// Status and body of a complete response: `Content-Length`, chunked, or up to the close.
fn parse(bytes: &[u8]) -> Result<(u16, Vec<u8>)> {
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(bytes).context("the answer is not HTTP")? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => bail!("the answer ended early"),
    };
    let status = response.code.unwrap_or(0);
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::trim)
    };
    let body = &bytes[head_len..];
    if header("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        return Ok((status, dechunk(body)?));
    }
    match header("content-length").map(str::parse::<usize>) {
        Some(Ok(len)) if len <= body.len() => Ok((status, body[..len].to_vec())),
        Some(Ok(_)) => bail!("the answer ended early"),
        Some(Err(_)) => bail!("a malformed Content-Length"),
        None => Ok((status, body.to_vec())),
    }
}

/// A chunked body, joined.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").ok_or_else(|| anyhow!("a malformed chunk"))?;
        let size = std::str::from_utf8(&body[..line_end]).ok().and_then(|line| {
            let size = line.split(';').next().unwrap_or_default().trim();
            usize::from_str_radix(size, 16).ok()
        });
        let size = size.ok_or_else(|| anyhow!("a malformed chunk size"))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size + 2 {
            bail!("the answer ended early");
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_read_by_length_chunked_or_to_the_close() {
        let by_length = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello-and-more";
        assert_eq!(parse(by_length).unwrap(), (200, b"hello".to_vec()));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n";
        assert_eq!(parse(chunked).unwrap(), (200, b"hello world".to_vec()));
        assert_eq!(parse(b"HTTP/1.1 404 Not Found\r\n\r\ngone").unwrap(), (404, b"gone".to_vec()));
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
        assert!(parse(b"not http at all").is_err());
    }
}
