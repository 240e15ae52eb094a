//! `schedule.remove`: drop a schedule (its runs stay until pruned or forgotten).

use stockade_proto::rpc::{RpcError, ScheduleInfo, ScheduleNameParams};

use super::ctx::Ctx;

pub(super) async fn handle(ctx: &Ctx, p: ScheduleNameParams) -> Result<ScheduleInfo, RpcError> {
    Ok(ctx.shared.schedules.remove(ctx.engine(), &p.name).await?)
}
