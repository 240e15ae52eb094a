//! A full disk through the real daemon: the state directory on an 8 MiB tmpfs, filled by one
//! session mid-output. The daemon stays up, the session reports the drop exactly (gap reason
//! `disk full`, dropped = printed − spooled − the newest bytes waiting in memory), another
//! session is unaffected, and nothing that reached the disk is lost. Needs root (to mount the
//! tmpfs); skipped with a reason otherwise.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::{DaemonProc, Rpc, eventually};

/// Private, as a home must be (a tmpfs is `1777` unless told otherwise, which a home may not be).
const TMPFS_SIZE: &str = "size=8m,mode=0700";
const FLOOD_BYTES: u64 = 16 * 1024 * 1024;
const CHUNK: u64 = 1024 * 1024;

/// A tmpfs mounted for the test; unmounted (lazily, so a busy mount never blocks) on drop.
pub(crate) struct Tmpfs {
    pub(crate) dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount() -> Result<Tmpfs, String> {
        Tmpfs::mount_with(TMPFS_SIZE)
    }

    /// A tmpfs mounted with `options` (`size=16m,mode=0700`).
    pub(crate) fn mount_with(options: &str) -> Result<Tmpfs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: cannot mount a tmpfs".into());
        }
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let dir = tmp.path().join("home");
        std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(&dir)
            .status()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !status.success() {
            return Err(format!("mount -t tmpfs failed: {status}"));
        }
        Ok(Tmpfs { dir, _tmp: tmp })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let Ok(path) = CString::new(self.dir.as_os_str().as_bytes()) else { return };
        // SAFETY: umount2 on the mount point this guard created, with a valid C string.
        unsafe {
            libc::umount2(path.as_ptr(), libc::MNT_DETACH);
        }
    }
}

fn read_all(rpc: &mut Rpc, id: &str) -> Vec<u8> {
    rpc.read_all_raw(id, CHUNK).0
}

fn session(rpc: &mut Rpc, id: &str) -> Value {
    let list = rpc.ok("list", json!({}));
    list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap().clone()
}

#[test]
fn a_full_disk_is_reported_exactly_and_hurts_no_other_session() {
    let tmpfs = match Tmpfs::mount() {
        Ok(t) => t,
        Err(why) => {
            stockade_testkit::cannot_run(&why);
            return;
        }
    };
    let daemon = DaemonProc::start_at(&tmpfs.dir, &[]).expect("the daemon starts on the tmpfs");
    let mut rpc = daemon.client();
    // A quiet session whose output is on disk before the flood.
    let quiet = rpc.ok("run", json!({"command": "seq 1 2000; sleep 30", "background": true}));
    let quiet_id = quiet["id"].as_str().unwrap().to_owned();
    let expected: Vec<u8> = (1..=2000).flat_map(|n| format!("{n}\n").into_bytes()).collect();
    eventually(Duration::from_secs(10), "the quiet session's output", || {
        (session(&mut rpc, &quiet_id)["total_bytes"] == expected.len()).then_some(())
    });

    // The flood prints twice what the filesystem holds.
    let flood = rpc.ok(
        "run",
        json!({"command": format!("yes X | head -c {FLOOD_BYTES}"), "background": true}),
    );
    let flood_id = flood["id"].as_str().unwrap().to_owned();
    let s = eventually(Duration::from_secs(30), "the flood to end", || {
        let s = session(&mut rpc, &flood_id);
        (s["state"] != "running").then_some(s)
    });
    // A full disk is the machine's condition, not the command's: the kill policy (for the disk
    // cap) does not end it; it prints everything and exits, its excess dropped in one gap.
    assert_eq!(s["state"], "exited", "{s}");
    assert_eq!(s["total_bytes"].as_u64().unwrap(), FLOOD_BYTES, "{s}");
    let spool = Path::new(s["spool_path"].as_str().unwrap());
    let on_disk = std::fs::metadata(spool).unwrap().len();
    let printed = s["total_bytes"].as_u64().unwrap();
    assert!(on_disk > 0 && on_disk < FLOOD_BYTES, "{on_disk}");
    // The newest bytes (up to the retained cap, 1 MiB) wait in memory for space; the rest of
    // what the disk could not take is one gap between.
    let dropped = s["dropped_bytes"].as_u64().unwrap();
    let waiting = printed - on_disk - dropped;
    assert!(waiting > 0 && waiting <= 1 << 20, "{s}");
    let read = rpc.ok("read", json!({"id": flood_id, "mode": "tail"}));
    let gaps = read["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{read}");
    assert_eq!(gaps[0]["reason"], "disk full");
    assert_eq!(gaps[0]["start"], on_disk);
    assert_eq!(gaps[0]["end"], printed - waiting);
    assert!(read["output"].as_str().unwrap().ends_with("X\nX\n"), "the newest output: {read}");
    eprintln!("flood: printed {printed}, spooled {on_disk}, dropped {}", printed - on_disk);

    // Nothing that reached the disk is lost: the spool reads back whole and correct.
    let bytes = read_all(&mut rpc, &flood_id);
    assert_eq!(bytes.len() as u64, on_disk);
    for (i, &b) in bytes.iter().enumerate() {
        assert_eq!(b, if i % 2 == 0 { b'X' } else { b'\n' }, "byte {i}");
    }
    // The daemon is alive and the other session is untouched.
    assert!(rpc.call("status", json!({})).is_ok());
    let q = session(&mut rpc, &quiet_id);
    assert_eq!(q["state"], "running", "{q}");
    assert_eq!(q["dropped_bytes"], 0, "{q}");
    assert_eq!(read_all(&mut rpc, &quiet_id), expected);
    let killed = rpc.ok("kill", json!({"id": quiet_id}));
    assert_eq!(killed["report"]["terminated"], true);
    drop(rpc);
    drop(daemon);
    drop(tmpfs);
}
