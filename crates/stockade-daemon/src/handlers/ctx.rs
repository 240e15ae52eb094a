//! What a handler gets ([`Ctx`]) and the small helpers every handler shares.

use std::sync::Arc;
use std::time::Duration;

use stockade_proto::rpc::{MAX_WAIT_MS, RpcError, code};
use tokio_util::sync::CancellationToken;

use crate::error::rpc_error;
use crate::state::Shared;

/// What a handler gets: the daemon's shared state and its connection's token (cancelled when the
/// client goes away or the daemon stops).
pub(crate) struct Ctx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conn: CancellationToken,
    /// Who is asking: a command of a sandboxed session is held to that session's sandbox.
    pub(crate) caller: Arc<Caller>,
    /// Who is on the other end, for the audit log.
    pub(crate) peer: Arc<crate::audit::Peer>,
    /// The connection's places for binary read answers (see `crate::payload::Payload`).
    pub(crate) binary: Arc<crate::payload::Binary>,
}

/// Who sent a connection's requests (known from the Unix socket's `SO_PEERCRED`).
#[derive(Debug)]
pub(crate) enum Caller {
    /// Not confined by any sandbox below the daemon (or a network door's client).
    Free,
    /// A process of a running sandboxed session (its id): its policy is the ceiling of what it
    /// asks, and it reaches only its own session and those it started.
    Sandboxed(String, stockade_proto::Sandbox),
    /// A process under a sandbox that no running session accounts for: it gets nothing.
    Unmatched,
}

impl Caller {
    /// Who the process `pid` (the peer of a Unix-socket connection) is to `engine`.
    pub(crate) fn of_pid(engine: &stockade_engine::Engine, pid: Option<u32>) -> Caller {
        let Some(pid) = pid else { return Caller::Unmatched };
        // 0: the peer lives outside the daemon's pid namespace (the daemon runs as PID 1 of its
        // own). No session's process can: a sandboxed one cannot make a pid namespace.
        if pid == 0 {
            return Caller::Free;
        }
        match stockade_proc::sandbox::confined_below_us(pid) {
            Some(false) => Caller::Free,
            // Gone already, or confined: only a session it belongs to can vouch for it.
            _ => engine
                .sandbox_of_process(pid)
                .map_or(Caller::Unmatched, |(id, policy)| Caller::Sandboxed(id, policy)),
        }
    }

    /// Refuses what a sandboxed caller may not ask: it may start (sandboxed) commands, see the
    /// daemon's status, and reach (read, write to, kill, forget) only its own session and the
    /// sessions it started: their output is as private as the home it cannot read.
    pub(crate) fn allows(
        &self,
        engine: &stockade_engine::Engine,
        method: stockade_proto::rpc::MethodName,
        params: &serde_json::Value,
    ) -> Result<(), RpcError> {
        use stockade_proto::rpc::MethodName as M;
        let refuse = |why: String| Err(rpc_error(code::INVALID_PARAMS, why));
        match self {
            Caller::Free => Ok(()),
            Caller::Unmatched if method == M::Status => Ok(()),
            Caller::Unmatched => refuse(format!(
                "this caller runs under a sandbox no running session accounts for, so `{}` is refused; call from outside the sandbox",
                method.name()
            )),
            Caller::Sandboxed(..) if matches!(method, M::Run | M::Status | M::Stats) => Ok(()),
            Caller::Sandboxed(own, _)
                if matches!(
                    method,
                    M::Read | M::Grep | M::Write | M::Kill | M::Forget | M::Resize | M::Restart
                ) =>
            {
                let id = params.get("id").and_then(serde_json::Value::as_str).unwrap_or("");
                if engine.descends_from(id, own) {
                    Ok(())
                } else {
                    refuse(format!(
                        "a command inside sandboxed session {own} reaches only that session and the sessions it started, not {id:?}; do it from outside the sandbox"
                    ))
                }
            }
            // Several of its own sessions at once: allowed when each is.
            Caller::Sandboxed(own, _) if method == M::KillMany => {
                let ids = params.get("ids").and_then(serde_json::Value::as_array);
                let all_own = ids.is_some_and(|ids| {
                    ids.iter().all(|id| engine.descends_from(id.as_str().unwrap_or(""), own))
                });
                if all_own && params.get("all").and_then(serde_json::Value::as_bool) != Some(true) {
                    Ok(())
                } else {
                    refuse(format!(
                        "a command inside sandboxed session {own} may end only that session and the sessions it started, by id; do it from outside the sandbox"
                    ))
                }
            }
            Caller::Sandboxed(..) => refuse(format!(
                "a command inside a sandboxed session may start sandboxed commands and reach its own sessions, not call `{}`; do it from outside the sandbox",
                method.name()
            )),
        }
    }
}

impl Ctx {
    pub(super) fn engine(&self) -> &stockade_engine::Engine {
        &self.shared.engine
    }
}

/// A wait asked for in milliseconds, clamped to [`MAX_WAIT_MS`].
pub(super) fn wait(ms: u64) -> Duration {
    Duration::from_millis(ms.min(MAX_WAIT_MS))
}

/// The error for a request whose client went away (never written: there is nobody to read it).
pub(super) fn disconnected() -> RpcError {
    rpc_error(code::INTERNAL_ERROR, "the client disconnected")
}
