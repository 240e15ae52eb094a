//! Crash recovery's side of the process layer: a tree rebuilt from a record (root pid + start
//! time, marker, cgroup) is terminated by the same routine, and a record whose root pid now
//! names another process never gets that process signalled.

use std::time::Duration;

use crate::process_common::{Guard, Mode, marked_pids, stat, unique_marker, wait_shape};
use stockade_proc::{AdoptSpec, ProcessTree, SpawnSpec, TerminateOptions, spawn};

fn opts() -> TerminateOptions {
    TerminateOptions { grace: Duration::from_secs(5), ..TerminateOptions::default() }
}

async fn adopted_tree_is_terminated(mode: Mode) {
    let containment = mode.containment();
    let mut guard = Guard::new();
    let marker = unique_marker("adopt", mode);
    let entry = marker.env_entry();
    let spawned = spawn(
        SpawnSpec::shell("setsid sleep 1000 & sleep 1000 & wait", marker.clone()),
        &containment,
    )
    .unwrap();
    let original = guard.track(spawned.tree);
    let root = original.root_pid();
    wait_shape(&entry, "adopt", |p| p.iter().any(|(_, s)| s.session != root) && p.len() >= 3);

    // What the registry would have recorded, handed to a "new daemon".
    let record = AdoptSpec {
        root_pid: root,
        root_start_time: original.root_start_time(),
        marker,
        cgroup: original.cgroup().map(Into::into),
    };
    let adopted = ProcessTree::adopt(record, &containment);
    assert_eq!(adopted.method(), original.method());
    let report = adopted.terminate(&opts()).await;
    assert!(report.terminated, "{report:?}");
    assert!(report.pids_signalled.contains(&root), "{report:?}");
    assert!(marked_pids(&entry).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopted_tree_is_terminated_cgroup() {
    adopted_tree_is_terminated(Mode::Cgroup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopted_tree_is_terminated_fallback() {
    adopted_tree_is_terminated(Mode::Fallback).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recycled_root_pid_is_never_signalled() {
    let containment = Mode::Fallback.containment();
    // An unrelated process (no marker) holds the pid the stale record names.
    let mut bystander = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
    let pid = bystander.id();
    let start = stat(pid).unwrap().start_time;
    let record = AdoptSpec {
        root_pid: pid,
        root_start_time: start.wrapping_sub(1),
        marker: unique_marker("stale", Mode::Fallback),
        cgroup: None,
    };
    let adopted = ProcessTree::adopt(record, &containment);
    assert!(adopted.root_pidfd().is_none(), "a recycled root must not be adopted");
    let report = adopted.terminate(&opts()).await;
    assert!(report.terminated, "{report:?}");
    assert!(report.pids_signalled.is_empty(), "{report:?}");
    assert_eq!(report.signal_sent, None);
    assert!(stat(pid).is_some_and(|s| !s.is_zombie()), "the bystander was signalled");
    drop(adopted);
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}
