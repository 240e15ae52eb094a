//! Writing answers to stdout, in the CLI's words: a view's omission notice names
//! `stockade read`/`stockade grep`, and a missing session points at `stockade ps`.

use std::io::Write;

use stockade_client::ClientError;
use stockade_log::answer;
use stockade_proto::OutputView;

/// A view's text as the CLI prints it: the content, then, when something was cut, the notice
/// on a line of its own, saying how to read on from `label` (a session id; without one the
/// notice names only the spool).
pub fn view_text(view: &OutputView, label: Option<&str>) -> String {
    view_text_shown(view, label, false)
}

/// [`view_text`], with colour sequences kept when `colour` (see [`shown`]).
pub fn view_text_shown(view: &OutputView, label: Option<&str>, colour: bool) -> String {
    let text = answer::view_text(view, |after| {
        label.map(|l| format!("stockade read {l} --after {after}, or stockade grep {l} REGEX"))
    });
    shown(&text, colour).into_owned()
}

/// A command's output as shown on a terminal: control characters escaped (see
/// [`escape_controls`]), except, when `colour`, the SGR sequences (`ESC [ 31 m`: colours, bold,
/// underline), which only style the text that follows: they cannot move the cursor, clear the
/// screen or retitle the window.
pub fn shown(text: &str, colour: bool) -> std::borrow::Cow<'_, str> {
    if !colour || !text.contains('\u{1b}') {
        return escape_controls(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(at) = rest.find('\u{1b}') {
        out.push_str(&escape_controls(&rest[..at]));
        let len = sgr_len(&rest[at..]).unwrap_or(0);
        if len > 0 {
            out.push_str(&rest[at..at + len]);
            rest = &rest[at + len..];
        } else {
            out.push_str("\\x1b");
            rest = &rest[at + 1..];
        }
    }
    out.push_str(&escape_controls(rest));
    std::borrow::Cow::Owned(out)
}

/// Most characters of one SGR sequence kept as such (longer ones are escaped).
const SGR_MAX: usize = 64;

/// The length of the SGR sequence `text` starts with (`ESC [`, digits, `;` or `:`, then `m`):
/// `Some(n)`; `Some(0)` when `text` is the start of one that may still be completed; `None`
/// when it is not one.
fn sgr_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    match bytes.get(1) {
        None => return Some(0),
        Some(b'[') => {}
        Some(_) => return None,
    }
    for (i, &b) in bytes.iter().enumerate().skip(2).take(SGR_MAX - 2) {
        match b {
            b'm' => return Some(i + 1),
            b'0'..=b'9' | b';' | b':' => {}
            _ => return None,
        }
    }
    (bytes.len() < SGR_MAX).then_some(0)
}

/// A log streamed in pieces as text to show: decoded as UTF-8 across pieces, escaped as
/// [`shown`]; a colour sequence split between two pieces waits for the rest, so it is kept whole.
#[derive(Debug, Default)]
pub struct ShownStream {
    utf8: Utf8Stream,
    colour: bool,
    held: String,
}

impl ShownStream {
    /// `colour`: keep SGR sequences.
    pub fn new(colour: bool) -> ShownStream {
        ShownStream { colour, ..ShownStream::default() }
    }

    /// The text of the next piece.
    pub fn push(&mut self, piece: &[u8]) -> String {
        let mut text = std::mem::take(&mut self.held);
        text.push_str(&self.utf8.push(piece));
        if self.colour
            && let Some(at) = text.rfind('\u{1b}')
            && sgr_len(&text[at..]) == Some(0)
        {
            self.held = text.split_off(at);
        }
        shown(&text, self.colour).into_owned()
    }

    /// What is left at the end of the stream.
    pub fn finish(&mut self) -> String {
        let mut text = std::mem::take(&mut self.held);
        text.push_str(&self.utf8.finish());
        // An unfinished sequence at the very end is none: `shown` escapes it.
        shown(&text, self.colour).into_owned()
    }
}

/// Text that is safe to show on a terminal: control characters other than newline, tab and
/// carriage return (ESC, NUL, BEL, DEL, the C1 controls such as CSI) are written as `\xNN` /
/// `\u{NN}`, so a command's output cannot move the cursor, retitle the window or hide text.
/// `--raw` gives the exact bytes.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && !matches!(c, '\n' | '\t' | '\r');
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if unsafe_char(c) && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// An error as the one sentence `main` prints; an unknown session id says how to list them.
/// A cause whose text the message already carries (an OS error quoted by the error that wraps
/// it) is not repeated.
pub fn error_text(e: &anyhow::Error) -> String {
    let unknown = e.chain().any(|c| {
        c.downcast_ref::<ClientError>().is_some_and(ClientError::is_no_such_session)
            || matches!(
                c.downcast_ref::<stockade_engine::StateDirError>(),
                Some(stockade_engine::StateDirError::NoSuchSession { .. })
            )
    });
    let mut text = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    if unknown {
        text.push_str("; `stockade ps -a` lists the sessions");
    }
    text
}

/// Whether log lines may carry ANSI colour: only when stderr is a terminal and `NO_COLOR` is
/// not set.
pub fn colour_ok() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Write `text` to stdout.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Write raw bytes to stdout.
pub fn print_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()?;
    Ok(())
}

/// Write `value` as pretty JSON and a newline.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    print(&text)
}

/// Whether an error is stdout closing under us (`stockade read … | head`), which is success.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Write `value` as one line of compact JSON (for a stream of answers).
pub fn print_json_line<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string(value)?;
    text.push('\n');
    print(&text)
}

/// Whether to colour output: stdout is a terminal and `NO_COLOR` is unset or empty.
pub fn colors() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A table in the CLI's look: no borders, flush left, wrapped to the terminal; styled only
/// when `colors` (else no escape codes even on a terminal). Finish it with [`table_text`].
pub fn table(header: impl Into<comfy_table::Row>, colors: bool) -> comfy_table::Table {
    use comfy_table::{ContentArrangement, Table, presets};
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_content_arrangement(ContentArrangement::Dynamic);
    if colors {
        table.enforce_styling();
    } else {
        table.force_no_tty();
    }
    table.set_header(header);
    table
}

/// A [`table`]'s text: two spaces between columns, like `docker ps`, no trailing blanks, one
/// `\n` after every line.
pub fn table_text(mut table: comfy_table::Table) -> String {
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    let mut text = String::new();
    for line in table.lines() {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// Milliseconds since the Unix epoch by the wall clock (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A byte count for people: `812 B`, `1.2 KiB`, `20.9 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration for people, two units at most: `0.4s`, `12s`, `3m04s`, `2h05m`, `3d04h`.
pub fn duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..10 => format!("{:.1}s", ms as f64 / 1000.0),
        10..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86400, (s % 86400) / 3600),
    }
}

/// Seconds for a one-line report: `4.2 s` under a minute, else as [`duration_ms`].
pub fn seconds(ms: u64) -> String {
    if ms < 60_000 { format!("{:.1} s", ms as f64 / 1000.0) } else { duration_ms(ms) }
}

/// How a session ended, in one line: `sh-3 exited 3 after 4.2 s`, `sh-3 was killed by SIGKILL
/// after 0.1 s`, `sh-3 timed out after 5.0 s` (`wall_ms` unknown: no "after").
pub fn ended_phrase(
    id: &str,
    state: &stockade_proto::SessionState,
    wall_ms: Option<u64>,
) -> String {
    use stockade_proto::SessionState as S;
    let what = match state {
        S::Running => "is still running".to_owned(),
        S::Exited { code } => format!("exited {code}"),
        S::Signaled { signal } => format!("was killed by {}", answer::signal_name(*signal)),
        S::Killed { reason } => format!("was killed ({reason})"),
        S::TimedOut => "timed out".to_owned(),
        S::Failed { reason } => format!("failed to run ({reason})"),
    };
    match wall_ms {
        Some(ms) => format!("{id} {what} after {}", seconds(ms)),
        None => format!("{id} {what}"),
    }
}

/// Lossy UTF-8 decoding of a byte stream that arrives in pieces: a character split between two
/// pieces is decoded whole, not as two replacement characters.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Decode the next piece; an incomplete character at its end waits for the next piece.
    pub fn push(&mut self, piece: &[u8]) -> String {
        let joined;
        let mut rest: &[u8] = if self.pending.is_empty() {
            piece
        } else {
            let mut p = std::mem::take(&mut self.pending);
            p.extend_from_slice(piece);
            joined = p;
            &joined
        };
        let mut text = String::with_capacity(rest.len());
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    text.push_str(s);
                    return text;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    text.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        Some(n) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        None => {
                            self.pending = after.to_vec();
                            return text;
                        }
                    }
                }
            }
        }
    }

    /// What is left at the end of the stream (an incomplete character, shown lossily).
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(escape_controls("plain\ttext\r\n"), "plain\ttext\r\n");
        assert_eq!(escape_controls("a\u{1b}[2Jb\0c\u{7}"), "a\\x1b[2Jb\\x00c\\x07");
        assert_eq!(escape_controls("\u{9b}31m\u{7f}"), "\\u{9b}31m\\x7f");
    }

    #[test]
    fn colour_is_kept_and_every_other_control_escaped() {
        let text = "\u{1b}[31mred\u{1b}[0m \u{1b}[1;38;5;208mb\u{1b}[m\u{1b}[2J\u{1b}]0;t\u{7}";
        assert_eq!(
            shown(text, true),
            "\u{1b}[31mred\u{1b}[0m \u{1b}[1;38;5;208mb\u{1b}[m\\x1b[2J\\x1b]0;t\\x07"
        );
        assert_eq!(shown(text, false), escape_controls(text));
        // A sequence split between pieces is kept whole; one never finished is escaped.
        let mut s = ShownStream::new(true);
        assert_eq!(s.push(b"a\x1b[3"), "a");
        assert_eq!(s.push(b"1mred\x1b"), "\u{1b}[31mred");
        assert_eq!(s.push(b"[0m\x1b[2"), "\u{1b}[0m");
        assert_eq!(s.finish(), "\\x1b[2");
        let mut plain = ShownStream::new(false);
        assert_eq!(plain.push(b"\x1b[31mx"), "\\x1b[31mx");
    }

    #[test]
    fn a_cause_already_said_is_not_repeated() {
        let io = std::io::Error::from_raw_os_error(13);
        let said = io.to_string();
        let e = anyhow::Error::new(io).context(format!("cannot open x: {said}"));
        assert_eq!(error_text(&e), format!("cannot open x: {said}"));
        let e = anyhow::Error::new(std::io::Error::from_raw_os_error(13)).context("cannot open x");
        assert_eq!(error_text(&e), format!("cannot open x: {said}"));
    }

    #[test]
    fn characters_split_between_pieces_decode_whole() {
        let mut d = Utf8Stream::default();
        let euro = "€".as_bytes();
        assert_eq!(d.push(&[b'a', euro[0]]), "a");
        assert_eq!(d.push(&euro[1..2]), "");
        assert_eq!(d.push(&[euro[2], b'b', 0xff, b'c']), "€b\u{FFFD}c");
        assert_eq!(d.push(&euro[..2]), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }

    #[test]
    fn the_notice_names_the_cli() {
        let view = OutputView {
            output: "a\nb".into(),
            notice: Some(stockade_proto::Omission {
                omitted_bytes: 4_812_003,
                omitted_lines: Some(61_020),
                dropped: None,
                after: 50_000,
            }),
            truncated: true,
            start_cursor: 0,
            next_cursor: 3,
            total_bytes: 4_812_006,
            total_lines: 61_022,
            omitted_bytes: 4_812_003,
            omitted_lines: Some(61_020),
            dropped_bytes: 0,
            gaps: vec![],
            spool_path: "/s/output.log".into(),
            stream: None,
        };
        assert_eq!(
            view_text(&view, Some("sh-3")),
            "a\nb\n[… 4,812,003 bytes / 61,020 lines omitted. Full output: /s/output.log. Read more: stockade read sh-3 --after 50000, or stockade grep sh-3 REGEX]"
        );
        assert_eq!(
            view_text(&view, None),
            "a\nb\n[… 4,812,003 bytes / 61,020 lines omitted. Full output: /s/output.log]"
        );
    }

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(20_877_894), "19.9 MiB");
        assert_eq!(duration_ms(420), "0.4s");
        assert_eq!(duration_ms(184_000), "3m04s");
        assert_eq!(duration_ms(7_500_000), "2h05m");
        assert_eq!(seconds(4_200), "4.2 s");
        let exited = stockade_proto::SessionState::Exited { code: 3 };
        assert_eq!(ended_phrase("sh-19", &exited, Some(4_200)), "sh-19 exited 3 after 4.2 s");
    }
}
