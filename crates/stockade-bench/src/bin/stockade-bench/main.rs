//! `stockade-bench`: Stockade's experiment harness as a command of its own, so the product
//! binary every agent starts does not carry it. `stockade bench ARGS…` finds this binary and
//! runs it with the same arguments; it measures the `stockade` binary it is given (or finds),
//! talking to fresh daemons over their sockets like any client.

mod args;
mod examples;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use stockade_bench::meta::RunMeta;
use stockade_bench::peers;
use stockade_bench::runner::{self, GrowthConfig, Variant};
use stockade_bench::{BenchError, Result, edges, memory, scale, speed, summary};
use stockade_proto::Capture;

use args::{BenchCommand, Cli, GrowthArgs, MemoryArgs, PlotArgs};

fn main() -> ExitCode {
    // Usage errors, `--help` and `--version` end here with clap's own exit status.
    let cli = Cli::parse();
    match bench(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stockade-bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// The `stockade` binary whose daemons are measured: the one named (`stockade bench` names
/// itself), else the one beside this binary (a cargo target directory, an install prefix),
/// else the one on PATH.
fn stockade_exe(named: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(exe) = named {
        return Ok(exe);
    }
    let beside = std::env::current_exe().ok().and_then(|me| Some(me.parent()?.join("stockade")));
    if let Some(exe) = beside.filter(|p| p.is_file()) {
        return Ok(exe);
    }
    peers::which("stockade").ok_or_else(|| {
        BenchError::Other(
            "cannot find the stockade binary to measure, beside stockade-bench or on PATH: build it with `cargo build --release -p stockade`, or name it with --stockade-bin FILE".into(),
        )
    })
}

/// Run a bench. `--home` is where temporary daemon homes and spools go (default: the system
/// temporary directory; for `spawn`, beside a daemon's default home); each run's are deleted
/// when it ends.
fn bench(cli: Cli) -> Result<ExitCode> {
    // Redrawing reads files only: it needs no `stockade` binary.
    if let BenchCommand::Plot(a) = &cli.command {
        return plot(a);
    }
    let exe = stockade_exe(cli.stockade_bin)?;
    // `spawn` measures a sandboxed run, whose cost depends on where the daemon's home is: by
    // default it is where a user's daemon has its home.
    let default_work = match &cli.command {
        BenchCommand::Spawn(_) => speed::default_spawn_dir,
        _ => std::env::temp_dir,
    };
    let work = cli.home.unwrap_or_else(default_work);
    match cli.command {
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
            let s = speed::drain_speed(&exe, &a.common.out, &work, a.bytes(), a.rounds())?;
            println!("{}", s.line());
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Read(a) => {
            let t = &a.throughput;
            let (out, bytes, rounds) = (&t.common.out, t.bytes(), t.rounds());
            let rows = stockade_bench::bulk::read(&exe, out, &work, bytes, rounds, a.base64)?;
            for line in rows.iter().map(|r| r.line()).chain(stockade_bench::bulk::verdicts(&rows)) {
                println!("{line}");
            }
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
        BenchCommand::Scale(a) => {
            let n = a.sessions.unwrap_or(if a.common.quick { 100 } else { 1000 });
            let modes: &[bool] = if a.no_cgroup { &[true] } else { &[false, true] };
            for &no_cgroup in modes {
                let s = scale::scale(&exe, &a.common.out, &work, n, no_cgroup)?;
                for line in s.lines() {
                    println!("{line}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Plot(a) => plot(&a),
    }
}

/// `plot`: redraw `summary.md` and the SVGs of an output directory from its JSONL.
fn plot(a: &PlotArgs) -> Result<ExitCode> {
    let rows = summary::read_jsonl(&a.out.join("summary.jsonl"))?;
    summary::write_markdown(&a.out.join("summary.md"), &rows)?;
    let written = stockade_bench::growth_plots::growth_plots(
        &a.out,
        &rows,
        a.memory_line as f64 / (1 << 20) as f64,
    )?;
    for p in written {
        println!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn growth(exe: PathBuf, work: PathBuf, a: GrowthArgs) -> Result<ExitCode> {
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
                Err(why) => eprintln!("stockade-bench: skipping the node baseline: {why}"),
            },
            other => {
                return Err(BenchError::Other(format!(
                    "unknown variant {other:?}: use pipe, file, node, or --peer NAME=COMMAND"
                )));
            }
        }
    }
    variants.extend(a.peer.into_iter().map(Variant::Peer));
    if variants.is_empty() {
        return Err(BenchError::Other("no variant to run".into()));
    }
    if concurrency.contains(&0) {
        return Err(BenchError::Other("concurrency must be at least 1".into()));
    }
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

fn bench_memory(exe: PathBuf, work: PathBuf, a: MemoryArgs) -> Result<ExitCode> {
    let quick = a.common.quick;
    // The figures depend on how the binary was built: the shipped `dist` profile (fat LTO) or
    // the quick `release` build, so the run says which it measured.
    println!("Measured: {} ({})", exe.display(), build_of(&exe));
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
            other => {
                return Err(BenchError::Other(format!(
                    "unknown case {other:?}: use idle, output, live or slope"
                )));
            }
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

/// `stockade --version` of the measured binary: its number, cargo profile and linking.
fn build_of(exe: &std::path::Path) -> String {
    match std::process::Command::new(exe).arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Ok(out) => format!("`--version` failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("cannot run it: {e}"),
    }
}
