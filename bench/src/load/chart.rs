//! SVG charts of a run: rates over time, latency over time, and per step.

use std::path::Path;

use eyre::{eyre, Result};
use plotters::prelude::*;

use super::{LoadReport, Percentiles, SecondPoint, StepResult};

/// A line of a chart: its label, colour and value.
type Series<T> = (&'static str, RGBColor, fn(&T) -> f64);

fn draw_error(file: &Path, e: &dyn std::fmt::Display) -> eyre::Report {
    eyre!("cannot draw {}: {e}", file.display())
}

/// Target, submitted and included transactions per second over the run.
pub(crate) fn tps(r: &LoadReport, file: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| draw_error(file, e);
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = r.timeline.len().max(2) as u64;
    let top = r
        .timeline
        .iter()
        .map(|p| (p.submitted.max(p.included) as f64).max(p.target_tps))
        .fold(10.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{:?} over {} accounts: transactions per second",
                r.config.workload, r.config.accounts
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0..n, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("tx/s")
        .draw()
        .map_err(|e| err(&e))?;
    let series: [Series<SecondPoint>; 3] = [
        ("target", BLACK, |p| p.target_tps),
        ("submitted", BLUE, |p| p.submitted as f64),
        ("included", RED, |p| p.included as f64),
    ];
    for (label, color, value) in series {
        chart
            .draw_series(LineSeries::new(
                r.timeline.iter().map(|p| (p.t, value(p))),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Inclusion latency percentiles of each second's included transactions.
pub(crate) fn latency(r: &LoadReport, file: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| draw_error(file, e);
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = r.timeline.len().max(2) as u64;
    let top = r
        .timeline
        .iter()
        .filter_map(|p| p.latency_ms.map(|l| l.p99))
        .filter(|v| v.is_finite())
        .fold(10.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Inclusion latency (send to newHeads) of the transactions included each second",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0..n, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("ms")
        .draw()
        .map_err(|e| err(&e))?;
    let series: [Series<Percentiles>; 3] = [
        ("p50", GREEN, |p| p.p50),
        ("p90", BLUE, |p| p.p90),
        ("p99", RED, |p| p.p99),
    ];
    for (label, color, value) in series {
        chart
            .draw_series(LineSeries::new(
                r.timeline
                    .iter()
                    .filter_map(|p| p.latency_ms.map(|l| (p.t, value(&l)))),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Per step: included against target rate (left), p50 and p99 latency (right).
pub(crate) fn steps(r: &LoadReport, file: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| draw_error(file, e);
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(550);
    let top_rate = r
        .steps
        .iter()
        .map(|s| s.target_tps.max(s.included_tps))
        .fold(10.0, f64::max)
        * 1.1;
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
    let top_latency = r
        .steps
        .iter()
        .map(|s| s.latency_ms.p99)
        .filter(|v| v.is_finite())
        .fold(10.0, f64::max)
        * 1.1;
    let mut lat = ChartBuilder::on(&right)
        .caption("Latency per step (ms)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..top_rate, 0.0..top_latency)
        .map_err(|e| err(&e))?;
    lat.configure_mesh()
        .x_desc("target tx/s")
        .y_desc("ms")
        .draw()
        .map_err(|e| err(&e))?;
    let series: [Series<StepResult>; 2] = [
        ("p50", GREEN, |s| s.latency_ms.p50),
        ("p99", RED, |s| s.latency_ms.p99),
    ];
    for (label, color, value) in series {
        lat.draw_series(LineSeries::new(
            r.steps
                .iter()
                .map(|s| (s.target_tps, value(s)))
                .filter(|(_, v)| v.is_finite()),
            color.stroke_width(2),
        ))
        .map_err(|e| err(&e))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    lat.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
