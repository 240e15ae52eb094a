//! When a schedule's ticks fall: a fixed interval (`humantime`) or a cron expression (`croner`,
//! in the daemon's local time). Times are milliseconds since the Unix epoch.

use std::str::FromStr as _;
use std::time::Duration;

use chrono::{Local, TimeZone as _};
use croner::Cron;

/// Most ticks counted one by one when a cron schedule missed many (the count saturates here).
const MAX_COUNTED_TICKS: u64 = 10_000;

/// A schedule's timing.
#[derive(Debug, Clone)]
pub(crate) enum Timing {
    /// Every this long, keeping the phase of the first tick.
    Every(Duration),
    /// A cron expression.
    Cron(Box<Cron>),
}

impl Timing {
    /// Parse exactly one of `every` and `cron`; an interval shorter than `min` is refused. The
    /// error is one sentence for the person who typed it.
    pub(crate) fn parse(
        every: Option<&str>,
        cron: Option<&str>,
        min: Duration,
    ) -> Result<Timing, String> {
        match (every, cron) {
            (Some(_), Some(_)) => {
                Err("give either an interval (every) or a cron expression, not both".into())
            }
            (None, None) => {
                Err("give an interval (every, e.g. 30s) or a cron expression (e.g. '*/5 * * * *')"
                    .into())
            }
            (Some(every), None) => {
                let d = humantime::parse_duration(every.trim()).map_err(|e| {
                    format!(
                        "the interval {every:?} is not a duration ({e}); write e.g. 30s, 5m or 1h"
                    )
                })?;
                if d < min {
                    return Err(format!(
                        "the interval {every:?} is shorter than the minimum of {}; ask for a longer one",
                        humantime::format_duration(min)
                    ));
                }
                Ok(Timing::Every(d))
            }
            (None, Some(expr)) => {
                let cron = Cron::from_str(expr.trim()).map_err(|e| {
                    format!(
                        "the cron expression {expr:?} is not valid ({e}); write e.g. '*/5 * * * *'"
                    )
                })?;
                let t = Timing::Cron(Box::new(cron));
                if t.next_after(None, now_ms()).is_none() {
                    return Err(format!("the cron expression {expr:?} never fires"));
                }
                Ok(t)
            }
        }
    }

    /// The first tick strictly after `now`. For an interval, the phase of `prev` (the tick just
    /// handled) is kept, and ticks that are already past are skipped, never queued; without
    /// `prev` the first tick is one interval from `now`.
    pub(crate) fn next_after(&self, prev: Option<u64>, now: u64) -> Option<u64> {
        match self {
            Timing::Every(d) => {
                let step = (d.as_millis() as u64).max(1);
                let Some(prev) = prev else { return now.checked_add(step) };
                if prev > now {
                    return Some(prev);
                }
                let behind = (now - prev) / step + 1;
                prev.checked_add(behind.checked_mul(step)?)
            }
            Timing::Cron(cron) => {
                let start = Local.timestamp_millis_opt(now as i64).earliest()?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                u64::try_from(next.timestamp_millis()).ok()
            }
        }
    }

    /// How many ticks fall in `[from, to]` (saturating for cron at [`MAX_COUNTED_TICKS`]).
    pub(crate) fn ticks_between(&self, from: u64, to: u64) -> u64 {
        if from > to {
            return 0;
        }
        match self {
            Timing::Every(d) => (to - from) / (d.as_millis() as u64).max(1) + 1,
            Timing::Cron(_) => {
                let mut n = 1;
                let mut t = from;
                while n < MAX_COUNTED_TICKS {
                    match self.next_after(None, t) {
                        Some(next) if next <= to => {
                            n += 1;
                            t = next;
                        }
                        _ => break,
                    }
                }
                n
            }
        }
    }
}

/// Now, ms since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn bad_input_is_one_sentence() {
        let e = Timing::parse(Some("soon"), None, SEC).unwrap_err();
        assert!(e.contains("not a duration"), "{e}");
        let e = Timing::parse(Some("10ms"), None, SEC).unwrap_err();
        assert!(e.contains("shorter than the minimum"), "{e}");
        let e = Timing::parse(None, Some("61 * * * *"), SEC).unwrap_err();
        assert!(e.contains("not valid"), "{e}");
        assert!(Timing::parse(Some("1s"), Some("* * * * *"), SEC).is_err());
        assert!(Timing::parse(None, None, SEC).is_err());
    }

    #[test]
    fn an_interval_keeps_its_phase_and_never_queues_missed_ticks() {
        let t = Timing::parse(Some("10s"), None, SEC).unwrap();
        assert_eq!(t.next_after(None, 1_000), Some(11_000));
        assert_eq!(t.next_after(Some(11_000), 11_005), Some(21_000));
        // 95 s late: the next tick is the first one after now, on the same phase.
        assert_eq!(t.next_after(Some(11_000), 106_000), Some(111_000));
        assert_eq!(t.ticks_between(11_000, 106_000), 10);
    }

    #[test]
    fn cron_ticks_come_from_the_expression() {
        let t = Timing::parse(None, Some("*/5 * * * *"), SEC).unwrap();
        let now = now_ms();
        let next = t.next_after(None, now).unwrap();
        assert!(next > now && next - now <= 5 * 60 * 1000);
        assert_eq!(next % (60 * 1000), 0, "on a minute boundary");
        assert_eq!(t.ticks_between(next, next + 10 * 60 * 1000), 3);
    }
}
