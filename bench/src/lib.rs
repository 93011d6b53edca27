//! gigas-bench: Gigas's macro-benchmarks, each a subcommand of the `gigas-bench` binary.
//!
//! Owns: workloads (generated with a fixed seed, or the shipped data), the measurement
//! protocol of `shared/BENCHMARKING.md` (configuration printed first, engines alternated in one
//! run, JSON + Markdown + SVG out). Must not: contain the systems it measures; it drives them
//! through their public APIs.

#![warn(missing_docs)]

pub mod storage;
pub mod zipf;
