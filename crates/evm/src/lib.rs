//! The one place Gigas configures revm.
//!
//! Owns: choosing the revm spec and gas parameters for a hardfork ([`spec`]), building block
//! and transaction environments from alloy types ([`env`]), loading the mainnet fixtures in
//! `shared/data/mainnet` ([`fixture`]), executing a block sequentially and checking it against
//! its header ([`executor`], [`receipts`]), and the low-cost instrumentation hooks the profiler
//! uses ([`probe`], with the calling-context tree of [`callstack`]), compiled code ([`jit`]) and the state-test runner that checks it
//! ([`statetest`]), and executions for RPC clients ([`call`]) under the bounds of
//! [`budget`].
//!
//! Must not: know about reports, storage engines or networking. Every other crate that runs
//! the EVM goes through this one, so that a fork or gas rule is configured exactly once.

#![warn(missing_docs)]

pub mod budget;
pub mod call;
pub mod callstack;
pub mod changeset;
pub mod env;
pub mod executor;
pub mod fixture;
pub mod jit;
pub mod probe;
pub mod program;
pub mod receipts;
pub mod spec;
pub mod statetest;
pub mod trace;

pub use changeset::BlockChanges;
pub use executor::{
    execute_block, BlockEvm, BlockOutcome, ExecutionError, PlainEvm, PreparedBlock, PreparedTx,
    TxError,
};
pub use fixture::{load_fixture, load_fixtures_dir, BlockFixture, FixtureError};
pub use receipts::{BlockCheck, HeaderMismatch};

/// Re-export of revm, so that users of this crate name the same version.
pub use revm;

/// The revm release this crate is built and checked against (the workspace pins it).
pub const REVM_VERSION: &str = "43.0.3";
