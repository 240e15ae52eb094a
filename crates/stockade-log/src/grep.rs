//! grep over a log's whole spool with `grep-searcher` + `grep-regex`: streaming, bounded in
//! memory and time.
//!
//! * Memory: a fixed read buffer that may grow to hold one line, up to [`GREP_HEAP_LIMIT`]; the
//!   compiled regex up to [`GREP_REGEX_SIZE_LIMIT`] (a pattern like `a{1000}{1000}` is refused
//!   before it allocates) and its lazy DFA cache up to [`GREP_DFA_SIZE_LIMIT`]; each returned line
//!   cut to [`GREP_LINE_MAX_BYTES`] and all returned text to [`GREP_RESULT_MAX_BYTES`].
//! * Time: [`GrepBounds`] carries a deadline and a cancel flag, checked before every read of the
//!   spool (at most [`GREP_CHUNK_BYTES`] at a time) and on every reported line.
//! * Speed: `^` and `$` are line anchors (multi-line mode, as ripgrep sets it). Without it they
//!   are haystack anchors, the matcher then cannot promise the searcher to stay inside one line,
//!   and the searcher drops to its line-by-line path — about ten times slower on `'^59999999$'`.
//!
//! Offsets and line numbers are log ones: after a gap the spool holds the hot tail at other
//! offsets, and the log maps them back. A line that straddles the gap in the spool (the head's
//! last partial line glued to the tail's first) is reported at the head's offset. The search
//! covers what is on disk, then the bytes a full disk kept only in memory (the hot tail, while
//! the command runs, and the newest bytes a finished log keeps).

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use stockade_proto::{GrepLine, GrepResult, Stream};

use super::index::IndexView;
use super::{OutputError, OutputLog, cut, lock};

/// Matching lines returned when the request does not say (every door: CLI, daemon, MCP).
pub const DEFAULT_GREP_MATCHES: usize = 200;
/// Hard cap on matching lines per grep.
pub(crate) const MAX_GREP_MATCHES: usize = 10_000;
/// Hard cap on context lines before/after each match.
pub(crate) const MAX_GREP_CONTEXT: usize = 100;
/// Each returned line is cut to this many bytes (plus an ellipsis).
pub(crate) const GREP_LINE_MAX_BYTES: usize = 1024;
/// The searcher holds one whole line in memory; a longer line is an error, not an allocation
/// that grows with the file.
pub(crate) const GREP_HEAP_LIMIT: usize = 64 * 1024 * 1024;
/// A line is searched in its first this many bytes; the rest of a longer one is skipped as it is
/// read (so one giant line costs no memory and the search goes on past it; offsets and line
/// numbers after it stay exact).
pub(crate) const GREP_SEARCHED_LINE_BYTES: u64 = 8 * 1024 * 1024;
/// Size limit of the compiled regex (`size_limit`): larger patterns are refused as bad regexes.
pub(crate) const GREP_REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;
/// Capacity of the lazy DFA's cache (`dfa_size_limit`); past it the engine clears the cache or
/// falls back to a slower engine, never grows.
pub(crate) const GREP_DFA_SIZE_LIMIT: usize = 8 * 1024 * 1024;
/// Most bytes of line text (matches and context) one grep returns; past it the answer is
/// `truncated`.
pub const GREP_RESULT_MAX_BYTES: usize = 8 * 1024 * 1024;
/// Most spool bytes handed to the searcher per read: the deadline and the cancel flag are checked
/// at least this often.
pub(crate) const GREP_CHUNK_BYTES: usize = 64 * 1024;
/// How long a grep may run when its caller sets no deadline.
pub const DEFAULT_GREP_TIMEOUT: Duration = Duration::from_secs(30);

/// When to give up a grep: a deadline and a flag another thread sets to stop it (the client went
/// away, the daemon stops). Both are checked between reads of the spool and on each reported line.
#[derive(Debug, Clone, Default)]
pub struct GrepBounds {
    /// Give up with [`OutputError::GrepTimedOut`] once this passes.
    pub deadline: Option<Instant>,
    /// Give up with [`OutputError::GrepCancelled`] once this is set.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl GrepBounds {
    /// A deadline `timeout` from now, no cancel flag.
    pub fn timeout(timeout: Duration) -> GrepBounds {
        GrepBounds { deadline: Some(Instant::now() + timeout), cancel: None }
    }
}

/// Why a bounded grep stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    Deadline,
    Cancelled,
}

/// The bounds of one running grep, shared by the reader and the sink.
struct Guard<'a> {
    bounds: &'a GrepBounds,
    started: Instant,
    stopped: Cell<Option<Stopped>>,
}

impl Guard<'_> {
    /// `Err` once the grep must stop (the reason is kept in `stopped`).
    fn check(&self) -> io::Result<()> {
        let why = if self.bounds.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            Some(Stopped::Cancelled)
        } else if self.bounds.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(Stopped::Deadline)
        } else {
            None
        };
        match why {
            None => Ok(()),
            Some(why) => {
                self.stopped.set(Some(why));
                Err(io::Error::other("grep stopped"))
            }
        }
    }
}

/// Reads spool bytes `[pos, end)` with `pread` (the log's lock is never held), checking the
/// grep's bounds before each read, and hands on at most [`GREP_SEARCHED_LINE_BYTES`] of each
/// line (the skipped bytes are noted in `cuts`, so positions map back).
struct SpoolReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
    guard: &'a Guard<'a>,
    /// Bytes of the current line handed on so far.
    line: u64,
    /// Bytes handed on so far (the searcher's offsets).
    given: u64,
    cuts: &'a Cuts,
}

/// Where bytes of over-long lines were skipped: `(searcher offset, bytes skipped before it)`,
/// ascending.
#[derive(Default)]
struct Cuts(RefCell<Vec<(u64, u64)>>);

impl Cuts {
    /// The spool position of the searcher's offset `at`.
    fn spool_pos(&self, at: u64) -> u64 {
        let cuts = self.0.borrow();
        let i = cuts.partition_point(|&(c, _)| c <= at);
        at + if i == 0 { 0 } else { cuts[i - 1].1 }
    }

    /// `n` more bytes skipped at the searcher's offset `at`.
    fn skip(&self, at: u64, n: u64) {
        let mut cuts = self.0.borrow_mut();
        let before = cuts.last().map_or(0, |&(_, d)| d);
        match cuts.last_mut() {
            Some(last) if last.0 == at => last.1 += n,
            _ => cuts.push((at, before + n)),
        }
    }
}

impl Read for SpoolReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.guard.check()?;
            let n = (self.end - self.pos).min(buf.len().min(GREP_CHUNK_BYTES) as u64) as usize;
            if n == 0 {
                return Ok(0);
            }
            let got = self.file.read_at(&mut buf[..n], self.pos)?;
            if got == 0 {
                return Ok(0);
            }
            self.pos += got as u64;
            let kept = self.keep_line_starts(&mut buf[..got]);
            // A read wholly inside a skipped line gives nothing; read on (0 would mean the end).
            if kept > 0 {
                self.given += kept as u64;
                return Ok(kept);
            }
        }
    }
}

impl SpoolReader<'_> {
    /// Compacts `buf` to the bytes the searcher gets; how many.
    fn keep_line_starts(&mut self, buf: &mut [u8]) -> usize {
        let mut kept = 0;
        let mut skipped = 0u64;
        for i in 0..buf.len() {
            let b = buf[i];
            if b == b'\n' || self.line < GREP_SEARCHED_LINE_BYTES {
                self.line = if b == b'\n' { 0 } else { self.line + 1 };
                if skipped > 0 {
                    self.cuts.skip(self.given + kept as u64, skipped);
                    skipped = 0;
                }
                buf[kept] = b;
                kept += 1;
            } else {
                skipped += 1;
            }
        }
        if skipped > 0 {
            self.cuts.skip(self.given + kept as u64, skipped);
        }
        kept
    }
}

/// Maps spool positions and line numbers back to the log: from each stretch's spool offset
/// on, (spool offset, log offset, newlines the gaps before it hold).
#[derive(Clone, Default)]
struct Mapping(Vec<(u64, u64, u64)>);

impl Mapping {
    fn at(&self, phys: u64) -> (u64, u64, u64) {
        let i = self.0.partition_point(|s| s.0 <= phys);
        i.checked_sub(1).map_or((0, 0, 0), |k| self.0[k])
    }

    fn offset(&self, phys: u64) -> u64 {
        let (spool, log, _) = self.at(phys);
        log + (phys - spool)
    }

    fn line(&self, phys: u64, line: u64) -> u64 {
        line + self.at(phys).2
    }
}

struct Collect<'a> {
    map: Mapping,
    index: Option<(Stream, &'a IndexView)>,
    max_matches: usize,
    lines: Vec<GrepLine>,
    /// Bytes of text in `lines`, bounded by [`GREP_RESULT_MAX_BYTES`].
    text_bytes: usize,
    matches: u64,
    truncated: bool,
    error: Option<OutputError>,
    guard: &'a Guard<'a>,
    cuts: &'a Cuts,
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

    /// Adds one line; `false` (and `truncated`) once the returned text reached its bound.
    fn push(&mut self, phys: u64, line: Option<u64>, bytes: &[u8], is_match: bool) -> bool {
        let offset = self.map.offset(phys);
        let line_number = self.map.line(phys, line.unwrap_or(0));
        let text = bounded_text(bytes);
        if self.text_bytes + text.len() > GREP_RESULT_MAX_BYTES {
            self.truncated = true;
            return false;
        }
        self.text_bytes += text.len();
        self.lines.push(GrepLine { line_number, offset, text, is_match });
        true
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
        self.guard.check()?;
        let phys = self.cuts.spool_pos(m.absolute_byte_offset());
        if !self.wanted(self.map.offset(phys)) {
            return Ok(self.error.is_none());
        }
        if self.matches as usize >= self.max_matches {
            self.truncated = true;
            return Ok(false);
        }
        if !self.push(phys, m.line_number(), m.bytes(), true) {
            return Ok(false);
        }
        self.matches += 1;
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        self.guard.check()?;
        let phys = self.cuts.spool_pos(c.absolute_byte_offset());
        if self.wanted(self.map.offset(phys)) && !self.push(phys, c.line_number(), c.bytes(), false)
        {
            return Ok(false);
        }
        Ok(self.error.is_none())
    }
}

/// The matcher for a grep: line anchors, `\n` as line terminator, bounded sizes.
fn matcher(req: &super::GrepRequest) -> Result<grep_regex::RegexMatcher, OutputError> {
    RegexMatcherBuilder::new()
        .case_insensitive(req.ignore_case)
        // Keeps the searcher's fast path for `^…$` (see the module docs).
        .multi_line(true)
        .line_terminator(Some(b'\n'))
        .size_limit(GREP_REGEX_SIZE_LIMIT)
        .dfa_size_limit(GREP_DFA_SIZE_LIMIT)
        .build(&req.pattern)
        .map_err(|e| OutputError::BadRegex {
            pattern: req.pattern.clone(),
            reason: regex_reason(&e.to_string()),
        })
}

pub(crate) fn grep(
    log: &OutputLog,
    req: &super::GrepRequest,
    bounds: &GrepBounds,
) -> Result<GrepResult, OutputError> {
    let matcher = matcher(req)?;
    let guard = Guard { bounds, started: Instant::now(), stopped: Cell::new(None) };
    let snap = log.snapshot(req.stream.is_some())?;
    let (spooled, map) = {
        let st = lock(&log.state);
        let stretches = st.resumes.iter().map(|r| (r.phys, r.log, r.nl_log - r.nl_spool));
        (st.spooled, Mapping(stretches.collect()))
    };
    let context = req.context.min(MAX_GREP_CONTEXT);
    let cuts = Cuts::default();
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(context)
        .after_context(context)
        .binary_detection(BinaryDetection::none())
        .heap_limit(Some(GREP_HEAP_LIMIT))
        .build();
    let mut sink = Collect {
        map,
        index: snap.read_stream(req.stream).zip(snap.index.as_ref()),
        max_matches: req.max_matches.clamp(1, MAX_GREP_MATCHES),
        lines: Vec::new(),
        text_bytes: 0,
        matches: 0,
        truncated: false,
        error: None,
        guard: &guard,
        cuts: &cuts,
    };
    let files = std::sync::Arc::clone(&snap.files);
    let reader = SpoolReader {
        file: &files.spool,
        pos: 0,
        end: spooled,
        guard: &guard,
        line: 0,
        given: 0,
        cuts: &cuts,
    };
    searcher.search_reader(&matcher, reader, &mut sink).map_err(|e| search_error(&guard, e))?;
    // Bytes a full disk kept off the spool are only in memory: searched after the spool, at
    // their log offsets and line numbers.
    let ring_cuts = Cuts::default();
    if let Some((from, newlines_before, bytes)) = in_memory(log)
        && sink.error.is_none()
        && !sink.truncated
    {
        sink.map = Mapping(vec![(0, from, newlines_before)]);
        sink.cuts = &ring_cuts;
        searcher.search_slice(&matcher, &bytes, &mut sink).map_err(|e| search_error(&guard, e))?;
    }
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

/// The log bytes held only in memory (the hot tail of a spool a full disk stopped): their log
/// offset, the newlines before it, and a copy.
fn in_memory(log: &OutputLog) -> Option<(u64, u64, Vec<u8>)> {
    let st = lock(&log.state);
    let from = st.ring.start();
    let mut bytes = vec![0u8; st.ring.len()];
    let copied = !bytes.is_empty() && st.ring.copy_to(from, &mut bytes);
    copied.then(|| (from, st.newlines - st.ring.count_newlines_from(from), bytes))
}

fn search_error(guard: &Guard<'_>, e: io::Error) -> OutputError {
    let elapsed_ms = u64::try_from(guard.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Some(why) = guard.stopped.get() {
        return match why {
            Stopped::Deadline => OutputError::GrepTimedOut { elapsed_ms },
            Stopped::Cancelled => OutputError::GrepCancelled,
        };
    }
    if e.kind() == io::ErrorKind::OutOfMemory || e.to_string().contains("limit") {
        OutputError::Grep(format!("a line is longer than {GREP_HEAP_LIMIT} bytes: {e}"))
    } else {
        OutputError::io("grep spool", e)
    }
}

impl OutputLog {
    /// [`OutputLog::grep`] that gives up at `bounds`' deadline or when its cancel flag is set.
    pub fn grep_bounded(
        &self,
        req: &super::GrepRequest,
        bounds: &GrepBounds,
    ) -> Result<GrepResult, OutputError> {
        grep(self, req, bounds)
    }
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

    /// The searcher takes its fast path (search the buffer, then find the line) only when the
    /// matcher promises a line terminator; anchors must not take that promise away.
    #[test]
    fn anchored_patterns_keep_the_line_terminator() {
        use grep_matcher::Matcher;
        for pattern in ["^59999999$", "^x", "y$", "literal", "(?i)^Error: .*$"] {
            let req = super::super::GrepRequest { pattern: pattern.into(), ..Default::default() };
            let m = matcher(&req).unwrap();
            assert!(m.line_terminator().is_some(), "{pattern} lost the line terminator");
        }
    }

    #[test]
    fn huge_compiled_patterns_are_refused_before_they_allocate() {
        let req =
            super::super::GrepRequest { pattern: "a{1000}{1000}".into(), ..Default::default() };
        match matcher(&req) {
            Err(OutputError::BadRegex { reason, .. }) => {
                assert!(reason.contains("limit"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn long_lines_are_cut_with_an_ellipsis() {
        let s = bounded_text(&vec![b'a'; 5000]);
        assert_eq!(s.len(), GREP_LINE_MAX_BYTES + '…'.len_utf8());
        assert_eq!(bounded_text(b"abc\r\n"), "abc");
    }
}
