//! A grep can never starve the daemon: a pattern too large to compile is refused before it
//! allocates, a pathological one answers with a deadline error within its bound, its client
//! leaving stops it, and `daemon stop` during one exits within the grace — while no second daemon
//! can start on the same home until the first process is gone.
//!
//! "Stops" is measured, not assumed: the daemon's own CPU time (`/proc/<pid>/stat`) stops
//! growing once the grep is cancelled.

use std::time::{Duration, Instant};

use serde_json::json;
use stockade_testkit::DaemonProc;

/// JSON-RPC code of a limit reached (the grep's deadline).
const LIMIT_REACHED: i64 = -32002;
/// JSON-RPC code of invalid params (a pattern too large to compile).
const INVALID_PARAMS: i64 = -32602;
/// Slow on random base64 text: the lazy DFA keeps thrashing, so scanning the whole log takes
/// far longer than any deadline here (minutes on this machine).
const SLOW: &str = r"(?-u)[a-q][^\n]{60}[r-z]{2}Q";
/// Slack on every time bound: these machines are shared and slow.
const SLACK: Duration = Duration::from_secs(5);

/// The daemon's CPU time so far (user + system), from `/proc/<pid>/stat`.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `after` starts at field 3.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    Duration::from_millis(ticks * 1000 / hz)
}

/// The daemon's peak RSS (`VmHWM`), KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// CPU the daemon burns over `window`.
fn cpu_over(pid: u32, window: Duration) -> Duration {
    let before = cpu(pid);
    std::thread::sleep(window);
    cpu(pid).saturating_sub(before)
}

/// A daemon with a finished session holding ~40 MiB of random base64 lines; its id.
fn daemon_with_log() -> (DaemonProc, String) {
    let daemon = DaemonProc::start(&[]);
    let run = daemon.client().ok(
        "run",
        json!({"command": "head -c 30000000 /dev/urandom | base64 -w 100", "yield_ms": 60_000}),
    );
    assert_eq!(run["state"], "exited", "{run}");
    (daemon, run["id"].as_str().unwrap().to_owned())
}

#[test]
fn a_pattern_too_large_is_refused_before_it_allocates() {
    let (daemon, id) = daemon_with_log();
    let started = Instant::now();
    let err = daemon
        .client()
        .call("grep", json!({"id": id, "pattern": "a{1000}{1000}"}))
        .expect_err("refused");
    assert_eq!(err.0, INVALID_PARAMS, "{err:?}");
    assert!(err.1.contains("size limit"), "{err:?}");
    assert!(started.elapsed() < SLACK, "answered at once: {:?}", started.elapsed());
    let peak = peak_rss_kib(daemon.pid);
    assert!(peak < 256 * 1024, "the daemon's peak RSS stayed small: {peak} KiB");
}

#[test]
fn a_pathological_pattern_answers_with_a_deadline_error_within_its_bound() {
    let (daemon, id) = daemon_with_log();
    let timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = daemon
        .client()
        .call("grep", json!({"id": id, "pattern": SLOW, "max_matches": 10_000, "timeout_ms": 500}))
        .expect_err("the deadline passes first");
    let took = started.elapsed();
    assert_eq!(err.0, LIMIT_REACHED, "{err:?}");
    assert!(err.1.contains("time limit"), "{err:?}");
    assert!(took >= timeout && took < timeout + SLACK, "answered within its bound: {took:?}");
    // And the search itself stopped: the daemon is idle again (the search alone would burn a
    // core for minutes).
    stockade_testkit::eventually(Duration::from_secs(10), "the daemon to be idle again", || {
        (cpu_over(daemon.pid, Duration::from_secs(1)) < Duration::from_millis(300)).then_some(())
    });
}

/// Waits until one thread of the daemon `pid` has gained 10 CPU ticks over `base`: the one
/// that searches. Its thread id.
fn searching_thread(pid: u32, base: &std::collections::BTreeMap<u32, u64>) -> u32 {
    stockade_testkit::eventually(Duration::from_secs(30), "a daemon thread to search", || {
        let now = thread_ticks(pid);
        now.iter()
            .find(|(tid, t)| **t >= base.get(tid).copied().unwrap_or(0) + 10)
            .map(|(tid, _)| *tid)
    })
}

/// CPU ticks (user + system) of every thread of `pid`, by thread id.
fn thread_ticks(pid: u32) -> std::collections::BTreeMap<u32, u64> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split_whitespace().collect();
        out.insert(tid, f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap());
    }
    out
}

/// Whether the daemon stops searching when its client leaves, measured on the thread that
/// searches — so a loaded machine, which gives the search only a slice of a core, makes the
/// test slower, never wrong: the searching thread is the one that gains 10 ticks first; once
/// the client is gone it must stop gaining (at most one tick over a second).
#[test]
fn a_client_that_goes_away_stops_its_grep() {
    let (daemon, id) = daemon_with_log();
    let base = thread_ticks(daemon.pid);
    let mut rpc = daemon.client();
    rpc.send(
        "grep",
        json!({"id": id, "pattern": SLOW, "max_matches": 10_000, "timeout_ms": 60_000}),
    );
    let searcher = searching_thread(daemon.pid, &base);
    drop(rpc);
    // The daemon notices a hang-up within its poll interval, the search within one read.
    let ticks = |pid: u32| thread_ticks(pid).get(&searcher).copied();
    // A thread that is gone has stopped too.
    stockade_testkit::eventually(Duration::from_secs(10), "the search to stop", || {
        let Some(before) = ticks(daemon.pid) else { return Some(()) };
        std::thread::sleep(Duration::from_secs(1));
        let Some(after) = ticks(daemon.pid) else { return Some(()) };
        (after <= before + 1).then_some(())
    });
    // It still answers.
    daemon.client().ok("status", json!({}));
}

#[test]
fn daemon_stop_during_a_grep_exits_within_the_grace_and_no_second_daemon_starts_beside_it() {
    let (mut daemon, id) = daemon_with_log();
    let base = thread_ticks(daemon.pid);
    let mut rpc = daemon.client();
    rpc.send(
        "grep",
        json!({"id": id, "pattern": SLOW, "max_matches": 10_000, "timeout_ms": 60_000}),
    );
    searching_thread(daemon.pid, &base);
    let stop = Instant::now();
    daemon.client().ok("shutdown", json!({}));
    // A second daemon on the same home, while the first may still be exiting: refused unless
    // the first process is already gone.
    match DaemonProc::start_at(&daemon.home, &[]) {
        Err((stderr, _)) => assert!(stderr.contains("already"), "{stderr}"),
        Ok(second) => {
            assert!(
                daemon.child.try_wait().unwrap().is_some(),
                "a second daemon (pid {}) started beside the live first (pid {})",
                second.pid,
                daemon.pid
            );
        }
    }
    // The test daemons run with a 500 ms grace.
    let status = daemon.wait_exit(Duration::from_millis(500) + SLACK);
    assert!(status.is_some(), "the daemon exits within the grace: {:?}", stop.elapsed());
    // The grep's client got an answer (an error), not silence.
    let answer = rpc.recv();
    assert!(answer["error"].is_object(), "{answer}");
}
