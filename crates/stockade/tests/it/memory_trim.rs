//! The idle daemon's start-up trim (Linux-only), through a daemon started as users start it:
//! once it has been quiet a few seconds, the resident pages of its own executable drop to under
//! half of what start-up left (read here from `/proc/<pid>/smaps`, not from the daemon), `stats`
//! says what it did, and the daemon still serves a run afterwards (its code faults back in).
//! The daemon runs from its own copy of the binary: the kernel leaves pages that another live
//! process maps too, and the other tests' daemons run the same file.

use std::time::Duration;

use serde_json::json;
use stockade_testkit::{DaemonProc, cannot_run, eventually, stockade_bin};

/// KiB of `pid`'s own executable resident now: `Rss` summed over the mappings of the file
/// `/proc/<pid>/exe` names.
fn exe_rss_kib(pid: u32) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let exe = exe.to_str().unwrap().trim_end_matches(" (deleted)").to_owned();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // A mapping's header: `start-end perms offset dev inode [path]`.
            let path = line.split_whitespace().skip(5).collect::<Vec<_>>().join(" ");
            ours = path.trim_end_matches(" (deleted)") == exe;
        } else if ours && let Some(v) = line.strip_prefix("Rss:") {
            kib += v.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap();
        }
    }
    kib
}

#[test]
fn an_idle_daemon_hands_its_start_up_pages_back_and_still_serves() {
    // From a private copy of the binary: pages that other tests' daemons map too are shared,
    // and the kernel leaves shared pages where they are.
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("stockade");
    std::fs::copy(stockade_bin(), &exe).unwrap();
    // Written back before it runs: the kernel can only drop clean pages at once.
    std::fs::File::open(&exe).unwrap().sync_all().unwrap();
    let daemon =
        DaemonProc::start_exe(&exe, &tmp.path().join("home"), &[], &[]).expect("the daemon starts");
    let mut rpc = daemon.client();
    // Start-up as a client sees it: a first run, so the run path's code is resident too.
    let first = rpc.ok("run", json!({"command": "echo warm"}));
    assert_eq!(first["output"].as_str().unwrap().trim(), "warm", "{first}");
    let before = exe_rss_kib(daemon.pid);
    let stats = rpc.ok("stats", json!({}));
    assert!(
        stats.get("trim").is_none(),
        "the trim ran before start-up's own requests were answered (or this host is very slow): {stats}"
    );
    assert!(before >= 1024, "start-up left only {before} KiB of the executable resident");
    // Watched from /proc alone: a request now would fault the daemon's code back in.
    let mut after = before;
    let dropped = (0..3000).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        after = exe_rss_kib(daemon.pid);
        after * 2 < before
    });
    let trim = eventually(Duration::from_secs(60), "the start-up trim", || {
        rpc.ok("stats", json!({})).get("trim").cloned()
    });
    if let Some(why) = trim.get("refused") {
        cannot_run(&format!("this kernel refuses madvise(MADV_PAGEOUT): {why}"));
        return;
    }
    assert!(
        dropped,
        "within 60 s the executable's resident pages went from {before} KiB only to {after} KiB, not under half: {trim}"
    );
    assert!(trim["advised_bytes"].as_u64().unwrap() > 0, "{trim}");
    // Its code faults back in: the daemon still serves a run, and another client.
    let again = rpc.ok("run", json!({"command": "echo still here"}));
    assert_eq!(again["output"].as_str().unwrap().trim(), "still here", "{again}");
    let listed = daemon.client().ok("list", json!({}));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2, "{listed}");
}
