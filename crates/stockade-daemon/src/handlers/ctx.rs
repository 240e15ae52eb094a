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
    pub(crate) caller: Arc<crate::hall::Caller>,
    /// Who is on the other end, for the audit log.
    pub(crate) peer: Arc<crate::audit::Peer>,
    /// The connection's places for binary read answers (see `crate::payload::Payload`).
    pub(crate) binary: Arc<crate::payload::Binary>,
    /// The connection's answer budget (see `crate::answer_budget`).
    pub(crate) answers: Arc<tokio::sync::Semaphore>,
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
