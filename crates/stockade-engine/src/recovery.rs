//! Crash recovery: what a new engine does, before it serves anyone, with the sessions an
//! earlier process left on disk.
//!
//! For every record in the state directory (other than this engine's own instance):
//!
//! * **running, owner gone** (no process with the owner's pid, or one with another start time):
//!   the owner died without finalising it. Whatever is left of its tree is terminated through the
//!   one terminate routine ([`ProcessTree::adopt`] → [`ProcessTree::terminate`]: the cgroup if
//!   one was recorded and still exists, else the process group — only while the recorded root
//!   is alive with its recorded start time — and the marker scan). A pid whose start time differs
//!   from the record is never signalled. The record is then rewritten as `failed`, reason
//!   `owner daemon died; N processes terminated at recovery`, and the session is loaded as a
//!   finished one so `read`/`grep`/`list` by id keep working on its spool.
//! * **running, owner alive**: another live process (a one-shot `stockade run`, or a daemon of
//!   another home that shares this spool) owns it; it is left alone and reported.
//! * **running, no owner** (a record from before owners were stamped): never guessed at; it is
//!   reported with a warning and left as it is.
//! * **finished, owner gone**: loaded as a finished session (the newest `max_finished` of them;
//!   older ones are pruned, oldest first).
//! * **corrupt**: reported, skipped.
//!
//! Recovery holds `recovery.lock` (an exclusive `flock`) while it runs, so two processes that
//! recover the same state directory at once do it one after the other, and the second finds
//! nothing left to do. It is idempotent: a crash half-way leaves some records running with a
//! dead owner, and the next start-up recovers them again (the terminate routine on a tree that
//! is already gone signals nothing).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustix::fs::{FlockOperation, flock};
use stockade_procfs::Liveness;
use stockade_proto::{Gap, SessionState, TerminateReport};
use tokio::task::JoinSet;

use crate::engine::Engine;
use crate::registry::{
    self, RECORD_VERSION, RecordEntry, RecordError, RecordTotals, SessionRecord,
};
use crate::session::{Session, unix_ms};
use crate::state_dir::StateDir;
use stockade_log::OutputLog;
use stockade_log::SessionDir;
use stockade_proc::{AdoptSpec, Containment, ProcessTree, SessionMarker, TerminateOptions};

/// Name of the lock file recovery holds, in the state directory.
pub(crate) const RECOVERY_LOCK_FILE: &str = "recovery.lock";
/// How every recovered session's reason begins.
pub(crate) const RECOVERY_REASON: &str = "owner daemon died";
/// The gap reason of what a pipe's kernel buffer may have held when the owner died (bytes the
/// command wrote that nobody read: they are gone, and how many is unknown).
pub(crate) const PIPE_LOSS_REASON: &str = "unknown, <= 64 KiB per pipe, daemon died";

/// Recovery could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// The recovery lock could not be taken.
    #[error("cannot take the recovery lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The state directory is no longer the one checked (see `StateDir::check`), or its lock
    /// file is not this user's.
    #[error(transparent)]
    StateDir(#[from] crate::StateDirError),
    /// A blocking step could not run (the runtime is shutting down).
    #[error("recovery was interrupted: {0}")]
    Interrupted(String),
}

/// One session whose owner died, and what recovery did about it.
#[derive(Debug, Clone)]
pub struct RecoveredSession {
    /// The session id.
    pub id: String,
    /// The reason it was marked `failed` with.
    pub reason: String,
    /// What the terminate routine did.
    pub report: TerminateReport,
}

/// What [`recover`] found and did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Sessions whose owner died: terminated and marked `failed`.
    pub recovered: Vec<RecoveredSession>,
    /// Finished sessions (recovered ones included) loaded, readable by id.
    pub loaded: usize,
    /// Finished sessions beyond the limit, deleted oldest first.
    pub pruned: Vec<String>,
    /// Running sessions left alone because their owner is alive.
    pub owner_alive: Vec<String>,
    /// Things an operator should know: records without an owner, corrupt records, spools that
    /// cannot be opened, records that could not be rewritten.
    pub warnings: Vec<String>,
}

/// The held recovery lock (released when dropped).
pub(crate) struct RecoveryLock {
    _file: File,
}

impl RecoveryLock {
    pub(crate) fn acquire(state_dir: &StateDir) -> Result<RecoveryLock, RecoveryError> {
        let path = state_dir.root().join(RECOVERY_LOCK_FILE);
        let lock_err = |source| RecoveryError::Lock { path: path.clone(), source };
        // Below the held directory, and only while the path still leads there.
        let file = state_dir.open_checked(RECOVERY_LOCK_FILE)?;
        flock(&file, FlockOperation::LockExclusive).map_err(|e| lock_err(e.into()))?;
        Ok(RecoveryLock { _file: file })
    }
}

/// What one record asks recovery to do.
enum Plan {
    /// Terminate what is left and mark it failed.
    Recover(SessionRecord, PathBuf),
    /// Load it as a finished session.
    Load(SessionRecord, PathBuf),
}

/// Recovers the sessions earlier processes left running on disk, and loads the finished
/// ones (see the module docs of `recovery`). Call once at start-up, before serving.
pub async fn recover(engine: &Engine) -> Result<RecoveryReport, RecoveryError> {
    let _others = engine.others.lock().await;
    let state_dir = engine.config().state_dir.clone();
    let own = engine.config().instance.clone();
    let (lock, entries) = blocking(move || {
        let lock = RecoveryLock::acquire(&state_dir)?;
        Ok((lock, registry::scan(&state_dir)))
    })
    .await??;
    let mut report = RecoveryReport::default();
    let mut to_recover = Vec::new();
    let mut to_load = Vec::new();
    for entry in entries.into_iter().filter(|e| e.instance != own) {
        match classify(entry, &mut report) {
            Some(Plan::Recover(r, d)) => to_recover.push((r, d)),
            Some(Plan::Load(r, d)) => to_load.push((r, d)),
            None => {}
        }
    }

    // Terminate what the dead owners left, all at once (each waits out its own grace).
    let mut tasks = JoinSet::new();
    for (record, dir) in to_recover {
        let containment = engine.containment_handle().clone();
        let opts = engine.terminate_options();
        tasks.spawn(recover_one(record, dir, containment, opts));
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((recovered, record, dir, warning)) => {
                report.warnings.extend(warning);
                report.recovered.push(recovered);
                to_load.push((record, dir));
            }
            Err(e) => report.warnings.push(format!("a recovery task failed: {e}")),
        }
    }
    report.recovered.sort_by_key(|r| registry::id_number(&r.id));

    // Load the newest finished sessions; delete the oldest beyond the limit.
    let room = engine.config().limits.max_finished;
    to_load.sort_by_key(|(r, _)| std::cmp::Reverse(registry::id_number(&r.id)));
    let excess = to_load.split_off(room.min(to_load.len()));
    let containment = engine.containment_handle().clone();
    let (sessions, pruned, warnings) =
        blocking(move || Ok(load_sessions(to_load, excess, &containment))).await??;
    report.loaded = sessions.len();
    report.pruned = pruned;
    report.warnings.extend(warnings);
    report.pruned.extend(engine.insert_finished(sessions));
    drop(lock);
    Ok(report)
}

/// Decides what to do with one record (or records why nothing is done).
fn classify(entry: RecordEntry, report: &mut RecoveryReport) -> Option<Plan> {
    let record = match entry.record {
        Ok(r) => r,
        Err(RecordError::Missing { path }) => {
            if let Some(record) = unrecorded(&entry.instance, &entry.id, &entry.dir) {
                return Some(Plan::Recover(record, entry.dir));
            }
            report.warnings.push(format!(
                "{} has no session record yet and its process may be alive; left alone",
                path.display()
            ));
            return None;
        }
        Err(e) => {
            report.warnings.push(format!("{e}; left alone"));
            return None;
        }
    };
    let owner = record.owner.map(|o| (o, o.liveness()));
    if record.state.is_terminal() {
        // Whoever ran it, a finished session is listed (exactly once: ids are unique).
        return Some(Plan::Load(record, entry.dir));
    }
    match owner {
        None => {
            report.warnings.push(format!(
                "session {} ({}) is recorded as running but its record names no owner daemon; it was not touched (forget it, or kill its processes by hand)",
                record.id,
                entry.dir.display()
            ));
            None
        }
        Some((o, Liveness::Alive)) => {
            report.owner_alive.push(format!("{} (owner pid {})", record.id, o.pid));
            None
        }
        Some(_) => Some(Plan::Recover(record, entry.dir)),
    }
}

/// The adopt spec of a record's tree.
pub(crate) fn adopt_spec(record: &SessionRecord) -> AdoptSpec {
    AdoptSpec {
        root_pid: record.pid,
        root_start_time: record.root_start_time,
        marker: SessionMarker::new(record.instance.clone(), record.id.clone()),
        cgroup: record.cgroup.clone(),
    }
}

/// A record for a session directory its owner never recorded (it died between making the
/// directory and writing the record): `None` while that owner may still be alive or the
/// directory is young.
pub(crate) fn unrecorded(instance: &str, id: &str, dir: &Path) -> Option<SessionRecord> {
    // While its process lives it may be between making the directory and recording it.
    if crate::retention::instance_is_live(instance, &[]) {
        return None;
    }
    let made = std::fs::metadata(dir).and_then(|m| m.modified()).map_or(0, unix_ms);
    let record = serde_json::json!({
        "version": RECORD_VERSION,
        "id": id,
        "instance": instance,
        "command": "",
        "state": "running",
        "spool_path": SessionDir::new(dir).spool(),
        "started_at_ms": made,
        "idempotency_key": crate::key_mark::marked_key(dir),
    });
    serde_json::from_value(record).ok()
}

/// Terminates what is left of one session whose owner died and rewrites its record as failed.
pub(crate) async fn recover_one(
    mut record: SessionRecord,
    dir: PathBuf,
    containment: Containment,
    opts: TerminateOptions,
) -> (RecoveredSession, SessionRecord, PathBuf, Option<String>) {
    // Say so when the recorded root pid now names someone else: adopt never signals it.
    let reused_root = (record.pid != 0)
        .then(|| stockade_procfs::start_time(record.pid))
        .flatten()
        .filter(|&t| t != record.root_start_time);
    let tree = ProcessTree::adopt(adopt_spec(&record), &containment);
    let report = tree.terminate(&opts).await;
    drop(tree);
    remove_dead_daemon_cgroup(record.cgroup.as_deref());

    let mut reason = format!(
        "{RECOVERY_REASON}; {} processes terminated at recovery",
        report.pids_signalled.len()
    );
    if let Some(t) = reused_root {
        reason.push_str(&format!(
            "; root pid {} now belongs to another process (start time {t}, recorded {}), which was not signalled",
            record.pid, record.root_start_time
        ));
    }
    if !report.terminated {
        reason.push_str(&format!("; survivors: {:?}", report.survivors));
    }
    if record.pid == 0 && record.owner.is_none() {
        reason.push_str("; its owner died before recording it (command unknown)");
    }
    record.version = RECORD_VERSION;
    record.state = SessionState::Failed { reason: reason.clone() };
    record.finished_at_ms = Some(unix_ms(SystemTime::now()));
    record.cleanup = Some(report.clone());
    let fallback = record.clone();
    let (record, warning) = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            if let Ok(log) = OutputLog::open(&dir) {
                // The writer died: keep the counts (rebuilt from the spool if `log.json` was
                // missing or damaged) so no later start scans the spool again.
                let _ = log.save_rebuilt_meta();
                let stats = log.stats();
                let mut gaps = stats.gaps;
                if record.capture.is_piped() {
                    // What the pipes held when the owner died was never read: record that
                    // bytes may be missing here, how many nobody can know.
                    let at = stats.total_bytes;
                    gaps.push(Gap { start: at, end: at, reason: PIPE_LOSS_REASON.into() });
                    if let SessionState::Failed { reason } = &mut record.state {
                        reason.push_str(&format!(
                            "; output after byte {at} may be missing (up to 64 KiB per pipe was unread when the owner died)"
                        ));
                    }
                }
                record.totals = Some(RecordTotals {
                    total_bytes: stats.total_bytes,
                    total_lines: stats.total_lines,
                    spooled_bytes: stats.spooled_bytes,
                    dropped_bytes: stats.dropped_bytes,
                    gaps,
                });
            }
            let warning = registry::store(&dir, &record).err().map(|e| {
                format!("session {}: cannot rewrite its record as failed: {e}", record.id)
            });
            (record, warning)
        }
    })
    .await
    .unwrap_or_else(|e| {
        let warning = format!("session {}: cannot rewrite its record: {e}", fallback.id);
        (fallback, Some(warning))
    });
    let reason = match &record.state {
        SessionState::Failed { reason } => reason.clone(),
        _ => reason,
    };
    let recovered = RecoveredSession { id: record.id.clone(), reason, report };
    (recovered, record, dir, warning)
}

/// A dead daemon's instance cgroup (`stockade-<pid>-<pid namespace>[.<n>]`), once its last
/// session cgroup is gone. Only removed when no process has that pid (a live daemon with a
/// recycled pid would be using the same name), and never another PID namespace's.
fn remove_dead_daemon_cgroup(session_cgroup: Option<&Path>) {
    let Some(parent) = session_cgroup.and_then(Path::parent) else { return };
    let Some(pid) =
        parent.file_name().and_then(|n| n.to_str()).and_then(stockade_proc::instance_cgroup_pid)
    else {
        return;
    };
    if stockade_procfs::start_time(pid).is_none() {
        // rmdir of a cgroup fails while it has children or processes: nothing else is removed.
        let _ = std::fs::remove_dir(parent);
    }
}

/// Opens the spools of the finished sessions to keep, and deletes the directories of the rest.
fn load_sessions(
    keep: Vec<(SessionRecord, PathBuf)>,
    excess: Vec<(SessionRecord, PathBuf)>,
    containment: &Containment,
) -> (Vec<Arc<Session>>, Vec<String>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut pruned = Vec::new();
    for (record, dir) in excess {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => pruned.push(record.id),
            Err(e) => warnings.push(format!("cannot prune {}: {e}", dir.display())),
        }
    }
    let mut sessions = Vec::with_capacity(keep.len());
    for (record, dir) in keep {
        if never_started(&dir) {
            // Its owner died while making its log: nothing was spawned, nothing to show.
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => pruned.push(record.id),
                Err(e) => warnings.push(format!("cannot delete {}: {e}", dir.display())),
            }
            continue;
        }
        match OutputLog::open(&dir) {
            Ok(log) => {
                // After termination: a cgroup that is gone is not adopted, the root not trusted.
                let tree = ProcessTree::adopt(adopt_spec(&record), containment);
                sessions.push(Session::recovered(record, dir, Arc::new(log), Arc::new(tree)));
            }
            Err(e) => warnings.push(format!(
                "session {}: its output log cannot be opened ({e}); its record stays on disk",
                record.id
            )),
        }
    }
    (sessions, pruned, warnings)
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RecoveryError> + Send + 'static,
) -> Result<Result<T, RecoveryError>, RecoveryError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| RecoveryError::Interrupted(e.to_string()))
}

/// Whether a session directory lacks the log files made before any spawn (its owner died
/// while making them: nothing ran).
pub(crate) fn never_started(dir: &Path) -> bool {
    SessionDir::LOG_FILES.iter().any(|f| !dir.join(f).exists())
}
