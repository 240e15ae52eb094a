//! Start-up recovery and the retention janitor.
//!
//! Before the daemon serves its first request, [`start_up`] recovers what earlier daemons left
//! running (their owner died: terminate what is left, mark them `failed`) and loads the finished
//! sessions they kept, so `list`/`read`/`grep` by id keep working across a crash. Then the
//! janitor task sweeps finished sessions older than the retention period: once at start-up and
//! every sweep interval (`DaemonConfig::sweep_interval`) after, until the daemon stops. Neither ever touches a running
//! session, nor another live process's sessions (see `stockade_core`'s `recovery` and
//! `retention`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::config::MIN_SWEEP_INTERVAL;
use crate::state::Shared;

/// Recovers the sessions of dead daemons and loads the finished ones. Never fails the start:
/// what could not be done is logged.
pub(crate) async fn start_up(shared: &Shared) {
    match shared.engine.recover().await {
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
            r = shared.engine.sweep_expired(retention) => r,
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
