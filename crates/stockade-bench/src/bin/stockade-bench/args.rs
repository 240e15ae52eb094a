//! The arguments of `stockade-bench` (and so of `stockade bench`, which runs it): one
//! subcommand per measurement, each with its own flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use stockade_bench::peers::PeerSpec;

use crate::examples as ex;

/// Measure Stockade: memory growth with output, edge cases, drain and spawn speed.
///
/// `stockade bench ARGS…` runs this binary with the same arguments.
#[derive(Debug, Parser)]
#[command(name = "stockade-bench", version, max_term_width = 100, after_help = ex::BENCH)]
pub struct Cli {
    /// Where temporary daemon homes and spools go (default: the system temporary directory;
    /// for `spawn`, `$XDG_STATE_HOME` or `~/.local/state`, beside a daemon's default home);
    /// each run's are deleted when it ends.
    #[arg(long, global = true, env = "STOCKADE_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// The `stockade` binary whose daemons are measured (default: the one beside this binary,
    /// else the one on PATH; `stockade bench` names itself).
    #[arg(long, global = true, env = "STOCKADE_BIN", value_name = "FILE")]
    pub stockade_bin: Option<PathBuf>,
    /// Which measurement.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// The measurements.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Memory against output: N background commands × BYTES each, one fresh engine per run.
    ///
    /// For each bytes size, variant and N: start a fresh engine (a Stockade daemon with
    /// `--home` under the work directory, or a peer), launch N background commands that wait for
    /// a barrier file and then print (`yes X | head -c BYTES; sleep S`), sample the engine every
    /// 100 ms, release the barrier, never read the output, wait until every command ended, tear
    /// everything down and delete the spools. Writes `raw/<variant>/<run_id>.jsonl` (the
    /// samples), `summary.jsonl` (appended, one row a run), `summary.md` and the SVG plots.
    ///
    /// Variants: `pipe` and `file` (Stockade's capture modes), `node` (the shipped Node.js
    /// replica of the baseline shell manager under --max-old-space-size=512; skipped with a
    /// reason if `node` is not installed), and any `--peer NAME=COMMAND`.
    ///
    /// The peer contract: COMMAND runs as `/bin/sh -c 'exec COMMAND'` with BENCH_N,
    /// BENCH_COMMAND (the shell command each of the N runs), BENCH_BYTES, BENCH_BARRIER,
    /// BENCH_SLEEP and BENCH_PROGRESS (a file it may overwrite with the output bytes received);
    /// it starts the N commands its own way, prints `ready` on stdout, and exits 0 when all have
    /// ended. Its root process is what is sampled; its process group is killed at the end.
    #[command(after_help = ex::BENCH_GROWTH)]
    Growth(GrowthArgs),
    /// Ten hard cases as a 0/1 table with the reason for each 0.
    #[command(after_help = ex::BENCH_EDGES)]
    Edges(EdgesArgs),
    /// 1 GiB through a daemon session (pipe capture) against writing it straight to a file.
    #[command(after_help = ex::BENCH_DRAIN)]
    Drain(ThroughputArgs),
    /// 1 GiB read back by cursor through the daemon — its Unix socket, and its `wss://` door on
    /// loopback (token and CA file) — against `cat` of the spool, with CPU seconds.
    ///
    /// One session prints BYTES of random data; each round reads all of it back each way
    /// (binary reads, 4 MiB an answer) and keeps each way's fastest round: MiB/s and the CPU
    /// seconds of the reader and the daemon (from /proc). Goals: the socket at least half `cat`'s
    /// speed, the door at least 200 MiB/s, each at most 2 CPU-seconds per GiB. `--base64` adds
    /// the JSON (base64) form for comparison. Needs `openssl` for the door's certificate. Writes
    /// `read.jsonl`.
    #[command(after_help = ex::BENCH_READ)]
    Read(ReadBenchArgs),
    /// `run true` round trips through the daemon against a bare fork+exec+wait.
    ///
    /// Rounds alternate three sides: `/bin/sh -c true`, `run true`, and `run true` under
    /// `sandbox: workspace-write, network: none` (its ratio to unsandboxed goal: ≤ 1.2×). The
    /// daemon's home goes beside a daemon's default home (`~/.local/state`) unless `--home`
    /// says: a sandboxed spawn grows with the read rules that hide the home (one per entry
    /// beside each directory on the way to it), and the line says how many there were.
    #[command(after_help = ex::BENCH_SPAWN)]
    Spawn(SpawnArgs),
    /// The daemon's memory as figures: idle, output nobody reads, live sessions, growth slope.
    ///
    /// Each case starts a fresh daemon and reads its peak RSS (VmHWM) from /proc. `idle`: RSS
    /// one second after start and what it is made of (anonymous, file-backed, shared; threads).
    /// `output`: SESSIONS × BYTES printed with nobody reading, in pipe and in file capture, then
    /// every byte read back by cursor (raw, checked byte for byte): peak RSS before and after.
    /// `live`: LIVE_SESSIONS commands that each print LIVE_BYTES and keep running: peak RSS,
    /// then each killed and the processes left counted. `slope`: `output` (pipe) at each of
    /// COUNTS sessions: peak RSS per extra session (least squares). Appends `memory.jsonl`.
    #[command(after_help = ex::BENCH_MEMORY)]
    Memory(MemoryArgs),
    /// grep over a 1 GiB spool (`seq` lines) against `rg -n` on the same file.
    ///
    /// Two patterns: the anchored last line (`'^N$'`) and the same digits as a literal; the
    /// figure is speed relative to ripgrep (goal ≥ 0.5×). Needs `rg` on PATH.
    #[command(after_help = ex::BENCH_GREP)]
    #[command(mut_arg("bytes", |a| a.help("Spool size (default 1GiB; quick 64MiB)")))]
    Grep(ThroughputArgs),
    /// `list` with 1,000 running sessions: wall time and daemon CPU per call (goal ≤ 0.2 s each).
    #[command(after_help = ex::BENCH_LIST)]
    List(ListBenchArgs),
    /// Starting and ending 1,000 sessions: start, one kill of all, daemon stop, single kill and
    /// list in daemon CPU — with a cgroup and without one.
    ///
    /// Starts SESSIONS background `sleep 1000`s over 16 connections of the client library
    /// (goal ≤ 5 s for 1,000); at that many running, the daemon CPU of a single `kill` (≤ 20 ms)
    /// and of a `list` (≤ 50 ms); one `kill --all` call, timed to 0 processes (≤ 2 s); the
    /// sessions started again and `daemon stop`, timed to 0 processes (≤ 2 s) and to the
    /// daemon's exit. Once with a cgroup (where there is one) and once with `--no-cgroup`.
    /// Appends `scale.jsonl`.
    #[command(after_help = ex::BENCH_SCALE)]
    Scale(ScaleBenchArgs),
    /// Redraw `summary.md` and the SVGs of an output directory from its JSONL.
    #[command(after_help = ex::BENCH_PLOT)]
    Plot(PlotArgs),
}

/// `stockade bench list`.
#[derive(Debug, Args)]
pub struct ListBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Running sessions (default 1000; quick 100).
    #[arg(long, value_name = "N")]
    pub sessions: Option<usize>,
    /// `list` calls measured.
    #[arg(long, value_name = "N", default_value_t = 9)]
    pub calls: usize,
}

/// `stockade bench scale`.
#[derive(Debug, Args)]
pub struct ScaleBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Sessions started (default 1000; quick 100).
    #[arg(long, value_name = "N")]
    pub sessions: Option<usize>,
    /// Only the `--no-cgroup` daemon (default: with a cgroup, then without).
    #[arg(long)]
    pub no_cgroup: bool,
}

/// Options every bench shares.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Output directory (JSONL, Markdown, SVG).
    #[arg(long, value_name = "DIR", default_value = "bench-out")]
    pub out: PathBuf,
    /// A shorter version (about a minute; smaller sizes).
    #[arg(long)]
    pub quick: bool,
}

/// `stockade bench growth`.
#[derive(Debug, Args)]
pub struct GrowthArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Concurrency levels (default 2,4,8,16,32; quick 2,4,8).
    #[arg(long, value_name = "N,…", value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Bytes each command prints (default 20MiB; quick 4MiB).
    #[arg(long, value_name = "SIZE,…", value_delimiter = ',', value_parser = parse_size)]
    pub bytes: Vec<u64>,
    /// Engines: pipe, file, node (default pipe,file,node; `''` for only the `--peer`s).
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub variants: Vec<String>,
    /// Another engine, run through the peer contract (repeatable).
    #[arg(long, value_name = "NAME=COMMAND")]
    pub peer: Vec<PeerSpec>,
    /// Seconds each command sleeps after printing (the post-output window; default 2, quick 1).
    #[arg(long, value_name = "S")]
    pub sleep: Option<u64>,
    /// The dashed memory line on the plots.
    #[arg(long, value_name = "SIZE", default_value = "512MiB", value_parser = parse_size)]
    pub memory_line: u64,
}

/// `stockade bench edges`.
#[derive(Debug, Args)]
pub struct EdgesArgs {
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `stockade bench drain` and `stockade bench grep`: BYTES through the daemon against the plain
/// tool, the best of ROUNDS each. Each command words `--bytes` itself (`mut_arg`).
#[derive(Debug, Args)]
pub struct ThroughputArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bytes per round (default 1GiB; quick 64MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Rounds of each side (the best is kept).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: usize,
}

impl ThroughputArgs {
    /// `--bytes`, or its default: 1 GiB, 64 MiB with `--quick`.
    pub fn bytes(&self) -> u64 {
        self.bytes.unwrap_or(if self.common.quick { 64 << 20 } else { 1 << 30 })
    }

    /// `--rounds`, at least one.
    pub fn rounds(&self) -> usize {
        self.rounds.max(1)
    }
}

/// `stockade bench read`.
#[derive(Debug, Args)]
pub struct ReadBenchArgs {
    #[command(flatten)]
    pub throughput: ThroughputArgs,
    /// Also read through the JSON form (base64), as a client of an older daemon does.
    #[arg(long)]
    pub base64: bool,
}

/// `stockade bench spawn`.
#[derive(Debug, Args)]
pub struct SpawnArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Round trips of each side (default 200; quick 30; medians are compared).
    #[arg(long, value_name = "N")]
    pub rounds: Option<usize>,
}

/// `stockade bench memory`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Cases: idle, output, live, slope (default all).
    #[arg(long, value_name = "CASE,…", value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Sessions of `output` (default 32; quick 8).
    #[arg(long, value_name = "N")]
    pub sessions: Option<usize>,
    /// Bytes each `output` and `slope` session prints (default 20MiB; quick 4MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Sessions of `live` (default 1000; quick 64).
    #[arg(long, value_name = "N")]
    pub live_sessions: Option<usize>,
    /// Bytes each `live` session prints before it waits (default 2MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub live_bytes: Option<u64>,
    /// Session counts of `slope` (default 2,4,8,16,32,64,128; quick 2,8,32).
    #[arg(long, value_name = "N,…", value_delimiter = ',')]
    pub counts: Vec<usize>,
}

/// `stockade bench plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The output directory of earlier runs.
    #[arg(long, value_name = "DIR", default_value = "bench-out")]
    pub out: PathBuf,
    /// The dashed memory line on the plots.
    #[arg(long, value_name = "SIZE", default_value = "512MiB", value_parser = parse_size)]
    pub memory_line: u64,
}

/// A size in binary units (`4096`, `64KiB`, `20MiB`, `1GiB`), the syntax every `stockade` flag
/// takes.
fn parse_size(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|_| "is not a size; write one such as 4096, 64KiB, 20MiB or 1GiB".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every measurement ends its help with examples, one a line, as every `stockade` command.
    #[test]
    fn cli_is_well_formed_and_every_measurement_has_examples() {
        Cli::command().debug_assert();
        for sub in Cli::command().get_subcommands().filter(|s| s.get_name() != "help") {
            let examples = sub.get_after_help().map(ToString::to_string).unwrap_or_default();
            assert!(examples.starts_with("Examples:\n  stockade bench "), "{}", sub.get_name());
        }
    }
}
