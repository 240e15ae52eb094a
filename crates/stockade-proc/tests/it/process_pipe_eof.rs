//! Invariant "the reader never hangs": a grandchild holding the stdout pipe open after the shell
//! exited is terminated, and the pipe reaches EOF — within a bounded wait.

use std::io::Read;
use std::time::Duration;

use crate::process_common::{Guard, Mode, marked_pids, unique_marker};
use stockade_proc::{SpawnSpec, StdioSpec, TerminateOptions, spawn};

/// Upper bound on reaching EOF after terminate (generous: this is a hang detector, not a timer).
const EOF_BOUND: Duration = Duration::from_secs(15);

async fn check(mode: Mode) {
    let containment = mode.containment();
    let mut guard = Guard::new();
    let marker = unique_marker("pipe", mode);
    let entry = marker.env_entry();
    let mut spec = SpawnSpec::shell("sleep 1000 & echo started", marker);
    spec.stdout = StdioSpec::Pipe;
    let spawned = spawn(spec, &containment).unwrap();
    let tree = guard.track(spawned.tree);
    let stdout = std::fs::File::from(spawned.stdout.unwrap());

    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let r = (&stdout).read_to_string(&mut out).map(|_| out);
        let _ = tx.send(r);
    });

    let exit = tokio::time::timeout(EOF_BOUND, tree.wait_root()).await.unwrap().unwrap();
    assert_eq!(exit.code, Some(0));
    // The shell is gone but its `&` child still holds the pipe: no EOF yet.
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "EOF before the grandchild died?"
    );
    assert!(!marked_pids(&entry).is_empty());

    let report = tree
        .terminate(&TerminateOptions { grace: Duration::from_millis(300), ..Default::default() })
        .await;
    assert!(report.terminated, "{report:?}");
    let out = rx.recv_timeout(EOF_BOUND).expect("reader still blocked after terminate").unwrap();
    assert_eq!(out, "started\n");
    reader.join().unwrap();
    assert!(marked_pids(&entry).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grandchild_holding_pipe_cgroup() {
    check(Mode::Cgroup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grandchild_holding_pipe_fallback() {
    check(Mode::Fallback).await
}
