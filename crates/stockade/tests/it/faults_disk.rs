//! A full disk under many sessions, and a spool cut short outside the daemon, through the
//! binary: every byte printed after space returns reaches the spool, every lost range is one
//! named gap that `read` and `logs --raw` name alike, and no byte that is not output (a NUL of
//! a sparse hole) is ever served.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::daemon::DaemonProc;
use stockade_testkit::{Rpc, eventually, stockade_bin, text};

use crate::crash_disk_full::Tmpfs;
use crate::disk_full_restart::{fill_leaving, read_raw_across};

/// Sessions printing at once onto the small disk.
const SESSIONS: usize = 32;
/// Rounds the test runs; `scripts/disk-full-rounds` runs more.
const ROUNDS_ENV: &str = "STOCKADE_DISK_FULL_ROUNDS";

fn numbered(prefix: &str, n: u32) -> Vec<u8> {
    (1..=n).flat_map(|i| format!("{prefix}{i}\n").into_bytes()).collect()
}

/// The gaps a view names, as `(start, end)`.
fn gaps_of(view: &Value) -> Vec<(u64, u64)> {
    let gaps = view["gaps"].as_array().cloned().unwrap_or_default();
    gaps.iter().map(|g| (g["start"].as_u64().unwrap(), g["end"].as_u64().unwrap())).collect()
}

/// `expected` without `gaps`.
fn without(expected: &[u8], gaps: &[(u64, u64)]) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut at = 0usize;
    for &(s, e) in gaps {
        kept.extend_from_slice(&expected[at..s as usize]);
        at = e as usize;
    }
    kept.extend_from_slice(&expected[at..]);
    kept
}

/// `stockade logs --raw ID` on `home`: its stdout and the gaps its stderr names.
fn logs_raw(home: &Path, id: &str) -> (Vec<u8>, Vec<(u64, u64)>) {
    let out = Command::new(stockade_bin())
        .args(["--home"])
        .arg(home)
        .args(["--no-autostart", "logs", "--raw", id])
        .env("STOCKADE_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success(), "logs --raw {id}: {}", text(&out.stderr));
    let named = text(&out.stderr)
        .lines()
        .filter_map(|l| {
            let range = l.split("stockade: bytes ").nth(1)?.split(' ').next()?;
            let (s, e) = range.split_once("..")?;
            Some((s.parse().ok()?, e.parse().ok()?))
        })
        .collect();
    (out.stdout, named)
}

/// What one round measured.
#[derive(Debug, Default)]
struct Round {
    sessions_with_gaps: usize,
    gaps: usize,
    dropped: u64,
    lost_after_space: usize,
    empty_tails: usize,
    took: Duration,
}

/// One round: a 16 MiB tmpfs home with about 1 MiB free, 32 sessions print 588,895 bytes each
/// (far past what fits), the space is freed, and each prints 2,000 more lines and ends.
fn one_round(round: usize) -> Option<Round> {
    let tmpfs = match Tmpfs::mount_with("size=16m,mode=0700") {
        Ok(t) => t,
        Err(why) => {
            stockade_testkit::cannot_run(&why);
            return None;
        }
    };
    let started = Instant::now();
    let home = tmpfs.dir.join("state");
    let daemon = DaemonProc::start_at(&home, &[]).expect("the daemon starts");
    let mut rpc = daemon.client();
    let fill = fill_leaving(&tmpfs, 1 << 20);
    let go = tempfile::tempdir().unwrap();
    let flag = go.path().join("go");
    let first = numbered("", 100_000);
    let mut expected = first.clone();
    expected.extend(numbered("after-", 2000));
    expected.extend_from_slice(b"the-end\n");
    let command = format!(
        "seq 1 100000; while [ ! -e {} ]; do sleep 0.05; done; seq -f 'after-%g' 1 2000; echo the-end",
        flag.display()
    );
    let ids: Vec<String> = (0..SESSIONS)
        .map(|_| {
            let r = rpc.ok(
                "run",
                json!({"command": command, "background": true, "retained_cap": 256 * 1024}),
            );
            r["id"].as_str().unwrap().to_owned()
        })
        .collect();
    // Every session printed its first part onto the full disk.
    for id in &ids {
        eventually(Duration::from_secs(60), "the first part to be printed", || {
            let v = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
            (v["total_bytes"] == first.len()).then_some(())
        });
    }
    std::fs::remove_file(&fill).unwrap();
    std::fs::write(&flag, b"").unwrap();
    let mut r = Round::default();
    for id in &ids {
        let s = eventually(Duration::from_secs(60), "the session to end", || {
            let list = rpc.ok("list", json!({}));
            let s = list["sessions"].as_array()?.iter().find(|s| s["id"] == *id)?.clone();
            (s["state"] != "running").then_some(s)
        });
        assert_eq!(s["state"], "exited", "{s}");
        assert_eq!(s["total_bytes"].as_u64(), Some(expected.len() as u64), "{s}");
        // Waiting bytes are written within the daemon's second-long retry.
        let view = eventually(Duration::from_secs(10), "what waited to reach the spool", || {
            let v = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 256}));
            let spool = Path::new(v["spool_path"].as_str()?);
            let kept = without(&expected, &gaps_of(&v));
            (std::fs::metadata(spool).ok()?.len() == kept.len() as u64).then_some(v)
        });
        let gaps = gaps_of(&view);
        let output = view["output"].as_str().unwrap_or_default();
        if !output.ends_with("after-2000\nthe-end\n") {
            r.empty_tails += 1;
            eprintln!("{id}: tail view {view}");
        }
        if gaps.iter().any(|&(_, e)| e > first.len() as u64) {
            r.lost_after_space += 1;
            eprintln!("{id}: a gap past the first part: {gaps:?}");
        }
        for g in view["gaps"].as_array().unwrap() {
            assert_eq!(g["reason"], "disk full", "{view}");
        }
        let kept = without(&expected, &gaps);
        let spool = std::fs::read(view["spool_path"].as_str().unwrap()).unwrap();
        assert!(spool == kept, "{id}: spool {} bytes, expected {}", spool.len(), kept.len());
        let (raw, jumps) = read_raw_across(&mut rpc, id);
        assert!(raw == kept, "{id}: raw read {} bytes, expected {}", raw.len(), kept.len());
        assert_eq!(jumps, gaps, "{id}: the raw read jumps exactly the named gaps");
        let (stdout, named) = logs_raw(&home, id);
        assert!(stdout == kept, "{id}: logs --raw {} bytes, expected {}", stdout.len(), kept.len());
        assert_eq!(named, gaps, "{id}: logs --raw names what read names");
        // `stockade read`, which reads the state directory itself, names them too.
        eventually(Duration::from_secs(10), "stockade read to name the same gaps", || {
            let out = Command::new(stockade_bin())
                .arg("--home")
                .arg(&home)
                .args(["read", id, "--json"])
                .output()
                .ok()?;
            let v: Value = serde_json::from_slice(&out.stdout).ok()?;
            (gaps_of(&v) == gaps).then_some(())
        });
        // grep across the gap: the last line at its log offset and line number.
        let found = rpc.ok("grep", json!({"id": id, "pattern": "^after-2000$"}));
        let line = &found["lines"][0];
        assert_eq!(line["offset"].as_u64(), Some(expected.len() as u64 - 19), "{found}");
        assert_eq!(line["line_number"].as_u64(), Some(102_000), "{found}");
        if !gaps.is_empty() {
            r.sessions_with_gaps += 1;
        }
        r.gaps += gaps.len();
        r.dropped += gaps.iter().map(|(s, e)| e - s).sum::<u64>();
    }
    drop(rpc);
    drop(daemon);
    r.took = started.elapsed();
    eprintln!(
        "round {round}: {} of {SESSIONS} sessions with gaps, {} gaps, {} bytes dropped, {} lost bytes printed after space returned, {} empty tails, {} ms",
        r.sessions_with_gaps,
        r.gaps,
        r.dropped,
        r.lost_after_space,
        r.empty_tails,
        r.took.as_millis()
    );
    Some(r)
}

#[test]
fn thirty_two_sessions_on_a_full_disk_lose_nothing_printed_after_space_returns() {
    let rounds: usize = std::env::var(ROUNDS_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let mut all = Vec::new();
    for round in 1..=rounds {
        let Some(r) = one_round(round) else { return };
        all.push(r);
    }
    let lost: usize = all.iter().map(|r| r.lost_after_space).sum();
    let empty: usize = all.iter().map(|r| r.empty_tails).sum();
    let with_gaps: usize = all.iter().map(|r| r.sessions_with_gaps).sum();
    eprintln!(
        "{rounds} rounds: {lost} sessions lost bytes printed after space returned, {empty} empty tails, {with_gaps} of {} sessions with named gaps",
        rounds * SESSIONS
    );
    assert_eq!(lost, 0, "sessions lost bytes printed after space returned");
    assert_eq!(empty, 0, "tail views without the newest output");
    assert!(with_gaps > 0, "the disk never filled: the test showed nothing");
}

/// The spool holds everything printed but the named gaps (nothing waits in memory).
fn settled(rpc: &mut Rpc, id: &str) -> Value {
    eventually(Duration::from_secs(20), "what waits in memory to reach the spool", || {
        let v = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
        let on_disk = std::fs::metadata(v["spool_path"].as_str()?).ok()?.len();
        let kept = v["total_bytes"].as_u64()? - v["dropped_bytes"].as_u64()?;
        (on_disk == kept).then_some(v)
    })
}

/// Sessions print through a disk that fills, frees, fills again and frees again. Each lost
/// range is its own named gap (a session may have two), nothing written is cut back, and the
/// last part, printed after the space came back the second time, is whole.
#[test]
fn a_disk_that_fills_again_leaves_one_named_gap_per_lost_range() {
    let tmpfs = match Tmpfs::mount_with("size=16m,mode=0700") {
        Ok(t) => t,
        Err(why) => return stockade_testkit::cannot_run(&why),
    };
    let home = tmpfs.dir.join("state");
    let daemon = DaemonProc::start_at(&home, &[]).expect("the daemon starts");
    let mut rpc = daemon.client();
    let go = tempfile::tempdir().unwrap();
    let flag = |n: u32| go.path().join(format!("go{n}"));
    let wait = |n: u32| format!("while [ ! -e {} ]; do sleep 0.05; done", flag(n).display());
    let command = format!(
        "seq -f 'a-%g' 1 60000; {}; seq -f 'b-%g' 1 60000; {}; seq -f 'c-%g' 1 2000; echo the-end",
        wait(1),
        wait(2)
    );
    let mut expected = numbered("a-", 60000);
    let first = expected.len();
    expected.extend(numbered("b-", 60000));
    let second = expected.len();
    expected.extend(numbered("c-", 2000));
    expected.extend_from_slice(b"the-end\n");
    let fill = fill_leaving(&tmpfs, 1 << 20);
    let ids: Vec<String> = (0..8)
        .map(|_| {
            let r = rpc.ok(
                "run",
                json!({"command": command, "background": true, "retained_cap": 128 * 1024}),
            );
            r["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let printed = |rpc: &mut Rpc, id: &str, n: usize| {
        eventually(Duration::from_secs(60), "a part to be printed", || {
            let v = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
            (v["total_bytes"] == n).then_some(())
        })
    };
    for id in &ids {
        printed(&mut rpc, id, first);
    }
    // Space returns; what waited is written; then the disk fills again and the second part
    // overflows it.
    std::fs::remove_file(&fill).unwrap();
    for id in &ids {
        settled(&mut rpc, id);
    }
    let fill = fill_leaving(&tmpfs, 256 << 10);
    std::fs::write(flag(1), b"").unwrap();
    for id in &ids {
        printed(&mut rpc, id, second);
    }
    std::fs::remove_file(&fill).unwrap();
    std::fs::write(flag(2), b"").unwrap();
    let mut two = 0;
    for id in &ids {
        let s = eventually(Duration::from_secs(60), "the session to end", || {
            let list = rpc.ok("list", json!({}));
            let s = list["sessions"].as_array()?.iter().find(|s| s["id"] == *id)?.clone();
            (s["state"] != "running").then_some(s)
        });
        assert_eq!(s["state"], "exited", "{s}");
        let view = settled(&mut rpc, id);
        let gaps = gaps_of(&view);
        assert!(!gaps.is_empty(), "{id}: the disk filled: {view}");
        assert!(gaps.windows(2).all(|w| w[0].1 < w[1].0), "{id}: gaps apart: {gaps:?}");
        assert!(
            gaps.iter().all(|&(_, e)| e <= second as u64),
            "{id}: the last part lost: {gaps:?}"
        );
        two += usize::from(gaps.len() >= 2);
        let kept = without(&expected, &gaps);
        let spool = std::fs::read(view["spool_path"].as_str().unwrap()).unwrap();
        assert!(spool == kept, "{id}: spool {} bytes, expected {}", spool.len(), kept.len());
        let (raw, jumps) = read_raw_across(&mut rpc, id);
        assert!(raw == kept && jumps == gaps, "{id}: raw read jumps {jumps:?}, gaps {gaps:?}");
        let (stdout, named) = logs_raw(&home, id);
        assert!(stdout == kept && named == gaps, "{id}: logs --raw names {named:?}, gaps {gaps:?}");
        let tail = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
        assert!(tail["output"].as_str().unwrap().ends_with("c-2000\nthe-end\n"), "{tail}");
        eprintln!("{id}: gaps {gaps:?}");
    }
    assert!(two > 0, "no session lost two ranges: the second fill showed nothing");
}

/// No NUL byte in what a read of `id` serves, raw or as text; returns the raw bytes.
fn no_nul_served(rpc: &mut Rpc, id: &str) -> (Vec<u8>, Vec<(u64, u64)>) {
    let (raw, jumps) = read_raw_across(rpc, id);
    assert!(!raw.contains(&0), "{id}: a NUL byte was served raw");
    for mode in ["head", "tail", "middle"] {
        let v = rpc.ok("read", json!({"id": id, "mode": mode}));
        let out = v["output"].as_str().unwrap_or_default();
        assert!(!out.contains('\0') && !out.contains("\\x00"), "{id} {mode}: {v}");
    }
    (raw, jumps)
}

fn truncate(path: &Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
}

#[test]
fn a_spool_truncated_under_the_daemon_is_a_named_gap_never_nul_bytes() {
    let daemon = DaemonProc::start(&[]);
    let mut rpc = daemon.client();

    // A finished session: the spool cut to 50,000 of its 108,894 bytes.
    let done = rpc.ok("run", json!({"command": "seq 1 20000"}));
    let id = done["id"].as_str().unwrap().to_owned();
    let expected = numbered("", 20000);
    let view = rpc.ok("read", json!({"id": id, "mode": "tail"}));
    let spool = Path::new(view["spool_path"].as_str().unwrap()).to_owned();
    truncate(&spool, 50_000);
    let view = rpc.ok("read", json!({"id": id, "mode": "tail"}));
    assert_eq!(gaps_of(&view), vec![(50_000, expected.len() as u64)], "{view}");
    assert!(view["gaps"][0]["reason"].as_str().unwrap().contains("truncated"), "{view}");
    let (raw, _) = no_nul_served(&mut rpc, &id);
    assert!(raw == expected[..50_000], "{} bytes served", raw.len());
    let (stdout, named) = logs_raw(&daemon.home, &id);
    assert!(stdout == expected[..50_000] && named == gaps_of(&view), "{named:?}");

    // A running session: its spool cut by 788 bytes between two parts of its output.
    let go = tempfile::tempdir().unwrap();
    let flag = go.path().join("go");
    let command = format!(
        "seq 1 20000; while [ ! -e {} ]; do sleep 0.05; done; seq -f 'after-%g' 1 500",
        flag.display()
    );
    let started = rpc.ok("run", json!({"command": command, "background": true}));
    let id = started["id"].as_str().unwrap().to_owned();
    let first = expected.clone();
    let v = eventually(Duration::from_secs(30), "the first part", || {
        let v = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
        (v["total_bytes"] == first.len()).then_some(v)
    });
    let spool = Path::new(v["spool_path"].as_str().unwrap()).to_owned();
    let cut = first.len() as u64 - 788;
    truncate(&spool, cut);
    std::fs::write(&flag, b"").unwrap();
    let s = eventually(Duration::from_secs(30), "the session to end", || {
        let v = rpc.ok("read", json!({"id": id, "mode": "tail", "wait_ms": 500}));
        (v["total_bytes"].as_u64()? > first.len() as u64).then_some(())?;
        let list = rpc.ok("list", json!({}));
        let s = list["sessions"].as_array()?.iter().find(|s| s["id"] == id.as_str())?.clone();
        (s["state"] != "running").then_some(s)
    });
    assert_eq!(s["state"], "exited", "{s}");
    let mut all = first.clone();
    all.extend(numbered("after-", 500));
    let view = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
    assert_eq!(gaps_of(&view), vec![(cut, first.len() as u64)], "{view}");
    assert!(view["output"].as_str().unwrap().ends_with("after-500\n"), "{view}");
    let (raw, jumps) = no_nul_served(&mut rpc, &id);
    let kept = without(&all, &[(cut, first.len() as u64)]);
    assert!(raw == kept, "{} bytes served, {} kept", raw.len(), kept.len());
    assert_eq!(jumps, vec![(cut, first.len() as u64)]);
    let on_disk = std::fs::read(&spool).unwrap();
    assert!(!on_disk.contains(&0), "a sparse hole was written into the spool");
    assert!(on_disk == kept, "spool {} bytes, {} kept", on_disk.len(), kept.len());
    let (stdout, named) = logs_raw(&daemon.home, &id);
    assert!(stdout == kept && named == jumps, "{named:?}");
}

/// SIGKILLs a process group when dropped (the session a killed daemon left), even on failure.
struct KillGroup(i32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group of a session this test started.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

/// A spool resumes after a full disk, then its daemon is SIGKILLed while the command runs: the
/// next daemon still names the gap where it was and reads every later byte at its own offset.
#[test]
fn a_gap_outlives_a_daemon_killed_after_the_spool_resumed() {
    let tmpfs = match Tmpfs::mount_with("size=16m,mode=0700") {
        Ok(t) => t,
        Err(why) => return stockade_testkit::cannot_run(&why),
    };
    let home = tmpfs.dir.join("state");
    let mut daemon = DaemonProc::start_at(&home, &[]).expect("the daemon starts");
    let mut rpc = daemon.client();
    let fill = fill_leaving(&tmpfs, 1 << 20);
    let go = tempfile::tempdir().unwrap();
    let flag = go.path().join("go");
    let command = format!(
        "seq 1 300000; while [ ! -e {} ]; do sleep 0.05; done; seq -f 'b-%g' 1 20000; sleep 600",
        flag.display()
    );
    let started =
        rpc.ok("run", json!({"command": command, "background": true, "retained_cap": 256 * 1024}));
    let id = started["id"].as_str().unwrap().to_owned();
    let _group = KillGroup(started["pid"].as_i64().unwrap() as i32);
    let mut expected = numbered("", 300_000);
    let first = expected.len();
    expected.extend(numbered("b-", 20000));
    eventually(Duration::from_secs(30), "the first part", || {
        let v = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
        (v["total_bytes"] == first).then_some(())
    });
    std::fs::remove_file(&fill).unwrap();
    std::fs::write(&flag, b"").unwrap();
    let view = eventually(Duration::from_secs(30), "the second part on disk", || {
        let v = settled(&mut rpc, &id);
        (v["total_bytes"] == expected.len()).then_some(v)
    });
    let gaps = gaps_of(&view);
    assert_eq!(gaps.len(), 1, "{view}");
    drop(rpc);
    daemon.sigkill();
    let daemon = DaemonProc::start_at(&home, &[]).expect("the next daemon starts");
    let mut rpc = daemon.client();
    let after = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 64}));
    assert_eq!(gaps_of(&after), gaps, "{after}");
    assert_eq!(after["total_bytes"].as_u64(), Some(expected.len() as u64), "{after}");
    assert!(after["output"].as_str().unwrap().ends_with("b-20000\n"), "{after}");
    let (raw, jumps) = read_raw_across(&mut rpc, &id);
    let kept = without(&expected, &gaps);
    assert!(raw == kept, "{} bytes read, {} kept", raw.len(), kept.len());
    assert_eq!(jumps, gaps);
    let found = rpc.ok("grep", json!({"id": id, "pattern": "^b-20000$"}));
    assert_eq!(found["lines"][0]["line_number"].as_u64(), Some(320_000), "{found}");
}
