//! `restart`: start a session's command again with the spec it was started with (command,
//! directory, environment, options) as a new background session, and answer as `run --bg` does.
//! A session of an earlier daemon is restarted from the `spec.json` its daemon wrote at start
//! (see `stockade_engine`'s `spec_file`).

use stockade_log::ReadRequest;
use stockade_proto::RunResult;
use stockade_proto::rpc::{RestartParams, RpcError, RunParams, code};

use super::ctx::Ctx;
use crate::error::{from_engine, rpc_error};

pub(super) async fn handle(ctx: &Ctx, p: RestartParams) -> Result<RunResult, RpcError> {
    let old = ctx.engine().session(&p.id).map_err(from_engine)?;
    if let Some(key) = &p.idempotency_key {
        stockade_engine::check_idempotency_key(key).map_err(from_engine)?;
    }
    // A restart is a new run: the old run's idempotency key would answer with the old session.
    // The restart's own key makes a retry answer with the session the first call started (the
    // old one has ended by then, so the retry kills nothing).
    let key = p.idempotency_key;
    let Some(spec) =
        old.spec().cloned().map(|s| stockade_engine::RunSpec { idempotency_key: key, ..s })
    else {
        return Err(rpc_error(
            code::NOT_SUPPORTED,
            format!(
                "{} was started by an older Stockade that kept no copy of its environment and options; start it again with run",
                p.id
            ),
        ));
    };
    if !old.state().is_terminal() {
        if !p.kill {
            return Err(rpc_error(
                code::INVALID_PARAMS,
                format!("{} is still running; end it first, or restart it with kill", p.id),
            ));
        }
        let opts = ctx.engine().terminate_options();
        old.kill(opts, "restarted").await;
    }
    let started = crate::hall::spawn(&ctx.shared, spec).await.map_err(crate::hall::rpc_error_of)?;
    let request = ReadRequest::for_run(&RunParams { background: true, ..RunParams::default() });
    super::run::answer(started.session, request, started.deduplicated, None).await
}
