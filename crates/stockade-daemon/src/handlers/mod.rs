//! One handler per method, and the one `match` that dispatches to them. A handler translates
//! its `*Params` into engine calls and the engine's answer into its `*Result`; nothing else.

mod cleanup;
mod forget;
mod grep;
mod kill;
mod list;
mod read;
mod resize;
mod run;
mod schedule_add;
mod schedule_list;
mod schedule_pause;
mod schedule_remove;
mod schedule_runs;
mod shutdown;
mod stats;
mod status;
mod write;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use stockade_proto::rpc::{MAX_WAIT_MS, RpcError, code, method};
use tokio_util::sync::CancellationToken;

use crate::error::rpc_error;
use crate::server::Shared;

/// What a handler gets: the daemon's shared state and its connection's token (cancelled when the
/// client goes away or the daemon stops).
pub(crate) struct Ctx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conn: CancellationToken,
}

impl Ctx {
    fn engine(&self) -> &stockade_core::Engine {
        &self.shared.engine
    }
}

/// Every method, for error messages.
const METHODS: &str = "run, read, grep, write, kill, list, forget, cleanup, resize, stats, status, shutdown, schedule.add, schedule.list, schedule.remove, schedule.pause, schedule.resume, schedule.runs";

/// The start of every success line; the server appends `,"id":…}` and the newline.
pub(crate) const RESULT_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","result":"#;

/// Run `method` with `params`. On success, the answer line so far: [`RESULT_PREFIX`] and the
/// serialized result, written once into the buffer that goes to the socket (a large read is not
/// copied through a `serde_json::Value` on the way).
pub(crate) async fn dispatch(ctx: &Ctx, name: &str, params: Value) -> Result<Vec<u8>, RpcError> {
    if ctx.shared.stop.is_cancelled() && name != method::STATUS && name != method::STATS {
        return Err(rpc_error(
            code::SHUTTING_DOWN,
            "the daemon is shutting down; start a new one to run more commands",
        ));
    }
    match name {
        method::RUN => answer(run::handle(ctx, parse(params)?).await),
        method::READ => answer(read::handle(ctx, parse(params)?).await),
        method::GREP => answer(grep::handle(ctx, parse(params)?).await),
        method::WRITE => answer(write::handle(ctx, parse(params)?).await),
        method::KILL => answer(kill::handle(ctx, parse(params)?).await),
        method::LIST => answer(list::handle(ctx, parse(params)?).await),
        method::FORGET => answer(forget::handle(ctx, parse(params)?).await),
        method::CLEANUP => answer(cleanup::handle(ctx, parse(params)?).await),
        method::RESIZE => answer(resize::handle(ctx, parse(params)?).await),
        method::STATS => answer(stats::handle(ctx, parse(params)?).await),
        method::STATUS => answer(status::handle(ctx, parse(params)?).await),
        method::SHUTDOWN => answer(shutdown::handle(ctx, parse(params)?).await),
        method::SCHEDULE_ADD => answer(schedule_add::handle(ctx, parse(params)?).await),
        method::SCHEDULE_LIST => answer(schedule_list::handle(ctx, parse(params)?).await),
        method::SCHEDULE_REMOVE => answer(schedule_remove::handle(ctx, parse(params)?).await),
        method::SCHEDULE_PAUSE => answer(schedule_pause::handle(ctx, parse(params)?, true).await),
        method::SCHEDULE_RESUME => answer(schedule_pause::handle(ctx, parse(params)?, false).await),
        method::SCHEDULE_RUNS => answer(schedule_runs::handle(ctx, parse(params)?).await),
        other => Err(rpc_error(
            code::METHOD_NOT_FOUND,
            format!("no method {other:?}; the methods are {METHODS}"),
        )),
    }
}

/// Parameters that must be an object (absent or `null` means `{}`).
fn parse<T: DeserializeOwned>(params: Value) -> Result<T, RpcError> {
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

fn answer<T: Serialize>(result: Result<T, RpcError>) -> Result<Vec<u8>, RpcError> {
    let value = result?;
    let mut line = Vec::with_capacity(ANSWER_CAPACITY);
    line.extend_from_slice(RESULT_PREFIX);
    serde_json::to_writer(&mut line, &value).map_err(|e| {
        rpc_error(code::INTERNAL_ERROR, format!("the answer could not be encoded: {e}"))
    })?;
    Ok(line)
}

/// First allocation for an answer line; larger answers grow it.
const ANSWER_CAPACITY: usize = 1024;

/// A wait asked for in milliseconds, clamped to [`MAX_WAIT_MS`].
fn wait(ms: u64) -> Duration {
    Duration::from_millis(ms.min(MAX_WAIT_MS))
}

/// The error for a request whose client went away (never written: there is nobody to read it).
fn disconnected() -> RpcError {
    rpc_error(code::INTERNAL_ERROR, "the client disconnected")
}

/// No parameters expected (an empty object; unknown fields are refused).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}
