//! SVG charts of the experiments: throughput, faults and split against the memory limit (the
//! limit on a log2 axis, as the talk's sweep), the sync modes' breakdown, the keep-up lag.

use std::path::Path;

use eyre::{eyre, Result};
use plotters::prelude::*;

use super::keep_up::{KeepUpReport, LagSample};
use super::{SweepReport, SyncModesReport};
use crate::chart::{draw_error, line_chart, stacked_bars, Bar, Line, LineChart};
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
    let lines: Vec<Line> = series
        .into_iter()
        .map(|(label, color, points)| {
            let mut points: Vec<(f64, f64)> = points
                .into_iter()
                .map(|(limit, y)| (log2_mib(limit), y))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Line {
                label,
                color,
                points,
            }
        })
        .collect();
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let x_min = all().map(|p| p.0).fold(f64::INFINITY, f64::min) - 0.3;
    let x_max = all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max) + 0.3;
    if !x_min.is_finite() || !x_max.is_finite() {
        return Err(eyre!("no points to draw in {}", file.display()));
    }
    let y_max = all().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let limit = |x: &f64| limit_label(Some((2f64.powf(*x) * 1048576.0).round() as u64));
    let root = SVGBackend::new(file, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(file, &e))?;
    LineChart {
        caption,
        caption_size: 20,
        x_desc: "memory limit (cgroup, page cache included)",
        y_desc,
        x: x_min..x_max,
        y_max,
        x_labels: 8,
        x_label: Some(&limit),
        markers: true,
    }
    .draw(&root, file, lines)?;
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
    // Every sample is drawn, the first catch-up included.
    let y_max = r.samples.iter().map(LagSample::lag).max().unwrap_or(0);
    line_chart(
        &root,
        file,
        "full node lag behind the sequencer (blocks)",
        20,
        ("seconds", "blocks behind"),
        (x_max, (y_max as f64 + 1.0).max(4.0)),
        vec![
            Line {
                label: "lag".to_string(),
                color: BLUE,
                points: r.samples.iter().map(|s| (s.t, s.lag() as f64)).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::{Breakdown, SweepPoint};

    fn point(distribution: &str, limit_mib: u64, rate: f64) -> SweepPoint {
        SweepPoint {
            distribution: distribution.to_string(),
            limit_bytes: limit_mib << 20,
            changes_per_second: rate,
            blocks_per_second: rate / 5000.0,
            blocks: 10,
            complete: false,
            split: vec![("read".into(), 1.0), ("trie".into(), 2.0)],
            breakdown: Breakdown {
                apply: 1.0,
                merkleization: 2.0,
                persistence: 0.5,
            },
            major_faults: 1000,
            major_faults_per_block: 100.0,
            peak_bytes: limit_mib << 20,
            file_bytes: 0,
            anon_bytes: 0,
        }
    }

    #[test]
    fn the_sweep_chart_has_a_line_per_distribution_on_a_limit_axis() {
        let report = SweepReport {
            config: Vec::new(),
            machine: gigas_primitives::machine::Machine::current(),
            points: vec![
                point("zipf", 512, 3000.0),
                point("zipf", 8192, 6000.0),
                point("uniform", 512, 2500.0),
                point("uniform", 8192, 6400.0),
            ],
            zipf_slowdown_1g_vs_8g: None,
            uniform_slowdown_1g_vs_8g: None,
            state_disk_bytes: 0,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("throughput.svg");
        sweep_throughput(&report, &file).expect("drawn");
        let svg = std::fs::read_to_string(&file).expect("written");
        for text in ["zipf", "uniform", "512 MiB", "8 GiB", "memory limit"] {
            assert!(svg.contains(text), "{text} missing from the chart");
        }
        // A dot per measured point.
        assert_eq!(svg.matches("<circle").count(), 4);

        let empty = SweepReport {
            points: Vec::new(),
            ..report
        };
        assert!(sweep_throughput(&empty, &dir.path().join("empty.svg")).is_err());
    }
}
