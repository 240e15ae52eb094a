//! Stockade's one reader of `/proc` (Linux-only).
//!
//! Every crate that asks "is this process alive?", "is it still the process we started?" or
//! "how much memory does it hold?" asks here, so the answer is the same everywhere: the engine
//! when it signals and verifies a tree, crash recovery when it judges a session's owner, the
//! client when it decides whether to start a daemon, the bench harness and the tests.
//!
//! A process is named by `pid + start time` (field 22 of `/proc/<pid>/stat`, clock ticks after
//! boot): a reused pid has another start time. A zombie (`Z`) or dead (`X`) process still has
//! its stat line — and the same start time — until its parent reaps it, so [`Liveness`] treats
//! it as gone: it runs no code, holds no memory and can be signalled to no effect.

#![deny(missing_docs)]

mod listener;
pub mod smaps;

pub use listener::{is_stopped, tcp_listener_pid};

/// `PF_KTHREAD` in `/proc/<pid>/stat` field 9.
const PF_KTHREAD: u64 = 0x0020_0000;

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id.
    pub pid: u32,
    /// Field 3: `R`, `S`, `D`, `Z`, `X`, …
    pub state: u8,
    /// Field 4: the parent's pid.
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgrp: u32,
    /// Field 6: the session id.
    pub session: u32,
    /// Field 7: the controlling terminal's device number (0: none).
    pub tty_nr: i64,
    /// Field 9: kernel flags (`PF_*`).
    pub flags: u64,
    /// Field 22: start time in clock ticks after boot. With the pid, the process's identity.
    pub start_time: u64,
}

impl ProcStat {
    /// A zombie (`Z`) or dead (`X`, transient) process: nothing runs, nothing to signal.
    pub fn is_zombie(&self) -> bool {
        self.state == b'Z' || self.state == b'X'
    }

    /// A kernel thread (never part of a session).
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == 2 || self.ppid == 2
    }
}

/// Parses the text of `/proc/<pid>/stat`. `comm` (field 2) may contain spaces and `)`, so the
/// fields are counted from its last `)`.
pub fn parse_stat(pid: u32, text: &str) -> Option<ProcStat> {
    let close = text.rfind(')')?;
    let mut fields = text.get(close + 1..)?.split_ascii_whitespace();
    // After `comm`, index 0 is field 3.
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    // Field 7 (tty_nr), 8 (tpgid), then 9 (flags).
    let tty_nr = fields.next()?.parse().ok()?;
    let flags = fields.nth(1)?.parse().ok()?;
    // Fields 10..=21, then 22 (starttime).
    let start_time = fields.nth(12)?.parse().ok()?;
    Some(ProcStat { pid, state, ppid, pgrp, session, tty_nr, flags, start_time })
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone (or unreadable).
///
/// Three system calls (open, one read, close): a census reads this for every process on the
/// machine, so the file is read into a stack buffer in one go rather than through a growing
/// string (which costs a `statx` and five reads more).
pub fn read_stat(pid: u32) -> Option<ProcStat> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    // The line is at most ~1.1 KiB (52 numeric fields and a 64-byte `comm`).
    let mut buf = [0u8; 2048];
    let mut len = 0;
    // The kernel hands the whole line to one read; keep reading only if it did not.
    while len < buf.len() && (len == 0 || buf[len - 1] != b'\n') {
        match file.read(&mut buf[len..]).ok()? {
            0 => break,
            n => len += n,
        }
    }
    // `comm` is whatever bytes the process set (not necessarily UTF-8): parse from its last `)`,
    // so a process cannot hide from a census by naming itself with invalid UTF-8.
    let close = buf[..len].iter().rposition(|&b| b == b')')?;
    parse_stat(pid, std::str::from_utf8(&buf[close..len]).ok()?)
}

/// The start time of `pid` (clock ticks after boot), or `None` if there is no such process.
/// A zombie still has one: use [`liveness`] to ask whether a process is alive.
pub fn start_time(pid: u32) -> Option<u64> {
    read_stat(pid).map(|s| s.start_time)
}

/// Most ancestors [`lineage`] follows: deeper than any real process tree (a fork bomb under a
/// `pids` limit of thousands is wide, not deep); a deeper chain is not followed to its end.
pub const MAX_LINEAGE: usize = 4096;

/// Process `pid` and its ancestors, named by `pid + start time`, from `pid` up through each
/// parent (field 4) to the first process without one (`init`, or one whose parent lives outside
/// this pid namespace). `None` when `pid` is gone or a zombie, when a link of the chain cannot be
/// read (the process ended while it was walked) or when it is longer than [`MAX_LINEAGE`].
///
/// A pid reused while the chain is walked cannot graft another process's ancestry on: a parent
/// is always older than its child (a process handed to a subreaper or to `init` goes to one
/// of its ancestors), so a link whose start time is later than its child's is refused as a
/// stranger that took the parent's pid after it died.
pub fn lineage(pid: u32) -> Option<Vec<(u32, u64)>> {
    lineage_by(pid, read_stat)
}

/// [`lineage`], each process's stat read by `read`.
fn lineage_by(pid: u32, mut read: impl FnMut(u32) -> Option<ProcStat>) -> Option<Vec<(u32, u64)>> {
    let first = read(pid).filter(|s| !s.is_zombie())?;
    let mut chain = vec![(first.pid, first.start_time)];
    let mut child = first;
    while child.ppid != 0 {
        if chain.len() >= MAX_LINEAGE {
            return None;
        }
        let parent = read(child.ppid)?;
        if parent.start_time > child.start_time {
            return None;
        }
        chain.push((parent.pid, parent.start_time));
        child = parent;
    }
    Some(chain)
}

/// What became of a process named by `pid + start time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The same process (pid and start time) exists and is not a zombie.
    Alive,
    /// No process has that pid.
    Gone,
    /// The same process exists only as a zombie (`Z`/`X`): it died and is not yet reaped.
    Zombie,
    /// Another process has that pid now (its start time differs): the one we knew died.
    Reused {
        /// The start time of the process now using the pid.
        start_time: u64,
    },
}

impl Liveness {
    /// Only [`Liveness::Alive`] is alive.
    pub fn is_alive(self) -> bool {
        self == Liveness::Alive
    }
}

/// The one liveness check: is the process `pid` that started at `start_time` still running?
/// `start_time: None` accepts any process with that pid (a record written without one).
pub fn liveness(pid: u32, start_time: Option<u64>) -> Liveness {
    let Some(stat) = read_stat(pid) else { return Liveness::Gone };
    match start_time {
        Some(t) if t != stat.start_time => Liveness::Reused { start_time: stat.start_time },
        _ if stat.is_zombie() => Liveness::Zombie,
        _ => Liveness::Alive,
    }
}

/// Whether some non-zombie process has this pid (whichever it is).
pub fn pid_alive(pid: u32) -> bool {
    liveness(pid, None).is_alive()
}

/// Appends to `out` the children of `pid`: the pids listed in `/proc/<pid>/task/<tid>/children`
/// for each of its threads (`CONFIG_PROC_CHILDREN`). `false` when the process is gone or the
/// kernel has no such files.
///
/// Cheap enough to walk a tree per call: a task directory links to itself, its parent and each
/// thread, so one `statx` says whether the process has a single thread, and then one file is
/// read — opened, read into `buf` (reused across calls) until its end, closed; no sizing
/// `statx`/`lseek` as a growing read makes.
pub fn children(pid: u32, buf: &mut Vec<u8>, out: &mut Vec<u32>) -> bool {
    let Some(proc) = proc_dir() else { return false };
    let dir = format!("{pid}/task");
    match rustix::fs::statat(proc, dir.as_str(), rustix::fs::AtFlags::empty()) {
        Ok(st) if st.st_nlink == 3 => thread_children(pid, pid, buf, out),
        Ok(_) => {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{dir}")) else { return false };
            let mut any = false;
            for task in tasks.flatten() {
                let tid = task.file_name().to_str().and_then(|t| t.parse().ok());
                any |= tid.is_some_and(|tid| thread_children(pid, tid, buf, out));
            }
            any
        }
        Err(_) => false,
    }
}

/// Appends to `out` the children that the thread `tid` of `pid` forked
/// (`/proc/<pid>/task/<tid>/children`): all of a single-threaded process's, with no `statx`
/// to ask. `false` when the thread is gone or the kernel has no such file.
pub fn thread_children(pid: u32, tid: u32, buf: &mut Vec<u8>, out: &mut Vec<u32>) -> bool {
    use rustix::fs::{Mode, OFlags};
    let Some(proc) = proc_dir() else { return false };
    let path = format!("{pid}/task/{tid}/children");
    let Ok(file) =
        rustix::fs::openat(proc, path.as_str(), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
    else {
        return false;
    };
    buf.clear();
    // `children` is a seq_file: one read returns every record that fits in its page-sized
    // buffer (and in `chunk`), so a read that left room for one more record (`"4294967295 "`,
    // 11 bytes) reached the end; a full one is followed by more reads, up to one returning 0.
    const LONGEST_RECORD: usize = 11;
    let mut chunk = [0u8; 4096];
    loop {
        match rustix::io::read(&file, &mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if n + LONGEST_RECORD < chunk.len() {
                    break;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    out.extend(
        buf.split(u8::is_ascii_whitespace)
            .filter_map(|w| std::str::from_utf8(w).ok()?.parse::<u32>().ok()),
    );
    true
}

/// `/proc`, opened once: the lookups of a tree walk start below it rather than at `/`.
fn proc_dir() -> Option<&'static std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    static PROC: std::sync::OnceLock<Option<std::os::fd::OwnedFd>> = std::sync::OnceLock::new();
    PROC.get_or_init(|| {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        rustix::fs::open("/proc", flags, Mode::empty()).ok()
    })
    .as_ref()
}

/// `VmRSS` and `VmHWM` (current and peak resident memory) of a process, in bytes; `None` once it
/// is gone or a zombie (which has no such lines). `pid: None` reads this process.
pub fn rss_and_peak(pid: Option<u32>) -> Option<(u64, u64)> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_owned(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    Some((status_kib(&status, "VmRSS:")? * 1024, status_kib(&status, "VmHWM:")? * 1024))
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `RssAnon:`, `RssFile:`, …), in KiB.
pub fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Children that a test started, killed and reaped when it ends, even on failure.
    struct Kids(Vec<std::process::Child>);

    impl Drop for Kids {
        fn drop(&mut self) {
            for child in &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    #[test]
    fn children_are_read_whole_when_they_fill_several_pages() {
        // 1,200 children: several kilobytes of pids, more than one read returns.
        let mut kids = Kids(Vec::new());
        for _ in 0..1200 {
            kids.0.push(std::process::Command::new("sleep").arg("60").spawn().unwrap());
        }
        let me = std::process::id();
        let (mut buf, mut got) = (Vec::new(), Vec::new());
        assert!(children(me, &mut buf, &mut got));
        let mut want: Vec<u32> = kids.0.iter().map(std::process::Child::id).collect();
        got.sort_unstable();
        want.sort_unstable();
        // Other tests of this binary may run children of their own at the same time.
        got.retain(|pid| want.binary_search(pid).is_ok());
        assert_eq!(got, want);
        assert!(want.iter().map(|p| p.to_string().len() + 1).sum::<usize>() > 4096);
        let mut none = Vec::new();
        assert!(!children(u32::MAX, &mut buf, &mut none));
        assert!(none.is_empty());
    }

    #[test]
    fn stat_parses_comm_with_spaces_and_parens() {
        let text = "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 \
                    1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let st = parse_stat(1234, text).unwrap();
        assert_eq!(st.state, b'S');
        assert_eq!((st.ppid, st.pgrp, st.session, st.tty_nr), (1, 1234, 1234, 0));
        assert_eq!(st.flags, 4_194_560);
        assert_eq!(st.start_time, 98765);
        assert!(!st.is_zombie());
    }

    #[test]
    fn stat_counts_fields_from_the_last_paren() {
        let text = "1234 (we ird) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 100 18446744073709551615";
        let st = parse_stat(1234, text).unwrap();
        assert_eq!((st.state, st.ppid, st.pgrp, st.session), (b'S', 1, 1234, 1234));
        assert_eq!((st.flags, st.start_time), (4194560, 98765));
    }

    #[test]
    fn a_process_named_with_invalid_utf8_is_still_read() {
        use std::os::unix::ffi::OsStrExt as _;
        // `comm` is the executable's file name: run `sleep` through a link named `sl\xffp`.
        let dir = std::env::temp_dir().join(format!("stockade-procfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join(std::ffi::OsStr::from_bytes(b"sl\xffp"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
        let mut child = std::process::Command::new(&link).arg("30").spawn().unwrap();
        let pid = child.id();
        // Until it has exec'd, its comm is this test's.
        let mut exec_d = false;
        for _ in 0..500 {
            let raw = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
            if raw.windows(6).any(|w| w == b"(sl\xffp)") {
                exec_d = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let st = read_stat(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(exec_d, "the child never showed the invalid-UTF-8 name");
        let st = st.expect("a non-UTF-8 comm hid the process");
        assert_eq!((st.pid, st.ppid), (pid, std::process::id()));
    }

    #[test]
    fn own_start_time_is_readable_and_stable() {
        let me = std::process::id();
        let a = start_time(me).unwrap();
        assert_eq!(start_time(me), Some(a));
        assert!(start_time(u32::MAX).is_none());
        assert_eq!(liveness(u32::MAX, None), Liveness::Gone);
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let t = start_time(me).unwrap();
        assert_eq!(liveness(me, Some(t)), Liveness::Alive);
        assert_eq!(liveness(me, Some(t + 1)), Liveness::Reused { start_time: t });
        assert!(pid_alive(me));
        assert!(rss_and_peak(None).unwrap().0 > 0);
    }

    #[test]
    fn lineage_names_a_child_then_this_process_then_its_ancestors() {
        let mut kids = Kids(vec![std::process::Command::new("sleep").arg("30").spawn().unwrap()]);
        let pid = kids.0[0].id();
        let chain = lineage(pid).unwrap();
        let me = std::process::id();
        assert_eq!(chain[0], (pid, start_time(pid).unwrap()));
        assert_eq!(chain[1], (me, start_time(me).unwrap()));
        // Up to a process without a parent here, each older than the one below it.
        assert_eq!(read_stat(chain.last().unwrap().0).unwrap().ppid, 0);
        assert!(chain.windows(2).all(|w| w[1].1 <= w[0].1), "{chain:?}");
        assert!(lineage(u32::MAX).is_none());
        // A zombie has no lineage: it is no caller.
        kids.0[0].kill().unwrap();
        for _ in 0..500 {
            if read_stat(pid).is_some_and(|s| s.is_zombie()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(lineage(pid).is_none());
    }

    #[test]
    fn a_reused_pid_in_the_chain_breaks_it_and_a_loop_is_bounded() {
        let stat = |pid, ppid, start_time| ProcStat {
            pid,
            state: b'S',
            ppid,
            pgrp: pid,
            session: pid,
            tty_nr: 0,
            flags: 0,
            start_time,
        };
        // 30 (started at 500) under 20 (400) under 1 (1).
        let honest = |pid| match pid {
            30 => Some(stat(30, 20, 500)),
            20 => Some(stat(20, 1, 400)),
            1 => Some(stat(1, 0, 1)),
            _ => None,
        };
        assert_eq!(lineage_by(30, honest), Some(vec![(30, 500), (20, 400), (1, 1)]));
        // 20 died and a stranger took its pid after 30 started: the chain stops there.
        let reused = |pid| match pid {
            20 => Some(stat(20, 7, 600)),
            7 => Some(stat(7, 0, 2)),
            other => honest(other),
        };
        assert_eq!(lineage_by(30, reused), None);
        // Started in the same tick as its child: still its parent.
        let same_tick = |pid| if pid == 20 { Some(stat(20, 1, 500)) } else { honest(pid) };
        assert_eq!(lineage_by(30, same_tick).map(|c| c.len()), Some(3));
        // A chain that never ends (it cannot, but a reader could say so) is given up.
        let endless = |pid| Some(stat(pid, pid + 1, 0));
        assert_eq!(lineage_by(1, endless), None);
    }

    #[test]
    fn an_unreaped_child_is_a_zombie_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let t = start_time(pid).unwrap();
        // Wait for it to exit without reaping it: its stat line stays, state `Z`.
        let mut seen = Liveness::Alive;
        for _ in 0..500 {
            seen = liveness(pid, Some(t));
            if seen == Liveness::Zombie {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(seen, Liveness::Zombie);
        assert!(!pid_alive(pid));
        child.wait().unwrap();
        assert_eq!(liveness(pid, Some(t)), Liveness::Gone);
    }
}
