//! `schedule.add`: validate and persist a new schedule; the scheduler task fires it.

use stockade_proto::rpc::{RpcError, ScheduleAddParams, ScheduleInfo};

use super::ctx::Ctx;

pub(super) async fn handle(ctx: &Ctx, p: ScheduleAddParams) -> Result<ScheduleInfo, RpcError> {
    Ok(ctx.shared.schedules.add(ctx.engine(), p).await?)
}
