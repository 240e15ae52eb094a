//! Start-up recovery, the owner watch, the retention janitor and the orphan reaper.
//!
//! Before the daemon serves its first request, [`start_up`] recovers what earlier daemons left
//! running (their owner died: terminate what is left, mark them `failed`) and loads the finished
//! sessions they kept, so `list`/`read`/`grep` by id keep working across a crash. Then the
//! janitor task sweeps finished sessions older than the retention period: once at start-up and
//! every sweep interval (`DaemonConfig::sweep_interval`) after, until the daemon stops. Neither ever touches a running
//! session, nor another live process's sessions (see `stockade_engine`'s `recovery` and
//! `retention`).
//!
//! [`watch_owners`] runs every second: it lists the runs of other live processes (a foreground
//! `stockade run`) and recovers at once a session whose owner died while this daemon runs (see
//! `stockade_engine`'s `others`), writes again the records a full disk held back, and stops the
//! daemon (said in its log) once its state directory was deleted; beside it
//! a watchdog looks at the output drain every second. When the
//! daemon is PID 1 of its PID namespace (a container's init) or a child subreaper (the
//! default), [`reap_orphans`] reaps every orphan that lands on it (Linux-only).

use std::sync::Arc;
use std::time::Duration;

use stockade_engine::OWNER_WATCH_INTERVAL;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::config::MIN_SWEEP_INTERVAL;
use crate::state::Shared;

/// Test hook (feature `test-hooks` only): milliseconds start-up recovery takes longer, as a
/// recovery of gigabytes of output does.
#[cfg(feature = "test-hooks")]
pub(crate) const RECOVERY_DELAY_ENV: &str = "STOCKADE_TEST_RECOVERY_DELAY_MS";

/// Recovers the sessions of dead daemons and loads the finished ones. Never fails the start:
/// what could not be done is logged.
pub(crate) async fn start_up(shared: &Shared) {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var(RECOVERY_DELAY_ENV).ok().and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    match stockade_engine::recover(&shared.engine).await {
        Ok(report) => {
            shared.metrics.recovered(report.recovered.len());
            for r in &report.recovered {
                tracing::warn!(id = %r.id, reason = %r.reason, "recovered a session whose daemon died");
            }
            for w in &report.warnings {
                tracing::warn!("recovery: {w}");
            }
            if !report.owner_alive.is_empty() {
                tracing::info!(sessions = ?report.owner_alive, "running sessions of a live owner left alone");
            }
            tracing::info!(
                recovered = report.recovered.len(),
                loaded = report.loaded,
                pruned = report.pruned.len(),
                "recovery done"
            );
        }
        Err(e) => tracing::warn!(error = %e, "crash recovery did not run"),
    }
}

/// Sweeps expired sessions now and then every `interval`, until `stop` is cancelled.
pub(crate) async fn run(
    shared: Arc<Shared>,
    retention: Duration,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval.max(MIN_SWEEP_INTERVAL));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let report = tokio::select! {
            r = stockade_engine::sweep_expired(&shared.engine, retention) => r,
            () = stop.cancelled() => return,
        };
        for w in &report.warnings {
            tracing::warn!("retention: {w}");
        }
        if !report.forgotten.is_empty() || !report.removed_dirs.is_empty() {
            tracing::info!(
                forgotten = report.forgotten.len(),
                removed_dirs = report.removed_dirs.len(),
                "retention sweep"
            );
        }
    }
}

/// Every [`OWNER_WATCH_INTERVAL`]: other owners' sessions, dead owners, held-back records.
pub(crate) async fn watch_owners(shared: Arc<Shared>, stop: CancellationToken) {
    // A task of its own: the owner watch may wait on what the drain holds up.
    tokio::spawn(watch_drain(stop.clone()));
    let mut tick = tokio::time::interval(OWNER_WATCH_INTERVAL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut home_was_wrong = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        // The home: said once when it stops being the one checked at start, once when back.
        // Meanwhile nothing of it is looked at or written.
        let problem = home_problem(&shared);
        if home_removed(&shared) {
            // Deleted, not moved: no path will lead to it again, so nothing can be served.
            let running = shared.engine.running_own().len();
            tracing::error!(
                home = %shared.engine.config().state_dir.root().display(),
                running,
                "the state directory was removed (deleted, not moved): the daemon stops now, ending its running sessions; start a new one with any command"
            );
            shared.stop.cancel();
            return;
        }
        if problem.is_none() {
            let report = stockade_engine::sync_others(&shared.engine).await;
            for w in &report.warnings {
                tracing::warn!("owner watch: {w}");
            }
            shared.engine.retry_records().await;
        }
        if problem.is_some() != home_was_wrong {
            match &problem {
                Some(why) => tracing::error!("{why}"),
                None => tracing::info!("the state directory is the one checked at start again"),
            }
            home_was_wrong = problem.is_some();
        }
    }
}

/// Why the daemon is not ready because of its state directory: it is not the one checked and
/// held since start (replaced, or no longer private), so every run is refused.
pub(crate) fn home_problem(shared: &Shared) -> Option<String> {
    shared.engine.config().state_dir.check().err().map(|e| e.to_string())
}

/// Stamps the daemon's heartbeat file (`stockade_proto::home::HEARTBEAT_FILE`, made here with
/// the daemon's pid in it) every `HEARTBEAT_EVERY_MS` while the runtime runs, so a client whose
/// answer is late can tell a hung daemon from a slow one; it beats until the daemon has served
/// its last connection (the caller aborts it, then removes the file). A stamp changes only the
/// inode: a full disk does not stop it.
pub(crate) async fn heartbeat(path: std::path::PathBuf) {
    use rustix::fs::{Timespec, Timestamps, UTIME_OMIT};
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    use stockade_proto::home::HEARTBEAT_EVERY_MS;
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{}", std::process::id()).map(|()| f));
    let beat = match made {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "no heartbeat file: clients will not tell a hung daemon from a slow one");
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_millis(HEARTBEAT_EVERY_MS));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let stamps = Timestamps {
            last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
            last_modification: Timespec {
                tv_sec: i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: now.subsec_nanos().into(),
            },
        };
        let _ = rustix::fs::futimens(&beat, &stamps);
    }
}

/// Whether the state directory the daemon holds was deleted.
pub(crate) fn home_removed(shared: &Shared) -> bool {
    shared.engine.config().state_dir.removed()
}

/// How long output may wait with the drain thread making no progress before it is called
/// stopped (in `stats`, `/readyz` and the log).
pub(crate) const DRAIN_STALL_LIMIT: Duration = Duration::from_secs(10);

/// Looks at the shared drain thread every second until `stop` (see `Drainer::check`).
async fn watch_drain(stop: CancellationToken) {
    let Ok(drainer) = stockade_log::Drainer::global() else { return };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        drainer.check(DRAIN_STALL_LIMIT);
    }
}

/// Why the daemon is not ready because of its drain, while it is stopped.
pub(crate) fn drain_stalled() -> Option<String> {
    let stalled_for = stockade_log::Drainer::global().ok()?.health().stalled_for?;
    Some(format!(
        "the output drain has stopped for {} s: output is waiting and no session is being read",
        stalled_for.as_secs()
    ))
}

/// How often PID 1 looks for orphans to reap (and at once on `SIGCHLD`).
const REAP_INTERVAL: Duration = Duration::from_millis(500);
/// As a child subreaper, how long after a `SIGCHLD` to look: by then the sessions' roots that
/// exited are reaped by their own supervisors, so what is left is an orphan nobody waits for.
const SUBREAPER_SETTLE: Duration = Duration::from_secs(1);

/// As PID 1 of a PID namespace, or as a child subreaper (the default), reaps every orphan that
/// lands on this process until `stop`: a session's process that outlived its parent and then
/// died is this process's zombie, and nobody else will reap it. Each look is one `waitid`
/// (`WNOWAIT`) unless there is a zombie child; only then is `/proc` scanned.
pub(crate) async fn reap_orphans(shared: Arc<Shared>, stop: CancellationToken) {
    let pid1 = std::process::id() == 1;
    if !pid1 && !shared.engine.containment().subreaper {
        return;
    }
    if pid1 {
        tracing::info!("running as PID 1: reaping orphans");
    }
    // A subreaper has no reason to look but a child's exit.
    let interval = if pid1 { REAP_INTERVAL } else { Duration::from_secs(3600) };
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let child = async {
            match sigchld.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => {}
            () = child => {
                if !pid1 {
                    tokio::select! {
                        () = tokio::time::sleep(SUBREAPER_SETTLE) => {}
                        () = stop.cancelled() => {}
                    }
                }
            }
            () = stop.cancelled() => {}
        }
        let engine = Arc::clone(&shared.engine);
        let _ = tokio::task::spawn_blocking(move || engine.reap_orphans()).await;
        if stop.is_cancelled() {
            return;
        }
    }
}
