//! One file per subcommand; each translates its arguments into engine calls.

pub mod bench;
mod daemon_run;
mod doctor;
mod read;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use stockade_core::StateDir;

use crate::cli::{Cli, Command};

/// Run the chosen subcommand.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let home = cli.home.clone();
    match cli.command {
        Command::Run(args) => run::run(home, args),
        Command::Read(args) => read::read(home, args),
        Command::Grep(args) => read::grep(home, args),
        Command::Doctor(args) => doctor::doctor(home, args),
        Command::Bench(args) => bench::bench(home, args),
        Command::Daemon(args) => match args.action {
            None => daemon_run::run(home, crate::cli::DaemonRunArgs::default()),
            Some(crate::cli::DaemonAction::Run(run)) => daemon_run::run(home, run),
        },
    }
}

/// Open the state directory (from `--home`/`STOCKADE_HOME` or the default).
pub fn state_dir(home: Option<PathBuf>) -> anyhow::Result<StateDir> {
    let root = match home {
        Some(h) => h,
        None => StateDir::locate()?,
    };
    StateDir::open(&root)
        .with_context(|| format!("cannot use the state directory {}", root.display()))
}

/// A tokio runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// An instance name for a one-shot engine: unique within the state directory.
pub fn oneshot_instance() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("run-{secs}-{}", std::process::id())
}
