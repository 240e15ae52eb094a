//! The mutable state of a log behind its one mutex, the snapshot a read takes of it, and
//! `log.json`, the state a finished log leaves on disk.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use stockade_proto::{Gap, Stream};

use super::hot_tail::HotTail;
use super::index::{IndexView, PendingIndex};
use super::{CapHit, OutputConfig, Progress, StreamBytes};
use crate::SessionDir;

/// Version of the `log.json` layout (1: one tail segment after one gap; 2: a resume per gap).
pub(super) const META_VERSION: u32 = 2;

/// The hot tail written after the gap by `finish()` in a version-1 `log.json`: log
/// `[log_start, total)` is at spool offset `phys_start..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TailSegment {
    pub(super) log_start: u64,
    pub(super) phys_start: u64,
    /// Newlines in the log before `log_start` (for grep line numbers after the gap).
    pub(super) newlines_before: u64,
}

/// Where the spool takes bytes again after a gap: log `[log, …)` is at spool offset `phys..`
/// (up to the next resume's gap, or where the spool stops), and the log's bytes
/// `[gap_start, log)` are nowhere. The spool itself never has a hole: it is the log without
/// its gaps, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Resume {
    pub(super) log: u64,
    pub(super) phys: u64,
    /// Newlines in the log before `log`.
    pub(super) nl_log: u64,
    /// Newlines in the spool before `phys`.
    pub(super) nl_spool: u64,
    /// First byte of the gap this resume ends.
    pub(super) gap_start: u64,
    /// Why the gap's bytes are nowhere (`disk full`, `disk cap`, a truncated spool).
    pub(super) reason: String,
}

impl Resume {
    pub(super) fn gap(&self) -> Option<Gap> {
        (self.log > self.gap_start).then(|| Gap {
            start: self.gap_start,
            end: self.log,
            reason: self.reason.clone(),
        })
    }
}

/// Where the spool stopped taking bytes (a cap, a full disk), until a resume.
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
    /// Bytes the spool did not take (yet): only while it is stopped, at most `retained_cap`,
    /// the newest. They wait here to be written when the spool resumes.
    pub(super) ring: HotTail,
    /// Bytes in the spool file (its physical length).
    pub(super) spooled: u64,
    /// The spool is stopped now (bytes from `hit.at` on are in the ring or dropped).
    pub(super) stop: Option<Stop>,
    /// The last time the spool stopped, kept after a resume (what `cap_reached` reports).
    pub(super) hit: Option<CapHit>,
    /// Every place the spool took bytes again after a gap, in log order.
    pub(super) resumes: Vec<Resume>,
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
            hit: None,
            resumes: Vec::new(),
            current: None,
            index: PendingIndex::new(0),
            index_error: None,
            finished: false,
            resume_tried: None,
        }
    }

    /// Log offset where the bytes on disk end (the spool's end, in log offsets).
    pub(super) fn disk_end(&self) -> u64 {
        self.stop.as_ref().map_or(self.total, |s| s.hit.at)
    }

    pub(super) fn total_lines(&self) -> u64 {
        self.newlines + u64::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }

    /// Every range of the log that is neither on disk nor in memory, in order: the gap before
    /// each resume, and the bytes between where the spool stopped and the ring's oldest byte.
    /// The one list every reader names.
    pub(super) fn gaps(&self) -> Vec<Gap> {
        let mut gaps: Vec<Gap> = self.resumes.iter().filter_map(Resume::gap).collect();
        if let Some(stop) = &self.stop {
            let end = self.ring.start().max(stop.hit.at).min(self.total);
            if end > stop.hit.at {
                gaps.push(Gap { start: stop.hit.at, end, reason: stop.hit.reason.clone() });
            }
        }
        gaps
    }

    /// Where log offset `x` (before [`Self::disk_end`]) is in the spool, and the log offset
    /// where that stretch of the spool ends; `None` inside a gap.
    pub(super) fn phys(&self, x: u64) -> Option<(u64, u64)> {
        let i = self.resumes.partition_point(|r| r.log <= x);
        let (log, phys) = match i.checked_sub(1).map(|k| &self.resumes[k]) {
            Some(r) => (r.log, r.phys),
            None => (0, 0),
        };
        let end = self.resumes.get(i).map_or(self.disk_end(), |r| r.gap_start);
        (x < end).then(|| (phys + (x - log), end))
    }

    /// Newlines the gaps before the spool's end hold (log newlines minus spool newlines).
    pub(super) fn dropped_newlines(&self) -> u64 {
        self.resumes.last().map_or(0, |r| r.nl_log - r.nl_spool)
    }

    /// Where the spool stopped now, else where it last stopped.
    pub(super) fn cap_hit(&self) -> Option<CapHit> {
        self.stop.as_ref().map(|s| s.hit.clone()).or_else(|| self.hit.clone())
    }

    /// Frees the ring of a log whose bytes are all on disk (or dropped: a cap's gap).
    pub(super) fn release_ring(&mut self) {
        self.ring = HotTail::empty_at(0, self.total);
    }

    pub(super) fn progress(&self) -> Progress {
        Progress {
            total_bytes: self.total,
            cap_reached: self.hit.is_some(),
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
    /// Version 1 only: the one tail segment after the gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tail: Option<TailSegment>,
    #[serde(default)]
    pub(super) hit: Option<CapHit>,
    #[serde(default)]
    pub(super) resumes: Vec<Resume>,
    pub(super) gaps: Vec<Gap>,
    pub(super) index_records: u64,
    pub(super) index_error: Option<String>,
    pub(super) config: OutputConfig,
    /// Written at the end (or after it); `false`: written mid-run, at a gap, so a reader after
    /// the writer died knows where the spool's stretches start.
    #[serde(default = "written_at_the_end")]
    pub(super) finished: bool,
}

fn written_at_the_end() -> bool {
    true
}

/// Counters and layout at one instant, taken under the lock.
pub(super) struct Snap {
    pub(super) total: u64,
    pub(super) total_lines: u64,
    pub(super) stream_bytes: [u64; 4],
    /// Ranges neither on disk nor in memory ([`State::gaps`]), in order.
    pub(super) gaps: Vec<Gap>,
    pub(super) index: Option<IndexView>,
    /// The log's files, for the reads of this snapshot.
    pub(super) files: std::sync::Arc<super::Files>,
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

    /// Bytes of `[x, y)` that can be read (in no gap).
    pub(super) fn readable(&self, x: u64, y: u64) -> u64 {
        let len = y.saturating_sub(x);
        let lost: u64 = self.gaps.iter().map(|g| g.end.min(y).saturating_sub(g.start.max(x))).sum();
        len.saturating_sub(lost)
    }

    /// The gap that holds log offset `x`, if any.
    pub(super) fn gap_at(&self, x: u64) -> Option<&Gap> {
        self.gaps.iter().find(|g| g.start <= x && x < g.end)
    }

    /// The first gap that starts at or after `x`.
    pub(super) fn next_gap(&self, x: u64) -> Option<&Gap> {
        self.gaps.iter().find(|g| g.start >= x)
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
            tail: None,
            hit: st.hit.clone(),
            resumes: st.resumes.clone(),
            gaps: st.gaps(),
            index_records: st.index.durable,
            index_error: st.index_error.clone(),
            config: self.config.clone(),
            finished: st.finished,
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

    /// Writes `log.json` of a finished log again (after [`OutputLog::finish`](crate::OutputLog::finish) could not, e.g.
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
