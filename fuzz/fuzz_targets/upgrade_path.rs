//! The upgrade path of the relay and loopback servers: `RequestHead::parse` on arbitrary bytes, and
//! `read_head` over an in-memory socket that hands the same bytes out in fuzzer-chosen reads. The
//! verdict must not depend on how the bytes were split.
#![no_main]

use std::pin::Pin;
use std::task::{Context, Poll};

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, ReadBuf};
use voxa::net::http::{self, HeadError, RequestHead};

struct Chunked<'a> {
    data: &'a [u8],
    size: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let n = self.size.min(buf.remaining()).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

#[derive(Debug, PartialEq)]
enum Verdict {
    Head { method: String, path: String, code: Option<String>, bearer: Option<String>, rest: Vec<u8> },
    TooLarge,
    Malformed,
    Eof,
}

fn verdict(runtime: &tokio::runtime::Runtime, data: &[u8], size: usize) -> Verdict {
    let mut reader = Chunked { data, size: size.max(1) };
    match runtime.block_on(http::read_head(&mut reader, http::HEAD_TIMEOUT)) {
        Ok((head, mut rest)) => {
            assert!(rest.len() <= data.len());
            rest.extend_from_slice(reader.data);
            Verdict::Head {
                method: head.method.clone(),
                path: head.path.clone(),
                code: head.query_param("code").map(str::to_owned),
                bearer: head.bearer().map(str::to_owned),
                rest,
            }
        }
        Err(HeadError::TooLarge) => Verdict::TooLarge,
        Err(HeadError::Malformed) => Verdict::Malformed,
        Err(HeadError::Io(_)) => Verdict::Eof,
        Err(HeadError::TimedOut) => panic!("an in-memory reader cannot time out"),
    }
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else { return };
    if let Ok((head, len)) = RequestHead::parse(data) {
        assert!(len <= data.len());
        let _ = (head.header("origin"), head.query_param("code"), head.bearer(), head.is_websocket_upgrade());
        assert!(!format!("{head:?}").contains('?'), "Debug never shows the query");
    }
    RUNTIME.with(|runtime| {
        let whole = verdict(runtime, data, usize::MAX);
        assert_eq!(verdict(runtime, data, usize::from(split) + 1), whole, "verdict depends on read sizes");
        if let Verdict::Head { .. } = &whole {
            let end = data.windows(4).position(|w| w == b"\r\n\r\n").expect("a head ends with a blank line") + 4;
            assert!(end <= http::MAX_HEAD_LEN, "accepted a head over the limit");
        }
    });
});
