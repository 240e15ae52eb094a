//! Rendering one view: which window of the log each mode collects, where it is cut (the rules
//! are in `cut`), and the facts of what was left out ([`Omission`]); each door words its own
//! hint from those.

use stockade_proto::{Gap, Omission, OutputLimits, OutputView};

use super::collect::{Collected, Direction};
use super::cut;
use super::index::stream_slot;
use super::state::Snap;
use super::{OutputError, OutputLog, ReadRequest};

/// Content a view always shows when there is any, however small `max_bytes` is.
const MIN_CONTENT_BYTES: usize = 256;
/// Longest UTF-8 encoding of one character: the least content that can always advance.
const MAX_UTF8_CHAR: usize = 4;

/// Builds one [`OutputView`].
pub(super) struct Render<'a> {
    log: &'a OutputLog,
    req: &'a ReadRequest,
    snap: &'a Snap,
    max_bytes: usize,
    max_lines: usize,
    out: String,
    truncated: bool,
    start_cursor: u64,
    next_cursor: u64,
    omitted_bytes: u64,
    omitted_lines: Option<u64>,
    /// Where a reader reads on from what was left out (the notice's `after`).
    more_after: u64,
    /// The gap this view stopped at or jumped (the notice's `dropped`).
    dropped: Option<Gap>,
}

/// A window of bytes that a view may cut.
struct Window {
    c: Collected,
    /// Offset in `c.buf` where the candidate bytes begin (1 when the first byte is only there
    /// to tell whether the window starts a line).
    skip: usize,
    at_line_start: bool,
}

impl<'a> Render<'a> {
    pub(super) fn new(
        log: &'a OutputLog,
        req: &'a ReadRequest,
        snap: &'a Snap,
        limits: OutputLimits,
    ) -> Render<'a> {
        Render {
            log,
            req,
            snap,
            max_bytes: limits.max_bytes,
            max_lines: limits.max_lines,
            out: String::new(),
            truncated: false,
            start_cursor: 0,
            next_cursor: snap.total,
            omitted_bytes: 0,
            omitted_lines: None,
            more_after: 0,
            dropped: None,
        }
    }

    /// Bytes a door's hint (and a marker) may take: an upper bound, so the content plus the hint
    /// stays within `max_bytes` where it can.
    fn reserve(&self) -> usize {
        let dropped = self.snap.gaps.last().map(|g| cut::dropped_phrase(g.start, g.end, &g.reason));
        let hint = cut::HINT_BYTES
            + cut::amount(self.snap.total, Some(self.snap.total_lines)).len()
            + dropped.map_or(0, |d| d.len())
            + self.snap.total.to_string().len();
        let marker = cut::middle_marker(self.snap.total, Some(self.snap.total_lines));
        hint + 2 * marker.len() + 2
    }

    /// Content bytes of the view. The hint is paid for out of `max_bytes` where it fits; when
    /// `max_bytes` is smaller than the hint, the content still gets up to
    /// [`MIN_CONTENT_BYTES`] (and the answer exceeds `max_bytes` by the notice): a cursor read
    /// must always make progress, or a reader would loop forever on the same offset.
    fn budget(&self) -> usize {
        let floor = self.max_bytes.clamp(MAX_UTF8_CHAR, MIN_CONTENT_BYTES);
        self.max_bytes.saturating_sub(self.reserve()).max(floor)
    }

    fn stream_total(&self) -> u64 {
        self.req.stream.map_or(self.snap.total, |s| self.snap.stream_bytes[stream_slot(s)])
    }

    /// Bytes of the wanted range before log offset `x` (readable ones, or the stream's).
    fn wanted_before(&self, x: u64) -> Result<u64, OutputError> {
        match (self.req.stream, self.snap.index.as_ref()) {
            (Some(s), Some(ix)) => ix.stream_bytes_before(s, x),
            _ => Ok(self.snap.readable(0, x)),
        }
    }

    /// Delta/head: from `after` forward.
    pub(super) fn forward(&mut self, after: u64) -> Result<bool, OutputError> {
        let snap = self.snap;
        let mut from = after.min(snap.total);
        let mut to = snap.total;
        if self.req.stream.is_none() {
            while let Some(g) = snap.gap_at(from) {
                self.out.push_str(&cut::gap_marker(g.start, g.end, &g.reason));
                from = g.end;
                self.dropped = Some(g.clone());
            }
            // Never cross a gap silently: stop at it; the next read jumps it.
            if let Some(g) = snap.next_gap(from) {
                to = g.start;
                self.dropped = Some(g.clone());
            }
        }
        self.start_cursor = from;
        let range = (from, to);
        let Some(c) = self.log.collect(
            snap,
            self.req.stream,
            range,
            self.max_bytes + 1,
            Direction::Forward,
        )?
        else {
            return Ok(false);
        };
        let fits = c.complete
            && to == snap.total
            && c.buf.len() <= self.max_bytes
            && cut::line_count(&c.buf) <= self.max_lines as u64;
        let text = lossy(&c.buf);
        if fits && text.len() <= self.max_bytes {
            self.out.push_str(&text);
            self.next_cursor = snap.total;
            return Ok(true);
        }
        let budget = self.budget();
        let (keep, text) = cut_head(&c.buf, c.complete, budget, self.max_lines);
        self.out.push_str(&text);
        self.truncated = true;
        self.next_cursor =
            if keep == c.buf.len() && c.complete { to } else { c.log_after(keep, from) };
        self.omitted_bytes =
            self.stream_total().saturating_sub(self.wanted_before(self.next_cursor)?);
        if after == 0 && self.req.stream.is_none() {
            self.omitted_lines =
                Some(snap.total_lines.saturating_sub(cut::line_count(&c.buf[..keep])));
        }
        self.more_after = self.next_cursor;
        Ok(true)
    }

    fn tail_window(&self, budget: usize) -> Result<Option<Window>, OutputError> {
        let floor = match (self.req.stream, self.snap.gaps.last()) {
            (None, Some(g)) => g.end,
            _ => 0,
        };
        let range = (floor, self.snap.total);
        let Some(c) =
            self.log.collect(self.snap, self.req.stream, range, budget + 1, Direction::Backward)?
        else {
            return Ok(None);
        };
        let (skip, at_line_start) =
            if c.complete { (0, true) } else { (1, c.buf.first() == Some(&b'\n')) };
        Ok(Some(Window { c, skip, at_line_start }))
    }

    pub(super) fn tail(&mut self) -> Result<bool, OutputError> {
        let Some(w) = self.tail_window(self.max_bytes)? else { return Ok(false) };
        let bytes = &w.c.buf[w.skip..];
        let whole = w.c.complete && (self.snap.gaps.is_empty() || self.req.stream.is_some());
        let text = lossy(bytes);
        if whole
            && bytes.len() <= self.max_bytes
            && cut::line_count(bytes) <= self.max_lines as u64
            && text.len() <= self.max_bytes
        {
            self.start_cursor = w.c.log_at(0, self.snap.total);
            self.out.push_str(&text);
            return Ok(true);
        }
        let (start, text) =
            cut_tail(bytes, w.at_line_start, w.c.complete, self.budget(), self.max_lines);
        self.start_cursor = w.c.log_at(w.skip + start, self.snap.total);
        self.out.push_str(&text);
        self.truncated = true;
        let shown = (bytes.len() - start) as u64;
        self.omitted_bytes = self.stream_total().saturating_sub(shown);
        if self.req.stream.is_none() {
            self.omitted_lines =
                Some(self.snap.total_lines.saturating_sub(cut::line_count(&bytes[start..])));
        }
        self.more_after = 0;
        Ok(true)
    }

    pub(super) fn middle(&mut self) -> Result<bool, OutputError> {
        // Whatever fits whole is shown whole, as a head read would.
        if self.stream_total() <= self.max_bytes as u64 {
            return self.forward(0);
        }
        let half = self.budget() / 2;
        let (head_lines, tail_lines) = (self.max_lines / 2, self.max_lines - self.max_lines / 2);
        let to = match (self.req.stream, self.snap.gaps.first()) {
            (None, Some(g)) => g.start,
            _ => self.snap.total,
        };
        let Some(h) =
            self.log.collect(self.snap, self.req.stream, (0, to), half + 1, Direction::Forward)?
        else {
            return Ok(false);
        };
        let Some(w) = self.tail_window(half)? else { return Ok(false) };
        let (keep, head_text) = cut_head(&h.buf, h.complete, half, head_lines);
        let head_end = if keep == h.buf.len() && h.complete { to } else { h.log_after(keep, 0) };
        let bytes = &w.c.buf[w.skip..];
        let (mut start, _) = cut_tail(bytes, w.at_line_start, w.c.complete, half, tail_lines);
        let mut tail_start = w.c.log_at(w.skip + start, self.snap.total);
        if tail_start < head_end {
            // The halves overlap (little output, many lines): show the tail from the head's end.
            let skip = (head_end - tail_start) as usize;
            start = (start + skip).min(bytes.len());
            tail_start = head_end;
        }
        let tail_text = lossy(&bytes[start..]);
        let shown = keep as u64 + (bytes.len() - start) as u64;
        let omitted = self.stream_total().saturating_sub(shown);
        let omitted_lines = self.req.stream.is_none().then(|| {
            self.snap
                .total_lines
                .saturating_sub(cut::line_count(&h.buf[..keep]) + cut::line_count(&bytes[start..]))
        });
        self.out.push_str(&head_text);
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
        self.out.push_str(&cut::middle_marker(omitted, omitted_lines));
        self.out.push_str(&tail_text);
        self.truncated = omitted > 0 || tail_start > head_end;
        self.start_cursor = 0;
        self.omitted_bytes = omitted;
        self.omitted_lines = omitted_lines;
        self.more_after = head_end;
        Ok(true)
    }

    pub(super) fn finish(self) -> OutputView {
        let gaps: Vec<Gap> = self.snap.gaps.clone();
        let nearest = match self.req.mode {
            stockade_proto::ReadMode::Middle => gaps.first(),
            _ => gaps.last(),
        };
        let dropped = self.dropped.clone().or_else(|| nearest.cloned());
        let notice = self.truncated.then_some(Omission {
            omitted_bytes: self.omitted_bytes,
            omitted_lines: self.omitted_lines,
            dropped,
            after: self.more_after,
        });
        OutputView {
            output: self.out,
            notice,
            truncated: self.truncated,
            start_cursor: self.start_cursor,
            next_cursor: self.next_cursor,
            total_bytes: self.snap.total,
            total_lines: self.snap.total_lines,
            omitted_bytes: self.omitted_bytes,
            omitted_lines: self.omitted_lines,
            dropped_bytes: gaps.iter().map(|g| g.end - g.start).sum(),
            gaps,
            spool_path: self.log.spool_path.clone(),
            stream: self.req.stream,
        }
    }
}

/// `bytes` as text, each byte that is not valid UTF-8 spelled `\xNN`: visible and exact (which
/// byte it was), where U+FFFD would hide it.
fn lossy(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The head cut, shrunk until the lossy text (an invalid byte becomes 4-byte `\xNN`) fits `budget`.
fn cut_head(bytes: &[u8], complete: bool, budget: usize, max_lines: usize) -> (usize, String) {
    let mut b = budget;
    loop {
        let keep = cut::keep_head(bytes, complete, b, max_lines);
        let text = lossy(&bytes[..keep]);
        if text.len() <= budget || b == 0 {
            return (keep, text);
        }
        b = shrink(b, text.len(), budget);
    }
}

/// The next byte budget when `b` bytes rendered as `rendered` (> `budget`) bytes of text.
fn shrink(b: usize, rendered: usize, budget: usize) -> usize {
    let scaled = (b as u128 * budget as u128 / rendered.max(1) as u128) as usize;
    scaled.min(b.saturating_sub(1))
}

/// The tail cut, shrunk the same way.
fn cut_tail(
    bytes: &[u8],
    at_line_start: bool,
    complete: bool,
    budget: usize,
    max_lines: usize,
) -> (usize, String) {
    let mut b = budget;
    loop {
        let start = cut::keep_tail(bytes, at_line_start, complete, b, max_lines);
        let text = lossy(&bytes[start..]);
        if text.len() <= budget || b == 0 {
            return (start, text);
        }
        b = shrink(b, text.len(), budget);
    }
}
