//! SVG plots in one report style: paper background, Georgia titles, muted grid, one
//! low-saturation colour per variant, a dashed memory line, and only the annotations that matter
//! (peak, OOM, exit). Every plot is drawn from the raw JSONL and `summary.jsonl`, so it can be
//! redrawn at any time with `stockade bench plot`.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::{BenchError, Result};

/// Background.
pub const BG: RGBColor = RGBColor(0xfb, 0xfa, 0xf6);
/// Titles.
pub const TITLE: RGBColor = RGBColor(0x1e, 0x24, 0x30);
/// Text, axes labels and ticks.
pub const TEXT: RGBColor = RGBColor(0x26, 0x31, 0x3f);
/// Subtitles and notes.
pub const NOTE: RGBColor = RGBColor(0x5d, 0x66, 0x73);
/// Grid lines.
pub const GRID: RGBColor = RGBColor(0xdd, 0xd7, 0xcc);
/// Axis spines.
pub const SPINE: RGBColor = RGBColor(0xb8, 0xb2, 0xa8);
/// The dashed memory line.
pub const MEMORY_LINE: RGBColor = RGBColor(0x7a, 0x5e, 0xa8);
/// Variant colours: baseline-like peers, Stockade pipe, Stockade file, then extras.
pub const PALETTE: [RGBColor; 5] = [
    RGBColor(0xb8, 0x4a, 0x39),
    RGBColor(0x3e, 0x7a, 0x52),
    RGBColor(0x1f, 0x5a, 0xa6),
    RGBColor(0x8a, 0x6d, 0x3b),
    RGBColor(0x4a, 0x6a, 0x7a),
];

const TITLE_FONT: &str = "Georgia, serif";
const BODY_FONT: &str = "sans-serif";
const SIZE: (u32, u32) = (960, 560);

/// The colour of a variant: Stockade pipe green, file blue, the first peer red, others after.
pub fn variant_color(variant: &str, peers: &[String]) -> RGBColor {
    match variant {
        "stockade-pipe" => PALETTE[1],
        "stockade-file" => PALETTE[2],
        v => {
            let i = peers.iter().position(|p| p == v).unwrap_or(0);
            if i == 0 { PALETTE[0] } else { PALETTE[3 + (i - 1) % 2] }
        }
    }
}

pub(crate) fn is_stockade(v: &str) -> bool {
    v.starts_with("stockade-")
}

/// One line on a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label (empty: not in the legend).
    pub label: String,
    /// Colour.
    pub color: RGBColor,
    /// Opacity (0..1).
    pub alpha: f64,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Draw a marker on every point.
    pub markers: bool,
}

/// An annotation: a marker and a short text.
#[derive(Debug, Clone)]
pub struct Mark {
    /// Where.
    pub at: (f64, f64),
    /// What (`peak 431 MiB`, `OOM`, `exit 2`).
    pub text: String,
    /// Colour of the marker.
    pub color: RGBColor,
    /// A cross instead of a dot (OOM, exit).
    pub cross: bool,
}

/// A horizontal dashed line with its label.
#[derive(Debug, Clone)]
pub struct HLine {
    /// y value.
    pub y: f64,
    /// Label.
    pub label: String,
}

/// A whole chart.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    /// Title (Georgia).
    pub title: String,
    /// Subtitle (notes colour).
    pub subtitle: String,
    /// x axis description.
    pub x_desc: String,
    /// y axis description.
    pub y_desc: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Annotations.
    pub marks: Vec<Mark>,
    /// Dashed memory lines.
    pub hlines: Vec<HLine>,
    /// x is log2 of the value shown on the ticks.
    pub x_log2: bool,
}

fn perr<E: std::fmt::Debug>(e: E) -> BenchError {
    BenchError::msg(format!("plot: {e:?}"))
}

/// Draw `chart` to an SVG file.
pub fn draw(chart: &Chart, path: &Path) -> Result<()> {
    let (x0, x1, y1) = bounds(chart);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&BG).map_err(perr)?;
    root.draw(&Text::new(
        chart.title.clone(),
        (28, 18),
        (TITLE_FONT, 22).into_font().color(&TITLE),
    ))
    .map_err(perr)?;
    root.draw(&Text::new(
        chart.subtitle.clone(),
        (28, 48),
        (BODY_FONT, 13).into_font().color(&NOTE),
    ))
    .map_err(perr)?;
    let area = root.margin(74, 18, 18, 28);
    let mut ctx = ChartBuilder::on(&area)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(perr)?;
    let tick = (BODY_FONT, 12).into_font().color(&TEXT);
    let desc = (BODY_FONT, 13).into_font().color(&TEXT);
    let log2 = chart.x_log2;
    let x_fmt = move |x: &f64| {
        if log2 {
            let v = 2f64.powf(*x);
            if (v - v.round()).abs() < 1e-6 { format!("{}", v.round()) } else { String::new() }
        } else {
            trim_num(*x)
        }
    };
    let y_fmt = |y: &f64| trim_num(*y);
    let x_ticks = if log2 { ((x1 - x0).ceil() as usize).max(2) * 2 } else { 10 };
    ctx.configure_mesh()
        .bold_line_style(GRID.stroke_width(1))
        .light_line_style(TRANSPARENT)
        .axis_style(SPINE.stroke_width(1))
        .x_labels(x_ticks)
        .y_labels(8)
        .label_style(tick)
        .axis_desc_style(desc)
        .x_desc(chart.x_desc.as_str())
        .y_desc(chart.y_desc.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(perr)?;
    draw_content(&mut ctx, chart, (x0, x1), y1)?;
    if chart.series.iter().any(|s| !s.label.is_empty()) {
        ctx.configure_series_labels()
            .position(legend_corner(chart, (x0, x1), y1))
            .background_style(BG.mix(0.92))
            .border_style(SPINE)
            .label_font((BODY_FONT, 12).into_font().color(&TEXT))
            .draw()
            .map_err(perr)?;
    }
    root.present().map_err(perr)?;
    Ok(())
}

/// The plotted ranges: x from the first to the last point (padded; from 0 unless log2), y from
/// 0 to a little above the highest point or line.
fn bounds(chart: &Chart) -> (f64, f64, f64) {
    let pts = chart.series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for (x, y) in pts.chain(chart.marks.iter().map(|m| m.at)) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    for h in &chart.hlines {
        y1 = y1.max(h.y);
    }
    if !x0.is_finite() || !x1.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let pad = (x1 - x0) * 0.04;
    let (x0, x1) = if chart.x_log2 { (x0 - 0.3, x1 + 0.3) } else { (x0.min(0.0), x1 + pad) };
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.12 };
    (x0, x1, y1)
}

/// The chart's area once its axes are drawn.
type Plot<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// What is drawn inside the axes: the dashed lines, the series and the marks.
fn draw_content(
    ctx: &mut Plot<'_, '_>,
    chart: &Chart,
    (x0, x1): (f64, f64),
    y1: f64,
) -> Result<()> {
    for h in &chart.hlines {
        ctx.draw_series(DashedLineSeries::new(
            vec![(x0, h.y), (x1, h.y)],
            8,
            5,
            MEMORY_LINE.stroke_width(2),
        ))
        .map_err(perr)?;
        ctx.draw_series(std::iter::once(Text::new(
            h.label.clone(),
            (x0 + (x1 - x0) * 0.01, h.y + y1 * 0.012),
            (BODY_FONT, 12).into_font().color(&MEMORY_LINE).pos(Pos::new(HPos::Left, VPos::Bottom)),
        )))
        .map_err(perr)?;
    }
    for s in &chart.series {
        let style = s.color.mix(s.alpha).stroke_width(2);
        let drawn = ctx.draw_series(LineSeries::new(s.points.clone(), style)).map_err(perr)?;
        if !s.label.is_empty() {
            let c = s.color;
            drawn.label(s.label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
            });
        }
        if s.markers {
            let c = s.color.mix(s.alpha);
            ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(perr)?;
        }
    }
    for m in &chart.marks {
        let c = m.color;
        if m.cross {
            ctx.draw_series(std::iter::once(Cross::new(m.at, 6, c.stroke_width(2))))
                .map_err(perr)?;
        } else {
            ctx.draw_series(std::iter::once(Circle::new(m.at, 4, c.filled()))).map_err(perr)?;
        }
        ctx.draw_series(std::iter::once(Text::new(
            m.text.clone(),
            (m.at.0, m.at.1 + y1 * 0.02),
            (BODY_FONT, 12).into_font().color(&TEXT).pos(Pos::new(HPos::Center, VPos::Bottom)),
        )))
        .map_err(perr)?;
    }
    Ok(())
}

/// The corner of the plot the legend covers fewest points and marks in (upper right first), so
/// no data point is hidden behind it.
fn legend_corner(chart: &Chart, (x0, x1): (f64, f64), y1: f64) -> SeriesLabelPosition {
    let labels = chart.series.iter().filter(|s| !s.label.is_empty()).count() as f64;
    // The legend's share of the plot: about 45 % of the width, 6 % of the height per line and
    // its margins, and room for the text a mark puts above its point.
    let (w, h) = (0.45, (0.06 * labels + 0.10).min(0.9));
    let points: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .chain(chart.marks.iter().map(|m| m.at))
        .map(|(x, y)| ((x - x0) / (x1 - x0).max(1e-9), y / y1.max(1e-9)))
        .collect();
    let covered = |right: bool, upper: bool| {
        points
            .iter()
            .filter(|&&(x, y)| {
                let in_x = if right { x >= 1.0 - w } else { x <= w };
                let in_y = if upper { y >= 1.0 - h } else { y <= h };
                in_x && in_y
            })
            .count()
    };
    [
        (SeriesLabelPosition::UpperRight, covered(true, true)),
        (SeriesLabelPosition::UpperLeft, covered(false, true)),
        (SeriesLabelPosition::LowerRight, covered(true, false)),
        (SeriesLabelPosition::LowerLeft, covered(false, false)),
    ]
    .into_iter()
    .min_by_key(|(_, n)| *n)
    .map_or(SeriesLabelPosition::UpperRight, |(p, _)| p)
}

fn trim_num(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{}", x.round() as i64)
    } else if x.abs() >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mib;
    use crate::sampler::Sample;
    use crate::summary::RunSummary;

    #[test]
    fn a_chart_renders_in_the_report_style() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("c.svg");
        let chart = Chart {
            title: "t".into(),
            subtitle: "s".into(),
            series: vec![Series {
                label: "stockade-pipe".into(),
                color: PALETTE[1],
                alpha: 1.0,
                points: vec![(1.0, 2.0), (2.0, 3.0)],
                markers: true,
            }],
            hlines: vec![HLine { y: 5.0, label: "line".into() }],
            marks: vec![Mark {
                at: (2.0, 3.0),
                text: "OOM".into(),
                color: PALETTE[0],
                cross: true,
            }],
            x_log2: true,
            ..Chart::default()
        };
        draw(&chart, &path).unwrap_or_else(|e| panic!("{e}"));
        let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(svg.contains("#FBFAF6") || svg.contains("#fbfaf6"), "background");
        assert!(svg.contains("Georgia"));
        assert!(svg.to_lowercase().contains("#7a5ea8"));
        assert!(svg.contains("stroke-dasharray") || svg.matches("#7A5EA8").count() > 2);
    }

    #[test]
    fn the_legend_goes_where_no_point_is() {
        // A rising line: its peak is in the upper right, so the legend must not go there.
        let series = |label: &str, points: Vec<(f64, f64)>| Series {
            label: label.into(),
            color: PALETTE[1],
            alpha: 1.0,
            points,
            markers: true,
        };
        let rising = Chart {
            series: vec![series("a", vec![(0.0, 1.0), (1.0, 5.0), (2.0, 10.0)])],
            ..Chart::default()
        };
        let corner = legend_corner(&rising, (0.0, 2.0), 10.0 * 1.12);
        assert!(!matches!(corner, SeriesLabelPosition::UpperRight), "{corner:?}");
        let falling = Chart {
            series: vec![series("a", vec![(0.0, 10.0), (1.0, 5.0), (2.0, 1.0)])],
            ..Chart::default()
        };
        let corner = legend_corner(&falling, (0.0, 2.0), 10.0 * 1.12);
        assert!(matches!(corner, SeriesLabelPosition::UpperRight), "{corner:?}");
    }

    #[test]
    fn a_time_chart_legend_lists_only_the_n_each_variant_ran() {
        let row = |variant: &str, n: usize| RunSummary {
            variant: variant.into(),
            n,
            rows: 3,
            ..RunSummary::default()
        };
        let samples = vec![Sample { alive: true, rss_bytes: 1 << 20, ..Sample::default() }];
        let (a2, a4, b2) = (row("stockade-pipe", 2), row("stockade-pipe", 4), row("node", 2));
        let runs = [(&a2, samples.clone()), (&a4, samples.clone()), (&b2, samples)];
        let picked: Vec<&(&RunSummary, Vec<Sample>)> = runs.iter().collect();
        let chart =
            crate::growth_plots::time_chart(&picked, &["node".into()], |s| Some(mib(s.rss_bytes)));
        let labels: Vec<&str> =
            chart.series.iter().map(|s| s.label.as_str()).filter(|l| !l.is_empty()).collect();
        assert_eq!(labels, ["stockade-pipe (N = 2, 4)", "node (N = 2)"]);
    }
}
