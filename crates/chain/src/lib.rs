//! The chain a Gigas node runs, shared by the sequencer, the full node, the devnet and the
//! benchmarks (after reth's `crates/chainspec`).
//!
//! Owns:
//! - [`spec`]: the chain spec file ([`ChainConfig`]), the dev chain from the well-known test
//!   mnemonic, the genesis state and its writes, the public spec a follower is given, and the
//!   benchmark accounts' keys ([`bench_key`]);
//! - [`bench`]: the benchmark genesis: N accounts derived from a seed into an addresses file,
//!   built once and kept, and an ERC-20 token (WETH9's mainnet code) holding a balance for each.
//!
//! Must not: run a node, open a store, or know about RPC. The genesis is a pure function of
//! the spec, so that every node given the same file derives the same genesis hash and state.

pub mod bench;
pub mod spec;

pub use spec::*;
