//! gigas-bench: Gigas's macro-benchmarks, each a subcommand of the `gigas-bench` binary.
//!
//! Owns: workloads (generated with a fixed seed, or the shipped data), the measurement
//! protocol of `shared/BENCHMARKING.md` (configuration printed first, engines alternated in one
//! run, JSON + Markdown + SVG out). Must not: contain the systems it measures; it drives them
//! through their public APIs.

#![warn(missing_docs)]

pub mod blockstm;
pub mod bootstrap;
pub mod commitment;
pub mod cpus;
pub mod diffs;
pub mod experiments;
pub mod fullnode;
pub mod fuzz;
pub mod jit;
pub mod storage;

// The load generator and what it shares with the benchmarks live in `gigas-loadgen` (the
// devnet uses them too); re-exported so that the benchmarks' paths stay as they were.
pub use gigas_loadgen::{chart, load, shared_data, zipf};
pub use gigas_report::{build_profile, median, write_report, Table};
