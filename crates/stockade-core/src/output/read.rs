//! Reading a log: a snapshot of its counters, fetching bytes from the ring or the spool,
//! walking the wanted segments in either direction and collecting them, and the entry points
//! [`OutputLog::read`] (a view, cut by `render`), [`OutputLog::read_raw`] and
//! [`OutputLog::raw_view`] (exact bytes) and [`OutputLog::grep`].

use std::os::unix::fs::FileExt;

use stockade_proto::{GrepResult, OutputView, ReadMode, Stream};

use super::index::IndexView;
use super::state::Snap;
use super::{GrepRequest, OutputError, OutputLog, ReadRequest, grep, lock, render};
use crate::limits;

/// A read retries this often when the ring moved past bytes that were never spooled (only
/// possible after the spool stopped) before giving up.
const READ_ATTEMPTS: usize = 4;

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
    pub(super) fn snapshot(&self, with_index: bool) -> Result<Snap, OutputError> {
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
            if !self.fetch(log, &mut buf[pos..pos + len])? {
                return Ok(None);
            }
            pieces.push(Piece { pos, log, len });
            pos += len;
        }
        Ok(Some(Collected { buf, pieces, complete }))
    }

    /// A bounded, honest view of the log (see [`ReadRequest`]); the limits are clamped by
    /// [`limits::clamp`].
    pub fn read(&self, req: &ReadRequest) -> Result<OutputView, OutputError> {
        let limits = limits::clamp(req.limits);
        for _ in 0..READ_ATTEMPTS {
            let snap = self.snapshot(req.stream.is_some())?;
            let mut r = render::Render::new(self, req, &snap, limits);
            let done = match req.mode {
                ReadMode::Delta => r.forward(req.after),
                ReadMode::Head => r.forward(0),
                ReadMode::Tail => r.tail(),
                ReadMode::Middle => r.middle(),
            }?;
            if done {
                return Ok(r.finish());
            }
        }
        Err(OutputError::ReadRaced)
    }

    /// Exact bytes `[after, …)`, at most `max_bytes` (clamped by [`limits::raw_bytes`]), and
    /// the cursor to continue from. Stops at the start of a gap; a cursor inside a gap returns
    /// no bytes and the gap's end as the next cursor.
    pub fn read_raw(&self, after: u64, max_bytes: usize) -> Result<(Vec<u8>, u64), OutputError> {
        let max = limits::raw_bytes(Some(max_bytes)) as u64;
        for _ in 0..READ_ATTEMPTS {
            let snap = self.snapshot(false)?;
            let from = after.min(snap.total);
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
                return Ok((buf, to));
            }
        }
        Err(OutputError::ReadRaced)
    }

    /// [`OutputLog::read_raw`] with the view that describes it: cursors and totals, no text
    /// (the bytes go beside it) and no notice (a raw reader continues from `next_cursor`).
    pub fn raw_view(
        &self,
        after: u64,
        max_bytes: usize,
    ) -> Result<(OutputView, Vec<u8>), OutputError> {
        let (bytes, next) = self.read_raw(after, max_bytes)?;
        let stats = self.stats();
        let view = OutputView {
            output: String::new(),
            notice: None,
            truncated: next < stats.total_bytes,
            start_cursor: after.min(stats.total_bytes),
            next_cursor: next,
            total_bytes: stats.total_bytes,
            total_lines: stats.total_lines,
            omitted_bytes: stats.total_bytes.saturating_sub(next),
            omitted_lines: None,
            dropped_bytes: stats.dropped_bytes,
            gaps: stats.gaps,
            spool_path: self.spool_path.clone(),
            stream: None,
        };
        Ok((view, bytes))
    }

    /// Searches the whole spool (see [`GrepRequest`]) with bounded memory.
    pub fn grep(&self, req: &GrepRequest) -> Result<GrepResult, OutputError> {
        grep::grep(self, req)
    }
}
