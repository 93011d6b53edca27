//! gigas-report: how a measurement is written down. Every report of the profiler, the
//! benchmarks, the load generator and the devnet is a JSON file for machines and a Markdown
//! file for people; this crate holds what they share: the Markdown table ([`Table`]), the
//! pair of files ([`write_report`]), the build profile each report states first
//! ([`build_profile`]) and the median ([`median`]).
//!
//! **Owns:** the shape of a report's files and tables.
//!
//! **Must not:** measure anything, or depend on another Gigas crate: what a report says is
//! its caller's; how it is laid out is this crate's.

mod table;

pub use table::{Align, Table};

use std::path::Path;

use eyre::WrapErr;

/// Writes `NAME.json` (the report) and `NAME.md` (its Markdown) under `out`, prints the
/// Markdown and where both went: every benchmark ends this way.
pub fn write_report<T: serde::Serialize>(
    out: &Path,
    name: &str,
    report: &T,
    markdown: &str,
) -> eyre::Result<()> {
    std::fs::create_dir_all(out).wrap_err_with(|| format!("cannot create {}", out.display()))?;
    let json = out.join(format!("{name}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(report)?)
        .wrap_err_with(|| format!("cannot write {}", json.display()))?;
    let md = out.join(format!("{name}.md"));
    std::fs::write(&md, markdown).wrap_err_with(|| format!("cannot write {}", md.display()))?;
    println!("{markdown}");
    println!(
        "report written to {}/ ({name}.md, {name}.json)",
        out.display()
    );
    Ok(())
}

/// The profile this binary was built with, for the configuration every report prints first
/// (a debug build's figures mean nothing).
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The median of `values` (0 for none; the mean of the middle two for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn a_report_is_a_json_and_a_markdown_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let out = dir.path().join("nested/out");
        write_report(&out, "r", &serde_json::json!({"x": 1}), "# r\n").expect("written");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("r.json")).expect("json"))
                .expect("parses");
        assert_eq!(json["x"], 1);
        assert_eq!(
            std::fs::read_to_string(out.join("r.md")).expect("md"),
            "# r\n"
        );
    }
}
