//! The text answer a model reads, in the Codex layout every door shares:
//!
//! ```text
//! Exit code: 0                      (or: Process running with session ID sh-3)
//! Wall time: 1.42 s
//! Output:
//! …
//! [… 4,812,003 bytes / 61,020 lines omitted. Full output: <spool>. Read more: <door's words>]
//! ```
//!
//! The engine hands over facts ([`OutputView`] and its [`Omission`]); the words saying how to
//! read more are each door's (the CLI names `stockade read`, the MCP server its tools), passed in
//! as `read_more`.

use std::fmt::Write as _;
use std::time::Duration;

use stockade_proto::{Omission, OutputView, SessionState, TerminateReport};

use crate::{amount, dropped_phrase};

/// Render the Codex-style text answer for a session; `output` is the view's text as the door
/// shows it ([`view_text`]).
pub fn render(
    id: &str,
    state: &SessionState,
    wall_time: Duration,
    output: &str,
    cleanup: Option<&TerminateReport>,
) -> String {
    let mut text = String::with_capacity(output.len() + 256);
    let _ = writeln!(text, "{}", status_line(id, state));
    let _ = writeln!(text, "Wall time: {:.2} s", wall_time.as_secs_f64());
    if let Some(report) = cleanup {
        let _ = writeln!(text, "{}", cleanup_line(report));
    }
    text.push_str("Output:\n");
    text.push_str(output);
    if !output.is_empty() && !output.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// A view's text: its content, then, when something was cut, the omission notice on a line of
/// its own. `read_more` is the door's sentence for reading on from `after` (`None`: the notice
/// names only the spool).
pub fn view_text(view: &OutputView, read_more: impl FnOnce(u64) -> Option<String>) -> String {
    let Some(o) = &view.notice else { return view.output.clone() };
    let notice = notice(o, &view.spool_path, read_more(o.after));
    let mut text = String::with_capacity(view.output.len() + notice.len() + 1);
    text.push_str(&view.output);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&notice);
    text
}

/// `[… 4,812,003 bytes / 61,020 lines omitted. Full output: <path>. Read more: <read_more>]`;
/// a dropped range is named after the amount; without `read_more`, the notice ends at the path.
pub fn notice(o: &Omission, spool_path: &std::path::Path, read_more: Option<String>) -> String {
    let mut s = format!("[… {} omitted.", amount(o.omitted_bytes, o.omitted_lines));
    if let Some(g) = &o.dropped {
        let _ = write!(s, " {}.", dropped_phrase(g.start, g.end, &g.reason));
    }
    let _ = write!(s, " Full output: {}", spool_path.display());
    match read_more {
        Some(more) => {
            let _ = write!(s, ". Read more: {more}]");
        }
        None => s.push(']'),
    }
    s
}

/// The first line: how the session stands.
pub fn status_line(id: &str, state: &SessionState) -> String {
    match state {
        SessionState::Running => format!("Process running with session ID {id}"),
        SessionState::Exited { code } => format!("Exit code: {code}"),
        SessionState::Signaled { signal } => {
            format!("Exit code: {} (killed by signal {})", 128 + signal, signal_name(*signal))
        }
        SessionState::Killed { reason } => format!("Killed: {reason} (session {id})"),
        SessionState::TimedOut => {
            format!("Timed out: the process tree was terminated (session {id})")
        }
        SessionState::Failed { reason } => format!("Failed: {reason} (session {id})"),
    }
}

/// One line about what had to be terminated when the session ended.
pub fn cleanup_line(report: &TerminateReport) -> String {
    let n = report.pids_signalled.len();
    let plural = if n == 1 { "" } else { "es" };
    if report.terminated {
        format!(
            "Process tree: {n} process{plural} terminated ({}{}), none left",
            report.signal_sent.as_deref().unwrap_or("no signal needed"),
            if report.escalated { ", then SIGKILL" } else { "" }
        )
    } else {
        let mut line = String::from("Process tree: NOT fully terminated; ");
        if !report.survivors.is_empty() || report.unattributed.is_empty() {
            line.push_str(&format!("still alive: {:?}", report.survivors));
        }
        if !report.unattributed.is_empty() {
            if !report.survivors.is_empty() {
                line.push_str("; ");
            }
            // Named so the user can look at them: they may be this session's escapees, and
            // nothing was sent to them.
            line.push_str(&format!(
                "alive and possibly escaped from a session, not signalled: {:?}",
                report.unattributed
            ));
        }
        line.push_str(&format!(" (signalled {n} process{plural})"));
        line
    }
}

/// `SIGTERM`-style name of a signal number.
pub fn signal_name(signal: i32) -> String {
    stockade_proto::Signal::name_of(signal)
}

/// The exit status a CLI should end with for a session's state: the command's own code, 128+N
/// for a signal (as shells do), 124 for a timeout (as `timeout(1)` does), 137 when killed, 125
/// when it failed to run.
pub fn exit_status(state: &SessionState) -> i32 {
    match state {
        SessionState::Running => 0,
        SessionState::Exited { code } => *code,
        SessionState::Signaled { signal } => 128 + signal,
        SessionState::Killed { .. } => 137,
        SessionState::TimedOut => 124,
        SessionState::Failed { .. } => 125,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn view(output: &str) -> OutputView {
        OutputView {
            output: output.into(),
            notice: None,
            truncated: false,
            start_cursor: 0,
            next_cursor: output.len() as u64,
            total_bytes: output.len() as u64,
            total_lines: 1,
            omitted_bytes: 0,
            omitted_lines: Some(0),
            dropped_bytes: 0,
            gaps: vec![],
            spool_path: PathBuf::from("/x/output.log"),
            stream: None,
        }
    }

    #[test]
    fn a_report_names_the_unattributed_it_did_not_signal() {
        let report = |survivors: Vec<u32>, unattributed: Vec<u32>| TerminateReport {
            terminated: false,
            signal_sent: Some("SIGTERM".into()),
            escalated: true,
            pids_signalled: vec![10, 11],
            survivors,
            unattributed,
            method: stockade_proto::ContainmentMethod::ProcessGroup,
            elapsed_ms: 5,
        };
        let only = cleanup_line(&report(vec![], vec![77, 78]));
        assert!(only.contains("[77, 78]") && !only.contains("still alive: []"), "{only}");
        let both = cleanup_line(&report(vec![11], vec![77]));
        assert!(both.contains("still alive: [11]") && both.contains("[77]"), "{both}");
        let none = cleanup_line(&report(vec![12], vec![]));
        assert!(none.contains("still alive: [12]") && !none.contains("escaped"), "{none}");
    }

    #[test]
    fn codex_layout() {
        let text = render(
            "sh-1",
            &SessionState::Exited { code: 3 },
            Duration::from_millis(1420),
            "hi",
            None,
        );
        assert_eq!(text, "Exit code: 3\nWall time: 1.42 s\nOutput:\nhi\n");
        let running = render("sh-7", &SessionState::Running, Duration::ZERO, "", None);
        assert!(running.starts_with("Process running with session ID sh-7\n"));
    }

    #[test]
    fn notice_with_and_without_read_more() {
        let mut v = view("last line");
        v.notice = Some(Omission {
            omitted_bytes: 4_812_003,
            omitted_lines: Some(61_020),
            dropped: None,
            after: 50_000,
        });
        v.spool_path = PathBuf::from("/s/output.log");
        let more = |after| Some(format!("stockade read sh-3 --after {after}"));
        assert_eq!(
            view_text(&v, more),
            "last line\n[… 4,812,003 bytes / 61,020 lines omitted. Full output: /s/output.log. Read more: stockade read sh-3 --after 50000]"
        );
        if let Some(o) = v.notice.as_mut() {
            o.omitted_lines = None;
            o.dropped =
                Some(stockade_proto::Gap { start: 10, end: 20, reason: "disk full".into() });
        }
        assert_eq!(
            view_text(&v, |_| None),
            "last line\n[… 4,812,003 bytes omitted. 10 bytes at offsets 10..20 were not kept (disk full). Full output: /s/output.log]"
        );
        assert_eq!(view_text(&view("whole\n"), more), "whole\n");
    }

    #[test]
    fn exit_statuses_follow_shell_conventions() {
        assert_eq!(exit_status(&SessionState::Signaled { signal: 9 }), 137);
        assert_eq!(exit_status(&SessionState::TimedOut), 124);
        assert_eq!(signal_name(15), "SIGTERM");
    }
}
