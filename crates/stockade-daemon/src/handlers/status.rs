//! `status`: who this daemon is.

use stockade_proto::rpc::{NoParams, RpcError, StatusResult};

use super::ctx::Ctx;

pub(super) async fn handle(ctx: &Ctx, _: NoParams) -> Result<StatusResult, RpcError> {
    let shared = &ctx.shared;
    Ok(StatusResult {
        pid: shared.pid,
        socket: shared.socket.clone(),
        home: shared.home.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        containment: shared.engine.method(),
        session_keeper: shared.engine.has_keeper(),
        sessions: shared.engine.sessions().len(),
    })
}
