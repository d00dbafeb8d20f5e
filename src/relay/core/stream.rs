//! The byte streams the core relays a WebSocket over, split for one task: plain TCP, whose write
//! side other sockets' readers may also write to at once ([`DirectSink`]), or a stream the edge
//! wrapped (TLS), split behind a lock and written only by its own task.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// The write side of a plain TCP socket, shared by its own writer and the readers that hand it
/// frames: a reader that finds nothing queued before its frame writes it at once, without
/// waking the receiver's task (see `SendQueue::push`).
pub(crate) type DirectSink = Arc<OwnedWriteHalf>;

/// A byte stream the core relays a WebSocket over: plain TCP, or whatever the edge wrapped it in.
pub(crate) trait RelayStream: Send + Sized {
    type Read: AsyncRead + Unpin + Send;
    type Write: AsyncWrite + Unpin + Send;

    /// Read and write halves for one task, and the sink other sockets may write to at once, if
    /// the stream has one (plain TCP).
    fn into_halves(self) -> (Self::Read, Self::Write, Option<DirectSink>);
}

impl RelayStream for TcpStream {
    type Read = OwnedReadHalf;
    type Write = SharedWrite;

    fn into_halves(self) -> (OwnedReadHalf, SharedWrite, Option<DirectSink>) {
        let (read, write) = self.into_split();
        let sink = Arc::new(write);
        (read, SharedWrite(Arc::clone(&sink)), Some(sink))
    }
}

/// The socket's own writer on a [`DirectSink`]. Its shutdown sends FIN once it holds the sink
/// alone (the queue lets go of it when the socket ends); otherwise the last holder's drop does.
pub(crate) struct SharedWrite(DirectSink);

impl AsyncWrite for SharedWrite {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let tcp: &TcpStream = (*self.0).as_ref();
        loop {
            ready!(tcp.poll_write_ready(cx))?;
            match tcp.try_write(buf) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(written),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let tcp: &TcpStream = (*self.0).as_ref();
        loop {
            ready!(tcp.poll_write_ready(cx))?;
            match tcp.try_write_vectored(bufs) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(written),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Arc::get_mut(&mut self.0) {
            Some(half) => Pin::new(half).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}
