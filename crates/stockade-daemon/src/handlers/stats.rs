//! `stats`: the daemon's memory and the output it holds.

use stockade_proto::rpc::{NoParams, RpcError, StatsResult};

use super::ctx::Ctx;
use crate::memory;

pub(super) async fn handle(ctx: &Ctx, _: NoParams) -> Result<StatsResult, RpcError> {
    let (rss_bytes, peak_rss_bytes) = memory::rss();
    let engine = ctx.engine().stats();
    Ok(StatsResult {
        rss_bytes,
        peak_rss_bytes,
        allocated_bytes: memory::allocated(),
        hot_tail_bytes: engine.hot_tail_bytes,
        spooled_bytes: engine.spooled_bytes,
        dropped_bytes: engine.dropped_bytes,
        output_bytes: engine.output_bytes,
        sessions: engine.sessions,
        process_scans: engine.process_scans,
        trim: ctx.shared.trim.get().cloned(),
        drain_stalls: stockade_log::Drainer::global().map_or(0, |d| d.health().stalls),
        drain_stalled: crate::janitor::drain_stalled(),
    })
}
