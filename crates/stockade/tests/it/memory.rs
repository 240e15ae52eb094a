//! Live sessions are cheap and finished ones cost nothing, through daemons started as users start
//! them: 64 running sessions that each printed 2 MiB hold kilobytes each (the output is only in
//! the spool), and all of them killed leave no process; a finished session holds no file
//! descriptor; under a soft open-file limit of 1024 hundreds of background runs all succeed,
//! the daemon raised its own limit and its commands see the user's.
//! (The full figures — 1,000 live sessions, 2,000 runs — are `stockade bench memory` and the
//! README's Results.)

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use stockade_testkit::{DaemonProc, Rpc, eventually, stockade_bin};

const LIVE: usize = 64;
const LIVE_BYTES: u64 = 2 * 1024 * 1024;
/// What 64 live sessions may add to the daemon's peak RSS: 160 KiB each (runtime task, record,
/// bookkeeping, allocator slack) plus 8 MiB for the daemon's own buffers under load. Holding
/// the output in memory (a 1 MiB ring each) would need more than 64 MiB.
const LIVE_GROWTH_BOUND_KIB: u64 = LIVE as u64 * 160 + 8 * 1024;

fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).unwrap();
    line.trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// `(state, process group)` of a process, from `/proc/<pid>/stat`.
fn state_and_group(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut f = stat.rsplit_once(')')?.1.split_whitespace();
    let state = f.next()?.chars().next()?;
    let pgrp = f.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// Processes (zombies count as dead) in one of these process groups.
fn alive_in_groups(groups: &HashSet<u32>) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|&pid| {
            state_and_group(pid).is_some_and(|(state, pgrp)| groups.contains(&pgrp) && state != 'Z')
        })
        .collect()
}

#[test]
fn sixty_four_live_sessions_of_2_mib_hold_kilobytes_each_and_leave_nothing_when_killed() {
    let daemon = DaemonProc::start(&[]);
    let mut rpc = daemon.client();
    let marks = tempfile::tempdir().unwrap();
    // One finished run first, so the baseline includes the shared drain and the runtime.
    rpc.ok("run", json!({"command": "echo warm"}));
    std::thread::sleep(Duration::from_millis(300));
    let idle_kib = status_kib(daemon.pid, "VmRSS");
    let command = format!(
        "head -c {LIVE_BYTES} /dev/zero | tr '\\0' x; : > {}/$$; exec sleep 600",
        marks.path().display()
    );
    let mut ids = Vec::new();
    let mut groups = HashSet::new();
    for _ in 0..LIVE {
        let r = rpc.ok("run", json!({"command": command, "background": true}));
        ids.push(r["id"].as_str().unwrap().to_owned());
        groups.insert(r["pid"].as_u64().unwrap() as u32);
    }
    eventually(Duration::from_secs(180), "every live session to print 2 MiB", || {
        let printed = std::fs::read_dir(marks.path()).unwrap().count() == LIVE;
        let stats = rpc.ok("stats", json!({}));
        (printed && stats["output_bytes"].as_u64()? >= LIVE as u64 * LIVE_BYTES).then_some(())
    });
    let stats = rpc.ok("stats", json!({}));
    assert_eq!(stats["sessions"]["running"], LIVE, "{stats}");
    // The logs hold bookkeeping only: no output bytes in memory.
    let held = stats["hot_tail_bytes"].as_u64().unwrap();
    assert!(held <= LIVE as u64 * 16 * 1024, "logs hold {held} bytes: {stats}");
    let peak_kib = status_kib(daemon.pid, "VmHWM");
    let growth = peak_kib.saturating_sub(idle_kib);
    assert!(
        growth <= LIVE_GROWTH_BOUND_KIB,
        "{LIVE} live sessions raised the daemon's peak RSS by {growth} KiB (idle {idle_kib} KiB), bound {LIVE_GROWTH_BOUND_KIB} KiB"
    );
    // Each is still running and readable at its end, from the spool.
    let tail = rpc.ok("read", json!({"id": ids[0], "mode": "tail", "max_bytes": 64}));
    assert!(tail["output"].as_str().unwrap().ends_with("xxxx"), "{tail}");
    for id in &ids {
        let report = rpc.ok("kill", json!({"id": id}));
        assert_eq!(report["report"]["terminated"], true, "{report}");
    }
    let left = alive_in_groups(&groups);
    assert!(left.is_empty(), "processes left after killing every session: {left:?}");
}

#[test]
fn a_finished_session_holds_no_file_descriptor() {
    let daemon = DaemonProc::start(&[]);
    let mut rpc = daemon.client();
    rpc.ok("run", json!({"command": "echo warm"}));
    let base = fd_count(daemon.pid);
    for i in 0..100 {
        // Pipe, file capture and PTY sessions alike.
        let params = match i % 3 {
            0 => json!({"command": format!("echo {i}; echo err >&2")}),
            1 => json!({"command": format!("echo {i}"), "capture": "file"}),
            _ => json!({"command": format!("echo {i}"), "pty": {"rows": 24, "cols": 80}}),
        };
        let r = rpc.ok("run", params);
        assert_eq!(r["state"], "exited", "{r}");
        // Reads of a finished log open its files and close them again.
        rpc.ok("read", json!({"id": r["id"], "mode": "head"}));
    }
    let after = eventually(Duration::from_secs(20), "the daemon's descriptors to settle", || {
        let n = fd_count(daemon.pid);
        (n <= base + 1).then_some(n)
    });
    assert!(after <= base + 1, "100 finished sessions: {base} descriptors before, {after} after");
}

/// A daemon started under a soft open-file limit of 1024, killed on drop.
struct LimitedDaemon {
    child: Child,
    socket: std::path::PathBuf,
}

impl LimitedDaemon {
    fn start(home: &Path) -> LimitedDaemon {
        let mut cmd = Command::new(stockade_bin());
        cmd.arg("--home").arg(home).args(["daemon", "run", "--grace-ms", "500"]);
        cmd.env("STOCKADE_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::null());
        cmd.stderr(Stdio::piped());
        // SAFETY: one raw syscall between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
                let lim = rustix::process::Rlimit { current: Some(1024), maximum: hard };
                rustix::process::setrlimit(rustix::process::Resource::Nofile, lim)?;
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening on") {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "the daemon did not start");
        }
        std::thread::spawn(move || while err.read_line(&mut line).is_ok_and(|n| n > 0) {});
        LimitedDaemon { child, socket: home.join("stockade.sock") }
    }
}

impl Drop for LimitedDaemon {
    fn drop(&mut self) {
        if let Ok(mut rpc) = std::panic::catch_unwind(|| Rpc::connect(&self.socket)) {
            let _ = rpc.call("shutdown", json!({}));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn limits_line(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    let mut f = line.split_whitespace().skip(3);
    (f.next().unwrap().to_owned(), f.next().unwrap().to_owned())
}

/// Background runs past what 1024 descriptors held before (about 250 finished sessions).
const RUNS: usize = 600;

#[test]
fn under_a_soft_limit_of_1024_hundreds_of_background_runs_all_succeed() {
    let (soft, hard) = limits_line(std::process::id());
    if hard != "unlimited" && hard.parse::<u64>().unwrap() < 4096 {
        stockade_testkit::cannot_run(&format!(
            "the hard open-file limit is {hard} (soft {soft}): raising to it proves nothing"
        ));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let daemon = LimitedDaemon::start(&tmp.path().join("home"));
    let pid = daemon.child.id();
    let (dsoft, dhard) = limits_line(pid);
    assert_eq!(dsoft, dhard, "the daemon raised its soft limit to the hard one");
    let mut rpc = Rpc::connect(&daemon.socket);
    // Its commands get the user's limit back.
    let r = rpc.ok("run", json!({"command": "ulimit -Sn"}));
    assert_eq!(r["output"].as_str().unwrap().trim(), "1024", "{r}");
    let base = fd_count(pid);
    let mut ids = Vec::new();
    for i in 0..RUNS {
        // The raw client waits at most its read timeout for each answer.
        let r = rpc.call("run", json!({"command": "true", "background": true}));
        let r = r.unwrap_or_else(|e| panic!("run {i} of {RUNS} failed: {e:?}"));
        ids.push(r["id"].as_str().unwrap().to_owned());
    }
    eventually(Duration::from_secs(120), "every run to finish", || {
        let list = rpc.ok("list", json!({}));
        let done = list["sessions"].as_array()?.iter().all(|s| s["state"] == "exited");
        done.then_some(())
    });
    let list = rpc.ok("list", json!({}));
    assert_eq!(list["sessions"].as_array().unwrap().len(), RUNS + 1);
    let after = eventually(Duration::from_secs(20), "descriptors to settle", || {
        let n = fd_count(pid);
        (n <= base + 1).then_some(n)
    });
    assert!(
        after <= base + 1,
        "{RUNS} finished sessions: {base} descriptors before, {after} after"
    );
}
