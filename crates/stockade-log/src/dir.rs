//! The one place that names the files of a session directory. Every crate that opens, reuses,
//! recovers or deletes a session directory goes through [`SessionDir`] for the names, so the
//! layout can change in one file:
//!
//! ```text
//! <instance>/<id>/
//!   output.log     the spool: every byte the command printed, in arrival order
//!   streams.idx    stream transitions (which byte came from stdout, which from stderr)
//!   log.json       totals, streams and gaps, written when the output ends
//!   session.json   the session's record (start, then end)
//!   spec.json      what was asked to run (for restart and recovery)
//!   .spare-*       one spare file per record in a directory made ahead of time
//! ```

use std::path::{Path, PathBuf};

/// A session directory's path, and the names of the files in it.
#[derive(Debug, Clone, Copy)]
pub struct SessionDir<'a>(&'a Path);

impl<'a> SessionDir<'a> {
    /// The spool, every byte of the log.
    pub const SPOOL: &'static str = "output.log";
    /// The stream index.
    pub(crate) const INDEX: &'static str = "streams.idx";
    /// The log's metadata, written when the output ends.
    pub(crate) const META: &'static str = "log.json";
    /// The session's record.
    pub(crate) const RECORD: &'static str = "session.json";
    /// What was asked to run.
    pub(crate) const SPEC: &'static str = "spec.json";
    /// The files a directory made ahead of time holds before a run takes it: spool and index.
    pub const LOG_FILES: [&'static str; 2] = [Self::SPOOL, Self::INDEX];

    /// The session directory at `path`.
    pub fn new(path: &'a Path) -> SessionDir<'a> {
        SessionDir(path)
    }

    /// The directory itself.
    pub fn path(self) -> &'a Path {
        self.0
    }

    /// The spool's path.
    pub fn spool(self) -> PathBuf {
        self.0.join(Self::SPOOL)
    }

    /// The stream index's path.
    pub fn index(self) -> PathBuf {
        self.0.join(Self::INDEX)
    }

    /// The log metadata's path.
    pub fn meta(self) -> PathBuf {
        self.0.join(Self::META)
    }

    /// The record's path.
    pub fn record(self) -> PathBuf {
        self.0.join(Self::RECORD)
    }

    /// The spec file's path.
    pub fn spec(self) -> PathBuf {
        self.0.join(Self::SPEC)
    }

    /// A spare file's path.
    pub fn spare(self, spare: Spare) -> PathBuf {
        self.0.join(spare.file_name())
    }
}

/// A record a session writes once, and the spare file in its directory it is written into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spare {
    /// `session.json` as the command starts.
    Start,
    /// `spec.json`.
    Spec,
    /// `log.json` when the output ends.
    Log,
    /// `session.json` with the end.
    End,
}

impl Spare {
    /// Every spare, in a fixed order.
    pub const ALL: [Spare; 4] = [Spare::Start, Spare::Spec, Spare::Log, Spare::End];

    /// The spare's file name in the session directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Spare::Start => ".spare-start",
            Spare::Spec => ".spare-spec",
            Spare::Log => ".spare-log",
            Spare::End => ".spare-end",
        }
    }

    /// The spare's path in session directory `dir`.
    pub fn path_in(self, dir: &Path) -> PathBuf {
        SessionDir::new(dir).spare(self)
    }

    /// The record a used directory holds in place of this spare (none for `End`: after the
    /// exchange, the start record is already under the spare's name).
    pub fn record(self) -> Option<&'static str> {
        match self {
            Spare::Start => Some(SessionDir::RECORD),
            Spare::Spec => Some(SessionDir::SPEC),
            Spare::Log => Some(SessionDir::META),
            Spare::End => None,
        }
    }
}
