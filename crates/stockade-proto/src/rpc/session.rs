//! The session methods' parameters and results: `run`, `read`, `grep`, `write`, `kill`, `list`,
//! `forget`, `cleanup`, `resize`, and the base64 of `bytes_b64` fields.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::{
    Capture, ContainmentMethod, DiskPolicy, GrepLine, OutputView, ReadMode, SessionState, Stream,
    TerminateReport,
};

/// Encode bytes for a `bytes_b64` field (standard alphabet, padded).
pub fn encode_bytes(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decode a `bytes_b64` field (standard alphabet, padded).
pub fn decode_bytes(b64: &str) -> Result<Vec<u8>, base64::DecodeError> {
    base64::engine::general_purpose::STANDARD.decode(b64)
}

/// PTY size.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// The environment the command starts from instead of the daemon's: the caller's whole
    /// environment (what the CLI and `stockade mcp` send), or `{}` for an empty one
    /// (`--env-clear`). `env` is applied on top, then the session marker (and `TERM` on a PTY,
    /// unless set). Absent: the daemon's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_env: Option<BTreeMap<String, String>>,
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
    /// This session's grace between the polite signal and `SIGKILL` whenever its tree is
    /// terminated (timeout, disk cap, a `kill` without its own grace, shutdown); default the
    /// engine's, at most 60 000 (`MAX_GRACE_MS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
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
    /// Idempotency key (at most 128 printable ASCII characters): a `run` carrying the key of a
    /// session this daemon still keeps, running or finished, starts nothing and answers as the
    /// first did, with that session (a retry after a timeout or a lost connection). Clients
    /// make one per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
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
    /// End the `yield_ms` wait early at the first output line matching this regex (see
    /// [`WaitReport`]).
    #[serde(default)]
    pub until: Option<String>,
    /// The sandbox to run under (absent: the daemon's default; never looser than its ceiling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::Sandbox>,
    /// The most this run may ask for besides the daemon's own ceiling: the policy of the door
    /// that sends it (`stockade mcp --sandbox …`). The daemon holds the run to it with the same
    /// rule as its own ceiling; a run naming no sandbox runs under it, and limits the run leaves
    /// unset are taken from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<crate::Sandbox>,
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
    /// Long poll: wait up to this long for output after `after`, or for the end. With
    /// `collect` (or `until`), the wait goes on past the first new byte (see `collect`).
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// Collect: the wait ends only when `wait_ms` passes, the session ends, the answer is full
    /// (`max_bytes`/`max_lines` after the cursor) or a new line matches `until` — not at the
    /// first new byte (what a follower streaming output wants, and the default).
    #[serde(default)]
    pub collect: bool,
    /// End the wait at the first new line (after the cursor) matching this regex (implies
    /// `collect`).
    #[serde(default)]
    pub until: Option<String>,
    /// Exact bytes (base64 in `bytes_b64`), no notice, no lossy conversion.
    #[serde(default)]
    pub raw: bool,
    /// How a PTY session's bytes become text (default `text`: escape codes stripped). Ignored by
    /// non-PTY sessions except `screen`, which needs a terminal.
    #[serde(default)]
    pub render: Option<Render>,
    /// How a raw read's bytes travel (default `base64`). Never sent when absent: a daemon that
    /// predates it refuses the field, and its client falls back to base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<ReadEncoding>,
}

/// How the bytes of a raw `read` travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadEncoding {
    /// Standard base64 inside the answer (`bytes_b64`). Default.
    #[default]
    Base64,
    /// The bytes themselves, after the answer (`binary_len` of them): on the Unix socket right
    /// after the answer's line, on the WebSocket door as the binary message that follows it.
    Binary,
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// The session's wall time: from spawn to its end, or to this answer while running.
    #[serde(default)]
    pub wall_time_ms: u64,
    /// How the call's wait went, when it waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitReport>,
    /// With `raw`: the exact bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_b64: Option<String>,
    /// With `encoding: "binary"`: how many raw bytes follow the answer on the wire. Left out
    /// of the JSON schema (the MCP tools' output schemas): an MCP answer never carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub binary_len: Option<u64>,
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
    /// Give up with a `LIMIT_REACHED` error after this long (default 30 000, at most 60 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `grep` result.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// End the wait early at the first new line matching this regex.
    #[serde(default)]
    pub until: Option<String>,
    /// Idempotency key (1–128 printable ASCII characters): a `write` carrying the key of one
    /// the daemon has seen for this session types nothing and is answered from where that
    /// first write started (a retry after a timeout or a lost connection). Clients make one
    /// per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// What ended a call's wait for output.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitEnd {
    /// The whole window passed.
    Window,
    /// The session ended.
    Exit,
    /// The answer was full (its `max_bytes` or `max_lines` arrived).
    Full,
    /// A new line matched `until`.
    Match,
    /// New output arrived (a plain long poll, without `collect`).
    Output,
    /// New output arrived and then nothing more for the quiet interval: the program (a REPL
    /// after a write to its terminal, usually) is waiting.
    Quiet,
}

/// The first new line that matched `until`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UntilMatch {
    /// The line (without its newline; escape codes removed on a terminal).
    pub line: String,
    /// Byte offset of the line's start in the log.
    pub offset: u64,
    /// Byte offset just after the line: read on from here with `after`.
    pub cursor: u64,
}

/// How a call's wait for output went: how long it took and what ended it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitReport {
    /// Milliseconds this call waited (not the session's wall time).
    pub waited_ms: u64,
    /// What ended the wait.
    pub ended_by: WaitEnd,
    /// The line that matched `until`, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<UntilMatch>,
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// `kill_many` parameters: several sessions (or every running one) ended together — every tree
/// signalled first, one grace, one `/proc` census per round for all of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillManyParams {
    /// The session ids (answered in this order).
    #[serde(default)]
    pub ids: Vec<String>,
    /// Every running session instead of `ids` (refused together with `ids`).
    #[serde(default)]
    pub all: bool,
    /// The first signal, as for `kill`.
    #[serde(default)]
    pub signal: Option<String>,
    /// Grace before `SIGKILL`, milliseconds.
    #[serde(default)]
    pub grace_ms: Option<u64>,
}

/// `kill_many` result: one entry per id, in the order asked (for `all`: oldest first).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillManyResult {
    /// One per session.
    pub results: Vec<KillOne>,
}

/// One session of a `kill_many`: its `kill` result, or why it could not be ended.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillOne {
    /// The session id as asked.
    pub id: String,
    /// What `kill` would have answered for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<KillResult>,
    /// Why it was not ended (e.g. no such session), in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One session as `list` shows it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// The state.
    #[serde(flatten)]
    pub state: SessionState,
    /// The command.
    pub command: String,
    /// The directory it runs in (absent only for sessions of an older Stockade started without
    /// one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
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
    /// The sandbox it runs under, in one line (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Forks its `pids` limit refused (absent: no such limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit_hits: Option<u64>,
}

/// Which sessions `list` shows, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateFilter {
    /// Only running sessions.
    Running,
    /// Only finished sessions (any terminal state).
    Finished,
}

/// `list` parameters (all optional: `{}` lists every session, oldest first).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// At most this many sessions: then the answer shows running sessions first (oldest
    /// first), then the newest finished ones, and `more` counts the rest.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only running or only finished sessions.
    #[serde(default)]
    pub state: Option<StateFilter>,
    /// Only sessions with this `source`.
    #[serde(default)]
    pub source: Option<String>,
    /// Only the session started with this idempotency key (none if the daemon keeps none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// `list` result.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    /// Sessions: oldest first, or with `limit` running first, then the newest finished.
    pub sessions: Vec<SessionInfo>,
    /// Sessions that matched the filters but were left out by `limit`.
    #[serde(default)]
    pub more: u64,
}

/// `restart` parameters: start a session's command again with everything it was started with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartParams {
    /// The session to start again.
    pub id: String,
    /// Terminate it first if it is still running (else a running session is refused).
    #[serde(default)]
    pub kill: bool,
    /// Idempotency key (1–128 printable ASCII characters) of the new run: a `restart` carrying
    /// the key of a session the daemon keeps starts nothing and answers with that session (a
    /// retry after a timeout or a lost connection). Clients make one per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
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

/// `hide` parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HideParams {
    /// Absolute paths (files or directories) no sandboxed command may read from now on: a
    /// door's secret the daemon was not started with (`stockade mcp --http --token-file`, its
    /// TLS key).
    pub paths: Vec<std::path::PathBuf>,
}

/// `hide` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HideResult {
    /// Every path hidden now besides the daemon's home, after this call (its own secrets and
    /// every path added by `hide`), canonical.
    pub hidden: Vec<std::path::PathBuf>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(encode_bytes(b""), "");
        assert_eq!(encode_bytes(b"f"), "Zg==");
        assert_eq!(encode_bytes(b"fo"), "Zm8=");
        assert_eq!(encode_bytes(b"foo"), "Zm9v");
        assert_eq!(encode_bytes(&[0xff, 0xfe, 0x00, 0x03]), "//4AAw==");
    }

    #[test]
    fn base64_round_trips_and_refuses_garbage() {
        assert_eq!(decode_bytes("aGVsbG8gd29ybGQ=").ok(), Some(b"hello world".to_vec()));
        assert_eq!(decode_bytes("AP8=").ok(), Some(vec![0, 255]));
        assert!(decode_bytes("!!").is_err());
    }
}
