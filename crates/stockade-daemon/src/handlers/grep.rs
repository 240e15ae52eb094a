//! `grep`: search a session's whole spool with bounded memory.

use std::sync::Arc;

use stockade_core::output::GrepRequest;
use stockade_proto::rpc::{GrepParams, GrepResultMsg, RpcError};

use super::ctx::Ctx;
use crate::error::{from_engine, from_output, join_error};

/// Matching lines returned when `max_matches` is not given.
const DEFAULT_MAX_MATCHES: usize = 200;
/// Most matching lines one answer carries.
const MAX_MATCHES: usize = 10_000;
/// Most context lines around each match.
const MAX_CONTEXT: usize = 100;

pub(super) async fn handle(ctx: &Ctx, p: GrepParams) -> Result<GrepResultMsg, RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let request = GrepRequest {
        pattern: p.pattern,
        context: p.context.min(MAX_CONTEXT),
        max_matches: p.max_matches.unwrap_or(DEFAULT_MAX_MATCHES).clamp(1, MAX_MATCHES),
        ignore_case: p.ignore_case,
        stream: None,
    };
    let log = Arc::clone(session.log());
    let found = tokio::task::spawn_blocking(move || log.grep(&request))
        .await
        .map_err(join_error)?
        .map_err(|e| from_output(&e))?;
    Ok(GrepResultMsg {
        id: session.id().to_owned(),
        lines: found.lines,
        matches: found.matches,
        truncated: found.truncated,
        spool_path: found.spool_path,
    })
}
