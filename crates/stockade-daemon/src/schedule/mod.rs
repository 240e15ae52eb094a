//! Scheduled runs: named, persisted templates for `run`, fired on an interval or a cron
//! expression by one task of the daemon. The rules of `docs/protocol.md` ("Scheduled runs"),
//! enforced here:
//!
//! * **Skip, never queue.** Each fire is an ordinary background session whose `source` is the
//!   schedule's key (default `schedule:<name>`). The engine's dedup by source decides, under its
//!   source lock, whether a session with that source is still active: if so the tick is skipped
//!   and counted (`skipped_overlap`); nothing is enqueued, so a slow job can never pile ticks up
//!   behind it. A session whose owner daemon died is not active: start-up recovery (which runs
//!   before this task starts) marks it `failed` and it blocks nothing.
//! * **Claim before side effects.** The order of one fire is:
//!   1. `Engine::start` spawns the run and writes its `session.json` durably (the claim: a record
//!      with this source and a start time at or after the tick's `next_fire_ms`);
//!   2. only then the schedule advances (`last_fire_ms`, `next_fire_ms`, counters) in memory and
//!      `schedules.json` is rewritten atomically (temporary file, `fsync`, `rename`).
//!
//!   A crash between 1 and 2 leaves the schedule pointing at the tick it already fired. At the
//!   next start-up, [`Scheduler::reconcile`] finds the claim (a session of this source that
//!   started at or after the persisted `next_fire_ms`), counts the tick as fired and advances
//!   past it: no tick is lost and none is doubled. `STOCKADE_TEST_CRASH_AFTER_CLAIM=1` makes the
//!   daemon `abort()` right there, so a test can prove it.
//!
//!   **The one window left** is inside step 1: between the fork and the record reaching the disk
//!   (microseconds). A crash there leaves a process with no record and the schedule not advanced,
//!   so the tick fires once more after restart (at most one double, never a lost tick); the
//!   orphan carries the dead instance's marker but no record for recovery to find.
//! * **At most one catch-up.** Ticks missed while the daemon was down are coalesced: with
//!   `catch_up: once` (default) one fire at start-up, with `skip` none; either way the next tick
//!   is the first one after now, and the skipped ones are counted as `missed`. Ticks that fall
//!   behind while running (a busy machine) are likewise never fired in a burst.
//! * **Bounds.** At most [`MAX_SCHEDULES`] schedules; per schedule, at most `keep_runs` finished
//!   runs and `disk_budget` bytes of their spools (the oldest finished runs are forgotten first,
//!   never an active one).
//!
//! The task sleeps until the earliest next tick (at most [`MAX_SLEEP`], so a wall-clock change is
//! noticed), wakes early when a schedule changes, and stops with the daemon's token.

mod store;
mod timing;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use stockade_engine::{Engine, RunSpec, Session};
use stockade_proto::rpc::{
    CatchUp, DEFAULT_SCHEDULE_DISK_BUDGET, DEFAULT_SCHEDULE_KEEP_RUNS, MAX_SCHEDULE_KEEP_RUNS,
    MAX_SCHEDULES, MIN_SCHEDULE_INTERVAL_MS, RpcError, ScheduleAddParams, ScheduleFireResult,
    ScheduleInfo, ScheduleRun, ScheduleRunsResult, code,
};
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

use crate::error::rpc_error;
use timing::{Timing, now_ms};

/// Longest the task sleeps without looking at the clock again.
pub(crate) const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Test hook (read only with the `test-hooks` feature): when set to `1`, the daemon aborts right after a fire's session record is
/// persisted and before the schedule advances (the crash window `reconcile` closes).
pub const CRASH_AFTER_CLAIM_ENV: &str = "STOCKADE_TEST_CRASH_AFTER_CLAIM";
/// Test hook (read only with the `test-hooks` feature): the smallest interval allowed, in milliseconds, instead of
/// [`MIN_SCHEDULE_INTERVAL_MS`] (for tests that need many fires quickly).
pub const MIN_INTERVAL_ENV: &str = "STOCKADE_TEST_MIN_SCHEDULE_INTERVAL_MS";
/// Longest schedule name.
const MAX_NAME_LEN: usize = 64;

/// Why a schedule request was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScheduleError {
    /// The request is not valid; the sentence says why.
    #[error("{0}")]
    Invalid(String),
    /// No schedule with this name.
    #[error("no schedule {0:?}; `stockade schedule list` lists them")]
    NoSuchSchedule(String),
    /// Too many schedules.
    #[error("the daemon already has {MAX_SCHEDULES} schedules, the limit; remove one first")]
    TooMany,
    /// `schedules.json` could not be written.
    #[error("cannot save the schedules to {path}: {source}")]
    Storage {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl From<ScheduleError> for RpcError {
    fn from(e: ScheduleError) -> RpcError {
        let code = match &e {
            ScheduleError::Invalid(_) => code::INVALID_PARAMS,
            ScheduleError::NoSuchSchedule(_) => code::NO_SUCH_SCHEDULE,
            ScheduleError::TooMany => code::LIMIT_REACHED,
            ScheduleError::Storage { .. } => code::STORAGE,
        };
        rpc_error(code, e.to_string())
    }
}

/// A schedule and its parsed timing.
struct Entry {
    schedule: ScheduleInfo,
    timing: Timing,
}

/// Every schedule of the daemon. Handlers and the task change it under one lock, and every
/// change is persisted before the lock is released.
pub(crate) struct Scheduler {
    path: PathBuf,
    entries: Mutex<Vec<Entry>>,
    wake: Notify,
    min_interval: Duration,
    crash_after_claim: bool,
    /// Every fire is counted in the spawn metric, like a start at any door.
    metrics: crate::metrics::Metrics,
    /// A tick's fire is one line of the audit log (door `schedule`), when there is one.
    audit: Option<crate::audit::Audit>,
}

/// What one tick came to.
enum Outcome {
    Fired(String),
    Skipped,
    Failed(String),
}

impl Scheduler {
    /// Load the schedules of state directory `home` (none if the file is missing; a corrupt
    /// file is moved aside with a warning, and so is a schedule whose timing no longer parses).
    pub(crate) fn load(
        home: &Path,
        metrics: crate::metrics::Metrics,
        audit: Option<crate::audit::Audit>,
    ) -> Scheduler {
        let path = store::path(home);
        let entries = store::load(&path)
            .into_iter()
            .filter_map(|schedule| {
                // Persisted schedules were validated when added: no minimum applies here.
                match Timing::parse(schedule.every.as_deref(), schedule.cron.as_deref(), Duration::ZERO) {
                    Ok(timing) => Some(Entry { schedule, timing }),
                    Err(e) => {
                        tracing::warn!(name = %schedule.name, error = %e, "dropping a schedule whose timing does not parse");
                        None
                    }
                }
            })
            .collect();
        // The test hooks are read only in a build with the `test-hooks` feature (the tests').
        #[cfg(feature = "test-hooks")]
        let (min_interval, crash_after_claim) = (
            std::env::var(MIN_INTERVAL_ENV)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(Duration::from_millis(MIN_SCHEDULE_INTERVAL_MS), Duration::from_millis),
            std::env::var(CRASH_AFTER_CLAIM_ENV).is_ok_and(|v| v == "1"),
        );
        #[cfg(not(feature = "test-hooks"))]
        let (min_interval, crash_after_claim) =
            (Duration::from_millis(MIN_SCHEDULE_INTERVAL_MS), false);
        Scheduler {
            path,
            entries: Mutex::new(entries),
            wake: Notify::new(),
            min_interval,
            crash_after_claim,
            metrics,
            audit,
        }
    }

    async fn save(&self, entries: &[Entry]) -> Result<(), ScheduleError> {
        let schedules: Vec<ScheduleInfo> = entries.iter().map(|e| e.schedule.clone()).collect();
        let path = self.path.clone();
        let saved = tokio::task::spawn_blocking(move || store::save(&path, &schedules))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        saved.map_err(|source| ScheduleError::Storage { path: self.path.clone(), source })
    }

    /// Add a schedule; its first tick is one interval (or the next cron time) from now.
    pub(crate) async fn add(
        &self,
        engine: &Engine,
        p: ScheduleAddParams,
    ) -> Result<ScheduleInfo, ScheduleError> {
        validate_name(&p.name)?;
        if p.run.command.trim().is_empty() {
            return Err(ScheduleError::Invalid(
                "the command is empty: give a shell command to run".into(),
            ));
        }
        if let Some(cwd) = &p.run.cwd
            && !cwd.is_dir()
        {
            return Err(ScheduleError::Invalid(format!(
                "the working directory {} is not a directory",
                cwd.display()
            )));
        }
        let timing = Timing::parse(p.every.as_deref(), p.cron.as_deref(), self.min_interval)
            .map_err(ScheduleError::Invalid)?;
        let keep_runs = p.keep_runs.unwrap_or(DEFAULT_SCHEDULE_KEEP_RUNS);
        if keep_runs > MAX_SCHEDULE_KEEP_RUNS {
            return Err(ScheduleError::Invalid(format!(
                "keep_runs {keep_runs} is above the limit of {MAX_SCHEDULE_KEEP_RUNS}"
            )));
        }
        let source = p.source.unwrap_or_else(|| format!("schedule:{}", p.name));
        if source.trim().is_empty() {
            return Err(ScheduleError::Invalid("the source key is empty".into()));
        }
        let now = now_ms();
        let mut entries = self.entries.lock().await;
        if entries.iter().any(|e| e.schedule.name == p.name) {
            return Err(ScheduleError::Invalid(format!(
                "a schedule named {:?} already exists; remove it first or choose another name",
                p.name
            )));
        }
        if let Some(other) = entries.iter().find(|e| e.schedule.source == source) {
            return Err(ScheduleError::Invalid(format!(
                "schedule {:?} already uses the source {source:?}; give this one another --source",
                other.schedule.name
            )));
        }
        if entries.len() >= MAX_SCHEDULES {
            return Err(ScheduleError::TooMany);
        }
        let schedule = ScheduleInfo {
            name: p.name,
            source,
            every: p.every,
            cron: p.cron,
            run: p.run,
            base_env_vars: None,
            paused: false,
            catch_up: p.catch_up,
            keep_runs,
            disk_budget: p.disk_budget.unwrap_or(DEFAULT_SCHEDULE_DISK_BUDGET),
            created_at_ms: now,
            last_fire_ms: None,
            next_fire_ms: timing.next_after(None, now),
            fires: 0,
            skipped_overlap: 0,
            missed: 0,
            failed_fires: 0,
            last_error: None,
            last_session: None,
            active_session: None,
        };
        entries.push(Entry { schedule, timing });
        if let Err(e) = self.save(&entries).await {
            entries.pop();
            return Err(e);
        }
        let info = entries.last().map(|e| info(engine, &e.schedule));
        drop(entries);
        self.wake.notify_one();
        info.ok_or_else(|| ScheduleError::Invalid("the schedule vanished".into()))
    }

    /// Every schedule, by name.
    pub(crate) async fn list(&self, engine: &Engine) -> Vec<ScheduleInfo> {
        let entries = self.entries.lock().await;
        let mut list: Vec<ScheduleInfo> =
            entries.iter().map(|e| info(engine, &e.schedule)).collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// Remove a schedule. Its runs are left as they are (a running one keeps running).
    pub(crate) async fn remove(
        &self,
        engine: &Engine,
        name: &str,
    ) -> Result<ScheduleInfo, ScheduleError> {
        let mut entries = self.entries.lock().await;
        let i = position(&entries, name)?;
        let removed = entries.remove(i);
        if let Err(e) = self.save(&entries).await {
            entries.insert(i, removed);
            return Err(e);
        }
        drop(entries);
        self.wake.notify_one();
        Ok(info(engine, &removed.schedule))
    }

    /// Pause (no more ticks) or resume (ticks from the next one after now; none are caught up).
    pub(crate) async fn set_paused(
        &self,
        engine: &Engine,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleInfo, ScheduleError> {
        let mut entries = self.entries.lock().await;
        let i = position(&entries, name)?;
        let before = entries[i].schedule.clone();
        let e = &mut entries[i];
        if e.schedule.paused != paused {
            e.schedule.paused = paused;
            e.schedule.next_fire_ms =
                if paused { None } else { e.timing.next_after(None, now_ms()) };
        }
        if let Err(err) = self.save(&entries).await {
            entries[i].schedule = before;
            return Err(err);
        }
        let shown = info(engine, &entries[i].schedule);
        drop(entries);
        self.wake.notify_one();
        Ok(shown)
    }

    /// A schedule and its runs the engine keeps, newest first.
    pub(crate) async fn runs(
        &self,
        engine: &Engine,
        name: &str,
        limit: Option<usize>,
    ) -> Result<ScheduleRunsResult, ScheduleError> {
        let schedule = {
            let entries = self.entries.lock().await;
            entries[position(&entries, name)?].schedule.clone()
        };
        let runs = runs_of(engine, &schedule.source)
            .iter()
            .rev()
            .take(limit.unwrap_or(usize::MAX))
            .map(|s| run_info(s))
            .collect();
        Ok(ScheduleRunsResult { schedule: info(engine, &schedule), runs })
    }

    /// At start-up, after crash recovery: settle each schedule's tick that was claimed but not
    /// advanced (a crash between the two), and coalesce the ticks missed while the daemon was
    /// down per the schedule's catch-up policy.
    pub(crate) async fn reconcile(&self, engine: &Engine) {
        let now = now_ms();
        let mut entries = self.entries.lock().await;
        let mut changed = false;
        for e in entries.iter_mut() {
            let s = &mut e.schedule;
            let Some(due) = s.next_fire_ms else { continue };
            let claim = runs_of(engine, &s.source)
                .into_iter()
                .filter(|r| started_ms(r) >= due)
                .max_by_key(|r| started_ms(r));
            if let Some(claim) = claim {
                tracing::info!(name = %s.name, id = %claim.id(), "a tick fired before the last stop was not recorded; counting it");
                s.fires += 1;
                s.last_fire_ms = Some(started_ms(&claim));
                s.last_session = Some(claim.id().to_owned());
                s.next_fire_ms = e.timing.next_after(Some(due), now.max(started_ms(&claim)));
                changed = true;
            } else if due <= now {
                let late = e.timing.ticks_between(due, now);
                match s.catch_up {
                    // Leave the tick due: the first pass fires it once, then moves past now.
                    CatchUp::Once => s.missed += late.saturating_sub(1),
                    CatchUp::Skip => {
                        s.missed += late;
                        s.next_fire_ms = e.timing.next_after(Some(due), now);
                    }
                }
                changed = true;
            }
        }
        if changed && let Err(e) = self.save(&entries).await {
            tracing::warn!(error = %e, "could not save the schedules after start-up");
        }
    }

    /// How long until the earliest tick (`None`: no schedule is due ever).
    async fn until_next(&self) -> Option<Duration> {
        let entries = self.entries.lock().await;
        let next = entries
            .iter()
            .filter(|e| !e.schedule.paused)
            .filter_map(|e| e.schedule.next_fire_ms)
            .min()?;
        Some(Duration::from_millis(next.saturating_sub(now_ms())))
    }

    /// Fire every schedule whose tick is due, then prune their runs.
    async fn fire_due(&self, engine: &Arc<Engine>, stop: &CancellationToken) {
        let mut prune = Vec::new();
        let mut entries = self.entries.lock().await;
        for i in 0..entries.len() {
            if stop.is_cancelled() {
                break;
            }
            let now = now_ms();
            let e = &entries[i];
            let Some(due) = e.schedule.next_fire_ms.filter(|d| *d <= now && !e.schedule.paused)
            else {
                continue;
            };
            // 1. The claim: the session record is on disk when `start` returns.
            let outcome = self.fire(engine, &e.schedule).await;
            if self.crash_after_claim && matches!(outcome, Outcome::Fired(_)) {
                tracing::error!(
                    "{CRASH_AFTER_CLAIM_ENV}=1: aborting after the claim, before the schedule advances"
                );
                std::process::abort();
            }
            // 2. Only then the schedule advances, and is persisted.
            let e = &mut entries[i];
            let s = &mut e.schedule;
            match outcome {
                Outcome::Fired(id) => {
                    s.fires += 1;
                    s.last_fire_ms = Some(now);
                    s.last_session = Some(id);
                }
                Outcome::Skipped => s.skipped_overlap += 1,
                Outcome::Failed(why) => {
                    s.failed_fires += 1;
                    s.last_error = Some(why);
                }
            }
            s.next_fire_ms = e.timing.next_after(Some(due), now_ms());
            prune.push((s.source.clone(), s.keep_runs, s.disk_budget));
            if let Err(err) = self.save(&entries).await {
                tracing::warn!(error = %err, "could not save the schedules after a tick");
            }
        }
        drop(entries);
        for (source, keep, budget) in prune {
            prune_runs(engine, &source, keep, budget).await;
        }
    }

    /// Fire a schedule now, as a tick would (skipped while its last run is active; counted
    /// alike), without moving its next tick.
    pub(crate) async fn fire_now(
        &self,
        engine: &Arc<Engine>,
        name: &str,
    ) -> Result<ScheduleFireResult, ScheduleError> {
        let mut entries = self.entries.lock().await;
        let i = position(&entries, name)?;
        let outcome = self.fire(engine, &entries[i].schedule).await;
        let s = &mut entries[i].schedule;
        let (session, skipped, error) = match outcome {
            Outcome::Fired(id) => {
                s.fires += 1;
                s.last_fire_ms = Some(now_ms());
                s.last_session = Some(id.clone());
                (Some(id), false, None)
            }
            Outcome::Skipped => {
                s.skipped_overlap += 1;
                (None, true, None)
            }
            Outcome::Failed(why) => {
                s.failed_fires += 1;
                s.last_error = Some(why.clone());
                (None, false, Some(why))
            }
        };
        let (source, keep, budget) = (s.source.clone(), s.keep_runs, s.disk_budget);
        if let Err(err) = self.save(&entries).await {
            // The run has started either way; only its counters may not survive a restart.
            tracing::warn!(error = %err, "could not save the schedules after a fire on request");
        }
        let schedule = info(engine, &entries[i].schedule);
        drop(entries);
        prune_runs(engine, &source, keep, budget).await;
        Ok(ScheduleFireResult { schedule, session, skipped, error })
    }

    /// Start one tick's run, or find its source still active.
    async fn fire(&self, engine: &Arc<Engine>, s: &ScheduleInfo) -> Outcome {
        let spec = RunSpec::scheduled(&s.run, &s.source);
        let command = spec.command.clone();
        let outcome = match crate::spawn::spawn(engine, &self.metrics, spec).await {
            Ok(started) if started.deduplicated => Outcome::Skipped,
            Ok(started) => Outcome::Fired(started.session.id().to_owned()),
            Err(e) => {
                tracing::warn!(name = %s.name, error = %e, "a scheduled run could not start");
                Outcome::Failed(e.to_string())
            }
        };
        if let (Some(audit), Outcome::Fired(id)) = (&self.audit, &outcome) {
            let peer = crate::audit::Peer {
                door: "schedule",
                peer: format!("schedule:{}", s.name),
                token_id: None,
            };
            audit.started(&peer, "run", Some(id), Some(&command));
        }
        outcome
    }
}

/// The scheduler task (after [`Scheduler::reconcile`], which the daemon awaits before serving):
/// sleep until the earliest tick, fire what is due, and again, until `stop`.
pub(crate) async fn run(scheduler: Arc<Scheduler>, engine: Arc<Engine>, stop: CancellationToken) {
    loop {
        let sleep = scheduler.until_next().await.unwrap_or(MAX_SLEEP).min(MAX_SLEEP);
        tokio::select! {
            () = stop.cancelled() => return,
            () = scheduler.wake.notified() => continue,
            () = tokio::time::sleep(sleep) => {}
        }
        scheduler.fire_due(&engine, &stop).await;
    }
}

/// Forget the oldest finished runs of `source` beyond `keep`, and beyond `budget` bytes of
/// spool. An active run is never touched.
async fn prune_runs(engine: &Engine, source: &str, keep: usize, budget: u64) {
    let finished: Vec<Arc<Session>> =
        runs_of(engine, source).into_iter().filter(|s| s.state().is_terminal()).collect();
    let mut bytes: u64 = finished.iter().map(|s| s.log().stats().spooled_bytes).sum();
    let mut left = finished.len();
    for s in finished {
        if left <= keep && bytes <= budget {
            break;
        }
        let spooled = s.log().stats().spooled_bytes;
        if let Err(e) = engine.forget(s.id()).await {
            tracing::debug!(id = %s.id(), error = %e, "a pruned run was already gone");
        }
        bytes = bytes.saturating_sub(spooled);
        left -= 1;
    }
}

/// The sessions with this source, oldest first.
fn runs_of(engine: &Engine, source: &str) -> Vec<Arc<Session>> {
    engine.sessions().into_iter().filter(|s| s.source() == Some(source)).collect()
}

fn started_ms(s: &Session) -> u64 {
    s.started_at().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn run_info(s: &Session) -> ScheduleRun {
    let stats = s.log().stats();
    let started_at_ms = started_ms(s);
    let end = s.end();
    ScheduleRun {
        id: s.id().to_owned(),
        state: end.as_ref().map_or_else(|| s.state(), |e| e.state.clone()),
        started_at_ms,
        finished_at_ms: end.as_ref().map(|e| started_at_ms + e.wall_time.as_millis() as u64),
        wall_time_ms: s.wall_time().as_millis() as u64,
        total_bytes: stats.total_bytes,
        spooled_bytes: stats.spooled_bytes,
    }
}

/// A kept schedule as the protocol shows it: with the session running now, if any, and its
/// base environment counted, not shown (it may hold secrets; it stays in the schedules file).
fn info(engine: &Engine, s: &ScheduleInfo) -> ScheduleInfo {
    let active_session = engine.active_with_source(&s.source).map(|a| a.id().to_owned());
    let mut shown = ScheduleInfo { active_session, ..s.clone() };
    shown.base_env_vars = shown.run.base_env.take().map(|b| b.len());
    shown
}

fn position(entries: &[Entry], name: &str) -> Result<usize, ScheduleError> {
    entries
        .iter()
        .position(|e| e.schedule.name == name)
        .ok_or_else(|| ScheduleError::NoSuchSchedule(name.to_owned()))
}

fn validate_name(name: &str) -> Result<(), ScheduleError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ScheduleError::Invalid(format!(
            "the schedule name {name:?} is not valid: use 1 to {MAX_NAME_LEN} letters, digits, '.', '_' or '-'"
        )))
    }
}
