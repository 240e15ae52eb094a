//! Session directories made ahead of time, so a run does not wait for the file system to hand
//! out inodes.
//!
//! A run needs a directory, its spool (`output.log`), its stream index (`streams.idx`) and four
//! records written over its life (`session.json` at start and at the end, `spec.json`,
//! `log.json`). Each new file costs an inode, and on some file systems that is most of a short
//! command's round trip: ext4 without a journal, for one, looks at every inode freed in the last
//! minutes before it hands one out, so a daemon that prunes old sessions as it goes pays more for
//! every new file. So an engine with `prepared_dirs > 0` (the daemon's) keeps that many *slots*
//! ready in its instance folder: `.slot-<n>/` holding the empty spool and index and one empty
//! spare file per record ([`Spare`]), made by a blocking task after a run took one.
//!
//! A run moves a slot to its id with `renameat2(RENAME_NOREPLACE)` and writes each record into
//! its spare, then renames the spare over the record's name ([`crate::atomic_write`]): readers see
//! no record or a whole one, exactly as with a temporary file, and no inode is allocated while the
//! client waits. Without a ready slot (a burst took them all, the disk is full, something removed
//! the folder) the run makes its directory and files itself, as before.
//!
//! A slot is never a session: its name is no session id, so recovery, retention and `list`
//! skip it. The engine removes its ready slots when it shuts down; the sweep removes the ones a
//! dead process left in its instance folder ([`remove_leftovers`]).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::output::{OutputError, Prepared};

/// Names of slot folders start with this (never a session id).
pub(crate) const SLOT_PREFIX: &str = ".slot-";

/// A record a session writes once, and the spare file in its directory it is written into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spare {
    /// `session.json` as the command starts.
    Start,
    /// `spec.json`.
    Spec,
    /// `log.json` when the output ends.
    Log,
    /// `session.json` with the end.
    End,
}

impl Spare {
    const ALL: [Spare; 4] = [Spare::Start, Spare::Spec, Spare::Log, Spare::End];

    /// The spare's file name in the session directory.
    pub(crate) fn file_name(self) -> &'static str {
        match self {
            Spare::Start => ".spare-start",
            Spare::Spec => ".spare-spec",
            Spare::Log => ".spare-log",
            Spare::End => ".spare-end",
        }
    }

    /// The spare's path in session directory `dir`.
    pub(crate) fn path_in(self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }
}

struct Slot {
    path: PathBuf,
    files: Prepared,
}

/// The ready slots of one engine's instance folder.
pub(crate) struct Slots {
    instance_dir: PathBuf,
    target: usize,
    ready: Mutex<Vec<Slot>>,
    /// A blocking task is making slots.
    filling: AtomicBool,
    /// Set at shutdown: no slot is made or handed out any more.
    closed: AtomicBool,
    next: AtomicU64,
}

impl Slots {
    /// Up to `target` slots in `instance_dir`, made once [`Slots::refill`] runs in a tokio
    /// runtime.
    pub(crate) fn new(instance_dir: PathBuf, target: usize) -> Arc<Slots> {
        Arc::new(Slots {
            instance_dir,
            target,
            ready: Mutex::new(Vec::with_capacity(target)),
            filling: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            next: AtomicU64::new(0),
        })
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A ready slot moved to `dir` (which must not exist), with its open files; `None` when no
    /// slot is ready or the move failed (the caller then makes `dir` itself). Starts a refill.
    pub(crate) fn claim(self: &Arc<Self>, dir: &Path) -> Option<Prepared> {
        let slot = if self.closed.load(Ordering::Acquire) { None } else { self.ready().pop() };
        self.refill();
        let slot = slot?;
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            &slot.path,
            rustix::fs::CWD,
            dir,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Some(slot.files),
            Err(e) => {
                tracing::debug!(slot = %slot.path.display(), dir = %dir.display(), error = %e, "cannot use a prepared session directory; making one");
                drop(slot.files);
                remove(&slot.path);
                None
            }
        }
    }

    /// Makes slots up to the target in a blocking task (one at a time; nothing outside a tokio
    /// runtime).
    pub(crate) fn refill(self: &Arc<Self>) {
        if self.closed.load(Ordering::Acquire) || self.filling.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.filling.store(false, Ordering::Release);
            return;
        };
        let me = Arc::clone(self);
        runtime.spawn_blocking(move || {
            loop {
                me.fill();
                me.filling.store(false, Ordering::Release);
                // A claim while the flag was still set started no task: look again.
                if !me.wanted() || me.filling.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
        });
    }

    fn wanted(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && self.ready().len() < self.target
    }

    fn fill(&self) {
        while self.wanted() {
            match self.make() {
                Ok(slot) => {
                    let mut ready = self.ready();
                    if self.closed.load(Ordering::Acquire) {
                        drop(ready);
                        remove(&slot.path);
                        return;
                    }
                    ready.push(slot);
                }
                Err(e) => {
                    // A full disk, a removed folder: runs make their own directories meanwhile.
                    tracing::debug!(error = %e, "cannot prepare a session directory");
                    return;
                }
            }
        }
    }

    fn make(&self) -> Result<Slot, OutputError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.instance_dir.join(format!("{SLOT_PREFIX}{n}"));
        let files = Prepared::create(&path)?;
        for spare in Spare::ALL {
            let made = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(spare.path_in(&path));
            if let Err(e) = made {
                drop(files);
                remove(&path);
                return Err(OutputError::io(format!("create a spare in {}", path.display()), e));
            }
        }
        Ok(Slot { path, files })
    }

    /// Removes every ready slot; none is made or handed out from now on. Idempotent.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let slots: Vec<Slot> = std::mem::take(&mut *self.ready());
        for slot in slots {
            drop(slot.files);
            remove(&slot.path);
        }
    }

    /// Ready slots now (tests).
    #[cfg(test)]
    fn ready_count(&self) -> usize {
        self.ready().len()
    }
}

fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %path.display(), error = %e, "cannot delete a prepared session directory");
    }
}

/// Removes the slots a process that is gone left in its instance folder `dir`.
pub(crate) fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(SLOT_PREFIX)) {
            remove(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    async fn settled(slots: &Arc<Slots>, n: usize) {
        for _ in 0..500 {
            if slots.ready_count() == n && !slots.filling.load(Ordering::Acquire) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{} slots ready, wanted {n}", slots.ready_count());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claimed_slot_becomes_the_session_directory_and_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let slots = Slots::new(tmp.path().to_path_buf(), 2);
        slots.refill();
        settled(&slots, 2).await;
        assert_eq!(names(tmp.path()), [".slot-0", ".slot-1"]);
        let dir = tmp.path().join("sh-1");
        let files = slots.claim(&dir).unwrap();
        drop(files);
        assert_eq!(
            names(&dir),
            [".spare-end", ".spare-log", ".spare-spec", ".spare-start", "output.log", "streams.idx"]
        );
        settled(&slots, 2).await;
        assert_eq!(names(tmp.path()).len(), 3, "{:?}", names(tmp.path()));
        // An existing directory is never replaced: the claim fails, the slot is dropped.
        let taken = tmp.path().join("sh-2");
        std::fs::create_dir(&taken).unwrap();
        assert!(slots.claim(&taken).is_none());
        assert!(names(&taken).is_empty());
        settled(&slots, 2).await;
        slots.close();
        assert_eq!(names(tmp.path()), ["sh-1", "sh-2"]);
        assert!(slots.claim(&tmp.path().join("sh-3")).is_none());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(names(tmp.path()), ["sh-1", "sh-2"], "closed: nothing is made again");
    }

    #[test]
    fn outside_a_runtime_nothing_is_prepared_and_leftovers_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let slots = Slots::new(tmp.path().to_path_buf(), 2);
        slots.refill();
        assert!(slots.claim(&tmp.path().join("sh-1")).is_none());
        assert!(names(tmp.path()).is_empty());
        std::fs::create_dir_all(tmp.path().join(".slot-7")).unwrap();
        std::fs::write(tmp.path().join(".slot-7/output.log"), b"").unwrap();
        std::fs::create_dir_all(tmp.path().join("sh-4")).unwrap();
        remove_leftovers(tmp.path());
        assert_eq!(names(tmp.path()), ["sh-4"]);
    }
}
