//! The daemon lock: an exclusive `flock` on `$STOCKADE_HOME/daemon.lock`, held for the daemon's
//! life, with the daemon's pid written inside. The kernel drops the lock when the process dies,
//! so a crashed daemon never blocks the next one.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use crate::error::DaemonError;

/// How often to retry when the lock file was replaced between opening and locking it.
const LOCK_ATTEMPTS: usize = 8;

/// The held lock. Dropping it removes the file and releases the lock.
#[derive(Debug)]
pub(crate) struct DaemonLock {
    path: PathBuf,
    file: File,
}

impl DaemonLock {
    /// Take the lock at `path` for this process, or say which live daemon holds it.
    pub(crate) fn acquire(path: &Path, home: &Path) -> Result<DaemonLock, DaemonError> {
        let io = |what: &str, e| DaemonError::io(format!("{what} {}", path.display()), e);
        for _ in 0..LOCK_ATTEMPTS {
            let mut file = stockade_core::open_lock_file(path)
                .map_err(|e| io("cannot open the daemon lock", e))?;
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    let pid =
                        text.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(0);
                    return Err(DaemonError::AlreadyRunning { pid, home: home.to_path_buf() });
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
            return Ok(DaemonLock { path: path.to_path_buf(), file });
        }
        Err(io("cannot take the daemon lock", std::io::Error::other("it keeps being replaced")))
    }
}

impl Drop for DaemonLock {
    fn drop(&mut self) {
        // Remove the file while still holding the lock, so no other daemon can have locked it.
        let _ = std::fs::remove_file(&self.path);
        let _ = flock(&self.file, FlockOperation::Unlock);
    }
}
