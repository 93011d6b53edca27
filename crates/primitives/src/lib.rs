//! Types shared by every Gigas crate.
//!
//! Owns the chain specification (which hardfork is active at a given block number and
//! timestamp), the [`ChangeSet`] (the canonical, byte-identical result of a block that storage,
//! state diffs and the state's commitments are derived from), the layout of state in a key-value store
//! ([`state_keys`]), the lattice hash of a state ([`lattice`]), Keccak-256 of many messages at once
//! ([`keccak`]), the keccak of every key a ChangeSet changes ([`hashed`]) and the description
//! of the machine a
//! measurement ran on ([`machine`]). It must
//! stay free of any EVM implementation: mapping a [`Hardfork`] to a revm
//! spec is the job of `gigas-evm`, the one crate that configures revm.

#![warn(missing_docs)]

pub mod chainspec;
pub mod changeset;
pub mod duration;
pub mod hashed;
pub mod keccak;
mod keystream;
pub mod lattice;
pub mod machine;
pub mod state_keys;

pub use chainspec::{Activation, ChainSpec, Hardfork};
pub use changeset::{
    AccountChange, AccountState, ChangeSet, ChangeSetBuilder, ChangeSetError, CHANGESET_MAGIC,
};
pub use hashed::HashedKeys;
pub use lattice::LatticeHash;
pub use machine::Machine;
