//! gigas-loadgen: the load generator (signed transactions sent over JSON-RPC at a rate, with
//! inclusion seen over WebSocket), the benchmark genesis and its cache, the Zipf-Mandelbrot
//! draws and the charts: what `gigas-bench` and `gigas-devnet` share. How a report is laid
//! out is `gigas-report`'s.
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
