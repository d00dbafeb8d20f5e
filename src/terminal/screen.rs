//! One terminal's screen as a terminal emulator shows it: its output run through a VT parser
//! (`vt100`), for the snapshot a client gets when it attaches (docs/PROTOCOL.md, "Terminal
//! sessions") and for `term_screen`.
//!
//! Parsing costs far more per byte than carrying the output to the phone, so the screen parses
//! lazily and skips what it may forget: the output waits, sorted into lines by the [`Scanner`],
//! until it is either needed (a snapshot, `term_screen`, a resize) or known to matter. A line that
//! the following `rows + history + 2` quiet lines will scroll out of the history is never parsed
//! at all (only its colours are), so a flood costs a scan for line ends, not a parse. Every byte
//! the screen does need is parsed once.

use std::collections::VecDeque;
use std::num::NonZeroU16;
use std::time::{Duration, Instant};

use super::scan::{self, Kind, Line, Scanner};

/// Lines above the screen the parser keeps, at most (fewer on wide terminals: [`HISTORY_CELLS`]).
pub(super) const SCREEN_HISTORY: usize = 1000;
/// Cells of history one terminal keeps at most: 128 Ki cells of 32 bytes each.
const HISTORY_CELLS: usize = 128 << 10;
/// Output held unparsed at most, besides what the screen may still forget.
const PENDING_BYTES: usize = 256 << 10;
/// Most bytes of history rows one snapshot carries; older rows are left out.
const SNAPSHOT_HISTORY: usize = 1 << 20;
/// Shortest time between two copies of the main screen, taken when a program opens the alternate
/// screen (a program that switches faster leaves the main screen out of the snapshot).
const KEEP_MAIN_EVERY: Duration = Duration::from_millis(200);

/// How to start a terminal in the state of another: a full reset (RIS).
const RESET: &str = "\x1bc";
/// Switch to the alternate screen, saving the cursor (what `vim` and `less` send).
const ALTERNATE: &str = "\x1b[?1049h";

/// The screen of one terminal.
pub(super) struct Screen {
    parser: vt100::Parser,
    /// Lines of history the parser keeps.
    history: usize,
    cols: u16,
    rows: u16,
    scanner: Scanner,
    /// Output not yet parsed: `pending[start..]`, beginning at output offset `parsed`.
    pending: Vec<u8>,
    start: usize,
    parsed: u64,
    /// The complete lines of the pending output, in order, numbered from `first_line`; the
    /// scanner's open line follows them.
    lines: VecDeque<Line>,
    first_line: u64,
    /// The numbers of the lines in `lines` that are not quiet.
    loud: VecDeque<u64>,
    /// Offsets of the pending `ESC`s that open the alternate screen.
    alternates: VecDeque<u64>,
    /// The main screen as it was when the alternate screen opened, while it is open.
    main: Option<Box<vt100::Screen>>,
    kept_main_at: Option<Instant>,
    /// Bytes given to the parser so far (colours of skipped lines aside).
    parsed_bytes: u64,
}

fn nonzero(value: u16) -> NonZeroU16 {
    NonZeroU16::new(value).unwrap_or(NonZeroU16::MIN)
}

/// Lines of history a terminal `cols` wide keeps.
fn history_for(cols: u16) -> usize {
    (HISTORY_CELLS / usize::from(cols.max(1))).min(SCREEN_HISTORY)
}

impl Screen {
    /// The blank screen of a terminal of `cols` × `rows`.
    pub fn new(cols: u16, rows: u16) -> Self {
        Self::with_history(cols, rows, history_for(cols))
    }

    /// A blank screen that keeps `history` lines above it.
    fn with_history(cols: u16, rows: u16, history: usize) -> Self {
        Screen {
            parser: vt100::Parser::new(nonzero(rows), nonzero(cols), history),
            history,
            cols: cols.max(1),
            rows: rows.max(1),
            scanner: Scanner::new(rows),
            pending: Vec::new(),
            start: 0,
            parsed: 0,
            lines: VecDeque::new(),
            first_line: 0,
            loud: VecDeque::new(),
            alternates: VecDeque::new(),
            main: None,
            kept_main_at: None,
            parsed_bytes: 0,
        }
    }

    /// Quiet lines after a line that make it forgettable.
    fn forgetting(&self) -> usize {
        usize::from(self.rows) + self.history + 2
    }

    /// The terminal's next output.
    pub fn take(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let known = self.lines.len();
        self.scanner.scan(bytes, &mut self.lines, &mut self.alternates);
        for (index, line) in self.lines.iter().enumerate().skip(known) {
            if line.kind != Kind::Quiet {
                self.loud.push_back(self.first_line + index as u64);
            }
        }
        self.pending.extend_from_slice(bytes);
        self.settle(false);
        if self.lines.is_empty() && self.pending.len() - self.start > PENDING_BYTES {
            // One line longer than the bound, still open: parsed as far as it has come.
            self.parse_open_line();
        }
        if self.start >= PENDING_BYTES && self.start * 2 >= self.pending.len() {
            self.pending.drain(..self.start);
            self.start = 0;
        }
    }

    /// Parses or skips pending lines from the oldest: each one the screen may forget is skipped,
    /// each one it cannot is parsed; with `all`, every complete line goes (parsed unless it may be
    /// forgotten), else only while a line's fate is known or the pending output is over its bound.
    fn settle(&mut self, all: bool) {
        while let Some(&line) = self.lines.front() {
            let over = self.pending.len() - self.start > PENDING_BYTES;
            match self.fate() {
                Fate::Forget => self.skip_line(line),
                Fate::Keep => self.parse_line(line),
                Fate::Unknown if all || over => self.parse_line(line),
                Fate::Unknown => break,
            }
        }
    }

    /// What becomes of the oldest pending line.
    fn fate(&self) -> Fate {
        let Some(line) = self.lines.front() else { return Fate::Unknown };
        if line.kind == Kind::Kept {
            return Fate::Keep;
        }
        let front = self.first_line;
        let next_loud = self.loud.iter().copied().find(|&number| number > front);
        let reach = front + self.forgetting() as u64;
        match next_loud {
            Some(number) if number <= reach => Fate::Keep,
            _ if self.lines.len() as u64 > reach - front => Fate::Forget,
            _ => Fate::Unknown,
        }
    }

    fn skip_line(&mut self, line: Line) {
        if line.escapes {
            let colours = scan::sgr_sequences(&self.pending[self.start..self.start + line.len]);
            self.parser.process(&colours);
        }
        self.drop_line(line);
    }

    fn parse_line(&mut self, line: Line) {
        self.parse(line.len);
        self.drop_line(line);
    }

    fn drop_line(&mut self, line: Line) {
        self.start += line.len;
        self.parsed += line.len as u64;
        self.lines.pop_front();
        self.first_line += 1;
        while self.loud.front().is_some_and(|&number| number < self.first_line) {
            self.loud.pop_front();
        }
    }

    /// Parses the open line as far as it has come; what follows starts a new line.
    fn parse_open_line(&mut self) {
        let len = self.pending.len() - self.start;
        self.parse(len);
        self.start += len;
        self.parsed += len as u64;
        self.scanner.close_open_line();
    }

    /// Parses the next `len` pending bytes (without consuming them), keeping a copy of the main
    /// screen where a program opens the alternate one.
    fn parse(&mut self, len: usize) {
        let end = self.parsed + len as u64;
        let mut at = self.start;
        while let Some(&opening) = self.alternates.front().filter(|&&opening| opening < end) {
            self.alternates.pop_front();
            let until = self.start + (opening.saturating_sub(self.parsed)) as usize;
            if until > at {
                self.parser.process(&self.pending[at..until]);
                at = until;
            }
            self.keep_main();
        }
        self.parser.process(&self.pending[at..self.start + len]);
        self.parsed_bytes += len as u64;
        if !self.parser.screen().alternate_screen() {
            self.main = None;
        }
    }

    fn keep_main(&mut self) {
        if self.parser.screen().alternate_screen() {
            return;
        }
        let due = self.kept_main_at.is_none_or(|at| at.elapsed() >= KEEP_MAIN_EVERY);
        self.main = due.then(|| Box::new(self.parser.screen().clone()));
        if due {
            self.kept_main_at = Some(Instant::now());
        }
    }

    /// Parses every pending byte (skipping what the screen may forget).
    fn catch_up(&mut self) {
        self.settle(true);
        self.parse_open_line();
        self.pending.clear();
        self.start = 0;
    }

    /// The terminal became `cols` × `rows`: what came before is parsed at the old size.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        let (cols, rows) = (cols.max(1), rows.max(1));
        if (cols, rows) == (self.cols, self.rows) {
            return;
        }
        self.catch_up();
        self.parser.set_size(nonzero(rows), nonzero(cols));
        if let Some(main) = &mut self.main {
            main.set_size(nonzero(rows), nonzero(cols));
        }
        self.scanner.resize(rows);
        (self.cols, self.rows) = (cols, rows);
        if history_for(cols) < self.history {
            // Wider: fewer lines of history, so that the cells it holds stay bounded.
            let snapshot = self.snapshot();
            self.history = history_for(cols);
            self.parser = vt100::Parser::new(nonzero(rows), nonzero(cols), self.history);
            self.parser.process(&snapshot);
        }
    }

    /// Bytes that, written to a terminal emulator of this size, reproduce the screen: a reset,
    /// the history, the main screen, the alternate screen when it is open, then the cursor,
    /// colours and input modes (cursor keys, keypad, bracketed paste, mouse).
    pub fn snapshot(&mut self) -> Vec<u8> {
        self.catch_up();
        let (cols, rows) = (self.cols, self.rows);
        let mut out = String::from(RESET);
        let alternate = self.parser.screen().alternate_screen();
        if alternate {
            if let Some(main) = &mut self.main {
                write_main(&mut out, main, cols, rows);
            }
            out.push_str(ALTERNATE);
            out.push_str(&self.parser.screen().contents_formatted());
        } else {
            write_main(&mut out, self.parser.screen_mut(), cols, rows);
        }
        out.push_str(&self.parser.screen().input_mode_formatted());
        out.into_bytes()
    }

    /// The screen as text, with up to `history` lines above it; trailing blanks trimmed.
    pub fn text(&mut self, history: usize) -> String {
        self.catch_up();
        let cols = self.cols;
        let screen = self.parser.screen_mut();
        screen.set_scrollback(usize::MAX);
        let above = screen.scrollback().min(history);
        let mut lines: Vec<String> = Vec::new();
        for back in (1..=above).rev() {
            screen.set_scrollback(back);
            lines.extend(screen.rows(0, cols).next());
        }
        screen.set_scrollback(0);
        lines.extend(screen.rows(0, cols));
        let mut lines: Vec<&str> = lines.iter().map(|line| line.trim_end()).collect();
        while lines.last().is_some_and(|line| line.is_empty()) {
            lines.pop();
        }
        lines.join("\n")
    }

    /// The size the screen has.
    pub fn size(&self) -> (u16, u16) {
        (self.cols, self.rows)
    }
}

/// What becomes of a pending line.
enum Fate {
    /// The lines after it scroll it out of the history: it is never parsed.
    Forget,
    /// It matters: parsed.
    Keep,
    /// Not yet known: the lines after it have not all come.
    Unknown,
}

/// The history rows of `screen` (the newest that fit in [`SNAPSHOT_HISTORY`]), pushed above the
/// screen, then its rows and cursor.
fn write_main(out: &mut String, screen: &mut vt100::Screen, cols: u16, rows: u16) {
    screen.set_scrollback(usize::MAX);
    let above = screen.scrollback();
    let mut history: Vec<String> = Vec::new();
    let mut size = 0;
    for back in 1..=above {
        screen.set_scrollback(back);
        let row = screen.rows_formatted(0, cols).next().unwrap_or_default();
        size += row.len();
        if size > SNAPSHOT_HISTORY {
            break;
        }
        history.push(row);
    }
    screen.set_scrollback(0);
    for row in history.iter().rev() {
        out.push_str(row);
        out.push_str("\x1b[m\r\n");
    }
    if !history.is_empty() {
        // The last rows written scroll up into the emulator's history, leaving the screen blank.
        for _ in 1..rows {
            out.push('\n');
        }
    }
    out.push_str(&screen.contents_formatted());
}

#[cfg(test)]
mod tests;
