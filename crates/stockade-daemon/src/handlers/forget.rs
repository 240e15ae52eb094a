//! `forget`: terminate if running, delete the session's directory, drop the record.

use stockade_proto::rpc::{ForgetParams, ForgetResult, RpcError};

use super::ctx::Ctx;
use crate::error::from_engine;

pub(super) async fn handle(ctx: &Ctx, p: ForgetParams) -> Result<ForgetResult, RpcError> {
    let forgotten = ctx.engine().forget(&p.id).await.map_err(from_engine)?;
    Ok(ForgetResult {
        id: forgotten.id,
        report: forgotten.report,
        removed_bytes: forgotten.removed_bytes,
    })
}
