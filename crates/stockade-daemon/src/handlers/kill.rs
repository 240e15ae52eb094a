//! `kill`: terminate a session's tree through the one terminate routine and report what it did.

use std::time::Duration;

use stockade_proc::Signal;
use stockade_proto::rpc::{KillParams, KillResult, MAX_GRACE_MS, RpcError, code};

use super::ctx::Ctx;
use crate::error::{from_engine, rpc_error};

pub(super) async fn handle(ctx: &Ctx, p: KillParams) -> Result<KillResult, RpcError> {
    let session = ctx.engine().session(&p.id).map_err(from_engine)?;
    let mut opts = ctx.engine().terminate_options();
    if let Some(name) = p.signal.as_deref() {
        opts.signal = parse_signal(name)?;
    }
    if let Some(ms) = p.grace_ms {
        opts.grace = Duration::from_millis(ms.min(MAX_GRACE_MS));
    }
    let reason = format!("killed on request ({})", opts.signal.as_str());
    let report = session.kill(opts, &reason).await;
    ctx.shared.metrics.killed(report.survivors.len());
    Ok(KillResult { id: session.id().to_owned(), state: session.state(), report })
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
