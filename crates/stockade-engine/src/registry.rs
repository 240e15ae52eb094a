//! The session registry on disk: one `session.json` per session directory, next to its spool.
//!
//! # Why one file per session
//!
//! A session's record lives in its own directory (`spool/<instance>/<id>/session.json`), so the
//! record and the spool it describes are created, kept and deleted together: `forget` and the
//! retention janitor remove one directory and nothing can dangle. Each session is written by
//! exactly one supervisor, so writers never contend and need no database lock; a torn write
//! can damage at most one record, and a reader that finds a damaged one reports it and moves
//! on. An embedded database (redb, SQLite) would add a second source of truth next to the
//! spools, a global write lock on the hot path, and a file whose corruption loses every record
//! at once — for a registry of at most a few thousand small records that are read in full only
//! at start-up.
//!
//! # Writes
//!
//! A record is written at start (state `running`, with everything recovery needs: the owner
//! daemon's pid and start time, the root pid and its start time, the process group, the cgroup,
//! the spool path) and at the end (terminal state, exit information, totals, dropped ranges).
//! Every write goes to a temporary file that is `fsync`ed and then renamed over the record, so
//! a reader sees the old record or the new one, never a mix. The directory is `fsync`ed after
//! the first write (the record's name must survive a power loss) and after the terminal one.
//!
//! # Reads
//!
//! Records from older versions (or written before a field existed) load with defaults for the
//! missing fields; a record that does not parse is a [`RecordError::Corrupt`], reported, never a
//! panic and never a guess.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use stockade_procfs::Liveness;
use stockade_proto::{Capture, ContainmentMethod, Gap, SessionState, TerminateReport};

use crate::state_dir::{StateDir, is_session_id};
use stockade_log::{SessionDir, atomic_replace};

/// Version of the record layout written by this build (records without one are version 0).
pub(crate) const RECORD_VERSION: u32 = 1;
/// What a session record on disk says about a session . Fields added
/// after the first layout default when missing, so older records still load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Layout version (`RECORD_VERSION`; 0 for records written before versions existed).
    #[serde(default)]
    pub version: u32,
    /// The session id (`sh-N`).
    pub id: String,
    /// The engine instance that ran it.
    pub instance: String,
    /// The shell command.
    #[serde(default)]
    pub command: String,
    /// Working directory, if one was given.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The state (flattened: `state` plus its fields).
    #[serde(flatten)]
    pub state: SessionState,
    /// The process (daemon or one-shot CLI) whose engine started it; crash recovery only acts
    /// on sessions whose owner is gone. `None` in records from before owners were stamped.
    #[serde(default)]
    pub owner: Option<Owner>,
    /// Root pid.
    #[serde(default)]
    pub pid: u32,
    /// The root's start time (`/proc/<pid>/stat` field 22): with `pid`, its identity, so a
    /// recycled pid is never signalled. 0 when unknown.
    #[serde(default)]
    pub root_start_time: u64,
    /// Process group id.
    #[serde(default)]
    pub pgid: u32,
    /// How the tree is contained.
    #[serde(default = "default_containment")]
    pub containment: ContainmentMethod,
    /// The per-session cgroup, if any.
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
    /// Capture mode.
    #[serde(default)]
    pub capture: Capture,
    /// The spool file.
    #[serde(default)]
    pub spool_path: PathBuf,
    /// Start time, milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_at_ms: u64,
    /// End time, milliseconds since the Unix epoch.
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
    /// The dedup key, if any.
    #[serde(default)]
    pub source: Option<String>,
    /// The idempotency key it was started with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// What terminating the tree did when the session ended, if anything was left to terminate.
    #[serde(default)]
    pub cleanup: Option<TerminateReport>,
    /// The output totals and dropped ranges when the record was written.
    #[serde(default)]
    pub totals: Option<RecordTotals>,
}

fn default_containment() -> ContainmentMethod {
    ContainmentMethod::ProcessGroup
}

/// The process that owns a session: the daemon (or one-shot CLI) whose engine started it.
/// `pid + start time` names one process across pid reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The owner's pid.
    pub pid: u32,
    /// The owner's start time (`/proc/<pid>/stat` field 22, clock ticks after boot).
    pub start_time: u64,
}

impl Owner {
    /// This process, or `None` if `/proc/self/stat` is unreadable (then records carry no
    /// owner and recovery leaves them alone, with a warning).
    pub fn current() -> Option<Owner> {
        static CURRENT: OnceLock<Option<Owner>> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let pid = std::process::id();
            stockade_procfs::start_time(pid).map(|start_time| Owner { pid, start_time })
        })
    }

    /// Whether this owner is still running. A zombie owner is dead: it runs no code and will
    /// never write its sessions' records again.
    pub fn liveness(&self) -> Liveness {
        stockade_procfs::liveness(self.pid, Some(self.start_time))
    }
}

/// What a session printed, as its record keeps it (the log's counters at the last write).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecordTotals {
    /// Bytes printed.
    pub total_bytes: u64,
    /// Lines printed.
    pub total_lines: u64,
    /// Bytes on disk in the spool.
    pub spooled_bytes: u64,
    /// Bytes printed but not on disk.
    pub dropped_bytes: u64,
    /// The ranges not on disk, and why.
    pub gaps: Vec<Gap>,
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    /// There is no record in the directory.
    #[error("{path} has no session record")]
    Missing {
        /// The record's path.
        path: PathBuf,
    },
    /// The record is there but does not parse.
    #[error("session record {path} is corrupt: {message}")]
    Corrupt {
        /// The record's path.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// The record could not be read.
    #[error("cannot read session record {path}: {source}")]
    Io {
        /// The record's path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Reads the record in session directory `dir`.
pub(crate) fn load(dir: &Path) -> Result<SessionRecord, RecordError> {
    let path = SessionDir::new(dir).record();
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RecordError::Missing { path });
        }
        Err(source) => return Err(RecordError::Io { path, source }),
    };
    let mut record: SessionRecord = serde_json::from_slice(&text)
        .map_err(|e| RecordError::Corrupt { path: path.clone(), message: e.to_string() })?;
    if record.spool_path.as_os_str().is_empty() {
        record.spool_path = SessionDir::new(dir).spool();
    }
    Ok(record)
}

/// Writes `record` into session directory `dir` with [`atomic_replace`]: a reader or a crashed
/// daemon's successor sees the old record or the new one. Not `fsync`ed: a daemon crash loses
/// nothing that reached `write(2)`, and a machine crash that loses the record also ended the
/// processes it names (recovery reports an empty or torn record as corrupt).
pub(crate) fn store(dir: &Path, record: &SessionRecord) -> std::io::Result<()> {
    store_via(dir, record, None)
}

/// [`store`] through the directory's `spare` file when it has one (a directory made ahead of
/// time, `slots.rs`): the same atomic replace without allocating an inode.
pub(crate) fn store_via(
    dir: &Path,
    record: &SessionRecord,
    spare: Option<stockade_log::Spare>,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    let path = SessionDir::new(dir).record();
    match spare {
        Some(spare) => stockade_log::replace_from_spare(&spare.path_in(dir), &path, &bytes),
        None => atomic_replace(&path, &bytes),
    }
}

/// Read a session record from a session directory (`None` if it is missing or corrupt; recovery
/// and retention read it with the reason, and report it).
pub fn read_record(dir: &Path) -> Option<SessionRecord> {
    load(dir).ok()
}

/// One session directory found in the state directory, and what its record says.
#[derive(Debug)]
pub(crate) struct RecordEntry {
    /// The instance folder it is in.
    pub instance: String,
    /// The session id (the directory's name).
    pub id: String,
    /// The session directory.
    pub dir: PathBuf,
    /// The record, or why it could not be read.
    pub record: Result<SessionRecord, RecordError>,
}

/// Every session directory under `spool/` (every instance), with its record. Entries whose
/// name is not a session id are skipped; unreadable instance folders are skipped with a warning.
pub(crate) fn scan(state_dir: &StateDir) -> Vec<RecordEntry> {
    let mut found = Vec::new();
    let spool = state_dir.spool_root();
    let Ok(instances) = std::fs::read_dir(&spool) else {
        tracing::warn!(dir = %spool.display(), "cannot list the spool directory");
        return found;
    };
    for inst in instances.flatten() {
        let Some(instance) = inst.file_name().to_str().map(str::to_owned) else { continue };
        if !inst.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(sessions) = std::fs::read_dir(inst.path()) else {
            tracing::warn!(dir = %inst.path().display(), "cannot list an instance directory");
            continue;
        };
        for s in sessions.flatten() {
            let Some(id) = s.file_name().to_str().map(str::to_owned) else { continue };
            if !is_session_id(&id) || !s.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let dir = s.path();
            let record = load(&dir);
            found.push(RecordEntry { instance: instance.clone(), id, dir, record });
        }
    }
    found
}

/// The numeric part of a session id (`sh-12` → 12; 0 for anything else).
pub(crate) fn id_number(id: &str) -> u64 {
    // Only the canonical form: `sh-+64` or `sh-064` is not `sh-64`.
    if !crate::state_dir::is_session_id(id) {
        return 0;
    }
    id.strip_prefix(crate::state_dir::SESSION_ID_PREFIX).and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = Owner::current().unwrap();
        assert_eq!(me.liveness(), Liveness::Alive);
        let impostor = Owner { start_time: me.start_time + 1, ..me };
        assert!(matches!(impostor.liveness(), Liveness::Reused { .. }));
        assert_eq!(Owner { pid: u32::MAX - 1, start_time: 1 }.liveness(), Liveness::Gone);
    }

    #[test]
    fn an_old_record_without_the_new_fields_loads_with_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let old = r#"{"id":"sh-3","instance":"daemon-1-2","command":"true","cwd":null,
            "state":"exited","code":0,"pid":10,"pgid":10,"containment":"process-group",
            "cgroup":null,"capture":"pipe","spool_path":"/x/output.log","started_at_ms":5,
            "finished_at_ms":6,"source":null,"cleanup":null}"#;
        std::fs::write(SessionDir::new(tmp.path()).record(), old).unwrap();
        let r = load(tmp.path()).unwrap();
        assert_eq!((r.version, r.owner, r.root_start_time, r.totals), (0, None, 0, None));
        assert_eq!(r.state, stockade_proto::SessionState::Exited { code: 0 });
    }

    #[test]
    fn a_corrupt_record_is_reported_not_a_panic() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(SessionDir::new(tmp.path()).record(), b"{\"id\": \"sh-1\", \"sta").unwrap();
        assert!(matches!(load(tmp.path()), Err(RecordError::Corrupt { .. })));
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(load(empty.path()), Err(RecordError::Missing { .. })));
    }
}
