//! The daemon's own methods' results: `stats`, `status`, `shutdown`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ContainmentMethod;

/// `stats` result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsResult {
    /// Daemon resident set size now.
    pub rss_bytes: u64,
    /// Daemon peak resident set size (VmHWM).
    pub peak_rss_bytes: u64,
    /// Bytes allocated by the allocator (jemalloc `stats.allocated`).
    pub allocated_bytes: u64,
    /// Bytes held in hot tails.
    pub hot_tail_bytes: u64,
    /// Bytes on disk in spools.
    pub spooled_bytes: u64,
    /// Bytes dropped (disk cap / disk full).
    pub dropped_bytes: u64,
    /// Bytes printed by all sessions.
    pub output_bytes: u64,
    /// Sessions by state name.
    pub sessions: BTreeMap<String, u64>,
    /// Full `/proc` scans the daemon has taken since it started (each costs O(processes on the
    /// machine); a command that ends with its cgroup empty needs none).
    #[serde(default)]
    pub process_scans: u64,
    /// The start-up trim, once it has run (see `docs/architecture.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trim: Option<TrimStats>,
    /// Times the output drain was found stopped (output waiting, no progress for 10 s).
    #[serde(default)]
    pub drain_stalls: u64,
    /// Why the output drain is stopped, while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_stalled: Option<String>,
}

/// What the daemon's start-up trim did: the pages of its own executable that start-up touched,
/// handed back to the kernel (`madvise(MADV_PAGEOUT)`, Linux-only) once the daemon was idle.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimStats {
    /// Milliseconds after the daemon began serving that the trim ran.
    pub after_ms: u64,
    /// Bytes of address space advised.
    pub advised_bytes: u64,
    /// Resident bytes of the daemon's executable before and after.
    pub exe_rss_before_bytes: u64,
    /// See `exe_rss_before_bytes`.
    pub exe_rss_after_bytes: u64,
    /// The daemon's whole `VmRSS` before and after.
    pub rss_before_bytes: u64,
    /// See `rss_before_bytes`.
    pub rss_after_bytes: u64,
    /// Why the kernel refused, when it did (the daemon goes on either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// `status` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusResult {
    /// Daemon pid.
    pub pid: u32,
    /// The socket path.
    pub socket: PathBuf,
    /// The state directory.
    pub home: PathBuf,
    /// Daemon version.
    pub version: String,
    /// Containment in use.
    pub containment: ContainmentMethod,
    /// Whether every session runs under its own keeper (Linux; the default where sessions get
    /// no cgroup, `daemon run --session-keeper`).
    #[serde(default)]
    pub session_keeper: bool,
    /// Sessions known.
    pub sessions: usize,
}

/// `shutdown` result. The daemon answers before it exits; wait for `pid` to go away to know it
/// is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownResult {
    /// Always `true`: the daemon is stopping.
    pub stopping: bool,
    /// The daemon's pid, to wait for.
    pub pid: u32,
    /// Sessions running now, which will be terminated.
    pub running: usize,
    /// Their ids, oldest first (runs of another live process, such as a foreground
    /// `stockade run`, are not the daemon's to end and are not among them).
    #[serde(default)]
    pub terminated: Vec<String>,
}
