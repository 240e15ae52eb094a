//! The growth bench's charts (`bench growth`): peak memory and deaths per variant against the
//! targets, and memory and time over a run, drawn with the report style of `plots`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::plots::{Chart, HLine, Mark, Series, draw, is_stockade, variant_color};
use crate::sampler::{Sample, read_samples};
use crate::summary::RunSummary;
use crate::{Result, human, mib};

/// The growth plots, one set per "bytes each" size, from every row in the directory:
/// `time-rss-<B>.svg`, `time-rss-stockade-<B>.svg`, `time-output-<B>.svg`,
/// `concurrency-peak-rss.svg`, `concurrency-peak-rss-stockade.svg`, `output-delta-rss.svg`.
pub fn growth_plots(out: &Path, rows: &[RunSummary], memory_line_mib: f64) -> Result<Vec<PathBuf>> {
    let rows: Vec<&RunSummary> = latest(rows);
    let mut peers: Vec<String> =
        rows.iter().map(|r| r.variant.clone()).filter(|v| !is_stockade(v)).collect();
    peers.sort();
    peers.dedup();
    let mem_line = HLine {
        y: memory_line_mib,
        label: format!("{memory_line_mib:.0} MiB memory line (Node --max-old-space-size)"),
    };
    let growth = Growth { out, rows, peers, mem_line };
    let mut written = Vec::new();
    let mut sizes: Vec<u64> = growth.rows.iter().map(|r| r.bytes_each).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for b in sizes {
        written.extend(growth.time_plots(b)?);
    }
    for stockade_only in [false, true] {
        written.extend(growth.concurrency_plot(stockade_only)?);
    }
    written.extend(growth.delta_rss_plot()?);
    Ok(written)
}

/// What every growth plot of one output directory shares.
struct Growth<'a> {
    /// The output directory (the raw samples are read from it, the SVGs written into it).
    out: &'a Path,
    /// The newest row of each (variant, N, bytes).
    rows: Vec<&'a RunSummary>,
    /// The variants that are not Stockade, sorted: their colours follow this order.
    peers: Vec<String>,
    /// The dashed memory line of the charts that show peers.
    mem_line: HLine,
}

/// Stockade's goal for pipe capture, drawn on the charts of Stockade alone.
fn pipe_target() -> HLine {
    HLine { y: 40.0, label: "target: pipe ≤ 40 MiB at 32×20 MiB".into() }
}

/// Stockade's goal for file capture.
fn file_target() -> HLine {
    HLine { y: 8.0, label: "file ≤ 8 MiB".into() }
}

impl Growth<'_> {
    /// Draw `chart` as `name` in the output directory.
    fn write(&self, chart: &Chart, name: &str) -> Result<PathBuf> {
        let path = self.out.join(name);
        draw(chart, &path)?;
        Ok(path)
    }

    /// RSS over time (all engines, and Stockade alone when there are peers) and output over
    /// time, for the runs of `bytes` each.
    fn time_plots(&self, bytes: u64) -> Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        let raws: Vec<(&RunSummary, Vec<Sample>)> = self
            .rows
            .iter()
            .copied()
            .filter(|r| r.bytes_each == bytes)
            .filter_map(|r| read_samples(&self.out.join(&r.raw)).ok().map(|s| (r, s)))
            .collect();
        let tag = human(bytes);
        for (stockade_only, name) in
            [(false, format!("time-rss-{tag}.svg")), (true, format!("time-rss-stockade-{tag}.svg"))]
        {
            let picked: Vec<&(&RunSummary, Vec<Sample>)> =
                raws.iter().filter(|(r, _)| !stockade_only || is_stockade(&r.variant)).collect();
            if picked.is_empty() || (stockade_only && self.peers.is_empty()) {
                continue;
            }
            let mut chart = time_chart(&picked, &self.peers, |s| Some(mib(s.rss_bytes)));
            chart.title = format!("Engine RSS over time, N commands × {tag}");
            chart.subtitle = "VmRSS of the engine process every 100 ms; t = 0 when the barrier is released; one line per N (darker = more)".into();
            chart.y_desc = "RSS (MiB)".into();
            chart.hlines = match (stockade_only, self.peers.is_empty()) {
                (true, _) => vec![pipe_target()],
                (false, true) => vec![],
                (false, false) => vec![self.mem_line.clone()],
            };
            written.push(self.write(&chart, &name)?);
        }
        if !raws.is_empty() {
            let picked: Vec<&(&RunSummary, Vec<Sample>)> = raws.iter().collect();
            let mut chart = time_chart(&picked, &self.peers, |s| s.output_bytes.map(mib));
            chart.marks.clear();
            chart.title = format!("Output printed over time, N commands × {tag}");
            chart.subtitle = "bytes counted by the engine (Stockade `stats`, a peer's progress file); nobody reads them".into();
            chart.y_desc = "output (MiB)".into();
            written.push(self.write(&chart, &format!("time-output-{tag}.svg"))?);
        }
        Ok(written)
    }

    /// Concurrency → peak RSS, per (variant, bytes) with at least two N; of every engine, or
    /// of Stockade alone (drawn only when there are peers to leave out).
    fn concurrency_plot(&self, stockade_only: bool) -> Result<Option<PathBuf>> {
        if stockade_only && self.peers.is_empty() {
            return Ok(None);
        }
        let mut chart = Chart {
            title: "Peak RSS by concurrency".into(),
            subtitle: "peak VmHWM of the engine per run; ✕ = the engine died (OOM)".into(),
            x_desc: "concurrent commands (N)".into(),
            y_desc: "peak RSS (MiB)".into(),
            x_log2: true,
            ..Chart::default()
        };
        let mut keys: BTreeMap<(String, u64), Vec<&RunSummary>> = BTreeMap::new();
        for r in
            self.rows.iter().filter(|r| r.rows > 0 && (!stockade_only || is_stockade(&r.variant)))
        {
            keys.entry((r.variant.clone(), r.bytes_each)).or_default().push(r);
        }
        for ((v, b), mut rs) in keys {
            if rs.len() < 2 {
                continue;
            }
            rs.sort_by_key(|r| r.n);
            let color = variant_color(&v, &self.peers);
            chart.series.push(Series {
                label: format!("{v} × {}", human(b)),
                color,
                alpha: 1.0,
                points: rs.iter().map(|r| ((r.n as f64).log2(), r.peak_rss_mib)).collect(),
                markers: true,
            });
            chart.marks.extend(peak_and_deaths(&rs, color));
        }
        if chart.series.is_empty() {
            return Ok(None);
        }
        chart.hlines = match (stockade_only, self.peers.is_empty()) {
            (true, _) => vec![pipe_target(), file_target()],
            (false, true) => vec![pipe_target()],
            (false, false) => vec![self.mem_line.clone()],
        };
        let name = if stockade_only {
            "concurrency-peak-rss-stockade.svg"
        } else {
            "concurrency-peak-rss.svg"
        };
        Ok(Some(self.write(&chart, name)?))
    }

    /// Output → ΔRSS: a growth series per (variant, bytes) and a sweep series per (variant, N).
    fn delta_rss_plot(&self) -> Result<Option<PathBuf>> {
        let mut chart = Chart {
            title: "Memory growth per MiB printed".into(),
            subtitle: "peak RSS minus idle RSS against total output; a flat line is the invariant, a diagonal is O(output)".into(),
            x_desc: "total output (MiB)".into(),
            y_desc: "ΔRSS (MiB)".into(),
            ..Chart::default()
        };
        let mut by_bytes: BTreeMap<(String, u64), Vec<&RunSummary>> = BTreeMap::new();
        let mut by_n: BTreeMap<(String, usize), Vec<&RunSummary>> = BTreeMap::new();
        for r in self.rows.iter().filter(|r| r.rows > 0) {
            by_bytes.entry((r.variant.clone(), r.bytes_each)).or_default().push(r);
            by_n.entry((r.variant.clone(), r.n)).or_default().push(r);
        }
        for ((v, b), mut rs) in by_bytes {
            if rs.len() < 2 {
                continue;
            }
            rs.sort_by(|a, b| a.total_output_mib.total_cmp(&b.total_output_mib));
            let color = variant_color(&v, &self.peers);
            chart.series.push(Series {
                label: format!("{v}, N varies × {}", human(b)),
                color,
                alpha: 1.0,
                points: rs.iter().map(|r| (r.total_output_mib, r.delta_rss_mib)).collect(),
                markers: true,
            });
            for r in rs.iter().filter(|r| r.oom) {
                let at = (r.total_output_mib, r.delta_rss_mib);
                chart.marks.push(Mark { at, text: "OOM".into(), color, cross: true });
            }
        }
        for ((v, n), mut rs) in by_n {
            let mut sizes: Vec<u64> = rs.iter().map(|r| r.bytes_each).collect();
            sizes.sort_unstable();
            sizes.dedup();
            if sizes.len() < 2 {
                continue;
            }
            rs.sort_by(|a, b| a.total_output_mib.total_cmp(&b.total_output_mib));
            chart.series.push(Series {
                label: format!("{v}, N={n}, bytes vary"),
                color: variant_color(&v, &self.peers),
                alpha: 0.55,
                points: rs.iter().map(|r| (r.total_output_mib, r.delta_rss_mib)).collect(),
                markers: true,
            });
        }
        if chart.series.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.write(&chart, "output-delta-rss.svg")?))
    }
}

/// The marks of one concurrency series (`rs`, sorted by N): a cross where the engine died, and
/// the highest peak of the runs that did not run out of memory.
fn peak_and_deaths(rs: &[&RunSummary], color: RGBColor) -> Vec<Mark> {
    let mut marks: Vec<Mark> = rs
        .iter()
        .filter(|r| r.oom || r.exit.starts_with("died"))
        .map(|r| Mark {
            at: ((r.n as f64).log2(), r.peak_rss_mib),
            text: if r.oom { "OOM".into() } else { format!("exit {}", r.exit) },
            color,
            cross: true,
        })
        .collect();
    if let Some(top) =
        rs.iter().filter(|r| !r.oom).max_by(|a, b| a.peak_rss_mib.total_cmp(&b.peak_rss_mib))
    {
        marks.push(Mark {
            at: ((top.n as f64).log2(), top.peak_rss_mib),
            text: format!("peak {:.0} MiB", top.peak_rss_mib),
            color,
            cross: false,
        });
    }
    marks
}

/// Keep the newest row of each (variant, N, bytes): a re-run replaces an older one in the plots.
fn latest(rows: &[RunSummary]) -> Vec<&RunSummary> {
    let mut map: BTreeMap<(String, usize, u64), &RunSummary> = BTreeMap::new();
    for r in rows {
        map.insert((r.variant.clone(), r.n, r.bytes_each), r);
    }
    map.into_values().collect()
}

pub(crate) fn time_chart(
    runs: &[&(&RunSummary, Vec<Sample>)],
    peers: &[String],
    value: impl Fn(&Sample) -> Option<f64>,
) -> Chart {
    let mut chart = Chart { x_desc: "time since release (s)".into(), ..Chart::default() };
    let mut ns: Vec<usize> = runs.iter().map(|(r, _)| r.n).collect();
    ns.sort_unstable();
    ns.dedup();
    // The N each variant really ran (a variant skipped or failed at some N does not list it).
    let ran = |variant: &str| {
        let mut v: Vec<usize> = runs
            .iter()
            .filter(|(r, _)| r.variant == variant && r.rows > 0)
            .map(|(r, _)| r.n)
            .collect();
        v.sort_unstable();
        v.dedup();
        v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    let mut labelled: Vec<String> = Vec::new();
    let mut peak_per_variant: BTreeMap<String, (f64, f64, usize)> = BTreeMap::new();
    for (r, samples) in runs {
        let color = variant_color(&r.variant, peers);
        let rank = ns.iter().position(|&n| n == r.n).unwrap_or(0);
        let alpha = 0.35 + 0.65 * (rank as f64 + 1.0) / ns.len() as f64;
        let points: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.alive)
            .filter_map(|s| value(s).map(|v| (s.t_ms as f64 / 1000.0, v)))
            .collect();
        let label = if labelled.contains(&r.variant) {
            String::new()
        } else {
            labelled.push(r.variant.clone());
            format!("{} (N = {})", r.variant, ran(&r.variant))
        };
        if let Some(&(x, y)) = points.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
            let e = peak_per_variant.entry(r.variant.clone()).or_insert((x, y, r.n));
            if y > e.1 {
                *e = (x, y, r.n);
            }
        }
        if (r.oom || r.exit.starts_with("died"))
            && let Some(&last) = points.last()
        {
            chart.marks.push(Mark {
                at: last,
                text: if r.oom { format!("OOM N={}", r.n) } else { format!("exit N={}", r.n) },
                color,
                cross: true,
            });
        }
        chart.series.push(Series { label, color, alpha, points, markers: false });
    }
    for (v, (x, y, n)) in peak_per_variant {
        if chart.marks.iter().any(|m| m.cross && (m.at.1 - y).abs() < 1e-9) {
            continue;
        }
        chart.marks.push(Mark {
            at: (x, y),
            text: format!("peak {y:.0} MiB (N={n})"),
            color: variant_color(&v, peers),
            cross: false,
        });
    }
    chart
}
