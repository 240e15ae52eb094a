//! Cutting a bounded view: where to cut (UTF-8 boundaries, line ends, byte and line limits)
//! and the in-content markers (a `middle` view's cut, a jump over a dropped range). Pure
//! functions over byte windows; the log decides which bytes to fetch. The number words are
//! public so each door words its omission hint the same way.

use super::count_newlines;

/// Bytes a door's omission hint may take besides the counts it names: its words (the longest,
/// MCP's, naming its tools and arguments, is about 120), the spool path and the session id
/// (twice). A view leaves this much of `max_bytes` free for the hint, plus the counts. A
/// constant rather than this log's path and id, so every door's view of a log is cut alike.
pub(crate) const HINT_BYTES: usize = 384;

/// Longest UTF-8 sequence: a cut moves at most this far to land on a character boundary.
const MAX_UTF8_SEQ: usize = 4;

fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

/// `i` moved back (at most 3 bytes) so it does not split a multi-byte character.
pub(crate) fn floor_boundary(bytes: &[u8], mut i: usize) -> usize {
    let lo = i.saturating_sub(MAX_UTF8_SEQ - 1);
    while i > lo && i < bytes.len() && is_continuation(bytes[i]) {
        i -= 1;
    }
    i
}

/// `i` moved forward (at most 3 bytes) so it does not split a multi-byte character.
pub(crate) fn ceil_boundary(bytes: &[u8], mut i: usize) -> usize {
    let hi = (i + MAX_UTF8_SEQ - 1).min(bytes.len());
    while i < hi && is_continuation(bytes[i]) {
        i += 1;
    }
    i
}

/// Lines in `bytes`: newline-terminated ones plus a final incomplete one.
pub(crate) fn line_count(bytes: &[u8]) -> u64 {
    count_newlines(bytes) + u64::from(bytes.last().is_some_and(|&b| b != b'\n'))
}

/// How many leading bytes of `window` to show. `complete`: the window holds the whole range (so
/// showing all of it needs no cut). Cuts after a newline when one is in reach, else on a
/// character boundary; then keeps at most `max_lines` lines.
pub(crate) fn keep_head(
    window: &[u8],
    complete: bool,
    max_bytes: usize,
    max_lines: usize,
) -> usize {
    let mut keep = window.len().min(max_bytes);
    if keep < window.len() || !complete {
        keep = match memchr::memrchr(b'\n', &window[..keep]) {
            Some(p) => p + 1,
            None => floor_boundary(window, keep),
        };
    }
    if max_lines == 0 {
        return 0;
    }
    // Position after the `max_lines`-th newline, if the kept part has more lines than that.
    if let Some(p) = memchr::memchr_iter(b'\n', &window[..keep]).nth(max_lines - 1)
        && p + 1 < keep
    {
        keep = p + 1;
    }
    keep
}

/// Where to start showing the end of `window`. `at_line_start`: `window[0]` begins a line;
/// `complete`: the window reaches back to the start of the range. Starts after a newline when
/// one is in reach, else on a character boundary; then keeps at most `max_lines` lines.
pub(crate) fn keep_tail(
    window: &[u8],
    at_line_start: bool,
    complete: bool,
    max_bytes: usize,
    max_lines: usize,
) -> usize {
    let len = window.len();
    if max_lines == 0 || len == 0 {
        return len;
    }
    let mut start = len - len.min(max_bytes);
    if start > 0 || !(complete && at_line_start) {
        let search_from = start.saturating_sub(1);
        let line_start = if start == 0 && at_line_start {
            Some(0)
        } else {
            memchr::memchr(b'\n', &window[search_from..len - 1]).map(|p| search_from + p + 1)
        };
        start = line_start.unwrap_or_else(|| ceil_boundary(window, start));
    }
    if start >= len {
        return len;
    }
    // The last line ends at `len` whether or not it has a newline; count newlines before it.
    if let Some(p) = memchr::memrchr_iter(b'\n', &window[start..len - 1]).nth(max_lines - 1) {
        start = start + p + 1;
    }
    start
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `4,812,003 bytes / 61,020 lines` (lines where counted).
pub fn amount(bytes: u64, lines: Option<u64>) -> String {
    match lines {
        Some(l) => format!("{} bytes / {} lines", thousands(bytes), thousands(l)),
        None => format!("{} bytes", thousands(bytes)),
    }
}

/// A dropped range, as the sentence the notice and markers use.
pub(crate) fn dropped_phrase(start: u64, end: u64, reason: &str) -> String {
    format!(
        "{} bytes at offsets {}..{} were not kept ({reason})",
        thousands(end - start),
        start,
        end
    )
}

/// The marker line between the head and the tail of a `middle` view.
pub(crate) fn middle_marker(bytes: u64, lines: Option<u64>) -> String {
    format!("[… {} omitted …]\n", amount(bytes, lines))
}

/// The marker line where a read jumps over a dropped range.
pub(crate) fn gap_marker(start: u64, end: u64, reason: &str) -> String {
    format!("[… {} …]\n", dropped_phrase(start, end, reason))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(4_812_003), "4,812,003");
    }

    #[test]
    fn head_cuts_on_line_end_then_char_boundary() {
        assert_eq!(keep_head(b"ab\ncd\nef", false, 7, 100), 6);
        assert_eq!(keep_head(b"ab\ncd\nef", true, 100, 100), 8);
        assert_eq!(keep_head(b"ab\ncd\nef", true, 100, 2), 6);
        // "é" is two bytes: a 2-byte budget over "aé" must not split it.
        assert_eq!(keep_head("aé".as_bytes(), false, 2, 10), 1);
        assert_eq!(keep_head("€€".as_bytes(), false, 5, 10), 3);
    }

    #[test]
    fn tail_starts_on_line_start_then_char_boundary() {
        let w = b"xx\nab\ncd\n";
        assert_eq!(keep_tail(w, false, false, 5, 100), 6);
        assert_eq!(keep_tail(w, true, true, 100, 100), 0);
        assert_eq!(keep_tail(w, true, true, 100, 1), 6);
        assert_eq!(keep_tail(b"ab\ncd", true, true, 100, 1), 3);
        let euro = "€€".as_bytes();
        assert_eq!(keep_tail(euro, false, false, 4, 10), 3);
    }
}
