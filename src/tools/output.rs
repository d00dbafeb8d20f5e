//! Output of a running program: ANSI escapes stripped as the bytes stream in, the text capped at
//! [`OUTPUT_CAP`], a short rolling tail kept for error messages, and progress chunks forwarded
//! without ever blocking the reader.

use tokio::sync::mpsc::{self, error::TrySendError};

use crate::protocol::OUTPUT_CAP;
use crate::text::{prefix, suffix};

/// Bytes of the most recent output quoted in a `timeout` or `cancelled` message.
pub(crate) const TAIL_LEN: usize = 2048;

/// Streaming ANSI stripper. Escape sequences and invalid UTF-8 split across reads are handled;
/// `\r\n` (a PTY's line ending) becomes `\n`; tabs and lone `\r` are kept; other control bytes go.
pub(crate) struct AnsiStripper {
    parser: vte::Parser,
    pending_cr: bool,
}

struct Collect<'a> {
    out: &'a mut String,
    pending_cr: &'a mut bool,
}

impl Collect<'_> {
    fn flush_cr(&mut self) {
        if std::mem::take(self.pending_cr) {
            self.out.push('\r');
        }
    }
}

impl vte::Perform for Collect<'_> {
    fn print(&mut self, c: char) {
        self.flush_cr();
        self.out.push(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                *self.pending_cr = false;
                self.out.push('\n');
            }
            b'\r' => {
                self.flush_cr();
                *self.pending_cr = true;
            }
            b'\t' => {
                self.flush_cr();
                self.out.push('\t');
            }
            _ => {}
        }
    }
}

impl AnsiStripper {
    pub fn new() -> Self {
        AnsiStripper { parser: vte::Parser::new(), pending_cr: false }
    }

    /// The printable text of `bytes`.
    pub fn feed(&mut self, bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len());
        self.parser.advance(&mut Collect { out: &mut out, pending_cr: &mut self.pending_cr }, bytes);
        out
    }

    /// Whatever is still held back at the end of the stream (a final lone `\r`).
    pub fn finish(&mut self) -> String {
        if std::mem::take(&mut self.pending_cr) {
            "\r".to_owned()
        } else {
            String::new()
        }
    }
}

/// Text collected from a program, bounded in memory whatever it prints.
pub(crate) struct Output {
    text: String,
    cap: usize,
    truncated: bool,
    tail: String,
    progress: Option<mpsc::Sender<String>>,
    /// Progress not yet accepted by a full channel; sent with the next chunk.
    pending: String,
    /// Progress bytes accepted so far (pending included); never more than `cap`.
    progress_budget_used: usize,
}

impl Output {
    pub fn new(progress: Option<mpsc::Sender<String>>) -> Self {
        Self::with_cap(progress, OUTPUT_CAP)
    }

    pub fn with_cap(progress: Option<mpsc::Sender<String>>, cap: usize) -> Self {
        Output {
            text: String::new(),
            cap,
            truncated: false,
            tail: String::new(),
            progress,
            pending: String::new(),
            progress_budget_used: 0,
        }
    }

    /// Adds text: kept up to the cap, remembered in the tail, forwarded as progress.
    pub fn push(&mut self, chunk: &str) {
        if chunk.is_empty() {
            return;
        }
        if !self.truncated {
            let room = self.cap - self.text.len();
            if chunk.len() <= room {
                self.text.push_str(chunk);
            } else {
                self.text.push_str(prefix(chunk, room));
                self.truncated = true;
            }
        }
        self.push_tail(chunk);
        if self.progress.is_some() {
            let room = self.cap - self.progress_budget_used;
            let part = prefix(chunk, room);
            self.progress_budget_used += part.len();
            self.pending.push_str(part);
            self.flush_progress();
        }
    }

    /// Tries to hand pending progress to the channel; a full channel keeps it for later.
    pub fn flush_progress(&mut self) {
        let Some(sender) = &self.progress else { return };
        if self.pending.is_empty() {
            return;
        }
        match sender.try_send(std::mem::take(&mut self.pending)) {
            Ok(()) => {}
            Err(TrySendError::Full(chunk)) => self.pending = chunk,
            Err(TrySendError::Closed(_)) => self.progress = None,
        }
    }

    fn push_tail(&mut self, chunk: &str) {
        if chunk.len() >= TAIL_LEN {
            self.tail.clear();
            self.tail.push_str(suffix(chunk, TAIL_LEN));
        } else {
            self.tail.push_str(chunk);
            if self.tail.len() > 2 * TAIL_LEN {
                self.tail = suffix(&self.tail, TAIL_LEN).to_owned();
            }
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    #[cfg(test)]
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The last [`TAIL_LEN`] bytes or so of everything pushed.
    pub fn tail(&self) -> &str {
        suffix(&self.tail, TAIL_LEN)
    }

    pub fn into_text(self) -> (String, bool) {
        (self.text, self.truncated)
    }
}

/// A sentence quoting the end of a program's output, or nothing when it printed nothing.
pub(crate) fn last_output(output: &Output) -> String {
    let tail = output.tail().trim_end();
    if tail.is_empty() {
        String::new()
    } else {
        format!("; last output:\n{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip_all(chunks: &[&[u8]]) -> String {
        let mut stripper = AnsiStripper::new();
        let mut out: String = chunks.iter().map(|chunk| stripper.feed(chunk)).collect();
        out.push_str(&stripper.finish());
        out
    }

    #[test]
    fn colours_cursor_moves_and_titles_are_removed() {
        assert_eq!(strip_all(&[b"\x1b[1;31mred\x1b[0m plain\r\n"]), "red plain\n");
        assert_eq!(strip_all(&[b"\x1b]0;title\x07a\x1b[2K\x1b[1Gb\tc\x08\x07"]), "ab\tc");
        assert_eq!(strip_all(&[b"10%\r20%\r\n"]), "10%\r20%\n");
    }

    #[test]
    fn sequences_and_characters_split_across_reads_survive() {
        let text = "h\u{e9}llo \u{1f600}";
        let bytes = format!("\x1b[32m{text}\x1b[0m\r\n").into_bytes();
        for split in 0..bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(strip_all(&[a, b]), format!("{text}\n"), "split at {split}");
        }
        assert_eq!(strip_all(&[b"a\xffb"]), "a\u{fffd}b");
    }

    #[test]
    fn output_is_capped_on_a_char_boundary_and_keeps_a_tail() {
        let mut output = Output::with_cap(None, 10);
        output.push("123456789");
        output.push("\u{e9}\u{e9}");
        assert_eq!(output.text(), "123456789");
        assert!(output.truncated());
        output.push(&"x".repeat(10_000));
        output.push("end");
        assert_eq!(output.text().len(), 9);
        assert!(output.tail().ends_with("xxend"));
        assert!(output.tail().len() <= TAIL_LEN);
    }

    #[tokio::test]
    async fn progress_is_bounded_in_order_and_never_blocks() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut output = Output::with_cap(Some(tx), 8);
        output.push("ab");
        output.push("cd");
        output.push("efghij");
        output.flush_progress();
        let mut seen = String::new();
        while let Ok(chunk) = rx.try_recv() {
            seen.push_str(&chunk);
            output.flush_progress();
        }
        assert_eq!(seen, "abcdefgh");
    }
}
