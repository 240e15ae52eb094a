//! The daemon's JSON-RPC 2.0 protocol: envelopes, error codes, and one `*Params`/`*Result` pair
//! per method. Framing is newline-delimited JSON: one message per line, UTF-8, `\n`-terminated.
//! `docs/protocol.md` documents every method for people; this module is the source of truth.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    Capture, ContainmentMethod, DiskPolicy, GrepLine, OutputView, ReadMode, SessionState, Stream,
    TerminateReport,
};

/// The protocol version string every message carries.
pub const JSONRPC_VERSION: &str = "2.0";
/// Largest request line the daemon accepts (bytes, newline excluded).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Longest a `wait_ms`/`yield_ms` may ask to wait.
pub const MAX_WAIT_MS: u64 = 300_000;

/// Method names, as in `docs/protocol.md`.
pub mod method {
    /// Start a command.
    pub const RUN: &str = "run";
    /// Read a session's output.
    pub const READ: &str = "read";
    /// Search a session's full output.
    pub const GREP: &str = "grep";
    /// Send bytes to stdin / the PTY.
    pub const WRITE: &str = "write";
    /// Terminate a session's tree.
    pub const KILL: &str = "kill";
    /// List sessions.
    pub const LIST: &str = "list";
    /// Terminate if running, delete the spool, drop the record.
    pub const FORGET: &str = "forget";
    /// Forget finished sessions (or all).
    pub const CLEANUP: &str = "cleanup";
    /// Resize a PTY.
    pub const RESIZE: &str = "resize";
    /// Daemon memory and output accounting.
    pub const STATS: &str = "stats";
    /// Daemon identity (pid, socket, containment).
    pub const STATUS: &str = "status";
    /// Stop the daemon (terminating every running session).
    pub const SHUTDOWN: &str = "shutdown";
    /// Add a schedule: a named, persisted template for `run` fired on an interval or a cron.
    pub const SCHEDULE_ADD: &str = "schedule.add";
    /// List the schedules with their counters.
    pub const SCHEDULE_LIST: &str = "schedule.list";
    /// Remove a schedule (its runs stay until pruned or forgotten).
    pub const SCHEDULE_REMOVE: &str = "schedule.remove";
    /// Stop firing a schedule until it is resumed.
    pub const SCHEDULE_PAUSE: &str = "schedule.pause";
    /// Fire a paused schedule again (from the next tick on; missed ticks are not caught up).
    pub const SCHEDULE_RESUME: &str = "schedule.resume";
    /// A schedule's recent runs (its sessions), newest first.
    pub const SCHEDULE_RUNS: &str = "schedule.runs";
}

/// JSON-RPC error codes: the standard ones and Stockade's (-32000..-32099).
pub mod code {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object (or too large).
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Wrong or missing parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// A bug or an unexpected OS error in the daemon.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No session with that id.
    pub const NO_SUCH_SESSION: i64 = -32001;
    /// A configured limit was reached (sessions, memory budget, disk budget).
    pub const LIMIT_REACHED: i64 = -32002;
    /// The command could not be started (bad cwd, no such shell, …).
    pub const SPAWN_FAILED: i64 = -32003;
    /// The session does not accept this (e.g. `write` without stdin, `resize` without a PTY).
    pub const NOT_SUPPORTED: i64 = -32004;
    /// A disk or state-directory problem.
    pub const STORAGE: i64 = -32005;
    /// The daemon is shutting down.
    pub const SHUTTING_DOWN: i64 = -32006;
    /// `write` did not get (all) its bytes to the command: it closed its input or exited, or did
    /// not read within the input timeout. `data.written` / `data.total` say how far it got.
    pub const INPUT_FAILED: i64 = -32007;
    /// No schedule with that name.
    pub const NO_SUCH_SCHEDULE: i64 = -32008;
}

/// A request (with an `id`) or a notification (without).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request id, echoed in the response; absent for a notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// The method name.
    pub method: String,
    /// The parameters (an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// A response: exactly one of `result` and `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request's id (`null` when it could not be read).
    pub id: Value,
    /// The result, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// One of [`code`].
    pub code: i64,
    /// One sentence saying what went wrong and what to do.
    pub message: String,
    /// Optional details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RpcError {}

impl Response {
    /// A success response.
    pub fn ok(id: Value, result: Value) -> Response {
        Response { jsonrpc: JSONRPC_VERSION.into(), id, result: Some(result), error: None }
    }

    /// An error response.
    pub fn err(id: Value, code: i64, message: impl Into<String>) -> Response {
        Response {
            jsonrpc: JSONRPC_VERSION.into(),
            id,
            result: None,
            error: Some(RpcError { code, message: message.into(), data: None }),
        }
    }
}

/// PTY size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    /// Rows (default 24).
    pub rows: u16,
    /// Columns (default 80).
    pub cols: u16,
}

impl Default for PtySize {
    fn default() -> Self {
        PtySize { rows: 24, cols: 80 }
    }
}

/// What a non-PTY session's stdin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StdinMode {
    /// `/dev/null` (default), so a command waiting on stdin does not hang forever.
    #[default]
    Null,
    /// A pipe fed by `write`; `close_stdin` sends EOF.
    Pipe,
}

/// `run` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// The shell command string.
    pub command: String,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The shell (default `/bin/sh`).
    #[serde(default)]
    pub shell: Option<PathBuf>,
    /// Login shell (`-lc`).
    #[serde(default)]
    pub login: bool,
    /// Answer after `yield_ms` even if it is still running, and keep it running.
    #[serde(default)]
    pub background: bool,
    /// Terminate the tree after this long.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// How long to wait for exit before answering (foreground: until exit unless set; background:
    /// default 0).
    #[serde(default)]
    pub yield_ms: Option<u64>,
    /// Run on a pseudo-terminal of this size.
    #[serde(default)]
    pub pty: Option<PtySize>,
    /// stdin for a non-PTY session.
    #[serde(default)]
    pub stdin: StdinMode,
    /// Dedup key: if an active session has it, answer with that one.
    #[serde(default)]
    pub source: Option<String>,
    /// Capture mode.
    #[serde(default)]
    pub capture: Capture,
    /// Bound on the answer's bytes.
    #[serde(default)]
    pub max_bytes: Option<usize>,
    /// Bound on the answer's lines.
    #[serde(default)]
    pub max_lines: Option<usize>,
    /// Which part of the output the answer shows (`tail` default).
    #[serde(default)]
    pub direction: Option<ReadMode>,
    /// Hot-tail size.
    #[serde(default)]
    pub retained_cap: Option<usize>,
    /// Disk cap.
    #[serde(default)]
    pub disk_cap: Option<u64>,
    /// Disk-cap policy.
    #[serde(default)]
    pub disk_policy: Option<DiskPolicy>,
}

/// `read` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// The session id.
    pub id: String,
    /// Cursor: show what follows this offset (`delta` mode).
    #[serde(default)]
    pub after: Option<u64>,
    /// Bound on the answer's bytes.
    #[serde(default)]
    pub max_bytes: Option<usize>,
    /// Bound on the answer's lines.
    #[serde(default)]
    pub max_lines: Option<usize>,
    /// Which part to show (default `delta` when `after` is given, else `tail`).
    #[serde(default)]
    pub mode: Option<ReadMode>,
    /// Only this stream.
    #[serde(default)]
    pub stream: Option<Stream>,
    /// Long poll: wait up to this long for output after `after`, or for the end.
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// Exact bytes (base64 in `bytes_b64`), no notice, no lossy conversion.
    #[serde(default)]
    pub raw: bool,
    /// How a PTY session's bytes become text (default `text`: escape codes stripped). Ignored by
    /// non-PTY sessions except `screen`, which needs a terminal.
    #[serde(default)]
    pub render: Option<Render>,
}

/// How a view turns a PTY session's bytes into text. The spool always keeps the raw bytes and
/// cursors are always raw byte offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Render {
    /// Escape sequences removed, `\r` applied to the line (`\r\n` reads as `\n`). Default.
    #[default]
    Text,
    /// The bytes as the program sent them (escape codes included), lossy UTF-8.
    Raw,
    /// The screen a terminal of the session's size shows now (for `top`, `less`, editors):
    /// `output` is the screen's text, one line per row; `next_cursor` is the end of the log.
    Screen,
}

/// `read` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadResult {
    /// The session id.
    pub id: String,
    /// The session's state.
    #[serde(flatten)]
    pub state: SessionState,
    /// The bounded view.
    #[serde(flatten)]
    pub view: OutputView,
    /// With `raw`: the exact bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_b64: Option<String>,
}

/// `grep` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    /// The session id.
    pub id: String,
    /// The regular expression.
    pub pattern: String,
    /// Context lines before and after each match.
    #[serde(default)]
    pub context: usize,
    /// Cap on matching lines (default 200).
    #[serde(default)]
    pub max_matches: Option<usize>,
    /// Case-insensitive.
    #[serde(default)]
    pub ignore_case: bool,
}

/// `grep` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepResultMsg {
    /// The session id.
    pub id: String,
    /// Matching lines and context.
    pub lines: Vec<GrepLine>,
    /// Matching lines returned.
    pub matches: u64,
    /// Whether the cap stopped the search.
    pub truncated: bool,
    /// The spool searched.
    pub spool_path: PathBuf,
}

/// How long `write` collects output after writing when `yield_ms` is not given.
pub const DEFAULT_WRITE_YIELD_MS: u64 = 250;

/// `write` parameters: send bytes to a session's stdin pipe or terminal, then collect output.
/// The answer is a [`ReadResult`]: the output printed from just before the write (a delta from
/// the cursor the log had then), so what the command echoed and answered is in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// The session id.
    pub id: String,
    /// Text to send (`\n` presses Enter; control characters allowed, e.g. `\u0003` Ctrl-C).
    #[serde(default)]
    pub chars: Option<String>,
    /// Bytes to send, base64 (instead of `chars`).
    #[serde(default)]
    pub bytes_b64: Option<String>,
    /// After writing, end the input: a pipe is closed (the command reads end of file); a
    /// terminal gets its end-of-file character (Ctrl-D).
    #[serde(default)]
    pub close_stdin: bool,
    /// Collect output for this long before answering (default [`DEFAULT_WRITE_YIELD_MS`]; the
    /// answer comes earlier if the session ends).
    #[serde(default)]
    pub yield_ms: Option<u64>,
    /// Bound on the answer's bytes.
    #[serde(default)]
    pub max_bytes: Option<usize>,
}

/// `kill` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillParams {
    /// The session id.
    pub id: String,
    /// The first signal (`SIGTERM` default; `SIGINT`, `SIGKILL`, `TERM`, `9`, …).
    #[serde(default)]
    pub signal: Option<String>,
    /// Grace before `SIGKILL`, milliseconds.
    #[serde(default)]
    pub grace_ms: Option<u64>,
}

/// `kill` result: the terminate report for the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillResult {
    /// The session id.
    pub id: String,
    /// The session's state after the kill.
    #[serde(flatten)]
    pub state: SessionState,
    /// What terminating did.
    pub report: TerminateReport,
}

/// One session as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// The state.
    #[serde(flatten)]
    pub state: SessionState,
    /// The command.
    pub command: String,
    /// Root pid.
    pub pid: u32,
    /// Process group.
    pub pgid: u32,
    /// Live processes of the session (count; 0 when finished).
    pub processes: usize,
    /// Bytes printed.
    pub total_bytes: u64,
    /// Lines printed.
    pub total_lines: u64,
    /// Bytes not on disk.
    pub dropped_bytes: u64,
    /// Start, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// End, ms since the Unix epoch.
    pub finished_at_ms: Option<u64>,
    /// Wall time so far or in all.
    pub wall_time_ms: u64,
    /// Containment.
    pub containment: ContainmentMethod,
    /// Capture mode.
    pub capture: Capture,
    /// Whether it runs on a PTY.
    pub pty: bool,
    /// The terminal's size, for a PTY session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty_size: Option<PtySize>,
    /// Whether it takes input now (`write`): a PTY or an open stdin pipe, and still running.
    #[serde(default)]
    pub stdin_open: bool,
    /// Dedup key.
    pub source: Option<String>,
    /// The spool file.
    pub spool_path: PathBuf,
}

/// `list` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    /// Sessions, oldest first.
    pub sessions: Vec<SessionInfo>,
}

/// `forget` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetParams {
    /// The session id.
    pub id: String,
}

/// `forget` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgetResult {
    /// The session id.
    pub id: String,
    /// The terminate report, if it was still running.
    pub report: Option<TerminateReport>,
    /// Bytes of spool removed.
    pub removed_bytes: u64,
}

/// `cleanup` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CleanupParams {
    /// Also terminate and forget running sessions (default: finished ones only).
    #[serde(default)]
    pub all: bool,
}

/// `cleanup` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupResult {
    /// Ids forgotten.
    pub forgotten: Vec<String>,
    /// Bytes of spool removed.
    pub removed_bytes: u64,
}

/// `resize` parameters: set a PTY session's terminal size (the foreground job gets `SIGWINCH`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeParams {
    /// The session id.
    pub id: String,
    /// Rows (1..=500).
    pub rows: u16,
    /// Columns (1..=1000).
    pub cols: u16,
}

/// `resize` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeResult {
    /// The session id.
    pub id: String,
    /// The terminal's size now.
    #[serde(flatten)]
    pub size: PtySize,
}

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
    /// Sessions known.
    pub sessions: usize,
}

/// Smallest interval a schedule may have (`every`); shorter ones are refused.
pub const MIN_SCHEDULE_INTERVAL_MS: u64 = 1_000;
/// Most schedules one daemon keeps.
pub const MAX_SCHEDULES: usize = 256;
/// Finished runs kept per schedule by default (oldest forgotten first, never an active one).
pub const DEFAULT_SCHEDULE_KEEP_RUNS: usize = 20;
/// Largest `keep_runs` a schedule may ask for.
pub const MAX_SCHEDULE_KEEP_RUNS: usize = 1_000;
/// Bytes the spools of one schedule's finished runs may hold together by default; past it the
/// oldest finished runs are forgotten.
pub const DEFAULT_SCHEDULE_DISK_BUDGET: u64 = 1024 * 1024 * 1024;

/// What a schedule does with the ticks it missed while the daemon was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// At start-up, fire once for all the missed ticks together (default), never a burst.
    #[default]
    Once,
    /// Drop the missed ticks; fire at the next tick.
    Skip,
}

/// The `run` a schedule fires each time: a background, non-PTY run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRunTemplate {
    /// The shell command string.
    pub command: String,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The shell (default `/bin/sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<PathBuf>,
    /// Login shell (`-lc`).
    #[serde(default)]
    pub login: bool,
    /// Terminate each run's tree after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Capture mode.
    #[serde(default)]
    pub capture: Capture,
    /// Hot-tail size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_cap: Option<usize>,
    /// Disk cap of each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_cap: Option<u64>,
    /// Disk-cap policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_policy: Option<DiskPolicy>,
}

/// `schedule.add` parameters. Exactly one of `every` and `cron`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleAddParams {
    /// The schedule's name: 1–64 of `A-Z a-z 0-9 . _ -`, unique in the daemon.
    pub name: String,
    /// A fixed interval, `humantime` syntax (`30s`, `5m`, `1h 30m`); at least
    /// [`MIN_SCHEDULE_INTERVAL_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// A cron expression (5 fields, or 6 with seconds first), in the daemon's local time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The `source` of every run (default `schedule:<name>`): a fire while a session with this
    /// source is active is skipped and counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Missed ticks after downtime (default `once`).
    #[serde(default)]
    pub catch_up: CatchUp,
    /// Finished runs kept (default [`DEFAULT_SCHEDULE_KEEP_RUNS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_runs: Option<usize>,
    /// Bytes the spools of finished runs may hold (default [`DEFAULT_SCHEDULE_DISK_BUDGET`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_budget: Option<u64>,
    /// What each fire runs.
    pub run: ScheduleRunTemplate,
}

/// Parameters naming one schedule (`schedule.remove`, `schedule.pause`, `schedule.resume`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleNameParams {
    /// The schedule's name.
    pub name: String,
}

/// One schedule as `schedule.list` (and `add`, `remove`, `pause`, `resume`) show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleInfo {
    /// The name.
    pub name: String,
    /// The `source` of its runs.
    pub source: String,
    /// The interval, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// The cron expression, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// What each fire runs.
    pub run: ScheduleRunTemplate,
    /// Whether it is paused.
    pub paused: bool,
    /// Missed-tick policy.
    pub catch_up: CatchUp,
    /// Finished runs kept.
    pub keep_runs: usize,
    /// Bytes the spools of finished runs may hold.
    pub disk_budget: u64,
    /// When it was added, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// The last tick handled (fired or skipped), ms since the Unix epoch.
    #[serde(default)]
    pub last_fire_ms: Option<u64>,
    /// The next tick, ms since the Unix epoch (`None` when paused or the cron has no next).
    #[serde(default)]
    pub next_fire_ms: Option<u64>,
    /// Ticks that started a session.
    pub fires: u64,
    /// Ticks skipped because a session with this source was still active.
    pub skipped_overlap: u64,
    /// Ticks missed while the daemon was down and not caught up.
    pub missed: u64,
    /// Ticks whose run could not start (a limit, a bad cwd, …); `last_error` says why.
    pub failed_fires: u64,
    /// Why the last failed fire failed.
    #[serde(default)]
    pub last_error: Option<String>,
    /// The session of the last fire.
    #[serde(default)]
    pub last_session: Option<String>,
    /// The session with this source running now, if any.
    #[serde(default)]
    pub active_session: Option<String>,
}

/// `schedule.list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleListResult {
    /// Every schedule, by name.
    pub schedules: Vec<ScheduleInfo>,
}

/// `schedule.runs` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRunsParams {
    /// The schedule's name.
    pub name: String,
    /// Most runs to show (default all kept).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One run of a schedule: a session with its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRun {
    /// The session id (`read`, `grep`, `kill` work on it).
    pub id: String,
    /// The state.
    #[serde(flatten)]
    pub state: SessionState,
    /// Start, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// End, ms since the Unix epoch.
    pub finished_at_ms: Option<u64>,
    /// Wall time so far or in all.
    pub wall_time_ms: u64,
    /// Bytes printed.
    pub total_bytes: u64,
    /// Bytes on disk in its spool.
    pub spooled_bytes: u64,
}

/// `schedule.runs` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRunsResult {
    /// The schedule.
    pub schedule: ScheduleInfo,
    /// Its runs the daemon keeps, newest first.
    pub runs: Vec<ScheduleRun>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_params_reject_unknown_fields() {
        let bad = serde_json::json!({"command": "true", "bogus": 1});
        assert!(serde_json::from_value::<RunParams>(bad).is_err());
        let ok: RunParams = serde_json::from_value(serde_json::json!({"command": "true"})).unwrap();
        assert_eq!(ok.command, "true");
    }

    #[test]
    fn responses_carry_exactly_one_of_result_and_error() {
        let ok = serde_json::to_value(Response::ok(1.into(), serde_json::json!({}))).unwrap();
        assert!(ok.get("error").is_none());
        let err = serde_json::to_value(Response::err(Value::Null, code::PARSE_ERROR, "x")).unwrap();
        assert!(err.get("result").is_none());
        assert_eq!(err["error"]["code"], -32700);
    }
}
