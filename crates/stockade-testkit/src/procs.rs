//! `/proc` as the tests see it, independent of the code under test: which live processes carry
//! a session's marker (`STOCKADE_SESSION=<instance>:<id>`) or any other environment entry, and
//! killing exactly those by pid. Identity and liveness come from `stockade-procfs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
pub use stockade_procfs::{ProcStat, pid_alive, read_stat, start_time};

/// Every pid in `/proc`.
fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// The environment of `pid`, `NUL`-separated (empty for a zombie or a process gone).
fn environ(pid: u32) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()
}

/// Whether the environment of `pid` has an entry equal to `entry`.
pub fn carries(pid: u32, entry: &str) -> bool {
    environ(pid).split(|b| *b == 0).any(|e| e == entry.as_bytes())
}

/// Live (non-zombie) processes whose environment has an entry equal to `needle` — or starting
/// with it when it ends in `-` or `:` (a prefix: every session of an instance or a daemon).
pub fn marked_processes(needle: &str) -> Vec<u32> {
    let prefix = needle.ends_with('-') || needle.ends_with(':');
    pids()
        .into_iter()
        .filter(|&pid| {
            environ(pid).split(|b| *b == 0).any(|kv| {
                if prefix { kv.starts_with(needle.as_bytes()) } else { kv == needle.as_bytes() }
            }) && pid_alive(pid)
        })
        .collect()
}

/// Live (non-zombie) processes with an argument that contains `tag` (a number unique to a
/// test, say, which survives `env -i` and `setsid`).
pub fn carrying(tag: &str) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.split(|b| *b == 0).any(|a| a.windows(tag.len()).any(|w| w == tag.as_bytes()))
            }) && pid_alive(pid)
        })
        .collect()
}

/// SIGKILLs, by pid, every process [`carrying`] its tag when dropped: what a test started under
/// its own tag is gone even when it fails.
pub struct KillCarrying(pub String);

impl Drop for KillCarrying {
    fn drop(&mut self) {
        for pid in carrying(&self.0) {
            // SAFETY: kill(2) of a pid just seen carrying this test's own tag.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }
}

/// How many processes carry each entry that starts with `prefix`.
pub fn marked_counts(prefix: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for pid in pids() {
        for e in environ(pid).split(|b| *b == 0) {
            if e.starts_with(prefix.as_bytes()) {
                *counts.entry(String::from_utf8_lossy(e).into_owned()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// SIGKILL every process [`marked_processes`] finds for `needle`, by pid (cleanup after a
/// failed test).
pub fn kill_marked(needle: &str) {
    for pid in marked_processes(needle) {
        // SAFETY: kill(2) on a pid just seen carrying this test's own marker.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

/// The spool directory's parts of a session path `…/spool/<instance>/<id>/output.log`.
fn spool_parts(spool_path: &Path) -> (String, String) {
    let id_dir = spool_path.parent().unwrap();
    let instance = id_dir.parent().and_then(Path::file_name).unwrap().to_str().unwrap();
    (instance.to_owned(), id_dir.file_name().unwrap().to_str().unwrap().to_owned())
}

/// The environment entry a session's processes carry, `STOCKADE_SESSION=<instance>:<id>`, from
/// its spool path.
pub fn session_marker(spool_path: &str) -> String {
    let (instance, id) = spool_parts(&PathBuf::from(spool_path));
    format!("STOCKADE_SESSION={instance}:{id}")
}

/// The engine instance of a session (as the daemon lists it), from its spool path.
pub fn instance_of(session: &Value) -> String {
    spool_parts(&PathBuf::from(session["spool_path"].as_str().unwrap())).0
}

/// Live processes that are a daemon for `home` (`stockade --home HOME daemon run`).
pub fn daemons_for(home: &Path) -> Vec<u32> {
    let home = home.as_os_str().as_encoded_bytes();
    pids()
        .into_iter()
        .filter(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            args.windows(2).any(|w| w[0] == b"--home" && w[1] == home)
                && args.windows(2).any(|w| w[0] == b"daemon" && w[1] == b"run")
                && pid_alive(pid)
        })
        .collect()
}
