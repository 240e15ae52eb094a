//! `hide`: keep more paths (a door's secret the daemon was not started with, such as `stockade
//! mcp --http --token-file`'s) from every sandboxed command started from now on. A sandboxed
//! caller is refused by the hall, as for every method that is not its own.

use stockade_proto::rpc::{HideParams, HideResult, RpcError};

use super::ctx::Ctx;
use crate::error::from_engine;

pub(super) async fn handle(ctx: &Ctx, p: HideParams) -> Result<HideResult, RpcError> {
    let hidden = ctx.engine().hide(&p.paths).map_err(from_engine)?;
    Ok(HideResult { hidden })
}
