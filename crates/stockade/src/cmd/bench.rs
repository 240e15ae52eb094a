//! `stockade bench`: the experiment harness lives in its own binary, `stockade-bench`, so the
//! binary every agent starts does not carry it (plots, progress bars, peers). This subcommand
//! finds that binary and becomes it, with the same arguments.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::Context;
use clap::Args;

/// The harness's binary.
const BENCH_BIN: &str = "stockade-bench";

/// `stockade bench`: every argument goes to `stockade-bench` as it is (`stockade bench --help`
/// is its help).
#[derive(Debug, Args)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct BenchArgs {
    /// The measurement and its flags, e.g. `growth --quick` (see `stockade bench --help`).
    #[arg(num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
    #[arg(value_name = "ARGS")]
    pub args: Vec<OsString>,
}

/// Replace this process with `stockade-bench ARGS…`: the one beside this binary, else the one
/// on PATH. Exec, not spawn: its exit status and the signals sent to it are the caller's. It
/// measures this binary (`STOCKADE_BIN`), and `--home` is where its temporary homes go.
pub fn bench(home: Option<PathBuf>, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let me = std::env::current_exe().context("cannot find the stockade binary to measure")?;
    let beside = me.parent().map(|dir| dir.join(BENCH_BIN)).filter(|p| p.is_file());
    // A bare name is looked up on PATH by exec itself.
    let program = beside.unwrap_or_else(|| PathBuf::from(BENCH_BIN));
    let mut bench = Command::new(&program);
    bench.args(&args.args).env("STOCKADE_BIN", &me);
    if let Some(home) = home {
        bench.env("STOCKADE_HOME", home);
    }
    let err = bench.exec();
    if err.kind() == std::io::ErrorKind::NotFound {
        let dir = me.parent().map_or_else(|| me.display().to_string(), |d| d.display().to_string());
        anyhow::bail!(
            "`stockade bench` runs the {BENCH_BIN} binary, which is neither in {dir} nor on PATH: build it with `cargo build --release -p {BENCH_BIN}`"
        );
    }
    Err(err).with_context(|| format!("cannot run {}", program.display()))
}
