//! `hide`: keep more paths (a door's secret the daemon was not started with, such as `stockade
//! mcp --http --token-file`'s) from every sandboxed command started from now on. A sandboxed
//! caller is refused by the hall, as for every method that is not its own.

use stockade_proto::rpc::{HideParams, HideResult, RpcError};

use super::ctx::Ctx;
use crate::error::from_engine;
use crate::home_doors::HomeDoors;

pub(super) async fn handle(ctx: &Ctx, p: HideParams) -> Result<HideResult, RpcError> {
    let hidden = ctx.engine().hide(&p.paths).map_err(from_engine)?;
    // The home's foreground runs hide them too.
    let home = ctx.engine().config().state_dir.root();
    let doors = HomeDoors { hidden: hidden.clone(), ..HomeDoors::read(home) };
    if let Err(e) = doors.write(home) {
        tracing::warn!(error = %e, "cannot tell foreground runs of this home about the hidden paths");
    }
    Ok(HideResult { hidden })
}
