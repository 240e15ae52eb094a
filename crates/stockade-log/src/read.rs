//! Reading a log: the entry points [`OutputLog::read`] (a view, gathered by `collect` and cut
//! by `render`), [`OutputLog::read_raw`] and [`OutputLog::raw_view`] (exact bytes) and
//! [`OutputLog::grep`].

use stockade_proto::{GrepResult, OutputView, ReadMode};

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
        grep::grep(self, req, &grep::GrepBounds::default())
    }
}
