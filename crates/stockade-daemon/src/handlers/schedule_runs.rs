//! `schedule.runs`: a schedule's runs the daemon keeps (its sessions), newest first.

use stockade_proto::rpc::{RpcError, ScheduleRunsParams, ScheduleRunsResult};

use super::ctx::Ctx;

pub(super) async fn handle(
    ctx: &Ctx,
    p: ScheduleRunsParams,
) -> Result<ScheduleRunsResult, RpcError> {
    Ok(ctx.shared.schedules.runs(ctx.engine(), &p.name, p.limit).await?)
}
