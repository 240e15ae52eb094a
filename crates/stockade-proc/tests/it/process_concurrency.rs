//! Many sessions terminated at once: every one is verified gone, nothing carrying any of their
//! markers is left, and terminations do not steal each other's children.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::process_common::{Guard, Mode, POLL, SHAPE_TIMEOUT, marked_counts, unique_marker};
use stockade_proc::{SpawnSpec, TerminateOptions, spawn};

/// Sessions per containment method.
const SESSIONS: usize = 200;

async fn many(mode: Mode) {
    let containment = mode.containment();
    let mut guard = Guard::new();
    let mut trees = Vec::with_capacity(SESSIONS);
    let mut entries = Vec::with_capacity(SESSIONS);
    for _ in 0..SESSIONS {
        let marker = unique_marker("many", mode);
        entries.push(marker.env_entry());
        trees.push(guard.track(
            spawn(SpawnSpec::shell("sleep 1000 & wait", marker), &containment).unwrap().tree,
        ));
    }
    // All shapes formed: every session has its shell and its sleep.
    let prefix =
        format!("STOCKADE_SESSION={}:many-{}-", crate::process_common::instance(), mode.name());
    let deadline = Instant::now() + SHAPE_TIMEOUT;
    loop {
        let counts = marked_counts(&prefix);
        if entries.iter().all(|e| counts.get(e).copied().unwrap_or(0) >= 2) {
            break;
        }
        assert!(Instant::now() < deadline, "not every session started");
        tokio::time::sleep(POLL).await;
    }

    let mut tasks = tokio::task::JoinSet::new();
    for tree in &trees {
        let tree = Arc::clone(tree);
        tasks.spawn(async move {
            let opts = TerminateOptions { grace: Duration::from_millis(500), ..Default::default() };
            (tree.root_pid(), tree.terminate(&opts).await)
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (pid, report) = done.unwrap();
        assert!(report.terminated, "session rooted at {pid}: {report:?}");
        assert!(report.survivors.is_empty());
    }
    let left = marked_counts(&prefix);
    assert!(left.is_empty(), "{} sessions left processes behind", left.len());
    for tree in &trees {
        assert!(tree.root_exit().is_some(), "root {} not reaped", tree.root_pid());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_cgroup() {
    many(Mode::Cgroup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_fallback() {
    many(Mode::Fallback).await
}
