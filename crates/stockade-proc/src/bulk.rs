//! Ending many trees at once (a kill naming many sessions, `kill --all`, shutdown): the same
//! steps as [`ProcessTree::terminate`], but every tree is signalled first, they share one grace,
//! and each round takes one `/proc` census for all of them — none when every tree has a cgroup
//! (its `cgroup.procs` and `cgroup.kill` are the whole truth of what to signal). A thousand
//! independent terminates would each rescan every process on the machine every round.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_proto::TerminateReport;
use tokio::sync::{mpsc, oneshot};

use super::Signal;
use super::scan::{Found, ProcessCensus};
use super::terminate::{Run, TerminateOptions};
use super::tree::{ProcessTree, live_pids, still_alive};

/// How often liveness is checked cheaply (pidfds, `cgroup.events`) while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How often the shared census is retaken while waiting, to catch processes forked meanwhile.
const RESCAN_INTERVAL: Duration = Duration::from_millis(100);

/// Terminates every tree in `trees` with `opts` and verifies each is gone; one report per tree,
/// in order, each as [`ProcessTree::terminate`] would give it.
pub async fn terminate_many(
    trees: &[Arc<ProcessTree>],
    opts: &TerminateOptions,
) -> Vec<TerminateReport> {
    let started = Instant::now();
    let mut runs: Vec<Run<'_>> = trees.iter().map(|t| new_run(t, opts)).collect();
    let mut snaps = snapshot_all(trees, &vec![true; trees.len()]).await;
    let mut signal_sent: Vec<Option<String>> = vec![None; trees.len()];
    let mut escalated = vec![false; trees.len()];

    // Every tree gets the polite signal before any waiting starts: one grace for all.
    for (i, run) in runs.iter_mut().enumerate() {
        if !run.live_unspared(&snaps[i].members).is_empty() {
            signal_sent[i] = Some(opts.signal.as_str().to_owned());
            run.signal_all(&snaps[i].members, opts.signal);
        }
    }
    let polite: Vec<bool> = signal_sent.iter().map(Option::is_some).collect();
    if polite.contains(&true) {
        wait_all(&mut runs, &mut snaps, &polite, started + opts.grace, Some(opts.signal)).await;
        for (i, run) in runs.iter_mut().enumerate() {
            if polite[i] && !run.live_unspared(&snaps[i].members).is_empty() {
                escalated[i] = true;
                run.signal_all(&snaps[i].members, Signal::SIGKILL);
            }
        }
    }

    // Verify: nothing of any tree alive (spared ones included), every cgroup empty. Anything
    // new this late gets SIGKILL straight away.
    let deadline = Instant::now() + opts.verify_timeout;
    let all = vec![true; trees.len()];
    let newly_killed = wait_all(&mut runs, &mut snaps, &all, deadline, None).await;
    for i in newly_killed {
        escalated[i] |= signal_sent[i].is_some();
        signal_sent[i].get_or_insert_with(|| Signal::SIGKILL.as_str().to_owned());
    }
    let survivors: Vec<Vec<u32>> = runs.iter().zip(&snaps).map(|(r, s)| survivors(r, s)).collect();

    // Everything is dead now: a fresh look finds every zombie to reap.
    let last = snapshot_all(trees, &all).await;
    let mut reports = Vec::with_capacity(trees.len());
    for (i, run) in runs.into_iter().enumerate() {
        let tree = run.tree;
        let mut unattributed: Vec<u32> =
            last[i].unattributed.iter().filter(|st| still_alive(st)).map(|st| st.pid).collect();
        unattributed.retain(|pid| !survivors[i].contains(pid));
        let terminated =
            survivors[i].is_empty() && !tree.cgroup_populated() && unattributed.is_empty();
        run.reap(&last[i].members);
        if terminated && tree.root_reaped() {
            tree.remove_cgroup();
        }
        reports.push(TerminateReport {
            terminated,
            signal_sent: signal_sent[i].take(),
            escalated: escalated[i],
            pids_signalled: run.signalled.iter().copied().collect(),
            survivors: survivors[i].clone(),
            unattributed,
            method: tree.method(),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
    }
    reports
}

/// Terminates one tree on request: with a cgroup through [`terminate_many`], which then takes
/// no `/proc` census (the cgroup's `cgroup.procs` and `cgroup.kill` reach every process the
/// session started, and nothing outside it can be the session's) — O(the session's processes)
/// instead of O(every process on the machine); without one, [`ProcessTree::terminate`].
pub async fn terminate_one(tree: &Arc<ProcessTree>, opts: &TerminateOptions) -> TerminateReport {
    if tree.needs_census() {
        return tree.terminate(opts).await;
    }
    let mut reports = terminate_many(std::slice::from_ref(tree), opts).await;
    match reports.pop() {
        Some(report) => report,
        None => tree.terminate(opts).await,
    }
}

fn new_run<'a>(tree: &'a ProcessTree, opts: &TerminateOptions) -> Run<'a> {
    #[cfg(not(feature = "test-hooks"))]
    let _ = opts;
    Run {
        tree,
        #[cfg(feature = "test-hooks")]
        spare: opts.spare.iter().copied().collect(),
        #[cfg(not(feature = "test-hooks"))]
        spare: std::collections::HashSet::new(),
        handles: HashMap::new(),
        signalled: BTreeSet::new(),
    }
}

/// What is still alive of a tree after verification (the raw cgroup members when it is
/// populated but nothing in it was verifiable).
fn survivors(run: &Run<'_>, snap: &Found) -> Vec<u32> {
    let live = live_pids(&snap.members);
    if live.is_empty()
        && run.tree.cgroup_populated()
        && let Some(dir) = run.tree.cgroup()
    {
        return super::cgroup::procs(dir).unwrap_or_default();
    }
    live
}

/// Whether nothing of the tree is alive in its last snapshot and its cgroup is empty.
fn gone(run: &Run<'_>, snap: &Found, unspared_only: bool) -> bool {
    // As in the single terminate: the grace ends when nothing unspared is alive; verification
    // when nothing is alive at all and the cgroup is empty.
    if unspared_only {
        return run.live_unspared(&snap.members).is_empty();
    }
    live_pids(&snap.members).is_empty() && !run.tree.cgroup_populated()
}

/// Waits until every tree in `which` is gone (`polite`: its unspared processes; else: all of
/// them, cgroup empty) or `deadline` passes, retaking the shared census every round; processes
/// that appear meanwhile get `polite` or, without it, `SIGKILL`. Returns the trees that had to
/// be signalled again.
async fn wait_all(
    runs: &mut [Run<'_>],
    snaps: &mut [Found],
    which: &[bool],
    deadline: Instant,
    polite: Option<Signal>,
) -> Vec<usize> {
    let trees: Vec<&ProcessTree> = runs.iter().map(|r| r.tree).collect();
    let mut pending: Vec<bool> = which.to_vec();
    let mut signalled_again = Vec::new();
    let mut last_scan = Instant::now();
    // The snapshot taken just before is current.
    let mut fresh = true;
    loop {
        let cheap_gone =
            runs.iter().enumerate().all(|(i, r)| !pending[i] || cheap_done(r, polite.is_some()));
        if !fresh && (cheap_gone || last_scan.elapsed() >= RESCAN_INTERVAL) {
            let fresh_snaps = snapshot_refs(&trees, &pending).await;
            last_scan = Instant::now();
            for (i, snap) in fresh_snaps.into_iter().enumerate() {
                if let Some(snap) = snap {
                    snaps[i] = snap;
                }
            }
            for (i, run) in runs.iter_mut().enumerate() {
                if pending[i] && !run.new_unspared(&snaps[i].members).is_empty() {
                    run.signal_all(&snaps[i].members, polite.unwrap_or(Signal::SIGKILL));
                    signalled_again.push(i);
                }
            }
        }
        fresh = false;
        for (i, run) in runs.iter().enumerate() {
            if pending[i] && gone(run, &snaps[i], polite.is_some()) {
                pending[i] = false;
            }
        }
        if !pending.contains(&true) || Instant::now() >= deadline {
            return signalled_again;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Cheap liveness: every signalled process exited and (unless sparing) the cgroup is empty.
fn cheap_done(run: &Run<'_>, polite: bool) -> bool {
    run.handles_exited()
        && (!run.tree.cgroup_populated() || (polite && !run.spare.is_empty()))
        && (polite || run.tree.keeper_gone())
}

async fn snapshot_all(trees: &[Arc<ProcessTree>], which: &[bool]) -> Vec<Found> {
    let refs: Vec<&ProcessTree> = trees.iter().map(|t| &**t).collect();
    snapshot_refs(&refs, which).await.into_iter().map(Option::unwrap_or_default).collect()
}

/// A snapshot of every tree in `which` from one census taken now (none when they all have a
/// cgroup), on the blocking pool.
async fn snapshot_refs(trees: &[&ProcessTree], which: &[bool]) -> Vec<Option<Found>> {
    let need_census: Vec<u64> = trees
        .iter()
        .zip(which)
        .filter(|(t, w)| **w && t.needs_census())
        .map(|(t, _)| t.root_start_time())
        .collect();
    let census = match need_census.iter().min() {
        Some(&from) => {
            tokio::task::spawn_blocking(move || ProcessCensus::take_from(from)).await.ok()
        }
        None => None,
    };
    let census = census.unwrap_or_else(ProcessCensus::empty);
    trees.iter().zip(which).map(|(t, w)| w.then(|| t.snapshot_in(&census))).collect()
}

/// Terminates trees handed in one at a time (by the supervisors of the sessions a bulk kill
/// ends) together, through [`terminate_many`]: trees arriving within a few milliseconds of each
/// other share a batch. Cloned into every request; the batches end when every clone is gone.
#[derive(Debug, Clone)]
pub struct TerminateBatch {
    tx: mpsc::UnboundedSender<(Arc<ProcessTree>, oneshot::Sender<TerminateReport>)>,
    opts: TerminateOptions,
}

/// How long a batch waits for the next tree before it starts without it.
const GATHER: Duration = Duration::from_millis(20);

impl TerminateBatch {
    /// A batch for `expected` trees terminated with `opts`. Needs a Tokio runtime.
    pub fn new(expected: usize, opts: TerminateOptions) -> TerminateBatch {
        let (tx, mut rx) =
            mpsc::unbounded_channel::<(Arc<ProcessTree>, oneshot::Sender<TerminateReport>)>();
        let batch_opts = opts.clone();
        tokio::spawn(async move {
            let mut left = expected;
            while let Some(first) = rx.recv().await {
                let mut items = vec![first];
                // Gather the rest, but never wait long for trees that may not come (a session
                // that ended by itself meanwhile answers without terminating).
                while items.len() < left.max(1) {
                    match tokio::time::timeout(GATHER, rx.recv()).await {
                        Ok(Some(item)) => items.push(item),
                        _ => break,
                    }
                }
                left = left.saturating_sub(items.len());
                let (trees, replies): (Vec<_>, Vec<_>) = items.into_iter().unzip();
                let reports = terminate_many(&trees, &batch_opts).await;
                for (reply, report) in replies.into_iter().zip(reports) {
                    let _ = reply.send(report);
                }
            }
        });
        TerminateBatch { tx, opts }
    }

    /// Terminates `tree` in this batch; its report.
    pub async fn terminate(&self, tree: Arc<ProcessTree>) -> TerminateReport {
        let (reply, rx) = oneshot::channel();
        if self.tx.send((Arc::clone(&tree), reply)).is_ok()
            && let Ok(report) = rx.await
        {
            return report;
        }
        tree.terminate(&self.opts).await
    }

    /// The options every tree of the batch is terminated with.
    pub fn options(&self) -> &TerminateOptions {
        &self.opts
    }
}
