//! `stockade bench`: the memory-growth experiment as a command. Arguments only; the harness is the
//! `stockade-bench` crate, which talks to fresh daemons over their sockets like any client.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::examples as ex;
use anyhow::Context;
use clap::{Args, Subcommand};
use stockade_bench::meta::RunMeta;
use stockade_bench::peers::{self, PeerSpec};
use stockade_bench::runner::{self, GrowthConfig, Variant};
use stockade_bench::{edges, memory, plots, scale, speed, summary};
use stockade_proto::Capture;

/// `stockade bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
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
    /// `run true` round trips through the daemon against a bare fork+exec+wait.
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
    #[arg(long, value_name = "SIZE,…", value_delimiter = ',', value_parser = crate::args::parse_size_u64)]
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
    #[arg(long, value_name = "SIZE", default_value = "512MiB", value_parser = crate::args::parse_size_u64)]
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
    #[arg(long, value_name = "SIZE", value_parser = crate::args::parse_size_u64)]
    pub bytes: Option<u64>,
    /// Rounds of each side (the best is kept).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: usize,
}

impl ThroughputArgs {
    /// `--bytes`, or its default: 1 GiB, 64 MiB with `--quick`.
    fn bytes(&self) -> u64 {
        self.bytes.unwrap_or(if self.common.quick { 64 << 20 } else { 1 << 30 })
    }

    /// `--rounds`, at least one.
    fn rounds(&self) -> usize {
        self.rounds.max(1)
    }
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
    #[arg(long, value_name = "SIZE", value_parser = crate::args::parse_size_u64)]
    pub bytes: Option<u64>,
    /// Sessions of `live` (default 1000; quick 64).
    #[arg(long, value_name = "N")]
    pub live_sessions: Option<usize>,
    /// Bytes each `live` session prints before it waits (default 2MiB).
    #[arg(long, value_name = "SIZE", value_parser = crate::args::parse_size_u64)]
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
    #[arg(long, value_name = "SIZE", default_value = "512MiB", value_parser = crate::args::parse_size_u64)]
    pub memory_line: u64,
}

/// Run a bench. `--home` is where temporary daemon homes and spools go (default: the system
/// temporary directory); each run's are deleted when it ends.
pub fn bench(home: Option<PathBuf>, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let exe =
        std::env::current_exe().context("cannot find the stockade binary to start daemons")?;
    let work = home.unwrap_or_else(std::env::temp_dir);
    match args.command {
        BenchCommand::Growth(a) => growth(exe, work, a),
        BenchCommand::Edges(a) => {
            let cfg = edges::EdgeConfig {
                exe,
                out: a.common.out.clone(),
                sizes: if a.common.quick { edges::Sizes::QUICK } else { edges::Sizes::FULL },
                work_dir: work,
                meta: RunMeta::collect(env!("CARGO_PKG_VERSION"), a.common.quick),
                variants: vec![stockade_proto::Capture::Pipe, stockade_proto::Capture::File],
            };
            let results = edges::edges(&cfg)?;
            print!("{}", edges::markdown(&results));
            println!("Written: {}", a.common.out.join("edges.md").display());
            let all = results.iter().all(|r| r.pass == 1);
            Ok(if all { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        BenchCommand::Drain(a) => {
            let s = speed::drain(&exe, &a.common.out, &work, a.bytes(), a.rounds())?;
            println!("{}", s.line());
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Spawn(a) => {
            let rounds = a.rounds.unwrap_or(if a.common.quick { 30 } else { 200 });
            let s = speed::spawn(&exe, &a.common.out, &work, rounds.max(1))?;
            println!("{}", s.line());
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Memory(a) => bench_memory(exe, work, a),
        BenchCommand::Grep(a) => {
            let s = scale::grep(&exe, &a.common.out, &work, a.bytes(), a.rounds())?;
            for line in s.lines() {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::List(a) => {
            let n = a.sessions.unwrap_or(if a.common.quick { 100 } else { 1000 });
            let s = scale::list(&exe, &a.common.out, &work, n, a.calls)?;
            println!("{}", s.line());
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Plot(a) => {
            let rows = summary::read_jsonl(&a.out.join("summary.jsonl"))?;
            summary::write_markdown(&a.out.join("summary.md"), &rows)?;
            let written =
                plots::growth_plots(&a.out, &rows, a.memory_line as f64 / (1 << 20) as f64)?;
            for p in written {
                println!("{}", p.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn growth(exe: PathBuf, work: PathBuf, a: GrowthArgs) -> anyhow::Result<ExitCode> {
    let quick = a.common.quick;
    let concurrency = if a.concurrency.is_empty() {
        if quick { vec![2, 4, 8] } else { vec![2, 4, 8, 16, 32] }
    } else {
        a.concurrency
    };
    let bytes =
        if a.bytes.is_empty() { vec![if quick { 4 << 20 } else { 20 << 20 }] } else { a.bytes };
    let names = if a.variants.is_empty() {
        vec!["pipe".to_owned(), "file".to_owned(), "node".to_owned()]
    } else {
        a.variants
    };
    let mut variants = Vec::new();
    // Where the shipped peer scripts are written for this invocation (removed at the end).
    let scripts = work.join(format!("stockade-bench-peers-{}", std::process::id()));
    // `--variants ''` runs only the `--peer`s.
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        match name {
            "pipe" | "stockade-pipe" => variants.push(Variant::Stockade(Capture::Pipe)),
            "file" | "stockade-file" => variants.push(Variant::Stockade(Capture::File)),
            "node" | "node-baseline" => match peers::node_baseline(&a.common.out.join("peers")) {
                Ok(spec) => variants.push(Variant::Peer(spec)),
                Err(why) => eprintln!("stockade bench: skipping the node baseline: {why}"),
            },
            other => anyhow::bail!(
                "unknown variant {other:?}: use pipe, file, node, or --peer NAME=COMMAND"
            ),
        }
    }
    variants.extend(a.peer.into_iter().map(Variant::Peer));
    anyhow::ensure!(!variants.is_empty(), "no variant to run");
    anyhow::ensure!(concurrency.iter().all(|&n| n > 0), "concurrency must be at least 1");
    let cfg = GrowthConfig {
        exe,
        out: a.common.out.clone(),
        variants,
        concurrency,
        bytes,
        sleep_s: a.sleep.unwrap_or(if quick { 1 } else { 2 }),
        work_dir: work,
        memory_line_mib: a.memory_line as f64 / (1 << 20) as f64,
        meta: RunMeta::collect(env!("CARGO_PKG_VERSION"), quick),
    };
    let rows = runner::growth(&cfg);
    let _ = std::fs::remove_dir_all(&scripts);
    let rows = rows?;
    print!("{}", summary::markdown(&rows));
    println!("Written: {}", cfg.out.join("summary.md").display());
    let failed = rows.iter().any(|r| r.exit == "harness error");
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn bench_memory(exe: PathBuf, work: PathBuf, a: MemoryArgs) -> anyhow::Result<ExitCode> {
    let quick = a.common.quick;
    let cfg = memory::MemoryConfig { exe, work_dir: work };
    let cases = if a.cases.is_empty() {
        vec!["idle".to_owned(), "output".into(), "live".into(), "slope".into()]
    } else {
        a.cases
    };
    let bytes = a.bytes.unwrap_or(if quick { 4 << 20 } else { 20 << 20 });
    let mut figures = Vec::new();
    for case in cases.iter().map(|c| c.trim()) {
        let new = match case {
            // Long enough for the start-up trim and a few rounds of the periodic tasks.
            "idle" => {
                memory::idle(&cfg, std::time::Duration::from_secs(if quick { 6 } else { 30 }))?
            }
            "output" => {
                let n = a.sessions.unwrap_or(if quick { 8 } else { 32 });
                vec![
                    memory::output(&cfg, Capture::Pipe, n, bytes)?,
                    memory::output(&cfg, Capture::File, n, bytes)?,
                ]
            }
            "live" => {
                let n = a.live_sessions.unwrap_or(if quick { 64 } else { 1000 });
                vec![memory::live(&cfg, n, a.live_bytes.unwrap_or(2 << 20))?]
            }
            "slope" => {
                let counts = if !a.counts.is_empty() {
                    a.counts.clone()
                } else if quick {
                    vec![2, 8, 32]
                } else {
                    vec![2, 4, 8, 16, 32, 64, 128]
                };
                vec![memory::growth_slope(&cfg, &counts, bytes)?]
            }
            other => anyhow::bail!("unknown case {other:?}: use idle, output, live or slope"),
        };
        for f in &new {
            eprintln!("{}", f.line());
            memory::record(&a.common.out, f)?;
        }
        figures.extend(new);
    }
    for f in &figures {
        println!("{}", f.line());
    }
    Ok(ExitCode::SUCCESS)
}
