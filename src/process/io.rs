//! Reading what a supervised process writes, and ending its process group: bounded lines,
//! a capped stream, its exit code, a guard that kills the group when dropped.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt};

use super::supervise::kill_tree;

/// A line longer than this is skipped rather than buffered.
pub(crate) const MAX_LINE_LEN: usize = 4 << 20;

/// Splits a stream into `\n`-terminated lines, each at most [`MAX_LINE_LEN`] bytes (longer lines
/// are dropped as they arrive). Cancel-safe: a partial line survives a dropped `next` future.
pub(crate) struct LineReader<R> {
    pub(crate) reader: R,
    line: Vec<u8>,
    overlong: bool,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub(crate) fn new(reader: R) -> Self {
        LineReader { reader, line: Vec::new(), overlong: false }
    }

    /// The next line without its `\n` (or `\r\n`); `None` at end of stream.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                let last = std::mem::take(&mut self.line);
                let overlong = std::mem::take(&mut self.overlong);
                return Ok((!last.is_empty() && !overlong).then_some(last));
            }
            let (chunk, used, done) = match available.iter().position(|&byte| byte == b'\n') {
                Some(end) => (&available[..end], end + 1, true),
                None => (available, available.len(), false),
            };
            if self.overlong || self.line.len() + chunk.len() > MAX_LINE_LEN {
                self.overlong = true;
                self.line = Vec::new();
            } else {
                self.line.extend_from_slice(chunk);
            }
            self.reader.consume(used);
            if done {
                let mut line = std::mem::take(&mut self.line);
                if std::mem::take(&mut self.overlong) {
                    continue;
                }
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
        }
    }
}

/// Keeps the first `keep` bytes of a stream and drains the rest, so the writer never blocks.
pub(crate) async fn read_capped(mut stream: impl AsyncRead + Unpin, keep: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

pub(crate) fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|signal| 128 + signal)).unwrap_or(-1)
}

/// Kills the agent's process group when dropped, unless disarmed after the agent was reaped and
/// its group cleared.
pub(crate) struct GroupGuard(pub(crate) Option<u32>);

impl GroupGuard {
    pub(crate) fn kill(&self) {
        if let Some(pid) = self.0 {
            kill_tree(pid, false);
        }
    }

    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn lines_are_split_bounded_and_crlf_trimmed() {
        let long = vec![b'x'; MAX_LINE_LEN + 10];
        let mut input = b"one\r\ntwo\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nthree");
        let mut lines = LineReader::new(BufReader::with_capacity(64, input.as_slice()));
        assert_eq!(lines.next().await.unwrap().unwrap(), b"one");
        assert_eq!(lines.next().await.unwrap().unwrap(), b"two");
        // The overlong line is skipped entirely.
        assert_eq!(lines.next().await.unwrap().unwrap(), b"three");
        assert_eq!(lines.next().await.unwrap(), None);
    }
}
