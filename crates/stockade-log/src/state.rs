//! The mutable state of a log behind its one mutex, the snapshot a read takes of it, and
//! `log.json`, the state a finished log leaves on disk.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use stockade_proto::{DiskPolicy, Gap, Stream};

use super::hot_tail::HotTail;
use super::index::{IndexView, PendingIndex};
use super::{CapHit, OutputConfig, Progress, StreamBytes};
use crate::SessionDir;

/// Version of the `log.json` layout.
pub(super) const META_VERSION: u32 = 1;

/// The hot tail written after the gap by `finish()`: log `[log_start, total)` is at spool
/// offset `phys_start..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TailSegment {
    pub(super) log_start: u64,
    pub(super) phys_start: u64,
    /// Newlines in the log before `log_start` (for grep line numbers after the gap).
    pub(super) newlines_before: u64,
}

/// Where the spool stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stop {
    pub(super) hit: CapHit,
    /// Newlines in the log before `hit.at`.
    pub(super) newlines_before: u64,
}

/// Mutable state, behind one short-held mutex.
#[derive(Debug)]
pub(super) struct State {
    pub(super) total: u64,
    pub(super) stream_bytes: [u64; 4],
    pub(super) newlines: u64,
    pub(super) last_byte: Option<u8>,
    pub(super) ring: HotTail,
    /// Bytes in the spool file (its physical length).
    pub(super) spooled: u64,
    pub(super) stop: Option<Stop>,
    pub(super) tail: Option<TailSegment>,
    pub(super) current: Option<Stream>,
    pub(super) index: PendingIndex,
    pub(super) index_error: Option<String>,
    pub(super) finished: bool,
    /// When a spool a full disk stopped was last tried again (see `resume.rs`).
    pub(super) resume_tried: Option<std::time::Instant>,
}

impl State {
    pub(super) fn new(retained_cap: usize) -> State {
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
            resume_tried: None,
        }
    }

    pub(super) fn stop_at(&self) -> u64 {
        self.stop.as_ref().map_or(u64::MAX, |s| s.hit.at)
    }

    pub(super) fn total_lines(&self) -> u64 {
        self.newlines + u64::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }

    /// Bytes that are neither on disk nor in the ring: `[start, end)`.
    pub(super) fn hole(&self) -> Option<(u64, u64)> {
        let stop = self.stop.as_ref()?.hit.at;
        let readable_from = self.ring.start().min(self.tail.map_or(self.total, |t| t.log_start));
        (readable_from > stop).then_some((stop, readable_from))
    }

    /// Bytes that are not on disk and never will be.
    pub(super) fn gap(&self, policy: DiskPolicy) -> Option<Gap> {
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

    pub(super) fn progress(&self) -> Progress {
        Progress {
            total_bytes: self.total,
            cap_reached: self.stop.is_some(),
            finished: self.finished,
        }
    }
}

/// `log.json`: what `open()` needs to serve reads of a finished log.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) version: u32,
    pub(super) spool_path: PathBuf,
    pub(super) total_bytes: u64,
    pub(super) stream_bytes: StreamBytes,
    pub(super) newlines: u64,
    pub(super) last_line_incomplete: bool,
    pub(super) last_byte: Option<u8>,
    pub(super) spooled_bytes: u64,
    pub(super) stop: Option<Stop>,
    pub(super) tail: Option<TailSegment>,
    pub(super) gaps: Vec<Gap>,
    pub(super) index_records: u64,
    pub(super) index_error: Option<String>,
    pub(super) config: OutputConfig,
}

/// Counters and layout at one instant, taken under the lock.
pub(super) struct Snap {
    pub(super) total: u64,
    pub(super) total_lines: u64,
    pub(super) stream_bytes: [u64; 4],
    pub(super) hole: Option<(u64, u64)>,
    pub(super) gap: Option<Gap>,
    pub(super) index: Option<IndexView>,
}

impl Snap {
    /// The stream a read filtered by `stream` walks. A log whose streams went through one pipe
    /// (or the spool itself) has one stream, `combined`, both in write order: a read of either
    /// shows it rather than nothing.
    pub(super) fn read_stream(&self, stream: Option<Stream>) -> Option<Stream> {
        let merged = self.stream_bytes[super::index::stream_slot(Stream::Stdout)] == 0
            && self.stream_bytes[super::index::stream_slot(Stream::Stderr)] == 0;
        match stream {
            Some(Stream::Stdout | Stream::Stderr) if merged => Some(Stream::Combined),
            s => s,
        }
    }

    /// Bytes of `[x, y)` that can be read (not in the hole).
    pub(super) fn readable(&self, x: u64, y: u64) -> u64 {
        let len = y.saturating_sub(x);
        match self.hole {
            Some((hs, he)) => len - he.min(y).saturating_sub(hs.max(x)).min(len),
            None => len,
        }
    }
}

impl super::OutputLog {
    /// `log.json` for the state `st` (taken under the lock).
    pub(super) fn meta(&self, st: &State) -> Meta {
        Meta {
            version: META_VERSION,
            spool_path: self.spool_path.clone(),
            total_bytes: st.total,
            stream_bytes: super::StreamBytes::from_slots(st.stream_bytes),
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
    }

    /// Writes `log.json`: temporary file, every write checked, rename. A full disk leaves no
    /// empty or torn `log.json` (and [`OutputLog::open`] rebuilds one that is).
    pub(super) fn write_meta(&self, meta: &Meta) -> Result<(), super::OutputError> {
        self.write_meta_via(meta, None)
    }

    /// [`Self::write_meta`] through the directory's spare for it, when it has one (`finish`
    /// only: the spare has one writer).
    pub(super) fn write_meta_via(
        &self,
        meta: &Meta,
        spare: Option<crate::Spare>,
    ) -> Result<(), super::OutputError> {
        let path = self.dir.join(SessionDir::META);
        let meta_err = |message: String| super::OutputError::Meta { path: path.clone(), message };
        let mut bytes = serde_json::to_vec_pretty(meta).map_err(|e| meta_err(e.to_string()))?;
        bytes.push(b'\n');
        match spare {
            Some(spare) => {
                crate::atomic_write::replace_from_spare(&spare.path_in(&self.dir), &path, &bytes)
            }
            None => crate::atomic_write::atomic_replace(&path, &bytes),
        }
        .map_err(|e| meta_err(e.to_string()))
    }

    /// Writes `log.json` for a log rebuilt from its spool (its writer died), so the next open
    /// reads it instead of scanning the spool again.
    pub fn save_rebuilt_meta(&self) -> Result<(), super::OutputError> {
        let meta = self.meta(&super::lock(&self.state));
        self.write_meta(&meta)
    }

    /// Writes `log.json` of a finished log again (after [`OutputLog::finish`] could not, e.g.
    /// on a full disk). Does nothing for a log that is not finished or not this process's.
    pub fn rewrite_meta(&self) -> Result<(), super::OutputError> {
        if !self.writable {
            return Ok(());
        }
        let meta = {
            let st = super::lock(&self.state);
            if !st.finished {
                return Ok(());
            }
            self.meta(&st)
        };
        self.write_meta(&meta)
    }
}
