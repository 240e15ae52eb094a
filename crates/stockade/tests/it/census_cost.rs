//! Ending or counting one session costs O(that session), not O(the machine): every session root
//! is a child subreaper, so everything a running session started is found by walking down from
//! its root — no `/proc` census (`stats.process_scans` does not move) for a `kill`, a `list`, or
//! the end of a command that exited by itself, with or without a cgroup. The daemon CPU of one
//! `kill` and one `list` is printed (the figure at 1,000 sessions is in docs/reliability.md).

use std::time::Duration;

use serde_json::json;
use stockade_testkit::procs::{instance_of, marked_processes};
use stockade_testkit::{DaemonProc, Rpc, cannot_run, eventually};

/// Running sessions in the test.
const SESSIONS: usize = 200;

/// The daemon's CPU time so far (user + system).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    Duration::from_millis(ticks * 1000 / hz)
}

fn scans(rpc: &mut Rpc) -> u64 {
    rpc.ok("stats", json!({}))["process_scans"].as_u64().unwrap()
}

fn no_census_per_session(extra: &[&str], containment: &str) {
    let daemon = DaemonProc::start(extra);
    let mut rpc = daemon.client();
    let status = rpc.ok("status", json!({}));
    if status["containment"] != containment {
        cannot_run(&format!("{containment} containment is not usable: {status}"));
        return;
    }
    let mut ids = Vec::new();
    let mut instance = String::new();
    for _ in 0..SESSIONS {
        let run = rpc.ok("run", json!({"command": "sleep 1000", "background": true}));
        instance = instance_of(&run);
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    let prefix = format!("STOCKADE_SESSION={instance}:");
    // Each has formed (`sh -c` may exec the sleep or wait for it): the count is steady.
    let mut last = 0;
    eventually(Duration::from_secs(60), "every session formed", || {
        let now = marked_processes(&prefix).len();
        let steady = now >= SESSIONS && now == last;
        last = now;
        steady.then_some(())
    });

    let before = scans(&mut rpc);
    let cpu_before = cpu(daemon.pid);
    let listed = rpc.ok("list", json!({}));
    let cpu_list = cpu(daemon.pid).saturating_sub(cpu_before);
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), SESSIONS);
    // The counts agree with an independent look at every session's marker.
    let counted: u64 = sessions.iter().map(|s| s["processes"].as_u64().unwrap()).sum();
    assert_eq!(counted, marked_processes(&prefix).len() as u64);

    let cpu_before = cpu(daemon.pid);
    let killed = rpc.ok("kill", json!({"id": ids[0], "grace_ms": 100}));
    let cpu_kill = cpu(daemon.pid).saturating_sub(cpu_before);
    assert_eq!(killed["report"]["terminated"], true, "{killed}");

    // A command that exits by itself, leaving an orphan that the end kills.
    let ran = rpc.ok(
        "run",
        json!({"command": "(setsid env -i sleep 1000 </dev/null >/dev/null 2>&1 &); exit 0", "yield_ms": 30_000}),
    );
    assert_eq!(ran["cleanup"]["terminated"], true, "{ran}");
    assert!(ran["cleanup"]["pids_signalled"].as_array().is_some_and(|a| !a.is_empty()), "{ran}");
    let after = scans(&mut rpc);
    eprintln!(
        "{SESSIONS} running ({containment}): list {cpu_list:?}, kill {cpu_kill:?} of daemon CPU; \
         process scans {before} -> {after}"
    );
    assert_eq!(after, before, "a list, a kill and an end took a census");
    for id in &ids[1..] {
        rpc.ok("kill", json!({"id": id, "grace_ms": 100}));
    }
    assert_eq!(scans(&mut rpc), before, "{} kills took a census", SESSIONS - 1);
}

#[test]
fn one_session_costs_no_census_without_cgroup() {
    no_census_per_session(&["--no-cgroup"], "process-group");
}

#[test]
fn one_session_costs_no_census_with_cgroup() {
    no_census_per_session(&[], "cgroup");
}
