//! The daemon lock: an exclusive `flock` on `$STOCKADE_HOME/daemon.lock`, held for the daemon
//! process's whole life, with the daemon's pid written inside. The kernel drops the lock when the
//! process dies, so a crashed daemon never blocks the next one.
//!
//! Once a daemon has served, its lock is released only by the process's exit — never by `serve`
//! returning — because work of that daemon (a blocking search, a session's last cleanup) may still
//! run in the process until it ends, and a second daemon on the same home must not start beside
//! it. So a stopped daemon empties the file (no pid: nobody to connect to) and parks the locked
//! descriptor for the rest of the process; the file is not removed (a removed file would let the
//! next daemon lock a new one beside it). A later daemon in the same process takes the parked lock
//! over. A daemon that failed to bind never served: its lock is released and the file removed.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{FlockOperation, flock};

use crate::error::DaemonError;

/// How often to retry when the lock file was replaced between opening and locking it.
const LOCK_ATTEMPTS: usize = 8;

/// Locks of daemons of this process that have stopped: held until the process exits.
static PARKED: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// The held lock. Dropping it parks the lock until the process exits once the daemon has
/// served; before that, it removes the file and releases the lock.
#[derive(Debug)]
pub(crate) struct DaemonLock {
    path: PathBuf,
    file: Option<File>,
    served: bool,
}

/// Takes out of [`PARKED`] a lock this process holds on the same file as `file`.
fn unpark(file: &File) -> Option<File> {
    let id = file.metadata().ok().map(|m| (m.dev(), m.ino()))?;
    let mut parked = PARKED.lock().unwrap_or_else(|p| p.into_inner());
    let at = parked.iter().position(|f| f.metadata().is_ok_and(|m| (m.dev(), m.ino()) == id))?;
    Some(parked.swap_remove(at))
}

impl DaemonLock {
    /// Take the lock at `path` for this process, or say which live daemon holds it.
    pub(crate) fn acquire(path: &Path, home: &Path) -> Result<DaemonLock, DaemonError> {
        let io = |what: &str, e| DaemonError::io(format!("{what} {}", path.display()), e);
        for _ in 0..LOCK_ATTEMPTS {
            let mut file = stockade_engine::open_lock_file(path)
                .map_err(|e| io("cannot open the daemon lock", e))?;
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    if let Some(held) = unpark(&file) {
                        // A stopped daemon of this process holds it: take its lock over.
                        file = held;
                    } else {
                        let mut text = String::new();
                        let _ = file.read_to_string(&mut text);
                        let pid = text
                            .split_whitespace()
                            .next()
                            .and_then(|p| p.parse().ok())
                            .unwrap_or(0);
                        return Err(DaemonError::AlreadyRunning { pid, home: home.to_path_buf() });
                    }
                }
                Err(e) => return Err(io("cannot lock", e.into())),
            }
            // An exiting daemon removes the file while it holds the lock: a lock taken on the
            // removed file is worthless, so take it again on the file now at `path`.
            let same = match (file.metadata(), std::fs::symlink_metadata(path)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => false,
            };
            if !same {
                continue;
            }
            file.set_len(0).map_err(|e| io("cannot truncate", e))?;
            file.seek(SeekFrom::Start(0)).map_err(|e| io("cannot write", e))?;
            writeln!(file, "{}", std::process::id()).map_err(|e| io("cannot write", e))?;
            file.sync_data().map_err(|e| io("cannot sync", e))?;
            return Ok(DaemonLock { path: path.to_path_buf(), file: Some(file), served: false });
        }
        Err(io("cannot take the daemon lock", std::io::Error::other("it keeps being replaced")))
    }
}

impl DaemonLock {
    /// From now on the lock outlives this value: it is released only when the process exits.
    pub(crate) fn hold_until_exit(&mut self) {
        self.served = true;
    }
}

impl Drop for DaemonLock {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else { return };
        if self.served {
            // No pid: clients find no daemon to talk to, and the lock stays until exit.
            let _ = file.set_len(0);
            PARKED.lock().unwrap_or_else(|p| p.into_inner()).push(file);
            return;
        }
        // Remove the file while still holding the lock, so no other daemon can have locked it.
        let _ = std::fs::remove_file(&self.path);
        let _ = flock(&file, FlockOperation::Unlock);
    }
}
