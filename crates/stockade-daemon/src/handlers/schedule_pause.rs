//! `schedule.pause` and `schedule.resume`: stop firing a schedule, or fire it again from the
//! next tick on.

use stockade_proto::rpc::{RpcError, ScheduleInfo, ScheduleNameParams};

use super::ctx::Ctx;

pub(super) async fn handle(
    ctx: &Ctx,
    p: ScheduleNameParams,
    paused: bool,
) -> Result<ScheduleInfo, RpcError> {
    Ok(ctx.shared.schedules.set_paused(ctx.engine(), &p.name, paused).await?)
}
