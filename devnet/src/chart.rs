//! The report's SVG charts, in the style of `gigas-bench load`'s: transactions per second,
//! inclusion latency, the full node's lag and every process's memory over the run.

use std::path::Path;

use eyre::Result;
use gigas_loadgen::chart::{self, draw_error, Line};
use gigas_loadgen::load::{Percentiles, SecondPoint};
use plotters::prelude::*;

use crate::sample::Sample;

const ORANGE: RGBColor = RGBColor(230, 130, 0);
const GREY: RGBColor = RGBColor(120, 120, 120);

/// Lines over seconds since the load began, written to `file`; the y axis reaches the largest
/// value (at least `floor`) with 10% headroom.
fn line_chart(
    file: &Path,
    caption: &str,
    y_desc: &str,
    floor: f64,
    lines: Vec<Line>,
) -> Result<()> {
    let points = || lines.iter().flat_map(|l| l.points.iter());
    let x_max = points().map(|p| p.0).fold(2.0, f64::max);
    let y_max = points()
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .fold(floor, f64::max)
        * 1.1;
    let root = SVGBackend::new(file, (1100, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(file, &e))?;
    chart::line_chart(
        &root,
        file,
        caption,
        20,
        ("seconds since the load began", y_desc),
        (x_max, y_max),
        lines,
    )?;
    root.present().map_err(|e| draw_error(file, &e))
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
        proc_line("sequencer RSS", BLUE, |s| s.sequencer.map(|m| m.resident)),
        proc_line("full node RSS", RED, |s| s.fullnode.map(|m| m.resident)),
        proc_line("full node anon", ORANGE, |s| s.fullnode.map(|m| m.anon)),
        proc_line("full node file", MAGENTA, |s| s.fullnode.map(|m| m.file)),
        proc_line("load generator RSS", GREY, |s| {
            s.generator.map(|m| m.resident)
        }),
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
