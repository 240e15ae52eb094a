//! The runner: one fresh engine per run, N background commands behind a start barrier, released
//! together once the sampler runs, never read, waited for, then everything torn down.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stockade_proto::Capture;
use stockade_proto::rpc::{ListParams, RunParams, method};

use crate::daemon::Daemon;
use crate::peers::{PeerLoad, PeerProcess, PeerSpec};
use crate::progress;
use crate::sampler::{Sampler, Source};
use crate::summary::{self, RunSummary};
use crate::{BenchError, MIB, Result, human};

/// How long the sampler watches the idle engine before the release (the baseline).
const BASELINE: Duration = Duration::from_millis(600);
/// How long the sampler keeps watching after every command has ended.
const TAIL: Duration = Duration::from_millis(800);
/// How long a peer may take to start its commands.
const PEER_READY_LIMIT: Duration = Duration::from_secs(120);

/// An engine to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Variant {
    /// A Stockade daemon with this capture mode.
    Stockade(Capture),
    /// Another engine, run through the peer contract.
    Peer(PeerSpec),
}

impl Variant {
    /// The name in tables, plots and raw paths.
    pub fn name(&self) -> String {
        match self {
            Variant::Stockade(Capture::Pipe) => "stockade-pipe".into(),
            Variant::Stockade(Capture::Split) => "stockade-split".into(),
            Variant::Stockade(Capture::File) => "stockade-file".into(),
            Variant::Peer(p) => p.name.clone(),
        }
    }
}

/// Which stream (and what text) a load command prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// `yes X` on stdout (the baseline's load).
    Stdout,
    /// `yes X` on stderr.
    Stderr,
    /// A realistic log line on stdout.
    LogStream,
}

/// The line R2 prints.
pub const LOG_LINE: &str = "LOG_STREAM_LINE_abcdefghijklmnopqrstuvwxyz0123456789";

/// The shell command one session runs: wait for `barrier` (giving up after 5 minutes), print
/// `bytes`, sleep `sleep_s`.
pub fn barrier_command(barrier: &Path, bytes: u64, sleep_s: u64, load: Load) -> String {
    let b = shell_quote(&barrier.display().to_string());
    let print = match load {
        Load::Stdout => format!("yes X | head -c {bytes}"),
        Load::Stderr => format!("yes X | head -c {bytes} >&2"),
        Load::LogStream => format!("yes {LOG_LINE} | head -c {bytes}"),
    };
    format!(
        "i=0; while [ ! -e {b} ]; do i=$((i+1)); if [ $i -gt 6000 ]; then exit 3; fi; sleep 0.05; \
         done; {print}; sleep {sleep_s}"
    )
}

/// Quote for `/bin/sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A growth experiment.
#[derive(Debug, Clone)]
pub struct GrowthConfig {
    /// The `stockade` binary whose daemons are measured (`stockade-bench --stockade-bin`).
    pub exe: PathBuf,
    /// Output directory: `raw/`, `summary.jsonl`, `summary.md`, SVGs.
    pub out: PathBuf,
    /// Engines to compare.
    pub variants: Vec<Variant>,
    /// Concurrency levels.
    pub concurrency: Vec<usize>,
    /// Bytes each command prints.
    pub bytes: Vec<u64>,
    /// Seconds each command sleeps after printing (the post-output window).
    pub sleep_s: u64,
    /// Where each run's temporary state (daemon home, spools) lives; removed after the run.
    pub work_dir: PathBuf,
    /// The dashed memory line on the RSS plots, MiB.
    pub memory_line_mib: f64,
    /// What every row of this invocation records about it (`ran` is filled in by [`growth`]).
    pub meta: crate::meta::RunMeta,
}

/// Run every (bytes, variant, N) combination, append each row to `summary.jsonl`, then rewrite
/// `summary.md` and the plots from every row in the directory.
pub fn growth(cfg: &GrowthConfig) -> Result<Vec<RunSummary>> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| BenchError::path("create", &cfg.out, e))?;
    let total = cfg.bytes.len() * cfg.variants.len() * cfg.concurrency.len();
    let pb = progress::bar(u64::try_from(total).unwrap_or(0), "growth");
    let mut meta = cfg.meta.clone();
    meta.ran = format!(
        "N = {}; {} each; variants {}; {} s sleep after printing",
        cfg.concurrency.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        cfg.bytes.iter().map(|&b| crate::meta::size_label(b)).collect::<Vec<_>>().join(", "),
        cfg.variants.iter().map(Variant::name).collect::<Vec<_>>().join(", "),
        cfg.sleep_s
    );
    let mut done = Vec::new();
    for &bytes in &cfg.bytes {
        for variant in &cfg.variants {
            for &n in &cfg.concurrency {
                pb.set_message(format!("{} N={n} × {}", variant.name(), human(bytes)));
                let row = match run_one(cfg, variant, n, bytes) {
                    Ok(r) => RunSummary { meta: Some(meta.clone()), ..r },
                    Err(e) => RunSummary {
                        variant: variant.name(),
                        n,
                        bytes_each: bytes,
                        exit: "harness error".into(),
                        note: e.to_string(),
                        meta: Some(meta.clone()),
                        ..RunSummary::default()
                    },
                };
                summary::append_jsonl(&cfg.out.join("summary.jsonl"), &row)?;
                progress::note(&pb, &one_line(&row));
                done.push(row);
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    let all = summary::read_jsonl(&cfg.out.join("summary.jsonl"))?;
    summary::write_markdown(&cfg.out.join("summary.md"), &all)?;
    crate::growth_plots::growth_plots(&cfg.out, &all, cfg.memory_line_mib)?;
    Ok(done)
}

/// One line about a run, for the terminal.
pub fn one_line(r: &RunSummary) -> String {
    if !r.note.is_empty() && r.rows == 0 {
        return format!("{} N={} × {}: {}", r.variant, r.n, human(r.bytes_each), r.note);
    }
    format!(
        "{} N={} × {}: peak RSS {:.1} MiB (baseline {:.1}), output {:.0} MiB, ΔRSS/MiB {:.4}{}{}",
        r.variant,
        r.n,
        human(r.bytes_each),
        r.peak_rss_mib,
        r.baseline_rss_mib,
        r.total_output_mib,
        r.delta_rss_per_output_mib,
        if r.oom { ", OOM" } else { "" },
        if r.note.is_empty() { String::new() } else { format!(" ({})", r.note) },
    )
}

fn run_one(cfg: &GrowthConfig, variant: &Variant, n: usize, bytes: u64) -> Result<RunSummary> {
    let run_id = format!("{}_n{n}_{}_{}", variant.name(), human(bytes), crate::proc::now_ms());
    let rel_raw = format!("raw/{}/{run_id}.jsonl", variant.name());
    let raw = cfg.out.join(&rel_raw);
    std::fs::create_dir_all(&cfg.work_dir)
        .map_err(|e| BenchError::path("create", &cfg.work_dir, e))?;
    // Dropped at the end of the run: spools and daemon state go with it.
    let tmp = tempfile::Builder::new()
        .prefix("stockade-bench-")
        .tempdir_in(&cfg.work_dir)
        .map_err(|e| BenchError::path("create a temporary directory in", &cfg.work_dir, e))?;
    let barrier = tmp.path().join("barrier");
    let command = barrier_command(&barrier, bytes, cfg.sleep_s, Load::Stdout);
    let expected = bytes * n as u64;
    // Generous: this load runs at hundreds of MiB/s; a stuck run must still end.
    let limit = Duration::from_secs(120 + expected / (4 * MIB));
    let mut s = match variant {
        Variant::Stockade(capture) => {
            run_daemon(cfg, tmp.path(), *capture, n, bytes, &command, &barrier, &raw, limit)?
        }
        Variant::Peer(spec) => {
            run_peer(spec, tmp.path(), n, bytes, cfg.sleep_s, &command, &barrier, &raw, limit)?
        }
    };
    s.variant = variant.name();
    s.run_id = run_id;
    s.n = n;
    s.bytes_each = bytes;
    s.raw = rel_raw;
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
fn run_daemon(
    cfg: &GrowthConfig,
    tmp: &Path,
    capture: Capture,
    n: usize,
    bytes: u64,
    command: &str,
    barrier: &Path,
    raw: &Path,
    limit: Duration,
) -> Result<RunSummary> {
    let mut daemon = Daemon::start(&cfg.exe, &tmp.join("home"))?;
    let mut client = daemon.client()?;
    for _ in 0..n {
        let params = RunParams {
            command: command.into(),
            background: true,
            yield_ms: Some(0),
            capture,
            max_bytes: Some(1024),
            disk_cap: Some(bytes + 64 * MIB),
            ..RunParams::default()
        };
        let res = client.call::<method::Run>(params)?;
        daemon.track_session(res.pid);
    }
    let sampler = Sampler::start(daemon.pid(), Source::Daemon(daemon.client()?), raw)?;
    std::thread::sleep(BASELINE);
    sampler.mark_release();
    release(barrier)?;
    let start = Instant::now();
    let mut note = String::new();
    loop {
        if !daemon.is_alive() {
            note = format!("daemon died: {}", daemon.stderr_tail());
            break;
        }
        let list = client.call::<method::List>(ListParams::default());
        match list {
            Ok(l) if l.sessions.iter().all(|s| s.state.is_terminal()) => break,
            Ok(_) => {}
            Err(e) => {
                note = format!("list failed: {e}");
                break;
            }
        }
        if start.elapsed() > limit {
            note = format!("not done after {}s", limit.as_secs());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(TAIL);
    let rows = sampler.finish();
    let died = !daemon.is_alive();
    drop(client);
    let status = daemon.shutdown();
    let mut s = summary::summarise(&rows, bytes * n as u64);
    s.exit = exit_text(status, died);
    s.oom = died
        && (status.is_some_and(|st| signal_of(st) == Some(libc::SIGKILL))
            || daemon.stderr_tail().contains("memory allocation"));
    s.note = note;
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
fn run_peer(
    spec: &PeerSpec,
    tmp: &Path,
    n: usize,
    bytes: u64,
    sleep_s: u64,
    command: &str,
    barrier: &Path,
    raw: &Path,
    limit: Duration,
) -> Result<RunSummary> {
    let progress_file = tmp.join("progress");
    let load = PeerLoad { n, command, bytes, barrier, sleep_s, progress: &progress_file };
    let mut peer = PeerProcess::start(spec, &load, tmp)?;
    peer.wait_ready(PEER_READY_LIMIT)?;
    let sampler = Sampler::start(peer.pid(), Source::Peer(progress_file.clone()), raw)?;
    std::thread::sleep(BASELINE);
    sampler.mark_release();
    release(barrier)?;
    let start = Instant::now();
    let mut note = String::new();
    while peer.is_alive() {
        if start.elapsed() > limit {
            note = format!("not done after {}s", limit.as_secs());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let rows = sampler.finish();
    peer.kill();
    let status = peer.exit_status();
    let clean = status.is_some_and(|st| st.success());
    let mut s = summary::summarise(&rows, bytes * n as u64);
    s.oom = peer.said_oom();
    s.exit = match status {
        Some(st) if st.success() => "0".into(),
        Some(st) => exit_text(Some(st), true),
        None => "killed by the bench".into(),
    };
    if !clean && note.is_empty() {
        note = peer.stderr_tail();
        if s.oom {
            note = "heap out of memory".into();
        }
    }
    s.note = note;
    Ok(s)
}

fn release(barrier: &Path) -> Result<()> {
    std::fs::write(barrier, b"go\n").map_err(|e| BenchError::path("create the barrier", barrier, e))
}

fn signal_of(st: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    st.signal()
}

fn exit_text(status: Option<std::process::ExitStatus>, died: bool) -> String {
    let what = match status {
        None => "unknown".to_owned(),
        Some(st) => match (st.code(), signal_of(st)) {
            (Some(c), _) => c.to_string(),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => "unknown".to_owned(),
        },
    };
    if died { format!("died: {what}") } else { what }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_command_waits_then_prints_exactly() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let b = dir.path().join("go");
        std::fs::write(&b, "").unwrap_or_else(|e| panic!("{e}"));
        let cmd = barrier_command(&b, 12345, 0, Load::LogStream);
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &cmd])
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.stdout.len(), 12345);
        assert!(out.stdout.starts_with(LOG_LINE.as_bytes()));
    }
}
