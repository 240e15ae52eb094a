//! `read`: a bounded view (or exact bytes) of a session's log, optionally collecting new output
//! first (`Session::collect`: until the window, the end, a full answer — never for a tail — or
//! an `until` line). The engine plans and renders the view (`Session::plan_read`,
//! `Session::view`, `Session::raw_view`); this handler waits as asked and puts the answer on
//! the wire (raw bytes as base64, or with `encoding: "binary"` as they are, after the answer).

use std::sync::Arc;

use stockade_engine::{ReadPlan, Until, WaitFor};
use stockade_proto::rpc::{ReadEncoding, ReadParams, ReadResult, RpcError, encode_bytes};
use stockade_proto::{OutputLimits, ReadMode};

use super::ctx::{Ctx, disconnected, wait};
use crate::error::{from_engine, join_error};
use crate::payload::Payload;

pub(super) async fn handle(
    ctx: &Ctx,
    p: ReadParams,
) -> Result<(ReadResult, Option<Payload>), RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let plan = session.plan_read(&p).map_err(from_engine)?;
    let until = p.until.as_deref().map(Until::new).transpose().map_err(from_engine)?;
    let mut report = None;
    if let Some(ms) = p.wait_ms.filter(|&ms| ms > 0)
        && !session.state().is_terminal()
    {
        // Collecting, the wait ends with the window, the session, a full answer or an `until`
        // line; a plain long poll also at the first new byte.
        let first_byte = !p.collect && until.is_none();
        // A tail view never fills: it shows the newest output whenever it answers, so output
        // alone does not end its wait.
        let full = match &plan {
            ReadPlan::View { request, .. } if request.mode == ReadMode::Tail => None,
            ReadPlan::View { request, .. } => Some(request.limits),
            ReadPlan::Raw { max_bytes, .. } => {
                Some(OutputLimits { max_bytes: *max_bytes, max_lines: usize::MAX })
            }
        };
        let from = p.after.unwrap_or_else(|| session.log().stats().total_bytes);
        let what = WaitFor { from, full, until, first_byte, quiet: None };
        tokio::select! {
            r = session.collect(Some(wait(ms)), what) => report = Some(r),
            () = ctx.conn.cancelled() => return Err(disconnected()),
        }
    }
    // A binary answer's bytes wait in memory until written: take a place for them first.
    let place = match p.encoding {
        Some(ReadEncoding::Binary) => tokio::select! {
            place = Arc::clone(&ctx.binary.places).acquire_owned() => {
                Some(place.map_err(|_| disconnected())?)
            }
            () = ctx.conn.cancelled() => return Err(disconnected()),
        },
        _ => None,
    };
    let state = session.settle().await;
    let id = session.id().to_owned();
    let s = Arc::clone(&session);
    // Reading (and encoding) touches the disk and copies: keep it off the async workers, and
    // let the raw bytes go before answering.
    let spare = place.as_ref().map(|_| ctx.binary.take());
    let (view, bytes_b64, bytes) = tokio::task::spawn_blocking(move || match (plan, spare) {
        (ReadPlan::View { request, render }, _) => {
            s.view(&request, render).map(|v| (v, None, None))
        }
        (ReadPlan::Raw { after, max_bytes }, Some(mut buf)) => {
            s.raw_view_into(after, max_bytes, &mut buf).map(|v| (v, None, Some(buf)))
        }
        (ReadPlan::Raw { after, max_bytes }, None) => {
            s.raw_view(after, max_bytes).map(|(v, bytes)| (v, Some(encode_bytes(&bytes)), None))
        }
    })
    .await
    .map_err(join_error)?
    .map_err(from_engine)?;
    let wall_time_ms = session.wall_time().as_millis() as u64;
    let binary_len = bytes.as_ref().map(|b| b.len() as u64);
    let binary = Arc::clone(&ctx.binary);
    let payload = bytes.zip(place).map(|(bytes, _place)| Payload { bytes, _place, binary });
    let result = ReadResult { id, state, view, wall_time_ms, wait: report, bytes_b64, binary_len };
    Ok((result, payload))
}
