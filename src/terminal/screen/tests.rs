//! The lazy screen against a parser given every byte, and snapshots read back by a parser.

use rand::{Rng, SeedableRng};

use super::*;

/// A parser like the screen's, given every byte at once.
fn eager(cols: u16, rows: u16, output: &[u8]) -> vt100::Parser {
    eager_with(cols, rows, history_for(cols), output)
}

fn eager_with(cols: u16, rows: u16, history: usize, output: &[u8]) -> vt100::Parser {
    let mut parser = vt100::Parser::new(nonzero(rows), nonzero(cols), history);
    parser.process(output);
    parser
}

/// The text of `parser`'s screen and every line of its history, as [`Screen::text`] gives it.
fn text_of(parser: &mut vt100::Parser, cols: u16) -> String {
    let history = parser.screen().scrollback_capacity();
    let mut screen = Screen::with_history(cols, parser.screen().size().0.get(), history);
    std::mem::swap(&mut screen.parser, parser);
    let text = screen.text(usize::MAX);
    std::mem::swap(&mut screen.parser, parser);
    text
}

/// What a client sees of a screen: its text with history, the cursor, the modes.
fn seen(parser: &mut vt100::Parser, cols: u16) -> (String, (u16, u16), [bool; 5]) {
    let text = text_of(parser, cols);
    let screen = parser.screen();
    let modes = [
        screen.alternate_screen(),
        screen.application_cursor(),
        screen.bracketed_paste(),
        screen.hide_cursor(),
        screen.application_keypad(),
    ];
    (text, screen.cursor_position(), modes)
}

/// The screen fed `output` in chunks of `chunk` bytes, as a terminal's reads come.
fn lazy(cols: u16, rows: u16, output: &[u8], chunk: usize) -> Screen {
    lazy_with(Screen::new(cols, rows), output, chunk)
}

fn lazy_with(mut screen: Screen, output: &[u8], chunk: usize) -> Screen {
    for part in output.chunks(chunk.max(1)) {
        screen.take(part);
    }
    screen
}

/// Both ways give the same screen, history and cursor; and the snapshot, read by a fresh parser,
/// shows the same.
fn check(cols: u16, rows: u16, output: &[u8], chunk: usize) -> Screen {
    let mut reference = eager(cols, rows, output);
    let mut screen = lazy(cols, rows, output, chunk);
    screen.catch_up();
    let wanted = seen(&mut reference, cols);
    assert_eq!(seen(&mut screen.parser, cols), wanted, "lazily parsed, chunks of {chunk}");
    let snapshot = screen.snapshot();
    let mut restored = eager(cols, rows, &snapshot);
    assert_eq!(seen(&mut restored, cols), wanted, "read back from the snapshot");
    screen
}

fn flood(lines: usize) -> Vec<u8> {
    (0..lines).flat_map(|n| format!("line {n} of the flood, some text to make it long\r\n").into_bytes()).collect()
}

#[test]
fn a_flood_is_scanned_not_parsed_and_leaves_the_same_screen() {
    let mut output = b"\x1b[?1h\x1b[?2004h\x1b[1;32mprompt$ \x1b[0m".to_vec();
    output.extend(flood(20_000));
    output.extend(b"\x1b[31mred\x1b[m tail\r\n$ ");
    let screen = check(80, 24, &output, 4095);
    // What was parsed: about the history and the screen, not the flood.
    let needed = (screen.forgetting() as u64) * 60;
    assert!(screen.parsed_bytes < needed, "{} of {} bytes parsed", screen.parsed_bytes, output.len());
    check(80, 24, &output, 16 << 10);
    check(80, 24, &output, 7);
}

#[test]
fn colours_of_skipped_lines_reach_the_lines_after_them() {
    let mut output = Vec::new();
    for n in 0..5000 {
        output.extend(format!("\x1b[3{}m{n} coloured\x1b[K\x1b[m\x1b[{}m\r\n", n % 8, 40 + n % 8).into_bytes());
    }
    output.extend(b"last");
    let mut screen = check(60, 20, &output, 4095);
    let reference = eager(60, 20, &output);
    let (row, col) = (reference.screen().cursor_position().0, 1);
    assert_eq!(screen.parser.screen().cell(row, col), reference.screen().cell(row, col));
    assert_eq!(screen.parser.screen().bgcolor(), reference.screen().bgcolor());
    assert!(screen.text(0).ends_with("last"));
}

#[test]
fn full_screen_programs_and_the_alternate_screen_come_back_whole() {
    let mut output = flood(300);
    output.extend(b"$ vim notes.txt\r\n\x1b[?1049h\x1b[?1h\x1b=\x1b[H\x1b[2J");
    for row in 1..24 {
        output.extend(format!("\x1b[{row};1H~ row {row}\x1b[K").into_bytes());
    }
    output.extend(b"\x1b[24;1H-- INSERT --\x1b[1;1Hhello");
    let mut screen = check(80, 24, &output, 1000);
    // Leaving the alternate screen shows the main screen as it was, in both.
    let mut reference = eager(80, 24, &output);
    let mut restored = eager(80, 24, &screen.snapshot());
    reference.process(b"\x1b[?1049l\x1b[?1l\x1b>");
    restored.process(b"\x1b[?1049l\x1b[?1l\x1b>");
    assert_eq!(seen(&mut restored, 80), seen(&mut reference, 80));
    assert!(text_of(&mut restored, 80).contains("$ vim notes.txt"));
}

#[test]
fn top_redrawing_over_itself_leaves_only_its_last_frame() {
    let mut output = b"\x1b[?1049h".to_vec();
    for frame in 0..200 {
        output.extend(b"\x1b[H");
        for row in 0..10 {
            output.extend(format!("frame {frame} row {row}\x1b[K\r\n").into_bytes());
        }
        output.extend(b"\x1b[J");
    }
    let mut screen = check(40, 12, &output, 333);
    let text = screen.text(0);
    assert!(text.contains("frame 199 row 9") && !text.contains("frame 198"), "{text}");
}

#[test]
fn scroll_regions_and_lines_cut_by_chunks_are_parsed() {
    // A status line under a scroll region, as tmux draws it, with a flood inside the region.
    let mut output = b"\x1b[24;1Hstatus line\x1b[1;23r\x1b[1;1H".to_vec();
    output.extend(flood(3000));
    output.extend(b"\x1b[r");
    output.extend(flood(100));
    check(80, 24, &output, 100);
    // A title and a cursor save that span the chunks.
    let mut output = b"\x1b]0;a title\r\nthat goes on\x07\x1b7".to_vec();
    output.extend(flood(2000));
    output.extend(b"\x1b8restored");
    check(80, 24, &output, 3);
}

#[test]
fn a_resize_keeps_what_came_before_and_narrows_the_history_of_wide_screens() {
    let mut screen = Screen::new(80, 24);
    screen.take(&flood(2000));
    screen.resize(100, 30);
    screen.take(b"after\r\n");
    assert_eq!(screen.size(), (100, 30));
    let text = screen.text(5);
    assert!(text.contains("line 1999 of the flood") && text.contains("after"), "{text}");
    screen.resize(1000, 30);
    assert_eq!(screen.history, history_for(1000));
    assert!(screen.text(usize::MAX).lines().count() <= history_for(1000) + 30);
    assert!(screen.text(0).contains("after"));
}

#[test]
fn a_line_without_end_longer_than_the_bound_is_parsed_as_it_comes() {
    let output = vec![b'x'; 3 * PENDING_BYTES];
    let mut screen = Screen::new(80, 24);
    for part in output.chunks(16 << 10) {
        screen.take(part);
        assert!(screen.pending.len() - screen.start <= PENDING_BYTES + (16 << 10));
    }
    assert!(screen.text(0).ends_with('x'));
}

/// Pieces of what programs write, joined at random and cut into random reads: the lazy screen (with
/// a short history, so that it skips often) always shows what a parser given every byte shows.
#[test]
fn random_output_looks_the_same_parsed_lazily_and_read_back() {
    const PIECES: &[&[u8]] = &[
        b"some text ",
        b"\r\n",
        b"\r\n",
        b"\r\n",
        b"\n",
        b"\x1b[31m",
        b"\x1b[1;44m",
        b"\x1b[m",
        b"\x1b[K",
        b"\x1b[2J",
        b"\x1b[H",
        b"\x1b[5;10H",
        b"\x1b[3A",
        b"\x1b[2;20r",
        b"\x1b[r",
        b"\x1b[?1049h",
        b"\x1b[?1049l",
        b"\x1b[?1h",
        b"\x1b[?25l",
        b"\x1b[?25h",
        b"\x1b]0;title\x07",
        b"\x1b7",
        b"\x1b8",
        b"\x1b[4h",
        b"\x1b[4l",
        b"\t",
        b"\x08",
        "wide 日本 ".as_bytes(),
        b"\x1b[",
        b"12",
        b";",
        b"\x1bc",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(38);
    let mut skipped = 0;
    for round in 0..16 {
        let mut output = Vec::new();
        for _ in 0..rng.random_range(100..800) {
            output.extend_from_slice(PIECES[rng.random_range(0..PIECES.len())]);
            if rng.random_bool(0.2) {
                output.extend(flood(rng.random_range(1..150)));
            }
        }
        let (cols, rows, history) = (rng.random_range(10..120), rng.random_range(2..40), rng.random_range(0..60));
        let chunk = rng.random_range(1..5000);
        let mut reference = eager_with(cols, rows, history, &output);
        let mut screen = lazy_with(Screen::with_history(cols, rows, history), &output, chunk);
        let wanted = seen(&mut reference, cols);
        screen.catch_up();
        assert_eq!(seen(&mut screen.parser, cols), wanted, "round {round}: {cols}x{rows}, chunks of {chunk}");
        skipped += output.len() as u64 - screen.parsed_bytes;
    }
    assert!(skipped > 100_000, "the rounds skipped {skipped} bytes");
}
