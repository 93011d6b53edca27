//! Flame graphs of call-stack profiles, drawn from folded stacks with the `inferno` crate
//! (a Rust port of Brendan Gregg's FlameGraph).
//!
//! Owns: the drawing options. Must not: build the stacks (`stacks` does).

use std::path::Path;

/// Draws `folded` lines (`frame;frame;… count`) into an SVG at `path`, titled `title`, its
/// counts in `unit`.
pub fn write_svg(folded: &[String], title: &str, unit: &str, path: &Path) -> std::io::Result<()> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.count_name = unit.to_string();
    // Frames narrower than this many pixels are left out of the SVG (their time still
    // counts in their parents): the mainnet blocks make tens of thousands of call paths.
    options.min_width = 0.05;
    let file = std::fs::File::create(path)?;
    let writer = std::io::BufWriter::new(file);
    if folded.is_empty() {
        // inferno refuses an empty profile; an empty profile is still a valid answer
        // (a filter that matched nothing), drawn as a graph with a note.
        return write_empty(writer, title);
    }
    inferno::flamegraph::from_lines(&mut options, folded.iter().map(String::as_str), writer)
        .map_err(std::io::Error::other)
}

fn write_empty(mut writer: impl std::io::Write, title: &str) -> std::io::Result<()> {
    write!(
        writer,
        "<?xml version=\"1.0\" standalone=\"no\"?>\n<svg version=\"1.1\" width=\"1200\" height=\"60\" \
         xmlns=\"http://www.w3.org/2000/svg\"><text x=\"600\" y=\"24\" text-anchor=\"middle\">{}</text>\
         <text x=\"600\" y=\"48\" text-anchor=\"middle\">no samples matched</text></svg>\n",
        title.replace('&', "&amp;").replace('<', "&lt;")
    )
}
