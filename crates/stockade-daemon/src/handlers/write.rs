//! `write`: not available until interactive sessions (the PTY issue).

use stockade_proto::rpc::{RpcError, WriteParams, code};

use super::Ctx;
use crate::error::{from_engine, rpc_error};

pub(super) async fn handle(ctx: &Ctx, p: WriteParams) -> Result<serde_json::Value, RpcError> {
    ctx.engine().session(&p.id).map_err(from_engine)?;
    Err(rpc_error(
        code::NOT_SUPPORTED,
        "write is not supported yet: interactive sessions come with the PTY issue",
    ))
}
