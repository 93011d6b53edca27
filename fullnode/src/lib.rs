//! gigas-fullnode: a full node that follows the sequencer without re-executing.
//!
//! **Owns:** following the sequencer's diff archive (catch-up by HTTP ranges, then the
//! WebSocket push, with reconnects), verifying every diff before any of it is written
//! ([`apply::Applier`]), applying verified diffs into [`gigas_statedb`] in grouped write
//! transactions, keeping the MPT root every K blocks, optional re-execution of each block to
//! check the diff, serving each block as soon as it is applied (from memory until its group
//! commits, [`window`], logged so that a kill loses none, [`wal`]), the read-only JSON-RPC
//! over its state, and its metrics; starting from a verified snapshot instead of the genesis
//! ([`bootstrap`]), and writing and serving snapshots of its own state ([`snapshots`]).
//!
//! **Must not:** accept transactions (writes are refused with the sequencer's URL), apply a
//! diff that failed verification or part of one, report a block as applied before it is
//! logged or committed, or hold unbounded queues (the fetcher stays a bounded number of
//! blocks ahead of the apply thread; the blocks served from memory are one group).

pub mod ahead;
pub mod alloc;
pub mod apply;
pub mod bootstrap;
pub mod cli;
pub mod decode;
pub mod fetch;
pub mod follow;
pub mod genesis;
pub mod memory;
pub mod metrics;
pub mod node;
pub mod prefetch;
pub mod reexec;
pub mod rpc;
pub mod snapshots;
pub mod status;
pub mod wal;
pub mod window;
