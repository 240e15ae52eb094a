//! `stockade restart`: start a session's command again — same command, working directory,
//! environment and options — as a new background session through the daemon.

use std::process::ExitCode;

use clap::Args;
use stockade_proto::rpc::{RestartParams, method};

use crate::global::Global;

/// `stockade restart`.
#[derive(Debug, Args)]
pub struct RestartArgs {
    /// The session id (`sh-3`).
    pub id: String,
    /// End it first if it is still running (else a running session is refused).
    #[arg(long)]
    pub kill: bool,
    /// Print the structured result (the `run` result) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print only the new session's id and a newline.
    #[arg(short = 'q', long, conflicts_with = "json")]
    pub quiet: bool,
    /// The idempotency key of the new run (1–128 printable characters). A restart whose key
    /// the daemon still knows starts nothing and answers with that session, so a restart
    /// retried after a timeout or a lost connection never starts a second copy. Without it,
    /// one is made for each call and named if the call fails that way.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

pub fn restart(global: &Global, args: RestartArgs) -> anyhow::Result<ExitCode> {
    let key = args.idempotency_key.unwrap_or_else(super::run::new_idempotency_key);
    let params =
        RestartParams { id: args.id.clone(), kill: args.kill, idempotency_key: Some(key.clone()) };
    let result = global.connect()?.call::<method::Restart>(params).map_err(|e| {
        super::run::may_have_happened(e, &format!(
            "the command may have started again: see `stockade ps --key {key}`, or repeat the restart with `--idempotency-key {key}` to get that session instead of a second copy"
        ))
    })?;
    if args.quiet {
        return super::run::print_id(&result);
    }
    super::run::print_result(&result, args.json, global.remote.is_some())
}
