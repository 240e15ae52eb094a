//! `schedule.list`: every schedule with its counters and the session it runs now.

use stockade_proto::rpc::{NoParams, RpcError, ScheduleListResult};

use super::ctx::Ctx;

pub(super) async fn handle(ctx: &Ctx, _: NoParams) -> Result<ScheduleListResult, RpcError> {
    Ok(ScheduleListResult { schedules: ctx.shared.schedules.list(ctx.engine()).await })
}
