//! `run`: start a command (or find the active one with the same `source`), wait as asked, and
//! answer with the output so far.

use std::sync::Arc;
use std::time::Duration;

use stockade_core::output::ReadRequest;
use stockade_core::{RunSpec, Session};
use stockade_proto::rpc::{Render, RpcError, RunParams};
use stockade_proto::{OutputLimits, ReadMode, RunResult};

use super::ctx::{Ctx, disconnected, wait};
use crate::error::{from_engine, join_error};

pub(super) async fn handle(ctx: &Ctx, p: RunParams) -> Result<RunResult, RpcError> {
    let limits = OutputLimits {
        max_bytes: p.max_bytes.unwrap_or(stockade_proto::DEFAULT_MAX_BYTES),
        max_lines: p.max_lines.unwrap_or(stockade_proto::DEFAULT_MAX_LINES),
    };
    let direction = p.direction.unwrap_or(ReadMode::Tail);
    let spec = RunSpec {
        command: p.command,
        shell: p.shell,
        login: p.login,
        cwd: p.cwd,
        env: p.env.into_iter().collect(),
        timeout: p.timeout_ms.map(Duration::from_millis),
        capture: p.capture,
        retained_cap: p.retained_cap,
        disk_cap: p.disk_cap,
        disk_policy: p.disk_policy,
        source: p.source,
        pty: p.pty,
        stdin: p.stdin,
    };
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
        let limit = match (p.background, p.yield_ms) {
            (_, Some(ms)) => Some(wait(ms)),
            (true, None) => Some(Duration::ZERO),
            (false, None) => None,
        };
        tokio::select! {
            _ = session.wait(limit) => {}
            () = ctx.conn.cancelled() => {
                if !p.background {
                    // The client that waited on a foreground run is gone: end the run, through
                    // the one terminate routine.
                    let opts = ctx.engine().terminate_options();
                    session.kill(opts, "the client disconnected").await;
                }
                return Err(disconnected());
            }
        }
    }
    answer(&session, direction, limits, started.deduplicated).await
}

async fn answer(
    session: &Arc<Session>,
    mode: ReadMode,
    limits: OutputLimits,
    deduplicated: bool,
) -> Result<RunResult, RpcError> {
    // The state first: once it is terminal the log is complete, so the view shows the end.
    let state = session.state();
    let request = ReadRequest {
        mode,
        after: 0,
        limits: super::read::clamp_limits(limits),
        stream: None,
        label: Some(session.id().to_owned()),
    };
    // A PTY session's answer is its text without escape codes, as `read` shows it by default.
    let view = super::read::view(session, request, Render::Text).await?;
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
