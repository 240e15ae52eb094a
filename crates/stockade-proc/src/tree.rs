//! A session's process tree: the handle every other part of the engine holds.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use stockade_proto::ContainmentMethod;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::cgroup;
use super::containment::Containment;
use super::marker::SessionMarker;
use super::pidfd::{PidFd, Reap, RootExit};
use super::scan::{self, Found, Member, ProcessCensus, SessionQuery};

/// What a session record knows about a tree another daemon started (see [`ProcessTree::adopt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptSpec {
    /// The root's pid.
    pub root_pid: u32,
    /// The root's start time as recorded (`/proc/<pid>/stat` field 22).
    pub root_start_time: u64,
    /// The session marker.
    pub marker: SessionMarker,
    /// The session cgroup directory, if it had one.
    pub cgroup: Option<PathBuf>,
}

/// One spawned command and everything it started. `Send + Sync`; share it with `Arc`.
///
/// Dropping it does not kill anything (call [`ProcessTree::terminate`] first); it reaps the root
/// if it has exited and removes the session cgroup if it is empty.
#[derive(Debug)]
pub struct ProcessTree {
    /// `None` for an adopted tree whose root was already gone (or whose pid was recycled).
    pub(crate) root: Option<PidFd>,
    /// Adopted from an earlier daemon's record: the root is not our child.
    pub(crate) adopted: bool,
    pub(crate) root_pid: u32,
    pub(crate) root_start_time: u64,
    pub(crate) pgid: u32,
    pub(crate) marker: SessionMarker,
    pub(crate) marker_value: Vec<u8>,
    /// The output pipe, terminal or spool the root was given: whoever holds one is the session's.
    pub(crate) io: Vec<(u64, u64)>,
    pub(crate) cgroup: Option<PathBuf>,
    /// The cgroup path as `/proc/<pid>/cgroup` shows it, to re-check membership.
    pub(crate) cgroup_path: Option<String>,
    pub(crate) root_exit: Mutex<Option<RootExit>>,
    /// The root is the session's keeper (`keeper.rs`): the command is its child, and the
    /// command's end comes from the keeper's status pipe, not from the root's exit.
    pub(crate) keeper: bool,
    /// The keeper's status pipe (read end, non-blocking) until the session is finished.
    pub(crate) status: Mutex<Option<OwnedFd>>,
    /// How the command ended, once known (with a keeper).
    pub(crate) command_exit: Mutex<Option<RootExit>>,
    /// `(pid, start time)` of every process ever seen as a member: zombies of these may be reaped.
    pub(crate) seen: Mutex<BTreeSet<(u32, u64)>>,
    /// Keeps the per-daemon cgroup directory alive while this tree's cgroup is inside it.
    pub(crate) _containment: Containment,
    /// The cgroups of a sandboxed session's memory, pids and cpu limits.
    pub(crate) limits: Option<crate::limits::LimitGroup>,
    /// The root (a keeper) is PID 1 of the session's own PID namespace: it passes on every
    /// signal sent to it from outside, so a polite signal goes to the members one by one, not
    /// to the process group (which holds the keeper).
    pub(crate) own_pid_ns: bool,
}

impl ProcessTree {
    /// The tree of a root just spawned: `io` are the identities of the descriptors it was
    /// given (`scan::fd_identity`), `status` the read end of its keeper's status pipe when the
    /// root is a keeper.
    pub(crate) fn new_spawned(
        root: PidFd,
        marker: SessionMarker,
        cgroup: Option<PathBuf>,
        containment: Containment,
        io: Vec<(u64, u64)>,
        status: Option<OwnedFd>,
    ) -> ProcessTree {
        let root_pid = root.pid();
        // The root is our unreaped child, so its stat is readable; 0 would only widen the scan.
        let root_start_time = stockade_procfs::start_time(root_pid).unwrap_or(0);
        scan::register_tree((root_pid, root_start_time), &io);
        let cgroup_path = match (&cgroup, &containment.inner.cgroup) {
            (Some(dir), Some(root)) => root.mount.path_of(dir),
            _ => None,
        };
        let marker_value = marker.value().into_bytes();
        let mut seen = BTreeSet::new();
        seen.insert((root_pid, root_start_time));
        ProcessTree {
            root: Some(root),
            adopted: false,
            root_pid,
            root_start_time,
            pgid: root_pid,
            marker,
            marker_value,
            io,
            cgroup,
            cgroup_path,
            root_exit: Mutex::new(None),
            keeper: status.is_some(),
            status: Mutex::new(status),
            command_exit: Mutex::new(None),
            seen: Mutex::new(seen),
            _containment: containment,
            limits: None,
            own_pid_ns: false,
        }
    }

    /// A tree started by an earlier daemon of this instance, rebuilt from its registry record
    /// for crash recovery, so the same [`ProcessTree::terminate`] cleans up what is left. The
    /// root is only trusted if its start time still matches the record: a recycled root pid is
    /// never signalled (nor is its process group). The rest of the session is found through
    /// the cgroup (if the record has one and it still exists) and the marker.
    pub fn adopt(record: AdoptSpec, containment: &Containment) -> ProcessTree {
        let root = PidFd::open_verified(record.root_pid, record.root_start_time).ok();
        let keeper = root.is_some() && crate::keeper::runs_keeper(record.root_pid);
        let cgroup = record.cgroup.filter(|dir| dir.join("cgroup.procs").exists());
        let cgroup_path = cgroup.as_deref().and_then(|dir| match &containment.inner.cgroup {
            Some(root) => root.mount.path_of(dir),
            None => super::containment::find_mount().ok()?.path_of(dir),
        });
        let marker_value = record.marker.value().into_bytes();
        let mut seen = BTreeSet::new();
        seen.insert((record.root_pid, record.root_start_time));
        if root.is_some() {
            scan::register_tree((record.root_pid, record.root_start_time), &[]);
        }
        ProcessTree {
            root,
            adopted: true,
            root_pid: record.root_pid,
            root_start_time: record.root_start_time,
            pgid: record.root_pid,
            marker: record.marker,
            marker_value,
            // The descriptors of a tree an earlier daemon started are not known here.
            io: Vec::new(),
            cgroup,
            cgroup_path,
            root_exit: Mutex::new(None),
            // A keeper an earlier daemon started: its status pipe is gone with that daemon, so
            // the command's end is the keeper's (status unknown), and it is still never
            // signalled by itself.
            keeper,
            status: Mutex::new(None),
            command_exit: Mutex::new(None),
            seen: Mutex::new(seen),
            _containment: containment.clone(),
            limits: None,
            own_pid_ns: keeper && crate::namespaces::pid_1_of_own_ns(record.root_pid),
        }
    }

    /// The cgroups enforcing a sandboxed session's memory, pids and cpu limits, if any.
    pub fn limits(&self) -> Option<&crate::limits::LimitGroup> {
        self.limits.as_ref()
    }

    /// The root's pid.
    pub fn root_pid(&self) -> u32 {
        self.root_pid
    }

    /// The root's start time (`/proc/<pid>/stat` field 22): with the pid, its identity.
    pub fn root_start_time(&self) -> u64 {
        self.root_start_time
    }

    /// The process group (and session) id: the root's pid.
    pub fn pgid(&self) -> u32 {
        self.pgid
    }

    /// The session cgroup directory, with cgroup containment.
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_deref()
    }

    /// The session marker.
    pub fn marker(&self) -> &SessionMarker {
        &self.marker
    }

    /// The containment this tree uses.
    pub fn method(&self) -> ContainmentMethod {
        if self.cgroup.is_some() {
            ContainmentMethod::Cgroup
        } else {
            ContainmentMethod::ProcessGroup
        }
    }

    /// The root's pidfd (readable once the root has exited); `None` for an adopted tree whose
    /// root was already gone.
    pub fn root_pidfd(&self) -> Option<&PidFd> {
        self.root.as_ref()
    }

    /// How the root ended, if it has been reaped (`code` and `signal` both `None` when that is
    /// unknowable: an adopted root is not this process's child).
    pub fn root_exit(&self) -> Option<RootExit> {
        *lock(&self.root_exit)
    }

    /// Reaps the root if it has exited. Never blocks; safe to call from any path.
    pub(crate) fn try_reap_root(&self) -> Option<RootExit> {
        const UNKNOWN: RootExit = RootExit { code: None, signal: None };
        let mut slot = lock(&self.root_exit);
        if slot.is_some() {
            return *slot;
        }
        let Some(root) = &self.root else {
            *slot = Some(UNKNOWN);
            return *slot;
        };
        if !root.has_exited() {
            return None;
        }
        match root.try_reap() {
            Ok(Reap::Reaped(exit)) => *slot = Some(exit),
            Ok(Reap::Running) => {}
            Ok(Reap::NotOurs) | Err(_) => {
                if !self.adopted {
                    // Reaped elsewhere (should not happen): record what is known, not a guess.
                    tracing::warn!(pid = self.root_pid, "root was not reapable through its pidfd");
                }
                *slot = Some(UNKNOWN);
            }
        }
        if slot.is_some() {
            scan::root_gone((self.root_pid, self.root_start_time));
        }
        *slot
    }

    /// Waits for the root to exit (pidfd readiness), reaps it and says how it ended. Other
    /// processes of the tree may still be running: that is [`ProcessTree::terminate`]'s job.
    pub async fn wait_root(&self) -> io::Result<RootExit> {
        if let Some(exit) = self.try_reap_root() {
            return Ok(exit);
        }
        let Some(root) = &self.root else {
            return Ok(RootExit { code: None, signal: None });
        };
        // Each waiter registers its own duplicate: one fd cannot be registered twice.
        let dup = root.try_clone_fd()?;
        // SAFETY: `dup` is an open pidfd owned by the AsyncFd for its whole life.
        let async_fd = unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }?;
        loop {
            let mut guard = async_fd.readable().await?;
            if let Some(exit) = self.try_reap_root() {
                return Ok(exit);
            }
            guard.clear_ready();
        }
    }

    /// Closes the root's pidfd once the root is reaped, and the keeper's status pipe: a finished
    /// session holds no descriptor.
    pub fn release_root_fd(&self) {
        lock(&self.status).take();
        if lock(&self.root_exit).is_some()
            && let Some(root) = &self.root
        {
            root.release();
        }
    }

    /// Whether the root is a session keeper this process started (see `keeper.rs`).
    pub fn has_keeper(&self) -> bool {
        self.keeper
    }

    /// Whether the keeper (the root) has exited, or there is none: it exits by itself once every
    /// process of the session is gone.
    pub(crate) fn keeper_gone(&self) -> bool {
        !self.keeper || self.root.as_ref().is_none_or(PidFd::has_exited)
    }

    /// How the session's processes can be found without a census of the machine: under a keeper
    /// of ours still running they are its descendants; once it has exited by itself (an exit,
    /// not a signal: it waited until it had no child left) there are none.
    fn keeper_view(&self) -> KeeperView {
        if !self.keeper || self.adopted || !scan::children_files() {
            return KeeperView::Unknown;
        }
        let Some(root) = &self.root else { return KeeperView::Unknown };
        if !root.has_exited() {
            return KeeperView::Live(self.root_pid);
        }
        match self.try_reap_root() {
            Some(RootExit { code: Some(_), .. }) => KeeperView::Empty,
            _ => KeeperView::Unknown,
        }
    }

    /// Whether `pid` is the session's keeper: never signalled by itself (a group signal
    /// reaches it; it ignores the polite ones and exits once the rest is gone).
    pub(crate) fn is_keeper(&self, pid: u32) -> bool {
        self.keeper && pid == self.root_pid
    }

    /// Whether the command has ended, without waiting: its status came through the keeper's
    /// pipe (or the keeper is gone), or — without a keeper — the root has exited.
    pub fn command_ended(&self) -> bool {
        if !self.keeper {
            return self.root.as_ref().is_none_or(PidFd::has_exited);
        }
        !matches!(self.read_status(), StatusRead::Pending)
    }

    /// How the command ended, when known (see [`Self::wait_command`]). Never blocks.
    fn try_command_exit(&self) -> Option<RootExit> {
        if !self.keeper {
            return self.try_reap_root();
        }
        match self.read_status() {
            StatusRead::Exit(exit) => Some(exit),
            // The keeper closed the pipe without a status (it was killed): its own end is all
            // that is known.
            StatusRead::Eof => self.try_reap_root(),
            StatusRead::Pending => None,
        }
    }

    /// Reads the keeper's status pipe (non-blocking) into `command_exit`.
    fn read_status(&self) -> StatusRead {
        let mut slot = lock(&self.command_exit);
        if let Some(exit) = *slot {
            return StatusRead::Exit(exit);
        }
        let status = lock(&self.status);
        let Some(fd) = status.as_ref() else { return StatusRead::Eof };
        let mut buf = [0u8; 4];
        match rustix::io::read(fd, &mut buf) {
            Ok(4) => {
                let (code, signal) = crate::keeper::decode(i32::from_ne_bytes(buf));
                *slot = Some(RootExit { code, signal });
                StatusRead::Exit(RootExit { code, signal })
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => StatusRead::Pending,
            // EOF (or a short write, which a 4-byte pipe write cannot be): no status.
            _ => StatusRead::Eof,
        }
    }

    /// Waits for the command to end and says how it ended: with a keeper, the status it writes
    /// when the command exits (the keeper itself stays until every orphan is gone); without
    /// one, the root's exit ([`Self::wait_root`]).
    pub async fn wait_command(&self) -> io::Result<RootExit> {
        if !self.keeper {
            return self.wait_root().await;
        }
        if let Some(exit) = self.try_command_exit() {
            return Ok(exit);
        }
        let dup = lock(&self.status).as_ref().map(OwnedFd::try_clone).transpose()?;
        let Some(dup) = dup else { return self.wait_root().await };
        // SAFETY: `dup` is an open pipe descriptor owned by the AsyncFd for its whole life.
        let async_fd = unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }?;
        loop {
            let mut guard = async_fd.readable().await?;
            match self.read_status() {
                StatusRead::Exit(exit) => return Ok(exit),
                StatusRead::Eof => return self.wait_root().await,
                StatusRead::Pending => guard.clear_ready(),
            }
        }
    }

    /// Removes the session's cgroup (and the sub-cgroups its processes made) once the root is
    /// reaped; one still in use is left as it is. Blocking (a few
    /// `rmdir`s on the cgroup file system).
    pub fn remove_cgroup(&self) {
        if let Some(limits) = &self.limits
            && self.root_reaped()
        {
            limits.remove();
        }
        if let Some(dir) = self.cgroup()
            && self.root_reaped()
            && let Err(e) = super::cgroup::remove_session(dir)
        {
            tracing::debug!(cgroup = %dir.display(), error = %e, "session cgroup not removed yet");
        }
    }

    /// Whether the root has been reaped — or, for an adopted root (not our child), has exited:
    /// then its pid, hence the pgid, may be recycled at any time and no longer names the session.
    pub(crate) fn root_reaped(&self) -> bool {
        lock(&self.root_exit).is_some()
            || self.root.as_ref().is_none_or(|r| self.adopted && r.has_exited())
    }

    pub(crate) fn query(&self) -> SessionQuery {
        SessionQuery {
            marker_value: self.marker_value.clone(),
            // While the root is unreaped its pid cannot be reused, so neither can the pgid/sid.
            pgid: (!self.root_reaped()).then_some(self.pgid),
            not_before: self.root_start_time,
            seen: lock(&self.seen).clone(),
            io: self.io.clone(),
        }
    }

    fn snapshot_job(&self) -> SnapshotJob {
        SnapshotJob {
            query: self.query(),
            cgroup: self.cgroup.clone(),
            cgroup_path: self.cgroup_path.clone(),
            keeper: self.keeper_view(),
        }
    }

    /// Every process of the session right now, zombies included (flagged): cgroup members, the
    /// process group, the marker, descendants, holders of its descriptors and what was seen
    /// before — from a census started now (shared with other callers scanning at once).
    pub(crate) fn snapshot(&self) -> Found {
        let found = self.snapshot_job().run();
        self.remember(&found.members);
        found
    }

    /// [`Self::snapshot`] on the blocking pool, so a `/proc` scan never stalls a runtime worker.
    pub(crate) async fn snapshot_async(&self) -> Found {
        let job = self.snapshot_job();
        let found = match tokio::task::spawn_blocking({
            let job = job.clone();
            move || job.run()
        })
        .await
        {
            Ok(found) => found,
            // The blocking pool is shutting down (or the scan panicked): scan here instead.
            Err(_) => job.run(),
        };
        self.remember(&found.members);
        found
    }

    /// [`Self::snapshot`] from `census` (a bulk terminate takes one census per round for every
    /// tree it ends; an empty one when every tree has a cgroup). Blocking.
    pub(crate) fn snapshot_in(&self, census: &ProcessCensus) -> Found {
        let found = self.snapshot_job().run_in(census);
        self.remember(&found.members);
        found
    }

    /// Remembers the identities of members seen alive or in the group, so their zombies can be
    /// reaped later even after they left every other trace of the session.
    pub(crate) fn remember(&self, found: &[Member]) {
        let mut seen = lock(&self.seen);
        let ids = found
            .iter()
            .filter(|m| m.via != scan::Via::ZombieChild)
            .map(|m| (m.stat.pid, m.stat.start_time));
        let new: Vec<_> = ids.filter(|id| seen.insert(*id)).collect();
        drop(seen);
        scan::claim(new);
    }

    /// The live (non-zombie) processes of the session: cgroup members ∪ process-group members ∪
    /// processes carrying the marker ∪ their descendants ∪ holders of the session's output pipe,
    /// terminal or spool ∪ processes seen as members before. Reads `/proc`; blocking.
    pub fn members(&self) -> Vec<u32> {
        live_pids(&self.snapshot().members)
    }

    /// How many live processes the session has, cheaply: the session cgroup's `cgroup.procs`
    /// where there is one, the descendants of a live keeper of this process (no `/proc` scan
    /// either), else counted in the census `census` gives — called only then, so one scan can
    /// be shared by every session a caller counts. Blocking.
    /// The session's keeper is not counted: it is not one of the command's processes.
    pub fn count_processes<'c>(&self, census: impl FnOnce() -> &'c ProcessCensus) -> usize {
        let pids = match (&self.cgroup, self.keeper_view()) {
            (Some(dir), _) => cgroup::procs(dir).unwrap_or_default(),
            (None, KeeperView::Empty) => Vec::new(),
            // Every descendant of the keeper, and only those, is the session's.
            (None, KeeperView::Live(root)) => return ProcessCensus::count_descendants(root),
            (None, KeeperView::Unknown) => {
                live_pids(&scan::attribute(census(), &self.query()).members)
            }
        };
        pids.into_iter().filter(|pid| !self.is_keeper(*pid)).count()
    }

    /// Whether [`Self::count_processes`] needs a census (the tree has no cgroup and no keeper
    /// of this process).
    pub fn needs_census(&self) -> bool {
        self.cgroup.is_none() && matches!(self.keeper_view(), KeeperView::Unknown)
    }

    /// Reaps zombies that are this process's children and belong to the session (seen as
    /// members, or still in its group). Never touches any other child. Returns how many.
    pub(crate) fn reap_orphans(&self, snapshot: &[Member]) -> usize {
        let me = std::process::id();
        let seen = lock(&self.seen).clone();
        let mut reaped = 0;
        for m in snapshot {
            let st = m.stat;
            if st.pid == self.root_pid || !st.is_zombie() || st.ppid != me {
                continue;
            }
            let in_session = matches!(m.via, scan::Via::Group | scan::Via::Session);
            if !(seen.contains(&(st.pid, st.start_time)) || in_session) {
                continue;
            }
            // A zombie child of ours cannot be recycled until reaped: the pid is stable here.
            if let Ok(fd) = PidFd::open_verified(st.pid, st.start_time)
                && matches!(fd.try_reap(), Ok(Reap::Reaped(_)))
            {
                reaped += 1;
            }
        }
        reaped
    }
}

/// Sorted, deduplicated pids of the live (non-zombie) members.
pub(crate) fn live_pids(members: &[Member]) -> Vec<u32> {
    let mut pids: Vec<u32> =
        members.iter().filter(|m| !m.stat.is_zombie()).map(|m| m.stat.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Whether the process `st` describes is alive now: same pid and start time, not a zombie.
pub(crate) fn still_alive(st: &stockade_procfs::ProcStat) -> bool {
    stockade_procfs::read_stat(st.pid)
        .is_some_and(|now| now.start_time == st.start_time && !now.is_zombie())
}

impl Drop for ProcessTree {
    fn drop(&mut self) {
        scan::unregister_tree((self.root_pid, self.root_start_time), &self.io, &lock(&self.seen));
        if self.try_reap_root().is_none() && !self.adopted {
            tracing::warn!(
                pid = self.root_pid,
                session = %self.marker.value(),
                "process tree dropped while its root is still running; it was not terminated"
            );
        }
        if let Some(dir) = &self.cgroup
            && let Err(e) = cgroup::remove_session(dir)
        {
            tracing::debug!(cgroup = %dir.display(), error = %e, "session cgroup not removed");
        }
    }
}

/// What the keeper's status pipe said.
enum StatusRead {
    /// The command's end.
    Exit(RootExit),
    /// Closed without a status (or already released).
    Eof,
    /// Nothing yet.
    Pending,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `pid` is still alive and outside every cgroup beside `session` (`/…/stockade-x/sh-2`
/// beside `/…/stockade-x/sh-1`, or below one). One in a sibling is another session's of the
/// same daemon, not an escapee of `session`; one whose cgroup can no longer be read has ended
/// since the census and is nobody's escapee either.
fn stranger_to_siblings(pid: u32, session: &str) -> bool {
    let Some(path) = scan::cgroup_of(pid) else { return false };
    let Some(parent) = session.rsplit_once('/').map(|(p, _)| p).filter(|p| !p.is_empty()) else {
        return true;
    };
    let sibling = path.strip_prefix(parent).is_some_and(|rest| rest.starts_with('/'))
        && path != session
        && !path.starts_with(&format!("{session}/"));
    !sibling
}

/// An owned description of one snapshot, so it can run on the blocking pool.
#[derive(Debug, Clone)]
struct SnapshotJob {
    query: SessionQuery,
    cgroup: Option<PathBuf>,
    cgroup_path: Option<String>,
    keeper: KeeperView,
}

/// What a session's keeper says about where its processes are (see
/// [`ProcessTree::keeper_view`]).
#[derive(Debug, Clone, Copy)]
enum KeeperView {
    /// No keeper of this process, or one killed by a signal: a census of the machine.
    Unknown,
    /// A keeper of this process still running (its pid): the session is its descendants.
    Live(u32),
    /// A keeper of this process that exited by itself: nothing of the session is left.
    Empty,
}

impl SnapshotJob {
    fn run(&self) -> Found {
        if matches!(self.keeper, KeeperView::Unknown) {
            let census = scan::census_after(std::time::Instant::now(), self.query.not_before);
            return self.look(&census);
        }
        self.run_in(&ProcessCensus::empty())
    }

    /// [`Self::run`] with a census the caller took (one shared by many trees), used only where
    /// the keeper does not say where the session is.
    fn run_in(&self, census: &ProcessCensus) -> Found {
        match self.keeper {
            KeeperView::Unknown => self.look(census),
            KeeperView::Live(root) => match ProcessCensus::of_descendants(root) {
                Some(own) => self.look(&own),
                // The keeper died during the look: a census finds where its orphans went.
                None => {
                    self.look(&scan::census_after(std::time::Instant::now(), self.query.not_before))
                }
            },
            KeeperView::Empty if self.cgroup.is_none() => Found::default(),
            // A keeper with a cgroup (`--session-keeper=always`): the cgroup says the rest.
            KeeperView::Empty => self.look(&ProcessCensus::empty()),
        }
    }

    /// The session's processes in `census` (and its cgroup).
    fn look(&self, census: &ProcessCensus) -> Found {
        let mut found = scan::attribute(census, &self.query);
        if let Some(dir) = &self.cgroup {
            for pid in cgroup::procs(dir).unwrap_or_default() {
                if found.members.iter().any(|m| m.stat.pid == pid) {
                    continue;
                }
                if let Some(m) = self.verify_cgroup_member(pid) {
                    found.members.push(m);
                }
            }
            // An orphan still in the session cgroup is the session's, not unattributed; one in
            // another session's cgroup of this daemon is that session's.
            found.unattributed.retain(|st| !found.members.iter().any(|m| m.stat.pid == st.pid));
            if let Some(want) = &self.cgroup_path {
                found.unattributed.retain(|st| stranger_to_siblings(st.pid, want));
            }
        }
        found
    }

    /// Reads a `cgroup.procs` pid's identity and confirms it is (still) in the session cgroup.
    fn verify_cgroup_member(&self, pid: u32) -> Option<Member> {
        let want = self.cgroup_path.as_deref()?;
        let st = stockade_procfs::read_stat(pid)?;
        let inside =
            scan::cgroup_of(pid).is_some_and(|p| p == want || p.starts_with(&format!("{want}/")));
        let same =
            stockade_procfs::read_stat(pid).is_some_and(|again| again.start_time == st.start_time);
        (inside && same && !st.is_zombie()).then_some(Member { stat: st, via: scan::Via::Cgroup })
    }
}
