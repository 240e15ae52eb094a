//! `stockade bench`: the seed's experiment as a command. (being written)

use std::path::PathBuf;
use std::process::ExitCode;

/// `stockade bench` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

pub fn bench(_home: Option<PathBuf>, _args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the bench is not built yet")
}
