//! `stockade schedule list` as a table: NAME, WHEN, NEXT (absolute local time), LEFT, LAST,
//! STATE, ENV, DIR, FIRES, SKIPPED — the columns a cron or systemd-timer user looks for, and
//! where the runs start (the environment is counted, never shown: it may hold secrets).

use comfy_table::{Cell, CellAlignment};
use stockade_proto::rpc::ScheduleInfo;

use crate::out;

pub fn table(schedules: &[ScheduleInfo]) -> String {
    let now = out::now_ms();
    let mut table = out::table(
        ["NAME", "WHEN", "NEXT", "LEFT", "LAST", "STATE", "ENV", "DIR", "FIRES", "SKIPPED"],
        false,
    );
    for s in schedules {
        let when = match (&s.every, &s.cron) {
            (Some(every), _) => format!("every {every}"),
            (None, Some(cron)) => format!("cron {cron}"),
            (None, None) => "-".into(),
        };
        let (next, left) = match (s.paused, s.next_fire_ms) {
            (true, _) => ("-".to_owned(), "-".to_owned()),
            (false, Some(t)) => {
                (local_time(t), if t > now { out::duration_ms(t - now) } else { "due".into() })
            }
            (false, None) => ("-".into(), "-".into()),
        };
        let last = match (&s.last_session, s.last_fire_ms) {
            (Some(id), Some(t)) => format!("{id}, {} ago", out::duration_ms(now.saturating_sub(t))),
            (Some(id), None) => id.clone(),
            _ => "-".into(),
        };
        let state = if s.paused {
            "paused".to_owned()
        } else if let Some(id) = &s.active_session {
            format!("running {id}")
        } else if s.last_error.is_some() {
            "failed to fire".to_owned()
        } else {
            "waiting".to_owned()
        };
        table.add_row(vec![
            Cell::new(&s.name),
            Cell::new(when),
            Cell::new(next),
            Cell::new(left).set_alignment(CellAlignment::Right),
            Cell::new(last),
            Cell::new(state),
            Cell::new(env_words(s)),
            Cell::new(dir_text(s)),
            Cell::new(s.fires).set_alignment(CellAlignment::Right),
            Cell::new(s.skipped_overlap).set_alignment(CellAlignment::Right),
        ]);
    }
    out::table_text(table)
}

/// Where a schedule's runs start, in one line: `in DIR, with the caller's environment (N
/// variables)`.
pub fn place(s: &ScheduleInfo) -> String {
    let env = match s.base_env_vars {
        Some(0) => "an empty environment".to_owned(),
        Some(n) => format!("the environment of `schedule add` ({n} variables)"),
        None => "the daemon's environment".to_owned(),
    };
    let dir = s
        .run
        .cwd
        .as_ref()
        .map_or_else(|| "the daemon's directory".to_owned(), |d| d.display().to_string());
    format!("in {dir}, with {env}")
}

/// The ENV cell: the captured environment's size, or whose environment the runs get.
fn env_words(s: &ScheduleInfo) -> String {
    match s.base_env_vars {
        Some(n) => format!("{n} vars"),
        None => "daemon's".into(),
    }
}

/// The runs' directory (the daemon's own when the schedule names none).
fn dir_text(s: &ScheduleInfo) -> String {
    s.run.cwd.as_ref().map_or_else(|| "daemon's".into(), |d| d.display().to_string())
}

/// `2026-11-23 15:10:00` in the local time zone (chrono reads TZ or /etc/localtime, UTC when
/// neither says).
fn local_time(unix_ms: u64) -> String {
    let at = i64::try_from(unix_ms).ok().and_then(chrono::DateTime::from_timestamp_millis);
    match at {
        Some(at) => at.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M:%S").to_string(),
        // Beyond what a calendar can name (hundreds of millennia away): no time to show.
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_fire_is_a_local_date_and_time() {
        // 2023-11-14 22:13:20.123 UTC, in whatever zone this machine is in.
        let shown = super::local_time(1_700_000_000_123);
        assert_eq!(shown.len(), "2023-11-14 22:13:20".len(), "{shown}");
        assert!(shown.starts_with("2023-11-1") && shown.ends_with(":20"), "{shown}");
        assert_eq!(super::local_time(u64::MAX), "-");
    }
}
