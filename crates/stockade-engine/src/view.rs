//! What a door asks to see of a session, and the view the engine answers with. Every door (the
//! CLI's foreground `run`, the daemon's `run`/`read`/`write`, and through the daemon the MCP
//! tools) turns its parameters into a [`ReadRequest`] here and gets the [`OutputView`] from
//! [`Session::view`] or [`Session::raw_view`] (a `run`'s whole answer from
//! [`Session::run_result`]), so they all answer alike: the same defaults, the same clamp
//! ([`stockade_log::limits`]), the same rendering of terminal output.

use std::time::Duration;

use stockade_proto::rpc::{ReadEncoding, ReadParams, Render, WaitReport};
use stockade_proto::{Omission, OutputView, ReadMode, RunResult, SessionState};

use crate::EngineError;
use crate::session::Session;
use stockade_log::limits;
use stockade_log::{ReadRequest, count_newlines, strip_ansi};

/// Longest skipped range whose lines a tail since a cursor counts (a page-cache read of this
/// much takes milliseconds); beyond it the notice gives bytes only.
const MAX_COUNTED_BYTES: u64 = 256 * 1024 * 1024;
/// Bytes read at once while counting.
const COUNT_CHUNK: usize = 1024 * 1024;

/// After the log is finished, how long [`Session::settle`] waits for the terminal state to be
/// published (the supervisor finishes the log first, then finalises).
const FINALIZE_WAIT: Duration = Duration::from_secs(2);

/// What one `read` asks for: a bounded view as `render` shapes it, or exact bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadPlan {
    /// A bounded view ([`Session::view`]).
    View {
        /// Which part, how much.
        request: ReadRequest,
        /// How a PTY session's bytes are shown.
        render: Render,
    },
    /// Exact bytes from `after` ([`Session::raw_view`]).
    Raw {
        /// The cursor to read from.
        after: u64,
        /// At most this many bytes (clamped by [`limits::raw_bytes`], or by
        /// [`limits::binary_bytes`] for bytes sent as binary).
        max_bytes: usize,
    },
}

impl Session {
    /// How to serve `p` on this session: defaults filled in (the tail without `after`, a delta
    /// with it), limits clamped, and the combinations that cannot be served refused (raw bytes
    /// with a stream filter, a mode or a render; a screen without a terminal).
    pub fn plan_read(&self, p: &ReadParams) -> Result<ReadPlan, EngineError> {
        let mode =
            p.mode.unwrap_or(if p.after.is_some() { ReadMode::Delta } else { ReadMode::Tail });
        let after = p.after.unwrap_or(0);
        let binary = p.encoding == Some(ReadEncoding::Binary);
        if binary && !p.raw {
            return Err(EngineError::Invalid(
                "encoding binary sends a raw read's bytes; add raw: true or drop encoding".into(),
            ));
        }
        if p.raw {
            let refuse = if p.stream.is_some() {
                Some("raw reads return every stream's bytes in order; drop stream or drop raw")
            } else if mode != ReadMode::Delta {
                Some("raw reads go forward from after (mode delta); drop mode or drop raw")
            } else if p.render.is_some() {
                Some("raw reads return exact bytes, render shapes text; drop one of raw and render")
            } else {
                None
            };
            if let Some(sentence) = refuse {
                return Err(EngineError::Invalid(sentence.into()));
            }
            let max_bytes = if binary {
                limits::binary_bytes(p.max_bytes)
            } else {
                limits::raw_bytes(p.max_bytes)
            };
            return Ok(ReadPlan::Raw { after, max_bytes });
        }
        let render = p.render.unwrap_or_default();
        if render == Render::Screen && self.pty_size().is_none() {
            return Err(self.no_terminal());
        }
        let request = ReadRequest {
            mode,
            after,
            limits: limits::view_limits(p.max_bytes, p.max_lines),
            stream: p.stream,
        };
        Ok(ReadPlan::View { request, render })
    }

    /// The view of `request` as `render` shapes it: for a PTY session, escape codes stripped
    /// (`text`, the default), left in (`raw`), or the current screen (`screen`); other sessions'
    /// text as it is (the MCP door renders it for the model with the same [`strip_ansi`]). A `tail` with a cursor (`after` > 0) is the tail of what follows the
    /// cursor (`Session::tail_since`). Reads the spool: call it where blocking is fine.
    pub fn view(&self, request: &ReadRequest, render: Render) -> Result<OutputView, EngineError> {
        if request.mode == ReadMode::Tail
            && request.after > 0
            && request.stream.is_none()
            && render != Render::Screen
        {
            return self.tail_since(request, render);
        }
        self.shaped(request, render)
    }

    /// The newest output after `request.after`, within the limits: everything after the cursor
    /// when it fits, else the log's tail, and the notice says how many bytes and lines between
    /// the cursor and the tail were skipped and that reading on from the cursor shows them. A
    /// follower that looks now and then sees what is new without paging through a loud log.
    fn tail_since(&self, request: &ReadRequest, render: Render) -> Result<OutputView, EngineError> {
        let after = request.after;
        let whole = ReadRequest { after: 0, ..request.clone() };
        let mut view = self.shaped(&whole, render)?;
        if !view.truncated || view.start_cursor <= after {
            // What follows the cursor fits: show it from the cursor, as a delta would.
            let delta = ReadRequest { mode: ReadMode::Delta, ..request.clone() };
            return self.shaped(&delta, render);
        }
        let (start, gaps) = (view.start_cursor, &view.gaps);
        let dropped: u64 =
            gaps.iter().map(|g| g.end.min(start).saturating_sub(g.start.max(after))).sum();
        let skipped = (start - after).saturating_sub(dropped);
        let lines = self.newlines_between(after, start);
        view.omitted_bytes = skipped;
        view.omitted_lines = lines;
        view.notice = Some(Omission {
            omitted_bytes: skipped,
            omitted_lines: lines,
            dropped: view.notice.take().and_then(|o| o.dropped),
            after,
        });
        Ok(view)
    }

    /// Newlines in the log's bytes `[from, to)` (`None` when that range is too long to count
    /// or cannot be read). Reads the spool.
    fn newlines_between(&self, from: u64, to: u64) -> Option<u64> {
        if to.saturating_sub(from) > MAX_COUNTED_BYTES {
            return None;
        }
        let log = self.log();
        let (mut at, mut lines) = (from, 0);
        while at < to {
            let want = usize::try_from(to - at).unwrap_or(COUNT_CHUNK).min(COUNT_CHUNK);
            let (bytes, next) = log.read_raw(at, want).ok()?;
            if next <= at {
                return None;
            }
            let keep = usize::try_from(to.min(next) - (next - bytes.len() as u64)).ok()?;
            lines += count_newlines(&bytes[..keep.min(bytes.len())]);
            at = next;
        }
        Some(lines)
    }

    /// [`Session::view`] without the cursor rule of a tail.
    fn shaped(&self, request: &ReadRequest, render: Render) -> Result<OutputView, EngineError> {
        let log = self.log();
        let view = match (render, self.pty_size()) {
            (Render::Screen, Some(size)) => log.screen_view(size)?,
            (Render::Screen, None) => return Err(self.no_terminal()),
            (Render::Text, Some(_)) => {
                let mut view = log.read(request)?;
                // Cursors stay raw byte offsets; only the text loses its escape codes.
                view.output = strip_ansi(view.output.as_bytes());
                view
            }
            _ => log.read(request)?,
        };
        Ok(view)
    }

    /// Exact bytes from `after` (at most `max_bytes`, clamped by [`limits::raw_bytes`]'s
    /// maximum) and the view describing them (cursors and totals; `output` empty). Reads the
    /// spool: call it where blocking is fine.
    pub fn raw_view(
        &self,
        after: u64,
        max_bytes: usize,
    ) -> Result<(OutputView, Vec<u8>), EngineError> {
        Ok(self.log().raw_view(after, max_bytes)?)
    }

    /// [`Session::raw_view`] with the bytes read into `buf` (its bytes replaced), a buffer the
    /// caller keeps from read to read.
    pub fn raw_view_into(
        &self,
        after: u64,
        max_bytes: usize,
        buf: &mut Vec<u8>,
    ) -> Result<OutputView, EngineError> {
        Ok(self.log().raw_view_into(after, max_bytes, buf)?)
    }

    /// The answer to a `run` (foreground or background, any door): the state, then the view of
    /// `request` as text (a PTY session's without escape codes, as `read` shows it by
    /// default), with the session's facts. The state comes first: once it is terminal the log
    /// is complete, so the view shows the end. Reads the spool: call it where blocking is fine.
    pub fn run_result(
        &self,
        request: &ReadRequest,
        deduplicated: bool,
        wait: Option<WaitReport>,
    ) -> Result<RunResult, EngineError> {
        let state = self.state();
        let view = self.view(request, Render::Text)?;
        Ok(RunResult {
            id: self.id().to_owned(),
            state,
            pid: self.pid(),
            cwd: self.cwd().map(ToOwned::to_owned),
            wall_time_ms: self.wall_time().as_millis() as u64,
            cleanup: self.end().and_then(|e| e.cleanup),
            deduplicated,
            view,
            wait,
            sandbox: self.spec().and_then(|s| s.sandbox_in_force.as_ref()).map(sandbox_said),
        })
    }

    fn no_terminal(&self) -> EngineError {
        EngineError::NotSupported(format!(
            "render screen needs a terminal and {} does not run on one; read it as text",
            self.id()
        ))
    }

    /// The state to answer with next to a view. Once the log is finished the session is about
    /// to end: wait (briefly) for the terminal state, so an answer never pairs a complete log
    /// with `running`. Take it before the view: once it is terminal the view reaches the end.
    pub async fn settle(&self) -> SessionState {
        if self.log().stats().finished && !self.state().is_terminal() {
            self.wait(Some(FINALIZE_WAIT)).await;
        }
        self.state()
    }
}

/// A sandbox in force as an answer says it: the policy, and — where sandboxed sessions get no
/// namespaces of their own — that, why, and what does not hold then.
fn sandbox_said(policy: &stockade_proto::Sandbox) -> String {
    match stockade_proc::namespaces::known_missing().filter(|_| policy.confines()) {
        Some(why) => format!(
            "{policy}; namespaces: unavailable ({why}): {}",
            stockade_proc::namespaces::WITHOUT_NAMESPACES
        ),
        None => policy.to_string(),
    }
}
