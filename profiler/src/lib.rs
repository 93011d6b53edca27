//! gigas-profiler: where an EVM client spends its time.
//!
//! Replays blocks through an instrumented revm (the probe of `gigas_evm::probe`) and produces
//! the opcode cost table of the MegaETH talk (count, time, share, cumulative share, cost per
//! call, category), time outside opcodes, the JIT ceiling, CSV, JSON, Markdown and SVG charts.
//! It reports its own overhead against a plain run in the same process.
//!
//! With call stacks on (the default), every sample also names the call path it was taken in,
//! and [`calls`] reports time by contract, function and transaction, with folded stacks, a
//! flame graph and a pprof profile.
//!
//! Owns: the sampler, categories, the measurement protocol, the reports, and `fetch`, which
//! writes block fixtures from a node's RPC. Must not configure
//! revm itself: every EVM it runs comes from `gigas-evm`.

#![warn(missing_docs)]

pub mod affinity;
pub mod calibrate;
pub mod calls;
pub mod category;
pub mod chart;
pub mod cli;
pub mod fetch;
pub mod flame;
pub mod labels;
pub mod pprof;
pub mod replay;
pub mod report;
pub mod sampler;
pub mod stacks;
