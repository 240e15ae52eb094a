//! Retention: finished sessions older than the retention period are deleted (record and spool),
//! whether this engine keeps them or an earlier process left them behind.
//!
//! The sweep never touches a running session (this engine's or anyone's: a record in a
//! non-terminal state is recovery's business, never the janitor's), never a session whose owner
//! is alive, and never an instance folder of a live process. Bounded by count, not age, is the
//! engine's `max_finished` (see `Engine::prune_finished`); this is the bound by age.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::engine::Engine;
use crate::registry::{self, RecordEntry, RecordError};
use crate::session::unix_ms;
use crate::state_dir::StateDir;
use stockade_procfs::Liveness;

/// How long finished sessions are kept by default: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// What one sweep did.
#[derive(Debug, Clone, Default)]
pub struct SweepReport {
    /// Sessions this engine kept that were forgotten (record and spool deleted).
    pub forgotten: Vec<String>,
    /// Session directories nobody kept that were deleted.
    pub removed_dirs: Vec<PathBuf>,
    /// Problems seen (corrupt records, deletions that failed).
    pub warnings: Vec<String>,
}

/// Deletes every finished session that ended more than `retention` ago (see the module docs
/// of `retention`). Running sessions and live owners' sessions are never touched.
pub async fn sweep_expired(engine: &Engine, retention: Duration) -> SweepReport {
    let now = unix_ms(SystemTime::now());
    let cutoff = now.saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
    let mut report = SweepReport::default();
    for session in engine.sessions() {
        let record = session.record();
        // Another live process's session (a foreground run still printing it) is its own.
        let live_owner =
            session.is_foreign() && record.owner.is_some_and(|o| o.liveness() == Liveness::Alive);
        let expired = record.state.is_terminal()
            && !live_owner
            && record.finished_at_ms.unwrap_or(record.started_at_ms) <= cutoff;
        if expired && engine.forget(session.id()).await.is_ok() {
            report.forgotten.push(record.id);
        }
    }
    let known: HashSet<String> = engine.sessions().iter().map(|s| s.id().to_owned()).collect();
    let state_dir = engine.config().state_dir.clone();
    let own = engine.config().instance.clone();
    let swept =
        tokio::task::spawn_blocking(move || sweep_dirs(&state_dir, &own, &known, cutoff)).await;
    match swept {
        Ok((removed, warnings)) => {
            report.removed_dirs = removed;
            report.warnings.extend(warnings);
        }
        Err(e) => report.warnings.push(format!("the directory sweep did not run: {e}")),
    }
    report
}

/// Deletes expired session directories of other instances that nobody keeps, then the instance
/// folders left empty. Returns what was removed and the warnings.
fn sweep_dirs(
    state_dir: &StateDir,
    own: &str,
    known: &HashSet<String>,
    cutoff: u64,
) -> (Vec<PathBuf>, Vec<String>) {
    let mut by_instance: BTreeMap<String, Vec<RecordEntry>> = BTreeMap::new();
    for entry in registry::scan(state_dir) {
        by_instance.entry(entry.instance.clone()).or_default().push(entry);
    }
    let mut removed = Vec::new();
    let mut warnings = Vec::new();
    for (instance, entries) in &by_instance {
        if instance == own || instance_is_live(instance, entries) {
            continue;
        }
        for entry in entries.iter().filter(|e| !known.contains(&e.id)) {
            let expired = match &entry.record {
                Ok(r) if r.state.is_terminal() => {
                    r.finished_at_ms.unwrap_or(r.started_at_ms) <= cutoff
                }
                Ok(_) => false, // running: recovery's business, never pruned
                Err(RecordError::Missing { .. }) => modified_ms(&entry.dir) <= cutoff,
                Err(e) => {
                    warnings.push(format!("{e}; not swept"));
                    false
                }
            };
            if !expired {
                continue;
            }
            match std::fs::remove_dir_all(&entry.dir) {
                Ok(()) => removed.push(entry.dir.clone()),
                Err(e) => warnings.push(format!("cannot delete {}: {e}", entry.dir.display())),
            }
        }
    }
    // Instance folders of processes that are gone, once empty (rmdir refuses a non-empty one).
    if let Ok(dirs) = std::fs::read_dir(state_dir.spool_root()) {
        for dir in dirs.flatten() {
            let Some(name) = dir.file_name().to_str().map(str::to_owned) else { continue };
            let entries = by_instance.get(&name).map_or(&[][..], Vec::as_slice);
            if name != own && !instance_is_live(&name, entries) {
                // Directories it made ahead of time and never used go with it.
                crate::slots::remove_leftovers(&dir.path());
                let _ = std::fs::remove_dir(dir.path());
            }
        }
    }
    (removed, warnings)
}

/// Whether a live process may still use this instance folder: one of its records names a live
/// owner, or the pid in its name (`daemon-<pid>-<ms>`, `run-<secs>-<pid>`) is running (which
/// may be a recycled pid: then the folder is only kept longer than needed).
pub(crate) fn instance_is_live(instance: &str, entries: &[RecordEntry]) -> bool {
    let owner_alive = entries.iter().any(|e| {
        e.record
            .as_ref()
            .ok()
            .and_then(|r| r.owner)
            .is_some_and(|o| o.liveness() == Liveness::Alive)
    });
    owner_alive
        || instance_pid(instance)
            .is_some_and(|pid| stockade_procfs::liveness(pid, None) == Liveness::Alive)
}

/// The pid in an instance name, for the names Stockade gives.
fn instance_pid(instance: &str) -> Option<u32> {
    if let Some(rest) = instance.strip_prefix("daemon-") {
        return rest.split('-').next()?.parse().ok();
    }
    if let Some(rest) = instance.strip_prefix("run-") {
        return rest.split('-').nth(1)?.parse().ok();
    }
    None
}

/// A directory's modification time in ms since the epoch (0 if unknown: counts as old).
fn modified_ms(dir: &Path) -> u64 {
    std::fs::metadata(dir).and_then(|m| m.modified()).map_or(0, unix_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_give_their_pid() {
        assert_eq!(instance_pid("daemon-1234-1700000000000"), Some(1234));
        assert_eq!(instance_pid("daemon-1234-1700000000000-2"), Some(1234));
        assert_eq!(instance_pid("run-1700000000-77"), Some(77));
        assert_eq!(instance_pid("t1-2"), None);
    }
}
