//! Session directories made ahead of time (`crates/stockade-engine/src/slots.rs`), with daemons
//! started as users start them (`stockade daemon start`, auto-start by `ps`): a run takes the
//! oldest ready directory, and its spool, index and records are the very files made ahead of
//! time (same inodes: nothing was allocated while the client waited); a finished session's
//! directory holds its files, the old start record as the one spare, and no temporary; the
//! daemon keeps two ready; `cleanup` turns the forgotten directories into ready ones (same
//! inodes, emptied); `daemon stop` removes them, and the ones a SIGKILLed daemon left are
//! removed by the next daemon's sweep while its sessions stay listed. A sandboxed run's private
//! temporary directory is one made ahead of time too.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::{Home, Rpc, dir_names as names, eventually};

use crate::restart::sigkill;

const SLOT_PREFIX: &str = ".slot-";

/// Ready slots of `instance`, by number.
fn slots(home: &Home, instance: &str) -> BTreeMap<u64, PathBuf> {
    let dir = home.path().join("spool").join(instance);
    std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_str()?.strip_prefix(SLOT_PREFIX)?.parse().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every `.slot-*` under the state directory.
fn all_slots(home: &Home) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for inst in std::fs::read_dir(home.path().join("spool")).unwrap().flatten() {
        for e in std::fs::read_dir(inst.path()).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(SLOT_PREFIX) {
                found.push(e.path());
            }
        }
    }
    found
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).ino()
}

fn instance(home: &Home) -> String {
    let pid = home.daemon_pid().unwrap();
    let dirs = std::fs::read_dir(home.path().join("spool")).unwrap();
    dirs.flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with(&format!("daemon-{pid}-")))
        .unwrap_or_else(|| panic!("no instance folder of daemon {pid}"))
}

fn two_ready(home: &Home, instance: &str) -> BTreeMap<u64, PathBuf> {
    eventually(Duration::from_secs(10), "two prepared directories", || {
        let s = slots(home, instance);
        (s.len() == 2).then_some(s)
    })
}

/// One run through `rpc`, taking the oldest of the two ready directories: its files are the
/// ones made ahead of time. Returns its id.
fn run_in_prepared(home: &Home, inst: &str, rpc: &mut Rpc, i: usize) -> String {
    let ready = two_ready(home, inst);
    let (_, oldest) = ready.iter().next().unwrap();
    let made: Vec<u64> = [".spare-start", ".spare-spec", ".spare-log", ".spare-end"]
        .iter()
        .chain(&["output.log", "streams.idx"])
        .map(|f| ino(&oldest.join(f)))
        .collect();
    let r = rpc.ok("run", json!({"command": format!("echo run-{i}")}));
    assert_eq!(r["state"], "exited", "{r}");
    let id = r["id"].as_str().unwrap().to_owned();
    let dir = home.path().join("spool").join(inst).join(&id);
    assert!(!oldest.exists(), "{id} did not take the oldest ready directory");
    // `log.json` of a log without gaps is written right after the end is published.
    let all = [".spare-end", "log.json", "output.log", "session.json", "spec.json", "streams.idx"];
    eventually(Duration::from_secs(10), "log.json written", || (names(&dir) == all).then_some(()));
    // The records are the spares; the end record was exchanged with the start record, which
    // stays as the spare. The spool and index are the files made ahead of time.
    let now: Vec<u64> =
        ["session.json", "spec.json", "log.json", ".spare-end", "output.log", "streams.idx"]
            .iter()
            .map(|f| ino(&dir.join(f)))
            .collect();
    assert_eq!(now, [made[3], made[1], made[2], made[0], made[4], made[5]], "{id}");
    assert_eq!(std::fs::read_to_string(dir.join("output.log")).unwrap(), format!("run-{i}\n"));
    id
}

#[test]
fn runs_take_prepared_directories_and_none_outlives_its_daemon() {
    let (home, mut markers, _) = crate::restart::started_home();
    let inst = instance(&home);
    let mut rpc = Rpc::connect(&home.path().join("stockade.sock"));
    let mut spools = Vec::new();
    for i in 0..5 {
        let id = run_in_prepared(&home, &inst, &mut rpc, i);
        spools.push(ino(&home.path().join("spool").join(&inst).join(&id).join("output.log")));
    }
    // Refilled as they were taken: two ready, numbered after the five taken.
    let ready = two_ready(&home, &inst);
    assert!(ready.keys().all(|n| *n >= 5), "{ready:?}");

    // `cleanup` forgets the five; their directories become ready ones, emptied, with the same
    // files (no inode freed).
    home.ok(&["cleanup"]);
    let ready = slots(&home, &inst);
    assert_eq!(ready.len(), 2 + spools.len(), "{ready:?}");
    assert!(crate::restart::session_dirs(home.path()).is_empty());
    let mut reused = Vec::new();
    for slot in ready.values() {
        assert_eq!(
            names(slot),
            [
                ".spare-end",
                ".spare-log",
                ".spare-spec",
                ".spare-start",
                "output.log",
                "streams.idx"
            ]
        );
        let spool = slot.join("output.log");
        assert_eq!(std::fs::metadata(&spool).unwrap().len(), 0, "{}", spool.display());
        reused.push(ino(&spool));
    }
    for spool in &spools {
        assert!(reused.contains(spool), "spool inode {spool} was not used again: {reused:?}");
    }
    let mut ids = Vec::new();
    for i in 5..7 {
        let r = rpc.ok("run", json!({"command": format!("echo run-{i}")}));
        ids.push(r["id"].as_str().unwrap().to_owned());
    }

    // A clean stop leaves none.
    home.ok(&["daemon", "stop"]);
    assert!(all_slots(&home).is_empty(), "{:?}", all_slots(&home));

    // A SIGKILLed daemon leaves its ready ones; the next daemon's sweep removes them and keeps
    // the sessions.
    let list = ps(&home);
    let next = home.daemon_pid().unwrap();
    markers.daemon(next);
    assert_eq!(list.len(), ids.len(), "{list:?}");
    let killed_inst = instance(&home);
    two_ready(&home, &killed_inst);
    sigkill(next);
    let list = ps(&home);
    markers.daemon(home.daemon_pid().unwrap());
    eventually(Duration::from_secs(10), "the dead daemon's prepared directories removed", || {
        slots(&home, &killed_inst).is_empty().then_some(())
    });
    let listed: Vec<&str> = list.iter().filter_map(|s| s["id"].as_str()).collect();
    for id in &ids {
        assert!(listed.contains(&id.as_str()), "{id} not listed: {list:?}");
    }
}

/// Ready private temporary directories of `instance`, by number.
fn tmps(home: &Home, instance: &str) -> BTreeMap<u64, PathBuf> {
    let dir = home.path().join("spool").join(instance);
    std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_str()?.strip_prefix(".slot-tmp-")?.parse().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn sandboxed_runs_take_a_prepared_private_temporary_directory() {
    let (home, _markers, _) = crate::restart::started_home();
    let inst = instance(&home);
    let work = tempfile::tempdir().unwrap();
    let mut rpc = Rpc::connect(&home.path().join("stockade.sock"));
    let mut run = |i: usize| {
        let command = format!("echo run-{i} > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"");
        let sandbox = json!({"mode": "workspace-write", "network": "none"});
        let r = rpc.ok("run", json!({"command": command, "cwd": work.path(), "sandbox": sandbox}));
        assert_eq!(r["state"], "exited", "{r}");
        let dir = home.path().join("spool").join(&inst).join(r["id"].as_str().unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("output.log")).unwrap(), format!("run-{i}\n"));
        dir
    };
    // An unsandboxed daemon makes none; the first sandboxed run makes its own, then two are
    // kept ready.
    two_ready(&home, &inst);
    assert!(tmps(&home, &inst).is_empty());
    run(0);
    for i in 1..4 {
        let ready =
            eventually(Duration::from_secs(10), "two prepared temporary directories", || {
                let t = tmps(&home, &inst);
                (t.len() == 2).then_some(t)
            });
        let (_, oldest) = ready.iter().next().unwrap();
        let made = ino(oldest);
        let dir = run(i);
        assert!(!oldest.exists(), "run {i} did not take the oldest ready temporary directory");
        assert_eq!(ino(&dir.join("tmp")), made, "run {i}");
        assert_eq!(names(&dir.join("tmp")), ["f"]);
    }
    // A clean stop leaves none.
    home.ok(&["daemon", "stop"]);
    assert!(all_slots(&home).is_empty(), "{:?}", all_slots(&home));
}

/// `ps` as a list.
fn ps(home: &Home) -> Vec<Value> {
    home.json(&["ps"])["sessions"].as_array().unwrap().clone()
}

#[test]
fn a_session_forgotten_right_after_its_answer_leaves_no_directory() {
    let (home, _markers, _) = crate::restart::started_home();
    let mut rpc = Rpc::connect(&home.path().join("stockade.sock"));
    // The last steps of an end (`log.json`, the cgroup's removal) come after the answer: a
    // `forget` right away waits for them instead of deleting the directory under them.
    for i in 0..300 {
        let r = rpc.ok("run", json!({"command": format!("echo {i}")}));
        assert_eq!(r["state"], "exited", "{r}");
        let f = rpc.ok("forget", json!({"id": r["id"]}));
        assert_eq!(f["removed_bytes"], format!("{i}\n").len(), "{f}");
    }
    let left = crate::restart::session_dirs(home.path());
    assert!(left.is_empty(), "directories of forgotten sessions left: {left:?}");
    let ready = all_slots(&home).len();
    assert!((1..=64).contains(&ready), "{ready} directories ready");
    home.ok(&["daemon", "stop"]);
}
