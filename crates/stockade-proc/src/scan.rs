//! Scanning `/proc` for sessions: one census of every process (identity and session markers)
//! shared by every session asking at about the same time, and the attribution that finds every
//! process of a session in it — including the ones that left its process group, scrubbed their
//! environment or were orphaned onto this process (the subreaper) — and names what cannot be
//! attributed. Process identity (`stat`) is read through `stockade_procfs`, the workspace's one
//! parser.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stockade_procfs::{ProcStat, read_stat};

use super::MARKER_ENV;

/// Upper bound on the bytes of one `environ` read: the marker is searched in this much only.
/// (Linux limits one argument/environment string to 128 KiB; real environments are far smaller.)
const ENVIRON_READ_LIMIT: u64 = 1024 * 1024;

/// The cgroup v2 path (`0::<path>` line) of `pid`, as seen in `/proc/<pid>/cgroup`.
pub(crate) fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned)
}

/// Whether this kernel lists a task's children in `/proc/<pid>/task/<tid>/children`
/// (`CONFIG_PROC_CHILDREN`), checked once.
pub(crate) fn children_files() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let me = std::process::id();
        Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// The descendants of `root` (not `root` itself), each once, found through the `children`
/// files (only where [`children_files`]): O(the tree's processes), whatever else runs. `root`
/// must be single-threaded (a keeper is).
fn descendants(root: u32) -> Vec<u32> {
    let mut buf = Vec::new();
    let mut queue = Vec::new();
    stockade_procfs::thread_children(root, root, &mut buf, &mut queue);
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    while let Some(pid) = queue.pop() {
        if pid != root && seen.insert(pid) {
            found.push(pid);
            stockade_procfs::children(pid, &mut buf, &mut queue);
        }
    }
    found
}

/// Every pid currently listed in `/proc`.
pub(crate) fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(Path::new("/proc")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// One process as a census saw it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub stat: ProcStat,
    /// Values (`<instance>:<id>`) of its `STOCKADE_SESSION` entries: empty when it has none, when
    /// it is a zombie, or when it started before the census read environments.
    pub markers: Vec<Box<[u8]>>,
    /// A child of this process that still ran this process's executable when the census looked:
    /// a spawn between fork and `exec`, holding every descriptor of this process. Decided before
    /// the environment is read, so a child that `exec`s in between is either seen as a fork or
    /// read with its new environment (its marker) — never as an unmarked stranger.
    pub own_fork: bool,
}

#[cfg(test)]
impl Entry {
    fn has_marker(&self, value: &[u8]) -> bool {
        self.markers.iter().any(|m| &**m == value)
    }
}

/// One pass over `/proc` that every session asking at about the same time shares: each process's
/// identity (`stat`) and session markers. `list` takes one per call and counts every session from
/// it; terminates running at once share theirs (see `census_after`), so the cost is
/// O(processes) per round, not O(sessions × processes).
#[derive(Debug)]
pub struct ProcessCensus {
    entries: Vec<Entry>,
    index: HashMap<u32, usize>,
    /// Environments were read for processes started at or after this (clock ticks since boot).
    environ_from: u64,
    /// Indexes, so one session's look costs O(its processes), not O(all processes).
    by_group: HashMap<u32, Vec<usize>>,
    by_session: HashMap<u32, Vec<usize>>,
    by_marker: HashMap<Box<[u8]>, Vec<usize>>,
    children: HashMap<u32, Vec<usize>>,
    /// Live processes without any session marker.
    unmarked: Vec<usize>,
}

impl ProcessCensus {
    /// A census that saw nothing (for callers whose trees all have cgroups).
    pub fn empty() -> ProcessCensus {
        ProcessCensus::indexed(Vec::new(), 0)
    }

    /// Reads `/proc` once: every process, and the markers of all of them. Blocking.
    pub fn take() -> ProcessCensus {
        ProcessCensus::take_from(0)
    }

    /// Reads `/proc` once; environments only of processes started at or after `environ_from`
    /// (older ones cannot be descendants of a session started later).
    pub(crate) fn take_from(environ_from: u64) -> ProcessCensus {
        CENSUSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = std::process::id();
        let prefix = format!("{MARKER_ENV}=");
        let mut buf = Vec::with_capacity(4096);
        let mut entries = Vec::new();
        for pid in all_pids() {
            if pid == me {
                continue;
            }
            let Some(stat) = read_stat(pid) else { continue };
            if stat.is_kernel_thread() {
                continue;
            }
            let mut markers = Vec::new();
            let own_fork = stat.ppid == me && !stat.is_zombie() && is_own_fork(pid);
            if !stat.is_zombie()
                && !own_fork
                && stat.start_time >= environ_from
                && read_environ(pid, &mut buf)
                // The same start time after the read: the environment was this process's.
                && read_stat(pid).is_some_and(|again| again.start_time == stat.start_time)
            {
                markers = buf
                    .split(|b| *b == 0)
                    .filter_map(|e| e.strip_prefix(prefix.as_bytes()))
                    .map(Box::from)
                    .collect();
            }
            entries.push(Entry { stat, markers, own_fork });
        }
        ProcessCensus::indexed(entries, environ_from)
    }

    /// The processes of one tree only — `root` and its descendants, found through
    /// `/proc/<pid>/task/<tid>/children`, with no environment read (only where
    /// [`children_files`]). For a session under a live keeper of this process: every process
    /// of the session is the keeper's descendant (its orphans land on the keeper), so this look
    /// costs O(the session's processes), not O(every process on the machine). `None` when the
    /// root was not running before and after the walk: a root that died meanwhile may have left
    /// orphans elsewhere, which only a census finds. Blocking.
    pub(crate) fn of_descendants(root: u32) -> Option<ProcessCensus> {
        let running = || read_stat(root).is_some_and(|st| !st.is_zombie());
        if !running() {
            return None;
        }
        let entries = std::iter::once(root)
            .chain(descendants(root))
            .filter_map(|pid| {
                let stat = read_stat(pid)?;
                Some(Entry { stat, markers: Vec::new(), own_fork: false })
            })
            .collect();
        running().then(|| ProcessCensus::indexed(entries, u64::MAX))
    }

    /// How many descendants `root` has (zombies included), from the `children` files alone: the
    /// cheap count `list` shows for a session under a live keeper. Blocking.
    pub(crate) fn count_descendants(root: u32) -> usize {
        descendants(root).len()
    }

    fn indexed(entries: Vec<Entry>, environ_from: u64) -> ProcessCensus {
        let mut c = ProcessCensus {
            index: HashMap::with_capacity(entries.len()),
            environ_from,
            by_group: HashMap::new(),
            by_session: HashMap::new(),
            by_marker: HashMap::new(),
            children: HashMap::new(),
            unmarked: Vec::new(),
            entries: Vec::new(),
        };
        for (i, e) in entries.iter().enumerate() {
            let st = e.stat;
            c.index.insert(st.pid, i);
            c.by_group.entry(st.pgrp).or_default().push(i);
            c.by_session.entry(st.session).or_default().push(i);
            c.children.entry(st.ppid).or_default().push(i);
            for m in &e.markers {
                c.by_marker.entry(m.clone()).or_default().push(i);
            }
            if e.markers.is_empty() && !st.is_zombie() {
                c.unmarked.push(i);
            }
        }
        c.entries = entries;
        c
    }

    fn at(&self, ix: &HashMap<u32, Vec<usize>>, key: u32) -> impl Iterator<Item = &Entry> {
        ix.get(&key).into_iter().flatten().map(|&i| &self.entries[i])
    }

    pub(crate) fn get(&self, pid: u32) -> Option<&Entry> {
        self.index.get(&pid).map(|&i| &self.entries[i])
    }

    /// How many processes it saw.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it saw none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Reads `/proc/<pid>/environ` (bounded) into `buf`.
fn read_environ(pid: u32, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    let Ok(file) = File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    file.take(ENVIRON_READ_LIMIT).read_to_end(buf).is_ok()
}

static CENSUSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many censuses (full `/proc` scans) this process has taken.
pub fn censuses_taken() -> u64 {
    CENSUSES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The latest shared census, and when it was started.
struct Latest {
    started: Instant,
    census: Arc<ProcessCensus>,
}

static LATEST: Mutex<Option<Latest>> = Mutex::new(None);
/// Held while a shared census is taken: one at a time, and whoever waited shares the result.
static SCANNING: Mutex<()> = Mutex::new(());

/// A census started no earlier than `after` that read the environments of processes started
/// from `environ_from` on: the latest shared one if it qualifies, else a new one. Concurrent
/// callers wait for one scan and share it. Blocking.
pub(crate) fn census_after(after: Instant, environ_from: u64) -> Arc<ProcessCensus> {
    let fits = |l: &Latest| l.started >= after && l.census.environ_from <= environ_from;
    if let Some(l) = lock(&LATEST).as_ref().filter(|l| fits(l)) {
        return Arc::clone(&l.census);
    }
    let _one_at_a_time = lock(&SCANNING);
    // Someone may have scanned while this caller waited.
    let from = match lock(&LATEST).as_ref() {
        Some(l) if fits(l) => return Arc::clone(&l.census),
        // Keep covering what the last census covered, so callers keep sharing.
        Some(l) if l.started.elapsed() < Duration::from_secs(1) => {
            l.census.environ_from.min(environ_from)
        }
        _ => environ_from,
    };
    // And every live tree's, so callers of all of them share it: many sessions ending at once
    // (a bulk kill, shutdown) each ask with their own start time, and a census too young for
    // the next caller would be taken again for each.
    let oldest_root = lock(&REGISTRY).roots.iter().map(|&(_, start)| start).min();
    let from = oldest_root.map_or(from, |oldest| from.min(oldest));
    let started = Instant::now();
    let census = Arc::new(ProcessCensus::take_from(from));
    *lock(&LATEST) = Some(Latest { started, census: Arc::clone(&census) });
    census
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What every tree of this process knows, so one session's look does not call another
/// session's process unattributed.
#[derive(Debug, Default)]
struct Registry {
    /// Roots of trees spawned or adopted and not yet reaped.
    roots: BTreeSet<(u32, u64)>,
    /// Processes some tree has seen as its member.
    claimed: BTreeSet<(u32, u64)>,
    /// The descriptors (output pipe, terminal, spool) of every live tree.
    io: Vec<(u64, u64)>,
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { roots: BTreeSet::new(), claimed: BTreeSet::new(), io: Vec::new() });

/// Records a tree's root and descriptors (until [`unregister_tree`]).
pub(crate) fn register_tree(root: (u32, u64), io: &[(u64, u64)]) {
    let mut r = lock(&REGISTRY);
    r.roots.insert(root);
    r.io.extend_from_slice(io);
}

/// Forgets what [`register_tree`] and [`claim`] recorded for a tree.
pub(crate) fn unregister_tree(root: (u32, u64), io: &[(u64, u64)], seen: &BTreeSet<(u32, u64)>) {
    let mut r = lock(&REGISTRY);
    r.roots.remove(&root);
    for id in io {
        if let Some(at) = r.io.iter().position(|x| x == id) {
            r.io.swap_remove(at);
        }
    }
    for id in seen {
        r.claimed.remove(id);
    }
}

/// The root has been reaped: its pid is no longer a root.
pub(crate) fn root_gone(root: (u32, u64)) {
    lock(&REGISTRY).roots.remove(&root);
}

/// Records processes a tree has seen as its members.
pub(crate) fn claim(ids: impl IntoIterator<Item = (u32, u64)>) {
    lock(&REGISTRY).claimed.extend(ids);
}

/// The identity of a descriptor a spawn gives its child, when it is worth watching: a pipe, a
/// terminal or a regular file (the output pipe, the PTY slave, a file-capture spool) — taken
/// from this process's own ends, not from the child's descriptors, which a keeper moves to
/// `/dev/null`. `/dev/null` and other devices are shared by everyone and say nothing.
pub(crate) fn fd_identity(fd: &impl std::os::fd::AsFd) -> Option<(u64, u64)> {
    let st = rustix::fs::fstat(fd).ok()?;
    let kind = st.st_mode & libc::S_IFMT;
    // Unix98 PTY slaves are character devices with majors 136–143.
    let pts = kind == libc::S_IFCHR && (136..=143).contains(&rustix::fs::major(st.st_rdev));
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    let id = (st.st_dev as u64, st.st_ino as u64);
    (kind == libc::S_IFIFO || kind == libc::S_IFREG || pts).then_some(id)
}

/// Whether `pid` holds an open descriptor on any of `ids`.
fn holds_any(pid: u32, ids: &[(u64, u64)]) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    dir.filter_map(Result::ok)
        .any(|e| std::fs::metadata(e.path()).is_ok_and(|m| ids.contains(&(m.dev(), m.ino()))))
}

/// What a scan looks for.
#[derive(Debug, Clone)]
pub(crate) struct SessionQuery {
    /// The marker value `<instance>:<id>`.
    pub marker_value: Vec<u8>,
    /// The session's process group (and session id), trusted only while the root is unreaped.
    pub pgid: Option<u32>,
    /// Processes that started before the root cannot be its descendants.
    pub not_before: u64,
    /// `(pid, start time)` of every process seen as a member earlier.
    pub seen: BTreeSet<(u32, u64)>,
    /// The session's output pipe, terminal or spool: a process holding one is the session's.
    pub io: Vec<(u64, u64)>,
}

/// How a process was recognised as the session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// In the session's process group.
    Group,
    /// In the session's session, but another process group.
    Session,
    /// Carries the marker.
    Marker,
    /// Listed in the session cgroup.
    Cgroup,
    /// A descendant of a member (it may have left the group and scrubbed its environment).
    Descendant,
    /// Seen as a member earlier; it has lost every other trace since (an orphan on the
    /// subreaper that scrubbed its environment and left the group).
    Remembered,
    /// Holds the session's output pipe, terminal or spool open.
    Holder,
    /// A zombie child of this process, outside the group: the session's only if the caller saw
    /// it alive as a member earlier. Never signalled, never counted as alive.
    ZombieChild,
}

/// One process of a session, seen at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub stat: ProcStat,
    pub via: Via,
}

/// What one look at a session found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Found {
    pub members: Vec<Member>,
    /// Live orphans on this process (the subreaper) that no session can be shown to own, started
    /// while this session ran: evidence that something may have escaped it. Never signalled.
    pub unattributed: Vec<ProcStat>,
}

/// Finds the processes of a session in a census: its process group or session (while those ids
/// are trustworthy), every process carrying its marker, their descendants, every process seen as
/// a member before, and every process holding its output pipe, terminal or spool. Zombies are
/// included (flagged by their state) when they are in the group; a zombie outside it is only
/// recognised by the caller's memory of it.
pub(crate) fn attribute(census: &ProcessCensus, q: &SessionQuery) -> Found {
    let me = std::process::id();
    let mut found = Found::default();
    let mut members: HashSet<u32> = HashSet::new();
    fn add(members: &mut HashSet<u32>, found: &mut Found, stat: ProcStat, via: Via) {
        if members.insert(stat.pid) {
            found.members.push(Member { stat, via });
        }
    }
    if let Some(g) = q.pgid {
        // Only `pgrp` members are reached by a group signal; session members that moved to
        // their own group (GNU `timeout` does) must be signalled one by one.
        for e in census.at(&census.by_group, g) {
            add(&mut members, &mut found, e.stat, Via::Group);
        }
        for e in census.at(&census.by_session, g) {
            add(&mut members, &mut found, e.stat, Via::Session);
        }
    }
    let young = |st: &ProcStat| !st.is_zombie() && st.start_time >= q.not_before;
    for e in census.by_marker.get(q.marker_value.as_slice()).into_iter().flatten() {
        let st = census.entries[*e].stat;
        if young(&st) {
            add(&mut members, &mut found, st, Via::Marker);
        }
    }
    for &(pid, start) in &q.seen {
        if let Some(e) = census.get(pid)
            && e.stat.start_time == start
            && !e.stat.is_zombie()
        {
            add(&mut members, &mut found, e.stat, Via::Remembered);
        }
    }
    // Descendants of members (they may have left the group and scrubbed their environment).
    let mut queue: Vec<u32> = found.members.iter().map(|m| m.stat.pid).collect();
    while let Some(pid) = queue.pop() {
        for e in census.at(&census.children, pid) {
            if young(&e.stat) && !members.contains(&e.stat.pid) {
                add(&mut members, &mut found, e.stat, Via::Descendant);
                queue.push(e.stat.pid);
            }
        }
    }
    // Zombie children of this process outside the group: the caller decides by its memory.
    for e in census.at(&census.children, me) {
        if e.stat.is_zombie() && !members.contains(&e.stat.pid) {
            found.members.push(Member { stat: e.stat, via: Via::ZombieChild });
        }
    }
    // Among unmarked processes: holders of the session's descriptors, then orphans nobody owns.
    let mut orphans = Vec::new();
    for &i in &census.unmarked {
        let st = census.entries[i].stat;
        if !young(&st) || members.contains(&st.pid) {
            continue;
        }
        // A child of ours between fork and exec still holds every descriptor of this process
        // (other sessions' pipes among them): it is a spawn in progress, not a holder or an
        // escapee.
        if census.entries[i].own_fork {
            continue;
        }
        if !q.io.is_empty() && descends_from(census, st.ppid, me) && holds_any(st.pid, &q.io) {
            add(&mut members, &mut found, st, Via::Holder);
        } else if st.ppid == me {
            orphans.push(st);
        }
    }
    if orphans.is_empty() {
        return found;
    }
    let (roots, claimed, io) = {
        let r = lock(&REGISTRY);
        (r.roots.clone(), r.claimed.clone(), r.io.clone())
    };
    let my_session = read_stat(me).map(|s| s.session);
    found.unattributed = orphans
        .into_iter()
        // A root of a tree, a process another tree owns, or a child this process started itself
        // (in this process's session: nothing of a session is, every session starts with
        // `setsid`) is no escapee.
        .filter(|st| {
            let id = (st.pid, st.start_time);
            !roots.contains(&id)
                && !claimed.contains(&id)
                && Some(st.session) != my_session
                && !holds_any(st.pid, &io)
        })
        .collect();
    // What an unowned orphan started is as unowned as it is: named with it, not left out.
    let owned = |st: &ProcStat| {
        members.contains(&st.pid)
            || roots.contains(&(st.pid, st.start_time))
            || claimed.contains(&(st.pid, st.start_time))
    };
    add_descendants(census, &mut found.unattributed, |st| young(st) && !owned(st));
    found
}

/// Adds to `list` every descendant (in `census`) of the processes in it that `take` accepts.
fn add_descendants(
    census: &ProcessCensus,
    list: &mut Vec<ProcStat>,
    take: impl Fn(&ProcStat) -> bool,
) {
    let mut queue: Vec<u32> = list.iter().map(|st| st.pid).collect();
    while let Some(pid) = queue.pop() {
        for e in census.at(&census.children, pid) {
            let st = e.stat;
            if take(&st) && !list.iter().any(|u| u.pid == st.pid) {
                list.push(st);
                queue.push(st.pid);
            }
        }
    }
}

/// Whether `pid` runs this process's own executable: a child forked by a spawn that has not
/// reached `exec` yet.
fn is_own_fork(pid: u32) -> bool {
    static OWN: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(own) = OWN.get_or_init(|| std::fs::read_link("/proc/self/exe").ok()) else {
        return false;
    };
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| &exe == own)
}

/// Whether `ancestor` is `pid` or one of its ancestors in the census.
fn descends_from(census: &ProcessCensus, mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..MAX_DEPTH {
        if pid == ancestor {
            return true;
        }
        match census.get(pid) {
            Some(e) if pid > 1 => pid = e.stat.ppid,
            _ => return false,
        }
    }
    false
}

/// Longest parent chain followed (a guard against a chain that changes while it is read).
const MAX_DEPTH: usize = 4096;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_census_reads_exact_marker_values() {
        let child = Reaped(
            std::process::Command::new("sleep")
                .arg("30")
                .env(MARKER_ENV, "census-test:sh-1")
                .spawn()
                .unwrap(),
        );
        let pid = child.0.id();
        // The child's environment is its own once it has exec'd: look again for up to 2 s
        // (under a loaded CI run the first census can come first).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let census = loop {
            let census = ProcessCensus::take();
            let seen = census.get(pid).is_some_and(|e| e.has_marker(b"census-test:sh-1"));
            if seen || std::time::Instant::now() > deadline {
                break census;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let entry = census.get(pid).unwrap();
        assert!(entry.has_marker(b"census-test:sh-1"));
        assert!(!entry.has_marker(b"census-test:sh-"), "a prefix is not the marker");
        assert!(census.get(std::process::id()).is_none(), "the scanning process is left out");
    }
}
