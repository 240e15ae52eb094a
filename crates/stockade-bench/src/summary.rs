//! From a run's samples to one summary row (the columns of `docs/bench/summary.md`), and the
//! tables: `summary.jsonl` (one row a run, appended) and `summary.md` (rendered from every row).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::sampler::Sample;
use crate::{BenchError, MIB, Result, mib};

/// One run, summarised.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// `stockade-pipe`, `stockade-file`, or a peer's name.
    pub variant: String,
    /// Unique id of the run (also the raw file's name).
    pub run_id: String,
    /// Concurrent commands.
    pub n: usize,
    /// Bytes each command printed.
    pub bytes_each: u64,
    /// The raw samples, relative to the output directory.
    pub raw: String,
    /// Sample rows.
    pub rows: usize,
    /// Seconds from the first to the last sample.
    pub duration_s: f64,
    /// Seconds from the release until all output was counted (when known).
    pub output_s: Option<f64>,
    /// Median RSS before the release, MiB.
    pub baseline_rss_mib: f64,
    /// Highest VmHWM seen, MiB.
    pub peak_rss_mib: f64,
    /// RSS at the last sample while alive, MiB.
    pub final_rss_mib: f64,
    /// Allocator bytes before the release, MiB (Stockade only).
    pub baseline_alloc_mib: Option<f64>,
    /// Highest allocator bytes, MiB.
    pub peak_alloc_mib: Option<f64>,
    /// Allocator bytes at the end, MiB.
    pub final_alloc_mib: Option<f64>,
    /// Highest bytes held in hot tails, MiB.
    pub peak_hot_tail_mib: Option<f64>,
    /// Bytes dropped at a disk cap, MiB.
    pub dropped_mib: Option<f64>,
    /// Output printed, MiB (counted by the engine; the expected total where it cannot count).
    pub total_output_mib: f64,
    /// Whether the engine counted the output itself.
    pub output_counted: bool,
    /// Peak minus baseline RSS, MiB.
    pub delta_rss_mib: f64,
    /// ΔRSS per MiB printed.
    pub delta_rss_per_output_mib: f64,
    /// The engine ran out of memory.
    pub oom: bool,
    /// How the engine ended: `0` after a clean shutdown, `died: …` otherwise.
    pub exit: String,
    /// Anything worth knowing (why a run did not finish, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// The invocation that made this row: version, commit, date, machine, command line, what
    /// ran (absent in rows written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<crate::meta::RunMeta>,
}

/// Summarise samples. `expected_output` is N × bytes.
pub fn summarise(rows: &[Sample], expected_output: u64) -> RunSummary {
    let alive: Vec<&Sample> = rows.iter().filter(|s| s.alive).collect();
    let before: Vec<&Sample> = alive.iter().copied().filter(|s| s.t_ms < 0).collect();
    let base_rows =
        if before.is_empty() { alive.iter().take(1).copied().collect() } else { before };
    let baseline_rss = median(base_rows.iter().map(|s| s.rss_bytes));
    let baseline_alloc = median_opt(base_rows.iter().map(|s| s.allocated_bytes));
    let peak_rss = alive.iter().map(|s| s.peak_rss_bytes.max(s.rss_bytes)).max().unwrap_or(0);
    let final_rss = alive.last().map_or(0, |s| s.rss_bytes);
    let peak_alloc = alive.iter().filter_map(|s| s.allocated_bytes).max();
    let final_alloc = alive.iter().rev().find_map(|s| s.allocated_bytes);
    let peak_hot = alive.iter().filter_map(|s| s.hot_tail_bytes).max();
    let dropped = alive.iter().filter_map(|s| s.dropped_bytes).max();
    let counted = rows.iter().filter_map(|s| s.output_bytes).max();
    let output = counted.unwrap_or(expected_output);
    let output_s =
        counted.filter(|&c| c >= expected_output && expected_output > 0).and_then(|_| {
            rows.iter()
                .find(|s| s.output_bytes.is_some_and(|b| b >= expected_output))
                .map(|s| s.t_ms as f64 / 1000.0)
        });
    let duration_ms = match (rows.first(), rows.last()) {
        (Some(a), Some(b)) => b.unix_ms.saturating_sub(a.unix_ms),
        _ => 0,
    };
    let delta = mib(peak_rss) - mib(baseline_rss);
    RunSummary {
        rows: rows.len(),
        duration_s: duration_ms as f64 / 1000.0,
        output_s,
        baseline_rss_mib: round3(mib(baseline_rss)),
        peak_rss_mib: round3(mib(peak_rss)),
        final_rss_mib: round3(mib(final_rss)),
        baseline_alloc_mib: baseline_alloc.map(|b| round3(mib(b))),
        peak_alloc_mib: peak_alloc.map(|b| round3(mib(b))),
        final_alloc_mib: final_alloc.map(|b| round3(mib(b))),
        peak_hot_tail_mib: peak_hot.map(|b| round3(mib(b))),
        dropped_mib: dropped.map(|b| round3(mib(b))),
        total_output_mib: round3(mib(output)),
        output_counted: counted.is_some(),
        delta_rss_mib: round3(delta),
        delta_rss_per_output_mib: if output > 0 { round4(delta / mib(output)) } else { 0.0 },
        ..RunSummary::default()
    }
}

fn median(values: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = values.collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn median_opt(values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    let v: Vec<u64> = values.flatten().collect();
    if v.is_empty() { None } else { Some(median(v.into_iter())) }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round4(x: f64) -> f64 {
    (x * 10000.0).round() / 10000.0
}

/// Append one row to `summary.jsonl`.
pub fn append_jsonl(path: &Path, row: &RunSummary) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| BenchError::path("open", path, e))?;
    let line = serde_json::to_string(row)?;
    writeln!(f, "{line}").map_err(|e| BenchError::path("write", path, e))
}

/// Read every row of a `summary.jsonl`.
pub fn read_jsonl(path: &Path) -> Result<Vec<RunSummary>> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::path("read", path, e))?;
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// A least-squares slope of y over x (None with fewer than two distinct x).
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= f64::EPSILON {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    Some(sxy / sxx)
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |x| format!("{x:.1}"))
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.2} MiB", mib(bytes))
    }
}

/// The slopes the performance targets (README.md, "Results") are about, derived from the rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slope {
    /// The variant.
    pub variant: String,
    /// What was varied: `sessions (N, {bytes} each)` or `output (N={n})`.
    pub over: String,
    /// MiB of peak RSS per unit of what was varied.
    pub mib_per_unit: f64,
    /// Points used.
    pub points: usize,
}

/// Per variant: peak RSS per extra session (fixed bytes, N varies; runs without OOM) and peak
/// RSS per MiB printed (fixed N, bytes vary).
pub fn slopes(rows: &[RunSummary]) -> Vec<Slope> {
    let mut out = Vec::new();
    let mut variants: Vec<&str> = rows.iter().map(|r| r.variant.as_str()).collect();
    variants.dedup();
    variants.sort_unstable();
    variants.dedup();
    for v in variants {
        let mine: Vec<&RunSummary> = rows.iter().filter(|r| r.variant == v && !r.oom).collect();
        let mut sizes: Vec<u64> = mine.iter().map(|r| r.bytes_each).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for &b in &sizes {
            let pts: Vec<(f64, f64)> = mine
                .iter()
                .filter(|r| r.bytes_each == b)
                .map(|r| (r.n as f64, r.peak_rss_mib))
                .collect();
            if let Some(s) = distinct_slope(&pts) {
                out.push(Slope {
                    variant: v.into(),
                    over: format!("sessions (N, {} each)", size(b)),
                    mib_per_unit: s,
                    points: pts.len(),
                });
            }
        }
        let mut ns: Vec<usize> = mine.iter().map(|r| r.n).collect();
        ns.sort_unstable();
        ns.dedup();
        for &n in &ns {
            let pts: Vec<(f64, f64)> = mine
                .iter()
                .filter(|r| r.n == n)
                .map(|r| (r.total_output_mib, r.peak_rss_mib))
                .collect();
            let distinct_bytes = {
                let mut b: Vec<u64> =
                    mine.iter().filter(|r| r.n == n).map(|r| r.bytes_each).collect();
                b.sort_unstable();
                b.dedup();
                b.len()
            };
            if distinct_bytes < 2 {
                continue;
            }
            if let Some(s) = distinct_slope(&pts) {
                out.push(Slope {
                    variant: v.into(),
                    over: format!("output MiB (N={n})"),
                    mib_per_unit: s,
                    points: pts.len(),
                });
            }
        }
    }
    out
}

fn distinct_slope(pts: &[(f64, f64)]) -> Option<f64> {
    let mut xs: Vec<i64> = pts.iter().map(|p| (p.0 * 1000.0) as i64).collect();
    xs.sort_unstable();
    xs.dedup();
    if xs.len() < 2 { None } else { slope(pts) }
}

/// Render the growth table (and the slopes) as Markdown.
pub fn markdown(rows: &[RunSummary]) -> String {
    let mut s = String::new();
    s.push_str("| variant | N | bytes each | rows | duration s | output s | baseline RSS MiB | peak RSS MiB | final RSS MiB | baseline alloc MiB | peak alloc MiB | final alloc MiB | peak hot tail MiB | total output MiB | ΔRSS MiB | ΔRSS / output MiB | OOM | exit |\n");
    s.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {:.0}{} | {:.1} | {:.4} | {} | {} |\n",
            r.variant,
            r.n,
            size(r.bytes_each),
            r.rows,
            r.duration_s,
            r.output_s.map_or_else(|| "—".into(), |x| format!("{x:.1}")),
            r.baseline_rss_mib,
            r.peak_rss_mib,
            r.final_rss_mib,
            opt(r.baseline_alloc_mib),
            opt(r.peak_alloc_mib),
            opt(r.final_alloc_mib),
            opt(r.peak_hot_tail_mib),
            r.total_output_mib,
            if r.output_counted { "" } else { " (expected)" },
            r.delta_rss_mib,
            r.delta_rss_per_output_mib,
            if r.oom { "**yes**" } else { "no" },
            r.exit,
        ));
    }
    let sl = slopes(rows);
    if !sl.is_empty() {
        s.push_str("\nSlopes (least squares over runs without OOM; peak RSS):\n\n");
        s.push_str(
            "| variant | over | MiB peak RSS per unit | points |\n| --- | --- | ---: | ---: |\n",
        );
        for x in sl {
            s.push_str(&format!(
                "| {} | {} | {:.4} | {} |\n",
                x.variant, x.over, x.mib_per_unit, x.points
            ));
        }
    }
    s
}

/// Write `summary.md` from every row of `summary.jsonl`.
pub fn write_markdown(path: &Path, rows: &[RunSummary]) -> Result<()> {
    let mut text = String::from("# stockade bench growth\n\n");
    text.push_str(
        "Raw samples (JSONL, one row per 100 ms) are in `raw/<variant>/<run_id>.jsonl`; ",
    );
    text.push_str(
        "`summary.jsonl` holds one row per run. RSS is the engine process's VmRSS/VmHWM; ",
    );
    text.push_str("alloc is the daemon's allocator (`stats.allocated_bytes`).\n\n");
    // Every invocation whose rows are in the table, in order: what it measured and where.
    let mut seen: Vec<&crate::meta::RunMeta> = Vec::new();
    for m in rows.iter().filter_map(|r| r.meta.as_ref()) {
        if !seen.iter().any(|s| s.date == m.date && s.command_line == m.command_line) {
            seen.push(m);
        }
    }
    let unrecorded = rows.iter().filter(|r| r.meta.is_none()).count();
    if !seen.is_empty() || unrecorded > 0 {
        text.push_str("## Runs in this table\n\n");
        for (i, m) in seen.iter().enumerate() {
            text.push_str(&format!("Run {}:\n\n{}\n", i + 1, m.markdown()));
        }
        if unrecorded > 0 {
            text.push_str(&format!(
                "{unrecorded} row(s) come from a run that recorded no version, machine or command line.\n\n"
            ));
        }
        text.push_str("## Results\n\n");
    }
    text.push_str(&markdown(rows));
    std::fs::write(path, text).map_err(|e| BenchError::path("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64, rss_mib: u64, out: Option<u64>) -> Sample {
        Sample {
            unix_ms: u64::try_from(t_ms + 10_000).unwrap_or(0),
            t_ms,
            alive: true,
            rss_bytes: rss_mib * MIB,
            peak_rss_bytes: rss_mib * MIB,
            output_bytes: out,
            allocated_bytes: Some(MIB),
            ..Sample::default()
        }
    }

    #[test]
    fn summary_takes_baseline_before_release_and_peak_after() {
        let rows = vec![
            sample(-200, 10, Some(0)),
            sample(-100, 10, Some(0)),
            sample(0, 12, Some(0)),
            sample(100, 30, Some(40 * MIB)),
            sample(200, 20, Some(80 * MIB)),
        ];
        let s = summarise(&rows, 80 * MIB);
        assert_eq!(s.baseline_rss_mib, 10.0);
        assert_eq!(s.peak_rss_mib, 30.0);
        assert_eq!(s.final_rss_mib, 20.0);
        assert_eq!(s.total_output_mib, 80.0);
        assert_eq!(s.delta_rss_per_output_mib, 0.25);
        assert_eq!(s.output_s, Some(0.2));
        assert!(s.output_counted);
    }

    #[test]
    fn slopes_per_session_and_per_output() {
        let row = |n: usize, b: u64, peak: f64| RunSummary {
            variant: "v".into(),
            n,
            bytes_each: b,
            peak_rss_mib: peak,
            total_output_mib: mib(b) * n as f64,
            ..RunSummary::default()
        };
        let rows = vec![row(2, 20 * MIB, 12.0), row(4, 20 * MIB, 14.0), row(4, 256 * MIB, 14.0)];
        let sl = slopes(&rows);
        assert!(
            sl.iter()
                .any(|s| s.over.starts_with("sessions") && (s.mib_per_unit - 1.0).abs() < 1e-9)
        );
        assert!(sl.iter().any(|s| s.over == "output MiB (N=4)" && s.mib_per_unit.abs() < 1e-9));
        assert!(markdown(&rows).contains("| v | 4 | 256 MiB |"));
    }
}
