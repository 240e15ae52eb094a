//! The one routine that terminates a tree — used by kill, foreground timeout, disk-cap kill,
//! shutdown and client disconnect — and verifies it is gone.
//!
//! Polite signal to the process group, the cgroup members and every marked process; a grace
//! period that ends as soon as nothing of the session is alive; `SIGKILL` (and `cgroup.kill`) for
//! what is left; then verification until no process of the session remains or the deadline
//! passes. Zombies of the session that are this process's children are reaped on the way out.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use stockade_proto::{DEFAULT_GRACE_MS, TerminateReport};

use super::Signal;
use super::cgroup;
use super::pidfd::{PidFd, Reap};
use super::scan::{Found, Member, Via};
use super::tree::{ProcessTree, live_pids, still_alive};

/// Default bound on verification after the last signal: how long `terminate` waits for the
/// kernel to finish killing before it reports survivors.
pub(crate) const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often liveness is checked cheaply (pidfds, `cgroup.events`) while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How often a full `/proc` scan runs while waiting, to catch processes forked meanwhile.
const RESCAN_INTERVAL: Duration = Duration::from_millis(100);

/// How to terminate a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminateOptions {
    /// The polite signal sent first.
    pub signal: Signal,
    /// How long to wait after the polite signal before `SIGKILL`.
    pub grace: Duration,
    /// How long to wait after `SIGKILL` for the tree to be verified gone.
    pub verify_timeout: Duration,
    /// Test hook (feature `test-hooks` only): pids never to be signalled. Group-wide signals
    /// (`killpg`, `cgroup.kill`) are then not used, and a spared process that stays alive is
    /// reported as a survivor.
    #[cfg(feature = "test-hooks")]
    pub spare: Vec<u32>,
}

impl Default for TerminateOptions {
    fn default() -> Self {
        TerminateOptions {
            signal: Signal::SIGTERM,
            grace: Duration::from_millis(DEFAULT_GRACE_MS),
            verify_timeout: DEFAULT_VERIFY_TIMEOUT,
            #[cfg(feature = "test-hooks")]
            spare: Vec::new(),
        }
    }
}

impl ProcessTree {
    /// The end of a session whose root exited by itself: terminates what it left behind and
    /// verifies it is gone, like [`Self::terminate`]. When the session has a cgroup, its root is
    /// reaped, the cgroup is already empty and this process has no zombie child left to reap,
    /// that *is* the verification: nothing of the session is alive (a process cannot leave a
    /// cgroup but by being moved, which needs write access to another cgroup), so the `/proc`
    /// census — O(every process on the machine) — is skipped. This is the common end of a short
    /// command, e.g. `run true`. Anything else goes through [`Self::terminate`].
    pub async fn finish_after_exit(&self, opts: &TerminateOptions) -> TerminateReport {
        let started = Instant::now();
        if let Some(dir) = self.cgroup()
            && self.root_reaped()
            && matches!(cgroup::populated(dir), Ok(false))
            // An orphan of the session that landed on this subreaper and died is a zombie child
            // (so, for a moment, is another session's root): the full routine reaps what is
            // the session's, the orphan reaper the rest (`Engine::reap_orphans`).
            && !crate::reaper::has_zombie_child()
            // A process that left the cgroup (it could write to another cgroup's `cgroup.procs`)
            // and was orphaned when the root ended has landed on this subreaper: the full
            // routine's census finds it by its marker and ends it.
            && !crate::reaper::has_live_child_on_main_thread(self.root_pid)
        {
            // The empty cgroup is removed once the end is published (`remove_cgroup`).
            return TerminateReport {
                terminated: true,
                signal_sent: None,
                escalated: false,
                pids_signalled: Vec::new(),
                survivors: Vec::new(),
                unattributed: Vec::new(),
                method: self.method(),
                elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            };
        }
        self.terminate(opts).await
    }

    /// Terminates every process of the session and verifies it is gone. See the module docs of
    /// [`crate`]. Idempotent: on a tree that is already gone it signals nothing and
    /// reports `terminated`.
    pub async fn terminate(&self, opts: &TerminateOptions) -> TerminateReport {
        let mut run = Run {
            tree: self,
            #[cfg(feature = "test-hooks")]
            spare: opts.spare.iter().copied().collect(),
            #[cfg(not(feature = "test-hooks"))]
            spare: HashSet::new(),
            handles: HashMap::new(),
            signalled: BTreeSet::new(),
        };
        let started = Instant::now();
        let mut snap = self.snapshot_async().await;
        let mut signal_sent = None;
        let mut escalated = false;

        if !run.live_unspared(&snap.members).is_empty() {
            signal_sent = Some(opts.signal.as_str().to_owned());
            run.signal_all(&snap.members, opts.signal);
            snap = run.wait_gone(started + opts.grace, opts.signal, snap).await;
            if !run.live_unspared(&snap.members).is_empty() {
                escalated = true;
                run.signal_all(&snap.members, Signal::SIGKILL);
            }
        }

        // Verify: nothing of the session alive (spared ones included), cgroup empty.
        let verify_deadline = Instant::now() + opts.verify_timeout;
        let mut last_scan = Instant::now();
        // Unless SIGKILL just went out, the last snapshot is current: no need to rescan at once.
        let mut fresh = !escalated;
        let mut rescanned = false;
        let survivors = loop {
            let cheap_gone = run.handles_exited() && !self.cgroup_populated() && self.keeper_gone();
            if !fresh && (cheap_gone || last_scan.elapsed() >= RESCAN_INTERVAL) {
                snap = self.snapshot_async().await;
                last_scan = Instant::now();
                rescanned = true;
                // Anything new this late gets SIGKILL straight away.
                if !run.new_unspared(&snap.members).is_empty() {
                    escalated |= signal_sent.is_some();
                    signal_sent.get_or_insert_with(|| Signal::SIGKILL.as_str().to_owned());
                    run.signal_all(&snap.members, Signal::SIGKILL);
                }
            }
            fresh = false;
            let live = live_pids(&snap.members);
            if live.is_empty() && !self.cgroup_populated() {
                break Vec::new();
            }
            if Instant::now() >= verify_deadline {
                if live.is_empty()
                    && let Some(dir) = self.cgroup()
                {
                    // Populated but nothing verifiable: name the raw members rather than claim
                    // the cgroup is empty.
                    break cgroup::procs(dir).unwrap_or_default();
                }
                break live;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        };

        // Orphans nobody can be shown to own that appeared while the session ran: not signalled
        // (they may be someone else's), but the session is not reported gone while they live.
        // Only those still alive now are named: one that ended since the look is nobody's.
        let mut unattributed: Vec<u32> =
            snap.unattributed.iter().filter(|st| still_alive(st)).map(|st| st.pid).collect();
        unattributed.retain(|pid| !survivors.contains(pid));
        let terminated =
            survivors.is_empty() && !self.cgroup_populated() && unattributed.is_empty();
        // Everything is dead now: a fresh look finds every zombie, reparented to us or not. Not
        // needed when the first look found nothing alive and nothing was signalled (the common
        // end of a command that left nothing behind): that look is current, and a process that
        // was not alive in it cannot have become a zombie since.
        if terminated && (signal_sent.is_some() || rescanned) {
            snap = self.snapshot_async().await;
        }
        run.reap(&snap.members);
        if terminated
            && self.root_reaped()
            && let Some(dir) = self.cgroup()
            && let Err(e) = cgroup::remove_session(dir)
        {
            tracing::debug!(cgroup = %dir.display(), error = %e, "session cgroup not removed yet");
        }
        TerminateReport {
            terminated,
            signal_sent,
            escalated,
            pids_signalled: run.signalled.into_iter().collect(),
            survivors,
            unattributed,
            method: self.method(),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn cgroup_populated(&self) -> bool {
        match self.cgroup() {
            // Unreadable counts as populated: verification must not claim what it cannot see.
            Some(dir) => cgroup::populated(dir).unwrap_or(true),
            None => false,
        }
    }
}

/// State of one terminate call.
pub(crate) struct Run<'a> {
    pub(crate) tree: &'a ProcessTree,
    pub(crate) spare: HashSet<u32>,
    /// pidfds of processes signalled, keyed by identity.
    pub(crate) handles: HashMap<(u32, u64), PidFd>,
    pub(crate) signalled: BTreeSet<u32>,
}

impl Run<'_> {
    /// The live processes to signal: neither spared nor the session's keeper (which a group
    /// signal reaches, and which exits by itself once the rest is gone; verification waits
    /// for it like for any other process).
    pub(crate) fn live_unspared<'m>(&self, snap: &'m [Member]) -> Vec<&'m Member> {
        snap.iter()
            .filter(|m| {
                !m.stat.is_zombie()
                    && !self.spare.contains(&m.stat.pid)
                    && !self.tree.is_keeper(m.stat.pid)
            })
            .collect()
    }

    pub(crate) fn new_unspared<'m>(&self, snap: &'m [Member]) -> Vec<&'m Member> {
        self.live_unspared(snap)
            .into_iter()
            .filter(|m| !self.handles.contains_key(&(m.stat.pid, m.stat.start_time)))
            .collect()
    }

    /// Whether every process signalled so far has exited (cheap: pidfd polls).
    pub(crate) fn handles_exited(&self) -> bool {
        self.handles.iter().all(|((pid, _), h)| self.spare.contains(pid) || h.has_exited())
    }

    /// Sends `sig` to the whole session: group-wide first (when nothing is spared), then every
    /// live member individually through a verified pidfd. A polite signal is followed by
    /// `SIGCONT`, so a stopped process gets to handle it.
    pub(crate) fn signal_all(&mut self, snap: &[Member], sig: Signal) {
        let tree = self.tree;
        let mut group_signalled = false;
        if self.spare.is_empty() {
            if sig == Signal::SIGKILL
                && let Some(dir) = tree.cgroup()
                && let Err(e) = cgroup::kill(dir)
            {
                tracing::warn!(cgroup = %dir.display(), error = %e, "cgroup.kill failed");
            }
            // Only while the root is unreaped: until then its pid — the pgid — cannot be reused.
            let to_group = sig == Signal::SIGKILL || !tree.own_pid_ns;
            if to_group && !tree.root_reaped() && signal_group(tree.pgid(), sig) {
                group_signalled = true;
                self.signalled.insert(tree.pgid());
            }
        }
        for m in self.live_unspared(snap) {
            let key = (m.stat.pid, m.stat.start_time);
            if let std::collections::hash_map::Entry::Vacant(slot) = self.handles.entry(key) {
                match PidFd::open_verified(key.0, key.1) {
                    Ok(h) => {
                        slot.insert(h);
                    }
                    // Gone, or a recycled pid: nothing of ours to signal.
                    Err(_) => continue,
                }
            }
            let Some(h) = self.handles.get(&key) else { continue };
            // A polite signal is not sent twice to a process the group signal reached (a second
            // SIGTERM means "hurry" to many programs). In the group before and after `killpg`
            // means in it at `killpg`: a process cannot rejoin a group it left.
            let reached = group_signalled
                && sig != Signal::SIGKILL
                && m.via == Via::Group
                && stockade_procfs::read_stat(key.0)
                    .is_some_and(|now| now.start_time == key.1 && now.pgrp == tree.pgid());
            if reached {
                self.signalled.insert(key.0);
            } else if let Ok(true) = h.signal(sig) {
                self.signalled.insert(key.0);
                if sig != Signal::SIGKILL && sig != Signal::SIGCONT {
                    let _ = h.signal(Signal::SIGCONT);
                }
            }
        }
    }

    /// Waits until nothing unspared of the session is alive or `deadline` passes; signals with
    /// `sig` anything that appears meanwhile. Returns the last snapshot.
    async fn wait_gone(&mut self, deadline: Instant, sig: Signal, first: Found) -> Found {
        let mut snap = first;
        let mut last_scan = Instant::now();
        loop {
            let cheap_gone =
                self.handles_exited() && (!self.tree.cgroup_populated() || !self.spare.is_empty());
            if cheap_gone || last_scan.elapsed() >= RESCAN_INTERVAL {
                snap = self.tree.snapshot_async().await;
                last_scan = Instant::now();
                if self.live_unspared(&snap.members).is_empty() {
                    return snap;
                }
                if !self.new_unspared(&snap.members).is_empty() {
                    self.signal_all(&snap.members, sig);
                }
            }
            if Instant::now() >= deadline {
                return snap;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Reaps what is ours to reap: the root, and the session's zombies that are our children.
    pub(crate) fn reap(&self, snap: &[Member]) {
        // Orphans first: while the root is unreaped its group still identifies them.
        self.tree.reap_orphans(snap);
        for h in self.handles.values() {
            if h.pid() != self.tree.root_pid() && h.has_exited() {
                // `NotOurs` is the normal answer for processes whose parent reaps them.
                let _: Result<Reap, _> = h.try_reap();
            }
        }
        self.tree.try_reap_root();
    }
}

/// `killpg(pgid, sig)`, then `SIGCONT` after a polite signal. Whether the group was signalled.
fn signal_group(pgid: u32, sig: Signal) -> bool {
    use rustix::process::{Pid, Signal as RawSignal, kill_process_group};
    let (Some(pgid), Some(raw)) =
        (i32::try_from(pgid).ok().and_then(Pid::from_raw), RawSignal::from_named_raw(sig.number()))
    else {
        return false;
    };
    let sent = kill_process_group(pgid, raw).is_ok();
    if sent && sig != Signal::SIGKILL && sig != Signal::SIGCONT {
        let _ = kill_process_group(pgid, RawSignal::CONT);
    }
    sent
}
