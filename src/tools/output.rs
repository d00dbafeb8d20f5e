//! Output of a running program: ANSI escapes stripped as the bytes stream in, the text capped at
//! [`OUTPUT_CAP`] — the first half and the last half kept, with a line saying how much was left
//! out between (the error at the end of a long build log is what matters most) — and progress
//! chunks forwarded without ever blocking the reader.

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

/// Text collected from a program, bounded in memory whatever it prints: the first `cap / 2`
/// bytes and a rolling window of the last `cap / 2`.
pub(crate) struct Output {
    head: String,
    head_cap: usize,
    /// Set once a byte went past the head: from then on everything goes to the tail.
    head_full: bool,
    /// Everything after the head, cut back to its last `tail_cap` bytes whenever it doubles.
    tail: String,
    tail_cap: usize,
    /// Bytes pushed in all.
    total: usize,
    progress: Option<mpsc::Sender<String>>,
    /// Progress not yet accepted by a full channel; sent with the next chunk.
    pending: String,
    /// Progress bytes accepted so far (pending included); never more than `cap`.
    progress_budget_used: usize,
    cap: usize,
}

impl Output {
    pub fn new(progress: Option<mpsc::Sender<String>>) -> Self {
        Self::with_cap(progress, OUTPUT_CAP)
    }

    pub fn with_cap(progress: Option<mpsc::Sender<String>>, cap: usize) -> Self {
        let head_cap = cap / 2;
        Output {
            head: String::new(),
            head_cap,
            head_full: false,
            tail: String::new(),
            tail_cap: cap - head_cap,
            total: 0,
            progress,
            pending: String::new(),
            progress_budget_used: 0,
            cap,
        }
    }

    /// Adds text: kept in the head or the tail, forwarded as progress.
    pub fn push(&mut self, chunk: &str) {
        if chunk.is_empty() {
            return;
        }
        self.total += chunk.len();
        let mut rest = chunk;
        if !self.head_full {
            let part = prefix(chunk, self.head_cap - self.head.len());
            self.head.push_str(part);
            rest = &chunk[part.len()..];
            self.head_full = !rest.is_empty();
        }
        if !rest.is_empty() {
            if rest.len() >= self.tail_cap {
                self.tail.clear();
                self.tail.push_str(suffix(rest, self.tail_cap));
            } else {
                self.tail.push_str(rest);
                if self.tail.len() > 2 * self.tail_cap {
                    self.tail = suffix(&self.tail, self.tail_cap).to_owned();
                }
            }
        }
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

    /// The tail as it will be kept.
    fn kept_tail(&self) -> &str {
        suffix(&self.tail, self.tail_cap)
    }

    /// Bytes between the head and the kept tail that are not kept.
    pub fn omitted(&self) -> usize {
        self.total - self.head.len() - self.kept_tail().len()
    }

    /// The last [`TAIL_LEN`] bytes or so of everything pushed.
    pub fn tail(&self) -> &str {
        if self.tail.is_empty() {
            suffix(&self.head, TAIL_LEN)
        } else {
            suffix(&self.tail, TAIL_LEN)
        }
    }

    /// The text kept, as [`Output::into_text`] gives it.
    pub fn text(&self) -> String {
        let mut copy = String::with_capacity(self.head.len() + self.tail.len());
        copy.push_str(&self.head);
        Self::finish(copy, self.omitted(), self.kept_tail()).0
    }

    /// The text kept: the head, then (when something was left out) a line saying how much, then
    /// the tail; and the number of bytes left out.
    pub fn into_text(self) -> (String, usize) {
        let omitted = self.omitted();
        let tail = suffix(&self.tail, self.tail_cap);
        Self::finish(self.head, omitted, tail)
    }

    fn finish(mut text: String, omitted: usize, tail: &str) -> (String, usize) {
        if omitted > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&omitted_line(omitted));
        }
        text.push_str(tail);
        (text, omitted)
    }
}

/// The line that stands for the output left out: `[… 1234567 bytes left out …]`.
pub(crate) fn omitted_line(bytes: usize) -> String {
    format!("[\u{2026} {bytes} bytes left out \u{2026}]\n")
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
    fn output_keeps_the_head_and_the_tail_on_char_boundaries_and_counts_the_middle() {
        let mut output = Output::with_cap(None, 10);
        output.push("abcd");
        output.push("\u{e9}\u{e9}");
        assert_eq!(output.omitted(), 0);
        output.push(&"x".repeat(10_000));
        output.push("end");
        assert!(output.tail().ends_with("xxend"));
        assert!(output.tail().len() <= TAIL_LEN);
        let total = 4 + 4 + 10_000 + 3;
        let (text, omitted) = output.into_text();
        // "abcd" fills the five-byte head as far as whole characters go; the rest goes to the tail side.
        assert_eq!(text, format!("abcd\n{}xxend", omitted_line(omitted)));
        assert_eq!(omitted, total - 4 - 5);
        let mut short = Output::with_cap(None, 10);
        short.push("abcdefghij");
        assert_eq!(short.into_text(), ("abcdefghij".to_owned(), 0));
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
