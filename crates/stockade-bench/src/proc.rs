//! What the harness reads from `/proc` and how it ends what it started: by pid or process group,
//! checked against the process start time so a reused pid is never signalled.

use std::time::{Duration, Instant};

/// `VmRSS` and `VmHWM` of a process, in bytes; `None` once it is gone.
pub fn rss_and_peak(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    // A zombie has no VmRSS line: report it as gone.
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Start time of a process (clock ticks since boot, field 22 of `/proc/<pid>/stat`).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether a process still exists and is the one that started at `started`.
pub fn same_process(pid: u32, started: Option<u64>) -> bool {
    match (start_time(pid), started) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => false,
    }
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
