//! `stockade daemon run`: serve the engine over the Unix socket in the foreground.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::DaemonRunArgs;

pub fn run(_home: Option<PathBuf>, _args: DaemonRunArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the daemon is not built yet")
}
