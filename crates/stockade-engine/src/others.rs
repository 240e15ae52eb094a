//! Sessions this engine did not start but must show: a foreground `stockade run` (its own
//! one-shot engine) that runs while a daemon is up, a finished session of an earlier owner that
//! appeared after start-up, and a session whose owner died while this engine runs.
//!
//! [`sync_others`] looks at the state directory (one `readdir` per instance folder; a
//! record is read only for a session the engine does not yet know as finished) and:
//!
//! * a **finished** record is loaded as a finished session (once; its id is unique in the
//!   state directory, so `list` shows it exactly once);
//! * a **running** record whose owner is alive is shown as running, with its pid, re-read as
//!   its spool grows and replaced by its final record when its owner writes one;
//! * a **running** record whose owner is dead (gone, a zombie, or its pid reused) is recovered
//!   at once, exactly as at start-up: what is left of its tree is terminated through the one
//!   terminate routine and the record rewritten as `failed` (see `recovery`);
//! * a directory without a record whose instance's process is gone is recovered the same way.
//!
//! It holds the recovery lock while it does so, so it never races another engine's recovery.
//! The daemon calls it every [`OWNER_WATCH_INTERVAL`] and before every `list`
//! ([`sync_others_unless_fresh`]): a `list` skips the look when the last one began less
//! than [`LIST_FRESH`] ago and nothing it depends on has changed since — read cheaply as a
//! [`Fingerprint`]: the folder times of the spool root and of each other instance (a session
//! made or removed), and for each session shown as another owner's running one, or found
//! without a usable record, its folder's time (a record written), its spool's length and
//! whether its owner lives. So `ps` right after a foreground run ends, or after its owner is
//! SIGKILLed, still looks again.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_procfs::Liveness;

use crate::engine::Engine;
use crate::others_memo::{Fingerprint, OthersState, Watched};
use crate::recovery::{RecoveryLock, adopt_spec, recover_one, unrecorded};
use crate::registry::{self, RecordError, SessionRecord};
use crate::session::Session;
use crate::state_dir::{StateDir, is_session_id};
use stockade_log::OutputLog;
use stockade_log::SessionDir;
use stockade_proc::ProcessTree;

/// How often the daemon looks for other owners' sessions (and owners that died).
pub const OWNER_WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// A `list` within this long of the last look's start skips its own look if nothing it depends
/// on changed (see the module docs).
pub const LIST_FRESH: Duration = Duration::from_millis(250);
/// A running foreign session's spool above this size is re-read at most every
/// [`LARGE_REOPEN_INTERVAL`] (re-reading counts its newlines).
const LARGE_SPOOL: u64 = 16 * 1024 * 1024;
const LARGE_REOPEN_INTERVAL: Duration = Duration::from_secs(10);

/// What one look did.
#[derive(Debug, Default, Clone)]
pub struct OthersReport {
    /// Sessions newly listed (finished, or running under a live owner).
    pub listed: Vec<String>,
    /// Sessions whose owner died: terminated and marked `failed`.
    pub recovered: Vec<String>,
    /// Problems seen.
    pub warnings: Vec<String>,
}

/// One session directory of another instance, as a look found it.
struct Found {
    id: String,
    dir: PathBuf,
    record: Result<SessionRecord, RecordError>,
    instance: String,
    spool_len: u64,
}

/// Other owners' sessions running as shown now, for a [`Fingerprint`].
fn watched(engine: &Engine) -> Vec<Watched> {
    let mut watched: Vec<(String, Watched)> = engine
        .sessions()
        .into_iter()
        .filter(|s| s.is_foreign() && !s.state().is_terminal())
        .map(|s| (s.id().to_owned(), (s.dir().to_owned(), s.record().owner)))
        .collect();
    watched.sort_by(|a, b| a.0.cmp(&b.0));
    watched.into_iter().map(|(_, w)| w).collect()
}

/// As [`sync_others`], unless the last look began less than `fresh` ago and
/// nothing it depends on has changed since (see the module docs); `None` when skipped.
pub async fn sync_others_unless_fresh(engine: &Engine, fresh: Duration) -> Option<OthersReport> {
    {
        let memo = engine.others.lock().await;
        if let Some((began, then)) = &memo.last
            && began.elapsed() < fresh
            && then.settled
        {
            let state_dir = engine.config().state_dir.clone();
            let own = engine.config().instance.clone();
            let (watched, passed) = (watched(engine), memo.passed.clone());
            let now = tokio::task::spawn_blocking(move || {
                Fingerprint::take(&state_dir, &own, &watched, &passed)
            })
            .await;
            if now.is_ok_and(|now| now == *then) {
                return None;
            }
        }
    }
    Some(sync_others(engine).await)
}

/// Lists the sessions other processes own or left, and recovers those whose owner died
/// (see the module docs of `others`).
pub async fn sync_others(engine: &Engine) -> OthersReport {
    let mut memo = engine.others.lock().await;
    let mut report = OthersReport::default();
    let known: HashMap<String, bool> =
        engine.sessions().iter().map(|s| (s.id().to_owned(), s.state().is_terminal())).collect();
    let state_dir = engine.config().state_dir.clone();
    let own = engine.config().instance.clone();
    let (watched, passed) = (watched(engine), std::mem::take(&mut memo.passed));
    // Set again only when this look completes: a failed one leaves nothing to skip on.
    memo.last = None;
    let began = Instant::now();
    let looked = tokio::task::spawn_blocking(move || {
        // Taken before the look: a change after it shows as a different fingerprint.
        let fingerprint = Fingerprint::take(&state_dir, &own, &watched, &passed);
        let lock = RecoveryLock::acquire(&state_dir).map_err(|e| e.to_string())?;
        Ok::<_, String>((lock, look(&state_dir, &own, &known), fingerprint))
    })
    .await;
    let (lock, found, fingerprint) = match looked {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            report.warnings.push(e);
            return report;
        }
        Err(e) => {
            report.warnings.push(format!("the owner watch did not run: {e}"));
            return report;
        }
    };
    let finished = take_found(engine, &mut memo, found, &mut report).await;
    drop(lock);
    list_finished(engine, finished, &mut report).await;
    memo.last = Some((began, fingerprint));
    report
}

/// Sorts what a look found: finished records to list, running ones of live owners shown (their
/// logs re-read as they grow), running ones of dead owners recovered at once; returns the
/// records to list as finished with their directories.
async fn take_found(
    engine: &Engine,
    memo: &mut OthersState,
    found: Vec<Found>,
    report: &mut OthersReport,
) -> Vec<(SessionRecord, PathBuf)> {
    let mut finished = Vec::new();
    for f in found {
        let record = match f.record {
            Ok(r) => r,
            Err(RecordError::Missing { .. }) => {
                match unrecorded(&f.instance, &f.id, &f.dir) {
                    Some(r) => r,
                    None => {
                        // Its writer may be about to record it.
                        memo.passed.push(f.dir);
                        continue;
                    }
                }
            }
            Err(_) => {
                // Reported by start-up recovery; not guessed at.
                memo.passed.push(f.dir);
                continue;
            }
        };
        if record.state.is_terminal() {
            memo.opened.remove(&record.id);
            finished.push((record, f.dir));
            continue;
        }
        let alive = record.owner.map(|o| o.liveness());
        match alive {
            Some(Liveness::Alive) => {
                let current = engine.session(&record.id).ok();
                let seen = current.as_ref().map(|s| s.log().stats().total_bytes);
                let due = memo.opened.get(&record.id).is_none_or(|t| {
                    f.spool_len < LARGE_SPOOL || t.elapsed() >= LARGE_REOPEN_INTERVAL
                });
                if seen == Some(f.spool_len) || (seen.is_some() && !due) {
                    continue;
                }
                memo.opened.insert(record.id.clone(), Instant::now());
                if current.is_none() {
                    report.listed.push(record.id.clone());
                }
                if let Some(s) = open_other(engine, record, f.dir).await {
                    engine.put_session(s);
                }
            }
            None if record.pid != 0 => {} // no owner stamped: never guessed at
            _ => {
                memo.opened.remove(&record.id);
                let (done, record, dir, warning) = recover_one(
                    record,
                    f.dir,
                    engine.containment_handle().clone(),
                    engine.terminate_options(),
                )
                .await;
                tracing::warn!(id = %done.id, reason = %done.reason, "recovered a session whose owner died");
                report.warnings.extend(warning);
                report.recovered.push(done.id);
                finished.push((record, dir));
            }
        }
    }
    finished
}

/// Lists the finished sessions a look found (and the ones it recovered) as finished sessions of
/// this engine; a directory whose owner died before anything ran is deleted.
async fn list_finished(
    engine: &Engine,
    finished: Vec<(SessionRecord, PathBuf)>,
    report: &mut OthersReport,
) {
    let mut sessions = Vec::new();
    for (record, dir) in finished {
        let id = record.id.clone();
        if crate::recovery::never_started(&dir) {
            // Its owner died while making its log: nothing ran, nothing to show.
            let _ = std::fs::remove_dir_all(&dir);
            continue;
        }
        match open_other(engine, record, dir).await {
            Some(s) => {
                if !report.recovered.contains(&id) {
                    report.listed.push(id);
                }
                sessions.push(s);
            }
            None => report.warnings.push(format!("session {id}: its output log cannot be opened")),
        }
    }
    if !sessions.is_empty() {
        engine.insert_finished(sessions);
    }
}

/// A session of another owner, over its log opened read-only.
async fn open_other(engine: &Engine, record: SessionRecord, dir: PathBuf) -> Option<Arc<Session>> {
    let containment = engine.containment_handle().clone();
    tokio::task::spawn_blocking(move || {
        let log = OutputLog::open(&dir).ok()?;
        let tree = ProcessTree::adopt(adopt_spec(&record), &containment);
        Some(Session::recovered(record, dir, Arc::new(log), Arc::new(tree)))
    })
    .await
    .ok()
    .flatten()
}

/// Session directories of other instances that are not known as finished, with their records.
fn look(state_dir: &StateDir, own: &str, known: &HashMap<String, bool>) -> Vec<Found> {
    let mut found = Vec::new();
    let Ok(instances) = std::fs::read_dir(state_dir.spool_root()) else { return found };
    for inst in instances.flatten() {
        let Some(instance) = inst.file_name().to_str().map(str::to_owned) else { continue };
        if instance == own || !inst.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(sessions) = std::fs::read_dir(inst.path()) else { continue };
        for s in sessions.flatten() {
            let Some(id) = s.file_name().to_str().map(str::to_owned) else { continue };
            if !is_session_id(&id) || known.get(&id).copied().unwrap_or(false) {
                continue;
            }
            let dir = s.path();
            let record = registry::load(&dir);
            let spool_len = std::fs::metadata(SessionDir::new(&dir).spool()).map_or(0, |m| m.len());
            found.push(Found { id, dir, record, instance: instance.clone(), spool_len });
        }
    }
    found
}
