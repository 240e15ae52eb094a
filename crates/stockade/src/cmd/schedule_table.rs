//! `stockade schedule list` as a table: NAME, WHEN, NEXT (absolute local time), LEFT, LAST,
//! STATE, FIRES, SKIPPED — the columns a cron or systemd-timer user looks for.

use std::time::UNIX_EPOCH;

use comfy_table::{Cell, CellAlignment};
use stockade_proto::rpc::ScheduleInfo;

use crate::out;

pub fn table(schedules: &[ScheduleInfo]) -> String {
    let now = out::now_ms();
    let mut table =
        out::table(["NAME", "WHEN", "NEXT", "LEFT", "LAST", "STATE", "FIRES", "SKIPPED"], false);
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
            Cell::new(s.fires).set_alignment(CellAlignment::Right),
            Cell::new(s.skipped_overlap).set_alignment(CellAlignment::Right),
        ]);
    }
    out::table_text(table)
}

/// `2026-11-23 15:10:00` in the local time zone (UTC if the zone cannot be read).
fn local_time(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) as libc::time_t;
    // SAFETY: localtime_r reads `secs` and writes the `tm` we own; both outlive the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
        return humantime::format_rfc3339_seconds(
            UNIX_EPOCH + std::time::Duration::from_secs(secs as u64),
        )
        .to_string();
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}
