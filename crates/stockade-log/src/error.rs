//! Everything that can go wrong with an output log.

use std::path::PathBuf;

use stockade_proto::Capture;

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
    /// A bounded grep ran past its deadline and was stopped.
    #[error("grep gave up after {elapsed_ms} ms, its time limit; search for a narrower pattern")]
    GrepTimedOut {
        /// How long it ran.
        elapsed_ms: u64,
    },
    /// A bounded grep was cancelled (its client went away or the daemon stops).
    #[error("grep was cancelled")]
    GrepCancelled,
    /// `append`/`sync_from_file` after `finish()`.
    #[error("the output log is finished")]
    Finished,
    /// Writing to a log opened read-only with [`OutputLog::open`](super::OutputLog::open).
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
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> OutputError {
        OutputError::Io { context: context.into(), source }
    }
}
