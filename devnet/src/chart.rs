//! The report's SVG charts, in the style of `gigas-bench load`'s: transactions per second,
//! inclusion latency, the full node's lag and every process's memory over the run.

use std::path::Path;

use eyre::{eyre, Result};
use gigas_bench::load::{Percentiles, SecondPoint};
use plotters::prelude::*;

use crate::sample::Sample;

/// One labelled line.
#[derive(Debug)]
struct Line {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

const ORANGE: RGBColor = RGBColor(230, 130, 0);
const GREY: RGBColor = RGBColor(120, 120, 120);

/// The largest finite value (at least `floor`) with 10% headroom.
fn top(lines: &[Line], floor: f64) -> f64 {
    lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(floor, f64::max)
        * 1.1
}

/// Lines over seconds, written to `file`.
fn line_chart(
    file: &Path,
    caption: &str,
    y_desc: &str,
    floor: f64,
    lines: Vec<Line>,
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| eyre!("cannot draw {}: {e}", file.display());
    let x_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(2.0, f64::max);
    let y_max = top(&lines, floor);
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the load began")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for line in lines {
        let color = line.color;
        chart
            .draw_series(LineSeries::new(
                line.points.into_iter().filter(|(_, y)| y.is_finite()),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(line.label)
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
    root.present().map_err(|e| err(&e))
}

/// Offered, sent and included transactions per second.
pub fn tps(timeline: &[SecondPoint], file: &Path) -> Result<()> {
    let line = |label: &str, color, value: fn(&SecondPoint) -> f64| Line {
        label: label.to_string(),
        color,
        points: timeline.iter().map(|p| (p.t as f64, value(p))).collect(),
    };
    line_chart(
        file,
        "Transactions per second: offered, sent, included (newHeads)",
        "tx/s",
        10.0,
        vec![
            line("offered", BLACK, |p| p.target_tps),
            line("sent", BLUE, |p| p.submitted as f64),
            line("included", RED, |p| p.included as f64),
        ],
    )
}

/// Inclusion latency percentiles of each second's included transactions.
pub fn latency(timeline: &[SecondPoint], file: &Path) -> Result<()> {
    let line = |label: &str, color, value: fn(&Percentiles) -> f64| Line {
        label: label.to_string(),
        color,
        points: timeline
            .iter()
            .filter_map(|p| p.latency_ms.map(|l| (p.t as f64, value(&l))))
            .collect(),
    };
    line_chart(
        file,
        "Inclusion latency (send to the newHeads that carries the block)",
        "ms",
        10.0,
        vec![
            line("p50", GREEN, |l| l.p50),
            line("p90", BLUE, |l| l.p90),
            line("p99", RED, |l| l.p99),
        ],
    )
}

/// The full node's lag in blocks, sampled once a second.
pub fn lag(samples: &[Sample], file: &Path) -> Result<()> {
    line_chart(
        file,
        "Full-node lag: sequencer head minus full-node head, sampled once a second",
        "blocks",
        3.0,
        vec![Line {
            label: "lag".into(),
            color: RED,
            points: samples
                .iter()
                .filter_map(|s| s.lag_blocks.map(|l| (s.t, l as f64)))
                .collect(),
        }],
    )
}

/// Resident memory of every process (and the full node's cgroup usage), in MiB.
pub fn memory(samples: &[Sample], limited: bool, file: &Path) -> Result<()> {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let proc_line = |label: &str, color, value: fn(&Sample) -> Option<u64>| Line {
        label: label.to_string(),
        color,
        points: samples
            .iter()
            .filter_map(|s| value(s).map(|b| (s.t, mib(b))))
            .collect(),
    };
    let mut lines = vec![
        proc_line("sequencer RSS", BLUE, |s| s.sequencer.map(|m| m.rss)),
        proc_line("full node RSS", RED, |s| s.fullnode.map(|m| m.rss)),
        proc_line("full node anon", ORANGE, |s| s.fullnode.map(|m| m.anon)),
        proc_line("full node file", MAGENTA, |s| s.fullnode.map(|m| m.file)),
        proc_line("load generator RSS", GREY, |s| s.generator.map(|m| m.rss)),
    ];
    if limited {
        lines.push(proc_line("full node cgroup usage", BLACK, |s| {
            s.fullnode_cgroup_bytes
        }));
    }
    line_chart(
        file,
        "Memory of each process (cgroup usage counts the page cache it charged)",
        "MiB",
        10.0,
        lines,
    )
}
