//! Shared helpers for the process-tree tests: unique markers, the two containment modes, waits on
//! an independent `/proc` scan (`stockade-testkit`'s: the tests never trust the code under test
//! to say what is left), and a guard that kills whatever a test started even when it fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use stockade_proc::{
    CgroupMode, Containment, ContainmentConfig, PidFd, ProcessTree, SessionMarker, Signal,
};
use stockade_proto::ContainmentMethod;
pub use stockade_testkit::procs::{
    ProcStat, carries, marked_counts, marked_processes as marked_pids, read_stat as stat,
};

/// Upper bound on waiting for a test's process shape to appear.
pub const SHAPE_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the helpers poll `/proc`.
pub const POLL: Duration = Duration::from_millis(20);

/// The two containments every behaviour is checked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Cgroup,
    Fallback,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cgroup => "cg",
            Mode::Fallback => "pg",
        }
    }

    /// Detects containment for this mode. `Cgroup` asks for `Auto`: on a host without usable
    /// cgroups it degrades, and the test says why through `cannot_run` (a failure under CI).
    pub fn containment(self) -> Containment {
        let cgroup = match self {
            Mode::Cgroup => CgroupMode::Auto,
            Mode::Fallback => CgroupMode::Off,
        };
        let c = Containment::detect(&ContainmentConfig {
            cgroup,
            subreaper: true,
            keeper: None,
            keeper_with_cgroup: false,
        });
        match self {
            Mode::Fallback => assert_eq!(c.method(), ContainmentMethod::ProcessGroup),
            // Says why, and fails where CI must run it (root with a usable cgroup v2).
            Mode::Cgroup if c.method() != ContainmentMethod::Cgroup => {
                stockade_testkit::cannot_run(&format!(
                    "cgroup containment unavailable here ({:?}); this run used the process-group fallback",
                    c.describe().fallback_reason
                ));
            }
            Mode::Cgroup => {}
        }
        c
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The instance part of every marker this test process uses.
pub fn instance() -> String {
    format!("ptest-{}", std::process::id())
}

/// A marker no other test (thread or process) uses.
pub fn unique_marker(test: &str, mode: Mode) -> SessionMarker {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    SessionMarker::new(instance(), format!("{test}-{}-{n}", mode.name()))
}

/// Waits (bounded) until the processes carrying `entry` satisfy `settled` — e.g. the escape has
/// actually happened — so a test never terminates a shape that is still forming.
pub fn wait_shape(
    entry: &str,
    what: &str,
    settled: impl Fn(&[(u32, ProcStat)]) -> bool,
) -> Vec<u32> {
    let deadline = Instant::now() + SHAPE_TIMEOUT;
    loop {
        let procs: Vec<(u32, ProcStat)> =
            marked_pids(entry).into_iter().filter_map(|p| stat(p).map(|s| (p, s))).collect();
        if settled(&procs) {
            return procs.into_iter().map(|(p, _)| p).collect();
        }
        assert!(Instant::now() < deadline, "shape {what} never formed: {procs:?}");
        std::thread::sleep(POLL);
    }
}

/// Kills everything a test started when it ends, passed or failed: every process still carrying
/// one of its markers (through a pidfd, re-checked after opening), each tracked tree's cgroup.
#[derive(Default)]
pub struct Guard {
    entries: Vec<String>,
    trees: Vec<Arc<ProcessTree>>,
    pids: Vec<(u32, u64)>,
}

impl Guard {
    pub fn new() -> Guard {
        Guard::default()
    }

    /// Tracks a tree: its marker is cleaned up and the tree dropped after the kill.
    pub fn track(&mut self, tree: ProcessTree) -> Arc<ProcessTree> {
        self.entries.push(tree.marker().env_entry());
        let tree = Arc::new(tree);
        self.trees.push(tree.clone());
        tree
    }

    /// Tracks one process by identity.
    pub fn track_pid(&mut self, pid: u32) {
        if let Some(st) = stat(pid) {
            self.pids.push((pid, st.start_time));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for tree in &self.trees {
            if let Some(dir) = tree.cgroup() {
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            }
        }
        for &(pid, start) in &self.pids {
            if let Ok(fd) = PidFd::open_verified(pid, start) {
                let _ = fd.signal(Signal::SIGKILL);
            }
        }
        for entry in &self.entries {
            for pid in marked_pids(entry) {
                if let Some(st) = stat(pid)
                    && let Ok(fd) = PidFd::open_verified(pid, st.start_time)
                    && carries(pid, entry)
                {
                    let _ = fd.signal(Signal::SIGKILL);
                }
            }
        }
        // Give the kernel a moment so the trees' Drop can reap roots and remove cgroups.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && self.entries.iter().any(|e| !marked_pids(e).is_empty()) {
            std::thread::sleep(POLL);
        }
        self.trees.clear();
    }
}
