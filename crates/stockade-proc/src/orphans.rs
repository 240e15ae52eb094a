//! Placing the orphans a session root leaves when it exits by itself.
//!
//! Every session root is a child subreaper, so while it lives whatever its session orphans stays
//! its descendant. When the root itself exits, its remaining children reparent to the next
//! subreaper up: this process. They may carry no trace of the session (no marker after `env -i`,
//! another group and session after `setsid`, no descriptor of it after closing stdio), so they
//! are placed at the moment they arrive: the kernel reparents a dying root's children *before*
//! the root becomes a zombie (its pidfd readable), and the root is reaped only after this module
//! has looked (see `ProcessTree::try_reap_root`). So an unplaced, unmarked child of this process
//! that is no session root came from a root that is a zombie right now. With one such root it is
//! that root's session's, exactly. With several (sessions whose roots exited within the few
//! milliseconds before either was reaped), the orphan's group or session id, or its start time,
//! may still tell; when they do not, it is placed in each of them. That kills nothing that is
//! not ending: every one of those sessions is ending (its root is gone), so the first to end
//! kills the orphan, and if it survives each of them names it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use stockade_procfs::{ProcStat, read_stat};

use super::MARKER_ENV;

/// Where one orphan was placed: the roots `(pid, start time)` it may have come from (one, as a
/// rule; none when no root was exiting as it was found).
#[derive(Debug, Clone)]
struct Placement {
    roots: Vec<(u32, u64)>,
}

/// Orphans `(pid, start time)` placed so far. An entry lives until every session it names is
/// dropped (or, for one placed nowhere, until the process is gone).
static PLACED: Mutex<BTreeMap<(u32, u64), Placement>> = Mutex::new(BTreeMap::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the attribution of one session needs to know about placed orphans.
#[derive(Debug, Default)]
pub(crate) struct OrphanView {
    /// Orphans placed in this session. One placed among several sessions is a member of each:
    /// every one of them is ending (its root exited), so whichever ends first kills it, and
    /// each names it if it survives.
    pub mine: Vec<(u32, u64)>,
    /// Orphans placed in other sessions only: not this session's, no alarm.
    pub others: BTreeSet<(u32, u64)>,
    /// Orphans placed nowhere: they arrived when no session root was exiting.
    pub nowhere: BTreeSet<(u32, u64)>,
}

/// The placements as seen from the session rooted at `root`.
pub(crate) fn view(root: (u32, u64)) -> OrphanView {
    let placed = lock(&PLACED);
    let mut v = OrphanView::default();
    for (id, p) in placed.iter() {
        if p.roots.contains(&root) {
            v.mine.push(*id);
        } else if !p.roots.is_empty() {
            v.others.insert(*id);
        } else {
            v.nowhere.insert(*id);
        }
    }
    v
}

/// Forgets the session rooted at `root`: it is struck from every placement (one that names
/// no other session goes).
pub(crate) fn forget_root(root: (u32, u64)) {
    let mut placed = lock(&PLACED);
    placed.retain(|_, p| {
        if !p.roots.contains(&root) {
            return true;
        }
        p.roots.retain(|r| *r != root);
        !p.roots.is_empty()
    });
}

/// This process's children, from `/proc/self/task/*/children` (an orphan reparents to any
/// thread of the subreaper). Read twice and merged: the kernel's list can skip an entry while
/// children come and go during the read.
pub(crate) fn own_children() -> Vec<u32> {
    let mut pids = Vec::new();
    for _ in 0..2 {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return pids };
        for t in tasks.flatten() {
            let Ok(text) = std::fs::read_to_string(t.path().join("children")) else { continue };
            pids.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// A root has exited and is not reaped yet: places every unplaced, unmarked child of this
/// process that is no session root (`roots`) nor claimed by a session (`claimed`). Blocking (a
/// few `/proc` reads; nothing more when no such child exists, the common case).
pub(crate) fn place_own_children(roots: &BTreeSet<(u32, u64)>, claimed: &BTreeSet<(u32, u64)>) {
    let root_pids: BTreeSet<u32> = roots.iter().map(|r| r.0).collect();
    let mut candidates = Vec::new();
    for pid in own_children() {
        if root_pids.contains(&pid) {
            continue;
        }
        let Some(st) = read_stat(pid) else { continue };
        candidates.push(st);
    }
    let candidates: Vec<ProcStat> = candidates
        .into_iter()
        .filter(|st| !claimed.contains(&(st.pid, st.start_time)) && !has_any_marker(st))
        .collect();
    place(candidates, roots);
}

/// Places `candidates` (children of this process, alive, without a session marker) that are not
/// placed yet, among the roots in `roots` that are zombies right now.
pub(crate) fn place(candidates: Vec<ProcStat>, roots: &BTreeSet<(u32, u64)>) {
    let me = std::process::id();
    let my_session = read_stat(me).map(|s| s.session);
    let mut placed = lock(&PLACED);
    let new: Vec<ProcStat> = candidates
        .into_iter()
        .filter(|st| {
            let id = (st.pid, st.start_time);
            // A child this process started itself stays in this process's session; nothing of
            // a session does (each starts with `setsid`). A spawn between fork and `exec` still
            // runs this executable.
            st.ppid == me
                && !st.is_zombie()
                && Some(st.session) != my_session
                && !roots.contains(&id)
                && !placed.contains_key(&id)
                && !is_own_fork(st.pid)
        })
        .collect();
    if new.is_empty() {
        prune_gone(&mut placed);
        return;
    }
    // A session root this process just spawned is a child without a marker for the instant its
    // `exec` has a new image but no environment yet: look again a moment later, and leave out
    // whatever has a marker by then (it is attributed by it; a root is registered by then).
    let new: Vec<ProcStat> = if new.iter().any(|st| environ_empty(st.pid)) {
        std::thread::sleep(std::time::Duration::from_millis(2));
        new.into_iter().filter(|st| !has_any_marker(st)).collect()
    } else {
        new
    };
    // Roots that are zombies now: one of them is where each new orphan came from — or a placed
    // orphan that is a zombie now (a process that outlived its root and then exited leaves its
    // children here too): then it is that orphan's session's.
    let zombie = |&(pid, start): &(u32, u64)| {
        read_stat(pid).is_some_and(|st| st.start_time == start && st.is_zombie())
    };
    let mut exited: Vec<(u32, u64)> = roots.iter().copied().filter(zombie).collect();
    for (id, p) in placed.iter() {
        if zombie(id) {
            exited.extend(
                p.roots.iter().filter(|r| !exited.contains(r)).copied().collect::<Vec<_>>(),
            );
        }
    }
    for st in new {
        let roots = origin(&st, &exited);
        if roots.len() > 1 {
            tracing::debug!(pid = st.pid, roots = ?roots, "orphan placed among several sessions");
        }
        placed.insert((st.pid, st.start_time), Placement { roots });
    }
}

/// The exited roots `orphan` may have come from: the one whose group or session it is still in,
/// else every one that started no later than it.
fn origin(orphan: &ProcStat, exited: &[(u32, u64)]) -> Vec<(u32, u64)> {
    if let Some(r) = exited.iter().find(|r| r.0 == orphan.session || r.0 == orphan.pgrp) {
        return vec![*r];
    }
    exited.iter().copied().filter(|r| r.1 <= orphan.start_time).collect()
}

/// Drops entries placed nowhere whose process is gone (they are kept only while alive).
fn prune_gone(placed: &mut BTreeMap<(u32, u64), Placement>) {
    if placed.len() < 64 {
        return;
    }
    placed.retain(|&(pid, start), p| {
        !p.roots.is_empty() || read_stat(pid).is_some_and(|st| st.start_time == start)
    });
}

/// Whether `pid`'s environment is empty or unreadable.
fn environ_empty(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).map_or(true, |env| env.is_empty())
}

/// Whether `st` carries any session marker in its environment: then the marker attributes it
/// (a session root just spawned and not registered yet carries its own).
fn has_any_marker(st: &ProcStat) -> bool {
    let prefix = format!("{MARKER_ENV}=");
    let Ok(env) = std::fs::read(format!("/proc/{}/environ", st.pid)) else { return false };
    env.split(|b| *b == 0).any(|e| e.starts_with(prefix.as_bytes()))
}

/// Whether `pid` runs this process's own executable: a child forked by a spawn that has not
/// reached `exec` yet.
pub(crate) fn is_own_fork(pid: u32) -> bool {
    static OWN: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(own) = OWN.get_or_init(|| std::fs::read_link("/proc/self/exe").ok()) else {
        return false;
    };
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| &exe == own)
}
