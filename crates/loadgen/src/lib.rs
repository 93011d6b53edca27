//! gigas-loadgen: the load generator (signed transactions sent over JSON-RPC at a rate, with
//! inclusion seen over WebSocket), the benchmark genesis and its cache, the Zipf-Mandelbrot
//! draws, the charts and the report writer: what `gigas-bench` and `gigas-devnet` share.
//!
//! Owns: generating and sending load and reporting what it saw. Must not: hold a benchmark
//! (those are `gigas-bench`'s) or depend on the devnet or the benchmarks.

#![warn(missing_docs)]

pub mod chart;
pub mod load;
pub mod zipf;

/// `../shared/data/<rest>` from the working directory, or else from the checkout this binary
/// was built from.
pub fn shared_data(rest: &str) -> std::path::PathBuf {
    let relative = std::path::PathBuf::from("../shared/data").join(rest);
    if relative.exists() {
        return relative;
    }
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(rest)
}

/// Writes `NAME.json` (the report) and `NAME.md` (its Markdown) under `out`, prints the
/// Markdown and where both went: every benchmark ends this way.
pub fn write_report<T: serde::Serialize>(
    out: &std::path::Path,
    name: &str,
    report: &T,
    markdown: &str,
) -> eyre::Result<()> {
    use eyre::WrapErr;
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

/// The median of `values` (0 for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
