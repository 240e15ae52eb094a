//! `schedule.list`: every schedule with its counters and the session it runs now.

use stockade_proto::rpc::{RpcError, ScheduleListResult};

use super::{Ctx, NoParams};

pub(super) async fn handle(ctx: &Ctx, _: NoParams) -> Result<ScheduleListResult, RpcError> {
    Ok(ScheduleListResult { schedules: ctx.shared.schedules.list(ctx.engine()).await })
}
