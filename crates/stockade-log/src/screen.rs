//! Model views of terminal output: what a PTY session printed, without the escape codes.
//!
//! A PTY log holds what the program sent to a terminal: colours, cursor moves, `\r\n` line ends,
//! redraws. The spool keeps those bytes exactly; a model gets one of two text views:
//!
//! * [`strip_ansi`] — the default for PTY sessions: the text of the stream with every escape
//!   sequence removed and carriage returns applied to the current line (so `\r\n` is a line end
//!   and a progress bar's `10%\r20%\r30%` is `30%`). Right for line-oriented programs: shells,
//!   REPLs, build tools. Built on `vte`'s parser (the one `vt100` uses, so one copy of it in the
//!   build) with a small line model, rather than `strip-ansi-escapes`, which keeps every `\r`.
//! * [`render_screen`] — for `render: "screen"` on full-screen programs (`top`, `less`, editors,
//!   TUIs): the bytes are replayed into an in-memory terminal (`vt100`) of the session's size and
//!   the screen the user would be looking at is returned as text. [`OutputLog::render_screen`]
//!   feeds it the newest [`SCREEN_TAIL_BYTES`] of the log (read from the spool): a full-screen
//!   program redraws often, so the tail holds the current screen; state set up before the tail
//!   (a scroll region, say) can be missed, which is the price of memory not growing with output.
//!
//! Both are pure functions over bytes; the session layer picks one per read.

use stockade_proto::rpc::PtySize;
use stockade_proto::{OutputView, Stream};

use super::{OutputError, OutputLog};

/// At most this many of the newest bytes of a log are replayed for a screen render.
pub(crate) const SCREEN_TAIL_BYTES: usize = 1024 * 1024;
/// Largest screen rendered (rows); larger sizes are clamped.
pub(crate) const MAX_SCREEN_ROWS: u16 = 500;
/// Largest screen rendered (columns); larger sizes are clamped.
pub(crate) const MAX_SCREEN_COLS: u16 = 1000;

/// The text of terminal output: escape sequences (CSI, OSC, DCS, …) removed, `\r` returning to
/// the start of the current line (later text overwrites it, as on a terminal), backspace moving
/// back one column, `ESC [ K` erasing to the end of the line, other C0 control characters shown
/// as visible escapes (`\x00`; tab and newline kept). `\r\n` therefore reads as `\n`. Views
/// already spell invalid UTF-8 as `\xNN` ([`OutputLog::read`]); here it would become U+FFFD.
pub fn strip_ansi(bytes: &[u8]) -> String {
    let mut text = StripText::default();
    let mut parser = vte::Parser::new();
    parser.advance(&mut text, bytes);
    text.finish()
}

#[derive(Default)]
struct StripText {
    out: String,
    line: Vec<char>,
    col: usize,
}

impl StripText {
    fn put(&mut self, c: char) {
        if self.col < self.line.len() {
            self.line[self.col] = c;
        } else {
            self.line.push(c);
        }
        self.col += 1;
    }

    fn end_line(&mut self) {
        self.out.extend(self.line.drain(..));
        self.col = 0;
    }

    fn finish(mut self) -> String {
        self.end_line();
        self.out
    }
}

impl vte::Perform for StripText {
    fn print(&mut self, c: char) {
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                self.end_line();
                self.out.push('\n');
            }
            b'\r' => self.col = 0,
            b'\t' => self.put('\t'),
            0x08 => self.col = self.col.saturating_sub(1),
            // A bell or a stray NUL would reach the model as a raw control byte, which agents
            // mangle or drop: show it the way invalid bytes are shown, visibly and unambiguously.
            0x00..=0x1f | 0x7f => {
                for c in format!("\\x{byte:02x}").chars() {
                    self.put(c);
                }
            }
            _ => {}
        }
    }

    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        _intermediates: &[u8],
        _ignore: bool,
        action: char,
    ) {
        // Erase in line, to the end (the default, `0`): shells and progress bars redraw with it.
        let first = params.iter().next().and_then(|p| p.first().copied()).unwrap_or(0);
        if action == 'K' && first == 0 {
            self.line.truncate(self.col);
        }
    }
}

/// The screen a terminal of `rows` × `cols` shows after receiving `bytes`, as text: one line per
/// row, trailing blanks of each row and trailing empty rows removed. Sizes are clamped to
/// `1..=``MAX_SCREEN_ROWS` × `1..=``MAX_SCREEN_COLS`. Shows the alternate screen when the
/// program switched to it (as `less`, `vim` and `top` do).
pub fn render_screen(bytes: &[u8], rows: u16, cols: u16) -> String {
    let rows = rows.clamp(1, MAX_SCREEN_ROWS);
    let cols = cols.clamp(1, MAX_SCREEN_COLS);
    let (Some(r), Some(c)) = (std::num::NonZeroU16::new(rows), std::num::NonZeroU16::new(cols))
    else {
        return String::new();
    };
    let mut parser = vt100::Parser::new(r, c, 0);
    parser.process(bytes);
    let lines: Vec<String> =
        parser.screen().rows(0, cols).map(|row| row.trim_end().to_owned()).collect();
    let used = lines.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1);
    lines[..used].join("\n")
}

impl OutputLog {
    /// [`render_screen`] of this log's newest bytes (at most `SCREEN_TAIL_BYTES` and the
    /// session's retained cap, read by `pread` from the spool), for a terminal of
    /// `size`. Bytes dropped by the disk cap are skipped, not replayed.
    pub fn render_screen(&self, size: PtySize) -> Result<String, OutputError> {
        let want = SCREEN_TAIL_BYTES.min(self.config().retained_cap.max(1));
        let total = self.stats().total_bytes;
        let mut at = total.saturating_sub(want as u64);
        let mut tail = Vec::new();
        while at < total {
            let (bytes, next) = self.read_raw(at, want.saturating_sub(tail.len()))?;
            if bytes.is_empty() && next <= at {
                break;
            }
            tail.extend_from_slice(&bytes);
            at = next;
            if tail.len() >= want {
                break;
            }
        }
        Ok(render_screen(&tail, size.rows, size.cols))
    }

    /// The view of [`OutputLog::render_screen`]: the screen as `output`, the cursors spanning
    /// the bytes replayed. Nothing is cut from a screen, so it carries no notice.
    pub fn screen_view(&self, size: PtySize) -> Result<OutputView, OutputError> {
        let stats = self.stats();
        let screen = self.render_screen(size)?;
        let replayed = SCREEN_TAIL_BYTES.min(self.config().retained_cap) as u64;
        Ok(OutputView {
            output: screen,
            notice: None,
            truncated: false,
            start_cursor: stats.total_bytes.saturating_sub(replayed),
            next_cursor: stats.total_bytes,
            total_bytes: stats.total_bytes,
            total_lines: stats.total_lines,
            omitted_bytes: 0,
            omitted_lines: None,
            dropped_bytes: stats.dropped_bytes,
            gaps: stats.gaps,
            spool_path: self.spool_path().to_path_buf(),
            stream: Some(Stream::Pty),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_colours_and_crlf() {
        assert_eq!(strip_ansi(b"\x1b[1;31merror\x1b[0m: bad\r\nok\r\n"), "error: bad\nok\n");
    }

    #[test]
    fn carriage_return_overwrites_the_line() {
        assert_eq!(strip_ansi(b"10%\r20%\r30%\ndone"), "30%\ndone");
        assert_eq!(strip_ansi(b"abcdef\rXY"), "XYcdef");
        assert_eq!(strip_ansi(b"abcdef\rXY\x1b[K\n"), "XY\n");
        assert_eq!(strip_ansi(b"ab\x08c"), "ac");
    }

    #[test]
    fn strips_osc_titles_and_private_modes() {
        let raw = b"\x1b]0;user@host: ~\x07\x1b[?2004hbash-5.2$ echo hi\r\nhi\r\n";
        assert_eq!(strip_ansi(raw), "bash-5.2$ echo hi\nhi\n");
    }

    #[test]
    fn invalid_utf8_is_lossy_and_tabs_stay() {
        assert_eq!(strip_ansi(b"a\tb\xffc"), "a\tb\u{fffd}c");
    }

    #[test]
    fn screen_applies_cursor_moves_and_clears() {
        // Clear, write at row 2 col 5, then home and overwrite.
        let raw = b"junk\x1b[2J\x1b[2;5Hhello\x1b[Htop";
        assert_eq!(render_screen(raw, 5, 20), "top\n    hello");
    }

    #[test]
    fn screen_keeps_only_what_fits() {
        let raw: Vec<u8> = (0..10).flat_map(|i| format!("line {i}\r\n").into_bytes()).collect();
        // 3 rows: the last two lines and the (empty) cursor row, trimmed.
        assert_eq!(render_screen(&raw, 3, 10), "line 8\nline 9");
        // Wrapped at 4 columns; 2 rows keep the last two.
        assert_eq!(render_screen(b"0123456789", 2, 4), "4567\n89");
        assert_eq!(render_screen(b"", 0, 0), "");
    }

    #[test]
    fn screen_shows_the_alternate_screen() {
        let raw = b"shell$ less f\r\n\x1b[?1049h\x1b[Hfile line 1\r\nfile line 2";
        assert_eq!(render_screen(raw, 4, 20), "file line 1\nfile line 2");
    }
}
