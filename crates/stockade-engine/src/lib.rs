//! Stockade's engine: run shell commands for an agent, keep every byte they print, show a
//! bounded view of it, and make sure nothing they started outlives the moment they are stopped.
//!
//! # The model
//!
//! **spawn → session → output log → terminate.**
//!
//! 1. **Spawn** ([`stockade_proc`]): each command runs in its own session and process group, with an
//!    environment marker its descendants inherit ([`stockade_proc::SessionMarker`]), inside the
//!    strongest containment available (a cgroup v2 per session on Linux, else process group +
//!    child subreaper + a `/proc` marker scan).
//! 2. **Session** ([`Session`]): ties one process tree to one output log and a state machine
//!    whose terminal states never change. Its supervisor task is the only code that ends it; it
//!    writes the session's record (`session.json`, next to the spool) at start and at the end,
//!    through [`stockade_log::atomic_replace`], so crash recovery can find and finish what a dead daemon left.
//!    [`Engine`] owns all sessions of one instance: ids, limits, dedup by source, retention.
//! 3. **Output log** ([`stockade_log`]): the spool file on disk holds every byte in arrival order; a
//!    one shared drain thread reads every session's pipes straight into it, and views are read
//!    back by `pread` (the page cache); a cursor is a byte offset into the log. A session's
//!    memory is its bookkeeping (KiB), never O(bytes printed); only after the spool stopped (disk
//!    cap or disk full) does a bounded hot tail keep the newest bytes in memory. Reads render a bounded,
//!    honest view (head/tail/middle, UTF-8-safe cuts, the facts of what was left out) and grep
//!    walks the full spool with bounded memory. [`stockade_log::limits`] is the one bound on a view, whichever
//!    door asked; `Session::view` shapes it for a session.
//! 4. **Terminate** ([`stockade_proc::ProcessTree::terminate`]): the one routine every path uses
//!    (kill, timeout, disk cap, shutdown, recovery): polite signal, grace, `SIGKILL`, then
//!    *verify* that no process of the session is left, and report survivors rather than hide
//!    them.
//!
//! Process identity (`pid` + start time) and liveness come from `stockade-procfs`, the
//! workspace's one `/proc` reader. The engine knows nothing of sockets, MCP or the CLI: those
//! doors translate to and from the types in `stockade-proto`.

#![deny(missing_docs)]

pub mod blocking;
mod engine;
mod engine_config;
mod error;
mod input;
mod key_mark;
mod launch;
mod others;
mod others_memo;
mod recovery;
mod registry;
mod retention;
mod run_spec;
mod sandbox;
mod session;
mod slot_files;
mod slots;
mod spec_file;
mod starting;
mod state_dir;
mod view;
mod wait;

pub use engine::Engine;
pub use engine_config::{
    EngineConfig, EngineLimits, EngineStats, Forgotten, MAX_RETAINED_CAP, MIN_RETAINED_CAP, Started,
};
pub use error::EngineError;
pub use input::{InputKind, InputRefused};
pub use others::{
    LIST_FRESH, OWNER_WATCH_INTERVAL, OthersReport, sync_others, sync_others_unless_fresh,
};
pub use recovery::{RecoveredSession, RecoveryError, RecoveryReport, recover};
pub use registry::{Owner, RecordTotals, SessionRecord, read_record};
pub use retention::{DEFAULT_RETENTION, SweepReport, sweep_expired};
pub use run_spec::{RunSpec, check_idempotency_key};
pub use sandbox::SandboxConfig;
pub use session::{Session, SessionEnd};
pub use state_dir::{StateDir, StateDirError, is_session_id, open_lock_file};
pub use view::ReadPlan;
pub use wait::{DEFAULT_QUIET, Until, WaitFor};
