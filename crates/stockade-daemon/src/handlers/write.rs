//! `write`: send bytes to a session's stdin pipe or terminal, optionally end its input, collect
//! output for `yield_ms`, and answer like a `read` delta from where the log stood just before
//! the write (Codex `write_stdin`), so the echo and the answer are both in it.

use std::sync::Arc;

use stockade_engine::{DEFAULT_QUIET, InputRefused, Until, WaitFor};
use stockade_log::ReadRequest;
use stockade_log::limits;
use stockade_proc::{DEFAULT_INPUT_TIMEOUT, InputError, PtyError};
use stockade_proto::ReadMode;
use stockade_proto::rpc::{
    DEFAULT_WRITE_YIELD_MS, ReadResult, Render, RpcError, WriteParams, code, decode_bytes,
};

use super::ctx::{Ctx, disconnected, wait};
use crate::error::{from_engine, join_error, rpc_error};

pub(super) async fn handle(ctx: &Ctx, p: WriteParams) -> Result<ReadResult, RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let until = p.until.as_deref().map(Until::new).transpose().map_err(from_engine)?;
    let bytes = match (p.chars, p.bytes_b64) {
        (Some(_), Some(_)) => {
            return Err(rpc_error(
                code::INVALID_PARAMS,
                "give the input as chars or as bytes_b64, not both",
            ));
        }
        (Some(chars), None) => chars.into_bytes(),
        (None, Some(b64)) => decode_bytes(b64.trim()).map_err(|e| {
            rpc_error(code::INVALID_PARAMS, format!("bytes_b64 is not valid base64: {e}"))
        })?,
        (None, None) => Vec::new(),
    };
    let cursor = match &p.idempotency_key {
        None => type_input(&session, bytes, p.close_stdin).await?,
        Some(key) => {
            stockade_engine::check_idempotency_key(key).map_err(from_engine)?;
            // The first call with the key types; a retry (or a call racing it) waits for that
            // and answers from where it started, typing nothing.
            let first = ctx.shared.write_keys.place(session.id(), key);
            first.get_or_init(|| type_input(&session, bytes, p.close_stdin)).await.clone()?
        }
    };
    let window = wait(p.yield_ms.unwrap_or(DEFAULT_WRITE_YIELD_MS));
    let limits = limits::view_limits(p.max_bytes, None);
    // A terminal session is an interactive program: answer once it has answered and gone quiet.
    let quiet = session.pty_size().map(|_| DEFAULT_QUIET);
    let what = WaitFor { from: cursor, full: Some(limits), until, first_byte: false, quiet };
    let report = tokio::select! {
        r = session.collect(Some(window), what) => r,
        () = ctx.conn.cancelled() => return Err(disconnected()),
    };
    // The state first: once it is terminal the log is complete, so the view reaches the end.
    let state = session.settle().await;
    let request = ReadRequest { mode: ReadMode::Delta, after: cursor, limits, stream: None };
    let s = Arc::clone(&session);
    let view = tokio::task::spawn_blocking(move || s.view(&request, Render::Text))
        .await
        .map_err(join_error)?
        .map_err(from_engine)?;
    Ok(ReadResult {
        id: session.id().to_owned(),
        state,
        view,
        wall_time_ms: session.wall_time().as_millis() as u64,
        wait: Some(report),
        bytes_b64: None,
        binary_len: None,
    })
}

/// Types `bytes` into the session and, with `close`, ends its input. Returns where the log
/// stood just before: the answer starts there, so it shows the echo and what the input caused.
async fn type_input(
    session: &stockade_engine::Session,
    bytes: Vec<u8>,
    close: bool,
) -> Result<u64, RpcError> {
    let cursor = session.log().stats().total_bytes;
    if !bytes.is_empty() {
        session.write_input(bytes, DEFAULT_INPUT_TIMEOUT).await.map_err(from_input)?;
    }
    if close {
        session.close_stdin(DEFAULT_INPUT_TIMEOUT).await.map_err(from_input)?;
    }
    Ok(cursor)
}

/// A refused `write`, `close_stdin` or `resize` as a JSON-RPC error. Input that did not (all)
/// get through is `INPUT_FAILED` with `data: {written, total}`.
pub(super) fn from_input(e: InputRefused) -> RpcError {
    let message = e.to_string();
    match e {
        InputRefused::NoInput { .. }
        | InputRefused::Ended { .. }
        | InputRefused::StdinClosed { .. }
        | InputRefused::NotPty { .. } => rpc_error(code::NOT_SUPPORTED, message),
        InputRefused::Input { source: InputError::Closed { written, total }, .. }
        | InputRefused::Input { source: InputError::Timeout { written, total, .. }, .. } => {
            RpcError {
                code: code::INPUT_FAILED,
                message,
                data: Some(serde_json::json!({ "written": written, "total": total })),
            }
        }
        InputRefused::Pty { source: PtyError::InvalidSize { .. }, .. } => {
            rpc_error(code::INVALID_PARAMS, message)
        }
        InputRefused::Input { .. } | InputRefused::Pty { .. } => {
            rpc_error(code::INTERNAL_ERROR, message)
        }
    }
}
