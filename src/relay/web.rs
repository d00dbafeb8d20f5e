//! The relay's web app: the web client's page, its files and `/config` (`net::web` builds the
//! answers), on HTTP/1.1 connections kept open between a page's requests a bounded number of
//! times, or on HTTP/2 (`edge/http2.rs`).

use anyhow::Context as _;
use tokio::io::AsyncWrite;

use crate::net::http::{self, RequestHead};
use crate::net::web;

/// Time a kept-alive connection may wait for the page's next request.
pub(super) use crate::net::web::KEEP_ALIVE_IDLE;

/// What the relay's pages say it offers.
#[derive(Clone, Copy, Debug)]
pub(super) struct WebApp {
    offer: web::Offer,
}

impl WebApp {
    /// The pages of a relay that hosts voice (`live`), asks for a relay token (`relay_token`) and
    /// serves a certificate the page shows to be compared (`certificate_sha256`, `run --lan`).
    pub(super) fn new(live: bool, relay_token: bool, certificate_sha256: Option<[u8; 32]>) -> Self {
        WebApp { offer: web::Offer { live, relay_token, certificate_sha256 } }
    }

    /// True for a path the web app answers (never behind the relay token: a browser cannot send
    /// one, and nothing served is secret).
    pub(super) fn serves(path: &str) -> bool {
        web::is_web_path(path)
    }

    /// The answer to a page request, `None` for a path the web app does not serve.
    pub(super) fn response(&self, head: &RequestHead) -> Option<web::Response> {
        web::answer(head, self.offer)
    }

    /// Answers the `served`-th page request of a connection; true when the connection stays open
    /// for the page's next request.
    pub(super) async fn answer<S: AsyncWrite + Unpin>(
        &self,
        head: &RequestHead,
        stream: &mut S,
        served: usize,
    ) -> anyhow::Result<bool> {
        let keep_alive = web::keep_alive(served, head);
        match self.response(head) {
            Some(response) => {
                response.write(stream, keep_alive).await.context("serving the web client")?;
                Ok(keep_alive)
            }
            None => {
                http::respond(stream, 404, "Not Found", "not found").await.context("answering a request")?;
                Ok(false)
            }
        }
    }
}
