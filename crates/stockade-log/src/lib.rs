//! Stockade's output log. The output log of one session: every byte a command prints, kept losslessly on disk and shown
//! to the model in bounded, honest views.
//!
//! # What this module owns
//!
//! * The **session directory** (0700) and the files in it (0600, created exclusively, never
//!   through a symlink): the **spool** `output.log` (every byte, arrival order, append-only), the
//!   **stream index** `streams.idx` (stream transitions, see [`index`](self)), and `log.json`
//!   (totals, streams, gaps; written by [`OutputLog::finish`]).
//! * **No copy of the output in memory.** Every byte goes to the spool as it arrives (one shared
//!   drain thread, [`Drainer`], reads every session's pipes), and every read is served from the
//!   spool by `pread` (in practice the page cache, which is not the daemon's memory). A log keeps
//!   counters, cursors and a small pending stream index: [`OutputLog::held_bytes`] stays within
//!   [`LOG_BOOKKEEPING_BYTES`] while the spool takes every byte. Only once the spool stops (disk
//!   cap or disk full) does the **hot tail** keep the newest `retained_cap` bytes in a ring, so
//!   `keep-head-tail` can write them after the gap and reads still see them; [`OutputLog::finish`]
//!   releases it. A `file`-capture log has no ring at all.
//! * **Descriptors**: a log being written holds its directory, spool and index open; a finished
//!   or read-only log holds none and opens them per read, so a thousand finished sessions cost no
//!   descriptor.
//! * **Cursors**: a cursor is a log offset (bytes since the start of the log), monotone. A reader
//!   locks the log only to snapshot counters (and copy hot-tail bytes after a stop), never while
//!   it waits on the disk.
//! * **Views** ([`OutputLog::read`]): `delta`/`head`/`tail`/`middle`, bounded by `max_bytes` and
//!   `max_lines` (clamped by [`crate::limits`]), cut on UTF-8 boundaries and line ends, with the
//!   facts of what was left out ([`stockade_proto::Omission`]) for each door to word its hint;
//!   [`OutputLog::read_raw`] and [`OutputLog::raw_view`] for exact bytes; [`OutputLog::grep`] over
//!   the whole spool.
//! * The **disk cap** and disk-full handling: the spool stops at the cap (or at `ENOSPC`); what
//!   is not on disk is reported as a [`Gap`], never dropped silently. With `keep-head-tail`,
//!   `finish()` writes the hot tail after the gap so the spool ends with the newest output.
//! * **Draining** ([`Drainer`]): one shared thread reads the pipes into the log whether or not
//!   anyone reads, so a command never blocks on a full pipe.
//!
//! # Offsets after a gap
//!
//! Until the spool stops, log offset = spool offset. If it stops at log offset `S` and `finish()`
//! writes the hot tail `[T', total)` after it, those bytes sit at spool offset `S..`; the log
//! keeps that one mapping (there is at most one gap per log).
//!
//! # Capture modes
//!
//! `pipe`: the [`Drainer`] calls [`OutputLog::append`]. `file`: the child writes to
//! [`OutputLog::child_fd`] itself and the engine calls [`OutputLog::sync_from_file`] to pick up
//! what was written: it reads only the new bytes, in bounded chunks, to count them and their
//! newlines, and copies nothing into memory; every read of a `file` log is served from the
//! spool by offset (`pread`, in practice from the page cache). `file` capture supports only the
//! `kill` disk policy (the child writes straight to disk, so the log cannot drop the middle);
//! asking for `keep-head-tail` is an error.
//!
//! # Where each part lives
//!
//! This file holds the public types and [`OutputLog`]'s counters; `open` makes a log (create,
//! open a finished one, rebuild one whose writer died), `write` writes it (append, `file`
//! sync, the disk cap, finish), `collect` gathers bytes for a view (snapshot, fetch, one
//! collector walking either way), `read` holds the entry points (views, raw reads, grep), `render` turns a collected window into a view by the rules of `cut`;
//! `state` is the mutable state behind the lock and `log.json`.

#![deny(missing_docs)]

pub mod answer;
mod atomic_write;
mod collect;
mod cut;
mod dir;
mod drain;
mod drainer;
mod error;
mod grep;
mod hot_tail;
mod index;
pub mod limits;
mod open;
mod read;
mod render;
mod resume;
mod screen;
mod spool;
mod state;
mod write;

pub use atomic_write::{atomic_replace, atomic_write, replace_from_spare, write_through_spare};
pub(crate) use cut::dropped_phrase;
pub use cut::{amount, thousands};
pub use dir::{SessionDir, Spare};
pub use drain::DrainSummary;
pub use drainer::{DrainHandle, DrainHealth, Drainer};
pub use error::OutputError;
pub use grep::{DEFAULT_GREP_MATCHES, DEFAULT_GREP_TIMEOUT, GREP_RESULT_MAX_BYTES, GrepBounds};
pub use open::Prepared;
pub use screen::{render_screen, strip_ansi};
pub use write::LaterMeta;

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use stockade_proto::{
    Capture, DEFAULT_DISK_CAP, DEFAULT_RETAINED_CAP, DiskPolicy, Gap, OutputLimits, ReadMode,
    Stream,
};
use tokio::sync::watch;

use state::State;
/// Bound on what a log holds in memory besides its ring: the struct, the pending stream index,
/// paths. [`OutputLog::held_bytes`] never exceeds `retained_cap` plus this, and never exceeds
/// this alone for a `file`-capture log or a finished log.
pub const LOG_BOOKKEEPING_BYTES: usize = 16 * 1024;
/// Chunk size for reading the spool in bounded pieces (file-mode sync, recovery, final tail).
const CHUNK_BYTES: usize = 64 * 1024;
/// Reason recorded when the spool reached its disk cap.
pub const REASON_DISK_CAP: &str = "disk cap";
/// Reason recorded when a spool write failed with `ENOSPC`/`EDQUOT`.
pub(crate) const REASON_DISK_FULL: &str = "disk full";

/// Newlines in `bytes`.
pub fn count_newlines(bytes: &[u8]) -> u64 {
    // A plain counting loop vectorises well; memchr_iter is slower on newline-dense output.
    bytes.iter().map(|&b| u64::from(b == b'\n')).sum()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves counters that are still consistent enough to read.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a session's log is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputConfig {
    /// Bytes of hot tail kept in memory once the spool stops (disk cap or disk full).
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
    /// Bounds on the answer (clamped by [`crate::limits::clamp`]).
    pub limits: OutputLimits,
    /// Only this stream's bytes.
    pub stream: Option<Stream>,
}

impl ReadRequest {
    /// The view a `run` answers with: `direction` (the tail by default) of the whole log, within
    /// the run's limits.
    pub fn for_run(p: &stockade_proto::rpc::RunParams) -> ReadRequest {
        ReadRequest {
            mode: p.direction.unwrap_or(stockade_proto::ReadMode::Tail),
            after: 0,
            limits: crate::limits::view_limits(p.max_bytes, p.max_lines),
            stream: None,
        }
    }
}

/// One grep over a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepRequest {
    /// The regex (Rust `regex` syntax).
    pub pattern: String,
    /// Context lines before and after each match (at most 100; more is cut to it).
    pub context: usize,
    /// Stop after this many matching lines (`1..=10_000`; outside is clamped).
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
            max_matches: grep::DEFAULT_GREP_MATCHES,
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

/// The files of a session directory, open together.
#[derive(Debug)]
pub(crate) struct Files {
    dir_fd: OwnedFd,
    spool: File,
    index: Arc<File>,
}

/// One session's output log. `Send + Sync`; share it as `Arc<OutputLog>`.
#[derive(Debug)]
pub struct OutputLog {
    dir: PathBuf,
    spool_path: PathBuf,
    config: OutputConfig,
    /// The open files while the log is written; `None` once finished (a finished log holds no
    /// descriptor: each read opens what it needs, see [`OutputLog::files`]).
    files: Mutex<Option<Arc<Files>>>,
    /// Serialises writers (append, sync, finish); never taken by readers.
    append_lock: Mutex<()>,
    state: Mutex<State>,
    progress: watch::Sender<Progress>,
    writable: bool,
}

impl OutputLog {
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

    /// The log's files: the ones held while it is written, else opened afresh for this one
    /// operation (never through a symlink) and closed when the caller drops them, so a
    /// thousand finished sessions cost no descriptor.
    pub(crate) fn files(&self) -> Result<Arc<Files>, OutputError> {
        if let Some(f) = lock(&self.files).as_ref() {
            return Ok(Arc::clone(f));
        }
        let dir_fd = spool::open_session_dir(&self.dir)?;
        let spool = File::from(spool::open_file(
            &dir_fd,
            &self.dir,
            SessionDir::SPOOL,
            rustix::fs::OFlags::RDONLY,
        )?);
        let index = File::from(spool::open_file(
            &dir_fd,
            &self.dir,
            SessionDir::INDEX,
            rustix::fs::OFlags::RDONLY,
        )?);
        Ok(Arc::new(Files { dir_fd, spool, index: Arc::new(index) }))
    }

    /// The files a writer uses: only while the log is written.
    pub(crate) fn writer_files(&self) -> Result<Arc<Files>, OutputError> {
        lock(&self.files).as_ref().map(Arc::clone).ok_or(OutputError::Finished)
    }

    /// Whether the log holds open descriptors (only while it is written).
    pub fn holds_files(&self) -> bool {
        lock(&self.files).is_some()
    }

    /// Counters (no I/O).
    pub fn stats(&self) -> LogStats {
        let st = lock(&self.state);
        let gaps = st.gaps();
        LogStats {
            total_bytes: st.total,
            stream_bytes: StreamBytes::from_slots(st.stream_bytes),
            total_lines: st.total_lines(),
            newlines: st.newlines,
            last_line_incomplete: st.last_byte.is_some_and(|b| b != b'\n'),
            hot_tail_bytes: st.ring.len() as u64,
            spooled_bytes: st.spooled,
            dropped_bytes: gaps.iter().map(|g| g.end - g.start).sum(),
            gaps,
            cap_reached: st.cap_hit(),
            finished: st.finished,
        }
    }

    /// The spool stop, if the cap (or a full disk) was hit.
    pub fn cap_reached(&self) -> Option<CapHit> {
        lock(&self.state).cap_hit()
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
    fn log_json_is_left_for_later_only_when_the_spool_rebuilds_it_alike() {
        // A plain log: `log.json` is left for later, and a reader without it sees the same log.
        let (t, l) = log(OutputConfig::default());
        l.append(Stream::Stdout, b"one\n").unwrap();
        l.append(Stream::Stderr, b"two").unwrap();
        let dir = t.path().join("s");
        let later = l.finish_but_meta().unwrap().expect("left for later");
        assert!(!dir.join(SessionDir::META).exists());
        let rebuilt = OutputLog::open(&dir).unwrap().stats();
        assert_eq!((rebuilt.total_bytes, rebuilt.stream_bytes.stderr), (7, 3));
        later.write(&l).unwrap();
        assert!(dir.join(SessionDir::META).exists());
        assert_eq!(OutputLog::open(&dir).unwrap().stats(), rebuilt);
        assert!(l.finish_but_meta().unwrap().is_none(), "finished once");
        // A log a rebuild would read otherwise (a stop at the cap): written at once.
        let (t, l) = log(OutputConfig { disk_cap: 4, ..OutputConfig::default() });
        l.append(Stream::Stdout, b"more than four").unwrap();
        assert!(l.finish_but_meta().unwrap().is_none());
        assert!(t.path().join("s").join(SessionDir::META).exists());
        // So is one with another configuration.
        let (t, l) = log(OutputConfig { retained_cap: 4096, ..OutputConfig::default() });
        l.append(Stream::Stdout, b"x\n").unwrap();
        assert!(l.finish_but_meta().unwrap().is_none());
        assert!(t.path().join("s").join(SessionDir::META).exists());
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
