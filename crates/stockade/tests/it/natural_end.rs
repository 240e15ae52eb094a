//! The end of a command that leaves nothing behind, through a daemon started as users start it:
//! with cgroup containment, a root that exited with its cgroup empty is verified gone without a
//! `/proc` scan (`stats.process_scans` does not move over many `run true`); an orphan the
//! command left on the daemon (a child subreaper) that died is reaped, not kept as a zombie, and
//! the scan-free end resumes after it.

use std::time::Duration;

use serde_json::json;
use stockade_testkit::{DaemonProc, Rpc, cannot_run, eventually};

const RUNS: usize = 30;

fn scans(rpc: &mut Rpc) -> u64 {
    rpc.ok("stats", json!({}))["process_scans"].as_u64().unwrap()
}

/// Zombie children of `pid`.
fn zombie_children(pid: u32) -> Vec<u32> {
    let me = pid.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                let mut f =
                    s.rsplit_once(')').map(|(_, r)| r.split_whitespace()).into_iter().flatten();
                f.next() == Some("Z") && f.next() == Some(me.as_str())
            })
        })
        .collect()
}

fn with_cgroup_daemon() -> Option<(DaemonProc, Rpc)> {
    let daemon = DaemonProc::start(&[]);
    let mut rpc = daemon.client();
    if rpc.ok("status", json!({}))["containment"] != "cgroup" {
        cannot_run("no cgroup containment here (the scan-free end needs a session cgroup)");
        return None;
    }
    Some((daemon, rpc))
}

/// The cgroup recorded in session `id`'s end record.
fn session_cgroup(daemon: &DaemonProc, id: &str) -> std::path::PathBuf {
    let spool = daemon.home.join("spool");
    let record = std::fs::read_dir(&spool)
        .unwrap()
        .flatten()
        .map(|e| e.path().join(id).join("session.json"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no record of {id} under {}", spool.display()));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!(v["state"], "exited", "{v}");
    std::path::PathBuf::from(v["cgroup"].as_str().unwrap_or_else(|| panic!("no cgroup in {v}")))
}

#[test]
fn a_command_that_leaves_nothing_ends_without_a_process_scan() {
    let Some((daemon, mut rpc)) = with_cgroup_daemon() else { return };
    let before = scans(&mut rpc);
    let mut cgroups = Vec::new();
    for _ in 0..RUNS {
        let r = rpc.ok("run", json!({"command": "true"}));
        assert_eq!(r["state"], "exited", "{r}");
        assert!(r.get("cleanup").is_none_or(serde_json::Value::is_null), "{r}");
        cgroups.push(session_cgroup(&daemon, r["id"].as_str().unwrap()));
    }
    let after = scans(&mut rpc);
    assert_eq!(after, before, "{RUNS} `run true` took {} /proc scans", after - before);
    // Each session's cgroup is removed once its end is published.
    eventually(Duration::from_secs(10), "every session cgroup removed", || {
        cgroups.iter().all(|c| !c.exists()).then_some(())
    });
    // A command that does leave something still gets the full routine: it is killed.
    let r = rpc.ok("run", json!({"command": "sleep 1000 & echo started"}));
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["cleanup"]["terminated"], true, "{r}");
    assert!(!r["cleanup"]["pids_signalled"].as_array().unwrap().is_empty(), "{r}");
}

#[test]
fn orphans_that_died_on_the_daemon_are_reaped_and_the_cheap_end_resumes() {
    let Some((daemon, mut rpc)) = with_cgroup_daemon() else { return };
    // Two orphans land on the daemon (the subshells exit at once) and die there.
    let r = rpc.ok("run", json!({"command": "(true &); (sleep 0.2 &); sleep 0.5; echo done"}));
    assert_eq!(r["state"], "exited", "{r}");
    eventually(Duration::from_secs(15), "the daemon reaped its zombie children", || {
        zombie_children(daemon.pid).is_empty().then_some(())
    });
    let before = scans(&mut rpc);
    for _ in 0..5 {
        assert_eq!(rpc.ok("run", json!({"command": "true"}))["state"], "exited");
    }
    assert_eq!(scans(&mut rpc), before, "the scan-free end did not resume");
}
