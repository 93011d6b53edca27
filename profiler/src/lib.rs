//! gigas-profiler: where an EVM client spends its time.
//!
//! Replays blocks through an instrumented revm (the probe of `gigas_evm::probe`) and produces
//! the opcode cost table of the MegaETH talk (count, time, share, cumulative share, cost per
//! call, category), time outside opcodes, the JIT ceiling, CSV, JSON, Markdown and SVG charts.
//! It reports its own overhead against a plain run in the same process.
//!
//! Owns: the sampler, categories, the measurement protocol, the report, and `fetch`, which
//! writes block fixtures from a node's RPC. Must not configure
//! revm itself: every EVM it runs comes from `gigas-evm`.

#![warn(missing_docs)]

pub mod affinity;
pub mod calibrate;
pub mod category;
pub mod chart;
pub mod cli;
pub mod fetch;
pub mod replay;
pub mod report;
pub mod sampler;
