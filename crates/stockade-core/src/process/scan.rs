//! Reading `/proc`: process identity (`stat`), the session marker (`environ`) and the scan that
//! finds every process of a session — including the ones that left its process group.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// `PF_KTHREAD` in `/proc/<pid>/stat` field 9: kernel threads never belong to a session.
const PF_KTHREAD: u64 = 0x0020_0000;
/// Upper bound on the bytes of one `environ` read: the marker is searched in this much only.
/// (Linux limits one argument/environment string to 128 KiB; real environments are far smaller.)
const ENVIRON_READ_LIMIT: u64 = 1024 * 1024;

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub pid: u32,
    pub state: u8,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
    pub flags: u64,
    /// Field 22: start time in clock ticks after boot. With the pid, the process's identity.
    pub start_time: u64,
}

impl ProcStat {
    pub fn is_zombie(&self) -> bool {
        // `X` (dead) is transient, treat it like a zombie: nothing to signal.
        self.state == b'Z' || self.state == b'X'
    }

    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == 2 || self.ppid == 2
    }
}

/// Parses the text of `/proc/<pid>/stat`. `comm` (field 2) may contain spaces and `)`, so the
/// fields are counted from its last `)`.
pub(crate) fn parse_stat(pid: u32, text: &str) -> Option<ProcStat> {
    let close = text.rfind(')')?;
    let mut fields = text.get(close + 1..)?.split_ascii_whitespace();
    // After `comm`, index 0 is field 3.
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    // Fields 7 (tty_nr) and 8 (tpgid), then 9 (flags).
    let flags = fields.nth(2)?.parse().ok()?;
    // Fields 10..=21, then 22 (starttime).
    let start_time = fields.nth(12)?.parse().ok()?;
    Some(ProcStat { pid, state, ppid, pgrp, session, flags, start_time })
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone (or unreadable).
pub(crate) fn read_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// The start time of `pid` (clock ticks after boot, `/proc/<pid>/stat` field 22), or `None` if
/// there is no such process. `pid + start time` identifies a process across pid reuse: crash
/// recovery compares a recorded pair with this before it signals anything.
pub fn process_start_time(pid: u32) -> Option<u64> {
    read_stat(pid).map(|s| s.start_time)
}

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
    fn stat_parses_comm_with_spaces_and_parens() {
        let text = "1234 (we ird) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 100 18446744073709551615";
        let st = parse_stat(1234, text).unwrap();
        assert_eq!(st.state, b'S');
        assert_eq!(st.ppid, 1);
        assert_eq!(st.pgrp, 1234);
        assert_eq!(st.session, 1234);
        assert_eq!(st.flags, 4194560);
        assert_eq!(st.start_time, 98765);
    }

    #[test]
    fn own_start_time_is_readable_and_stable() {
        let me = std::process::id();
        let a = process_start_time(me).unwrap();
        assert_eq!(process_start_time(me), Some(a));
        assert!(process_start_time(u32::MAX).is_none());
    }

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
