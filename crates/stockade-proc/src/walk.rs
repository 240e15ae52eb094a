//! The cheap look at a session whose root is alive: a walk down from the root.
//!
//! Every session root is a child subreaper, so while it lives everything its session started is
//! its descendant — what left the group, scrubbed its environment or was orphaned included (an
//! orphan reparents to the root). Walking `/proc/PID/task/*/children` from the root costs
//! O(the session's processes), where a census costs O(every process on the machine): this is
//! what `kill` and `list` use while the root runs. Once the root has exited (its children then
//! reparent to this process) or for a tree an earlier daemon started, the census is used.

use std::collections::HashSet;

use stockade_procfs::{ProcStat, read_stat};

use super::scan::{Found, Member, SessionQuery, Via};

/// Walks started (for tests and `stats`).
static WALKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many per-session walks this process has made.
pub fn walks_taken() -> u64 {
    WALKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The children of `st`'s process, from the `children` file of each of its threads (a child
/// hangs under the thread that forked it); of one thread, without listing them.
fn children(st: &ProcStat, out: &mut Vec<u32>) {
    if st.num_threads == 1 {
        read_children(&format!("/proc/{0}/task/{0}/children", st.pid), out);
        return;
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", st.pid)) else { return };
    for t in tasks.flatten() {
        read_children(&t.path().join("children").to_string_lossy(), out);
    }
}

/// Reads one `children` file (pids separated by spaces) into `out`.
fn read_children(path: &str, out: &mut Vec<u32>) {
    use std::io::Read as _;
    let Ok(mut file) = std::fs::File::open(path) else { return };
    let mut buf = [0u8; 4096];
    let mut text = Vec::new();
    loop {
        match file.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
    let pids = text
        .split(|b| *b == b' ' || *b == b'\n')
        .filter_map(|p| std::str::from_utf8(p).ok().and_then(|p| p.parse::<u32>().ok()));
    out.extend(pids);
}

/// Every process of the session rooted at `q.root` (a root this process spawned), found without
/// a census: while the root lives, by walking down from it; once it has exited, from the
/// orphans it left on this process (placed in the session, or carrying its marker) and what was
/// seen before, and down from those. Zombies are included only in the session's group or as
/// this process's children (the caller's memory decides), as in a census.
/// With a cgroup (`orphans` false) the orphans are the cgroup's members, which the caller adds:
/// nothing on this process is looked at or placed.
pub(crate) fn from_own_root(q: &SessionQuery, orphans: bool) -> Found {
    if let Some(found) = from_live_root(q) {
        return found;
    }
    if !orphans {
        WALKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut w = Walk::default();
        // Zombies that reparented here: the caller reaps those it saw as members.
        let roots = super::scan::root_pids();
        for pid in super::orphans::own_children().into_iter().filter(|p| !roots.contains(p)) {
            if let Some(st) = read_stat(pid).filter(ProcStat::is_zombie) {
                w.found.members.push(Member { stat: st, via: Via::ZombieChild });
            }
        }
        w.remembered(q);
        w.descend(q);
        return w.found;
    }
    after_exit(q)
}

/// Labels a descendant by how a census would have recognised it.
fn via(st: &ProcStat, pgid: Option<u32>) -> Via {
    match pgid {
        Some(g) if st.pgrp == g => Via::Group,
        Some(g) if st.session == g => Via::Session,
        _ => Via::Descendant,
    }
}

/// The walk while the root is alive; `None` when it is not alive before and after the walk (it
/// exited meanwhile: its children may have moved to this process during the walk).
fn from_live_root(q: &SessionQuery) -> Option<Found> {
    let (root_pid, root_start) = q.root;
    let alive = || read_stat(root_pid).filter(|st| st.start_time == root_start && !st.is_zombie());
    let root = alive()?;
    WALKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut w = Walk::default();
    w.add(Member { stat: root, via: Via::Group });
    w.remembered(q);
    w.descend(q);
    alive()?;
    Some(w.found)
}

/// The walk once the root has exited: its children reparented to this process (a subreaper)
/// and were placed in the session before it was reaped (see `orphans`).
fn after_exit(q: &SessionQuery) -> Found {
    WALKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let marker = [super::MARKER_ENV.as_bytes(), b"=", &q.marker_value].concat();
    let roots = super::scan::root_pids();
    let mut w = Walk::default();
    // The marker is looked at before the placement: a child that `exec`s `env -i` in between
    // is then either seen with the marker or placed without it, never neither.
    let mut unmarked = Vec::new();
    for pid in super::orphans::own_children() {
        if roots.contains(&pid) {
            continue;
        }
        let Some(st) = read_stat(pid) else { continue };
        if st.is_zombie() {
            w.found.members.push(Member { stat: st, via: Via::ZombieChild });
        } else if st.start_time >= q.not_before && carries(pid, &marker) {
            w.add(Member { stat: st, via: Via::Marker });
        } else {
            unmarked.push(st);
        }
    }
    super::scan::place_orphans_of_exited_root();
    let placed = super::orphans::view(q.root);
    let mut strays = Vec::new();
    for st in unmarked {
        let id = (st.pid, st.start_time);
        if placed.mine.contains(&id) {
            w.add(Member { stat: st, via: Via::Remembered });
        } else if st.start_time >= q.not_before && placed.nowhere.contains(&id) {
            strays.push(st);
        }
    }
    w.remembered(q);
    w.descend(q);
    // Orphans placed nowhere (they arrived when no root was exiting), as a census would name
    // them: not signalled, but the session is not reported gone while they live.
    let members = std::mem::take(&mut w.members);
    let mut named = Walk::default();
    for st in strays.into_iter().filter(|st| !members.contains(&st.pid)) {
        named.add(Member { stat: st, via: Via::Descendant });
    }
    named.members.extend(members.iter().copied());
    named.descend(q);
    w.found.unattributed =
        named.found.members.iter().filter(|m| !m.stat.is_zombie()).map(|m| m.stat).collect();
    w.found
}

/// Whether `pid`'s environment has the entry `marker` (`STOCKADE_SESSION=<value>`).
fn carries(pid: u32, marker: &[u8]) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
    env.split(|b| *b == 0).any(|e| e == marker)
}

/// One walk's state.
#[derive(Default)]
struct Walk {
    found: Found,
    members: HashSet<u32>,
    queue: Vec<ProcStat>,
}

impl Walk {
    fn add(&mut self, m: Member) {
        if self.members.insert(m.stat.pid) {
            self.found.members.push(m);
            self.queue.push(m.stat);
        }
    }

    /// What was seen as a member before and is still alive.
    fn remembered(&mut self, q: &SessionQuery) {
        for &(pid, start) in &q.seen {
            if let Some(st) = read_stat(pid)
                && st.start_time == start
                && !st.is_zombie()
            {
                self.add(Member { stat: st, via: Via::Remembered });
            }
        }
    }

    /// Everything below what was added, started within the session.
    fn descend(&mut self, q: &SessionQuery) {
        let mut kids = Vec::new();
        while let Some(parent) = self.queue.pop() {
            kids.clear();
            children(&parent, &mut kids);
            for &pid in &kids {
                let Some(st) = read_stat(pid) else { continue };
                // Still this parent's child (not a recycled pid) and started within the session.
                if st.ppid != parent.pid
                    || st.start_time < q.not_before
                    || self.members.contains(&pid)
                {
                    continue;
                }
                if st.is_zombie() {
                    if q.pgid.is_some_and(|g| st.pgrp == g) {
                        self.members.insert(pid);
                        self.found.members.push(Member { stat: st, via: Via::Group });
                    }
                    continue;
                }
                self.add(Member { stat: st, via: via(&st, q.pgid) });
            }
        }
    }
}
