//! SVG charts of a run: rates over time, latency over time, and per step.

use std::path::Path;

use eyre::Result;
use plotters::prelude::*;

use super::LoadReport;
use crate::chart::{draw_error, line_chart, Line};

/// The largest finite value of `values` (at least 10), with 10% headroom: a chart's top.
fn top(values: impl Iterator<Item = f64>) -> f64 {
    values.filter(|v| v.is_finite()).fold(10.0, f64::max) * 1.1
}

/// Target, submitted and included transactions per second over the run.
pub(crate) fn tps(r: &LoadReport, file: &Path) -> Result<()> {
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(file, &e))?;
    let seconds = r.timeline.len().max(2) as f64;
    let line = |label: &str, color, value: fn(&super::SecondPoint) -> f64| Line {
        label: label.to_string(),
        color,
        points: r.timeline.iter().map(|p| (p.t as f64, value(p))).collect(),
    };
    line_chart(
        &root,
        file,
        &format!(
            "{:?} over {} accounts: transactions per second",
            r.config.workload, r.config.accounts
        ),
        20,
        ("seconds", "tx/s"),
        (
            seconds,
            top(r
                .timeline
                .iter()
                .map(|p| (p.submitted.max(p.included) as f64).max(p.target_tps))),
        ),
        vec![
            line("target", BLACK, |p| p.target_tps),
            line("submitted", BLUE, |p| p.submitted as f64),
            line("included", RED, |p| p.included as f64),
        ],
    )?;
    root.present().map_err(|e| draw_error(file, &e))
}

/// Inclusion latency percentiles of each second's included transactions.
pub(crate) fn latency(r: &LoadReport, file: &Path) -> Result<()> {
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(file, &e))?;
    let seconds = r.timeline.len().max(2) as f64;
    let line = |label: &str, color, value: fn(&super::Percentiles) -> f64| Line {
        label: label.to_string(),
        color,
        points: r
            .timeline
            .iter()
            .filter_map(|p| p.latency_ms.map(|l| (p.t as f64, value(&l))))
            .collect(),
    };
    line_chart(
        &root,
        file,
        "Inclusion latency (send to newHeads) of the transactions included each second",
        20,
        ("seconds", "ms"),
        (
            seconds,
            top(r
                .timeline
                .iter()
                .filter_map(|p| p.latency_ms.map(|l| l.p99))),
        ),
        vec![
            line("p50", GREEN, |l| l.p50),
            line("p90", BLUE, |l| l.p90),
            line("p99", RED, |l| l.p99),
        ],
    )?;
    root.present().map_err(|e| draw_error(file, &e))
}

/// Per step: included against target rate (left), p50 and p99 latency (right).
pub(crate) fn steps(r: &LoadReport, file: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| draw_error(file, e);
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(550);
    let top_rate = top(r.steps.iter().map(|s| s.target_tps.max(s.included_tps)));
    let mut rates = ChartBuilder::on(&left)
        .caption("Included vs target (tx/s)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..top_rate, 0.0..top_rate)
        .map_err(|e| err(&e))?;
    rates
        .configure_mesh()
        .x_desc("target tx/s")
        .y_desc("included tx/s")
        .draw()
        .map_err(|e| err(&e))?;
    rates
        .draw_series(LineSeries::new(
            [(0.0, 0.0), (top_rate, top_rate)],
            BLACK.mix(0.3).stroke_width(1),
        ))
        .map_err(|e| err(&e))?;
    rates
        .draw_series(LineSeries::new(
            r.steps.iter().map(|s| (s.target_tps, s.included_tps)),
            BLUE.stroke_width(2),
        ))
        .map_err(|e| err(&e))?;
    rates
        .draw_series(r.steps.iter().map(|s| {
            let color = if s.passed { GREEN } else { RED };
            Circle::new((s.target_tps, s.included_tps), 5, color.filled())
        }))
        .map_err(|e| err(&e))?;
    let line = |label: &str, value: fn(&super::Percentiles) -> f64, color| Line {
        label: label.to_string(),
        color,
        points: r
            .steps
            .iter()
            .map(|s| (s.target_tps, value(&s.latency_ms)))
            .collect(),
    };
    line_chart(
        &right,
        file,
        "Latency per step (ms)",
        18,
        ("target tx/s", "ms"),
        (top_rate, top(r.steps.iter().map(|s| s.latency_ms.p99))),
        vec![line("p50", |l| l.p50, GREEN), line("p99", |l| l.p99, RED)],
    )?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
