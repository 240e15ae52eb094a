//! The schedule methods' parameters and results: `schedule.add`, `.list`, `.remove`, `.pause`,
//! `.resume`, `.runs`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Capture, DiskPolicy, SessionState};

/// Smallest interval a schedule may have (`every`); shorter ones are refused.
pub const MIN_SCHEDULE_INTERVAL_MS: u64 = 1_000;
/// Most schedules one daemon keeps.
pub const MAX_SCHEDULES: usize = 256;
/// Finished runs kept per schedule by default (oldest forgotten first, never an active one).
pub const DEFAULT_SCHEDULE_KEEP_RUNS: usize = 20;
/// Largest `keep_runs` a schedule may ask for.
pub const MAX_SCHEDULE_KEEP_RUNS: usize = 1_000;
/// Bytes the spools of one schedule's finished runs may hold together by default; past it the
/// oldest finished runs are forgotten.
pub const DEFAULT_SCHEDULE_DISK_BUDGET: u64 = 1024 * 1024 * 1024;

/// What a schedule does with the ticks it missed while the daemon was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// At start-up, fire once for all the missed ticks together (default), never a burst.
    #[default]
    Once,
    /// Drop the missed ticks; fire at the next tick.
    Skip,
}

/// The `run` a schedule fires each time: a background, non-PTY run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRunTemplate {
    /// The shell command string.
    pub command: String,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The environment each run starts from instead of the daemon's (as `run`'s `base_env`):
    /// `schedule add` sends the caller's. Kept with the schedule; never in an answer, which
    /// counts its variables in `base_env_vars` instead (they may hold secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_env: Option<BTreeMap<String, String>>,
    /// The shell (default `/bin/sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<PathBuf>,
    /// Login shell (`-lc`).
    #[serde(default)]
    pub login: bool,
    /// Terminate each run's tree after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Capture mode.
    #[serde(default)]
    pub capture: Capture,
    /// Hot-tail size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_cap: Option<usize>,
    /// Disk cap of each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_cap: Option<u64>,
    /// Disk-cap policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_policy: Option<DiskPolicy>,
    /// The sandbox of each run (absent: the daemon's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::Sandbox>,
}

/// `schedule.add` parameters. Exactly one of `every` and `cron`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleAddParams {
    /// The schedule's name: 1–64 of `A-Z a-z 0-9 . _ -`, unique in the daemon.
    pub name: String,
    /// A fixed interval, `humantime` syntax (`30s`, `5m`, `1h 30m`); at least
    /// [`MIN_SCHEDULE_INTERVAL_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// A cron expression (5 fields, or 6 with seconds first), in the daemon's local time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The `source` of every run (default `schedule:<name>`): a fire while a session with this
    /// source is active is skipped and counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Missed ticks after downtime (default `once`).
    #[serde(default)]
    pub catch_up: CatchUp,
    /// Finished runs kept (default [`DEFAULT_SCHEDULE_KEEP_RUNS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_runs: Option<usize>,
    /// Bytes the spools of finished runs may hold (default [`DEFAULT_SCHEDULE_DISK_BUDGET`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_budget: Option<u64>,
    /// What each fire runs.
    pub run: ScheduleRunTemplate,
}

/// Parameters naming one schedule (`schedule.remove`, `schedule.pause`, `schedule.resume`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleNameParams {
    /// The schedule's name.
    pub name: String,
}

/// One schedule as `schedule.list` (and `add`, `remove`, `pause`, `resume`) show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleInfo {
    /// The name.
    pub name: String,
    /// The `source` of its runs.
    pub source: String,
    /// The interval, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// The cron expression, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// What each fire runs (without `base_env` in answers).
    pub run: ScheduleRunTemplate,
    /// How many variables the runs' base environment holds, when one was captured (absent: the
    /// runs start from the daemon's environment). Only answers carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_env_vars: Option<usize>,
    /// Whether it is paused.
    pub paused: bool,
    /// Missed-tick policy.
    pub catch_up: CatchUp,
    /// Finished runs kept.
    pub keep_runs: usize,
    /// Bytes the spools of finished runs may hold.
    pub disk_budget: u64,
    /// When it was added, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// The last tick that started a session (a skipped tick does not move it), ms since the Unix
    /// epoch.
    #[serde(default)]
    pub last_fire_ms: Option<u64>,
    /// The next tick, ms since the Unix epoch (`None` when paused or the cron has no next).
    #[serde(default)]
    pub next_fire_ms: Option<u64>,
    /// Ticks that started a session.
    pub fires: u64,
    /// Ticks skipped because a session with this source was still active.
    pub skipped_overlap: u64,
    /// Ticks missed while the daemon was down and not caught up.
    pub missed: u64,
    /// Ticks whose run could not start (a limit, a bad cwd, …); `last_error` says why.
    pub failed_fires: u64,
    /// Why the last failed fire failed.
    #[serde(default)]
    pub last_error: Option<String>,
    /// The session of the last fire.
    #[serde(default)]
    pub last_session: Option<String>,
    /// The session with this source running now, if any.
    #[serde(default)]
    pub active_session: Option<String>,
}

/// `schedule.list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleListResult {
    /// Every schedule, by name.
    pub schedules: Vec<ScheduleInfo>,
}

/// `schedule.fire` result: what firing a schedule now came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleFireResult {
    /// The schedule, counters updated.
    pub schedule: ScheduleInfo,
    /// The session started, if one was.
    pub session: Option<String>,
    /// Skipped: the previous run (`schedule.active_session`) is still active.
    pub skipped: bool,
    /// Why the run could not start, if it could not.
    pub error: Option<String>,
}

/// `schedule.runs` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRunsParams {
    /// The schedule's name.
    pub name: String,
    /// Most runs to show (default all kept).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One run of a schedule: a session with its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRun {
    /// The session id (`read`, `grep`, `kill` work on it).
    pub id: String,
    /// The state.
    #[serde(flatten)]
    pub state: SessionState,
    /// Start, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// End, ms since the Unix epoch.
    pub finished_at_ms: Option<u64>,
    /// Wall time so far or in all.
    pub wall_time_ms: u64,
    /// Bytes printed.
    pub total_bytes: u64,
    /// Bytes on disk in its spool.
    pub spooled_bytes: u64,
}

/// `schedule.runs` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRunsResult {
    /// The schedule.
    pub schedule: ScheduleInfo,
    /// Its runs the daemon keeps, newest first.
    pub runs: Vec<ScheduleRun>,
}
