//! Ten hard cases as a 0/1 table, each with the reason for a 0, run once per Stockade capture
//! variant (`stockade-pipe`, `stockade-file`: every run of a case uses that capture mode).
//!
//! Every case runs in a fresh daemon with the sampler on; a case passes only if its bytes are
//! exact (or its dropped range exact, or its kill verified) *and* the daemon's peak RSS stayed
//! within `sessions × (hot-tail cap + 256 KiB) + slack` of its idle RSS, so memory never follows
//! the bytes printed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stockade_proto::{Capture, DEFAULT_RETAINED_CAP};

use crate::daemon::Daemon;
use crate::progress;
use crate::runner::Variant;
use crate::sampler::{Sampler, Source};
use crate::summary;
use crate::{BenchError, MIB, Result, mib};

/// Per-session allowance over the hot tail (the README.md "Results" target).
const SESSION_OVERHEAD: u64 = 256 * 1024;
/// Fixed allowance for the daemon's own working memory under load (runtime, buffers, RPC).
const SLACK: u64 = 16 * MIB;

pub use crate::edge_cases::Sizes;
use crate::edge_cases::{CASES, Ctx};

/// One case's outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EdgeResult {
    /// Case id (`B4_stdout_4x20MB`, …).
    pub case: String,
    /// The variant it ran on (`stockade-pipe`, `stockade-file`).
    #[serde(default)]
    pub variant: String,
    /// What it does.
    pub what: String,
    /// 1 = pass, 0 = fail.
    pub pass: u8,
    /// Why it failed (empty on pass), or what was checked.
    pub reason: String,
    /// Daemon idle RSS, MiB.
    pub baseline_rss_mib: f64,
    /// Daemon peak RSS, MiB.
    pub peak_rss_mib: f64,
    /// The memory bound that applied (ΔRSS), MiB.
    pub bound_mib: f64,
    /// Output printed, MiB.
    pub output_mib: f64,
    /// Seconds.
    pub seconds: f64,
    /// Raw samples, relative to the output directory.
    pub raw: String,
}

/// The edge-case run.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// The `stockade` binary.
    pub exe: PathBuf,
    /// Output directory.
    pub out: PathBuf,
    /// Sizes.
    pub sizes: Sizes,
    /// Temporary state (daemon homes and spools), removed after each case.
    pub work_dir: PathBuf,
    /// What `edges.md` records about this invocation (`ran` is filled in from the sizes).
    pub meta: crate::meta::RunMeta,
    /// The capture modes to run every case with, in table order.
    pub variants: Vec<Capture>,
}

/// The Node baseline is not a row of this table: why, in `edges.md`.
pub const NODE_NOTE: &str = "The Node baseline (`bench growth --node`) is not in this table: its peer runs only the growth load (N commands printing in parallel), not these cases.";

/// Run all ten cases; write `edges.jsonl` and `edges.md` in `out`.
pub fn edges(cfg: &EdgeConfig) -> Result<Vec<EdgeResult>> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| BenchError::path("create", &cfg.out, e))?;
    let pb = progress::bar((CASES.len() * cfg.variants.len()) as u64, "edges");
    let mut results = Vec::new();
    for &capture in &cfg.variants {
        let variant = Variant::Stockade(capture).name();
        for (case, what, f) in CASES {
            let (case, what) = (label(case, &cfg.sizes), label(what, &cfg.sizes));
            pb.set_message(format!("{variant} {case}"));
            let r = run_case(cfg, capture, &case, &what, f);
            progress::note(
                &pb,
                &format!(
                    "{variant} {case}: {} {}",
                    r.pass,
                    if r.pass == 1 { "" } else { r.reason.as_str() }
                ),
            );
            results.push(r);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let mut jsonl = String::new();
    for r in &results {
        jsonl.push_str(&serde_json::to_string(r)?);
        jsonl.push('\n');
    }
    let p = cfg.out.join("edges.jsonl");
    std::fs::write(&p, jsonl).map_err(|e| BenchError::path("write", &p, e))?;
    let p = cfg.out.join("edges.md");
    let mut meta = cfg.meta.clone();
    let z = cfg.sizes;
    let variants: Vec<String> = cfg.variants.iter().map(|&c| Variant::Stockade(c).name()).collect();
    meta.ran = format!(
        "{} cases on {}: 4 × {} per command, {} single commands, a {} slow stream, {} never read, {} read after spooling, a {} disk cap against {}",
        CASES.len(),
        variants.join(" and "),
        crate::meta::size_label(z.four_each),
        crate::meta::size_label(z.thirty),
        seconds(z.slow),
        crate::meta::size_label(z.no_poll),
        crate::meta::size_label(z.spooled),
        crate::meta::size_label(z.cap),
        crate::meta::size_label(z.cap_print),
    );
    let text = format!(
        "# stockade bench edges\n\n{}\n{}\n{NODE_NOTE}\n",
        meta.markdown(),
        markdown(&results)
    );
    std::fs::write(&p, text).map_err(|e| BenchError::path("write", &p, e))?;
    Ok(results)
}

/// A case's id or description with the sizes that ran in place of its placeholders.
fn label(template: &str, z: &Sizes) -> String {
    let id = |b: u64| format!("{}MB", b / MIB);
    template
        .replace("{four_id}", &id(z.four_each))
        .replace("{thirty_id}", &id(z.thirty))
        .replace("{four}", &crate::meta::size_label(z.four_each))
        .replace("{thirty}", &crate::meta::size_label(z.thirty))
        .replace("{slow}", &seconds(z.slow))
        .replace("{no_poll}", &crate::meta::size_label(z.no_poll))
}

/// `120s`, `5s`.
fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// The 0/1 table.
pub fn markdown(results: &[EdgeResult]) -> String {
    let mut s = String::from(
        "| case | variant | what | pass | reason / checked | idle RSS MiB | peak RSS MiB | ΔRSS bound MiB | output MiB | s |\n| --- | --- | --- | :---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in results {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
            r.case,
            r.variant,
            r.what,
            r.pass,
            r.reason.replace('|', "\\|"),
            r.baseline_rss_mib,
            r.peak_rss_mib,
            r.bound_mib,
            r.output_mib,
            r.seconds
        ));
    }
    let passed = results.iter().filter(|r| r.pass == 1).count();
    s.push_str(&format!("\n{passed}/{} passed.\n", results.len()));
    s
}

fn run_case(
    cfg: &EdgeConfig,
    capture: Capture,
    case: &str,
    what: &str,
    f: fn(&mut Ctx) -> Result<()>,
) -> EdgeResult {
    let start = Instant::now();
    let variant = Variant::Stockade(capture).name();
    let raw_rel = format!("raw/edges/{variant}/{case}.jsonl");
    let mut r = EdgeResult {
        case: case.into(),
        variant,
        what: what.into(),
        raw: raw_rel.clone(),
        ..EdgeResult::default()
    };
    let tmp = match std::fs::create_dir_all(&cfg.work_dir)
        .and_then(|()| tempfile::Builder::new().prefix("stockade-edge-").tempdir_in(&cfg.work_dir))
    {
        Ok(t) => t,
        Err(e) => {
            r.reason = format!("cannot create a temporary directory: {e}");
            return r;
        }
    };
    let outcome = (|| -> Result<(Result<()>, Ctx, Sampler)> {
        let daemon = Daemon::start(&cfg.exe, &tmp.path().join("home"))?;
        let client = daemon.client()?;
        let sampler = Sampler::start(
            daemon.pid(),
            Source::Daemon(daemon.client()?),
            &cfg.out.join(&raw_rel),
        )?;
        std::thread::sleep(Duration::from_millis(300));
        sampler.mark_release();
        let mut ctx = Ctx {
            client,
            daemon,
            tmp: tmp.path().to_path_buf(),
            sizes: cfg.sizes,
            capture,
            sessions: 1,
            output: 0,
            checked: Vec::new(),
        };
        let res = f(&mut ctx);
        std::thread::sleep(Duration::from_millis(300));
        Ok((res, ctx, sampler))
    })();
    match outcome {
        Err(e) => r.reason = format!("harness: {e}"),
        Ok((res, mut ctx, sampler)) => {
            let rows = sampler.finish();
            let died = !ctx.daemon.is_alive();
            ctx.daemon.shutdown();
            let s = summary::summarise(&rows, ctx.output);
            r.baseline_rss_mib = s.baseline_rss_mib;
            r.peak_rss_mib = s.peak_rss_mib;
            r.output_mib = mib(ctx.output);
            let bound = ctx.sessions * (DEFAULT_RETAINED_CAP as u64 + SESSION_OVERHEAD) + SLACK;
            r.bound_mib = mib(bound);
            let delta = s.peak_rss_mib - s.baseline_rss_mib;
            let mut reasons = Vec::new();
            if let Err(e) = res {
                reasons.push(e.to_string());
            }
            if died {
                reasons.push(format!("the daemon died: {}", ctx.daemon.stderr_tail()));
            }
            if delta > mib(bound) {
                reasons.push(format!(
                    "memory not bounded: ΔRSS {delta:.1} MiB > {:.1} MiB",
                    mib(bound)
                ));
            }
            if reasons.is_empty() {
                r.pass = 1;
                ctx.checked.push(format!("ΔRSS {delta:.1} ≤ {:.1} MiB", mib(bound)));
                r.reason = ctx.checked.join("; ");
            } else {
                r.reason = reasons.join("; ");
            }
        }
    }
    r.seconds = (start.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    r
}

/// Where the edge results of a directory are.
pub fn results_path(out: &Path) -> PathBuf {
    out.join("edges.jsonl")
}

#[cfg(test)]
#[path = "edges_tests.rs"]
mod tests;
