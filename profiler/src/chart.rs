//! SVG charts of the report.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::Report;

/// Errors while drawing.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw {file}: {message}")]
pub struct ChartError {
    file: String,
    message: String,
}

fn chart_error(file: &Path, e: impl std::fmt::Display) -> ChartError {
    ChartError {
        file: file.display().to_string(),
        message: e.to_string(),
    }
}

/// The top 30 opcodes by time as bars (left axis, share of time) with the cumulative share
/// as a line (right axis), as in the talk.
pub fn top_opcodes(report: &Report, file: &Path) -> Result<(), ChartError> {
    let rows: Vec<_> = report
        .rows
        .iter()
        .filter(|r| r.opcode.is_some())
        .take(30)
        .collect();
    let n = rows.len().max(1) as u32;
    let max_share = rows.iter().map(|r| r.share).fold(0.0, f64::max).max(0.01) * 100.0 * 1.1;
    // The cumulative line is over opcode rows only, so that it reads like the talk's chart.
    let mut cumulative = Vec::with_capacity(rows.len());
    let mut acc = 0.0;
    for r in &rows {
        acc += r.share * 100.0;
        cumulative.push(acc);
    }
    let root = SVGBackend::new(file, (1200, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| chart_error(file, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Top 30 opcodes by time (bars: share, line: cumulative share)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(80)
        .y_label_area_size(60)
        .right_y_label_area_size(60)
        .build_cartesian_2d((0u32..n).into_segmented(), 0f64..max_share)
        .map_err(|e| chart_error(file, e))?
        .set_secondary_coord(0f64..n as f64, 0f64..100f64);
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len().max(1))
        // The names are drawn below, by hand: plotters centres a rotated axis label on its
        // tick, so half of a long name would sit over the bars.
        .x_label_formatter(&|_| String::new())
        .y_desc("share of time (%)")
        .draw()
        .map_err(|e| chart_error(file, e))?;
    chart
        .configure_secondary_axes()
        .y_desc("cumulative share (%)")
        .draw()
        .map_err(|e| chart_error(file, e))?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let x0 = SegmentValue::Exact(i as u32);
            let x1 = SegmentValue::Exact(i as u32 + 1);
            let mut bar =
                Rectangle::new([(x0, 0.0), (x1, r.share * 100.0)], BLUE.mix(0.7).filled());
            bar.set_margin(0, 0, 3, 3);
            bar
        }))
        .map_err(|e| chart_error(file, e))?;
    chart
        .draw_secondary_series(LineSeries::new(
            cumulative
                .iter()
                .enumerate()
                .map(|(i, c)| (i as f64 + 0.5, *c)),
            RED.stroke_width(2),
        ))
        .map_err(|e| chart_error(file, e))?;
    chart
        .draw_secondary_series(
            cumulative
                .iter()
                .enumerate()
                .map(|(i, c)| Circle::new((i as f64 + 0.5, *c), 3, RED.filled())),
        )
        .map_err(|e| chart_error(file, e))?;
    // Each name starts just under the axis at its bar's centre and runs downwards.
    let style = ("sans-serif", 11)
        .into_font()
        .transform(FontTransform::Rotate90)
        .into_text_style(&root)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, name) in names.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(SegmentValue::CenterOf(i as u32), 0.0));
        root.draw(&Text::new(name.clone(), (x, y + 6), style.clone()))
            .map_err(|e| chart_error(file, e))?;
    }
    root.present().map_err(|e| chart_error(file, e))
}

/// Time by category, as horizontal bars with their share.
pub fn categories(report: &Report, file: &Path) -> Result<(), ChartError> {
    let mut cats = report.categories.clone();
    cats.sort_by(|a, b| b.share.total_cmp(&a.share));
    let n = cats.len().max(1) as u32;
    let max_share = cats.iter().map(|c| c.share).fold(0.0, f64::max).max(0.01) * 100.0 * 1.15;
    let root = SVGBackend::new(file, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| chart_error(file, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Time by category (% of attributed time)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(170)
        .build_cartesian_2d(0f64..max_share, (0u32..n).into_segmented())
        .map_err(|e| chart_error(file, e))?;
    let names: Vec<String> = cats.iter().map(|c| c.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(cats.len().max(1))
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("share of time (%)")
        .draw()
        .map_err(|e| chart_error(file, e))?;
    let palette = [&BLUE, &GREEN, &RED, &MAGENTA, &CYAN, &BLACK];
    chart
        .draw_series(cats.iter().enumerate().map(|(i, c)| {
            let color = palette[i % palette.len()];
            let mut bar = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i as u32)),
                    (c.share * 100.0, SegmentValue::Exact(i as u32 + 1)),
                ],
                color.mix(0.6).filled(),
            );
            bar.set_margin(4, 4, 0, 0);
            bar
        }))
        .map_err(|e| chart_error(file, e))?;
    chart
        .draw_series(cats.iter().enumerate().map(|(i, c)| {
            Text::new(
                format!("{:.1}%", c.share * 100.0),
                (
                    c.share * 100.0 + max_share * 0.01,
                    SegmentValue::CenterOf(i as u32),
                ),
                ("sans-serif", 13),
            )
        }))
        .map_err(|e| chart_error(file, e))?;
    root.present().map_err(|e| chart_error(file, e))
}
