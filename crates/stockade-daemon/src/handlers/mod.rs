//! One handler per method, and the one `match` that dispatches to them. A handler translates
//! its `*Params` into engine calls and the engine's answer into its `*Result`; nothing else.
//!
//! The `match` is over proto's [`MethodName`], so every method of the protocol has a handler (or
//! this does not compile), and each arm checks its handler against the method's [`Method`]
//! types. An unknown name is answered with proto's [`METHODS`].

mod cleanup;
mod ctx;
mod forget;
mod grep;
mod hide;
mod kill;
mod list;
mod read;
mod resize;
mod restart;
mod run;
mod schedule_add;
mod schedule_fire;
mod schedule_list;
mod schedule_pause;
mod schedule_remove;
mod schedule_runs;
mod shutdown;
mod stats;
mod status;
mod write;

use serde_json::Value;
use stockade_proto::rpc::method::{self, METHODS, Method, MethodName};
use stockade_proto::rpc::{RpcError, code};

use crate::error::rpc_error;

pub(crate) use ctx::Ctx;

/// The start of every success line; the server appends `,"id":…}` and the newline.
pub(crate) const RESULT_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","result":"#;

/// A success: the answer line so far, and the raw bytes that follow it (a binary `read`).
pub(crate) type Reply = (Vec<u8>, Option<crate::payload::Payload>);

/// Run `name` with `params`. On success, the answer line so far: [`RESULT_PREFIX`] and the
/// serialized result, written once into the buffer that goes to the socket (a large read is not
/// copied through a `serde_json::Value` on the way).
pub(crate) async fn dispatch(ctx: &Ctx, name: &str, params: Value) -> Result<Reply, RpcError> {
    let called = MethodName::from_name(name);
    if ctx.shared.stop.is_cancelled()
        && !matches!(called, Some(MethodName::Status | MethodName::Stats))
    {
        return Err(rpc_error(
            code::SHUTTING_DOWN,
            "the daemon is shutting down; start a new one to run more commands",
        ));
    }
    let Some(called) = called else {
        return Err(rpc_error(
            code::METHOD_NOT_FOUND,
            format!("no method {name:?}; the methods are {}", METHODS.join(", ")),
        ));
    };
    ctx.caller.allows(ctx.engine(), called, &params)?;
    use method as m;
    match called {
        MethodName::Run => answer::<m::Run>(run::handle(ctx, parse::<m::Run>(params)?).await),
        MethodName::Read => {
            let (result, payload) = read::handle(ctx, parse::<m::Read>(params)?).await?;
            answer::<m::Read>(Ok(result)).map(|(line, _)| (line, payload))
        }
        MethodName::Grep => answer::<m::Grep>(grep::handle(ctx, parse::<m::Grep>(params)?).await),
        MethodName::Write => {
            answer::<m::Write>(write::handle(ctx, parse::<m::Write>(params)?).await)
        }
        MethodName::Kill => answer::<m::Kill>(kill::handle(ctx, parse::<m::Kill>(params)?).await),
        MethodName::KillMany => {
            answer::<m::KillMany>(kill::handle_many(ctx, parse::<m::KillMany>(params)?).await)
        }
        MethodName::List => answer::<m::List>(list::handle(ctx, parse::<m::List>(params)?).await),
        MethodName::Forget => {
            answer::<m::Forget>(forget::handle(ctx, parse::<m::Forget>(params)?).await)
        }
        MethodName::Hide => answer::<m::Hide>(hide::handle(ctx, parse::<m::Hide>(params)?).await),
        MethodName::Cleanup => {
            answer::<m::Cleanup>(cleanup::handle(ctx, parse::<m::Cleanup>(params)?).await)
        }
        MethodName::Resize => {
            answer::<m::Resize>(resize::handle(ctx, parse::<m::Resize>(params)?).await)
        }
        MethodName::Stats => {
            answer::<m::Stats>(stats::handle(ctx, parse::<m::Stats>(params)?).await)
        }
        MethodName::Status => {
            answer::<m::Status>(status::handle(ctx, parse::<m::Status>(params)?).await)
        }
        MethodName::Shutdown => {
            answer::<m::Shutdown>(shutdown::handle(ctx, parse::<m::Shutdown>(params)?).await)
        }
        MethodName::ScheduleAdd => answer::<m::ScheduleAdd>(
            schedule_add::handle(ctx, parse::<m::ScheduleAdd>(params)?).await,
        ),
        MethodName::ScheduleList => answer::<m::ScheduleList>(
            schedule_list::handle(ctx, parse::<m::ScheduleList>(params)?).await,
        ),
        MethodName::ScheduleRemove => answer::<m::ScheduleRemove>(
            schedule_remove::handle(ctx, parse::<m::ScheduleRemove>(params)?).await,
        ),
        MethodName::SchedulePause => answer::<m::SchedulePause>(
            schedule_pause::handle(ctx, parse::<m::SchedulePause>(params)?, true).await,
        ),
        MethodName::ScheduleResume => answer::<m::ScheduleResume>(
            schedule_pause::handle(ctx, parse::<m::ScheduleResume>(params)?, false).await,
        ),
        MethodName::ScheduleRuns => answer::<m::ScheduleRuns>(
            schedule_runs::handle(ctx, parse::<m::ScheduleRuns>(params)?).await,
        ),
        MethodName::Restart => {
            answer::<m::Restart>(restart::handle(ctx, parse::<m::Restart>(params)?).await)
        }
        MethodName::ScheduleFire => answer::<m::ScheduleFire>(
            schedule_fire::handle(ctx, parse::<m::ScheduleFire>(params)?).await,
        ),
    }
}

/// `M`'s parameters, which must be an object (absent or `null` means `{}`).
fn parse<M: Method>(params: Value) -> Result<M::Params, RpcError> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        Value::Object(o) => Value::Object(o),
        _ => {
            return Err(rpc_error(
                code::INVALID_PARAMS,
                "params must be an object with named fields (positional params are not supported)",
            ));
        }
    };
    serde_json::from_value(params)
        .map_err(|e| rpc_error(code::INVALID_PARAMS, format!("invalid params: {e}")))
}

/// `M`'s result as the start of its answer line.
fn answer<M: Method>(result: Result<M::Result, RpcError>) -> Result<Reply, RpcError> {
    let value = result?;
    let mut line = Vec::with_capacity(ANSWER_CAPACITY);
    line.extend_from_slice(RESULT_PREFIX);
    serde_json::to_writer(&mut line, &value).map_err(|e| {
        rpc_error(code::INTERNAL_ERROR, format!("the answer could not be encoded: {e}"))
    })?;
    Ok((line, None))
}

/// First allocation for an answer line; larger answers grow it.
const ANSWER_CAPACITY: usize = 1024;
