//! `resize`: set a PTY session's terminal size; the kernel sends `SIGWINCH` to its foreground job.

use stockade_proto::rpc::{PtySize, ResizeParams, ResizeResult, RpcError};

use super::ctx::Ctx;
use super::write::from_input;
use crate::error::from_engine;

pub(super) async fn handle(ctx: &Ctx, p: ResizeParams) -> Result<ResizeResult, RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let size = PtySize { rows: p.rows, cols: p.cols };
    session.resize(size).map_err(from_input)?;
    Ok(ResizeResult { id: session.id().to_owned(), size })
}
