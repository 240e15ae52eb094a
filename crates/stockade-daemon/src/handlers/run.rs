//! `run`: start a command (or find the active one with the same `source`), wait as asked, and
//! answer with the output so far.

use std::sync::Arc;
use std::time::Duration;

use stockade_core::output::ReadRequest;
use stockade_core::{RunSpec, Session};
use stockade_proto::RunResult;
use stockade_proto::rpc::{Render, RpcError, RunParams};

use super::ctx::{Ctx, disconnected, wait};
use crate::error::{from_engine, join_error};

pub(super) async fn handle(ctx: &Ctx, p: RunParams) -> Result<RunResult, RpcError> {
    let request = ReadRequest::for_run(&p);
    let (background, yield_ms) = (p.background, p.yield_ms);
    let spec = RunSpec::from(p);
    // Spawning forks and touches the disk: keep it off the async workers.
    let shared = Arc::clone(&ctx.shared);
    let started = tokio::task::spawn_blocking(move || shared.engine.start(spec))
        .await
        .map_err(join_error)?
        .map_err(from_engine)?;
    let session = started.session;
    if !started.deduplicated {
        // Foreground: until the end (or `yield_ms`). Background: `yield_ms` (default 0), early
        // on exit. A deduplicated answer never waits: the session is someone else's.
        let limit = match (background, yield_ms) {
            (_, Some(ms)) => Some(wait(ms)),
            (true, None) => Some(Duration::ZERO),
            (false, None) => None,
        };
        tokio::select! {
            _ = session.wait(limit) => {}
            () = ctx.conn.cancelled() => {
                if !background {
                    // The client that waited on a foreground run is gone: end the run, through
                    // the one terminate routine.
                    let opts = ctx.engine().terminate_options();
                    session.kill(opts, "the client disconnected").await;
                }
                return Err(disconnected());
            }
        }
    }
    answer(session, request, started.deduplicated).await
}

pub(super) async fn answer(
    session: Arc<Session>,
    request: ReadRequest,
    deduplicated: bool,
) -> Result<RunResult, RpcError> {
    // The state first: once it is terminal the log is complete, so the view shows the end.
    let state = session.state();
    let s = Arc::clone(&session);
    // A PTY session's answer is its text without escape codes, as `read` shows it by default.
    let view = tokio::task::spawn_blocking(move || s.view(&request, Render::Text))
        .await
        .map_err(join_error)?
        .map_err(from_engine)?;
    Ok(RunResult {
        id: session.id().to_owned(),
        state,
        pid: session.pid(),
        wall_time_ms: session.wall_time().as_millis() as u64,
        cleanup: session.end().and_then(|e| e.cleanup),
        deduplicated,
        view,
    })
}
