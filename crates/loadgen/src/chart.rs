//! The SVG chart shapes the benchmark reports (and the devnet's) share: labelled lines over a
//! range, and horizontal stacked bars of a time split. Each report keeps only what it plots.

use std::path::Path;

use eyre::{eyre, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The error of drawing `file`.
pub fn draw_error(file: &Path, e: &dyn std::fmt::Display) -> eyre::Report {
    eyre!("cannot draw {}: {e}", file.display())
}

/// One labelled line of a chart.
#[derive(Debug, Clone)]
pub struct Line {
    /// Its legend.
    pub label: String,
    /// Its colour.
    pub color: RGBColor,
    /// (x, y) points; non-finite y are left out.
    pub points: Vec<(f64, f64)>,
}

/// A chart of labelled lines: its caption and axes.
pub struct LineChart<'a> {
    /// The caption.
    pub caption: &'a str,
    /// Its font size.
    pub caption_size: u32,
    /// What the x axis measures.
    pub x_desc: &'a str,
    /// What the y axis measures.
    pub y_desc: &'a str,
    /// The x range.
    pub x: std::ops::Range<f64>,
    /// The top of the y axis (it starts at 0).
    pub y_max: f64,
    /// How many x labels at most.
    pub x_labels: usize,
    /// How an x value reads (None: as a number).
    pub x_label: Option<&'a dyn Fn(&f64) -> String>,
    /// A dot at every point, for lines of a few measured points.
    pub markers: bool,
}

impl std::fmt::Debug for LineChart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineChart")
            .field("caption", &self.caption)
            .field("x", &self.x)
            .field("y_max", &self.y_max)
            .finish_non_exhaustive()
    }
}

impl LineChart<'_> {
    /// Draws `lines` on `area`, with the legend in the upper left.
    pub fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        file: &Path,
        lines: Vec<Line>,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let err = |e: &dyn std::fmt::Display| draw_error(file, e);
        let mut chart = ChartBuilder::on(area)
            .caption(self.caption, ("sans-serif", self.caption_size))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(self.x.clone(), 0.0..self.y_max)
            .map_err(|e| err(&e))?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .x_labels(self.x_labels);
        if let Some(format) = self.x_label {
            mesh.x_label_formatter(format);
        }
        mesh.draw().map_err(|e| err(&e))?;
        for line in lines {
            let color = line.color;
            let points: Vec<(f64, f64)> = line
                .points
                .into_iter()
                .filter(|(_, y)| y.is_finite())
                .collect();
            if self.markers {
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(|e| err(&e))?;
            }
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
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
        Ok(())
    }
}

/// A chart of labelled lines over `0..x_max` x `0..y_max` on `area`, with its legend in the
/// upper left (a [`LineChart`] with plain axes).
pub fn line_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    file: &Path,
    caption: &str,
    caption_size: u32,
    (x_desc, y_desc): (&str, &str),
    (x_max, y_max): (f64, f64),
    lines: Vec<Line>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    LineChart {
        caption,
        caption_size,
        x_desc,
        y_desc,
        x: 0.0..x_max,
        y_max,
        x_labels: 10,
        x_label: None,
        markers: false,
    }
    .draw(area, file, lines)
}

/// One bar of a stacked bar chart: its label and its parts, in the same order in every bar
/// (the first bar's part names make the legend).
#[derive(Debug, Clone)]
pub struct Bar {
    /// Its label, left of the bar.
    pub label: String,
    /// (part, value), drawn left to right.
    pub parts: Vec<(String, f64)>,
}

const PALETTE: [RGBColor; 7] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xba, 0xb0, 0xac),
];

/// Horizontal stacked bars, one per `bars` entry, written to `file` as SVG.
pub fn stacked_bars(file: &Path, caption: &str, x_desc: &str, bars: &[Bar]) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| draw_error(file, e);
    let total = bars
        .iter()
        .map(|b| b.parts.iter().map(|x| x.1).sum::<f64>())
        .fold(1e-9, f64::max);
    let rows = bars.len().max(1);
    let root = SVGBackend::new(file, (1100, 160 + 70 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let labels: Vec<&str> = bars.iter().map(|b| b.label.as_str()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(260)
        .build_cartesian_2d(0.0..total * 1.15, -0.5..rows as f64 - 0.5)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            labels
                .get(i as usize)
                .map_or_else(String::new, |l| l.to_string())
        })
        .x_desc(x_desc)
        .draw()
        .map_err(|e| err(&e))?;
    let parts: Vec<&str> = bars
        .first()
        .map(|b| b.parts.iter().map(|x| x.0.as_str()).collect())
        .unwrap_or_default();
    for (k, part) in parts.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = bars
            .iter()
            .enumerate()
            .map(|(i, bar)| {
                let x0: f64 = bar.parts.iter().take(k).map(|x| x.1).sum();
                let x1 = x0 + bar.parts.get(k).map_or(0.0, |x| x.1);
                let y = i as f64;
                Rectangle::new([(x0, y - 0.3), (x1, y + 0.3)], color.filled())
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| err(&e))?
            .label(*part)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
