//! The floor of the phone-network rows: the least a page can do to be "online" over the same
//! network, with voxa out of the way. One HTML document and one script carrying as many bytes as
//! voxa's first screen moved (incompressible, sent as they are), served on one kept-alive
//! connection, then one WebSocket opened and one message echoed; the page marks `floor:online`
//! when the echo arrives. The document and the script are cacheable, the document revalidated
//! with its ETag, as a reload of a page without a service worker would do at best.
//!
//! The floor of a page over HTTPS is the same over TLS 1.3 (a certificate of its own, which the
//! bench's browser accepts as it accepts the LAN relay's): the TLS handshake of the page's
//! connection and of the WebSocket's is work any page served over HTTPS does.

use std::sync::Arc;

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use rand::RngCore;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

/// The mark the floor page sets when its echo arrives.
pub const MARK: &str = "floor:online";

const PAGE: &str = "<!doctype html><meta charset=utf-8><title>floor</title><script type=module src=/floor.js></script>";
const ETAG: &str = "\"floor-1\"";

/// Serves the floor page with a script of about `bytes` bytes, over TLS when `tls`; gives its
/// origin and runs until the runtime ends.
pub async fn serve(bytes: usize, tls: bool) -> String {
    let mut padding = vec![0u8; bytes * 3 / 4];
    rand::rng().fill_bytes(&mut padding);
    let script = format!(
        "// {}\nconst ws = new WebSocket(`${{location.protocol === 'https:' ? 'wss' : 'ws'}}://${{location.host}}/ws`);\n\
         ws.onopen = () => ws.send('hello');\n\
         ws.onmessage = () => performance.mark('{MARK}');\n",
        base64::engine::general_purpose::STANDARD.encode(&padding)
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port for the floor page");
    let addr = listener.local_addr().expect("the floor page's address");
    let script: &'static str = Box::leak(script.into_boxed_str());
    let acceptor = tls.then(acceptor);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            match acceptor.clone() {
                None => drop(tokio::spawn(connection(stream, script))),
                Some(acceptor) => drop(tokio::spawn(async move {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        connection(stream, script).await;
                    }
                })),
            }
        }
    });
    format!("{}://{addr}", if tls { "https" } else { "http" })
}

/// TLS with a certificate made for this run, HTTP/1.1 (the floor's two requests go one after the
/// other on one connection, which HTTP/2 would not make faster).
fn acceptor() -> TlsAcceptor {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("a certificate for the floor page");
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("the floor page's certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}

/// One connection: requests answered in turn until it closes or asks for a WebSocket.
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, script: &'static str) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end + 4);
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
            })
        };
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        if let Some(key) = header("sec-websocket-key") {
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
                 sec-websocket-accept: {}\r\n\r\n",
                derive_accept_key(key.as_bytes())
            );
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            let mut ws = WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
            while let Some(Ok(message)) = ws.next().await {
                if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err() {
                    return;
                }
            }
            return;
        }
        let fresh = header("if-none-match").is_some_and(|tag| tag == ETAG);
        let (status, mime, body) = match path.as_str() {
            "/floor.js" => ("200 OK", "text/javascript", script),
            _ if fresh => ("304 Not Modified", "text/html", ""),
            _ => ("200 OK", "text/html; charset=utf-8", PAGE),
        };
        let cache = if path == "/floor.js" { "public, max-age=31536000, immutable" } else { "no-cache" };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {mime}\r\ncache-control: {cache}\r\netag: {ETAG}\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}
