//! `grep`: search a session's whole spool, bounded in memory, time and concurrency.
//!
//! The search runs on a blocking thread with a deadline and a cancel flag. The answer never waits
//! past the deadline: when it passes, the client goes away or the daemon stops, the flag is set
//! (the thread stops at its next check, within one read of the spool) and the handler answers at
//! once. At most [`MAX_CONCURRENT_GREPS`] searches run at a time, each holding its slot until
//! its thread ends, so their memory (each bounded by the engine's grep limits) adds up to a fixed
//! bound however many clients ask.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use stockade_log::{DEFAULT_GREP_MATCHES, DEFAULT_GREP_TIMEOUT, GrepBounds, GrepRequest};
use stockade_proto::rpc::{GrepParams, GrepResultMsg, RpcError, code};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::ctx::{Ctx, disconnected};
use crate::error::{from_engine, from_output, join_error, rpc_error};

/// Longest deadline a client may ask for.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// Searches running at once; others wait for a slot within their own deadline.
pub(crate) const MAX_CONCURRENT_GREPS: usize = 2;

static SLOTS: Semaphore = Semaphore::const_new(MAX_CONCURRENT_GREPS);

/// Sets the flag when the handler ends for any reason (answered, timed out, or dropped).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub(super) async fn handle(ctx: &Ctx, p: GrepParams) -> Result<GrepResultMsg, RpcError> {
    let timeout = p.timeout_ms.map_or(DEFAULT_GREP_TIMEOUT, Duration::from_millis);
    let timeout = timeout.clamp(Duration::from_millis(1), MAX_TIMEOUT);
    let deadline = Instant::now() + timeout;
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let request = GrepRequest {
        pattern: p.pattern,
        // The output log clamps both to its bounds, whichever door asks.
        context: p.context,
        max_matches: p.max_matches.unwrap_or(DEFAULT_GREP_MATCHES),
        ignore_case: p.ignore_case,
        stream: None,
    };
    let timed_out = || {
        rpc_error(
            code::LIMIT_REACHED,
            format!(
                "grep gave up after {} ms, its time limit; search for a narrower pattern or pass a longer timeout_ms",
                timeout.as_millis()
            ),
        )
    };
    let stopping =
        || rpc_error(code::SHUTTING_DOWN, "the daemon is shutting down; the grep was stopped");
    let slot = tokio::select! {
        slot = SLOTS.acquire() => slot.map_err(|_| stopping())?,
        () = tokio::time::sleep_until(deadline) => return Err(timed_out()),
        () = ctx.conn.cancelled() => return Err(disconnected()),
        () = ctx.shared.stop.cancelled() => return Err(stopping()),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let _cancel_on_drop = CancelOnDrop(Arc::clone(&cancel));
    let bounds = GrepBounds { deadline: Some(deadline.into_std()), cancel: Some(cancel) };
    let log = Arc::clone(session.log());
    let mut job = tokio::task::spawn_blocking(move || {
        // The slot is held until the search itself ends, not only until the answer.
        let _slot = slot;
        log.grep_bounded(&request, &bounds)
    });
    let found = tokio::select! {
        found = &mut job => found.map_err(join_error)?.map_err(|e| from_output(&e))?,
        // The search checks its deadline itself; this only covers one slow step of the engine.
        () = tokio::time::sleep_until(deadline + Duration::from_millis(100)) => {
            return Err(timed_out());
        }
        () = ctx.conn.cancelled() => return Err(disconnected()),
        () = ctx.shared.stop.cancelled() => return Err(stopping()),
    };
    Ok(GrepResultMsg {
        id: session.id().to_owned(),
        lines: found.lines,
        matches: found.matches,
        truncated: found.truncated,
        spool_path: found.spool_path,
    })
}
