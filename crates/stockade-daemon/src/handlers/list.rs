//! `list`: the sessions the engine keeps, filtered by state and source; every one oldest first,
//! or with `limit` the running ones first, then the newest finished, and how many more exist.
//!
//! Counting processes costs O(the sessions' processes) per call: a session with a cgroup is
//! counted from its `cgroup.procs`, one under a live keeper from the keeper's descendants, the
//! others from one `/proc` census shared by all of them (taken only when one of them runs).

use stockade_engine::LIST_FRESH;
use stockade_proc::ProcessCensus;
use stockade_proto::rpc::{ListParams, ListResult, RpcError, SessionInfo, StateFilter};

use super::ctx::Ctx;
use crate::error::join_error;

pub(super) async fn handle(ctx: &Ctx, p: ListParams) -> Result<ListResult, RpcError> {
    // Foreground runs of other processes, and owners that died, are seen before answering
    // (the owner watch's last look serves when it is recent and nothing changed since).
    stockade_engine::sync_others_unless_fresh(ctx.engine(), LIST_FRESH).await;
    let mut sessions = ctx.engine().sessions();
    sessions.retain(|s| {
        let running = !s.state().is_terminal();
        let state_ok = match p.state {
            None => true,
            Some(StateFilter::Running) => running,
            Some(StateFilter::Finished) => !running,
        };
        state_ok
            && p.source.as_deref().is_none_or(|src| s.source() == Some(src))
            && p.idempotency_key.as_deref().is_none_or(|k| s.idempotency_key() == Some(k))
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
        let mut census: Option<ProcessCensus> = None;
        sessions
            .iter()
            .map(|s| {
                let mut record = s.record();
                // The published state: a terminal one is on disk by then, so what `list` said
                // survives a crash right after.
                record.state = s.state();
                let running = !record.state.is_terminal();
                if running {
                    record.finished_at_ms = None;
                }
                // The census is taken once, for the first session that needs one.
                let processes = if running {
                    s.tree().count_processes(|| census.get_or_insert_with(ProcessCensus::take))
                } else {
                    0
                };
                let stats = s.log().stats();
                SessionInfo {
                    id: record.id,
                    processes,
                    state: record.state,
                    command: record.command,
                    cwd: record.cwd,
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
                    sandbox: s
                        .spec()
                        .and_then(|x| x.sandbox_in_force.as_ref())
                        .map(ToString::to_string),
                    pids_limit_hits: s
                        .tree()
                        .limits()
                        .filter(|l| l.has_pids_limit())
                        .map(stockade_proc::LimitGroup::pids_limit_hits),
                }
            })
            .collect()
    })
    .await
    .map_err(join_error)?;
    Ok(ListResult { sessions: infos, more })
}
