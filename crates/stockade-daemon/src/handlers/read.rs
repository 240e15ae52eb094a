//! `read`: a bounded view (or exact bytes) of a session's log, optionally long-polling for new
//! output or the end. The engine plans and renders the view (`Session::plan_read`,
//! `Session::view`, `Session::raw_view`); this handler waits as asked and puts the answer on
//! the wire (raw bytes as base64).

use std::sync::Arc;

use stockade_core::ReadPlan;
use stockade_proto::rpc::{ReadParams, ReadResult, RpcError, encode_bytes};

use super::ctx::{Ctx, disconnected, wait};
use crate::error::{from_engine, join_error};

pub(super) async fn handle(ctx: &Ctx, p: ReadParams) -> Result<ReadResult, RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let plan = session.plan_read(&p).map_err(from_engine)?;
    if let Some(ms) = p.wait_ms.filter(|&ms| ms > 0)
        && !session.state().is_terminal()
    {
        let log = session.log();
        let after = p.after.unwrap_or_else(|| log.stats().total_bytes);
        let timeout = wait(ms);
        tokio::select! {
            _ = log.wait_for_output(after, timeout) => {}
            _ = session.wait(Some(timeout)) => {}
            () = ctx.conn.cancelled() => return Err(disconnected()),
        }
    }
    let state = session.settle().await;
    let id = session.id().to_owned();
    let s = Arc::clone(&session);
    // Reading (and encoding) touches the disk and copies: keep it off the async workers, and
    // let the raw bytes go before answering.
    let (view, bytes_b64) = tokio::task::spawn_blocking(move || match plan {
        ReadPlan::View { request, render } => s.view(&request, render).map(|v| (v, None)),
        ReadPlan::Raw { after, max_bytes } => {
            s.raw_view(after, max_bytes).map(|(v, bytes)| (v, Some(encode_bytes(&bytes))))
        }
    })
    .await
    .map_err(join_error)?
    .map_err(from_engine)?;
    Ok(ReadResult { id, state, view, bytes_b64 })
}
