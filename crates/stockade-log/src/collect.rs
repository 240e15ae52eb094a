//! Gathering log bytes for a view: a snapshot of the log's counters, fetching bytes from the
//! ring or the spool, walking the wanted segments in either direction, and collecting them into
//! one buffer that remembers where each piece came from. `render` cuts what this gathers.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use stockade_proto::Stream;

use super::index::IndexView;
use super::state::Snap;
use super::{Files, OutputError, OutputLog, lock, spool};

/// Which way a collection walks from its starting point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    /// From `from` towards `to`: the first wanted bytes (head, delta).
    Forward,
    /// From `to` back towards `from`: the last wanted bytes (tail).
    Backward,
}

/// A piece of a collected window: `len` bytes at `buf[pos..]` are log bytes `log..`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    pos: usize,
    log: u64,
    len: usize,
}

/// Bytes gathered for a view, in log order, with where each piece came from.
pub(super) struct Collected {
    pub(super) buf: Vec<u8>,
    pieces: Vec<Piece>,
    /// The walk reached the far end of its range (`to` forward, `from` backward).
    pub(super) complete: bool,
}

impl Collected {
    /// Log offset just past buffer position `i` (exclusive end of `buf[..i]`).
    pub(super) fn log_after(&self, i: usize, default: u64) -> u64 {
        if i == 0 {
            return self.pieces.first().map_or(default, |p| p.log);
        }
        let p = self.pieces.iter().rev().find(|p| p.pos < i).copied();
        p.map_or(default, |p| p.log + (i - p.pos) as u64)
    }

    /// Log offset of buffer position `i`.
    pub(super) fn log_at(&self, i: usize, default: u64) -> u64 {
        let p = self.pieces.iter().rev().find(|p| p.pos <= i && i < p.pos + p.len).copied();
        p.map_or(default, |p| p.log + (i - p.pos) as u64)
    }
}

impl OutputLog {
    /// Counters and layout at one instant. Looks at the spool's length first, so a spool cut
    /// short outside the daemon is a named gap before anything is read from it.
    pub(super) fn snapshot(&self, with_index: bool) -> Result<Snap, OutputError> {
        let files = self.files()?;
        if spool::file_len(&files.spool)? < lock(&self.state).spooled {
            let _writer = lock(&self.append_lock);
            self.check_spool(&files);
            if lock(&self.state).finished
                && let Err(e) = self.rewrite_meta()
            {
                tracing::debug!(error = %e, "log.json not written after a truncated spool");
            }
        }
        let st = lock(&self.state);
        let index = if with_index {
            if let Some(e) = &st.index_error {
                return Err(OutputError::IndexUnavailable(e.clone()));
            }
            Some(IndexView::new(
                Arc::clone(&files.index),
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
            gaps: st.gaps(),
            index,
            files: Arc::clone(&files),
        })
    }

    /// Copies log bytes `[x, x + out.len())` into `out`: the part the ring holds under the
    /// lock, the rest from the spool (where the log's layout puts it) without it. `Ok(false)`
    /// if some byte is in neither (a gap grew since the snapshot); the caller retries with a
    /// new snapshot.
    pub(super) fn fetch(&self, files: &Files, x: u64, out: &mut [u8]) -> Result<bool, OutputError> {
        let y = x + out.len() as u64;
        let mut reads = Vec::new();
        {
            let st = lock(&self.state);
            let from = x.max(st.ring.start());
            if from < y && !st.ring.copy_to(from, &mut out[(from - x) as usize..]) {
                return Ok(false);
            }
            let disk_end = from.min(y);
            let mut pos = x;
            while pos < disk_end {
                let Some((phys, end)) = st.phys(pos) else { return Ok(false) };
                let end = end.min(disk_end);
                reads.push((pos, end, phys));
                pos = end;
            }
        }
        for (pos, end, phys) in reads {
            let dst = &mut out[(pos - x) as usize..(end - x) as usize];
            files.spool.read_exact_at(dst, phys).map_err(|e| OutputError::io("read spool", e))?;
        }
        Ok(true)
    }

    /// The wanted segments of `[from, to)`, in order (reversed for [`Direction::Backward`]),
    /// minus the hole; with a stream filter, only that stream's. Calls `f` until it returns
    /// `false`.
    fn walk(
        &self,
        snap: &Snap,
        stream: Option<Stream>,
        (from, to): (u64, u64),
        dir: Direction,
        mut f: impl FnMut(u64, u64) -> Result<bool, OutputError>,
    ) -> Result<(), OutputError> {
        let backward = dir == Direction::Backward;
        // Split a range around the gaps; returns false when `f` wants no more.
        let mut emit = |a: u64, b: u64| -> Result<bool, OutputError> {
            let mut parts = Vec::with_capacity(2);
            let mut x = a;
            for g in snap.gaps.iter().filter(|g| g.end > a && g.start < b) {
                parts.push((x, g.start.min(b)));
                x = x.max(g.end);
            }
            parts.push((x, b));
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

    /// Up to `budget` wanted bytes of `[from, to)`: the first ones walking forward, the last
    /// ones walking backward; in log order either way. `None`: lost a race with the ring, retry
    /// with a new snapshot.
    pub(super) fn collect(
        &self,
        snap: &Snap,
        stream: Option<Stream>,
        range: (u64, u64),
        budget: usize,
        dir: Direction,
    ) -> Result<Option<Collected>, OutputError> {
        let mut plan = Vec::new();
        let mut room = budget;
        let mut complete = true;
        self.walk(snap, stream, range, dir, |a, b| {
            if room == 0 {
                complete = false;
                return Ok(false);
            }
            let n = (b - a).min(room as u64) as usize;
            // The part of `[a, b)` nearest the walk's start.
            plan.push(match dir {
                Direction::Forward => (a, n),
                Direction::Backward => (b - n as u64, n),
            });
            room -= n;
            complete = n == (b - a) as usize;
            Ok(complete)
        })?;
        if dir == Direction::Backward {
            plan.reverse();
        }
        let size = plan.iter().map(|p| p.1).sum();
        let mut buf = vec![0u8; size];
        let mut pieces = Vec::with_capacity(plan.len());
        let mut pos = 0;
        for (log, len) in plan {
            if !self.fetch(&snap.files, log, &mut buf[pos..pos + len])? {
                return Ok(None);
            }
            pieces.push(Piece { pos, log, len });
            pos += len;
        }
        Ok(Some(Collected { buf, pieces, complete }))
    }
}
