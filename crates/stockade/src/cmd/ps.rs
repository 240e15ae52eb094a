//! `stockade ps`: the daemon's sessions as a table, filtered here (by state, source and age)
//! from the daemon's `list`.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use comfy_table::{Cell, CellAlignment, Color, ContentArrangement};
use stockade_log::answer::signal_name;
use stockade_proto::SessionState;
use stockade_proto::rpc::{ListParams, SessionInfo, method};

use crate::global::Global;
use crate::out;

/// `stockade ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Every session the daemon knows, not only the running ones and the newest finished.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Only sessions in this state (repeatable, or comma-separated).
    #[arg(long, value_enum, value_name = "STATE", value_delimiter = ',')]
    pub state: Vec<StateFilter>,
    /// Only sessions started with this `--source` key (a schedule's is `schedule:NAME`).
    #[arg(long, value_name = "KEY")]
    pub source: Option<String>,
    /// Only the session started with this idempotency key, however old (`run
    /// --idempotency-key`, or the key a failed `run` named): one line, or none if the daemon
    /// never started it (or no longer keeps it).
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Print only the ids, one a line (for `stockade kill $(stockade ps -q)`).
    #[arg(short = 'q', long, conflicts_with = "json")]
    pub quiet: bool,
    /// Print the sessions as JSON (the `list` result, filtered).
    #[arg(long)]
    pub json: bool,
}

/// `ps --state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateFilter {
    /// Still running.
    Running,
    /// Ended, however it ended.
    Done,
    /// Exited with status 0.
    Ok,
    /// Exited non-zero, died of a signal, or failed to start.
    Failed,
    /// Terminated by Stockade (kill, timeout, shutdown, disk cap).
    Killed,
}

/// Characters of the command shown before it is cut with `…`.
const COMMAND_WIDTH: usize = 60;
/// Finished sessions listed without `-a` (the newest).
const RECENT_FINISHED: usize = 20;

pub fn ps(global: &Global, args: PsArgs) -> anyhow::Result<ExitCode> {
    let params = ListParams { idempotency_key: args.key.clone(), ..ListParams::default() };
    let mut list = global.connect()?.call::<method::List>(params)?;
    let hidden = filter(&mut list.sessions, &args);
    if args.json {
        out::print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.quiet {
        let ids: String = list.sessions.iter().map(|s| format!("{}\n", s.id)).collect();
        out::print(&ids)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = if list.sessions.is_empty() {
        "no sessions\n".to_owned()
    } else {
        table(&list.sessions, out::now_ms(), out::colors(), terminal_width())
    };
    if hidden > 0 {
        text.push_str(&format!(
            "({hidden} older finished session{} not shown; `stockade ps -a` lists all)\n",
            if hidden == 1 { "" } else { "s" }
        ));
    }
    out::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Keep the sessions `args` ask for, oldest first; returns how many finished sessions were left
/// out only for being old (never with `-a`, `--state` or `--json`: scripts get every session).
fn filter(sessions: &mut Vec<SessionInfo>, args: &PsArgs) -> usize {
    sessions.retain(|s| {
        (args.state.is_empty() || args.state.iter().any(|f| matches(*f, &s.state)))
            && args.source.as_deref().is_none_or(|k| s.source.as_deref() == Some(k))
    });
    sessions.sort_by_key(|s| s.started_at_ms);
    if args.all || args.json || !args.state.is_empty() || args.key.is_some() {
        return 0;
    }
    let finished = sessions.iter().filter(|s| s.state.is_terminal()).count();
    let mut hidden = finished.saturating_sub(RECENT_FINISHED);
    let cut = hidden;
    // The oldest finished sessions go first.
    sessions.retain(|s| {
        if hidden > 0 && s.state.is_terminal() {
            hidden -= 1;
            false
        } else {
            true
        }
    });
    cut
}

/// Whether a session in `state` passes `--state f`.
fn matches(f: StateFilter, state: &SessionState) -> bool {
    match f {
        StateFilter::Running => !state.is_terminal(),
        StateFilter::Done => state.is_terminal(),
        StateFilter::Ok => matches!(state, SessionState::Exited { code: 0 }),
        StateFilter::Failed => matches!(
            state,
            SessionState::Exited { code: i32::MIN..=-1 | 1.. }
                | SessionState::Signaled { .. }
                | SessionState::Failed { .. }
        ),
        StateFilter::Killed => {
            matches!(state, SessionState::Killed { .. } | SessionState::TimedOut)
        }
    }
}

/// The columns of the table, the command last.
const HEADERS: [&str; 8] = ["ID", "STATE", "PID", "OUTPUT", "LINES", "STARTED", "TIME", "COMMAND"];
/// Columns left out, in this order, while the command would get fewer than [`MIN_COMMAND`]
/// characters on a narrow terminal: a cut cell would mislead (a wrapped one breaks the line), a
/// missing column does neither. ID, STATE and COMMAND always stay.
const DROPPED_FIRST: [&str; 5] = ["LINES", "OUTPUT", "STARTED", "TIME", "PID"];
/// Characters the command keeps on a narrow terminal before other columns are left out.
const MIN_COMMAND: usize = 12;
/// Blanks after every column but the last.
const GAP: usize = 2;

/// The sessions as a table whose lines fit `width` characters (`None`: no limit): one line per
/// session, the command cut with `…` to fit; the other cells are never cut.
fn table(sessions: &[SessionInfo], now_ms: u64, colors: bool, width: Option<usize>) -> String {
    let mut rows: Vec<[String; 8]> = sessions
        .iter()
        .map(|s| {
            [
                s.id.clone(),
                state_cell(&s.state).0,
                s.pid.to_string(),
                out::bytes(s.total_bytes),
                s.total_lines.to_string(),
                format!("{} ago", out::duration_ms(now_ms.saturating_sub(s.started_at_ms))),
                out::duration_ms(s.wall_time_ms),
                command_cell(&s.command),
            ]
        })
        .collect();
    let mut shown: Vec<usize> = (0..HEADERS.len() - 1).collect();
    if let Some(width) = width {
        let column_width = |c: usize| {
            rows.iter().map(|r| r[c].chars().count()).fold(HEADERS[c].len(), usize::max) + GAP
        };
        let before_command =
            |shown: &[usize]| shown.iter().map(|&c| column_width(c)).sum::<usize>();
        for name in DROPPED_FIRST {
            if before_command(&shown) + MIN_COMMAND <= width {
                break;
            }
            shown.retain(|&c| HEADERS[c] != name);
        }
        let room = width.saturating_sub(before_command(&shown)).max(1);
        for row in &mut rows {
            row[7] = fit(&row[7], room);
        }
    }
    shown.push(HEADERS.len() - 1);
    let mut table = out::table(shown.iter().map(|&c| HEADERS[c]).collect::<Vec<_>>(), colors);
    // Never wrapped: the command was cut to fit above, and without a width nothing is cut.
    table.set_content_arrangement(ContentArrangement::Disabled);
    for (s, row) in sessions.iter().zip(rows) {
        let color = state_cell(&s.state).1;
        let cells = shown.iter().map(|&c| {
            let mut cell = Cell::new(&row[c]);
            if matches!(HEADERS[c], "PID" | "OUTPUT" | "LINES" | "TIME") {
                cell = cell.set_alignment(CellAlignment::Right);
            }
            if colors && HEADERS[c] == "STATE" {
                cell = cell.fg(color);
            }
            cell
        });
        table.add_row(cells.collect::<Vec<_>>());
    }
    out::table_text(table)
}

/// The width `ps` fits its lines to: the terminal's, when stdout is one that knows its width;
/// else (piped, or a terminal reporting 0 columns) no limit.
fn terminal_width() -> Option<usize> {
    let stdout = rustix::stdio::stdout();
    if !rustix::termios::isatty(stdout) {
        return None;
    }
    let size = rustix::termios::tcgetwinsize(stdout).ok()?;
    (size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// The state as people say it, and its colour.
fn state_cell(state: &SessionState) -> (String, Color) {
    match state {
        SessionState::Running => ("running".into(), Color::Green),
        SessionState::Exited { code: 0 } => ("exit 0".into(), Color::Reset),
        SessionState::Exited { code } => (format!("exit {code}"), Color::Red),
        SessionState::Signaled { signal } => (signal_name(*signal), Color::Red),
        SessionState::Killed { .. } => ("killed".into(), Color::Yellow),
        SessionState::TimedOut => ("timed out".into(), Color::Yellow),
        SessionState::Failed { .. } => ("failed".into(), Color::Red),
    }
}

/// One line, at most [`COMMAND_WIDTH`] characters.
fn command_cell(command: &str) -> String {
    let flat: String = command.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    fit(&flat, COMMAND_WIDTH)
}

/// `text` if it has at most `max` characters, else its start and `…` in `max` characters.
fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_cut_on_one_line() {
        assert_eq!(command_cell("make\ntest"), "make test");
        let long = "é".repeat(100);
        let cut = command_cell(&long);
        assert_eq!(cut.chars().count(), COMMAND_WIDTH);
        assert!(cut.ends_with('…'));
    }

    fn session(id: &str, command: &str) -> SessionInfo {
        serde_json::from_value(serde_json::json!({
            "id": id, "command": command, "pid": 123456, "pgid": 123456, "processes": 1,
            "state": "running", "started_at_ms": 0, "finished_at_ms": null,
            "wall_time_ms": 1500, "total_bytes": 2048, "total_lines": 9, "dropped_bytes": 0,
            "containment": "process-group", "capture": "pipe", "pty": false, "source": null,
            "spool_path": "/s/output.log",
        }))
        .unwrap()
    }

    #[test]
    fn lines_fit_the_width_and_only_the_command_is_cut() {
        let long = format!("echo {}", "x".repeat(200));
        let sessions = [session("sh-1", &long), session("sh-12345", &long)];
        for width in [30, 40, 80, 200] {
            let text = table(&sessions, 10_000, false, Some(width));
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 3, "{width}: {text}");
            for line in &lines {
                assert!(line.chars().count() <= width, "{width}: {line:?}");
            }
            assert!(lines[1].starts_with("sh-1 ") && lines[2].starts_with("sh-12345 "), "{text}");
            assert!(lines[2].ends_with('…'), "{text}");
        }
        // No width: nothing cut but the command's own bound, all columns there.
        let text = table(&sessions, 10_000, false, None);
        assert!(text.lines().next().unwrap().contains("LINES"), "{text}");
        assert!(text.lines().skip(1).all(|l| l.chars().count() > 100), "{text}");
    }
}
