//! A repeated `exec_command` gets the running session back instead of a second copy.
//!
//! Clients give up on a tool call on their own clock (the OpenAI Agents SDK after 5 s) and the
//! model, seeing an error without a session id, asks again. The first command is still running
//! (sessions outlive their callers), so starting it again would build twice. An identical call
//! — same command line, directory and terminal — that arrives while a session started by it at
//! most [`RETRY_WINDOW_MS`] ago still runs follows that session instead. The daemon's list is
//! the memory, so this holds across connections and restarts of this server.

use std::time::{SystemTime, UNIX_EPOCH};

use stockade_proto::ReadMode;
use stockade_proto::RunResult;
use stockade_proto::rpc::{ListParams, ReadParams, RunParams, SessionInfo, StateFilter, method};
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::error::ToolError;
use crate::tools::MAX_LIST_LIMIT;

/// How long after its start a running session still counts as the same call asked again.
pub const RETRY_WINDOW_MS: u64 = 30_000;

/// The running session an identical call started at most [`RETRY_WINDOW_MS`] ago, if any.
pub async fn running_twin(backend: &Backend, run: &RunParams) -> Option<SessionInfo> {
    let params = ListParams {
        limit: Some(MAX_LIST_LIMIT),
        state: Some(StateFilter::Running),
        ..ListParams::default()
    };
    // Best effort: a failed list only means no twin is found.
    let listed = backend.call(move |c| c.call::<method::List>(params)).await.ok()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_millis();
    let now = u64::try_from(now).ok()?;
    listed
        .sessions
        .into_iter()
        .filter(|s| {
            s.command == run.command
                && s.cwd == run.cwd
                && s.pty == run.pty.is_some()
                // A sandboxed call never follows an unconfined session, nor the other way.
                && s.sandbox.is_some() == run.sandbox.is_some()
                && now.saturating_sub(s.started_at_ms) <= RETRY_WINDOW_MS
        })
        .max_by_key(|s| s.started_at_ms)
}

/// Follow `twin` as the call would have followed its own command: wait as long, with the same
/// bounds, and answer in `exec_command`'s shape.
pub async fn follow(
    backend: &Backend,
    twin: &SessionInfo,
    run: &RunParams,
    cancel: &CancellationToken,
) -> Result<RunResult, ToolError> {
    let params = ReadParams {
        id: twin.id.clone(),
        mode: Some(ReadMode::Tail),
        max_bytes: run.max_bytes,
        max_lines: run.max_lines,
        wait_ms: run.yield_ms,
        collect: true,
        until: run.until.clone(),
        ..ReadParams::default()
    };
    let r = backend.call_until(cancel, move |c| c.call::<method::Read>(params)).await?;
    Ok(RunResult {
        id: r.id,
        state: r.state,
        pid: twin.pid,
        cwd: twin.cwd.clone(),
        wall_time_ms: r.wall_time_ms,
        cleanup: None,
        deduplicated: true,
        sandbox: twin.sandbox.clone(),
        view: r.view,
        wait: r.wait,
    })
}

/// The sentence that tells the model its call found the session it had already started.
pub fn note(twin: &SessionInfo) -> String {
    format!(
        "Note: this same command was started {:.1} s ago and is still running as {}; this answer follows that session instead of starting a second copy (kill_session it first to start afresh).",
        twin.wall_time_ms as f64 / 1000.0,
        twin.id
    )
}
