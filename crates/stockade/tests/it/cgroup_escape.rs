//! A process that moves itself out of its session's cgroup (it can write to another cgroup's
//! `cgroup.procs`, as root can) and is orphaned when the root exits by itself: the root's exit
//! is not the end of it. The orphan lands on the daemon (a child subreaper), the end of the
//! session looks for it there, and the full routine ends it and names it in the session's
//! report. Linux, cgroup v2.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use stockade_testkit::procs::{KillCarrying, carrying};
use stockade_testkit::{DaemonProc, cannot_run};

/// A cgroup of the test's own beside the daemon's, removed at the end (its processes killed).
struct Elsewhere(PathBuf);

impl Drop for Elsewhere {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            // SAFETY: kill(2) of a process in the cgroup this test made.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Where cgroup v2 is mounted.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "cgroup2").then(|| PathBuf::from(at))
    })
}

#[test]
fn a_process_that_left_the_session_cgroup_is_ended_when_the_root_exits() {
    let tag = format!("1000.{:05}7", std::process::id() % 100_000);
    let _cleanup = KillCarrying(tag.clone());
    let daemon = DaemonProc::start(&[]);
    let status = daemon.client().ok("status", json!({}));
    let Some(mount) = cgroup2_mount().filter(|_| status["containment"] == "cgroup") else {
        cannot_run(&format!("no usable cgroup v2 here: {status}"));
        return;
    };
    let elsewhere = Elsewhere(mount.join(format!("stockade-test-escape-{}", std::process::id())));
    std::fs::create_dir(&elsewhere.0).unwrap_or_else(|e| panic!("mkdir {:?}: {e}", elsewhere.0));

    // The root starts a child that joins the other cgroup and stays; the root exits 0.
    let command = format!(
        "sh -c 'echo $$ > {}/cgroup.procs && exec sleep {tag}' & sleep 1",
        elsewhere.0.display()
    );
    let answer = daemon.client().ok("run", json!({ "command": command }));
    assert_eq!(answer["code"], 0, "{answer}");
    let escaped: Vec<u64> = std::fs::read_to_string(elsewhere.0.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    // It did escape (else this test shows nothing), and the end ended it and named it.
    let signalled = answer["cleanup"]["pids_signalled"].as_array().cloned().unwrap_or_default();
    assert!(
        !signalled.is_empty(),
        "the escaped process was not signalled at the end: {answer} (left in the other cgroup: {escaped:?})"
    );
    assert_eq!(answer["cleanup"]["terminated"], true, "{answer}");
    // Nothing carrying the tag is left (bounded: 10 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !carrying(&format!("sleep {tag}")).is_empty() {
        assert!(Instant::now() < deadline, "left: {:?}", carrying(&tag));
        std::thread::sleep(Duration::from_millis(50));
    }
}
