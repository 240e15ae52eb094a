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
}

pub fn restart(global: &Global, args: RestartArgs) -> anyhow::Result<ExitCode> {
    let params = RestartParams { id: args.id, kill: args.kill };
    let result = global.connect()?.call::<method::Restart>(params)?;
    if args.quiet {
        return super::run::print_id(&result);
    }
    super::run::print_result(&result, args.json, global.remote.is_some())
}
