//! `list`: the sessions the engine keeps, filtered by state and source; every one oldest first,
//! or with `limit` the running ones first, then the newest finished, and how many more exist.

use stockade_proto::rpc::{ListParams, ListResult, RpcError, SessionInfo, StateFilter};

use super::ctx::Ctx;
use crate::error::join_error;

pub(super) async fn handle(ctx: &Ctx, p: ListParams) -> Result<ListResult, RpcError> {
    let mut sessions = ctx.engine().sessions();
    sessions.retain(|s| {
        let running = !s.state().is_terminal();
        let state_ok = match p.state {
            None => true,
            Some(StateFilter::Running) => running,
            Some(StateFilter::Finished) => !running,
        };
        state_ok && p.source.as_deref().is_none_or(|src| s.source() == Some(src))
    });
    let mut more = 0;
    if let Some(limit) = p.limit {
        // Running first (oldest first, as kept), then finished, newest first.
        let (running, mut finished): (Vec<_>, Vec<_>) =
            sessions.into_iter().partition(|s| !s.state().is_terminal());
        finished.reverse();
        sessions = running.into_iter().chain(finished).collect();
        more = sessions.len().saturating_sub(limit) as u64;
        sessions.truncate(limit);
    }
    // Counting a running session's processes reads /proc: off the async workers.
    let infos = tokio::task::spawn_blocking(move || {
        sessions
            .iter()
            .map(|s| {
                let record = s.record();
                let stats = s.log().stats();
                let running = !record.state.is_terminal();
                SessionInfo {
                    id: record.id,
                    processes: if running { s.tree().members().len() } else { 0 },
                    state: record.state,
                    command: record.command,
                    pid: record.pid,
                    pgid: record.pgid,
                    total_bytes: stats.total_bytes,
                    total_lines: stats.total_lines,
                    dropped_bytes: stats.dropped_bytes,
                    started_at_ms: record.started_at_ms,
                    finished_at_ms: record.finished_at_ms,
                    wall_time_ms: s.wall_time().as_millis() as u64,
                    containment: record.containment,
                    capture: record.capture,
                    pty: s.pty_size().is_some(),
                    pty_size: s.pty_size(),
                    stdin_open: s.stdin_open(),
                    source: record.source,
                    spool_path: record.spool_path,
                }
            })
            .collect()
    })
    .await
    .map_err(join_error)?;
    Ok(ListResult { sessions: infos, more })
}
