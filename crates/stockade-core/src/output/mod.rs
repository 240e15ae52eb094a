//! The output log of one session: every byte a command prints, kept losslessly on disk and shown
//! to the model in bounded, honest views.
//!
//! # What this module owns
//!
//! * The **session directory** (0700) and the files in it (0600, created exclusively, never
//!   through a symlink): the **spool** `output.log` (every byte, arrival order, append-only), the
//!   **stream index** `streams.idx` (stream transitions, see [`index`](self)), and `log.json`
//!   (totals, streams, gaps; written by [`OutputLog::finish`]).
//! * The **hot tail** (`pipe` capture, while the command runs): the newest `retained_cap` bytes
//!   in a fixed ring, so tail and recent-delta reads never touch the disk. Nothing else in a log
//!   grows with output, so [`OutputLog::held_bytes`] stays within
//!   `retained_cap + LOG_BOOKKEEPING_BYTES`. A `file`-capture log has no ring at all, and
//!   [`OutputLog::finish`] releases the ring of a `pipe` log (every byte it held is on disk by
//!   then), so a log that is not being written costs only its bookkeeping: the daemon's memory
//!   depends on the *running* sessions only.
//! * **Cursors**: a cursor is a log offset (bytes since the start of the log), monotone. Reads are
//!   served from the ring where it covers them, else from the spool with `pread`. A reader locks
//!   the log only to snapshot counters and copy ring bytes, never while it waits on the disk.
//! * **Views** ([`OutputLog::read`]): `delta`/`head`/`tail`/`middle`, bounded by `max_bytes` and
//!   `max_lines`, cut on UTF-8 boundaries and line ends, with an omission notice the model can act
//!   on; [`OutputLog::read_raw`] for exact bytes; [`OutputLog::grep`] over the whole spool.
//! * The **disk cap** and disk-full handling: the spool stops at the cap (or at `ENOSPC`); what
//!   is not on disk is reported as a [`Gap`], never dropped silently. With `keep-head-tail`,
//!   `finish()` writes the hot tail after the gap so the spool ends with the newest output.
//! * **Draining** ([`drain`]): one blocking loop per session that reads the pipes into the log
//!   whether or not anyone reads, so a command never blocks on a full pipe.
//!
//! # Offsets after a gap
//!
//! Until the spool stops, log offset = spool offset. If it stops at log offset `S` and `finish()`
//! writes the hot tail `[T', total)` after it, those bytes sit at spool offset `S..`; the log
//! keeps that one mapping (there is at most one gap per log).
//!
//! # Capture modes
//!
//! `pipe`: [`drain`] calls [`OutputLog::append`]. `file`: the child writes to
//! [`OutputLog::child_fd`] itself and the engine calls [`OutputLog::sync_from_file`] to pick up
//! what was written: it reads only the new bytes, in bounded chunks, to count them and their
//! newlines, and copies nothing into memory; every read of a `file` log is served from the
//! spool by offset (`pread`, in practice from the page cache). `file` capture supports only the `kill` disk policy (the child writes
//! straight to disk, so the log cannot drop the middle); asking for `keep-head-tail` is an error.

mod drain;
mod grep;
mod hot_tail;
mod index;
mod render;
mod screen;
mod spool;
mod view;

pub use drain::{DrainCancel, DrainSummary, drain};
pub use screen::{MAX_SCREEN_COLS, MAX_SCREEN_ROWS, SCREEN_TAIL_BYTES, render_screen, strip_ansi};

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};
use stockade_proto::{
    Capture, DEFAULT_DISK_CAP, DEFAULT_RETAINED_CAP, DiskPolicy, Gap, GrepResult, OutputLimits,
    OutputView, ReadMode, Stream,
};
use tokio::sync::watch;

use hot_tail::HotTail;
use index::{IndexView, PendingIndex, Transition, stream_slot};

/// Upper bound on `max_bytes` of one view (a caller asking for more gets this much).
pub const MAX_READ_BYTES: usize = 16 * 1024 * 1024;
/// Upper bound on `max_bytes` of one raw read.
pub const MAX_RAW_READ_BYTES: usize = 16 * 1024 * 1024;
/// Bound on what a log holds in memory besides its ring: the struct, the pending stream index,
/// paths. [`OutputLog::held_bytes`] never exceeds `retained_cap` plus this, and never exceeds
/// this alone for a `file`-capture log or a finished log.
pub const LOG_BOOKKEEPING_BYTES: usize = 16 * 1024;
/// Name of the metadata file `finish()` writes.
pub const META_FILE: &str = "log.json";
/// Chunk size for reading the spool in bounded pieces (file-mode sync, recovery, final tail).
const CHUNK_BYTES: usize = 64 * 1024;
/// Chunk size for `file`-capture sync: it only counts newlines in the new bytes, so a small,
/// transient buffer is enough.
const SYNC_CHUNK_BYTES: usize = 16 * 1024;
/// A read retries this often when the ring moved past bytes that were never spooled (only
/// possible after the spool stopped) before giving up.
const READ_ATTEMPTS: usize = 4;
/// Version of the `log.json` layout.
const META_VERSION: u32 = 1;
/// Reason recorded when the spool reached its disk cap.
pub const REASON_DISK_CAP: &str = "disk cap";
/// Reason recorded when a spool write failed with `ENOSPC`/`EDQUOT`.
pub const REASON_DISK_FULL: &str = "disk full";

/// Newlines in `bytes`.
pub(crate) fn count_newlines(bytes: &[u8]) -> u64 {
    // A plain counting loop vectorises well; memchr_iter is slower on newline-dense output.
    bytes.iter().map(|&b| u64::from(b == b'\n')).sum()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves counters that are still consistent enough to read.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Everything that can go wrong with an output log.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A symlink sits where the session directory or one of its files should be.
    #[error("refusing to follow a symlink at {path}")]
    SymlinkRefused {
        /// Where the symlink is.
        path: PathBuf,
    },
    /// The session directory already exists (a new log needs a fresh one).
    #[error("session directory {path} already exists")]
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// A file of the log is missing.
    #[error("{path} not found")]
    NotFound {
        /// The missing file.
        path: PathBuf,
    },
    /// An I/O error from the OS.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The stream index has a record that cannot be decoded.
    #[error("stream index record {record} is corrupt")]
    IndexCorrupt {
        /// Record number.
        record: u64,
    },
    /// A stream filter was asked for but the index could not be written.
    #[error("stream filter unavailable: {0}")]
    IndexUnavailable(String),
    /// The grep pattern does not compile.
    #[error("bad regex {pattern:?}: {reason}")]
    BadRegex {
        /// The pattern as given.
        pattern: String,
        /// Why it does not compile.
        reason: String,
    },
    /// A line is longer than grep can hold in memory.
    #[error("grep: {0}")]
    Grep(String),
    /// `append`/`sync_from_file` after `finish()`.
    #[error("the output log is finished")]
    Finished,
    /// Writing to a log opened read-only with [`OutputLog::open`].
    #[error("the output log is open read-only")]
    ReadOnly,
    /// An operation that does not match the log's capture mode.
    #[error("{op} needs {needed:?} capture")]
    WrongCapture {
        /// The operation.
        op: &'static str,
        /// The capture mode it needs.
        needed: Capture,
    },
    /// A configuration the log cannot honour.
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    /// `log.json` is unreadable.
    #[error("log metadata {path}: {message}")]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A read kept losing a race with the ring after the spool stopped.
    #[error("output moved on faster than it could be read; retry")]
    ReadRaced,
}

impl OutputError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> OutputError {
        OutputError::Io { context: context.into(), source }
    }
}

/// How a session's log is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputConfig {
    /// Bytes of hot tail kept in memory.
    pub retained_cap: usize,
    /// Bytes the spool may hold.
    pub disk_cap: u64,
    /// What happens at the disk cap (or when the disk is full).
    pub disk_policy: DiskPolicy,
    /// Who writes the spool.
    pub capture: Capture,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            retained_cap: DEFAULT_RETAINED_CAP,
            disk_cap: DEFAULT_DISK_CAP,
            disk_policy: DiskPolicy::default(),
            capture: Capture::default(),
        }
    }
}

/// One bounded read of a log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadRequest {
    /// Which part to show.
    pub mode: ReadMode,
    /// Cursor for `delta`: show what follows this log offset.
    pub after: u64,
    /// Bounds on the answer.
    pub limits: OutputLimits,
    /// Only this stream's bytes.
    pub stream: Option<Stream>,
    /// Session label (e.g. `sh-3`) for the "read more" hint of the notice.
    pub label: Option<String>,
}

/// One grep over a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepRequest {
    /// The regex (Rust `regex` syntax).
    pub pattern: String,
    /// Context lines before and after each match.
    pub context: usize,
    /// Stop after this many matching lines.
    pub max_matches: usize,
    /// Match case-insensitively.
    pub ignore_case: bool,
    /// Only lines that start in this stream.
    pub stream: Option<Stream>,
}

impl Default for GrepRequest {
    fn default() -> Self {
        GrepRequest {
            pattern: String::new(),
            context: 0,
            max_matches: grep::DEFAULT_MAX_MATCHES,
            ignore_case: false,
            stream: None,
        }
    }
}

/// The spool stopped taking bytes (disk cap or disk full).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapHit {
    /// The policy in force.
    pub policy: DiskPolicy,
    /// `disk cap`, `disk full`, or the write error.
    pub reason: String,
    /// Log offset where the spool stopped.
    pub at: u64,
}

/// What [`OutputLog::append`] (or [`OutputLog::sync_from_file`]) did with the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Every byte is in the spool.
    Written,
    /// This call hit the disk cap or a full disk. With [`DiskPolicy::Kill`] the caller must now
    /// terminate the command; bytes past the cap are counted and kept in the hot tail but not
    /// written (they become a [`Gap`]).
    CapReached {
        /// The policy in force.
        policy: DiskPolicy,
        /// `disk cap`, `disk full`, or the write error.
        reason: String,
    },
    /// The spool had already stopped: the bytes were counted and kept in the hot tail only.
    NotSpooled {
        /// The policy in force.
        policy: DiskPolicy,
    },
}

/// Per-stream byte totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamBytes {
    /// Standard output.
    pub stdout: u64,
    /// Standard error.
    pub stderr: u64,
    /// PTY.
    pub pty: u64,
    /// `file` capture (stdout and stderr together).
    pub combined: u64,
}

impl StreamBytes {
    fn from_slots(s: [u64; 4]) -> StreamBytes {
        StreamBytes { stdout: s[0], stderr: s[1], pty: s[2], combined: s[3] }
    }
    fn slots(&self) -> [u64; 4] {
        [self.stdout, self.stderr, self.pty, self.combined]
    }
}

/// Counters of a log (cheap: no I/O).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStats {
    /// Bytes printed (all streams).
    pub total_bytes: u64,
    /// Bytes per stream.
    pub stream_bytes: StreamBytes,
    /// Newline-terminated lines plus one if the last line is incomplete.
    pub total_lines: u64,
    /// Newlines printed.
    pub newlines: u64,
    /// The last byte printed is not a newline.
    pub last_line_incomplete: bool,
    /// Bytes in the hot tail.
    pub hot_tail_bytes: u64,
    /// Bytes in the spool file.
    pub spooled_bytes: u64,
    /// Bytes that are not on disk and never will be (sum of `gaps`).
    pub dropped_bytes: u64,
    /// The ranges not on disk.
    pub gaps: Vec<Gap>,
    /// The spool stopped (disk cap / disk full), if it did.
    pub cap_reached: Option<CapHit>,
    /// No more output will come.
    pub finished: bool,
}

/// What a long-poll waits on; [`OutputLog::subscribe`] hands out receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes printed so far.
    pub total_bytes: u64,
    /// The spool stopped (disk cap or disk full).
    pub cap_reached: bool,
    /// No more output will come.
    pub finished: bool,
}

/// The hot tail written after the gap by `finish()`: log `[log_start, total)` is at spool
/// offset `phys_start..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct TailSegment {
    log_start: u64,
    phys_start: u64,
    /// Newlines in the log before `log_start` (for grep line numbers after the gap).
    newlines_before: u64,
}

/// Where the spool stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stop {
    hit: CapHit,
    /// Newlines in the log before `hit.at`.
    newlines_before: u64,
}

/// Mutable state, behind one short-held mutex.
#[derive(Debug)]
struct State {
    total: u64,
    stream_bytes: [u64; 4],
    newlines: u64,
    last_byte: Option<u8>,
    ring: HotTail,
    /// Bytes in the spool file (its physical length).
    spooled: u64,
    stop: Option<Stop>,
    tail: Option<TailSegment>,
    current: Option<Stream>,
    index: PendingIndex,
    index_error: Option<String>,
    finished: bool,
}

impl State {
    fn new(retained_cap: usize) -> State {
        State {
            total: 0,
            stream_bytes: [0; 4],
            newlines: 0,
            last_byte: None,
            ring: HotTail::new(retained_cap),
            spooled: 0,
            stop: None,
            tail: None,
            current: None,
            index: PendingIndex::new(0),
            index_error: None,
            finished: false,
        }
    }

    fn stop_at(&self) -> u64 {
        self.stop.as_ref().map_or(u64::MAX, |s| s.hit.at)
    }

    fn total_lines(&self) -> u64 {
        self.newlines + u64::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }

    /// Bytes that are neither on disk nor in the ring: `[start, end)`.
    fn hole(&self) -> Option<(u64, u64)> {
        let stop = self.stop.as_ref()?.hit.at;
        let readable_from = self.ring.start().min(self.tail.map_or(self.total, |t| t.log_start));
        (readable_from > stop).then_some((stop, readable_from))
    }

    /// Bytes that are not on disk and never will be.
    fn gap(&self, policy: DiskPolicy) -> Option<Gap> {
        let stop = self.stop.as_ref()?;
        let end = if let Some(t) = self.tail {
            t.log_start
        } else if self.finished || policy == DiskPolicy::Kill {
            self.total
        } else {
            // keep-head-tail, still running: the ring will reach the disk at finish.
            self.ring.start().max(stop.hit.at)
        };
        (end > stop.hit.at).then(|| Gap {
            start: stop.hit.at,
            end,
            reason: stop.hit.reason.clone(),
        })
    }

    fn progress(&self) -> Progress {
        Progress {
            total_bytes: self.total,
            cap_reached: self.stop.is_some(),
            finished: self.finished,
        }
    }
}

/// `log.json`: what `open()` needs to serve reads of a finished log.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    version: u32,
    spool_path: PathBuf,
    total_bytes: u64,
    stream_bytes: StreamBytes,
    newlines: u64,
    last_line_incomplete: bool,
    last_byte: Option<u8>,
    spooled_bytes: u64,
    stop: Option<Stop>,
    tail: Option<TailSegment>,
    gaps: Vec<Gap>,
    index_records: u64,
    index_error: Option<String>,
    config: OutputConfig,
}

/// One session's output log. `Send + Sync`; share it as `Arc<OutputLog>`.
#[derive(Debug)]
pub struct OutputLog {
    dir: PathBuf,
    spool_path: PathBuf,
    config: OutputConfig,
    dir_fd: OwnedFd,
    spool: File,
    index_file: Arc<File>,
    /// Serialises writers (append, sync, finish); never taken by readers.
    append_lock: Mutex<()>,
    state: Mutex<State>,
    progress: watch::Sender<Progress>,
    writable: bool,
}

/// A piece of a collected window: `len` bytes at `buf[pos..]` are log bytes `log..`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    pos: usize,
    log: u64,
    len: usize,
}

/// Bytes gathered for a view, with where each piece came from.
struct Collected {
    buf: Vec<u8>,
    pieces: Vec<Piece>,
    /// The walk reached its end (forward) or its floor (backward).
    complete: bool,
}

impl Collected {
    /// Log offset just past buffer position `i` (exclusive end of `buf[..i]`).
    fn log_after(&self, i: usize, default: u64) -> u64 {
        if i == 0 {
            return self.pieces.first().map_or(default, |p| p.log);
        }
        let p = self.pieces.iter().rev().find(|p| p.pos < i).copied();
        p.map_or(default, |p| p.log + (i - p.pos) as u64)
    }

    /// Log offset of buffer position `i`.
    fn log_at(&self, i: usize, default: u64) -> u64 {
        let p = self.pieces.iter().rev().find(|p| p.pos <= i && i < p.pos + p.len).copied();
        p.map_or(default, |p| p.log + (i - p.pos) as u64)
    }
}

/// Counters and layout at one instant, taken under the lock.
struct Snap {
    total: u64,
    total_lines: u64,
    stream_bytes: [u64; 4],
    hole: Option<(u64, u64)>,
    gap: Option<Gap>,
    index: Option<IndexView>,
}

impl Snap {
    /// Bytes of `[x, y)` that can be read (not in the hole).
    fn readable(&self, x: u64, y: u64) -> u64 {
        let len = y.saturating_sub(x);
        match self.hole {
            Some((hs, he)) => len - he.min(y).saturating_sub(hs.max(x)).min(len),
            None => len,
        }
    }
}

impl OutputLog {
    /// Creates the session directory `dir` (parent must exist, `dir` must not; mode 0700), the
    /// spool and the stream index in it.
    pub fn create(dir: impl AsRef<Path>, config: OutputConfig) -> Result<OutputLog, OutputError> {
        let dir = dir.as_ref();
        if config.capture == Capture::File && config.disk_policy == DiskPolicy::KeepHeadTail {
            return Err(OutputError::Unsupported(
                "file capture supports only the kill disk policy: the child writes the spool itself, so the middle cannot be dropped".into(),
            ));
        }
        let dir_fd = spool::create_session_dir(dir)?;
        let spool = spool::create_file(&dir_fd, dir, spool::SPOOL_FILE)?;
        let index_file = spool::create_file(&dir_fd, dir, index::INDEX_FILE)?;
        // `file` capture keeps no ring: the child writes the spool, reads go to it by offset.
        let ring_cap = match config.capture {
            Capture::Pipe => config.retained_cap,
            Capture::File => 0,
        };
        let state = State::new(ring_cap);
        let (progress, _) = watch::channel(state.progress());
        Ok(OutputLog {
            spool_path: dir.join(spool::SPOOL_FILE),
            dir: dir.to_path_buf(),
            config,
            dir_fd,
            spool,
            index_file: Arc::new(index_file),
            append_lock: Mutex::new(()),
            state: Mutex::new(state),
            progress,
            writable: true,
        })
    }

    /// Opens the log in `dir` read-only (for `stockade read`/`grep` from another process).
    /// Without `log.json` (the writer died) the counters are rebuilt by scanning the spool and
    /// the stream index; gap information is then unknown.
    pub fn open(dir: impl AsRef<Path>) -> Result<OutputLog, OutputError> {
        let dir = dir.as_ref();
        let dir_fd = spool::open_session_dir(dir)?;
        let spool = File::from(spool::open_file(&dir_fd, dir, spool::SPOOL_FILE, OFlags::RDONLY)?);
        let index_file =
            File::from(spool::open_file(&dir_fd, dir, index::INDEX_FILE, OFlags::RDONLY)?);
        let meta = match spool::open_file(&dir_fd, dir, META_FILE, OFlags::RDONLY) {
            Ok(fd) => Some(Self::read_meta(fd, &dir.join(META_FILE))?),
            Err(OutputError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        let (config, state) = match meta {
            Some(m) => {
                let mut st = State::new(0);
                st.total = m.total_bytes;
                st.stream_bytes = m.stream_bytes.slots();
                st.newlines = m.newlines;
                st.last_byte = m.last_byte;
                st.ring = HotTail::empty_at(0, m.total_bytes);
                st.spooled = m.spooled_bytes;
                st.stop = m.stop;
                st.tail = m.tail;
                st.index = PendingIndex::new(m.index_records);
                st.index_error = m.index_error;
                st.finished = true;
                (m.config, st)
            }
            None => (OutputConfig::default(), Self::recover(&spool, &index_file)?),
        };
        let (progress, _) = watch::channel(state.progress());
        Ok(OutputLog {
            spool_path: dir.join(spool::SPOOL_FILE),
            dir: dir.to_path_buf(),
            config,
            dir_fd,
            spool,
            index_file: Arc::new(index_file),
            append_lock: Mutex::new(()),
            state: Mutex::new(state),
            progress,
            writable: false,
        })
    }

    fn read_meta(fd: OwnedFd, path: &Path) -> Result<Meta, OutputError> {
        let meta: Meta = serde_json::from_reader(std::io::BufReader::new(File::from(fd)))
            .map_err(|e| OutputError::Meta { path: path.to_path_buf(), message: e.to_string() })?;
        if meta.version != META_VERSION {
            return Err(OutputError::Meta {
                path: path.to_path_buf(),
                message: format!("unknown version {}", meta.version),
            });
        }
        Ok(meta)
    }

    /// Counters of an unfinished log, from its files (bounded chunks).
    fn recover(spool: &File, index_file: &File) -> Result<State, OutputError> {
        let mut st = State::new(0);
        let total = spool::file_len(spool)?;
        let mut buf = vec![0u8; CHUNK_BYTES];
        let mut pos = 0;
        while pos < total {
            let n = (total - pos).min(CHUNK_BYTES as u64) as usize;
            spool
                .read_exact_at(&mut buf[..n], pos)
                .map_err(|e| OutputError::io("scan spool", e))?;
            st.newlines += count_newlines(&buf[..n]);
            st.last_byte = buf[..n].last().copied();
            pos += n as u64;
        }
        let records =
            index_file.metadata().map_err(|e| OutputError::io("stat stream index", e))?.len()
                / index::RECORD_BYTES as u64;
        st.total = total;
        st.spooled = total;
        st.ring = HotTail::empty_at(0, total);
        st.index = PendingIndex::new(records);
        st.finished = true;
        if records > 0 {
            let view = IndexView::new(
                Arc::new(index_file.try_clone().map_err(|e| OutputError::io("dup index", e))?),
                records,
                &[],
                total,
            );
            let last = view.get(records - 1)?;
            for s in [Stream::Stdout, Stream::Stderr, Stream::Pty, Stream::Combined] {
                st.stream_bytes[stream_slot(s)] =
                    last.stream_bytes_before(s, total.max(last.offset));
            }
        }
        Ok(st)
    }

    /// The session directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Full path of the spool file.
    pub fn spool_path(&self) -> &Path {
        &self.spool_path
    }

    /// The configuration the log was created with.
    pub fn config(&self) -> &OutputConfig {
        &self.config
    }

    /// Bytes this log holds in memory: the ring's allocation plus fixed bookkeeping. Never more
    /// than `retained_cap + LOG_BOOKKEEPING_BYTES`; at most `LOG_BOOKKEEPING_BYTES` for a
    /// `file`-capture log (no ring) and for a finished log (ring released).
    pub fn held_bytes(&self) -> usize {
        let ring = lock(&self.state).ring.allocated();
        ring + std::mem::size_of::<Self>()
            + self.dir.as_os_str().len()
            + self.spool_path.as_os_str().len()
    }

    /// Appends bytes read from `stream` (pipe capture). Writes the spool, then publishes the
    /// bytes to readers (counters, ring, index), in that order, so a reader never sees a byte
    /// that is not yet readable.
    pub fn append(&self, stream: Stream, data: &[u8]) -> Result<AppendOutcome, OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        if self.config.capture != Capture::Pipe {
            return Err(OutputError::WrongCapture { op: "append", needed: Capture::Pipe });
        }
        let _writer = lock(&self.append_lock);
        let (total, spooled, stopped, index_full, switch) = {
            let st = lock(&self.state);
            if st.finished {
                return Err(OutputError::Finished);
            }
            (
                st.total,
                st.spooled,
                st.stop.is_some(),
                st.index.is_full(),
                st.current != Some(stream),
            )
        };
        if data.is_empty() {
            return Ok(AppendOutcome::Written);
        }
        let mut outcome = AppendOutcome::Written;
        let mut written = 0usize;
        let mut new_stop = None;
        if stopped {
            outcome = AppendOutcome::NotSpooled { policy: self.config.disk_policy };
        } else {
            let room = self.config.disk_cap.saturating_sub(spooled);
            let n = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            let (w, err) = spool::write_at(&self.spool, &data[..n], spooled);
            written = w;
            let reason = match err {
                Some(e) if spool::is_disk_full(&e) => Some(REASON_DISK_FULL.to_string()),
                Some(e) => Some(format!("spool write error: {e}")),
                None if n < data.len() => Some(REASON_DISK_CAP.to_string()),
                None => None,
            };
            if let Some(reason) = reason {
                tracing::warn!(spool = %self.spool_path.display(), %reason, "output spool stopped");
                let at = total + w as u64;
                new_stop =
                    Some(CapHit { policy: self.config.disk_policy, reason: reason.clone(), at });
                outcome = AppendOutcome::CapReached { policy: self.config.disk_policy, reason };
            }
        }
        if switch && index_full {
            self.flush_index();
        }
        let newlines = count_newlines(data);
        let newlines_before_stop =
            new_stop.as_ref().map(|h| count_newlines(&data[..(h.at - total) as usize]));
        {
            let mut st = lock(&self.state);
            if switch {
                let before = st.stream_bytes;
                st.index.push(Transition { offset: total, stream, before });
                st.current = Some(stream);
            }
            if let (Some(hit), Some(nl)) = (new_stop, newlines_before_stop) {
                let newlines_before = st.newlines + nl;
                st.stop = Some(Stop { hit, newlines_before });
            }
            st.spooled += written as u64;
            st.total += data.len() as u64;
            st.stream_bytes[stream_slot(stream)] += data.len() as u64;
            st.newlines += newlines;
            st.last_byte = data.last().copied();
            st.ring.push(data);
            self.progress.send_replace(st.progress());
        }
        Ok(outcome)
    }

    /// Writes the pending index records. Failure is recorded (stream filters then report it),
    /// not fatal: the log itself is intact. Caller holds `append_lock`.
    fn flush_index(&self) {
        let (bytes, n, durable) = {
            let st = lock(&self.state);
            let (bytes, n) = st.index.encoded();
            (bytes, n, st.index.durable)
        };
        if n == 0 {
            return;
        }
        let result = index::write_records(&self.index_file, durable, &bytes[..n]);
        let mut st = lock(&self.state);
        match result {
            Ok(()) => st.index.mark_durable(n / index::RECORD_BYTES),
            Err(e) => {
                tracing::warn!(error = %e, "stream index write failed");
                st.index_error.get_or_insert_with(|| format!("writing {}: {e}", index::INDEX_FILE));
            }
        }
    }

    /// A new `O_WRONLY|O_APPEND` fd on the spool for the child's stdout and stderr (`file`
    /// capture). Give the same fd to both.
    pub fn child_fd(&self) -> Result<OwnedFd, OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        if self.config.capture != Capture::File {
            return Err(OutputError::WrongCapture { op: "child_fd", needed: Capture::File });
        }
        spool::open_file(
            &self.dir_fd,
            &self.dir,
            spool::SPOOL_FILE,
            OFlags::WRONLY | OFlags::APPEND,
        )
    }

    /// Picks up what the child wrote to the spool since the last call (`file` capture): counters
    /// and newlines, reading only the new bytes in bounded chunks (nothing is kept). Returns
    /// [`AppendOutcome::CapReached`] (policy `kill`) once the spool reaches the disk cap.
    pub fn sync_from_file(&self) -> Result<AppendOutcome, OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        if self.config.capture != Capture::File {
            return Err(OutputError::WrongCapture { op: "sync_from_file", needed: Capture::File });
        }
        let _writer = lock(&self.append_lock);
        self.sync_locked()
    }

    fn sync_locked(&self) -> Result<AppendOutcome, OutputError> {
        let (known, stopped) = {
            let st = lock(&self.state);
            if st.finished {
                return Err(OutputError::Finished);
            }
            (st.total, st.stop.is_some())
        };
        let size = spool::file_len(&self.spool)?;
        if size > known {
            let mut buf = vec![0u8; SYNC_CHUNK_BYTES];
            let mut pos = known;
            while pos < size {
                let n = (size - pos).min(SYNC_CHUNK_BYTES as u64) as usize;
                self.spool
                    .read_exact_at(&mut buf[..n], pos)
                    .map_err(|e| OutputError::io("read spool", e))?;
                let chunk = &buf[..n];
                let newlines = count_newlines(chunk);
                let mut st = lock(&self.state);
                if st.current.is_none() {
                    st.index.push(Transition {
                        offset: 0,
                        stream: Stream::Combined,
                        before: [0; 4],
                    });
                    st.current = Some(Stream::Combined);
                }
                st.total += n as u64;
                st.spooled += n as u64;
                st.stream_bytes[stream_slot(Stream::Combined)] += n as u64;
                st.newlines += newlines;
                st.last_byte = chunk.last().copied();
                // Moves the (empty) ring's end along; it keeps no bytes.
                st.ring.push(chunk);
                pos += n as u64;
            }
        }
        let mut st = lock(&self.state);
        let outcome = if stopped {
            AppendOutcome::NotSpooled { policy: DiskPolicy::Kill }
        } else if st.total >= self.config.disk_cap {
            // The child writes the file itself: nothing is dropped, the caller must stop it.
            let at = st.total;
            let hit = CapHit { policy: DiskPolicy::Kill, reason: REASON_DISK_CAP.into(), at };
            st.stop = Some(Stop { hit, newlines_before: st.newlines });
            // Everything up to `total` is on disk; later syncs keep counting the overrun.
            st.tail =
                Some(TailSegment { log_start: at, phys_start: at, newlines_before: st.newlines });
            AppendOutcome::CapReached { policy: DiskPolicy::Kill, reason: REASON_DISK_CAP.into() }
        } else {
            AppendOutcome::Written
        };
        self.progress.send_replace(st.progress());
        Ok(outcome)
    }

    /// No more output: writes the hot tail after a gap (`keep-head-tail`), flushes the stream
    /// index, releases the ring and writes `log.json`. Idempotent.
    ///
    /// From here on every read is served from the spool (in practice the page cache), exactly
    /// as for a log re-opened with [`OutputLog::open`], so a finished log holds no output bytes
    /// in memory. Everything the ring held is on disk by then, except, after a `kill`-policy
    /// stop, bytes past the cap: those are already reported as the gap `[cap, total)` and are
    /// not shown after the finish (as in a re-opened log).
    pub fn finish(&self) -> Result<(), OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        let _writer = lock(&self.append_lock);
        if lock(&self.state).finished {
            return Ok(());
        }
        if self.config.capture == Capture::File {
            self.sync_locked()?;
        } else if self.config.disk_policy == DiskPolicy::KeepHeadTail {
            self.write_final_tail()?;
        }
        self.flush_index();
        let meta = {
            let mut st = lock(&self.state);
            st.finished = true;
            let end = st.total;
            // Frees the buffer: reads now go to the spool.
            st.ring = HotTail::empty_at(0, end);
            Meta {
                version: META_VERSION,
                spool_path: self.spool_path.clone(),
                total_bytes: st.total,
                stream_bytes: StreamBytes::from_slots(st.stream_bytes),
                newlines: st.newlines,
                last_line_incomplete: st.last_byte.is_some_and(|b| b != b'\n'),
                last_byte: st.last_byte,
                spooled_bytes: st.spooled,
                stop: st.stop.clone(),
                tail: st.tail,
                gaps: st.gap(self.config.disk_policy).into_iter().collect(),
                index_records: st.index.durable,
                index_error: st.index_error.clone(),
                config: self.config.clone(),
            }
        };
        let written = self.write_meta(&meta);
        self.progress.send_replace(lock(&self.state).progress());
        written
    }

    fn write_meta(&self, meta: &Meta) -> Result<(), OutputError> {
        let file = spool::create_file(&self.dir_fd, &self.dir, META_FILE)?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(file), meta).map_err(|e| {
            OutputError::Meta { path: self.dir.join(META_FILE), message: e.to_string() }
        })
    }

    /// `keep-head-tail` after a stop: copy the ring (in bounded chunks, the lock released during
    /// each write) to the spool right after the head. On failure the spool is cut back to the
    /// head and the gap runs to the end.
    fn write_final_tail(&self) -> Result<(), OutputError> {
        let (stop, start, end) = {
            let st = lock(&self.state);
            let Some(stop) = st.stop.as_ref() else { return Ok(()) };
            (stop.hit.at, st.ring.start().max(stop.hit.at), st.total)
        };
        let mut buf = vec![0u8; CHUNK_BYTES];
        let mut pos = start;
        let mut phys = stop;
        let mut failed = None;
        while pos < end {
            let n = (end - pos).min(CHUNK_BYTES as u64) as usize;
            if !lock(&self.state).ring.copy_to(pos, &mut buf[..n]) {
                failed = Some("hot tail moved".to_string());
                break;
            }
            let (w, err) = spool::write_at(&self.spool, &buf[..n], phys);
            if let Some(e) = err {
                failed = Some(e.to_string());
                break;
            }
            pos += w as u64;
            phys += w as u64;
        }
        let mut st = lock(&self.state);
        if let Some(err) = failed {
            tracing::warn!(error = %err, "writing the final hot tail failed");
            self.spool.set_len(stop).map_err(|e| OutputError::io("truncate spool", e))?;
            st.spooled = stop;
        } else {
            let newlines_before = st.newlines - st.ring.count_newlines_from(start);
            st.tail = Some(TailSegment { log_start: start, phys_start: stop, newlines_before });
            st.spooled = phys;
        }
        Ok(())
    }

    /// Counters (no I/O).
    pub fn stats(&self) -> LogStats {
        let st = lock(&self.state);
        let gap = st.gap(self.config.disk_policy);
        LogStats {
            total_bytes: st.total,
            stream_bytes: StreamBytes::from_slots(st.stream_bytes),
            total_lines: st.total_lines(),
            newlines: st.newlines,
            last_line_incomplete: st.last_byte.is_some_and(|b| b != b'\n'),
            hot_tail_bytes: st.ring.len() as u64,
            spooled_bytes: st.spooled,
            dropped_bytes: gap.as_ref().map_or(0, |g| g.end - g.start),
            gaps: gap.into_iter().collect(),
            cap_reached: st.stop.as_ref().map(|s| s.hit.clone()),
            finished: st.finished,
        }
    }

    /// The spool stop, if the cap (or a full disk) was hit.
    pub fn cap_reached(&self) -> Option<CapHit> {
        lock(&self.state).stop.as_ref().map(|s| s.hit.clone())
    }

    /// A receiver that sees every change of [`Progress`] (new bytes, cap, finish).
    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Waits until more than `after` bytes were printed or the log is finished, or `timeout`
    /// passes. Returns whether there is something new (or the end) to read.
    pub async fn wait_for_output(&self, after: u64, timeout: Duration) -> bool {
        let mut rx = self.progress.subscribe();
        let ready = |p: &Progress| p.total_bytes > after || p.finished;
        matches!(tokio::time::timeout(timeout, rx.wait_for(ready)).await, Ok(Ok(_)))
    }

    fn snapshot(&self, with_index: bool) -> Result<Snap, OutputError> {
        let st = lock(&self.state);
        let index = if with_index {
            if let Some(e) = &st.index_error {
                return Err(OutputError::IndexUnavailable(e.clone()));
            }
            Some(IndexView::new(
                self.index_file.clone(),
                st.index.durable,
                st.index.records(),
                st.total,
            ))
        } else {
            None
        };
        Ok(Snap {
            total: st.total,
            total_lines: st.total_lines(),
            stream_bytes: st.stream_bytes,
            hole: st.hole(),
            gap: st.gap(self.config.disk_policy),
            index,
        })
    }

    /// Copies log bytes `[x, x + out.len())` into `out`: the part the ring holds under the
    /// lock, the rest from the spool without it. `Ok(false)` if some byte is in neither (the
    /// ring moved past bytes that were never spooled); the caller retries with a new snapshot.
    fn fetch(&self, x: u64, out: &mut [u8]) -> Result<bool, OutputError> {
        let y = x + out.len() as u64;
        let (disk_end, stop, tail) = {
            let st = lock(&self.state);
            let from = x.max(st.ring.start());
            if from < y && !st.ring.copy_to(from, &mut out[(from - x) as usize..]) {
                return Ok(false);
            }
            (from.min(y), st.stop_at(), st.tail)
        };
        let mut pos = x;
        while pos < disk_end {
            let (phys, end) = if pos < stop {
                (pos, disk_end.min(stop))
            } else if let Some(t) = tail.filter(|t| pos >= t.log_start) {
                (t.phys_start + (pos - t.log_start), disk_end)
            } else {
                return Ok(false);
            };
            let dst = &mut out[(pos - x) as usize..(end - x) as usize];
            self.spool.read_exact_at(dst, phys).map_err(|e| OutputError::io("read spool", e))?;
            pos = end;
        }
        Ok(true)
    }

    /// The wanted segments of `[from, to)`, in order (reversed when `backward`), minus the
    /// hole; with a stream filter, only that stream's. Calls `f` until it returns `false`.
    fn walk(
        &self,
        snap: &Snap,
        stream: Option<Stream>,
        from: u64,
        to: u64,
        backward: bool,
        mut f: impl FnMut(u64, u64) -> Result<bool, OutputError>,
    ) -> Result<(), OutputError> {
        // Split a range around the hole; returns false when `f` wants no more.
        let mut emit = |a: u64, b: u64| -> Result<bool, OutputError> {
            let mut parts = [(a, b), (b, b)];
            if let Some((hs, he)) = snap.hole {
                parts = [(a, b.min(hs)), (a.max(he), b)];
            }
            if backward {
                parts.reverse();
            }
            for (x, y) in parts {
                if x < y && !f(x, y)? {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        let (Some(s), Some(index)) = (stream, snap.index.as_ref()) else {
            emit(from, to)?;
            return Ok(());
        };
        if index.len() == 0 {
            return Ok(());
        }
        if backward {
            let mut i = index.find(to.saturating_sub(1))?;
            while let Some(k) = i {
                let (t, end) = index.segment(k)?;
                if end <= from {
                    break;
                }
                if t.stream == s && !emit(t.offset.max(from), end.min(to))? {
                    break;
                }
                i = k.checked_sub(1);
            }
        } else {
            let mut k = index.find(from)?.unwrap_or(0);
            while k < index.len() {
                let (t, end) = index.segment(k)?;
                if t.offset >= to {
                    break;
                }
                if t.stream == s && !emit(t.offset.max(from), end.min(to))? {
                    break;
                }
                k += 1;
            }
        }
        Ok(())
    }

    /// Up to `budget` wanted bytes from `from` forward. `None`: lost a race, retry.
    fn collect_forward(
        &self,
        snap: &Snap,
        stream: Option<Stream>,
        from: u64,
        to: u64,
        budget: usize,
    ) -> Result<Option<Collected>, OutputError> {
        let mut plan = Vec::new();
        let mut room = budget;
        let mut complete = true;
        self.walk(snap, stream, from, to, false, |a, b| {
            if room == 0 {
                complete = false;
                return Ok(false);
            }
            let n = (b - a).min(room as u64) as usize;
            plan.push((a, n));
            room -= n;
            if n < (b - a) as usize {
                complete = false;
                return Ok(false);
            }
            Ok(true)
        })?;
        self.gather(plan, complete)
    }

    /// Up to `budget` wanted bytes ending at `to`, walking back to `floor`.
    fn collect_backward(
        &self,
        snap: &Snap,
        stream: Option<Stream>,
        floor: u64,
        to: u64,
        budget: usize,
    ) -> Result<Option<Collected>, OutputError> {
        let mut plan = Vec::new();
        let mut room = budget;
        let mut complete = true;
        self.walk(snap, stream, floor, to, true, |a, b| {
            if room == 0 {
                complete = false;
                return Ok(false);
            }
            let n = (b - a).min(room as u64) as usize;
            plan.push((b - n as u64, n));
            room -= n;
            if n < (b - a) as usize {
                complete = false;
                return Ok(false);
            }
            Ok(true)
        })?;
        plan.reverse();
        self.gather(plan, complete)
    }

    fn gather(
        &self,
        plan: Vec<(u64, usize)>,
        complete: bool,
    ) -> Result<Option<Collected>, OutputError> {
        let size = plan.iter().map(|p| p.1).sum();
        let mut buf = vec![0u8; size];
        let mut pieces = Vec::with_capacity(plan.len());
        let mut pos = 0;
        for (log, len) in plan {
            if !self.fetch(log, &mut buf[pos..pos + len])? {
                return Ok(None);
            }
            pieces.push(Piece { pos, log, len });
            pos += len;
        }
        Ok(Some(Collected { buf, pieces, complete }))
    }

    /// A bounded, honest view of the log (see [`ReadRequest`]).
    pub fn read(&self, req: &ReadRequest) -> Result<OutputView, OutputError> {
        for _ in 0..READ_ATTEMPTS {
            if let Some(view) = self.try_read(req)? {
                return Ok(view);
            }
        }
        Err(OutputError::ReadRaced)
    }

    fn try_read(&self, req: &ReadRequest) -> Result<Option<OutputView>, OutputError> {
        let max_bytes = req.limits.max_bytes.clamp(1, MAX_READ_BYTES);
        let max_lines = req.limits.max_lines;
        let snap = self.snapshot(req.stream.is_some())?;
        let mut r = render::Render::new(self, req, &snap, max_bytes, max_lines);
        let done = match req.mode {
            ReadMode::Delta => r.forward(req.after),
            ReadMode::Head => r.forward(0),
            ReadMode::Tail => r.tail(),
            ReadMode::Middle => r.middle(),
        }?;
        Ok(done.then(|| r.finish()))
    }

    /// Exact bytes `[after, …)`, at most `max_bytes` (clamped to [`MAX_RAW_READ_BYTES`]), and the
    /// cursor to continue from. Stops at the start of a gap; a cursor inside a gap returns no
    /// bytes and the gap's end as the next cursor.
    pub fn read_raw(&self, after: u64, max_bytes: usize) -> Result<(Vec<u8>, u64), OutputError> {
        let max = max_bytes.min(MAX_RAW_READ_BYTES) as u64;
        for _ in 0..READ_ATTEMPTS {
            let snap = self.snapshot(false)?;
            let mut from = after.min(snap.total);
            let mut to = snap.total;
            if let Some((hs, he)) = snap.hole {
                if from >= hs && from < he {
                    return Ok((Vec::new(), he));
                }
                if from < hs {
                    to = hs;
                }
            }
            to = to.min(from + max);
            let mut buf = vec![0u8; (to - from) as usize];
            if self.fetch(from, &mut buf)? {
                from = to;
                return Ok((buf, from));
            }
        }
        Err(OutputError::ReadRaced)
    }

    /// Searches the whole spool (see [`GrepRequest`]) with bounded memory.
    pub fn grep(&self, req: &GrepRequest) -> Result<GrepResult, OutputError> {
        grep::grep(self, req)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn log(cfg: OutputConfig) -> (tempfile::TempDir, OutputLog) {
        let t = tempfile::tempdir().unwrap();
        let l = OutputLog::create(t.path().join("s"), cfg).unwrap();
        (t, l)
    }

    #[test]
    fn log_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<OutputLog>();
    }

    #[test]
    fn counters_and_lines() {
        let (_t, l) = log(OutputConfig::default());
        l.append(Stream::Stdout, b"a\nb").unwrap();
        l.append(Stream::Stderr, b"c\n").unwrap();
        let s = l.stats();
        assert_eq!(
            (s.total_bytes, s.newlines, s.total_lines, s.last_line_incomplete),
            (5, 2, 2, false)
        );
        assert_eq!((s.stream_bytes.stdout, s.stream_bytes.stderr), (3, 2));
        l.append(Stream::Stderr, b"tail").unwrap();
        let s = l.stats();
        assert_eq!((s.total_lines, s.last_line_incomplete), (3, true));
    }

    #[test]
    fn file_capture_refuses_keep_head_tail() {
        let t = tempfile::tempdir().unwrap();
        let cfg = OutputConfig {
            capture: Capture::File,
            disk_policy: DiskPolicy::KeepHeadTail,
            ..Default::default()
        };
        assert!(matches!(
            OutputLog::create(t.path().join("s"), cfg),
            Err(OutputError::Unsupported(_))
        ));
    }

    #[test]
    fn held_bytes_counts_fixed_bookkeeping() {
        let (_t, l) = log(OutputConfig::default());
        assert!(l.held_bytes() <= LOG_BOOKKEEPING_BYTES);
    }
}
