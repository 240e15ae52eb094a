//! `stockade ps`: the daemon's sessions as a table, filtered here (by state, source and age)
//! from the daemon's `list`.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use comfy_table::{Cell, CellAlignment, Color};
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
    let mut list = global.connect()?.call::<method::List>(ListParams::default())?;
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
        table(&list.sessions, out::now_ms(), out::colors())
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
    if args.all || args.json || !args.state.is_empty() {
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

fn table(sessions: &[SessionInfo], now_ms: u64, colors: bool) -> String {
    let mut table =
        out::table(["ID", "STATE", "PID", "OUTPUT", "LINES", "STARTED", "TIME", "COMMAND"], colors);
    for s in sessions {
        let (state, color) = state_cell(&s.state);
        let mut state = Cell::new(state);
        if colors {
            state = state.fg(color);
        }
        table.add_row(vec![
            Cell::new(&s.id),
            state,
            Cell::new(s.pid).set_alignment(CellAlignment::Right),
            Cell::new(out::bytes(s.total_bytes)).set_alignment(CellAlignment::Right),
            Cell::new(s.total_lines).set_alignment(CellAlignment::Right),
            Cell::new(format!("{} ago", out::duration_ms(now_ms.saturating_sub(s.started_at_ms)))),
            Cell::new(out::duration_ms(s.wall_time_ms)).set_alignment(CellAlignment::Right),
            Cell::new(command_cell(&s.command)),
        ]);
    }
    out::table_text(table)
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
    if flat.chars().count() <= COMMAND_WIDTH {
        return flat;
    }
    let mut cut: String = flat.chars().take(COMMAND_WIDTH - 1).collect();
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
}
