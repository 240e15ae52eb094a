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
}

/// Who sent a connection's requests (known from the Unix socket's `SO_PEERCRED`).
#[derive(Debug)]
pub(crate) enum Caller {
    /// Not confined by any sandbox below the daemon (or a network door's client).
    Free,
    /// A process of a running sandboxed session: its policy is the ceiling of what it asks.
    Sandboxed(stockade_proto::Sandbox),
    /// A process under a sandbox that no running session accounts for: it gets nothing.
    Unmatched,
}

impl Caller {
    /// Who the process `pid` (the peer of a Unix-socket connection) is to `engine`.
    pub(crate) fn of_pid(engine: &stockade_engine::Engine, pid: Option<u32>) -> Caller {
        let Some(pid) = pid else { return Caller::Unmatched };
        match stockade_proc::sandbox::confined_below_us(pid) {
            Some(false) => Caller::Free,
            // Gone already, or confined: only a session it belongs to can vouch for it.
            _ => engine.sandbox_of_process(pid).map_or(Caller::Unmatched, Caller::Sandboxed),
        }
    }

    /// Refuses what a sandboxed caller may not ask for at all: everything but starting
    /// (sandboxed) commands and reading.
    pub(crate) fn allows(&self, method: stockade_proto::rpc::MethodName) -> Result<(), RpcError> {
        use stockade_proto::rpc::MethodName as M;
        let reads = matches!(
            method,
            M::Read | M::Grep | M::List | M::Stats | M::Status | M::ScheduleList | M::ScheduleRuns
        );
        match self {
            Caller::Free => Ok(()),
            Caller::Sandboxed(_) if reads || method == M::Run => Ok(()),
            Caller::Unmatched if reads => Ok(()),
            Caller::Sandboxed(_) => Err(rpc_error(
                code::INVALID_PARAMS,
                format!(
                    "a command inside a sandboxed session may start sandboxed commands and read sessions, not call `{}`; do it from outside the sandbox",
                    method.name()
                ),
            )),
            Caller::Unmatched => Err(rpc_error(
                code::INVALID_PARAMS,
                format!(
                    "this caller runs under a sandbox no running session accounts for, so `{}` is refused; call from outside the sandbox",
                    method.name()
                ),
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
