//! `shutdown`: stop the daemon. It answers at once; every running session is then terminated,
//! the socket and the lock removed, and the daemon exits.

use stockade_proto::rpc::{NoParams, RpcError, ShutdownResult};

use super::ctx::Ctx;

pub(super) async fn handle(ctx: &Ctx, _: NoParams) -> Result<ShutdownResult, RpcError> {
    let running = ctx.engine().sessions().iter().filter(|s| !s.state().is_terminal()).count();
    ctx.shared.stop.cancel();
    Ok(ShutdownResult { stopping: true, pid: ctx.shared.pid, running })
}
