//! Session directories made ahead of time, and pruned ones used again, so a run does not wait
//! for the file system to hand out inodes.
//!
//! A run needs a directory, its spool (`output.log`), its stream index (`streams.idx`) and four
//! records written over its life (`session.json` at start and at the end, `spec.json`,
//! `log.json`). Each new file costs an inode, and on some file systems that is most of a short
//! command's round trip: ext4 without a journal, for one, looks at every inode freed in the last
//! minutes before it hands one out, so a daemon that makes and deletes session directories as it
//! goes pays more for every new file. So an engine with `prepared_dirs > 0` (the daemon's) keeps
//! *slots* ready in its instance folder: `.slot-<n>/` holding an empty spool and index and one
//! empty spare file per record ([`Spare`]).
//!
//! * **Made ahead:** up to `prepared_dirs` fresh slots, made by a blocking task after a run took
//!   one.
//! * **Used again:** a finished session the engine forgets (retention's `max_finished`,
//!   `cleanup`, `forget`) becomes a slot instead of being deleted, when nothing else holds it:
//!   the directory is renamed to `.slot-<n>` (it is gone from its id at once), its spool and
//!   index are truncated and its records become the spares again (their old bytes are written
//!   over in place by the next run, so no block is freed or allocated). Up to
//!   [`MAX_READY`] slots are kept; beyond that, forgotten directories are deleted as before. A
//!   daemon that keeps its `max_finished` sessions then makes and deletes no file per run.
//!
//! A run moves a slot to its id with `renameat2(RENAME_NOREPLACE)` and writes each record into
//! its spare, then renames the spare over the record's name ([`stockade_log::atomic_write`]; the end
//! record is *exchanged* with the start record, which stays behind as the spare): readers see
//! no record or a whole one, exactly as with a temporary file, and no inode is allocated while
//! the client waits. Without a ready slot (a burst took them all, the disk is full, something
//! removed the folder) the run makes its directory and files itself, as before.
//!
//! * **Private temporary directories:** once a sandboxed run asked for one (`<session>/tmp`, the
//!   `TMPDIR` of `workspace-write`), up to `prepared_dirs` empty directories
//!   (`.slot-tmp-<n>/`) are kept ready beside the slots, and the next sandboxed run moves one
//!   into its session directory instead of making it ([`Slots::claim_tmp`]). When such a
//!   session's directory is used again, its `tmp` is too, if nothing of the session can still
//!   reach it: the session had a cgroup (which a sandboxed command cannot leave) and its end
//!   verified every process gone. It is emptied and kept ready only while it is still as it was
//!   made (a directory of ours, mode 0700, no extended attribute a command could have set);
//!   otherwise it is deleted with the rest. A sandboxed run then makes and deletes no directory
//!   either, which on such a file system is most of what a sandbox added to a short command. A
//!   daemon that never ran a sandboxed command makes none, and a session that is not sandboxed
//!   has no `tmp`.
//!
//! A slot is never a session: its name is no session id, so recovery, retention and `list` skip
//! it. The engine removes its ready slots when it shuts down; the sweep removes the ones a dead
//! process left in its instance folder ([`remove_leftovers`]).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use stockade_log::{OutputError, Prepared, Spare};
use stockade_proc::SandboxSpec;

pub(crate) use crate::slot_files::{SLOT_PREFIX, make_tmp, remove_leftovers};
use crate::slot_files::{create_empty, empty_if_as_made, remove, rename_noreplace, reset};

/// Names of ready private temporary directories start with this (a slot's prefix too, so the
/// sweep of leftovers removes them).
const TMP_PREFIX: &str = ".slot-tmp-";

/// Most slots kept ready (fresh and used again); each is an empty directory of six empty
/// files, and holds no descriptor.
pub(crate) const MAX_READY: usize = 64;

/// Landlock rulesets are built ahead for this many of the next private temporary directories
/// in line (fewer than the process keeps built, [`stockade_proc::sandbox::MAX_PREBUILT`]), and
/// one more each time a run takes one; not for every one kept ready: a burst of directories
/// used again (a `cleanup` of many sandboxed sessions) would otherwise build more than are kept
/// (the oldest dropped first, which are the next in line), and the runs taking those would each
/// build their own while the client waits. Those among the next in line are built as their
/// sessions are forgotten, off the runs that follow.
const BUILT_AHEAD: usize = stockade_proc::sandbox::MAX_PREBUILT - 2;

/// A ready private temporary directory.
struct ReadyTmp {
    path: PathBuf,
    /// Its sandbox was built ahead (for the template of that time).
    built: bool,
}

/// The ready slots of one engine's instance folder.
pub(crate) struct Slots {
    instance_dir: PathBuf,
    /// Fresh slots made ahead of time, at most.
    target: usize,
    ready: Mutex<VecDeque<PathBuf>>,
    /// Empty private temporary directories made ahead of time, the next in line first.
    tmps: Mutex<VecDeque<ReadyTmp>>,
    /// A sandboxed run asked for a private temporary directory: keep some ready from now on.
    tmps_wanted: AtomicBool,
    /// The sandbox of the last run that asked for one, less its temporary directory: each
    /// directory made ahead gets its Landlock ruleset built for it, off the spawn path.
    template: Mutex<Option<SandboxSpec>>,
    /// A blocking task is making slots.
    filling: AtomicBool,
    /// Set at shutdown: no slot is made, used again or handed out any more.
    closed: AtomicBool,
    next: AtomicU64,
}

impl Slots {
    /// Up to `target` fresh slots in `instance_dir`, made once [`Slots::refill`] runs in a
    /// tokio runtime.
    pub(crate) fn new(instance_dir: PathBuf, target: usize) -> Arc<Slots> {
        Arc::new(Slots {
            instance_dir,
            target: target.min(MAX_READY),
            ready: Mutex::new(VecDeque::with_capacity(target)),
            tmps: Mutex::new(VecDeque::new()),
            tmps_wanted: AtomicBool::new(false),
            template: Mutex::new(None),
            filling: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            next: AtomicU64::new(0),
        })
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, VecDeque<PathBuf>> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tmps(&self) -> std::sync::MutexGuard<'_, VecDeque<ReadyTmp>> {
        self.tmps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A ready slot moved to `dir` (which must not exist), with its files open; `None` when no
    /// slot is ready or it cannot be used (the caller then makes `dir` itself). Starts a refill.
    pub(crate) fn claim(self: &Arc<Self>, dir: &Path) -> Option<Prepared> {
        // The oldest first.
        let slot = if self.is_closed() { None } else { self.ready().pop_front() };
        self.refill();
        let slot = slot?;
        if let Err(e) = rename_noreplace(&slot, dir) {
            tracing::debug!(slot = %slot.display(), dir = %dir.display(), error = %e, "cannot use a prepared session directory; making one");
            remove(&slot);
            return None;
        }
        match Prepared::open(dir) {
            Ok(files) => Some(files),
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "a prepared session directory is not usable; making one");
                remove(dir);
                None
            }
        }
    }

    /// A ready empty directory moved to `dir` (which must not exist): `true` when it is there,
    /// `false` when none was ready or it could not be moved (the caller then makes `dir`
    /// itself). Starts a refill, and keeps some ready from now on, with their Landlock
    /// rulesets built for `template` (the run's sandbox, less this directory) plus each.
    pub(crate) fn claim_tmp(self: &Arc<Self>, dir: &Path, template: SandboxSpec) -> bool {
        self.tmps_wanted.store(true, Ordering::Release);
        *self.template.lock().unwrap_or_else(PoisonError::into_inner) = Some(template);
        let tmp = if self.is_closed() { None } else { self.tmps().pop_front() };
        self.refill();
        let Some(ReadyTmp { path: tmp, .. }) = tmp else { return false };
        match rename_noreplace(&tmp, dir) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(tmp = %tmp.display(), dir = %dir.display(), error = %e, "cannot use a prepared temporary directory; making one");
                remove(&tmp);
                false
            }
        }
    }

    /// Makes fresh slots up to the target in a blocking task (one task at a time; nothing
    /// outside a tokio runtime).
    pub(crate) fn refill(self: &Arc<Self>) {
        // Enough ready (the common case once forgotten directories are used again): no task,
        // no thread to wake while a run starts.
        if !self.wanted() || self.filling.swap(true, Ordering::AcqRel) {
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
        !self.is_closed()
            && (self.ready().len() < self.target || self.tmps_short() || self.unbuilt().is_some())
    }

    /// The first of the next [`BUILT_AHEAD`] ready temporary directories whose sandbox is not
    /// built yet.
    fn unbuilt(&self) -> Option<PathBuf> {
        self.tmps().iter().take(BUILT_AHEAD).find(|t| !t.built).map(|t| t.path.clone())
    }

    fn tmps_short(&self) -> bool {
        self.tmps_wanted.load(Ordering::Acquire) && self.tmps().len() < self.target
    }

    fn fill(&self) {
        while !self.is_closed() && self.ready().len() < self.target {
            match self.make() {
                Ok(slot) => self.push(slot),
                Err(e) => {
                    // A full disk, a removed folder: runs make their own directories meanwhile.
                    tracing::debug!(error = %e, "cannot prepare a session directory");
                    return;
                }
            }
        }
        while !self.is_closed() && self.tmps_short() {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let path = self.instance_dir.join(format!("{TMP_PREFIX}{n}"));
            if let Err(e) = make_tmp(&path) {
                tracing::debug!(error = %e, "cannot prepare a private temporary directory");
                return;
            }
            self.push_tmp(path);
        }
        self.build_next_in_line();
    }

    /// Builds the sandbox of the next ready temporary directories in line that lack one
    /// ([`BUILT_AHEAD`]); one claimed meanwhile builds its own. Blocking.
    fn build_next_in_line(&self) {
        while !self.is_closed()
            && let Some(path) = self.unbuilt()
        {
            self.prebuild(&path);
            if let Some(t) = self.tmps().iter_mut().find(|t| t.path == path) {
                t.built = true;
            }
        }
    }

    /// Adds `path`, a ready empty temporary directory (or removes it, once closed); its sandbox
    /// is built once it is among the next in line ([`BUILT_AHEAD`]).
    fn push_tmp(&self, path: PathBuf) {
        let mut tmps = self.tmps();
        if self.is_closed() {
            drop(tmps);
            remove(&path);
            return;
        }
        tmps.push_back(ReadyTmp { path, built: false });
    }

    /// Builds the sandbox a run like the last sandboxed one would get with `tmp` as its
    /// private temporary directory, so that run's spawn finds it built.
    fn prebuild(&self, tmp: &Path) {
        let template = self.template.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let Some(mut spec) = template else { return };
        spec.writable_roots.push(tmp.to_owned());
        spec.policy.writable_roots.clone_from(&spec.writable_roots);
        if let Err(e) = stockade_proc::sandbox::prebuild(&spec) {
            // The spawn builds its own and says what is wrong, if anything still is.
            tracing::debug!(error = %e, "cannot build a sandbox ahead of time");
        }
    }

    /// Adds a ready slot (or removes it, once closed or full).
    fn push(&self, slot: PathBuf) {
        let mut ready = self.ready();
        if self.is_closed() || ready.len() >= MAX_READY {
            drop(ready);
            remove(&slot);
            return;
        }
        ready.push_back(slot);
    }

    fn slot_path(&self) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.instance_dir.join(format!("{SLOT_PREFIX}{n}"))
    }

    fn make(&self) -> Result<PathBuf, OutputError> {
        let path = self.slot_path();
        drop(Prepared::create(&path)?);
        for spare in Spare::ALL {
            if let Err(e) = create_empty(&spare.path_in(&path)) {
                remove(&path);
                return Err(OutputError::io(format!("create a spare in {}", path.display()), e));
            }
        }
        Ok(path)
    }

    /// Takes the directory of a finished session this engine forgot, to use again: `true` when
    /// it is gone from `dir` (a ready slot now, or deleted because it could not be made one);
    /// `false` when it was left where it is (closed, enough slots ready, another file system),
    /// for the caller to delete. Nothing else may hold the session. Blocking.
    ///
    /// `tmp_unreachable`: nothing of the session can still reach its private temporary
    /// directory (see the module docs), which is then kept ready too when it is as it was made.
    pub(crate) fn recycle(&self, dir: &Path, tmp_unreachable: bool) -> bool {
        if self.is_closed() || self.ready().len() >= MAX_READY {
            return false;
        }
        let slot = self.slot_path();
        if rename_noreplace(dir, &slot).is_err() {
            return false;
        }
        if tmp_unreachable {
            self.reuse_tmp(&slot.join("tmp"));
        }
        match reset(&slot) {
            Ok(()) => self.push(slot),
            Err(e) => {
                tracing::debug!(slot = %slot.display(), error = %e, "cannot use a session directory again; deleting it");
                remove(&slot);
            }
        }
        true
    }

    /// Empties `tmp`, the private temporary directory of a used session directory, and keeps
    /// it ready, when more are wanted and it is still as [`make_tmp`] made it. Left where it
    /// is otherwise ([`reset`] deletes it with the rest). Blocking.
    fn reuse_tmp(&self, tmp: &Path) {
        // Up to as many as slots used again: a burst of sandboxed runs forgotten at once (a
        // `cleanup`) leaves that many ready for the next burst.
        if self.is_closed()
            || !self.tmps_wanted.load(Ordering::Acquire)
            || self.tmps().len() >= MAX_READY
        {
            return;
        }
        match empty_if_as_made(tmp) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::debug!(tmp = %tmp.display(), error = %e, "cannot use a private temporary directory again");
                return;
            }
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.instance_dir.join(format!("{TMP_PREFIX}{n}"));
        if rename_noreplace(tmp, &path).is_ok() {
            self.push_tmp(path);
            // Built now when it is among the next in line, as the session is forgotten (off
            // the runs that follow); else when a run's claim brings it there.
            self.build_next_in_line();
        }
    }

    /// Removes every ready slot; none is made, used again or handed out from now on.
    /// Idempotent.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut slots: Vec<PathBuf> = self.ready().drain(..).collect();
        slots.extend(self.tmps().drain(..).map(|t| t.path));
        for slot in slots {
            remove(&slot);
        }
    }

    /// Ready slots now (tests).
    #[cfg(test)]
    fn ready_count(&self) -> usize {
        self.ready().len()
    }

    /// Ready private temporary directories now (tests).
    #[cfg(test)]
    fn tmp_count(&self) -> usize {
        self.tmps().len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::slot_files::TMP_MODE;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::Duration;
    use stockade_testkit::dir_names as names;

    const FRESH: [&str; 6] =
        [".spare-end", ".spare-log", ".spare-spec", ".spare-start", "output.log", "streams.idx"];

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
        drop(slots.claim(&dir).unwrap());
        assert_eq!(names(&dir), FRESH);
        settled(&slots, 2).await;
        assert_eq!(names(tmp.path()), [".slot-1", ".slot-2", "sh-1"], "the oldest was taken");
        // An existing directory is never replaced: the claim fails, the slot is dropped.
        let taken = tmp.path().join("sh-2");
        std::fs::create_dir(&taken).unwrap();
        assert!(slots.claim(&taken).is_none());
        assert!(names(&taken).is_empty());
        settled(&slots, 2).await;
        slots.close();
        assert_eq!(names(tmp.path()), ["sh-1", "sh-2"]);
        assert!(slots.claim(&tmp.path().join("sh-3")).is_none());
        assert!(!slots.recycle(&tmp.path().join("sh-1"), true), "closed: nothing is used again");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(names(tmp.path()), ["sh-1", "sh-2"], "closed: nothing is made again");
    }

    #[test]
    fn a_used_directory_becomes_a_fresh_slot_with_the_same_files() {
        let tmp = tempfile::tempdir().unwrap();
        let slots = Slots::new(tmp.path().to_path_buf(), 2);
        let used = tmp.path().join("sh-4");
        std::fs::create_dir(&used).unwrap();
        for (name, body) in [
            ("output.log", "printed\n"),
            ("streams.idx", "index"),
            ("session.json", "{\"end\":1}"),
            (".spare-end", "{\"start\":1}"),
            ("spec.json", "{}"),
            ("log.json", "{}"),
            ("session.json.tmp", "torn"),
        ] {
            std::fs::write(used.join(name), body).unwrap();
        }
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let before = [ino(&used.join("output.log")), ino(&used.join("session.json"))];
        crate::key_mark::mark_key(&used, "k-used");
        let marked = rustix::fs::getxattr(&used, "user.stockade.idempotency_key", &mut [0u8; 64]);
        assert!(slots.recycle(&used, true));
        assert!(!used.exists());
        assert_eq!(names(tmp.path()), [".slot-0"]);
        let slot = tmp.path().join(".slot-0");
        assert_eq!(names(&slot), FRESH);
        // The spool and index are empty; each spare keeps the record it was (written over in
        // place by the next run).
        for f in ["output.log", "streams.idx"] {
            assert_eq!(std::fs::metadata(slot.join(f)).unwrap().len(), 0, "{f}");
        }
        let read = |f: &str| std::fs::read_to_string(slot.join(f)).unwrap();
        assert_eq!(read(".spare-start"), "{\"end\":1}");
        assert_eq!(read(".spare-end"), "{\"start\":1}");
        assert_eq!((read(".spare-spec"), read(".spare-log")), ("{}".into(), "{}".into()));
        assert_eq!(before, [ino(&slot.join("output.log")), ino(&slot.join(".spare-start"))]);
        // It is handed out like a fresh one, without the last run's idempotency key.
        let dir = tmp.path().join("sh-9");
        drop(slots.claim(&dir).unwrap());
        assert_eq!(names(&dir), FRESH);
        match marked {
            Ok(_) => {
                let left =
                    rustix::fs::getxattr(&dir, "user.stockade.idempotency_key", &mut [0u8; 64]);
                assert_eq!(left, Err(rustix::io::Errno::NODATA), "the key was kept");
            }
            Err(e) => stockade_testkit::cannot_run(&format!(
                "the temporary directory's file system keeps no user extended attributes ({e}), so a kept key cannot be looked for"
            )),
        }
        // A directory that cannot be moved is left for the caller.
        assert!(!slots.recycle(&tmp.path().join("sh-404"), true));
    }

    async fn tmps_settled(slots: &Arc<Slots>, n: usize) {
        for _ in 0..500 {
            if slots.tmp_count() == n && !slots.filling.load(Ordering::Acquire) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{} temporary directories ready, wanted {n}", slots.tmp_count());
    }

    /// A `workspace-write` sandbox writing in `cwd`.
    fn template(cwd: &Path) -> SandboxSpec {
        let policy = stockade_proto::Sandbox {
            mode: stockade_proto::SandboxMode::WorkspaceWrite,
            writable_roots: vec![cwd.to_owned()],
            ..stockade_proto::Sandbox::default()
        };
        SandboxSpec { policy, writable_roots: vec![cwd.to_owned()], hidden: Vec::new() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn private_temporary_directories_are_prepared_once_one_was_asked_for() {
        let tmp = tempfile::tempdir().unwrap();
        let slots = Slots::new(tmp.path().to_path_buf(), 2);
        slots.refill();
        settled(&slots, 2).await;
        assert_eq!(slots.tmp_count(), 0, "none before a sandboxed run asked for one");
        // The first is made by the caller; two are made ready for the next ones.
        let dir = tmp.path().join("sh-1");
        std::fs::create_dir(&dir).unwrap();
        assert!(!slots.claim_tmp(&dir.join("tmp"), template(&dir)));
        tmps_settled(&slots, 2).await;
        assert_eq!(names(tmp.path()), [".slot-0", ".slot-1", ".slot-tmp-2", ".slot-tmp-3", "sh-1"]);
        let ino = std::fs::metadata(tmp.path().join(".slot-tmp-2")).unwrap().ino();
        let dir = tmp.path().join("sh-2");
        std::fs::create_dir(&dir).unwrap();
        assert!(slots.claim_tmp(&dir.join("tmp"), template(&dir)), "the oldest ready one is taken");
        assert_eq!(std::fs::metadata(dir.join("tmp")).unwrap().ino(), ino);
        assert!(names(&dir.join("tmp")).is_empty());
        // An existing directory is never replaced: the claim fails, the ready one is dropped.
        tmps_settled(&slots, 2).await;
        assert!(!slots.claim_tmp(&dir.join("tmp"), template(&dir)));
        assert!(names(&dir.join("tmp")).is_empty());
        tmps_settled(&slots, 2).await;
        slots.close();
        assert_eq!(names(tmp.path()), ["sh-1", "sh-2"], "closed: none left ready");
        assert!(!slots.claim_tmp(&tmp.path().join("sh-1/tmp"), template(tmp.path())));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(names(tmp.path()), ["sh-1", "sh-2"], "closed: none made again");
        // A dead process's ready ones are swept with its slots.
        std::fs::create_dir(tmp.path().join(".slot-tmp-9")).unwrap();
        remove_leftovers(tmp.path());
        assert_eq!(names(tmp.path()), ["sh-1", "sh-2"]);
    }

    #[test]
    fn a_private_temporary_directory_is_kept_again_only_emptied_and_as_made() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"not ours").unwrap();
        let slots = Slots::new(tmp.path().to_path_buf(), 2);
        // A sandboxed run asked for one (none ready, no runtime to make any): wanted from now on.
        let first = tmp.path().join("sh-1");
        std::fs::create_dir(&first).unwrap();
        assert!(!slots.claim_tmp(&first.join("tmp"), template(&first)));
        let used = |n: u32, shape: &dyn Fn(&Path)| {
            let dir = tmp.path().join(format!("sh-{n}"));
            std::fs::create_dir(&dir).unwrap();
            shape(&dir.join("tmp"));
            dir
        };
        let ino = |p: &Path| std::fs::symlink_metadata(p).unwrap().ino();
        // Left with files in it, nothing of its session alive: emptied and kept, same directory.
        let dir = used(2, &|t| {
            make_tmp(t).unwrap();
            std::fs::create_dir(t.join("sub")).unwrap();
            std::fs::write(t.join("sub/f"), b"x").unwrap();
        });
        let kept = ino(&dir.join("tmp"));
        assert!(slots.recycle(&dir, true));
        assert_eq!(slots.tmp_count(), 1);
        let next = tmp.path().join("sh-3");
        std::fs::create_dir(&next).unwrap();
        assert!(slots.claim_tmp(&next.join("tmp"), template(&next)));
        assert_eq!(ino(&next.join("tmp")), kept);
        assert!(names(&next.join("tmp")).is_empty());
        // Its session may still reach it, its mode was changed, or it is a link: never kept.
        type Shape<'a> = &'a dyn Fn(&Path);
        let shapes: [(bool, Shape); 4] = [
            (false, &|t| make_tmp(t).unwrap()),
            (true, &|t| {
                make_tmp(t).unwrap();
                std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o1777)).unwrap();
            }),
            (true, &|t| {
                make_tmp(t).unwrap();
                std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o2700)).unwrap();
            }),
            (true, &|t| std::os::unix::fs::symlink(outside.path(), t).unwrap()),
        ];
        for (n, (unreachable, shape)) in (4..).zip(shapes) {
            let dir = used(n, shape);
            assert!(slots.recycle(&dir, unreachable));
            assert_eq!(slots.tmp_count(), 0, "sh-{n}");
        }
        assert_eq!(names(outside.path()), ["keep"], "a link's target is left alone");
        assert_eq!(
            std::fs::metadata(next.join("tmp")).unwrap().permissions().mode() & 0o7777,
            TMP_MODE
        );
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
