//! `cleanup`: forget every finished session (or, with `all`, every session).

use stockade_proto::rpc::{CleanupParams, CleanupResult, RpcError};

use super::ctx::Ctx;

pub(super) async fn handle(ctx: &Ctx, p: CleanupParams) -> Result<CleanupResult, RpcError> {
    let forgotten = ctx.engine().cleanup(p.all).await;
    Ok(CleanupResult {
        removed_bytes: forgotten.iter().map(|f| f.removed_bytes).sum(),
        forgotten: forgotten.into_iter().map(|f| f.id).collect(),
    })
}
