//! The text content of each answer: what the model reads, and which content goes out.
//! `exec_command`, `write_stdin` and `read_output` use the Codex layout every door shares
//! (`stockade_log::answer`): `Wall time` is always the session's; a line says how long the call
//! waited and what ended the wait, and one gives the cursor when there is more to read. The
//! others are short, plain listings.
//!
//! **Text only, by default.** Codex and Claude Code hand their model `structuredContent` (as
//! compact JSON, every newline escaped) instead of the text whenever it is there, and Codex's
//! code mode hands it both, so the output would reach the model as one escaped string or
//! twice. Without it every agent's model reads the text: the output as lines, once. Programs
//! that want the daemon's result as JSON start the server with `--structured`
//! ([`Answers::structured`]).
//!
//! **The notice stands first and last.** When anything was left out, the answer says so (with
//! the session id and how to read more) on a line before `Output:` as well as after the
//! output: opencode keeps the start of a long result, Codex its start and end.

use std::fmt::Write as _;
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock};

use stockade_log::answer::{cleanup_line, notice, status_line, view_text};
use stockade_log::strip_ansi;
use stockade_proto::rpc::{GrepResultMsg, KillResult, ListResult, ReadResult, WaitEnd, WaitReport};
use stockade_proto::{OutputView, RunResult, SessionState, Stream};

/// What each answer carries besides its text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answers {
    /// Also send the daemon's result as `structuredContent` (and each tool's `outputSchema`).
    pub structured: bool,
    /// The sandbox every command runs under unless it asks for a tighter one, and the most it
    /// may ask for (set by whoever started the server; stated in `exec_command`'s description).
    pub sandbox: Option<stockade_proto::Sandbox>,
}

/// The result as it goes out: without structured content unless asked for, with `note` (a
/// bound held to what the client passes on) as the first line of the text.
pub fn deliver(
    mut result: CallToolResult,
    answers: &Answers,
    note: Option<String>,
) -> CallToolResult {
    if !answers.structured {
        result.structured_content = None;
    }
    if let Some(note) = note {
        result.content.insert(0, ContentBlock::text(format!("{note}\n")));
        // One text for clients that show only the first block.
        let joined: String =
            result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.as_str())).collect();
        result.content.retain(|c| c.as_text().is_none());
        result.content.insert(0, ContentBlock::text(joined));
    }
    result
}

/// Claude Code's `MAX_MCP_OUTPUT_TOKENS`, which this server inherits from it when set.
pub fn claude_tokens_from_env() -> Option<usize> {
    std::env::var("MAX_MCP_OUTPUT_TOKENS").ok()?.trim().parse().ok().filter(|t| *t > 0)
}

/// A `read_output` without `after` that continued where this connection's last answer ended.
#[derive(Debug, Clone, Copy)]
pub struct Continued {
    /// The cursor it continued from.
    pub cursor: u64,
}

/// `exec_command`'s answer.
pub fn run(r: &RunResult) -> String {
    let mut extra = Vec::new();
    if r.deduplicated {
        extra.push(format!(
            "Note: a session with this source was already running; no second copy was started. This is {}.",
            r.id
        ));
    }
    extra.extend(r.wait.as_ref().map(wait_line));
    if let Some(policy) = &r.sandbox {
        let denied = ["Permission denied", "Operation not permitted", "Read-only file system"]
            .iter()
            .any(|d| r.view.output.contains(d));
        extra.push(if denied {
            format!(
                "Ran under {policy}: a `Permission denied`, `Operation not permitted` or `Read-only file system` above comes from this sandbox, which allows writing only beneath its writable roots; do not retry it another way."
            )
        } else {
            format!("Ran under {policy}.")
        });
    }
    codex(
        &r.id,
        &r.state,
        Duration::from_millis(r.wall_time_ms),
        &r.view,
        r.cleanup.as_ref().map(cleanup_line),
        extra,
    )
}

/// `read_output`'s and `write_stdin`'s answer.
pub fn read(r: &ReadResult, continued: Option<Continued>) -> String {
    let mut extra = Vec::new();
    if let Some(c) = continued {
        let skipped = r.view.start_cursor > c.cursor
            && r.view.notice.as_ref().is_some_and(|o| o.after == c.cursor);
        extra.push(if skipped {
            format!(
                "Continued after cursor {} (where this connection's last answer ended) with the newest output; what came between is skipped (see the notice).",
                c.cursor
            )
        } else {
            format!(
                "Continued after cursor {} (where this connection's last answer ended).",
                c.cursor
            )
        });
    }
    extra.extend(r.wait.as_ref().map(wait_line));
    codex(&r.id, &r.state, Duration::from_millis(r.wall_time_ms), &r.view, None, extra)
}

/// The first line of a `stream` read of a session whose streams cannot be told apart (`one`:
/// one pipe, or a terminal): what it shows instead.
pub fn unsplit(asked: Stream, one: Stream) -> String {
    let how = if one == Stream::Pty {
        "runs on a terminal (tty), where stdout and stderr are one stream"
    } else {
        "writes stdout and stderr into one pipe (capture \"pipe\", the default)"
    };
    format!(
        "Note: stream={} cannot be split out: this session {how}, so this shows both. Start the command with capture: \"split\" to read stderr and stdout apart.",
        asked.as_str()
    )
}

/// How long the call waited, what ended the wait, and the `until` line if one matched.
fn wait_line(w: &WaitReport) -> String {
    let why = match w.ended_by {
        WaitEnd::Window => "the whole wait passed",
        WaitEnd::Exit => "the session ended",
        WaitEnd::Full => "the answer is full",
        WaitEnd::Match => "a line matched until",
        WaitEnd::Output => "new output arrived",
        WaitEnd::Quiet => "the output went quiet (the program is waiting)",
    };
    let mut line = format!("Waited: {:.2} s ({why})", w.waited_ms as f64 / 1000.0);
    if let Some(m) = &w.matched {
        let _ = write!(line, "\nMatched: {} (at cursor {})", one_line(&m.line), m.cursor);
    }
    line
}

fn codex(
    id: &str,
    state: &SessionState,
    wall: Duration,
    view: &OutputView,
    cleanup: Option<String>,
    extra: Vec<String>,
) -> String {
    let output = output_text(view, id);
    let mut text = String::with_capacity(output.len() + 512);
    let _ = writeln!(text, "{}", status_line(id, state));
    let _ = writeln!(text, "Wall time: {:.2} s", wall.as_secs_f64());
    if let Some(line) = cleanup {
        let _ = writeln!(text, "{line}");
    }
    for line in extra {
        let _ = writeln!(text, "{line}");
    }
    if let Some(line) = cursor_line(id, state, view) {
        let _ = writeln!(text, "{line}");
    }
    if view.total_bytes == 0 && matches!(state, SessionState::Running) && wall >= SILENT_HINT_AFTER
    {
        let _ = writeln!(
            text,
            "No output after {:.0} s: a program whose output is not a terminal often buffers it (Python, most C programs); start it with tty: true, or unbuffered (python3 -u, stdbuf -oL).",
            wall.as_secs_f64()
        );
    }
    if let Some(line) = notice_line(view, id) {
        let _ = writeln!(text, "{line}");
    }
    text.push_str("Output:\n");
    text.push_str(&output);
    if !output.is_empty() && !output.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// How long a running command may print nothing before the answer says it may be buffering.
const SILENT_HINT_AFTER: Duration = Duration::from_secs(3);

/// Where to continue, when there is (or may be) more than this answer shows.
fn cursor_line(id: &str, state: &SessionState, view: &OutputView) -> Option<String> {
    let more = view.next_cursor < view.total_bytes;
    if !more && !matches!(state, SessionState::Running) {
        // Finished and shown to the end: a cut above (tail) is in the notice.
        return None;
    }
    let mut line =
        format!("Cursor: next_cursor={} of total_bytes={}", view.next_cursor, view.total_bytes);
    if more || matches!(state, SessionState::Running) {
        // A stream's cursor is its own: reading on names the stream again.
        let stream = match view.stream {
            Some(s @ (Stream::Stdout | Stream::Stderr)) => format!(" stream={}", s.as_str()),
            _ => String::new(),
        };
        let _ = write!(
            line,
            " (read on with read_output session_id={id} after={}{stream})",
            view.next_cursor
        );
    }
    if view.dropped_bytes > 0 {
        let _ = write!(line, "; {} bytes were not kept (disk cap)", view.dropped_bytes);
    }
    Some(line)
}

/// The omission notice alone, for the line before `Output:`: the same words as after the
/// output, so a client that keeps only the start (or only the end) still has them.
fn notice_line(view: &OutputView, id: &str) -> Option<String> {
    let o = view.notice.as_ref()?;
    Some(notice(o, &view.spool_path, Some(read_more(id, o.after))))
}

/// How to read on from `after`, in this server's tools and arguments.
fn read_more(id: &str, after: u64) -> String {
    format!(
        "read_output session_id={id} after={after}, or grep_output session_id={id} pattern=REGEX"
    )
}

/// The view's text with its omission notice (when something was cut) naming this server's
/// tools and their arguments.
///
/// The text is rendered as a terminal would have shown it ([`strip_ansi`], idempotent): programs
/// colour, redraw progress bars and print control bytes whether or not they run on a terminal,
/// and a model handed those bytes reads noise. Cursors and counts stay the spool's.
fn output_text(view: &OutputView, id: &str) -> String {
    let shown = OutputView { output: strip_ansi(view.output.as_bytes()), ..view.clone() };
    view_text(&shown, |after| Some(read_more(id, after)))
}

/// `grep_output`'s answer: `line:offset:text` for matches, `line-offset-text` for context.
pub fn grep(r: &GrepResultMsg) -> String {
    let mut text = String::new();
    let plural = if r.matches == 1 { "" } else { "s" };
    let _ = write!(text, "{} matching line{plural} in {}", r.matches, r.id);
    if r.truncated {
        text.push_str(" (stopped at max_matches: narrow the pattern or raise max_matches)");
    }
    let _ = writeln!(text, "\nFull output: {}", r.spool_path.display());
    if !r.lines.is_empty() {
        text.push_str(
            "line:byte_offset:text (pass byte_offset as read_output after= to read on)\n",
        );
    }
    for line in &r.lines {
        let sep = if line.is_match { ':' } else { '-' };
        // A matched line is rendered as the output is (no escape sequence or control byte).
        let shown = strip_ansi(line.text.as_bytes());
        let _ = writeln!(text, "{}{sep}{}{sep}{shown}", line.line_number, line.offset);
    }
    text
}

/// `kill_session`'s answer.
pub fn kill(r: &KillResult) -> String {
    format!("{}\n{}\n", status_line(&r.id, &r.state), cleanup_line(&r.report))
}

/// `list_sessions`' answer: one session per line, as the daemon ordered them (running first,
/// then the newest finished), and how many more there are.
pub fn list(r: &ListResult) -> String {
    if r.sessions.is_empty() && r.more == 0 {
        return "No sessions. Start one with exec_command.\n".to_owned();
    }
    let mut text = format!("{} session(s), running first:\n", r.sessions.len());
    for s in &r.sessions {
        let state = match &s.state {
            SessionState::Exited { code } => format!("exited {code}"),
            SessionState::Signaled { signal } => format!("signaled {signal}"),
            other => other.name().to_owned(),
        };
        let _ = writeln!(
            text,
            "{} {state} pid {} {}B {:.1}s{} {}",
            s.id,
            s.pid,
            s.total_bytes,
            Duration::from_millis(s.wall_time_ms).as_secs_f64(),
            if s.pty { " tty" } else { "" },
            short(&s.command, LIST_COMMAND_CHARS)
        );
    }
    if r.more > 0 {
        let _ =
            writeln!(text, "{} more not shown: raise limit, or filter with state/source.", r.more);
    }
    text
}

/// How much of a command one `list_sessions` line shows.
const LIST_COMMAND_CHARS: usize = 80;

/// A line of text on one line, bounded.
fn one_line(text: &str) -> String {
    short(text, 120)
}

/// `text` flattened to one line, at most `max` characters.
fn short(text: &str, max: usize) -> String {
    let flat: String = text.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::path::PathBuf;

    fn view(output: &str, next: u64, total: u64) -> OutputView {
        OutputView {
            output: output.into(),
            notice: None,
            truncated: next < total,
            start_cursor: 0,
            next_cursor: next,
            total_bytes: total,
            total_lines: 1,
            omitted_bytes: total - next,
            omitted_lines: None,
            dropped_bytes: 0,
            gaps: vec![],
            spool_path: PathBuf::from("/s/output.log"),
            stream: None,
        }
    }

    #[test]
    fn finished_and_complete_answers_keep_the_codex_layout() {
        let r = RunResult {
            id: "sh-1".into(),
            state: SessionState::Exited { code: 0 },
            pid: 7,
            cwd: None,
            wall_time_ms: 1420,
            cleanup: None,
            deduplicated: false,
            view: view("hi\n", 3, 3),
            wait: None,
            sandbox: None,
        };
        assert_eq!(run(&r), "Exit code: 0\nWall time: 1.42 s\nOutput:\nhi\n");
    }

    #[test]
    fn running_answers_say_where_to_read_on() {
        let r = ReadResult {
            id: "sh-2".into(),
            state: SessionState::Running,
            view: view("abc", 3, 10),
            wall_time_ms: 5,
            wait: None,
            bytes_b64: None,
            binary_len: None,
        };
        let text = read(&r, None);
        assert!(text.starts_with("Process running with session ID sh-2\nWall time: 0.01 s\n"));
        assert!(text.contains("read_output session_id=sh-2 after=3"), "{text}");
    }

    #[test]
    fn the_notice_names_the_tools() {
        let mut v = view("last", 4, 13);
        v.spool_path = PathBuf::from("/s/o.log");
        v.notice = Some(stockade_proto::Omission {
            omitted_bytes: 9,
            omitted_lines: None,
            dropped: None,
            after: 50,
        });
        assert_eq!(
            output_text(&v, "sh-3"),
            "last\n[… 9 bytes omitted. Full output: /s/o.log. Read more: read_output session_id=sh-3 after=50, or grep_output session_id=sh-3 pattern=REGEX]"
        );
        v.notice = None;
        assert_eq!(output_text(&v, "sh-3"), "last");
    }
}
