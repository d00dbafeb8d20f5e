//! The little HTTP a WebSocket server needs: read one request head (bounded), answer plain
//! responses, and complete the upgrade. Shared by the relay and the loopback socket so both
//! refuse bad requests before any WebSocket exists.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

/// Largest request head accepted.
pub const MAX_HEAD_LEN: usize = 8 << 10;
/// Most headers accepted in one request.
pub const MAX_HEADERS: usize = 48;
/// Time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed request line and headers.
#[derive(Clone)]
pub struct RequestHead {
    pub method: String,
    /// Path without the query.
    pub path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    /// The minor version of `HTTP/1.x`.
    minor: u8,
}

// Query strings and headers carry codes and tokens: never print them.
impl std::fmt::Debug for RequestHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHead").field("method", &self.method).field("path", &self.path).finish_non_exhaustive()
    }
}

/// Why a request head could not be read.
#[derive(Debug)]
pub enum HeadError {
    Io(std::io::Error),
    TooLarge,
    Malformed,
    TimedOut,
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::Io(err) => write!(f, "connection error: {err}"),
            HeadError::TooLarge => f.write_str("request head too large"),
            HeadError::Malformed => f.write_str("malformed HTTP request"),
            HeadError::TimedOut => f.write_str("no request head in time"),
        }
    }
}

impl std::error::Error for HeadError {}

impl RequestHead {
    /// Parses a complete head (`\r\n\r\n`-terminated bytes).
    pub fn parse(bytes: &[u8]) -> Result<(RequestHead, usize), HeadError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => {
                let (path, query) = split_target(request.path.ok_or(HeadError::Malformed)?);
                let headers = request
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                let method = request.method.ok_or(HeadError::Malformed)?.to_owned();
                let minor = request.version.ok_or(HeadError::Malformed)?;
                Ok((RequestHead { method, path, query, headers, minor }, len))
            }
            Ok(httparse::Status::Partial) => Err(HeadError::Malformed),
            Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
            Err(_) => Err(HeadError::Malformed),
        }
    }

    /// A head from a request that came another way (an HTTP/2 stream): its method, its target
    /// (path and query) and its headers, held to the limits of a head read from HTTP/1.1.
    pub fn from_parts<'a>(
        method: &str,
        target: &str,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<RequestHead, HeadError> {
        let (path, query) = split_target(target);
        let mut len = method.len() + target.len();
        let mut kept = Vec::new();
        for (name, value) in headers {
            len += name.len() + value.len() + 4;
            if kept.len() == MAX_HEADERS || len > MAX_HEAD_LEN {
                return Err(HeadError::TooLarge);
            }
            kept.push((name.to_ascii_lowercase(), String::from_utf8_lossy(value).into_owned()));
        }
        Ok(RequestHead { method: method.to_owned(), path, query, headers: kept, minor: 1 })
    }

    /// First value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The value of a header that appears exactly once; `None` when it is missing or repeated (a
    /// repeated `Host` or `Origin` is an attempt to be read one way here and another elsewhere).
    pub fn single_header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let (_, value) = values.next()?;
        values.next().is_none().then_some(value.as_str())
    }

    /// Value of a query parameter (no percent-decoding: voxa's parameters are plain hex).
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|pair| match pair.split_once('=') {
            Some((key, value)) if key == name => Some(value),
            None if pair == name => Some(""),
            _ => None,
        })
    }

    /// The bearer token of an `Authorization: Bearer …` header.
    pub fn bearer(&self) -> Option<&str> {
        let value = self.header("authorization")?.trim();
        let (scheme, token) = value.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    }

    /// Whether the client may send another request on this connection after the answer: HTTP/1.1
    /// unless it said `Connection: close`, HTTP/1.0 only if it said `keep-alive`; never after a
    /// request with a body (voxa reads none, so its bytes would be taken for the next request).
    pub fn keeps_alive(&self) -> bool {
        let said = |token: &str| {
            self.headers
                .iter()
                .filter(|(n, _)| n == "connection")
                .any(|(_, v)| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token)))
        };
        let bodiless = self.header("transfer-encoding").is_none()
            && self.headers.iter().filter(|(n, _)| n == "content-length").all(|(_, v)| v.trim() == "0");
        let wanted = if self.minor >= 1 { !said("close") } else { said("keep-alive") };
        wanted && bodiless
    }

    /// True for a well-formed WebSocket upgrade request.
    pub fn is_websocket_upgrade(&self) -> bool {
        let has_token = |name: &str, token: &str| {
            self.header(name).is_some_and(|v| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token)))
        };
        self.method == "GET"
            && has_token("connection", "upgrade")
            && has_token("upgrade", "websocket")
            && self.header("sec-websocket-key").is_some()
            && self.header("sec-websocket-version") == Some("13")
    }
}

/// A request target as its path and its query.
fn split_target(target: &str) -> (String, Option<String>) {
    match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (target.to_owned(), None),
    }
}

/// Reads one request head within `limit` (the relay's is [`HEAD_TIMEOUT`]). Returns it and any
/// bytes read past it.
pub async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    limit: Duration,
) -> Result<(RequestHead, Vec<u8>), HeadError> {
    read_next_head(stream, limit, Vec::new()).await
}

/// Reads the next request head of a kept-alive connection, starting with the bytes read past the
/// previous one (a client may send requests before their answers).
pub async fn read_next_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    limit: Duration,
    carried: Vec<u8>,
) -> Result<(RequestHead, Vec<u8>), HeadError> {
    let read = async {
        let mut buf = carried;
        buf.reserve(1024);
        let mut chunk = [0u8; 1024];
        let mut scan_from = 0;
        loop {
            if let Some(pos) = buf[scan_from..].windows(4).position(|w| w == b"\r\n\r\n") {
                let end = scan_from + pos + 4;
                // The limit applies to the head itself, whatever the reads that brought it.
                if end > MAX_HEAD_LEN {
                    return Err(HeadError::TooLarge);
                }
                let (head, len) = RequestHead::parse(&buf[..end])?;
                // A head that ends earlier for httparse (bare `\n\n`) is ambiguous: refuse it.
                if len != end {
                    return Err(HeadError::Malformed);
                }
                return Ok((head, buf[end..].to_vec()));
            }
            if buf.len() > MAX_HEAD_LEN {
                return Err(HeadError::TooLarge);
            }
            let n = stream.read(&mut chunk).await.map_err(HeadError::Io)?;
            if n == 0 {
                return Err(HeadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            scan_from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(limit, read).await.map_err(|_| HeadError::TimedOut)?
}

/// Writes a plain response and ends the exchange.
pub async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: u16,
    reason: &str,
    body: &str,
) -> std::io::Result<()> {
    respond_with(stream, status, reason, &[], body).await
}

/// Writes a plain response with extra headers (names and values are the caller's constants)
/// and ends the exchange.
pub async fn respond_with<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: u16,
    reason: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<()> {
    write_response(stream, status, reason, headers, "text/plain; charset=utf-8", body).await
}

/// Writes a response with its own content type and ends the exchange.
pub async fn respond_typed<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: u16,
    reason: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    write_response(stream, status, reason, &[], content_type, body).await
}

async fn write_response<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: u16,
    reason: &str,
    headers: &[(&str, &str)],
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let mut response = format!("HTTP/1.1 {status} {reason}\r\ndate: {date}\r\n");
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str(&format!(
        "content-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\ncache-control: no-store\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await?;
    let _ = stream.shutdown().await;
    Ok(())
}

/// Answers `101 Switching Protocols` to an upgrade request the caller has checked.
pub async fn write_upgrade<S: AsyncWrite + Unpin>(stream: &mut S, head: &RequestHead) -> std::io::Result<()> {
    write_upgrade_with(stream, head, None).await
}

/// Answers `101 Switching Protocols`, naming the WebSocket subprotocol chosen, if any.
pub async fn write_upgrade_with<S: AsyncWrite + Unpin>(
    stream: &mut S,
    head: &RequestHead,
    protocol: Option<&str>,
) -> std::io::Result<()> {
    let key = head.header("sec-websocket-key").unwrap_or_default();
    let accept = derive_accept_key(key.trim().as_bytes());
    let protocol = protocol.map(|protocol| format!("sec-websocket-protocol: {protocol}\r\n")).unwrap_or_default();
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: {accept}\r\n{protocol}\r\n"
    );
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await
}

/// Answers `101 Switching Protocols` and wraps the stream as a server WebSocket.
/// The caller has checked [`RequestHead::is_websocket_upgrade`] and everything else it needs.
pub async fn accept_websocket<S>(
    mut stream: S,
    head: &RequestHead,
    leftover: Vec<u8>,
    config: WebSocketConfig,
) -> std::io::Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    write_upgrade(&mut stream, head).await?;
    Ok(if leftover.is_empty() {
        WebSocketStream::from_raw_socket(stream, Role::Server, Some(config)).await
    } else {
        WebSocketStream::from_partially_read(stream, leftover, Role::Server, Some(config)).await
    })
}

/// WebSocket limits used by every voxa socket.
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(crate::protocol::MAX_FRAME_LEN))
        .max_frame_size(Some(crate::protocol::MAX_FRAME_LEN))
        .read_buffer_size(4 << 10)
        .write_buffer_size(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPGRADE: &[u8] = b"GET /agent?code=abc&x HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer  tok \r\n\r\n";

    #[test]
    fn parses_path_query_and_headers() {
        let (head, len) = RequestHead::parse(UPGRADE).unwrap();
        assert_eq!(len, UPGRADE.len());
        assert_eq!(head.path, "/agent");
        assert_eq!(head.query_param("code"), Some("abc"));
        assert_eq!(head.query_param("x"), Some(""));
        assert_eq!(head.query_param("y"), None);
        assert_eq!(head.bearer(), Some("tok"));
        assert!(head.is_websocket_upgrade());
        assert!(!format!("{head:?}").contains("abc"));
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection_and_never_survives_a_body() {
        let head = |text: &str| RequestHead::parse(text.as_bytes()).unwrap().0;
        assert!(head("GET / HTTP/1.1\r\nHost: h\r\n\r\n").keeps_alive());
        assert!(!head("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").keeps_alive());
        assert!(!head("GET / HTTP/1.0\r\n\r\n").keeps_alive());
        assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keeps_alive());
        assert!(!head("GET / HTTP/1.1\r\nContent-Length: 4\r\n\r\n").keeps_alive());
        assert!(head("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").keeps_alive());
        assert!(!head("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").keeps_alive());
    }

    #[tokio::test]
    async fn the_next_head_starts_with_the_bytes_carried_from_the_last() {
        let two = b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\nGE";
        let (first, carried) = read_head(&mut &two[..], HEAD_TIMEOUT).await.unwrap();
        assert_eq!(first.path, "/a");
        // The second head is whole in what was carried: nothing more is read for it.
        let (second, rest) = read_next_head(&mut &b""[..], HEAD_TIMEOUT, carried).await.unwrap();
        assert_eq!((second.path.as_str(), rest.as_slice()), ("/b", &b"GE"[..]));
        let (third, _) = read_next_head(&mut &b"T /c HTTP/1.1\r\n\r\n"[..], HEAD_TIMEOUT, rest).await.unwrap();
        assert_eq!(third.path, "/c");
        let carried = vec![b'a'; MAX_HEAD_LEN + 1];
        assert!(matches!(read_next_head(&mut &b""[..], HEAD_TIMEOUT, carried).await, Err(HeadError::TooLarge)));
    }

    #[tokio::test]
    async fn read_head_keeps_bytes_after_the_head_and_bounds_size() {
        let mut input = UPGRADE.to_vec();
        input.extend_from_slice(b"extra");
        let (head, rest) = read_head(&mut &input[..], HEAD_TIMEOUT).await.unwrap();
        assert_eq!(head.path, "/agent");
        assert_eq!(rest, b"extra");

        let huge = vec![b'a'; MAX_HEAD_LEN * 2];
        assert!(matches!(read_head(&mut &huge[..], HEAD_TIMEOUT).await, Err(HeadError::TooLarge)));
        assert!(matches!(read_head(&mut &b"GARBAGE\r\n\r\n"[..], HEAD_TIMEOUT).await, Err(HeadError::Malformed)));
    }
}
