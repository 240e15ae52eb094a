//! What an engine is set up with (its limits, state directory, containment, sandbox) and the
//! values its calls answer with (`Started`, `Forgotten`, `EngineStats`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use stockade_proc::ContainmentConfig;
use stockade_proto::{
    DEFAULT_DISK_CAP, DEFAULT_GRACE_MS, DEFAULT_RETAINED_CAP, DiskPolicy, TerminateReport,
};

use crate::session::Session;
use crate::state_dir::StateDir;

/// The shell used when a run names none.
pub(crate) const DEFAULT_SHELL: &str = "/bin/sh";
/// Largest retained cap (hot tail) a session may ask for.
pub const MAX_RETAINED_CAP: usize = 64 * 1024 * 1024;
/// Smallest retained cap: the tail of a view must fit in it.
pub const MIN_RETAINED_CAP: usize = 4 * 1024;
/// Default bound on finished sessions kept (records and spools); the oldest are forgotten first.
pub(crate) const DEFAULT_MAX_FINISHED: usize = 1_000;
/// Default bound on the bytes the hot tails of running sessions hold (a hot tail holds bytes only
/// after its spool stopped: disk cap or disk full).
pub(crate) const DEFAULT_HOT_TAIL_BUDGET: u64 = 512 * 1024 * 1024;
/// Default largest disk cap one session may ask for.
pub(crate) const DEFAULT_MAX_DISK_CAP: u64 = 16 * 1024 * 1024 * 1024;
/// Default bound on the bytes in the spools of all sessions this engine keeps.
pub(crate) const DEFAULT_DISK_BUDGET: u64 = 64 * 1024 * 1024 * 1024;

/// The engine's limits. Hitting one is [`EngineError::LimitReached`](crate::EngineError::LimitReached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Most sessions running at once.
    pub max_running: usize,
    /// Most finished sessions kept; beyond it the oldest finished are forgotten (never a
    /// running one).
    pub max_finished: usize,
    /// Most bytes the hot tails of running sessions may hold together. A hot tail holds bytes
    /// only once its spool stopped (disk cap or disk full); a new run is refused when what they
    /// hold plus its own retained cap would pass this.
    pub hot_tail_budget: u64,
    /// Largest disk cap one session may ask for.
    pub max_disk_cap: u64,
    /// Most bytes all kept spools may hold together; a new run is refused once they do.
    pub disk_budget: u64,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            max_running: stockade_proc::fd_budget::default_max_running(),
            max_finished: DEFAULT_MAX_FINISHED,
            hot_tail_budget: DEFAULT_HOT_TAIL_BUDGET,
            max_disk_cap: DEFAULT_MAX_DISK_CAP,
            disk_budget: DEFAULT_DISK_BUDGET,
        }
    }
}

/// How an engine is set up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The state directory.
    pub state_dir: StateDir,
    /// This instance's name (a folder under `spool/`).
    pub instance: String,
    /// Containment choice.
    pub containment: ContainmentConfig,
    /// Grace between the polite signal and `SIGKILL`.
    pub grace: Duration,
    /// Default hot-tail size per session.
    pub retained_cap: usize,
    /// Default disk cap per session.
    pub disk_cap: u64,
    /// Default disk-cap policy.
    pub disk_policy: DiskPolicy,
    /// Session directories kept made ahead of time (0: each run makes its own). A long-lived
    /// engine (the daemon) keeps a few, so a run does not wait for new inodes; see `slots.rs`.
    pub prepared_dirs: usize,
    /// Limits on sessions, memory and disk.
    pub limits: EngineLimits,
    /// The default sandbox, its ceiling, and what it hides.
    pub sandbox: crate::SandboxConfig,
}

impl EngineConfig {
    /// A configuration with the defaults, for `state_dir` and an instance name.
    pub fn new(state_dir: StateDir, instance: impl Into<String>) -> EngineConfig {
        EngineConfig {
            state_dir,
            instance: instance.into(),
            containment: ContainmentConfig::default(),
            grace: Duration::from_millis(DEFAULT_GRACE_MS),
            retained_cap: DEFAULT_RETAINED_CAP,
            disk_cap: DEFAULT_DISK_CAP,
            disk_policy: DiskPolicy::default(),
            prepared_dirs: 0,
            limits: EngineLimits::default(),
            sandbox: crate::SandboxConfig::default(),
        }
    }
}

/// What [`Engine::start`](crate::Engine::start) answers: the session, and whether it was already running.
#[derive(Debug, Clone)]
pub struct Started {
    /// The session.
    pub session: Arc<Session>,
    /// `true` when the run carried the `source` of an active session: nothing new was started and
    /// `session` is that one.
    pub deduplicated: bool,
    /// `true` when the run carried the idempotency key of a session this engine keeps: nothing
    /// new was started, `session` is the one the first run with the key started, and the
    /// answer is given as to that run.
    pub replayed: bool,
}

/// What forgetting a session did.
#[derive(Debug, Clone)]
pub struct Forgotten {
    /// The session id.
    pub id: String,
    /// The terminate report, if it was still running.
    pub report: Option<TerminateReport>,
    /// Bytes of spool removed.
    pub removed_bytes: u64,
}

/// Output and memory accounting over every session the engine keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Bytes the output logs hold in memory (hot tails and bookkeeping).
    pub hot_tail_bytes: u64,
    /// Bytes on disk in spools.
    pub spooled_bytes: u64,
    /// Bytes printed but not on disk (disk cap / disk full).
    pub dropped_bytes: u64,
    /// Bytes printed by all sessions.
    pub output_bytes: u64,
    /// Sessions by state name (`running`, `exited`, …).
    pub sessions: BTreeMap<String, u64>,
    /// Full `/proc` scans this process has taken (see [`stockade_proc::ProcessCensus`]).
    pub process_scans: u64,
}
