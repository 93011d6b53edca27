//! Block-STM parallel execution of EVM blocks over gigas-evm.
//!
//! After Gelashvili et al., "Block-STM: Scaling Blockchain Execution by Turning Ordering Curse
//! to a Performance Blessing" (PPoPP 2023), and Aptos's block-executor: optimistic parallel
//! execution in the block's preset order, a multi-version memory of every write keyed by
//! (transaction, incarnation), validation of each transaction's read set, ESTIMATE markers left
//! by aborted incarnations, and a collaborative scheduler driven by two atomic indices
//! ([`scheduler`] describes it in words). The result is the sequential one: each transaction's
//! final state changes are committed in block order by the caller.
//!
//! Owns: the scheduler, the multi-version memory and the view of state each incarnation reads.
//! Must not: configure revm (it runs `gigas_evm::PlainEvm`), or decide what a block contains.
//!
//! State is modelled at three kinds of location: an account (balance, nonce, code), a storage
//! wipe of an account (contract creation or self-destruct), and a storage slot. A slot read
//! resolves against both its own writes and the account's wipes, so an account created,
//! destroyed and re-created in one block reads exactly as in sequential execution.

#![warn(missing_docs)]

pub mod executor;
pub mod mvmemory;
pub mod policy;
pub mod scheduler;

pub use executor::{
    execute_block_parallel, execute_block_parallel_into, Bailout, ParallelExecutor,
    ParallelOutcome, Stats,
};
pub use policy::{execute_block_sequential, execute_block_with_policy, Metrics, Policy, Strategy};
