//! Types shared by every Gigas crate.
//!
//! Owns the chain specification (which hardfork is active at a given block number and
//! timestamp) and the description of the machine a measurement ran on ([`machine`]). It must
//! stay free of any EVM implementation: mapping a [`Hardfork`] to a revm
//! spec is the job of `gigas-evm`, the one crate that configures revm.

#![warn(missing_docs)]

pub mod chainspec;
pub mod machine;

pub use chainspec::{Activation, ChainSpec, Hardfork};
pub use machine::Machine;
