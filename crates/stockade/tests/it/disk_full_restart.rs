//! A full disk, then a restart (tmpfs, root only): a command run while the disk is full still
//! shows its output; once space is freed, the records the full disk held back are written, so
//! after `daemon stop` and the next start the flooded session is listed with its `disk full`
//! gap (not as an owner that died) and its spool reads back byte-exact to its on-disk length.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::{Rpc, eventually, stockade_bin};

use crate::crash_disk_full::Tmpfs;
use crate::restart::Markers;

/// `stockade ARGS` on `home`, as a user runs it (auto-start on), logging at `level`.
fn stockade_logging(home: &Path, args: &[&str], level: &str) -> Output {
    Command::new(stockade_bin())
        .args(args)
        .env("STOCKADE_HOME", home)
        .env_remove("STOCKADE_NO_AUTOSTART")
        .env("STOCKADE_LOG", level)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok_logging(home: &Path, args: &[&str], level: &str) -> String {
    let out = stockade_logging(home, args, level);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(home: &Path, args: &[&str]) -> String {
    ok_logging(home, args, "error")
}

/// A state directory on a fresh 8 MiB tmpfs with the markers that clean up after it; `None`
/// (said why) where no tmpfs can be mounted.
fn tmpfs_home() -> Option<(Tmpfs, std::path::PathBuf, Markers)> {
    let tmpfs = match Tmpfs::mount() {
        Ok(t) => t,
        Err(why) => {
            stockade_testkit::cannot_run(&why);
            return None;
        }
    };
    let home = tmpfs.dir.join("state");
    let mut markers = Markers::default();
    markers.home(&home);
    Some((tmpfs, home, markers))
}

fn pid(home: &Path) -> u32 {
    std::fs::read_to_string(home.join("daemon.lock")).unwrap().trim().parse().unwrap()
}

/// The session `id` once it has ended.
fn ended(rpc: &mut Rpc, id: &str) -> Value {
    eventually(Duration::from_secs(30), "the session to end", || {
        let list = rpc.ok("list", json!({}));
        let s = list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == id)?.clone();
        (s["state"] != "running").then_some(s)
    })
}

#[test]
fn after_a_full_disk_and_a_restart_nothing_is_lost_or_mislabelled() {
    let Some((tmpfs, home, mut markers)) = tmpfs_home() else { return };
    ok(&home, &["daemon", "start"]);
    markers.daemon(pid(&home));
    // Leave about 1 MiB of the 8 MiB free.
    let fill = tmpfs.dir.join("fill");
    let mut f = std::fs::File::create(&fill).unwrap();
    let chunk = vec![0u8; 256 * 1024];
    for _ in 0..26 {
        if f.write_all(&chunk).is_err() {
            break;
        }
    }
    drop(f);
    let mut rpc = Rpc::connect(&home.join("stockade.sock"));
    let flood = rpc.ok("run", json!({"command": "yes X | head -c 4194304", "background": true}));
    let flood_id = flood["id"].as_str().unwrap().to_owned();
    let s = ended(&mut rpc, &flood_id);
    let dropped = s["dropped_bytes"].as_u64().unwrap();
    assert!(dropped > 0, "the disk filled up: {s}");

    // The disk is full now: a command's output still reaches the reader.
    let full = rpc.ok("run", json!({"command": "echo while-full", "background": true}));
    let full_id = full["id"].as_str().unwrap().to_owned();
    ended(&mut rpc, &full_id);
    let view = rpc.ok("read", json!({"id": full_id, "mode": "tail"}));
    assert!(view["output"].as_str().unwrap().contains("while-full"), "{view}");

    // Free the space, stop (held-back records are written), start again.
    std::fs::remove_file(&fill).unwrap();
    drop(rpc);
    ok(&home, &["daemon", "stop"]);
    let list: Value = serde_json::from_str(&ok(&home, &["ps", "--json"])).unwrap();
    markers.daemon(pid(&home));
    let s = list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == flood_id).unwrap();
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(!reason.contains("owner daemon died"), "{s}");
    assert_eq!(s["state"], "exited", "a full disk does not kill: {s}");
    let mut rpc = Rpc::connect(&home.join("stockade.sock"));
    let read = rpc.ok("read", json!({"id": flood_id, "mode": "tail"}));
    assert_eq!(read["gaps"][0]["reason"], "disk full", "{read}");
    let spool = Path::new(s["spool_path"].as_str().unwrap());
    let on_disk = std::fs::metadata(spool).unwrap().len();
    let (bytes, _) = rpc.read_all_raw(&flood_id, 1 << 20);
    assert_eq!(bytes.len() as u64, on_disk);
    assert!(bytes.iter().enumerate().all(|(i, &b)| b == if i % 2 == 0 { b'X' } else { b'\n' }));
    let s = list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == full_id).unwrap();
    assert_eq!(s["state"], "exited", "listed with its true end: {s}");
    drop(rpc);
    ok(&home, &["daemon", "stop"]);
}

/// The disk under `daemon.log` fills while sessions wait to print (so every warning the daemon
/// logs about their spools fails to be written), then space comes back. Logging must drop what
/// it cannot write rather than panic in whichever thread logged (the one drain thread reads every
/// session): every session of the full disk ends, and a command run after the space is freed is
/// captured and ends, each within 30 s.
#[test]
fn a_full_disk_under_the_daemon_log_stops_no_capture() {
    let Some((tmpfs, home, mut markers)) = tmpfs_home() else { return };
    // Debug logging, so the daemon writes to daemon.log on every run, even with a full disk.
    ok_logging(&home, &["daemon", "start"], "debug");
    markers.daemon(pid(&home));
    // Sessions that print only after the disk is full (2 s from now).
    let mut rpc = Rpc::connect(&home.join("stockade.sock"));
    let ids: Vec<String> = (0..10)
        .map(|_| {
            let started =
                rpc.ok("run", json!({"command": "sleep 2; seq 1 3000", "background": true}));
            started["id"].as_str().unwrap().to_owned()
        })
        .collect();
    // Fill every byte of the 8 MiB.
    let fill = tmpfs.dir.join("fill");
    let mut f = std::fs::File::create(&fill).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    drop(f);
    for id in &ids {
        ended(&mut rpc, id);
    }
    std::fs::remove_file(&fill).unwrap();
    let after =
        rpc.ok("run", json!({"command": "echo after-the-disk-was-freed", "background": true}));
    let after_id = after["id"].as_str().unwrap().to_owned();
    let s = ended(&mut rpc, &after_id);
    assert_eq!(s["state"], "exited", "{s}");
    let view = rpc.ok("read", json!({"id": after_id, "mode": "tail"}));
    assert!(view["output"].as_str().unwrap().contains("after-the-disk-was-freed"), "{view}");
    drop(rpc);
    ok(&home, &["daemon", "stop"]);
}
