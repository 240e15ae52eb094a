//! `shutdown`: stop the daemon. It answers at once; every running session is then terminated,
//! the socket and the lock removed, and the daemon exits.

use stockade_proto::rpc::{NoParams, RpcError, ShutdownResult};

use super::ctx::Ctx;

pub(super) async fn handle(ctx: &Ctx, _: NoParams) -> Result<ShutdownResult, RpcError> {
    let terminated: Vec<String> =
        ctx.engine().running_own().iter().map(|s| s.id().to_owned()).collect();
    ctx.shared.stop.cancel();
    Ok(ShutdownResult {
        stopping: true,
        pid: ctx.shared.pid,
        running: terminated.len(),
        terminated,
    })
}
