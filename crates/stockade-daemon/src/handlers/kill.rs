//! `kill`: terminate a session's tree through the one terminate routine and report what it did.

use std::sync::Arc;
use std::time::Duration;

use stockade_engine::Session;
use stockade_proc::{Signal, TerminateOptions};
use stockade_proto::rpc::{
    KillManyParams, KillManyResult, KillOne, KillParams, KillResult, MAX_GRACE_MS, RpcError, code,
};

use super::ctx::Ctx;
use crate::error::{from_engine, rpc_error};

pub(super) async fn handle(ctx: &Ctx, p: KillParams) -> Result<KillResult, RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let opts = options(ctx, p.signal.as_deref(), p.grace_ms)?;
    let reason = format!("killed on request ({})", opts.signal.as_str());
    let report = session.kill(opts, &reason).await;
    ctx.shared.metrics.killed(report.survivors.len());
    Ok(KillResult { id: session.id().to_owned(), state: session.state(), report })
}

/// `kill_many`: the sessions named (or every running one) ended together; one entry per id in
/// order, an unknown id answered with its error and the others still ended.
pub(super) async fn handle_many(ctx: &Ctx, p: KillManyParams) -> Result<KillManyResult, RpcError> {
    if p.all && !p.ids.is_empty() {
        return Err(rpc_error(code::INVALID_PARAMS, "give either session ids or all, not both"));
    }
    let opts = options(ctx, p.signal.as_deref(), p.grace_ms)?;
    let engine = ctx.engine();
    let found: Vec<(String, Result<Arc<Session>, String>)> = if p.all {
        let running = engine.sessions().into_iter().filter(|s| !s.state().is_terminal());
        running.map(|s| (s.id().to_owned(), Ok(s))).collect()
    } else {
        let look = |id: &String| engine.session(id).map_err(|e| from_engine(e).message);
        p.ids.iter().map(|id| (id.clone(), look(id))).collect()
    };
    let sessions: Vec<Arc<Session>> =
        found.iter().filter_map(|(_, s)| s.as_ref().ok().cloned()).collect();
    let reason = format!("killed on request ({})", opts.signal.as_str());
    let mut reports = engine.kill_many(sessions, opts, &reason).await.into_iter();
    let mut results = Vec::with_capacity(found.len());
    for (id, session) in found {
        let one = match session.map(|s| (reports.next().flatten(), s)) {
            Ok((Some(report), s)) => {
                ctx.shared.metrics.killed(report.survivors.len());
                let result = KillResult { id: s.id().to_owned(), state: s.state(), report };
                KillOne { id, result: Some(result), error: None }
            }
            Ok((None, _)) => {
                let why = "ending it failed inside the daemon; kill it again".to_owned();
                KillOne { id, result: None, error: Some(why) }
            }
            Err(why) => KillOne { id, result: None, error: Some(why) },
        };
        results.push(one);
    }
    Ok(KillManyResult { results })
}

/// The engine's terminate options with the request's signal and grace.
fn options(
    ctx: &Ctx,
    signal: Option<&str>,
    grace_ms: Option<u64>,
) -> Result<TerminateOptions, RpcError> {
    let mut opts = ctx.engine().terminate_options();
    if let Some(name) = signal {
        opts.signal = parse_signal(name)?;
    }
    if let Some(ms) = grace_ms {
        opts.grace = Duration::from_millis(ms.min(MAX_GRACE_MS));
    }
    Ok(opts)
}

/// `SIGTERM`, `TERM`, `term` or `15`.
pub(crate) fn parse_signal(name: &str) -> Result<Signal, RpcError> {
    let bad = || {
        rpc_error(
            code::INVALID_PARAMS,
            format!(
                "unknown signal {name:?}: use a name like SIGTERM, TERM or INT, or a number like 15"
            ),
        )
    };
    let trimmed = name.trim();
    if let Ok(n) = trimmed.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| bad());
    }
    let upper = trimmed.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    full.parse::<Signal>().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn signals_parse_by_name_short_name_and_number() {
        assert_eq!(parse_signal("SIGTERM").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("TERM").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("int").unwrap(), Signal::SIGINT);
        assert_eq!(parse_signal("9").unwrap(), Signal::SIGKILL);
        for bad in ["", "SIGNOPE", "0", "999", "-1"] {
            assert!(parse_signal(bad).is_err(), "{bad}");
        }
    }
}
