//! `schedule.fire`: fire a schedule now, as a tick would (skipped while its last run is
//! active), without moving its next tick.

use stockade_proto::rpc::{RpcError, ScheduleFireResult, ScheduleNameParams};

use super::ctx::Ctx;

pub(super) async fn handle(
    ctx: &Ctx,
    p: ScheduleNameParams,
) -> Result<ScheduleFireResult, RpcError> {
    Ok(ctx.shared.schedules.fire_now(&ctx.shared.engine, &p.name).await?)
}
