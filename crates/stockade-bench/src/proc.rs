//! How the harness ends what it started (`/proc` is read through `stockade-procfs`): by pid or process group,
//! checked against the process start time so a reused pid is never signalled.

use std::time::{Duration, Instant};

/// Whether a process still exists, is not a zombie, and is the one that started at `started`.
pub fn same_process(pid: u32, started: Option<u64>) -> bool {
    stockade_procfs::liveness(pid, started).is_alive()
}

/// Whether any process is left in process group `pgid`.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else { return false };
    // SAFETY: signal 0 only checks for existence and permission; no memory is involved.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `SIGKILL` process group `pgid` (never 0 or 1: that would be ourselves or everything).
pub fn kill_group(pgid: u32) {
    if pgid <= 1 {
        return;
    }
    let Ok(pgid) = i32::try_from(pgid) else { return };
    // SAFETY: plain syscall with integer arguments.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// `SIGKILL` one process if it is still the one that started at `started`.
pub fn kill_pid(pid: u32, started: Option<u64>) {
    if pid <= 1 || !same_process(pid, started) {
        return;
    }
    let Ok(p) = i32::try_from(pid) else { return };
    // SAFETY: plain syscall with integer arguments.
    unsafe {
        libc::kill(p, libc::SIGKILL);
    }
}

/// Wait until `done` holds or `limit` passes; `true` if it held.
pub fn wait_until(limit: Duration, step: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(step);
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
