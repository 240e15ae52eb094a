//! Listing is cheap: `list` counts every running session's processes from its cgroup's
//! `cgroup.procs`, or from one `/proc` census shared by all sessions — not one full scan per
//! session. With many running sessions one `list` costs the daemon a bounded amount of CPU, and
//! each count agrees with an independent look at `/proc`. (The figure at 1,000 sessions is
//! `stockade bench list`'s; this is the small version.)

use std::time::{Duration, Instant};

use serde_json::json;
use stockade_testkit::DaemonProc;
use stockade_testkit::procs::{instance_of, marked_processes};

/// Running sessions in the test.
const SESSIONS: usize = 120;
/// `list` calls measured.
const CALLS: u32 = 5;
/// CPU bound per call: the target at 1,000 sessions, here at a tenth of them.
const CPU_PER_CALL: Duration = Duration::from_millis(200);

/// The daemon's CPU time so far (user + system).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    Duration::from_millis(ticks * 1000 / hz)
}

/// The marked processes of a session but its keeper (`argv[1]` is the keeper's flag).
fn commands_processes(instance: &str, id: &str) -> Vec<u32> {
    let keeper = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(b"--stockade-session-keeper"))
    };
    let mut pids = marked_processes(&format!("STOCKADE_SESSION={instance}:{id}"));
    pids.retain(|pid| !keeper(pid));
    pids
}

fn list_is_cheap(extra: &[&str], containment: &str) {
    let daemon = DaemonProc::start(extra);
    let mut rpc = daemon.client();
    let status = rpc.ok("status", json!({}));
    if status["containment"] != containment {
        stockade_testkit::cannot_run(&format!("{containment} containment is not usable: {status}"));
        return;
    }
    let mut ids = Vec::new();
    let mut instance = String::new();
    for _ in 0..SESSIONS {
        let run = rpc.ok("run", json!({"command": "sleep 120 | cat", "background": true}));
        instance = instance_of(&run);
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    // Every session has formed: sh, sleep and cat (its keeper is not one of its processes).
    stockade_testkit::eventually(Duration::from_secs(60), "every pipeline formed", || {
        ids.iter().all(|id| commands_processes(&instance, id).len() == 3).then_some(())
    });

    let before = cpu(daemon.pid);
    let started = Instant::now();
    let mut last = serde_json::Value::Null;
    for _ in 0..CALLS {
        last = rpc.ok("list", json!({}));
    }
    let took = started.elapsed() / CALLS;
    let per_call = cpu(daemon.pid).saturating_sub(before) / CALLS;
    eprintln!(
        "list with {SESSIONS} running sessions ({containment}): {took:?} per call, {per_call:?} daemon CPU per call"
    );
    assert!(per_call <= CPU_PER_CALL, "{per_call:?} of daemon CPU per list");

    // The counts agree with an independent look.
    let sessions = last["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), SESSIONS);
    for s in sessions {
        let id = s["id"].as_str().unwrap();
        let seen = commands_processes(&instance, id).len();
        assert_eq!(s["processes"], seen, "{id}: {s}");
    }
    for id in &ids {
        rpc.ok("kill", json!({"id": id, "grace_ms": 100}));
    }
}

#[test]
fn list_is_cheap_without_cgroup() {
    list_is_cheap(&["--no-cgroup"], "process-group");
}

#[test]
fn list_is_cheap_with_cgroup() {
    list_is_cheap(&[], "cgroup");
}
