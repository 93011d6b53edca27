//! SVG charts of the experiments: throughput, faults and split against the memory limit (the
//! limit on a log2 axis, as the talk's sweep), the sync modes' breakdown, the keep-up lag.

use std::path::Path;

use eyre::{eyre, Result};
use plotters::prelude::*;

use super::keep_up::KeepUpReport;
use super::{SweepReport, SyncModesReport};
use crate::fullnode::limit_label;

fn err(file: &Path, e: &dyn std::fmt::Display) -> eyre::Report {
    eyre!("cannot draw {}: {e}", file.display())
}

const SERIES: [(&str, RGBColor); 2] = [("zipf", BLUE), ("uniform", RED)];

/// log2 of a limit in MiB: 512 MiB is 9, 8 GiB is 13.
fn log2_mib(bytes: u64) -> f64 {
    (bytes as f64 / 1048576.0).log2()
}

/// A line per access distribution of `value` against the limit.
fn per_limit(
    r: &SweepReport,
    file: &Path,
    caption: &str,
    y_desc: &str,
    value: fn(&super::SweepPoint) -> f64,
) -> Result<()> {
    let root = SVGBackend::new(file, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(file, &e))?;
    let xs: Vec<f64> = r.points.iter().map(|p| log2_mib(p.limit_bytes)).collect();
    let (x_min, x_max) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min) - 0.3,
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max) + 0.3,
    );
    if !x_min.is_finite() || !x_max.is_finite() {
        return Err(eyre!("no points to draw in {}", file.display()));
    }
    let y_max = r.points.iter().map(value).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max)
        .map_err(|e| err(file, &e))?;
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
        .map_err(|e| err(file, &e))?;
    for (name, color) in SERIES {
        let mut points: Vec<(f64, f64)> = r
            .points
            .iter()
            .filter(|p| p.distribution == name)
            .map(|p| (log2_mib(p.limit_bytes), value(p)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| err(file, &e))?
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
            .map_err(|e| err(file, &e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(file, &e))?;
    root.present().map_err(|e| err(file, &e))
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

const PHASES: [(&str, RGBColor); 5] = [
    ("read", RGBColor(31, 119, 180)),
    ("write", RGBColor(255, 127, 14)),
    ("trie", RGBColor(44, 160, 44)),
    ("commit", RGBColor(214, 39, 40)),
    ("other", RGBColor(148, 103, 189)),
];

/// Horizontal stacked bars of microseconds per block in each phase, one bar per row.
fn stacked(
    file: &Path,
    caption: &str,
    rows: &[(String, Vec<(String, f64)>)],
    legend: &[(&'static str, RGBColor)],
) -> Result<()> {
    let height = 120 + 40 * rows.len() as u32;
    let root = SVGBackend::new(file, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(file, &e))?;
    let x_max = rows
        .iter()
        .map(|(_, parts)| parts.iter().map(|(_, v)| v).sum::<f64>())
        .fold(1e-9, f64::max)
        * 1.1;
    let n = rows.len() as f64;
    let labels: Vec<String> = rows.iter().map(|(l, _)| l.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(200)
        .build_cartesian_2d(0.0..x_max, 0.0..n)
        .map_err(|e| err(file, &e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = (*y - 0.5).round();
            if (y - 0.5 - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            labels.get(i as usize).cloned().unwrap_or_default()
        })
        .x_desc("milliseconds per block")
        .draw()
        .map_err(|e| err(file, &e))?;
    for &(name, color) in legend {
        let bars: Vec<Rectangle<(f64, f64)>> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, (_, parts))| {
                let mut start = 0.0;
                for (phase, v) in parts {
                    if phase == name {
                        let y = i as f64;
                        return Some(Rectangle::new(
                            [(start, y + 0.15), (start + v, y + 0.85)],
                            color.filled(),
                        ));
                    }
                    start += v;
                }
                None
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(file, &e))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(file, &e))?;
    root.present().map_err(|e| err(file, &e))
}

/// The split per block of each sweep run.
pub(super) fn sweep_split(r: &SweepReport, file: &Path) -> Result<()> {
    let rows: Vec<(String, Vec<(String, f64)>)> = r
        .points
        .iter()
        .map(|p| {
            let blocks = p.blocks.max(1) as f64;
            let mut parts: Vec<(String, f64)> = Vec::new();
            for (phase, _) in PHASES {
                let seconds: f64 = p
                    .split
                    .iter()
                    .filter(|(n, _)| match phase {
                        // Decode and verify are under 1%: shown with the loop.
                        "other" => matches!(n.as_str(), "decode" | "verify" | "other"),
                        _ => n == phase,
                    })
                    .map(|(_, s)| s)
                    .sum();
                parts.push((phase.to_string(), seconds * 1e3 / blocks));
            }
            (
                format!("{}, {}", p.distribution, limit_label(Some(p.limit_bytes))),
                parts,
            )
        })
        .collect();
    stacked(
        file,
        "where a live block's time goes under each limit",
        &rows,
        &PHASES,
    )
}

/// The sync modes' breakdown per run.
pub(super) fn sync_modes(r: &SyncModesReport, file: &Path) -> Result<()> {
    const PARTS: [(&str, RGBColor); 3] = [
        ("apply", RGBColor(31, 119, 180)),
        ("merkleization", RGBColor(44, 160, 44)),
        ("persistence", RGBColor(214, 39, 40)),
    ];
    // Seconds per million state changes: the modes compare at equal work.
    let rows: Vec<(String, Vec<(String, f64)>)> = r
        .rows
        .iter()
        .map(|row| {
            let b = row.breakdown;
            let total = b.apply + b.merkleization + b.persistence;
            let changes = row.changes_per_second * total;
            let per = |s: f64| {
                if changes > 0.0 {
                    s * 1e6 / changes
                } else {
                    0.0
                }
            };
            (
                row.label.clone(),
                vec![
                    ("apply".to_string(), per(b.apply) * 1e3),
                    ("merkleization".to_string(), per(b.merkleization) * 1e3),
                    ("persistence".to_string(), per(b.persistence) * 1e3),
                ],
            )
        })
        .collect();
    stacked(
        file,
        "sync modes: time per million state changes (x: ms; apply / merkleization / persistence)",
        &rows,
        &PARTS,
    )
}

/// The lag over the run.
pub(super) fn keep_up(r: &KeepUpReport, file: &Path) -> Result<()> {
    let root = SVGBackend::new(file, (1100, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(file, &e))?;
    let x_max = r.samples.last().map_or(1.0, |s| s.t).max(1.0);
    let y_max = (r.lag_max as f64 + 1.0).max(4.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "full node lag behind the sequencer (blocks)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(file, &e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("blocks behind")
        .draw()
        .map_err(|e| err(file, &e))?;
    chart
        .draw_series(LineSeries::new(
            r.samples
                .iter()
                .map(|s| (s.t, s.sequencer.saturating_sub(s.fullnode) as f64)),
            BLUE.stroke_width(1),
        ))
        .map_err(|e| err(file, &e))?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 2.0), (x_max, 2.0)],
            RED.stroke_width(1),
        ))
        .map_err(|e| err(file, &e))?
        .label("target: 2 blocks")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(1)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(file, &e))?;
    root.present().map_err(|e| err(file, &e))
}
