//! Which lines of a terminal's output its screen can forget unparsed (sans-IO).
//!
//! The agent keeps each terminal's screen in a VT parser ([`super::screen`]), which costs tens of
//! times more per byte than moving the bytes. During a flood nearly all of that output scrolls out
//! of the screen and its history before anyone looks, so the [`Scanner`] reads the output as it
//! arrives — cheaply, following the parser's own state machine without acting on it — and sorts
//! it into lines:
//!
//! - **quiet**: text and controls that do not move the cursor up (CR, LF, TAB, BS, …), colours
//!   (SGR) and erase-in-line, ending with CR LF;
//! - **forgettable**: besides those, cursor movement, erasing, inserting and deleting: sequences
//!   whose only effect is on what the screen shows, and on the cursor;
//! - **kept**: anything else — modes, the alternate screen, scroll regions, titles, a saved
//!   cursor, a sequence a line end cuts, any line while a scroll region is set.
//!
//! A forgettable line followed by at least `rows + history + 2` quiet lines leaves nothing behind
//! once those are parsed: they scroll every row it wrote out of the history, and each of them
//! starts at the first column. Only its colours outlive it, and [`sgr_sequences`] gives those
//! to the parser.

use std::collections::VecDeque;

/// What the screen keeps of a line (see the module's comment). Ordered: a line is the widest kind
/// of anything in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Quiet,
    Forgettable,
    Kept,
}

/// One line of output: its bytes up to and including `\n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Line {
    pub len: usize,
    pub kind: Kind,
    /// It holds an escape sequence (its colours must reach the parser even when it is skipped).
    pub escapes: bool,
}

/// The parser's state, as `vte` has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    EscapeIntermediate,
    CsiEntry,
    CsiParam,
    CsiIntermediate,
    CsiIgnore,
    DcsEntry,
    DcsParam,
    DcsIntermediate,
    DcsIgnore,
    DcsPassthrough,
    OscString,
    SosPmApcString,
}

/// Parameters kept of one control sequence: enough for scroll regions and screen modes.
const MAX_PARAMS: usize = 8;

/// The control sequence being read.
#[derive(Clone, Copy, Debug, Default)]
struct Csi {
    /// `?`, `>`, `<` or `=` right after `CSI`, else 0.
    private: u8,
    params: [u16; MAX_PARAMS],
    count: usize,
    /// More parameters than kept.
    overflow: bool,
    /// Offset of its `ESC` in the output.
    start: u64,
}

impl Csi {
    fn digit(&mut self, digit: u8) {
        if self.count == 0 {
            self.count = 1;
        }
        if let Some(param) = self.params.get_mut(self.count - 1) {
            *param = param.saturating_mul(10).saturating_add(u16::from(digit - b'0'));
        }
    }

    fn next_param(&mut self) {
        if self.count == 0 {
            self.count = 1;
        }
        if self.count < MAX_PARAMS {
            self.count += 1;
        } else {
            self.overflow = true;
        }
    }

    fn param(&self, index: usize) -> u16 {
        if index < self.count {
            self.params[index]
        } else {
            0
        }
    }

    fn params(&self) -> &[u16] {
        &self.params[..self.count.min(MAX_PARAMS)]
    }
}

/// Reads a terminal's output and sorts it into [`Line`]s, keeping the state it needs across reads.
#[derive(Clone, Debug)]
pub(super) struct Scanner {
    state: State,
    csi: Csi,
    /// Between `CSI` and its final byte: an intermediate byte was seen (`CSI … SP q`).
    csi_intermediate: bool,
    rows: u16,
    /// The alternate screen is shown.
    alternate: bool,
    /// A scroll region is set, on the main screen and on the alternate screen.
    region: [bool; 2],
    /// The line being read.
    open: Line,
    /// Output read so far: the offset of the next byte.
    offset: u64,
    /// The last byte read.
    previous: u8,
}

impl Scanner {
    /// A scanner for a fresh terminal of `rows` rows.
    pub fn new(rows: u16) -> Self {
        Scanner {
            state: State::Ground,
            csi: Csi::default(),
            csi_intermediate: false,
            rows: rows.max(1),
            alternate: false,
            region: [false; 2],
            open: Line { len: 0, kind: Kind::Quiet, escapes: false },
            offset: 0,
            previous: 0,
        }
    }

    /// The terminal now has `rows` rows; a resize also ends any scroll region.
    pub fn resize(&mut self, rows: u16) {
        self.rows = rows.max(1);
        self.region = [false; 2];
    }

    /// The line being read (not yet ended by `\n`).
    #[cfg(test)]
    pub fn open_line(&self) -> Line {
        self.open
    }

    /// The open line was given to the parser as it is: what follows starts a new one.
    pub fn close_open_line(&mut self) {
        self.open = self.fresh_line();
    }

    fn fresh_line(&self) -> Line {
        let kind = if self.state == State::Ground { Kind::Quiet } else { Kind::Kept };
        Line { len: 0, kind, escapes: false }
    }

    /// Reads `bytes`, the output following what was read before: each line they end goes to
    /// `lines`, and the offset of each `ESC` that switches to the alternate screen to `alternates`.
    pub fn scan(&mut self, bytes: &[u8], lines: &mut VecDeque<Line>, alternates: &mut VecDeque<u64>) {
        let mut at = 0;
        while at < bytes.len() {
            if self.state == State::Ground {
                let rest = &bytes[at..];
                let Some(found) = memchr::memchr2(0x1b, b'\n', rest) else {
                    self.open.len += rest.len();
                    self.previous = rest[rest.len() - 1];
                    break;
                };
                self.open.len += found + 1;
                at += found + 1;
                if rest[found] == b'\n' {
                    let before = if found > 0 { rest[found - 1] } else { self.previous };
                    self.end_line(lines, before == b'\r');
                } else {
                    self.open.escapes = true;
                    self.state = State::Escape;
                    self.csi = Csi { start: self.offset + at as u64 - 1, ..Csi::default() };
                }
                self.previous = rest[found];
                continue;
            }
            let byte = bytes[at];
            self.open.len += 1;
            at += 1;
            self.step(byte, self.offset + at as u64 - 1, alternates);
            self.previous = byte;
            if byte == b'\n' {
                // A line end inside a sequence: the parser carries it out and goes on with the sequence.
                self.open.kind = Kind::Kept;
                self.end_line(lines, false);
            }
        }
        self.offset += bytes.len() as u64;
    }

    fn end_line(&mut self, lines: &mut VecDeque<Line>, crlf: bool) {
        let mut line = self.open;
        if self.state != State::Ground || self.region[usize::from(self.alternate)] {
            line.kind = Kind::Kept;
        }
        if line.kind == Kind::Quiet && !crlf {
            // It ends where it may leave the cursor past the first column.
            line.kind = Kind::Forgettable;
        }
        lines.push_back(line);
        self.open = self.fresh_line();
    }

    fn keep(&mut self) {
        self.open.kind = Kind::Kept;
    }

    fn widen(&mut self, kind: Kind) {
        self.open.kind = self.open.kind.max(kind);
    }

    /// One byte outside the ground state, as `vte` moves through its states.
    fn step(&mut self, byte: u8, offset: u64, alternates: &mut VecDeque<u64>) {
        // Anywhere: CAN and SUB end any sequence; ESC starts a new one.
        match (byte, self.state) {
            (0x18 | 0x1a, _) => {
                self.keep();
                self.state = State::Ground;
                return;
            }
            (0x1b, _) => {
                self.keep();
                self.open.escapes = true;
                self.state = State::Escape;
                self.csi = Csi { start: offset, ..Csi::default() };
                return;
            }
            _ => {}
        }
        match self.state {
            State::Ground => {}
            State::Escape => self.escape(byte),
            State::EscapeIntermediate => {
                if (0x30..=0x7e).contains(&byte) {
                    self.state = State::Ground;
                }
            }
            State::CsiEntry => match byte {
                0x20..=0x2f => {
                    self.csi_intermediate = true;
                    self.state = State::CsiIntermediate;
                }
                b'0'..=b'9' => {
                    self.csi.digit(byte);
                    self.state = State::CsiParam;
                }
                b':' | b';' => {
                    self.csi.next_param();
                    self.state = State::CsiParam;
                }
                0x3c..=0x3f => {
                    self.csi.private = byte;
                    self.state = State::CsiParam;
                }
                0x40..=0x7e => self.dispatch(byte, alternates),
                _ => {}
            },
            State::CsiParam => match byte {
                0x20..=0x2f => {
                    self.csi_intermediate = true;
                    self.state = State::CsiIntermediate;
                }
                b'0'..=b'9' => self.csi.digit(byte),
                // A sub-parameter (`38:2:…`) counts as a parameter here: only colours use them.
                b':' | b';' => self.csi.next_param(),
                0x3c..=0x3f => self.state = State::CsiIgnore,
                0x40..=0x7e => self.dispatch(byte, alternates),
                _ => {}
            },
            State::CsiIntermediate => match byte {
                0x30..=0x3f => self.state = State::CsiIgnore,
                0x40..=0x7e => self.dispatch(byte, alternates),
                _ => {}
            },
            State::CsiIgnore => {
                if (0x40..=0x7e).contains(&byte) {
                    self.keep();
                    self.state = State::Ground;
                }
            }
            State::DcsEntry => match byte {
                0x20..=0x2f => self.state = State::DcsIntermediate,
                0x30..=0x3f => self.state = State::DcsParam,
                0x40..=0x7e => self.state = State::DcsPassthrough,
                _ => {}
            },
            State::DcsParam => match byte {
                0x20..=0x2f => self.state = State::DcsIntermediate,
                0x3c..=0x3f => self.state = State::DcsIgnore,
                0x40..=0x7e => self.state = State::DcsPassthrough,
                _ => {}
            },
            State::DcsIntermediate => match byte {
                0x30..=0x3f => self.state = State::DcsIgnore,
                0x40..=0x7e => self.state = State::DcsPassthrough,
                _ => {}
            },
            State::DcsPassthrough => {
                if byte == 0x9c {
                    self.state = State::Ground;
                }
            }
            State::OscString => {
                if byte == 0x07 {
                    self.state = State::Ground;
                }
            }
            State::DcsIgnore | State::SosPmApcString => {}
        }
    }

    /// The byte after `ESC`.
    fn escape(&mut self, byte: u8) {
        self.state = match byte {
            0x20..=0x2f => {
                self.keep();
                State::EscapeIntermediate
            }
            b'[' => {
                self.csi_intermediate = false;
                State::CsiEntry
            }
            b'P' => {
                self.keep();
                State::DcsEntry
            }
            b']' => {
                self.keep();
                State::OscString
            }
            b'X' | b'^' | b'_' => {
                self.keep();
                State::SosPmApcString
            }
            b'c' => {
                // A full reset: the main screen, no scroll region.
                self.keep();
                self.alternate = false;
                self.region = [false; 2];
                State::Ground
            }
            0x30..=0x7e => {
                self.keep();
                State::Ground
            }
            // Controls are carried out inside the sequence; anything else is ignored.
            _ => State::Escape,
        };
    }

    /// A complete control sequence ending in `last`.
    fn dispatch(&mut self, last: u8, alternates: &mut VecDeque<u64>) {
        self.state = State::Ground;
        if self.csi_intermediate {
            return self.keep();
        }
        match (self.csi.private, last) {
            (0, b'm' | b'K') => {}
            (
                0,
                b'A' | b'B' | b'C' | b'D' | b'E' | b'F' | b'G' | b'H' | b'J' | b'L' | b'M' | b'P' | b'S' | b'T' | b'X'
                | b'@' | b'a' | b'b' | b'd' | b'e' | b'f' | b'`',
            ) => self.widen(Kind::Forgettable),
            (0, b'r') => {
                self.keep();
                self.region[usize::from(self.alternate)] = self.sets_region();
            }
            (b'?', b'h' | b'l') => {
                self.keep();
                if self.csi.overflow {
                    // Modes the scanner did not keep: no line counts as quiet until a reset.
                    self.region = [true; 2];
                }
                let on = last == b'h';
                for mode in self.csi.params() {
                    if !matches!(mode, 47 | 1047 | 1049) {
                        continue;
                    }
                    if on && !self.alternate {
                        alternates.push_back(self.csi.start);
                    }
                    if on && *mode == 1049 {
                        // The alternate screen is cleared, its scroll region with it.
                        self.region[1] = false;
                    }
                    self.alternate = on;
                }
            }
            _ => self.keep(),
        }
    }

    /// Whether the scroll region (`CSI top ; bottom r`) just read is less than the whole screen,
    /// as the parser sets it.
    fn sets_region(&self) -> bool {
        let rows = self.rows;
        let top = self.csi.param(0).max(1);
        let bottom = match self.csi.param(1) {
            0 => rows,
            bottom => bottom.min(rows),
        };
        top < bottom && (top > 1 || bottom < rows)
    }
}

/// The colour sequences (`CSI … m`) of a forgettable line, in order: all it leaves behind. The line
/// starts in the ground state, as every forgettable line does.
pub(super) fn sgr_sequences(line: &[u8]) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut rest = line;
    while let Some(escape) = memchr::memchr(0x1b, rest) {
        rest = &rest[escape..];
        let Some(body) = rest.get(2..).filter(|_| rest.get(1) == Some(&b'[')) else {
            rest = &rest[1..];
            continue;
        };
        let Some(end) = body.iter().position(|byte| (0x40..=0x7e).contains(byte)) else { break };
        if body[end] == b'm' {
            kept.extend_from_slice(&rest[..end + 3]);
        }
        rest = &rest[end + 3..];
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(rows: u16, output: &[u8]) -> (Vec<Line>, Vec<u64>, Line) {
        let mut scanner = Scanner::new(rows);
        let (mut lines, mut alternates) = (VecDeque::new(), VecDeque::new());
        // Byte by byte and all at once read the same.
        let mut split = scanner.clone();
        let (mut split_lines, mut split_alternates) = (VecDeque::new(), VecDeque::new());
        for byte in output {
            split.scan(std::slice::from_ref(byte), &mut split_lines, &mut split_alternates);
        }
        scanner.scan(output, &mut lines, &mut alternates);
        assert_eq!(lines, split_lines, "{:?}", String::from_utf8_lossy(output));
        assert_eq!(alternates, split_alternates);
        (lines.into(), alternates.into(), scanner.open_line())
    }

    fn kinds(output: &[u8]) -> Vec<Kind> {
        lines_of(24, output).0.iter().map(|line| line.kind).collect()
    }

    #[test]
    fn text_colours_and_erasing_in_a_line_are_quiet() {
        use Kind::*;
        assert_eq!(kinds(b"hello\r\n\x1b[31mred\x1b[0m\x1b[K\r\n\ttab\x08\x07\r\n"), [Quiet, Quiet, Quiet]);
        assert_eq!(kinds(b"\x1b[38:2:1:2:3mtrue colour\x1b[m\r\n"), [Quiet]);
        // Wide text and invalid UTF-8 are text too.
        assert_eq!(kinds("日本語 \u{1f600}\r\n".as_bytes()), [Quiet]);
        assert_eq!(kinds(b"\xff\x9c\x9b\r\n"), [Quiet]);
    }

    #[test]
    fn cursor_movement_is_forgettable_and_a_bare_line_feed_too() {
        use Kind::*;
        assert_eq!(kinds(b"\x1b[H\x1b[2Jtop\r\n\x1b[5;1Hrow\x1b[3A\r\n"), [Forgettable, Forgettable]);
        assert_eq!(kinds(b"raw\n"), [Forgettable]);
        let (lines, _, _) = lines_of(24, b"a\r\n\r\n");
        assert_eq!(lines.iter().map(|line| line.len).collect::<Vec<_>>(), [3, 2]);
    }

    #[test]
    fn modes_titles_saved_cursors_and_cut_sequences_are_kept() {
        use Kind::*;
        assert_eq!(kinds(b"\x1b[?25lhidden\r\n"), [Kept]);
        assert_eq!(kinds(b"\x1b]0;title\x07text\r\n"), [Kept]);
        assert_eq!(kinds(b"\x1b7saved\x1b8\r\n"), [Kept]);
        assert_eq!(kinds(b"\x1b[s\r\n\x1b[4h\r\n\x1b[6n\r\n\x1b[c\r\n\x1b[>c\r\n"), [Kept; 5]);
        assert_eq!(kinds(b"\x1b(B\r\n"), [Kept]);
        assert_eq!(kinds(b"\x1b[1;\r\n2Hx\r\nafter\r\n"), [Kept, Kept, Quiet]);
        // A title cut by a line end swallows lines until its end.
        assert_eq!(kinds(b"\x1b]0;a\r\nb\r\n\x07c\r\nd\r\n"), [Kept, Kept, Kept, Quiet]);
        assert_eq!(kinds(b"\x1bPq#0\r\n\x1b\\ok\r\n"), [Kept, Kept]);
        // CAN ends a sequence at once.
        assert_eq!(kinds(b"\x1b[1\x18x\r\ny\r\n"), [Kept, Quiet]);
        let (lines, _, open) = lines_of(24, b"done\r\n\x1b]0;ti");
        assert_eq!(lines.len(), 1);
        assert_eq!((open.len, open.kind), (6, Kept));
    }

    #[test]
    fn a_scroll_region_keeps_every_line_until_it_ends() {
        use Kind::*;
        let output = b"\x1b[2;20r\r\nin\r\n\x1b[r\r\nout\r\n\x1b[1;24r\r\nfull\r\n\x1b[1;23r\r\nin\r\n\x1b[0;0r\r\n";
        assert_eq!(kinds(output), [Kept, Kept, Kept, Quiet, Kept, Quiet, Kept, Kept, Kept]);
        // The alternate screen has its own, cleared when 1049 enters it; a reset ends both.
        let output = b"\x1b[3;9r\r\n\x1b[?1049h\r\nalt\r\n\x1b[?1049l\r\nmain\r\n\x1bc\r\nreset\r\n";
        assert_eq!(kinds(output), [Kept, Kept, Quiet, Kept, Kept, Kept, Quiet]);
        let mut scanner = Scanner::new(24);
        let (mut lines, mut alternates) = (VecDeque::new(), VecDeque::new());
        scanner.scan(b"\x1b[3;9r\r\n", &mut lines, &mut alternates);
        scanner.resize(30);
        scanner.scan(b"resized\r\n", &mut lines, &mut alternates);
        assert_eq!(lines.back().unwrap().kind, Quiet);
    }

    #[test]
    fn entering_the_alternate_screen_is_found_where_its_escape_starts() {
        let output = b"ab\x1b[?1049hvim\x1b[?1049l\x1b[?1;47h\x1b[?47h\x1b[?1047l";
        let (_, alternates, _) = lines_of(24, output);
        assert_eq!(alternates, [2, 21]);
    }

    #[test]
    fn the_colours_of_a_line_are_its_sgr_sequences() {
        let line = b"\x1b[1;31mred\x1b[Kx\x1b[2;3Hy\x1b[0mz\x1b\r\n";
        assert_eq!(sgr_sequences(line), b"\x1b[1;31m\x1b[0m");
        assert_eq!(sgr_sequences(b"plain\r\n"), b"");
    }
}
