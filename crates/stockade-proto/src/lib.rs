//! Stockade's wire vocabulary.
//!
//! Every door (CLI `--json`, the daemon's JSON-RPC, the MCP server's structured content) speaks
//! with these types, so a field has one name everywhere: `id`, `state`, `pid`, `total_bytes`,
//! `total_lines`, `spool_path`, `next_cursor`, `truncated`, `output`, …
//!
//! The engine (`stockade-engine`, over `stockade-proc` and `stockade-log`) uses them as its
//! typed API; this crate holds plain data (serde), so a client can depend on it without pulling
//! in the engine. Three small modules hold the rules both sides of a door must apply alike,
//! which is why they live here rather than in the daemon or the client: [`home`], the names of
//! the daemon's files in a state directory; [`token`], how a bearer-token file is read (its only
//! I/O); and [`Signal`], signal names and numbers as `kill` takes them and answers name them.

#![deny(missing_docs)]

pub mod home;
pub mod rpc;
pub mod sandbox;
mod signal;
pub mod token;

pub use sandbox::{NetworkMode, Sandbox, SandboxMode};
pub use signal::{Signal, UnknownSignal};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Default bound on the bytes of one answer to the model (50 KiB; see README.md).
pub const DEFAULT_MAX_BYTES: usize = 50 * 1024;
/// Default bound on the lines of one answer to the model (2000 lines; see README.md).
pub const DEFAULT_MAX_LINES: usize = 2000;
/// Default hot-tail size per session: the newest bytes kept in memory.
pub const DEFAULT_RETAINED_CAP: usize = 1024 * 1024;
/// Default per-session disk cap for the spool.
pub const DEFAULT_DISK_CAP: u64 = 1024 * 1024 * 1024;
/// Default grace between the polite signal and `SIGKILL` when terminating a tree.
pub const DEFAULT_GRACE_MS: u64 = 2_000;

/// Which stream a byte came from.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// The command's standard output.
    Stdout,
    /// The command's standard error.
    Stderr,
    /// A pseudo-terminal (stdout and stderr are one stream there).
    Pty,
    /// stdout and stderr written through one pipe (`pipe` capture) or straight into the spool
    /// (`file` capture), in write order: they cannot be told apart.
    Combined,
}

impl Capture {
    /// Whether the engine reads the output through pipes (and keeps a hot tail).
    pub fn is_piped(self) -> bool {
        self != Capture::File
    }
}

impl Stream {
    /// The wire name (`stdout`, `stderr`, `pty`, `combined`).
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
            Stream::Pty => "pty",
            Stream::Combined => "combined",
        }
    }
}

/// How a read chooses which part of the log to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadMode {
    /// From a cursor (`after`) forward: what is new since the last read.
    #[default]
    Delta,
    /// The end of the log: where results and the last error usually are.
    Tail,
    /// The start of the log: compiler errors, where the first one is the cause.
    Head,
    /// Head and tail with a marker in between.
    Middle,
}

/// Where the child's stdout/stderr go.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capture {
    /// One pipe for both stdout and stderr, as a terminal merges them (default): the engine
    /// reads it into the spool and the hot tail, so the log is in the order the command wrote,
    /// whatever the daemon's delays; its bytes are stream [`Stream::Combined`].
    #[default]
    Pipe,
    /// A pipe per stream: reads of one stream are exact, but the order across the two is only
    /// the order the engine read them in (whole lines interleaved where it can).
    Split,
    /// The child's stdout and stderr are the spool file's fd (`O_APPEND`); the engine copies
    /// nothing and reads by offset. Output keeps flowing to disk even if the daemon dies.
    File,
}

/// What happens when a session's spool reaches its disk cap (or the disk is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskPolicy {
    /// Terminate the command's tree, like a watchdog, and say so.
    #[default]
    Kill,
    /// Keep the head on disk and the newest bytes in the hot tail, drop the middle (reported
    /// exactly), keep draining the pipe.
    KeepHeadTail,
}

/// Bounds on what one answer shows the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputLimits {
    /// Upper bound on the bytes of `output`.
    pub max_bytes: usize,
    /// Upper bound on the lines of `output`.
    pub max_lines: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits { max_bytes: DEFAULT_MAX_BYTES, max_lines: DEFAULT_MAX_LINES }
    }
}

/// A range of the log whose bytes are not on disk (disk cap with `keep-head-tail`, or disk full).
/// Offsets are log offsets (cursors), `start..end`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// First dropped offset.
    pub start: u64,
    /// One past the last dropped offset.
    pub end: u64,
    /// Why: `disk cap` or `disk full`.
    pub reason: String,
}

/// What a cut view left out, as facts: each door words its own hint from them (the CLI names
/// `stockade read`, the MCP server its tools), so no door parses another layer's text.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Omission {
    /// Bytes of the requested range left out of `output`.
    pub omitted_bytes: u64,
    /// Lines of the requested range left out of `output`, where counted.
    pub omitted_lines: Option<u64>,
    /// A range that is neither on disk nor in memory, which the view could not show.
    pub dropped: Option<Gap>,
    /// Log offset to pass as `after` to read on from what this view left out.
    pub after: u64,
}

/// A bounded view of a session's output log: what every read answers with.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputView {
    /// The bounded content (UTF-8, invalid bytes shown lossily). A `middle` view marks the cut
    /// between its head and tail, and a read that jumps a dropped range marks the jump, in
    /// line; what was left out is in `notice`.
    pub output: String,
    /// Set when something was cut: the facts a door's omission hint is made of.
    #[serde(default)]
    pub notice: Option<Omission>,
    /// Whether anything in the requested range was left out of `output`.
    pub truncated: bool,
    /// Log offset of the first byte shown.
    pub start_cursor: u64,
    /// Log offset to pass as `after` to continue where this view stopped.
    pub next_cursor: u64,
    /// Bytes the command has printed so far (all streams).
    pub total_bytes: u64,
    /// Newline-terminated lines printed so far, plus one if the last line is incomplete.
    pub total_lines: u64,
    /// Bytes of the requested range left out of `output`.
    pub omitted_bytes: u64,
    /// Lines of the requested range left out of `output`, where counted.
    pub omitted_lines: Option<u64>,
    /// Bytes of the log that are not on disk (see `gaps`).
    pub dropped_bytes: u64,
    /// The dropped ranges.
    pub gaps: Vec<Gap>,
    /// Full path of the spool file holding every byte.
    pub spool_path: PathBuf,
    /// The stream filter that was applied, if any.
    pub stream: Option<Stream>,
}

/// One line that matched a grep over the full log.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepLine {
    /// 1-based line number in the log.
    pub line_number: u64,
    /// Log offset of the first byte of the line.
    pub offset: u64,
    /// The line (lossy UTF-8, without its newline), bounded in length.
    pub text: String,
    /// `true` for a matching line, `false` for a context line.
    pub is_match: bool,
}

/// What a grep over a session's log found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepResult {
    /// Matching lines and their context, in log order.
    pub lines: Vec<GrepLine>,
    /// How many matching lines were returned.
    pub matches: u64,
    /// Whether the match cap stopped the search before the end of the log.
    pub truncated: bool,
    /// Full path of the spool file searched.
    pub spool_path: PathBuf,
}

/// The state of a session. Terminal states never change again.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SessionState {
    /// Still running.
    Running,
    /// Exited by itself with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// Ended by a signal nobody in Stockade sent.
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// Terminated on request (`kill`, shutdown, disk cap with the `kill` policy, …).
    Killed {
        /// Why it was killed.
        reason: String,
    },
    /// Terminated because `timeout_ms` passed.
    TimedOut,
    /// Could not start, or lost on crash recovery.
    Failed {
        /// What went wrong.
        reason: String,
    },
}

impl SessionState {
    /// Whether this state is final.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, SessionState::Running)
    }

    /// The bare state name (`running`, `exited`, …).
    pub fn name(&self) -> &'static str {
        match self {
            SessionState::Running => "running",
            SessionState::Exited { .. } => "exited",
            SessionState::Signaled { .. } => "signaled",
            SessionState::Killed { .. } => "killed",
            SessionState::TimedOut => "timed_out",
            SessionState::Failed { .. } => "failed",
        }
    }
}

/// How a session's processes are contained, strongest first.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainmentMethod {
    /// A cgroup v2 per session, killed with `cgroup.kill` (Linux).
    Cgroup,
    /// Process group + child subreaper + a `/proc` scan for the session's environment marker.
    ProcessGroup,
}

/// What terminating a session's tree did. "Signal sent" and "terminated" are different answers.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminateReport {
    /// Every process of the session is verified gone.
    pub terminated: bool,
    /// The first signal sent (e.g. `SIGTERM`), if any was needed.
    pub signal_sent: Option<String>,
    /// Whether `SIGKILL` had to follow after the grace period.
    pub escalated: bool,
    /// Every pid that was signalled.
    pub pids_signalled: Vec<u32>,
    /// Pids of the session still alive when verification gave up (empty when `terminated`).
    pub survivors: Vec<u32>,
    /// Live processes that may have escaped the session but cannot be shown to be its own (an
    /// orphan that landed on the daemon while the session ran, with no marker, group or
    /// descriptor of any session): not signalled, and `terminated` is false while they live.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unattributed: Vec<u32>,
    /// The containment that was used.
    pub method: ContainmentMethod,
    /// Milliseconds from the first signal to verified-gone (or to giving up).
    pub elapsed_ms: u64,
}

/// What `run` answers: the session, how it stands, and a bounded view of its output.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunResult {
    /// The session id (`sh-N`).
    pub id: String,
    /// The state (`state` plus its fields, flattened).
    #[serde(flatten)]
    pub state: SessionState,
    /// Root pid of the command.
    pub pid: u32,
    /// The directory the command runs in: the caller's, `cwd`, or the daemon's own when the
    /// request named none (a remote client learns where it ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// Milliseconds from spawn to the end (or to this answer, while running).
    pub wall_time_ms: u64,
    /// What terminating the tree did when the session ended, if anything was left running.
    pub cleanup: Option<TerminateReport>,
    /// `true` when `run` carried a `source` an active session already had: no new command was
    /// started, and this answer describes that session (absent on the wire means `false`).
    #[serde(default)]
    pub deduplicated: bool,
    /// The bounded output (`output`, `truncated`, `total_bytes`, `next_cursor`, …, flattened).
    #[serde(flatten)]
    pub view: OutputView,
    /// How the call's `yield_ms` wait went, when it waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<rpc::WaitReport>,
    /// The sandbox the command ran under, in one line (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}
