//! `shutdown`: stop the daemon. It answers at once; every running session is then terminated,
//! the socket and the lock removed, and the daemon exits.

use serde::Serialize;
use stockade_proto::rpc::RpcError;

use super::{Ctx, NoParams};

/// What `shutdown` answers.
#[derive(Debug, Serialize)]
pub(super) struct ShutdownAnswer {
    /// Always `true`: the daemon is stopping.
    stopping: bool,
    /// The daemon's pid, to wait for.
    pid: u32,
    /// Sessions running now, which will be terminated.
    running: usize,
}

pub(super) async fn handle(ctx: &Ctx, _: NoParams) -> Result<ShutdownAnswer, RpcError> {
    let running = ctx.engine().sessions().iter().filter(|s| !s.state().is_terminal()).count();
    ctx.shared.stop.cancel();
    Ok(ShutdownAnswer { stopping: true, pid: ctx.shared.pid, running })
}
