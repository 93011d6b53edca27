//! SVG charts of the experiments: throughput, faults and split against the memory limit (the
//! limit on a log2 axis, as the talk's sweep), the sync modes' breakdown, the keep-up lag.

use std::path::Path;

use eyre::{eyre, Result};
use plotters::prelude::*;

use super::keep_up::KeepUpReport;
use super::{SweepReport, SyncModesReport};
use crate::chart::{draw_error, line_chart, stacked_bars, Bar, Line};
use crate::fullnode::limit_label;

const SERIES: [(&str, RGBColor); 2] = [("zipf", BLUE), ("uniform", RED)];

/// log2 of a limit in MiB: 512 MiB is 9, 8 GiB is 13.
fn log2_mib(bytes: u64) -> f64 {
    (bytes as f64 / 1048576.0).log2()
}

/// One line of a chart against the memory limit: its label, colour and (limit, value) points.
pub(super) type LimitSeries = (String, RGBColor, Vec<(u64, f64)>);

/// A line per series against the limit (log2 axis).
pub(super) fn against_limit(
    file: &Path,
    caption: &str,
    y_desc: &str,
    series: Vec<LimitSeries>,
) -> Result<()> {
    let root = SVGBackend::new(file, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(file, &e))?;
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|(_, _, points)| points.iter().map(|p| log2_mib(p.0)))
        .collect();
    let (x_min, x_max) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min) - 0.3,
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max) + 0.3,
    );
    if !x_min.is_finite() || !x_max.is_finite() {
        return Err(eyre!("no points to draw in {}", file.display()));
    }
    let y_max = series
        .iter()
        .flat_map(|(_, _, points)| points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max)
        .map_err(|e| draw_error(file, &e))?;
    chart
        .configure_mesh()
        .x_desc("memory limit (cgroup, page cache included)")
        .y_desc(y_desc)
        .x_labels(8)
        .x_label_formatter(&|x| {
            let bytes = (2f64.powf(*x) * 1048576.0).round() as u64;
            limit_label(Some(bytes))
        })
        .draw()
        .map_err(|e| draw_error(file, &e))?;
    for (name, color, points) in series {
        let mut points: Vec<(f64, f64)> = points
            .into_iter()
            .map(|(limit, y)| (log2_mib(limit), y))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| draw_error(file, &e))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )
            .map_err(|e| draw_error(file, &e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw_error(file, &e))?;
    root.present().map_err(|e| draw_error(file, &e))
}

/// A line per access distribution of `value` against the limit.
fn per_limit(
    r: &SweepReport,
    file: &Path,
    caption: &str,
    y_desc: &str,
    value: fn(&super::SweepPoint) -> f64,
) -> Result<()> {
    let series = SERIES
        .iter()
        .map(|&(name, color)| {
            let points = r
                .points
                .iter()
                .filter(|p| p.distribution == name)
                .map(|p| (p.limit_bytes, value(p)))
                .collect();
            (name.to_string(), color, points)
        })
        .collect();
    against_limit(file, caption, y_desc, series)
}

/// State changes per second against the limit.
pub(super) fn sweep_throughput(r: &SweepReport, file: &Path) -> Result<()> {
    per_limit(
        r,
        file,
        "live apply (root and commit every block): throughput against the memory limit",
        "state changes per second",
        |p| p.changes_per_second,
    )
}

/// Major faults per block against the limit.
pub(super) fn sweep_faults(r: &SweepReport, file: &Path) -> Result<()> {
    per_limit(
        r,
        file,
        "major page faults per block against the memory limit",
        "major faults per block",
        |p| p.major_faults_per_block,
    )
}

/// The phases a sweep bar shows (decode and verify, under 1%, with the loop in "other").
const PHASES: [&str; 5] = ["read", "write", "trie", "commit", "other"];

/// The split per block of each sweep run.
pub(super) fn sweep_split(r: &SweepReport, file: &Path) -> Result<()> {
    let bars: Vec<Bar> = r
        .points
        .iter()
        .map(|p| {
            let blocks = p.blocks.max(1) as f64;
            let parts = PHASES
                .iter()
                .map(|&phase| {
                    let seconds: f64 = p
                        .split
                        .iter()
                        .filter(|(n, _)| match phase {
                            "other" => matches!(n.as_str(), "decode" | "verify" | "other"),
                            _ => n == phase,
                        })
                        .map(|(_, s)| s)
                        .sum();
                    (phase.to_string(), seconds * 1e3 / blocks)
                })
                .collect();
            Bar {
                label: format!("{}, {}", p.distribution, limit_label(Some(p.limit_bytes))),
                parts,
            }
        })
        .collect();
    stacked_bars(
        file,
        "where a live block's time goes under each limit",
        "milliseconds per block",
        &bars,
    )
}

/// The sync modes' breakdown per run: milliseconds per million state changes, so that the
/// modes compare at equal work.
pub(super) fn sync_modes(r: &SyncModesReport, file: &Path) -> Result<()> {
    let bars: Vec<Bar> = r
        .rows
        .iter()
        .map(|row| {
            let b = row.breakdown;
            let total = b.apply + b.merkleization + b.persistence;
            let changes = row.changes_per_second * total;
            let per = |s: f64| {
                if changes > 0.0 {
                    s * 1e9 / changes
                } else {
                    0.0
                }
            };
            Bar {
                label: row.label.clone(),
                parts: vec![
                    ("apply".to_string(), per(b.apply)),
                    ("merkleization".to_string(), per(b.merkleization)),
                    ("persistence".to_string(), per(b.persistence)),
                ],
            }
        })
        .collect();
    stacked_bars(
        file,
        "sync modes: apply / merkleization / persistence",
        "milliseconds per million state changes",
        &bars,
    )
}

/// The lag over the run, with the target.
pub(super) fn keep_up(r: &KeepUpReport, file: &Path) -> Result<()> {
    let root = SVGBackend::new(file, (1100, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(file, &e))?;
    let x_max = r.samples.last().map_or(1.0, |s| s.t).max(1.0);
    line_chart(
        &root,
        file,
        "full node lag behind the sequencer (blocks)",
        20,
        ("seconds", "blocks behind"),
        (x_max, (r.lag_max as f64 + 1.0).max(4.0)),
        vec![
            Line {
                label: "lag".to_string(),
                color: BLUE,
                points: r
                    .samples
                    .iter()
                    .map(|s| (s.t, s.sequencer.saturating_sub(s.fullnode) as f64))
                    .collect(),
            },
            Line {
                label: "target: 2 blocks".to_string(),
                color: RED,
                points: vec![(0.0, 2.0), (x_max, 2.0)],
            },
        ],
    )?;
    root.present().map_err(|e| draw_error(file, &e))
}
