//! The writing half of an agent socket. One task drains the connection's own frames and the
//! current session's frames; when a session ends, its unsent frames are discarded, so output of
//! an ended session never reaches whoever holds the other end of the relay code next.

use std::time::Duration;

use futures_util::{Sink, SinkExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tracing::debug;

use crate::protocol::{Frame, SEND_QUEUE_FRAMES};

/// Time a closing socket gets to flush what is queued before its writer is stopped.
pub const WRITER_GRACE: Duration = Duration::from_secs(2);

/// Handle to a socket's writer task.
pub struct Outbox {
    /// Connection-level frames: pings, refusals, `hello_ok`, close.
    pub frames: mpsc::Sender<Message>,
    sessions: mpsc::Sender<Option<mpsc::Receiver<Frame>>>,
    task: JoinHandle<()>,
}

enum Next {
    Switch(Option<mpsc::Receiver<Frame>>),
    SessionsGone,
    Frame(Message),
    FramesGone,
    SessionFrame(Option<Frame>),
}

impl Outbox {
    /// Starts the writer for `sink`.
    pub fn spawn<S>(mut sink: S) -> Outbox
    where
        S: Sink<Message> + Unpin + Send + 'static,
        S::Error: std::fmt::Display,
    {
        let (frames, mut frames_rx) = mpsc::channel::<Message>(SEND_QUEUE_FRAMES);
        let (sessions, mut sessions_rx) = mpsc::channel::<Option<mpsc::Receiver<Frame>>>(4);
        let task = tokio::spawn(async move {
            let mut current: Option<mpsc::Receiver<Frame>> = None;
            let mut sessions_open = true;
            loop {
                let next = {
                    let from_session = async {
                        match current.as_mut() {
                            Some(rx) => rx.recv().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        biased;
                        change = sessions_rx.recv(), if sessions_open => match change {
                            Some(next) => Next::Switch(next),
                            None => Next::SessionsGone,
                        },
                        frame = frames_rx.recv() => frame.map_or(Next::FramesGone, Next::Frame),
                        frame = from_session => Next::SessionFrame(frame),
                    }
                };
                let message = match next {
                    Next::Switch(next) => {
                        current = next; // The previous session's unsent frames are dropped here.
                        continue;
                    }
                    Next::SessionsGone => {
                        sessions_open = false;
                        continue;
                    }
                    Next::FramesGone => break,
                    Next::SessionFrame(None) => {
                        current = None;
                        continue;
                    }
                    Next::Frame(message) => message,
                    Next::SessionFrame(Some(frame)) => Message::from(frame),
                };
                let closing = matches!(message, Message::Close(_));
                if let Err(err) = sink.send(message).await {
                    debug!(%err, "socket write failed");
                    break;
                }
                if closing {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        Outbox { frames, sessions, task }
    }

    /// Opens the queue of a new session; the previous session's queue is discarded.
    pub async fn begin_session(&self) -> mpsc::Sender<Frame> {
        let (tx, rx) = mpsc::channel(SEND_QUEUE_FRAMES);
        let _ = self.sessions.send(Some(rx)).await;
        tx
    }

    /// Discards the current session's queue.
    pub async fn end_session(&self) {
        let _ = self.sessions.send(None).await;
    }

    /// Lets the writer flush what is queued, for at most [`WRITER_GRACE`], then stops it.
    pub async fn finish(self) {
        let Outbox { frames, sessions, mut task } = self;
        drop(frames);
        drop(sessions);
        if tokio::time::timeout(WRITER_GRACE, &mut task).await.is_err() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn text(message: &Message) -> String {
        message.to_text().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn an_ended_sessions_unsent_frames_are_discarded() {
        let (sink_tx, mut sink_rx) = futures_channel_pair();
        let writer = Outbox::spawn(sink_tx);
        let first = writer.begin_session().await;
        first.send(Frame::text("first-1")).await.unwrap();
        assert_eq!(text(&sink_rx.next().await.unwrap()), "first-1");
        // The sink stops taking frames for a moment: queue some, then end the session.
        writer.end_session().await;
        let _ = first.try_send(Frame::text("first-late"));
        let second = writer.begin_session().await;
        second.send(Frame::text("second-1")).await.unwrap();
        writer.frames.send(Message::text("conn")).await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(text(&sink_rx.next().await.unwrap()));
        }
        assert!(!seen.contains(&"first-late".to_owned()), "{seen:?}");
        assert!(seen.contains(&"second-1".to_owned()) && seen.contains(&"conn".to_owned()), "{seen:?}");
        writer.finish().await;
    }

    /// A sink/stream pair over an unbounded channel.
    fn futures_channel_pair() -> (
        impl Sink<Message, Error = std::io::Error> + Unpin + Send + 'static,
        impl futures_util::Stream<Item = Message> + Unpin,
    ) {
        let (tx, rx) = mpsc::unbounded_channel::<Message>();
        let sink = futures_util::sink::unfold(tx, |tx, message: Message| async move {
            tx.send(message).map_err(|_| std::io::Error::other("closed"))?;
            Ok::<_, std::io::Error>(tx)
        });
        (Box::pin(sink), tokio_stream_from(rx))
    }

    fn tokio_stream_from(
        mut rx: mpsc::UnboundedReceiver<Message>,
    ) -> impl futures_util::Stream<Item = Message> + Unpin {
        Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
