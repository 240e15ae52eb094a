//! Reading a log: the entry points [`OutputLog::read`] (a view, gathered by `collect` and cut
//! by `render`), [`OutputLog::read_raw`] and [`OutputLog::raw_view`] (exact bytes) and
//! [`OutputLog::grep`].

use stockade_proto::{GrepResult, OutputView, ReadMode, Stream};

use super::{GrepRequest, OutputError, OutputLog, ReadRequest, grep, render};
use crate::limits;

/// A read retries this often when the ring moved past bytes that were never spooled (only
/// possible after the spool stopped) before giving up.
const READ_ATTEMPTS: usize = 4;

impl OutputLog {
    /// A bounded, honest view of the log (see [`ReadRequest`]); the limits are clamped by
    /// [`limits::clamp`].
    pub fn read(&self, req: &ReadRequest) -> Result<OutputView, OutputError> {
        let limits = limits::clamp(req.limits);
        for _ in 0..READ_ATTEMPTS {
            let snap = self.snapshot(req.stream.is_some())?;
            let stream = snap.read_stream(req.stream);
            let req = &ReadRequest { stream, ..req.clone() };
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

    /// Exact bytes `[after, …)`, at most `max_bytes` (clamped to [`limits::MAX_BINARY_BYTES`];
    /// the doors clamp further with [`limits::raw_bytes`] or [`limits::binary_bytes`]), and the
    /// cursor to continue from. Stops at the start of a gap; a cursor inside a gap returns no
    /// bytes and the gap's end as the next cursor.
    pub fn read_raw(&self, after: u64, max_bytes: usize) -> Result<(Vec<u8>, u64), OutputError> {
        let mut buf = Vec::new();
        let next = self.read_raw_into(after, max_bytes, &mut buf)?;
        Ok((buf, next))
    }

    /// [`OutputLog::read_raw`] into `buf` (its bytes replaced): a reader that keeps its buffer
    /// from read to read does not fault fresh pages in for every answer.
    pub fn read_raw_into(
        &self,
        after: u64,
        max_bytes: usize,
        buf: &mut Vec<u8>,
    ) -> Result<u64, OutputError> {
        let max = max_bytes.min(limits::MAX_BINARY_BYTES) as u64;
        let read = self.read_raw_span(after, max, buf);
        if read.is_err() {
            buf.clear();
        }
        read
    }

    /// [`OutputLog::read_raw_into`]'s work: `buf` is resized, not cleared, so a buffer kept from
    /// read to read is only zeroed where it grows (a successful fetch overwrites every byte).
    fn read_raw_span(&self, after: u64, max: u64, buf: &mut Vec<u8>) -> Result<u64, OutputError> {
        for _ in 0..READ_ATTEMPTS {
            let snap = self.snapshot(false)?;
            let from = after.min(snap.total);
            if let Some(g) = snap.gap_at(from) {
                buf.clear();
                return Ok(g.end);
            }
            // Never across a gap: the next read jumps it.
            let to = snap.next_gap(from).map_or(snap.total, |g| g.start).min(from + max);
            buf.resize((to - from) as usize, 0);
            if self.fetch(&snap.files, from, buf)? {
                return Ok(to);
            }
        }
        Err(OutputError::ReadRaced)
    }

    /// Which stream wrote each byte of `[from, to)`: runs `(stream, start, end)` in log order
    /// (`None` for bytes the stream index has no record of). Lets a door that streams the raw
    /// bytes tell stdout from stderr without a second copy of the output.
    pub fn stream_runs(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(Option<Stream>, u64, u64)>, OutputError> {
        let snap = self.snapshot(true)?;
        let Some(index) = snap.index else { return Ok(vec![(None, from, to)]) };
        let mut runs = Vec::new();
        let (mut x, mut i) = (from, index.find(from)?);
        while x < to {
            let (stream, end) = match i {
                Some(i) => {
                    let (t, end) = index.segment(i)?;
                    (Some(t.stream), end)
                }
                None if index.len() > 0 => (None, index.get(0)?.offset),
                None => (None, to),
            };
            // A segment clipped to an older total ends the walk: the rest is the last stream.
            let end = if end <= x { to } else { end.min(to) };
            runs.push((stream, x, end));
            x = end;
            i = Some(i.map_or(0, |i| i + 1));
        }
        Ok(runs)
    }

    /// [`OutputLog::read_raw`] with the view that describes it: cursors and totals, no text
    /// (the bytes go beside it) and no notice (a raw reader continues from `next_cursor`).
    pub fn raw_view(
        &self,
        after: u64,
        max_bytes: usize,
    ) -> Result<(OutputView, Vec<u8>), OutputError> {
        let mut bytes = Vec::new();
        let view = self.raw_view_into(after, max_bytes, &mut bytes)?;
        Ok((view, bytes))
    }

    /// [`OutputLog::raw_view`] with the bytes read into `buf` (see
    /// [`OutputLog::read_raw_into`]).
    pub fn raw_view_into(
        &self,
        after: u64,
        max_bytes: usize,
        buf: &mut Vec<u8>,
    ) -> Result<OutputView, OutputError> {
        let next = self.read_raw_into(after, max_bytes, buf)?;
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
        Ok(view)
    }

    /// Searches the whole spool (see [`GrepRequest`]) with bounded memory.
    pub fn grep(&self, req: &GrepRequest) -> Result<GrepResult, OutputError> {
        grep::grep(self, req, &grep::GrepBounds::default())
    }
}
