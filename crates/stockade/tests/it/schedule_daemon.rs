//! Scheduled runs through the real daemon binary: overlapping ticks are skipped and
//! counted, never queued; a run orphaned by a SIGKILLed daemon is recovered and blocks no tick;
//! a crash between "record persisted" and "schedule advanced" neither loses nor doubles a tick;
//! a thousand fires leave memory and the registry bounded by the history limit.
//!
//! Every test cleans up what it started even when it fails: the daemons are stopped (shutdown,
//! then SIGKILL by pid), and every process carrying the test's own environment marker or one of
//! its daemons' session markers is SIGKILLed by pid.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use stockade_testkit::procs::{kill_marked, marked_processes, pid_alive};
use stockade_testkit::{DaemonProc, Rpc, eventually};

/// One `stockade daemon run` on a shared home, with extra environment.
fn start_daemon(home: &Path, env: &[(&str, &str)]) -> DaemonProc {
    DaemonProc::start_env(home, &[], env)
        .unwrap_or_else(|(stderr, status)| panic!("the daemon did not start ({status}): {stderr}"))
}

/// A temporary home and this test's environment marker; on drop, every process carrying the
/// marker is SIGKILLed by pid (daemons are dropped before it, as they are declared after it).
struct MarkedHome {
    tmp: tempfile::TempDir,
    marker: String,
}

impl MarkedHome {
    fn new(test: &str) -> MarkedHome {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        MarkedHome {
            tmp: tempfile::tempdir().unwrap(),
            marker: format!("{test}-{}-{nanos}", std::process::id()),
        }
    }
    fn path(&self) -> PathBuf {
        self.tmp.path().join("home")
    }
    /// `KEY=VALUE` as it appears in /proc/<pid>/environ of this test's runs.
    fn needle(&self) -> String {
        format!("SCHEDULE_TEST={}", self.marker)
    }
}

impl Drop for MarkedHome {
    fn drop(&mut self) {
        kill_marked(&self.needle());
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn schedule(rpc: &mut Rpc, name: &str) -> Value {
    let list = rpc.ok("schedule.list", json!({}));
    list["schedules"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap().clone()
}

/// The sessions the daemon lists with this source.
fn sessions_of(rpc: &mut Rpc, source: &str) -> Vec<Value> {
    let list = rpc.ok("list", json!({}));
    list["sessions"].as_array().unwrap().iter().filter(|s| s["source"] == source).cloned().collect()
}

#[test]
fn overlapping_ticks_are_skipped_never_queued() {
    let home = MarkedHome::new("overlap");
    let d = start_daemon(&home.path(), &[]);
    let mut rpc = d.client();
    rpc.ok(
        "schedule.add",
        json!({"name": "slow", "every": "1s", "run": {"command": "sleep 3", "env": {"SCHEDULE_TEST": home.marker}}}),
    );
    // Sample often for ~10 s: never two active runs of the source at once.
    let start = Instant::now();
    let mut max_active = 0;
    let mut seen = BTreeSet::new();
    while start.elapsed() < Duration::from_millis(10_200) {
        let runs = sessions_of(&mut rpc, "schedule:slow");
        let active = runs.iter().filter(|s| s["state"] == "running").count();
        max_active = max_active.max(active);
        seen.extend(runs.iter().map(|s| s["id"].as_str().unwrap().to_owned()));
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = schedule(&mut rpc, "slow");
    let fires = s["fires"].as_u64().unwrap();
    let skipped = s["skipped_overlap"].as_u64().unwrap();
    assert_eq!(max_active, 1, "one active run at a time");
    // Ticks at 1..=10 s: a run spans three ticks, so ~3 fire and ~7 are skipped.
    assert!((2..=4).contains(&fires), "fires {fires}, skipped {skipped}");
    assert!((5..=9).contains(&skipped), "fires {fires}, skipped {skipped}");
    assert!((8..=11).contains(&(fires + skipped)), "fires {fires}, skipped {skipped}");
    assert_eq!(seen.len() as u64, fires, "every fire is a session, nothing more: {seen:?}");
    // Nothing was queued: after removing the schedule, no new run appears.
    rpc.ok("schedule.remove", json!({"name": "slow"}));
    let before = sessions_of(&mut rpc, "schedule:slow").len();
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(sessions_of(&mut rpc, "schedule:slow").len(), before);
    // The runs are ordinary sessions: kill works on the active one.
    if let Some(active) = s["active_session"].as_str() {
        let k = rpc.ok("kill", json!({"id": active}));
        assert_eq!(k["report"]["terminated"], true);
    }
}

#[test]
fn a_run_orphaned_by_a_killed_daemon_is_failed_and_the_next_tick_starts_fresh() {
    let home = MarkedHome::new("orphan");
    let mut first = start_daemon(&home.path(), &[]);
    let mut rpc = first.client();
    rpc.ok(
        "schedule.add",
        json!({"name": "long", "every": "1s", "run": {"command": "sleep 1000", "env": {"SCHEDULE_TEST": home.marker}}}),
    );
    let orphan = eventually(Duration::from_secs(15), "the first run", || {
        sessions_of(&mut rpc, "schedule:long").into_iter().find(|s| s["state"] == "running")
    });
    let orphan_id = orphan["id"].as_str().unwrap().to_owned();
    let pids = eventually(Duration::from_secs(10), "the run's processes", || {
        let p = marked_processes(&home.needle());
        (!p.is_empty()).then_some(p)
    });
    drop(rpc);
    first.sigkill();
    assert!(pids.iter().any(|p| pid_alive(*p)), "the run outlived its daemon");

    let second = start_daemon(&home.path(), &[]);
    let mut rpc = second.client();
    // Recovery ran before the daemon answered: the orphan is failed and its processes gone.
    let runs = sessions_of(&mut rpc, "schedule:long");
    let old = runs.iter().find(|s| s["id"] == orphan_id.as_str()).expect("the orphan is listed");
    assert_eq!(old["state"], "failed", "{old}");
    assert!(old["reason"].as_str().unwrap().starts_with("owner daemon died"), "{old}");
    for p in &pids {
        assert!(!pid_alive(*p), "pid {p} of the orphaned run is gone");
    }
    // And it blocks nothing: a fresh run starts (at once: the missed tick's one catch-up).
    let fresh = eventually(Duration::from_secs(10), "a fresh run", || {
        sessions_of(&mut rpc, "schedule:long")
            .into_iter()
            .find(|s| s["state"] == "running" && s["id"] != orphan_id.as_str())
    });
    assert_ne!(fresh["id"], orphan_id.as_str());
    let s = schedule(&mut rpc, "long");
    assert_eq!(s["active_session"], fresh["id"]);
    assert_eq!(s["missed"], 0, "catch-up once fires the missed tick: {s}");
    let active =
        sessions_of(&mut rpc, "schedule:long").iter().filter(|s| s["state"] == "running").count();
    assert_eq!(active, 1);
}

#[test]
fn a_crash_between_claim_and_advance_neither_loses_nor_doubles_a_tick() {
    const EVERY_MS: u64 = 2_000;
    let home = MarkedHome::new("claim");
    let mut first = start_daemon(&home.path(), &[("STOCKADE_TEST_CRASH_AFTER_CLAIM", "1")]);
    let mut rpc = first.client();
    let added = rpc.ok(
        "schedule.add",
        json!({"name": "tick", "every": "2s", "run": {"command": "sleep 1000", "env": {"SCHEDULE_TEST": home.marker}}}),
    );
    let tick = added["next_fire_ms"].as_u64().unwrap();
    // The daemon aborts right after the first fire's record is on disk.
    assert!(first.wait_exit(Duration::from_secs(15)).is_some(), "the crash hook fired");
    assert!(first.stderr.lock().unwrap().contains("aborting after the claim"));
    drop(rpc);
    // The schedule on disk was not advanced: it still points at the tick that fired.
    let stored: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("schedules.json")).unwrap())
            .unwrap();
    assert_eq!(stored["schedules"][0]["next_fire_ms"], tick);
    assert_eq!(stored["schedules"][0]["fires"], 0);

    let second = start_daemon(&home.path(), &[]);
    let mut rpc = second.client();
    let in_tick = |runs: &[Value]| -> Vec<Value> {
        runs.iter()
            .filter(|s| {
                let t = s["started_at_ms"].as_u64().unwrap();
                t >= tick && t < tick + EVERY_MS
            })
            .cloned()
            .collect()
    };
    let s = schedule(&mut rpc, "tick");
    let runs = sessions_of(&mut rpc, "schedule:tick");
    let claimed = in_tick(&runs);
    assert_eq!(claimed.len(), 1, "exactly one run for the crashed tick: {runs:?}");
    assert_eq!(s["fires"], 1, "the claimed tick counts as fired: {s}");
    assert_eq!(s["last_session"], claimed[0]["id"]);
    let next = s["next_fire_ms"].as_u64().unwrap();
    assert!(next > tick && (next - tick).is_multiple_of(EVERY_MS), "advanced on its phase: {s}");
    assert_eq!(claimed[0]["state"], "failed", "recovered: its daemon died");
    // The schedule goes on: the next tick starts a new run, and the crashed tick still has one.
    let fresh = eventually(Duration::from_secs(10), "the next tick's run", || {
        sessions_of(&mut rpc, "schedule:tick").into_iter().find(|s| s["state"] == "running")
    });
    assert!(fresh["started_at_ms"].as_u64().unwrap() >= next);
    let runs = sessions_of(&mut rpc, "schedule:tick");
    assert_eq!(in_tick(&runs).len(), 1, "{runs:?}");
    assert_eq!(schedule(&mut rpc, "tick")["fires"], 2);
    assert!(now_ms() >= next);
}

/// The session directories under `spool/*/` of a home.
fn session_dirs(home: &Path) -> usize {
    let mut n = 0;
    for inst in std::fs::read_dir(home.join("spool")).unwrap().flatten() {
        if let Ok(entries) = std::fs::read_dir(inst.path()) {
            n += entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("sh-"))
                .count();
        }
    }
    n
}

#[test]
fn a_thousand_fires_leave_memory_and_the_registry_bounded() {
    const FIRES: u64 = 1_000;
    const KEEP: u64 = 10;
    let home = MarkedHome::new("thousand");
    let d = start_daemon(&home.path(), &[("STOCKADE_TEST_MIN_SCHEDULE_INTERVAL_MS", "1")]);
    let mut rpc = d.client();
    rpc.ok(
        "schedule.add",
        json!({"name": "fast", "every": "2ms", "keep_runs": KEEP, "run": {"command": "true", "env": {"SCHEDULE_TEST": home.marker}}}),
    );
    let fires = |rpc: &mut Rpc| schedule(rpc, "fast")["fires"].as_u64().unwrap();
    eventually(Duration::from_secs(60), "200 fires", || (fires(&mut rpc) >= 200).then_some(()));
    let warm = rpc.ok("stats", json!({}))["rss_bytes"].as_u64().unwrap();
    let mut peak_dirs = 0;
    eventually(Duration::from_secs(90), "1,000 fires", || {
        peak_dirs = peak_dirs.max(session_dirs(&home.path()));
        (fires(&mut rpc) >= FIRES).then_some(())
    });
    rpc.ok("schedule.pause", json!({"name": "fast"}));
    let stats = rpc.ok("stats", json!({}));
    let rss = stats["rss_bytes"].as_u64().unwrap();
    let sessions: u64 =
        stats["sessions"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    // The history limit bounds the registry (kept finished runs, plus one active and one
    // finished but not yet pruned), in memory and on disk.
    assert!(sessions <= KEEP + 2, "{stats}");
    assert!(peak_dirs as u64 <= KEEP + 2, "{peak_dirs} session directories at most");
    assert!(session_dirs(&home.path()) as u64 <= KEEP + 2);
    let runs = rpc.ok("schedule.runs", json!({"name": "fast"}));
    assert!(runs["runs"].as_array().unwrap().len() as u64 <= KEEP + 1, "{runs}");
    // Memory does not grow with fires: 800 more fires cost less than 16 MiB of RSS.
    assert!(rss < warm + 16 * 1024 * 1024, "rss {rss} after warm-up {warm}");
}

#[test]
fn after_downtime_at_most_one_catch_up_fire_never_a_burst() {
    let home = MarkedHome::new("catchup");
    let first = start_daemon(&home.path(), &[]);
    let mut rpc = first.client();
    for (name, catch_up) in [("once", "once"), ("skip", "skip")] {
        rpc.ok(
            "schedule.add",
            json!({"name": name, "every": "1s", "catch_up": catch_up, "run": {"command": "true", "env": {"SCHEDULE_TEST": home.marker}}}),
        );
    }
    eventually(Duration::from_secs(10), "a first fire of each", || {
        (schedule(&mut rpc, "once")["fires"].as_u64().unwrap() >= 1
            && schedule(&mut rpc, "skip")["fires"].as_u64().unwrap() >= 1)
            .then_some(())
    });
    drop(rpc);
    drop(first); // a clean stop
    let before: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("schedules.json")).unwrap())
            .unwrap();
    let fires_before = |name: &str| {
        before["schedules"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()["fires"]
            .as_u64()
            .unwrap()
    };
    // Down for four ticks or more.
    std::thread::sleep(Duration::from_millis(4_500));
    let restarted = Instant::now();
    let second = start_daemon(&home.path(), &[]);
    let mut rpc = second.client();
    let once = eventually(Duration::from_secs(5), "the catch-up fire", || {
        let s = schedule(&mut rpc, "once");
        (s["fires"].as_u64().unwrap() > fires_before("once")).then_some(s)
    });
    let skip = schedule(&mut rpc, "skip");
    // Ticks that fell since the restart (each may have fired once, on the phase).
    let since = restarted.elapsed().as_millis() as u64 / 1_000 + 1;
    let once_new = once["fires"].as_u64().unwrap() - fires_before("once");
    let skip_new = skip["fires"].as_u64().unwrap() - fires_before("skip");
    assert!(once_new >= 1 && once_new <= 1 + since, "one catch-up, not a burst: {once}");
    assert!(once["missed"].as_u64().unwrap() >= 2, "the rest are counted as missed: {once}");
    assert!(skip_new <= since, "no catch-up with skip: {skip}");
    assert!(skip["missed"].as_u64().unwrap() >= 3, "{skip}");
}

#[test]
fn the_cli_refuses_bad_schedules_with_one_sentence() {
    let home = MarkedHome::new("cli");
    let _d = start_daemon(&home.path(), &[]);
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
            .arg("--home")
            .arg(home.path())
            .arg("--no-autostart")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let env = format!("SCHEDULE_TEST={}", home.marker);
    let (code, out, err) =
        cli(&["schedule", "add", "ok", "--every", "1h", "--env", &env, "--", "echo", "hi"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Added ok: every 1h"), "{out}");
    for (args, want) in [
        (vec!["schedule", "add", "ok", "--every", "1h", "true"], "already exists"),
        (vec!["schedule", "add", "b", "--every", "10ms", "true"], "shorter than the minimum"),
        (vec!["schedule", "add", "b", "--every", "often", "true"], "not a duration"),
        (vec!["schedule", "add", "b", "--cron", "99 * * * *", "true"], "not valid"),
        (vec!["schedule", "add", "b", "--every", "1s", ""], "command is empty"),
        (vec!["schedule", "add", "b c", "--every", "1s", "true"], "name"),
        (vec!["schedule", "rm", "nope"], "no schedule \"nope\""),
    ] {
        let (code, _, err) = cli(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
    }
    let (_, out, _) = cli(&["schedule", "pause", "ok"]);
    assert!(out.contains("paused"), "{out}");
    let (_, out, _) = cli(&["schedule", "list", "--json"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["schedules"][0]["paused"], true);
    assert_eq!(list["schedules"][0]["next_fire_ms"], Value::Null);
    let (code, out, _) = cli(&["schedule", "rm", "ok"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("Removed ok"), "{out}");
    assert!(cli(&["schedule", "list"]).1.contains("no schedules"));
}
