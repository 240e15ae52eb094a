//! `read`: a bounded view (or exact bytes) of a session's log, optionally long-polling for new
//! output or the end. PTY sessions are shown as text without escape codes by default, as the
//! bytes were sent (`render: raw`), or as the screen a terminal shows (`render: screen`).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use stockade_core::Session;
use stockade_core::output::{ReadRequest, SCREEN_TAIL_BYTES, strip_ansi};
use stockade_proto::rpc::{ReadParams, ReadResult, Render, RpcError, code};
use stockade_proto::{OutputLimits, OutputView, ReadMode, Stream};

use super::ctx::{Ctx, disconnected, wait};
use crate::error::{from_engine, from_output, join_error, rpc_error};

/// Most bytes one view shows over the socket (a larger `max_bytes` is clamped; continue with
/// `next_cursor`).
pub(crate) const MAX_VIEW_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of a raw read when `max_bytes` is not given.
pub(crate) const DEFAULT_RAW_BYTES: usize = 1024 * 1024;
/// Most bytes of one raw read (before base64).
pub(crate) const MAX_RAW_BYTES: usize = 4 * 1024 * 1024;
/// Most lines one view shows.
pub(crate) const MAX_VIEW_LINES: usize = 1_000_000;
/// After the log is finished, how long to wait for the session's terminal state to be published
/// (the supervisor finishes the log first, then finalises).
const FINALIZE_WAIT: Duration = Duration::from_secs(2);

pub(crate) fn clamp_limits(limits: OutputLimits) -> OutputLimits {
    OutputLimits {
        max_bytes: limits.max_bytes.clamp(1, MAX_VIEW_BYTES),
        max_lines: limits.max_lines.clamp(1, MAX_VIEW_LINES),
    }
}

pub(super) async fn handle(ctx: &Ctx, p: ReadParams) -> Result<ReadResult, RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let mode = p.mode.unwrap_or(if p.after.is_some() { ReadMode::Delta } else { ReadMode::Tail });
    if p.raw && p.stream.is_some() {
        return Err(rpc_error(
            code::INVALID_PARAMS,
            "raw reads return every stream's bytes in order; drop stream or drop raw",
        ));
    }
    if p.raw && mode != ReadMode::Delta {
        return Err(rpc_error(
            code::INVALID_PARAMS,
            "raw reads go forward from after (mode delta); drop mode or drop raw",
        ));
    }
    if p.raw && p.render.is_some() {
        return Err(rpc_error(
            code::INVALID_PARAMS,
            "raw reads return exact bytes, render shapes text; drop one of raw and render",
        ));
    }
    let render = p.render.unwrap_or_default();
    if render == Render::Screen && session.pty_size().is_none() {
        return Err(rpc_error(
            code::NOT_SUPPORTED,
            format!(
                "render screen needs a terminal and {} does not run on one; read it as text",
                session.id()
            ),
        ));
    }
    let log = Arc::clone(session.log());
    if let Some(ms) = p.wait_ms.filter(|&ms| ms > 0)
        && !session.state().is_terminal()
    {
        let after = p.after.unwrap_or_else(|| log.stats().total_bytes);
        let timeout = wait(ms);
        tokio::select! {
            _ = log.wait_for_output(after, timeout) => {}
            _ = session.wait(Some(timeout)) => {}
            () = ctx.conn.cancelled() => return Err(disconnected()),
        }
    }
    if log.stats().finished && !session.state().is_terminal() {
        session.wait(Some(FINALIZE_WAIT)).await;
    }
    // The state first: once it is terminal the log is complete, so the view reaches the end.
    let state = session.state();
    let after = p.after.unwrap_or(0);
    if p.raw {
        let max = p.max_bytes.unwrap_or(DEFAULT_RAW_BYTES).min(MAX_RAW_BYTES);
        let log2 = Arc::clone(&log);
        // Encode on the blocking thread too, and let the raw bytes go before answering.
        let (encoded, next) = tokio::task::spawn_blocking(move || {
            log2.read_raw(after, max).map(|(bytes, next)| {
                (base64::engine::general_purpose::STANDARD.encode(bytes), next)
            })
        })
        .await
        .map_err(join_error)?
        .map_err(|e| from_output(&e))?;
        let stats = log.stats();
        let view = OutputView {
            output: String::new(),
            truncated: next < stats.total_bytes,
            start_cursor: after.min(stats.total_bytes),
            next_cursor: next,
            total_bytes: stats.total_bytes,
            total_lines: stats.total_lines,
            omitted_bytes: stats.total_bytes.saturating_sub(next),
            omitted_lines: None,
            dropped_bytes: stats.dropped_bytes,
            gaps: stats.gaps,
            spool_path: log.spool_path().to_path_buf(),
            stream: None,
        };
        return Ok(ReadResult {
            id: session.id().to_owned(),
            state,
            view,
            bytes_b64: Some(encoded),
        });
    }
    let request = ReadRequest {
        mode,
        after,
        limits: clamp_limits(OutputLimits {
            max_bytes: p.max_bytes.unwrap_or(stockade_proto::DEFAULT_MAX_BYTES),
            max_lines: p.max_lines.unwrap_or(stockade_proto::DEFAULT_MAX_LINES),
        }),
        stream: p.stream,
        label: Some(session.id().to_owned()),
    };
    let view = view(&session, request, render).await?;
    Ok(ReadResult { id: session.id().to_owned(), state, view, bytes_b64: None })
}

/// The view of `request` as `render` shapes it: for a PTY session, escape codes stripped
/// (`text`), left in (`raw`), or the current screen (`screen`); other sessions' text as it is.
pub(crate) async fn view(
    session: &Arc<Session>,
    request: ReadRequest,
    render: Render,
) -> Result<OutputView, RpcError> {
    let size = session.pty_size();
    let log = Arc::clone(session.log());
    tokio::task::spawn_blocking(move || match (render, size) {
        (Render::Screen, Some(size)) => {
            let stats = log.stats();
            let screen = log.render_screen(size)?;
            let replayed = SCREEN_TAIL_BYTES.min(log.config().retained_cap) as u64;
            Ok(OutputView {
                output: screen,
                truncated: false,
                start_cursor: stats.total_bytes.saturating_sub(replayed),
                next_cursor: stats.total_bytes,
                total_bytes: stats.total_bytes,
                total_lines: stats.total_lines,
                omitted_bytes: 0,
                omitted_lines: None,
                dropped_bytes: stats.dropped_bytes,
                gaps: stats.gaps,
                spool_path: log.spool_path().to_path_buf(),
                stream: Some(Stream::Pty),
            })
        }
        (Render::Text, Some(_)) => log.read(&request).map(|mut view| {
            // Cursors stay raw byte offsets; only the text loses its escape codes.
            view.output = strip_ansi(view.output.as_bytes());
            view
        }),
        _ => log.read(&request),
    })
    .await
    .map_err(join_error)?
    .map_err(|e| from_output(&e))
}
