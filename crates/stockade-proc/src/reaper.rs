//! Reaping orphans that land on this process: as PID 1 of a PID namespace (a container's init)
//! every orphaned process in the namespace becomes its child, and as a child subreaper every
//! orphan of its sessions does; nobody else will ever reap them. Linux-only.
//!
//! The engine reaps each session's root through its pidfd, so a blanket `waitpid(-1)` would
//! steal their exit statuses. [`reap_zombie_children`] instead lists this process's children
//! that are zombies, then — under the registry lock — drops every pid that is the root of a
//! session it keeps, and skips the round while a spawn is in progress (its root is not yet
//! registered). What is left is an orphan nobody waits for: it is reaped by pid.

use std::collections::HashSet;

/// Reaps this process's zombie children, except the pids `keep` returns (the roots someone
/// reaps through a pidfd); returns how many were reaped. `keep` is asked only when a zombie
/// child exists, and returning `None` (e.g. a spawn is in progress and its root is not yet
/// known) skips the round.
pub fn reap_zombie_children(keep: impl FnOnce() -> Option<HashSet<u32>>) -> usize {
    // Cheap first: most of the time there is no zombie child at all, and no scan is needed.
    if !has_zombie_child() {
        return 0;
    }
    let zombies = zombie_children();
    if zombies.is_empty() {
        return 0;
    }
    let Some(roots) = keep() else { return 0 };
    let mut reaped = 0;
    for pid in zombies.into_iter().filter(|p| !roots.contains(p)) {
        let mut status = 0;
        // SAFETY: waitpid(2) on one pid, non-blocking; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if r == pid as libc::pid_t {
            reaped += 1;
        }
    }
    reaped
}

/// This process's children that are zombies (a scan of `/proc` by parent pid).
fn zombie_children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            stockade_procfs::read_stat(pid).is_some_and(|s| s.ppid == me && s.is_zombie())
        })
        .collect()
}

/// Whether a live process other than `except` is a child of this process's main thread: where
/// the kernel puts an orphan that lands on this subreaper (or PID 1) — the main thread is the
/// first live thread it looks at. A process that left its session's cgroup and was orphaned when
/// the root ended is found here, in one read of one `children` file. Session roots are spawned
/// from other threads; one spawned from the main thread makes this say yes when no orphan
/// exists, never no when one does. Where the kernel has no `children` files, says no.
pub(crate) fn has_live_child_on_main_thread(except: u32) -> bool {
    if !crate::scan::children_files() {
        return false;
    }
    let me = std::process::id();
    let (mut buf, mut children) = (Vec::new(), Vec::new());
    stockade_procfs::thread_children(me, me, &mut buf, &mut children);
    children
        .into_iter()
        .any(|pid| pid != except && stockade_procfs::read_stat(pid).is_some_and(|s| !s.is_zombie()))
}

/// Whether this process has a child that has exited and is not reaped yet — looked at, not
/// reaped (`WNOWAIT`). An error (e.g. `ECHILD`: no child at all) counts as none.
pub(crate) fn has_zombie_child() -> bool {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    matches!(waitid(WaitId::All, options), Ok(Some(_)))
}
