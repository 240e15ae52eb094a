//! The text answer a model reads, in the Codex layout every door shares:
//!
//! ```text
//! Exit code: 0                      (or: Process running with session ID sh-3)
//! Wall time: 1.42 s
//! Output:
//! …
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use stockade_proto::{OutputView, SessionState, TerminateReport};

/// Render the Codex-style text answer for a session.
pub fn render(
    id: &str,
    state: &SessionState,
    wall_time: Duration,
    view: &OutputView,
    cleanup: Option<&TerminateReport>,
) -> String {
    let mut text = String::with_capacity(view.output.len() + 256);
    let _ = writeln!(text, "{}", status_line(id, state));
    let _ = writeln!(text, "Wall time: {:.2} s", wall_time.as_secs_f64());
    if let Some(report) = cleanup {
        let _ = writeln!(text, "{}", cleanup_line(report));
    }
    text.push_str("Output:\n");
    text.push_str(&view.output);
    if !view.output.is_empty() && !view.output.ends_with('\n') {
        text.push('\n');
    }
    text
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
        format!(
            "Process tree: NOT fully terminated; still alive: {:?} (signalled {n} process{plural})",
            report.survivors
        )
    }
}

/// `SIGTERM`-style name of a signal number.
pub fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {signal}"))
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
    fn codex_layout() {
        let text = render(
            "sh-1",
            &SessionState::Exited { code: 3 },
            Duration::from_millis(1420),
            &view("hi"),
            None,
        );
        assert_eq!(text, "Exit code: 3\nWall time: 1.42 s\nOutput:\nhi\n");
        let running = render("sh-7", &SessionState::Running, Duration::ZERO, &view(""), None);
        assert!(running.starts_with("Process running with session ID sh-7\n"));
    }

    #[test]
    fn exit_statuses_follow_shell_conventions() {
        assert_eq!(exit_status(&SessionState::Signaled { signal: 9 }), 137);
        assert_eq!(exit_status(&SessionState::TimedOut), 124);
        assert_eq!(signal_name(15), "SIGTERM");
    }
}
