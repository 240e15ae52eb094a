//! Invariant "killed means gone": for every process shape that used to leak, after
//! `terminate` no process carrying the session's marker exists — checked through `/proc`
//! environ, independently of the code under test — with cgroup containment and with it off.

use std::time::Duration;

use crate::process_common::{
    Guard, Mode, Mode::*, ProcStat, marked_pids, stat, unique_marker, wait_shape,
};
use stockade_proc::{SpawnSpec, TerminateOptions, spawn};
use stockade_proto::{ContainmentMethod, TerminateReport};

/// Grace for shapes that must die of the polite signal alone: generous, because terminate
/// returns as soon as the tree is gone — so `escalated` can be asserted without timing luck.
const POLITE_GRACE: Duration = Duration::from_secs(10);
/// Grace for the shape that ignores SIGTERM: short, so the SIGKILL path runs quickly.
const SHORT_GRACE: Duration = Duration::from_millis(300);

fn opts(grace: Duration) -> TerminateOptions {
    TerminateOptions { grace, ..TerminateOptions::default() }
}

/// At least `n` live processes carry the marker.
fn at_least(n: usize) -> impl Fn(&[(u32, ProcStat)]) -> bool {
    move |p| p.iter().filter(|(_, s)| !s.is_zombie()).count() >= n
}

/// Spawns `command`, waits until its shape has formed, terminates it and checks the invariant.
/// Returns the report for shape-specific checks.
async fn run_shape(
    test: &str,
    mode: Mode,
    command: &str,
    grace: Duration,
    settled: impl Fn(u32, &[(u32, ProcStat)]) -> bool,
) -> TerminateReport {
    let containment = mode.containment();
    let mut guard = Guard::new();
    let marker = unique_marker(test, mode);
    let entry = marker.env_entry();
    let mut spec = SpawnSpec::shell(command, marker);
    spec.cwd = Some(std::env::temp_dir());
    let spawned = spawn(spec, &containment).expect("spawn");
    let tree = guard.track(spawned.tree);
    let root = tree.root_pid();
    let before = wait_shape(&entry, test, |p| settled(root, p));

    // What the tree sees agrees with the independent scan.
    let members = tree.members();
    for pid in &before {
        assert!(
            members.contains(pid) || stat(*pid).is_none(),
            "{pid} of {test} not among members {members:?}"
        );
    }

    let report = tree.terminate(&opts(grace)).await;
    assert!(report.terminated, "{test}/{mode:?}: {report:?}");
    // Everything but the SIGTERM-ignoring shape dies of SIGTERM: escalation would mean some
    // process never got the polite signal.
    assert_eq!(report.escalated, grace == SHORT_GRACE, "{test}/{mode:?}: {report:?}");
    assert!(report.survivors.is_empty(), "{report:?}");
    assert_eq!(report.signal_sent.as_deref(), Some("SIGTERM"));
    assert_eq!(report.method, containment.method());
    let left = marked_pids(&entry);
    assert!(left.is_empty(), "{test}/{mode:?}: processes still carry the marker: {left:?}");
    for pid in before {
        assert!(stat(pid).is_none_or(|s| s.is_zombie()), "{pid} of {test} still alive");
    }
    // The root is reaped, and with cgroups the session's directory is gone.
    assert!(tree.root_exit().is_some(), "root not reaped");
    if let Some(dir) = tree.cgroup() {
        assert_eq!(report.method, ContainmentMethod::Cgroup);
        assert!(!dir.exists(), "cgroup {} not removed", dir.display());
    }
    report
}

macro_rules! both_modes {
    ($name:ident, |$mode:ident| $body:block) => {
        mod $name {
            use super::*;
            async fn check($mode: Mode) $body
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cgroup() {
                check(Cgroup).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fallback() {
                check(Fallback).await
            }
        }
    };
}

both_modes!(plain_sleep, |mode| {
    run_shape("plain", mode, "sleep 1000", POLITE_GRACE, |_, p| at_least(1)(p)).await;
});

both_modes!(pipeline, |mode| {
    run_shape("pipeline", mode, "yes | head -c 1G | sleep 1000", POLITE_GRACE, |_, p| {
        at_least(4)(p)
    })
    .await;
});

both_modes!(nested_timeout_shell, |mode| {
    // GNU timeout moves itself to its own process group: a group kill alone misses it.
    run_shape(
        "nested",
        mode,
        "timeout 180s sh -c 'yes | head -c 1G > /dev/null; sleep 1000'",
        POLITE_GRACE,
        |root, p| at_least(3)(p) && p.iter().any(|(_, s)| s.pgrp != root),
    )
    .await;
});

both_modes!(background_child, |mode| {
    run_shape("background", mode, "sleep 1000 & wait", POLITE_GRACE, |_, p| at_least(2)(p)).await;
});

both_modes!(setsid_escape, |mode| {
    run_shape("setsid", mode, "setsid sleep 1000 & wait", POLITE_GRACE, |root, p| {
        p.iter().any(|(_, s)| s.session != root && !s.is_zombie())
    })
    .await;
});

both_modes!(double_fork, |mode| {
    // The grandchild is orphaned: reparented to this process (subreaper), out of the root's sight.
    let me = std::process::id();
    run_shape("doublefork", mode, "(sleep 1000 &) & exec sleep 1000", POLITE_GRACE, |root, p| {
        p.iter().any(|(pid, s)| *pid != root && s.ppid == me && !s.is_zombie())
    })
    .await;
});

both_modes!(nohup, |mode| {
    run_shape("nohup", mode, "nohup sleep 1000 & wait", POLITE_GRACE, |_, p| at_least(2)(p)).await;
});

both_modes!(ignores_sigterm, |mode| {
    let r = run_shape("trap", mode, "trap '' TERM; sleep 1000 & wait", SHORT_GRACE, |_, p| {
        at_least(2)(p)
    })
    .await;
    assert!(r.escalated, "a tree ignoring SIGTERM must be SIGKILLed after the grace: {r:?}");
});

both_modes!(escape_after_root_exited, |mode| {
    // The root is gone (reaped) before terminate: only the cgroup or the marker can find the rest.
    let containment = mode.containment();
    let mut guard = Guard::new();
    let marker = unique_marker("orphaned", mode);
    let entry = marker.env_entry();
    let spawned =
        spawn(SpawnSpec::shell("setsid sleep 1000 & (sleep 1000 &) &", marker), &containment)
            .unwrap();
    let tree = guard.track(spawned.tree);
    let root = tree.root_pid();
    let exit =
        tokio::time::timeout(Duration::from_secs(20), tree.wait_root()).await.unwrap().unwrap();
    assert_eq!(exit.code, Some(0));
    let before = wait_shape(&entry, "orphaned", |p| {
        p.iter().filter(|(pid, s)| *pid != root && !s.is_zombie()).count() >= 2
            && p.iter().any(|(_, s)| s.session != root)
    });
    let r = tree.terminate(&opts(POLITE_GRACE)).await;
    assert!(r.terminated, "{r:?}");
    assert!(marked_pids(&entry).is_empty());
    for pid in before {
        assert!(stat(pid).is_none_or(|s| s.is_zombie()), "{pid} still alive");
    }
});

both_modes!(leaves_zombies, |mode| {
    // `exec sleep` never waits for the two short children: they become zombies of the root, then
    // orphans of ours (subreaper) when the root dies. Terminate must reap them.
    let containment = mode.containment();
    let mut guard = Guard::new();
    let marker = unique_marker("zombies", mode);
    let entry = marker.env_entry();
    let spawned =
        spawn(SpawnSpec::shell("sleep 0.05 & sleep 0.05 & exec sleep 1000", marker), &containment)
            .unwrap();
    let tree = guard.track(spawned.tree);
    let root = tree.root_pid();
    let deadline = std::time::Instant::now() + crate::process_common::SHAPE_TIMEOUT;
    let zombies = loop {
        let z: Vec<(u32, u64)> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|p| stat(p).map(|s| (p, s)))
            .filter(|(_, s)| s.state == b'Z' && s.ppid == root)
            .map(|(p, s)| (p, s.start_time))
            .collect();
        if z.len() == 2 {
            break z;
        }
        assert!(std::time::Instant::now() < deadline, "zombies never appeared: {z:?}");
        std::thread::sleep(crate::process_common::POLL);
    };
    let r = tree.terminate(&opts(POLITE_GRACE)).await;
    assert!(r.terminated, "{r:?}");
    assert!(marked_pids(&entry).is_empty());
    for (pid, start) in zombies {
        assert!(stat(pid).is_none_or(|s| s.start_time != start), "zombie {pid} was not reaped");
    }
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_into_sub_cgroup() {
    // A (root) session process makes a sub-cgroup of its session cgroup and moves into it: still
    // found, still killed, and the session cgroup (with the sub-cgroup) is removed.
    let containment = Mode::Cgroup.containment();
    let Some(mount) = containment
        .describe()
        .cgroup_mount
        .filter(|_| containment.describe().cgroup_root.is_some())
    else {
        stockade_testkit::cannot_run("no cgroup containment here");
        return;
    };
    let mut guard = Guard::new();
    let marker = unique_marker("subcg", Mode::Cgroup);
    let entry = marker.env_entry();
    let mut spec = SpawnSpec::shell(
        r#"cg="$CG_MOUNT$(sed -n 's/^0:://p' /proc/self/cgroup)"; mkdir "$cg/sub" && sh -c 'echo $$ > "$1/sub/cgroup.procs" && exec sleep 1000' - "$cg" & wait"#,
        marker,
    );
    spec.env = vec![("CG_MOUNT".into(), mount.into_os_string())];
    let tree = guard.track(spawn(spec, &containment).unwrap().tree);
    let dir = tree.cgroup().unwrap().to_path_buf();
    wait_shape(&entry, "sub-cgroup", |p| {
        p.len() >= 2
            && std::fs::read_to_string(dir.join("sub/cgroup.procs"))
                .is_ok_and(|t| !t.trim().is_empty())
    });
    // `list`'s count reads the sub-cgroup too: the waiting root and the `sleep` in `sub`.
    let no_census = stockade_proc::ProcessCensus::empty();
    assert_eq!(tree.count_processes(|| &no_census), 2);
    let r = tree.terminate(&opts(POLITE_GRACE)).await;
    assert!(r.terminated, "{r:?}");
    assert!(!r.escalated, "{r:?}");
    assert!(marked_pids(&entry).is_empty());
    assert!(!dir.exists(), "session cgroup with a sub-cgroup not removed");
}
