//! `run`: start a command (or find the active one with the same `source`), wait as asked, and
//! answer with the output so far.

use std::sync::Arc;
use std::time::Duration;

use stockade_engine::{RunSpec, Session, Until, WaitFor};
use stockade_log::ReadRequest;
use stockade_proto::RunResult;
use stockade_proto::rpc::{RpcError, RunParams, WaitReport, code};

use super::ctx::{Ctx, disconnected, wait};
use crate::error::{from_engine, join_error, rpc_error};

pub(super) async fn handle(ctx: &Ctx, p: RunParams) -> Result<RunResult, RpcError> {
    let request = ReadRequest::for_run(&p);
    let until = p.until.as_deref().map(Until::new).transpose().map_err(from_engine)?;
    let (background, yield_ms) = (p.background, p.yield_ms);
    let mut spec = RunSpec::from(p);
    crate::hall::admit(&ctx.caller, &mut spec)
        .map_err(|why| rpc_error(code::INVALID_PARAMS, why))?;
    let started = crate::hall::spawn(&ctx.shared, spec).await.map_err(crate::hall::rpc_error_of)?;
    let session = started.session;
    let mut report = None;
    if !started.deduplicated {
        // Foreground: until the end (or `yield_ms`). Background: `yield_ms` (default 0), early
        // on exit. Either ends early at an `until` line. A tail view never fills, so output
        // alone does not end the wait. A deduplicated answer never waits: the session is
        // someone else's.
        let limit = match (background, yield_ms) {
            (_, Some(ms)) => Some(wait(ms)),
            (true, None) => Some(Duration::ZERO),
            (false, None) => None,
        };
        let what = WaitFor { from: 0, full: None, until, first_byte: false, quiet: None };
        tokio::select! {
            r = session.collect(limit, what) => report = Some(r),
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
    answer(session, request, started.deduplicated, report).await
}

pub(super) async fn answer(
    session: Arc<Session>,
    request: ReadRequest,
    deduplicated: bool,
    wait: Option<WaitReport>,
) -> Result<RunResult, RpcError> {
    // Reads the spool: off the async workers, unless there is so little of it (in the page
    // cache) that the hand-off would cost a short command more than the reads.
    if session.log().stats().total_bytes <= INLINE_ANSWER_BYTES {
        return session.run_result(&request, deduplicated, wait).map_err(from_engine);
    }
    tokio::task::spawn_blocking(move || session.run_result(&request, deduplicated, wait))
        .await
        .map_err(join_error)?
        .map_err(from_engine)
}

/// Most output whose answer is made on the async worker (see [`answer`]).
const INLINE_ANSWER_BYTES: u64 = 64 * 1024;
