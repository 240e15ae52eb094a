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
    // The newest bytes waited in memory and were written once space was freed: after the gap
    // (or gaps), each byte is the one printed at its offset.
    let (bytes, jumps) = read_raw_across(&mut rpc, &flood_id);
    assert_eq!(bytes.len() as u64, on_disk);
    let gaps: Vec<(u64, u64)> = read["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["start"].as_u64().unwrap(), g["end"].as_u64().unwrap()))
        .collect();
    assert_eq!(jumps, gaps, "{read}");
    let mut at = 0u64;
    let mut offsets = Vec::new();
    for &(s, e) in &gaps {
        offsets.extend(at..s);
        at = e;
    }
    offsets.extend(at..at + (bytes.len() - offsets.len()) as u64);
    assert!(bytes.iter().zip(&offsets).all(|(&b, &i)| b == if i % 2 == 0 { b'X' } else { b'\n' }));
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

/// Fills the tmpfs until about `free` bytes are left; returns the filler file.
pub(crate) fn fill_leaving(tmpfs: &Tmpfs, free: u64) -> std::path::PathBuf {
    let fill = tmpfs.dir.join("fill");
    let mut f = std::fs::File::create(&fill).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    // SAFETY: statvfs on a valid C string and a zeroed out-struct.
    let avail = || unsafe {
        let path = std::ffi::CString::new(tmpfs.dir.as_os_str().as_encoded_bytes()).unwrap();
        let mut st: libc::statvfs = std::mem::zeroed();
        libc::statvfs(path.as_ptr(), &mut st);
        st.f_bavail as u64 * st.f_frsize as u64
    };
    while avail() > free + chunk.len() as u64 && f.write_all(&chunk).is_ok() {}
    fill
}

/// Reads a session's whole spool raw, following the cursor across a gap; returns the bytes and
/// the log offsets of every jump.
pub(crate) fn read_raw_across(rpc: &mut Rpc, id: &str) -> (Vec<u8>, Vec<(u64, u64)>) {
    let (mut out, mut jumps, mut cursor) = (Vec::new(), Vec::new(), 0u64);
    loop {
        let r = rpc.ok(
            "read",
            json!({"id": id, "after": cursor, "raw": true, "max_bytes": 1 << 20, "mode": "delta"}),
        );
        let bytes = stockade_testkit::base64_decode(r["bytes_b64"].as_str().unwrap_or_default());
        let next = r["next_cursor"].as_u64().unwrap();
        let start = if bytes.is_empty() { next } else { r["start_cursor"].as_u64().unwrap() };
        if start > cursor {
            jumps.push((cursor, start));
        }
        out.extend_from_slice(&bytes);
        if next <= cursor {
            return (out, jumps);
        }
        cursor = next;
    }
}

/// A command prints past what a full disk holds, the space comes back, and it prints more. While
/// it runs, a read names the gap; once space is freed the spool takes output again, so after the
/// end the spool is exactly the log minus one named gap, a tail read and `grep` find the last
/// line, and `logs --raw` writes the kept bytes exactly and names the gap on stderr.
#[test]
fn a_full_disk_leaves_one_exact_gap_and_the_spool_resumes_when_space_returns() {
    let Some((tmpfs, home, mut markers)) = tmpfs_home() else { return };
    ok(&home, &["daemon", "start"]);
    markers.daemon(pid(&home));
    let fill = fill_leaving(&tmpfs, 1 << 20);
    let go = tempfile::tempdir().unwrap();
    let flag = go.path().join("go");
    let command = format!(
        "seq 1 500000; while [ ! -e {} ]; do sleep 0.1; done; seq 500001 520000; echo the-last-line",
        flag.display()
    );
    let mut rpc = Rpc::connect(&home.join("stockade.sock"));
    let started = rpc.ok("run", json!({"command": command, "background": true}));
    let id = started["id"].as_str().unwrap().to_owned();
    let first: Vec<u8> = (1..=500000).flat_map(|n| format!("{n}\n").into_bytes()).collect();
    let mut expected = first.clone();
    expected.extend((500001..=520000).flat_map(|n| format!("{n}\n").into_bytes()));
    expected.extend_from_slice(b"the-last-line\n");

    // While it runs, past the full disk: the gap is named, with where it starts.
    let view = eventually(Duration::from_secs(30), "the first part to be read", || {
        let v = rpc.ok("read", json!({"id": id, "mode": "tail"}));
        (v["total_bytes"] == first.len()).then_some(v)
    });
    let dropped = view["dropped_bytes"].as_u64().unwrap();
    assert!(dropped > 0, "the gap is counted while the command runs: {view}");
    assert_eq!(view["gaps"][0]["reason"], "disk full", "{view}");
    let gap_start = view["gaps"][0]["start"].as_u64().unwrap();
    assert!(gap_start > 0 && gap_start < 2 << 20, "{view}");
    assert!(view["output"].as_str().unwrap().ends_with("500000\n"), "the newest output: {view}");

    // A command that ends while the disk is still full: its newest bytes are kept in memory,
    // where a tail read and `grep` find them.
    let full =
        rpc.ok("run", json!({"command": "seq 1 200000; echo end-while-full", "background": true}));
    let full_id = full["id"].as_str().unwrap().to_owned();
    ended(&mut rpc, &full_id);
    let tail = rpc.ok("read", json!({"id": full_id, "mode": "tail", "max_bytes": 256}));
    assert!(tail["output"].as_str().unwrap().ends_with("200000\nend-while-full\n"), "{tail}");
    assert!(tail["dropped_bytes"].as_u64().unwrap() > 0, "{tail}");
    let found = ok(&home, &["grep", &full_id, "end-while-full"]);
    assert!(found.contains("end-while-full"), "grep finds the kept end: {found:?}");

    // Space returns; the command prints its second part and ends.
    std::fs::remove_file(&fill).unwrap();
    std::fs::write(&flag, b"").unwrap();
    let s = ended(&mut rpc, &id);
    assert_eq!(s["state"], "exited", "{s}");
    assert_eq!(s["total_bytes"].as_u64().unwrap(), expected.len() as u64, "{s}");
    let view = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 4096}));
    let gaps = view["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{view}");
    let (start, end) = (gaps[0]["start"].as_u64().unwrap(), gaps[0]["end"].as_u64().unwrap());
    assert_eq!(start, gap_start, "{view}");
    assert!(
        end <= first.len() as u64,
        "the spool resumed before the second part: {}",
        view["gaps"]
    );
    assert_eq!(view["dropped_bytes"].as_u64().unwrap(), end - start, "{view}");
    assert!(view["output"].as_str().unwrap().ends_with("520000\nthe-last-line\n"), "{view}");
    // The spool is exactly the log without the gap.
    let spool = Path::new(s["spool_path"].as_str().unwrap());
    let on_disk = std::fs::read(spool).unwrap();
    let mut kept = expected[..start as usize].to_vec();
    kept.extend_from_slice(&expected[end as usize..]);
    assert!(on_disk == kept, "spool {} bytes, expected {}", on_disk.len(), kept.len());
    let (raw, jumps) = read_raw_across(&mut rpc, &id);
    assert!(raw == kept, "raw read {} bytes, expected {}", raw.len(), kept.len());
    assert_eq!(jumps, vec![(start, end)]);
    let found = ok(&home, &["grep", &id, "the-last-line"]);
    assert!(found.contains("the-last-line"), "{found}");
    let logs = stockade_logging(&home, &["logs", "--raw", &id], "error");
    assert!(logs.status.success(), "{}", String::from_utf8_lossy(&logs.stderr));
    assert!(logs.stdout == kept, "logs --raw {} bytes, expected {}", logs.stdout.len(), kept.len());
    let said = String::from_utf8_lossy(&logs.stderr);
    assert!(said.contains(&format!("{start}")) && said.contains("disk full"), "{said}");
    eprintln!(
        "printed {}, gap {start}..{end} ({} bytes), spooled {}",
        expected.len(),
        end - start,
        on_disk.len()
    );
    drop(rpc);
    ok(&home, &["daemon", "stop"]);
}
