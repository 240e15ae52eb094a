//! grep over a log's whole spool with `grep-searcher` + `grep-regex`: streaming, bounded memory
//! (a fixed read buffer that may grow to hold one line, up to [`GREP_HEAP_LIMIT`]), each returned
//! line cut to [`GREP_LINE_MAX_BYTES`].
//!
//! Offsets and line numbers are log ones: after a gap the spool holds the hot tail at other
//! offsets, and the log maps them back. A line that straddles the gap in the spool (the head's
//! last partial line glued to the tail's first) is reported at the head's offset. The search
//! covers what is on disk: while the command runs after the spool stopped, bytes only in the hot
//! tail are not searched (read them with a tail read).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use stockade_proto::{GrepLine, GrepResult, Stream};

use super::index::IndexView;
use super::{OutputError, OutputLog, cut, lock};

/// Matching lines returned when the request does not say.
pub(crate) const DEFAULT_MAX_MATCHES: usize = 100;
/// Hard cap on matching lines per grep.
pub const MAX_GREP_MATCHES: usize = 10_000;
/// Hard cap on context lines before/after each match.
pub const MAX_GREP_CONTEXT: usize = 50;
/// Each returned line is cut to this many bytes (plus an ellipsis).
pub const GREP_LINE_MAX_BYTES: usize = 1024;
/// The searcher holds one whole line in memory; a longer line is an error, not an allocation
/// that grows with the file.
pub const GREP_HEAP_LIMIT: usize = 64 * 1024 * 1024;

/// Reads spool bytes `[pos, end)` with `pread` (the log's lock is never held).
struct SpoolReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for SpoolReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.end - self.pos).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

/// Maps spool positions and line numbers back to the log.
#[derive(Clone, Copy)]
struct Mapping {
    stop: u64,
    /// (log start, spool start, newlines before log start, newlines before stop)
    tail: Option<(u64, u64, u64, u64)>,
}

impl Mapping {
    fn offset(&self, phys: u64) -> u64 {
        match self.tail {
            Some((log, spool, _, _)) if phys >= self.stop => log + (phys - spool),
            _ => phys,
        }
    }

    fn line(&self, phys: u64, line: u64) -> u64 {
        match self.tail {
            Some((_, _, nl_tail, nl_stop)) if phys >= self.stop => {
                (line + nl_tail).saturating_sub(nl_stop)
            }
            _ => line,
        }
    }
}

struct Collect<'a> {
    map: Mapping,
    index: Option<(Stream, &'a IndexView)>,
    max_matches: usize,
    lines: Vec<GrepLine>,
    matches: u64,
    truncated: bool,
    error: Option<OutputError>,
}

impl Collect<'_> {
    /// Whether the line at log offset `offset` passes the stream filter.
    fn wanted(&mut self, offset: u64) -> bool {
        let Some((s, ix)) = self.index else { return true };
        match ix.stream_at(offset) {
            Ok(found) => found == Some(s),
            Err(e) => {
                self.error.get_or_insert(e);
                false
            }
        }
    }

    fn push(&mut self, phys: u64, line: Option<u64>, bytes: &[u8], is_match: bool) {
        let offset = self.map.offset(phys);
        let line_number = self.map.line(phys, line.unwrap_or(0));
        self.lines.push(GrepLine { line_number, offset, text: bounded_text(bytes), is_match });
    }
}

/// The line without its terminator, cut to [`GREP_LINE_MAX_BYTES`] on a character boundary.
fn bounded_text(bytes: &[u8]) -> String {
    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() <= GREP_LINE_MAX_BYTES {
        return String::from_utf8_lossy(line).into_owned();
    }
    let cut = cut::floor_boundary(line, GREP_LINE_MAX_BYTES);
    let mut s = String::from_utf8_lossy(&line[..cut]).into_owned();
    s.push('…');
    s
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let phys = m.absolute_byte_offset();
        if !self.wanted(self.map.offset(phys)) {
            return Ok(self.error.is_none());
        }
        if self.matches as usize >= self.max_matches {
            self.truncated = true;
            return Ok(false);
        }
        self.matches += 1;
        self.push(phys, m.line_number(), m.bytes(), true);
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        let phys = c.absolute_byte_offset();
        if self.wanted(self.map.offset(phys)) {
            self.push(phys, c.line_number(), c.bytes(), false);
        }
        Ok(self.error.is_none())
    }
}

pub(crate) fn grep(log: &OutputLog, req: &super::GrepRequest) -> Result<GrepResult, OutputError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(req.ignore_case)
        .line_terminator(Some(b'\n'))
        .build(&req.pattern)
        .map_err(|e| OutputError::BadRegex {
            pattern: req.pattern.clone(),
            reason: regex_reason(&e.to_string()),
        })?;
    let snap = log.snapshot(req.stream.is_some())?;
    let (spooled, map) = {
        let st = lock(&log.state);
        let tail = match (&st.stop, st.tail) {
            (Some(stop), Some(t)) => {
                Some((t.log_start, t.phys_start, t.newlines_before, stop.newlines_before))
            }
            _ => None,
        };
        (st.spooled, Mapping { stop: st.stop_at(), tail })
    };
    let context = req.context.min(MAX_GREP_CONTEXT);
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(context)
        .after_context(context)
        .binary_detection(BinaryDetection::none())
        .heap_limit(Some(GREP_HEAP_LIMIT))
        .build();
    let mut sink = Collect {
        map,
        index: req.stream.zip(snap.index.as_ref()),
        max_matches: req.max_matches.clamp(1, MAX_GREP_MATCHES),
        lines: Vec::new(),
        matches: 0,
        truncated: false,
        error: None,
    };
    let files = log.files()?;
    let reader = SpoolReader { file: &files.spool, pos: 0, end: spooled };
    searcher.search_reader(&matcher, reader, &mut sink).map_err(|e| {
        if e.kind() == io::ErrorKind::OutOfMemory || e.to_string().contains("limit") {
            OutputError::Grep(format!("a line is longer than {GREP_HEAP_LIMIT} bytes: {e}"))
        } else {
            OutputError::io("grep spool", e)
        }
    })?;
    if let Some(e) = sink.error {
        return Err(e);
    }
    Ok(GrepResult {
        lines: sink.lines,
        matches: sink.matches,
        truncated: sink.truncated,
        spool_path: log.spool_path.clone(),
    })
}

/// The regex engine's message is several lines (the pattern, a caret, then `error: …`); keep the
/// last line, the reason, so the error is one sentence.
fn regex_reason(message: &str) -> String {
    let last = message.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(message);
    last.trim().trim_start_matches("error:").trim().to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_with_an_ellipsis() {
        let s = bounded_text(&vec![b'a'; 5000]);
        assert_eq!(s.len(), GREP_LINE_MAX_BYTES + '…'.len_utf8());
        assert_eq!(bounded_text(b"abc\r\n"), "abc");
    }
}
