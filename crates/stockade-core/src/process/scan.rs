//! Scanning `/proc` for a session: the session marker (`environ`), cgroup membership and the scan
//! that finds every process of a session — including the ones that left its process group.
//! Process identity (`stat`) is read through `stockade_procfs`, the workspace's one parser.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use stockade_procfs::{ProcStat, read_stat};

/// Upper bound on the bytes of one `environ` read: the marker is searched in this much only.
/// (Linux limits one argument/environment string to 128 KiB; real environments are far smaller.)
const ENVIRON_READ_LIMIT: u64 = 1024 * 1024;

/// Whether `/proc/<pid>/environ` holds exactly the entry `entry` (`KEY=VALUE`). `buf` is reused
/// between calls to keep a scan allocation-free.
pub(crate) fn environ_has(pid: u32, entry: &[u8], buf: &mut Vec<u8>) -> bool {
    buf.clear();
    let Ok(file) = File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    if file.take(ENVIRON_READ_LIMIT).read_to_end(buf).is_err() {
        return false;
    }
    buf.split(|b| *b == 0).any(|e| e == entry)
}

/// The cgroup v2 path (`0::<path>` line) of `pid`, as seen in `/proc/<pid>/cgroup`.
pub(crate) fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned)
}

/// Every pid currently listed in `/proc`.
pub(crate) fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(Path::new("/proc")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// What a scan looks for.
#[derive(Debug, Clone)]
pub(crate) struct SessionQuery {
    /// The exact environment entry `STOCKADE_SESSION=<instance>:<id>`.
    pub marker_entry: Vec<u8>,
    /// The session's process group (and session id), trusted only while the root is unreaped.
    pub pgid: Option<u32>,
    /// Processes that started before the root cannot be its descendants: skip their `environ`.
    pub not_before: u64,
}

/// How a process was recognised as the session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// In the session's process group.
    Group,
    /// In the session's session, but another process group.
    Session,
    /// Carries the marker.
    Marker,
    /// Listed in the session cgroup.
    Cgroup,
    /// A zombie child of this process, outside the group: the session's only if the caller saw
    /// it alive as a member earlier. Never signalled, never counted as alive.
    ZombieChild,
}

/// One process of a session, seen at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub stat: ProcStat,
    pub via: Via,
}

/// Finds the processes of a session in `/proc`: members of its process group or session (while
/// those ids are trustworthy) and every process whose environment carries the marker. Zombies are
/// included (flagged by their state) when they are in the group; their `environ` is empty, so a
/// zombie outside the group is only recognised by the caller's memory of it.
pub(crate) fn scan_session(q: &SessionQuery) -> Vec<Member> {
    let me = std::process::id();
    let mut buf = Vec::with_capacity(4096);
    let mut found = Vec::new();
    for pid in all_pids() {
        if pid == me {
            continue;
        }
        let Some(st) = read_stat(pid) else { continue };
        if st.is_kernel_thread() {
            continue;
        }
        if let Some(g) = q.pgid {
            // Only `pgrp` members are reached by a group signal; session members that moved to
            // their own group (GNU `timeout` does) must be signalled one by one.
            let via = if st.pgrp == g {
                Some(Via::Group)
            } else if st.session == g {
                Some(Via::Session)
            } else {
                None
            };
            if let Some(via) = via {
                found.push(Member { stat: st, via });
                continue;
            }
        }
        if st.is_zombie() {
            if st.ppid == me {
                found.push(Member { stat: st, via: Via::ZombieChild });
            }
            continue;
        }
        if st.start_time < q.not_before {
            continue;
        }
        if environ_has(pid, &q.marker_entry, &mut buf) {
            // Re-read identity after the environ read: the same start time means the same process.
            if read_stat(pid).is_some_and(|again| again.start_time == st.start_time) {
                found.push(Member { stat: st, via: Via::Marker });
            }
        }
    }
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn environ_match_is_exact() {
        let me = std::process::id();
        let mut buf = Vec::new();
        // PATH is set for test runs; a prefix of an entry must not match.
        let path = std::env::var("PATH").unwrap_or_default();
        let entry = format!("PATH={path}");
        assert!(environ_has(me, entry.as_bytes(), &mut buf));
        assert!(!environ_has(me, &entry.as_bytes()[..entry.len() - 1], &mut buf));
    }
}
