//! Waiting that collects: what a `run`'s `yield_ms`, a `read`'s `wait_ms` and a `write`'s
//! `yield_ms` do before answering. The wait ends when its window ends, the session ends, the
//! answer is full (as many bytes or lines after the cursor as it can show), or a new line
//! matches an `until` pattern (the unfinished last line too: a prompt), or, for a write to a
//! terminal, output came and then went quiet ([`DEFAULT_QUIET`]) — never merely at the first new byte, so a poller pays one call
//! per window rather than one per line. Every door gets the same [`WaitReport`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use grep_matcher::Matcher as _;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use stockade_proto::OutputLimits;
use stockade_proto::rpc::{UntilMatch, WaitEnd, WaitReport};

use crate::EngineError;
use crate::session::Session;
use stockade_log::{OutputLog, strip_ansi};

/// Most bytes one scan for `until` reads from the log at once.
const SCAN_CHUNK: usize = 1024 * 1024;
/// Longest line kept for matching `until`; a longer one is matched on its first this-many bytes.
const MAX_LINE: usize = 64 * 1024;

/// A compiled `until` pattern.
#[derive(Debug, Clone)]
pub struct Until {
    matcher: RegexMatcher,
}

impl Until {
    /// Compile `pattern` (Rust regex syntax, as `grep`); a bad pattern is an invalid request.
    pub fn new(pattern: &str) -> Result<Until, EngineError> {
        RegexMatcherBuilder::new()
            .build(pattern)
            .map(|matcher| Until { matcher })
            .map_err(|e| EngineError::Invalid(format!("until is not a valid regex: {e}")))
    }

    fn is_match(&self, line: &str) -> bool {
        self.matcher.is_match(line.as_bytes()).unwrap_or(false)
    }
}

/// What a wait watches for besides its window and the session's end.
#[derive(Debug, Clone, Default)]
pub struct WaitFor {
    /// Where the answer starts: bytes and lines after it fill the answer; `until` looks only at
    /// lines that end after it.
    pub from: u64,
    /// End early once this much has arrived after `from` (`None`: the answer never fills, as
    /// for a tail view).
    pub full: Option<OutputLimits>,
    /// End early at the first new line matching this.
    pub until: Option<Until>,
    /// End at the first new byte after `from` (a plain long poll, not a collecting wait).
    pub first_byte: bool,
    /// End once output has arrived after `from` and nothing more for this long: an
    /// interactive program that answered and now waits (a REPL's prompt) ends the wait at
    /// once, not at the window's end.
    pub quiet: Option<Duration>,
}

/// How long a write to a terminal session waits for more output, once some has come, before
/// answering: long enough for a REPL's echo, answer and prompt (written within milliseconds of
/// each other), short enough that a step costs what the program takes.
pub const DEFAULT_QUIET: Duration = Duration::from_millis(250);

/// Scans the log forward from a cursor for complete lines matching `until`.
struct LineScan {
    until: Until,
    /// Bytes before this offset have been scanned.
    scanned: u64,
    /// Offset where `line` starts.
    line_start: u64,
    line: Vec<u8>,
    pty: bool,
}

impl LineScan {
    /// Scan what the log holds up to `total`; the first matching line, if any. Blocking (reads
    /// the spool).
    fn scan(&mut self, log: &OutputLog, total: u64, finished: bool) -> Option<UntilMatch> {
        while self.scanned < total {
            let Ok((bytes, next)) = log.read_raw(self.scanned, SCAN_CHUNK) else { return None };
            if next <= self.scanned {
                break;
            }
            // A gap (bytes not kept) moves the cursor past what was read: restart the line.
            let start = next - bytes.len() as u64;
            if start != self.scanned {
                self.line.clear();
                self.line_start = start;
            }
            let mut at = start;
            for piece in bytes.split_inclusive(|&b| b == b'\n') {
                let end = at + piece.len() as u64;
                if self.line.len() < MAX_LINE {
                    let room = MAX_LINE - self.line.len();
                    self.line.extend_from_slice(&piece[..piece.len().min(room)]);
                }
                if piece.ends_with(b"\n") {
                    if let Some(m) = self.check(end) {
                        return Some(m);
                    }
                    self.line.clear();
                    self.line_start = end;
                }
                at = end;
            }
            self.scanned = next;
        }
        // The unfinished last line counts too: a prompt (`>>> `, `$ `, `Password: `) ends
        // without a newline, and the program waits on it. It is kept, to be checked again
        // with what follows it (the last line of a finished log is complete all the same).
        if !self.line.is_empty() {
            let m = self.check(self.scanned);
            if finished {
                self.line.clear();
            }
            return m;
        }
        None
    }

    fn check(&self, end: u64) -> Option<UntilMatch> {
        let raw = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text =
            if self.pty { strip_ansi(raw) } else { String::from_utf8_lossy(raw).into_owned() };
        self.until.is_match(&text).then_some(UntilMatch {
            line: text,
            offset: self.line_start,
            cursor: end,
        })
    }
}

impl Session {
    /// Wait up to `window` (`None`: until the end) for what `what` asks, or for the session to
    /// end; say what ended it. Cancel-safe: dropping the future stops the wait and nothing else.
    pub async fn collect(&self, window: Option<Duration>, what: WaitFor) -> WaitReport {
        let started = Instant::now();
        let deadline = window.map(|w| tokio::time::Instant::now() + w);
        let log = Arc::clone(self.log());
        let mut progress = log.subscribe();
        let lines_at_start = log.stats().newlines;
        // The log's size when it last changed, and when that was seen (for `quiet`).
        let mut last_change = (what.from, tokio::time::Instant::now());
        let mut scan = what.until.map(|until| LineScan {
            until,
            scanned: what.from,
            line_start: what.from,
            line: Vec::new(),
            pty: self.pty_size().is_some(),
        });
        let report = |ended_by, matched| WaitReport {
            waited_ms: started.elapsed().as_millis() as u64,
            ended_by,
            matched,
        };
        loop {
            let now = *progress.borrow_and_update();
            let ended = self.state().is_terminal() || now.finished;
            if let Some(s) = scan.take() {
                let log2 = Arc::clone(&log);
                let total = now.total_bytes;
                // Scanning reads the spool: off the async workers.
                let scanned = tokio::task::spawn_blocking(move || {
                    let mut s = s;
                    let found = s.scan(&log2, total, ended);
                    (s, found)
                })
                .await;
                match scanned {
                    Ok((_, Some(m))) => return report(WaitEnd::Match, Some(m)),
                    Ok((s, None)) => scan = Some(s),
                    // The scan task failed: go on waiting for the rest without `until`.
                    Err(e) => tracing::warn!("the until scan failed: {e}"),
                }
            }
            if ended {
                if !self.state().is_terminal() {
                    // The log is finished, the state follows in a moment.
                    self.wait(Some(Duration::from_secs(2))).await;
                }
                return report(WaitEnd::Exit, None);
            }
            if what.first_byte && now.total_bytes > what.from {
                return report(WaitEnd::Output, None);
            }
            if let Some(limits) = what.full {
                let bytes = now.total_bytes.saturating_sub(what.from);
                let lines = log.stats().newlines.saturating_sub(lines_at_start);
                if bytes >= limits.max_bytes as u64 || lines >= limits.max_lines as u64 {
                    return report(WaitEnd::Full, None);
                }
            }
            if now.total_bytes != last_change.0 {
                last_change = (now.total_bytes, tokio::time::Instant::now());
            }
            // Once output came, a quiet spell ends the wait before the window does.
            let quiet_at = what
                .quiet
                .filter(|_| now.total_bytes > what.from)
                .map(|q| last_change.1 + q)
                .filter(|at| deadline.is_none_or(|d| *at < d));
            if quiet_at.is_some_and(|at| at <= tokio::time::Instant::now()) {
                return report(WaitEnd::Quiet, None);
            }
            let sleep = async {
                match quiet_at.or(deadline) {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = progress.changed() => {
                    if changed.is_err() {
                        // The log is gone with its writer: the session is ending.
                        self.wait(Some(Duration::from_secs(2))).await;
                        return report(WaitEnd::Exit, None);
                    }
                }
                _ = self.wait(None) => {}
                () = sleep => {
                    if quiet_at.is_none() {
                        return report(WaitEnd::Window, None);
                    }
                }
            }
        }
    }
}
