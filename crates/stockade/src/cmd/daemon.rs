//! `stockade daemon`: serve in the foreground (`run`, the default) or control a daemon in the
//! background (`start`, `stop`, `status`). The actions live in `daemon_run.rs` and
//! `daemon_ctl.rs`; this file only names them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::daemon_ctl::{self, DaemonCtlArgs};
use super::daemon_run::{self, DaemonRunArgs};
use crate::examples as ex;
use crate::global::Global;

/// `stockade daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// What to do (default: `run`).
    #[command(subcommand)]
    pub action: Option<DaemonAction>,
}

/// `stockade daemon <action>`.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process; boxing buys nothing")]
pub enum DaemonAction {
    /// Serve JSON-RPC on the Unix socket in the foreground until SIGTERM/SIGINT or `daemon stop`.
    ///
    /// With `--ws` it also serves remote clients (`stockade --remote …`) and orchestrators'
    /// probes (see docs/deploy.md). As a container's PID 1 it also reaps every orphan (Linux),
    /// e.g. `docker run IMAGE stockade daemon run`.
    #[command(after_help = ex::DAEMON_RUN)]
    Run(Box<DaemonRunArgs>),
    /// Start the daemon in the background (if none is running) and wait until it answers.
    #[command(after_help = ex::DAEMON_START)]
    Start(DaemonCtlArgs),
    /// Ask the daemon to terminate every session and exit; wait until it is gone. Says which
    /// sessions it terminated: `Daemon stopped (pid 7); terminated 2 running sessions: sh-3, sh-4`.
    #[command(after_help = ex::DAEMON_STOP)]
    Stop(DaemonCtlArgs),
    /// Say whether a daemon is running: pid, socket, version, sessions. Exit status 1 if not.
    #[command(after_help = ex::DAEMON_STATUS)]
    Status(DaemonCtlArgs),
}

pub fn daemon(
    global: &Global,
    home: Option<PathBuf>,
    args: DaemonArgs,
) -> anyhow::Result<ExitCode> {
    if matches!(args.action, None | Some(DaemonAction::Run(_))) {
        global.refuse_remote(
            "daemon run",
            "start it on the remote machine with `stockade daemon run --ws ADDR`",
        )?;
    }
    match args.action {
        None => daemon_run::run(home, DaemonRunArgs::default()),
        Some(DaemonAction::Run(run)) => daemon_run::run(home, *run),
        Some(DaemonAction::Start(a)) => daemon_ctl::start(global, a),
        Some(DaemonAction::Stop(a)) => daemon_ctl::stop(global, a),
        Some(DaemonAction::Status(a)) => daemon_ctl::status(global, a),
    }
}
