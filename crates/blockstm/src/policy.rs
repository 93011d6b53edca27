//! When to run a block in parallel, and the sequential path for when not to.
//!
//! Block-STM pays per transaction for its multi-version machinery and per block for starting
//! workers. A block with few transactions, or with cheap ones (plain transfers, whose
//! execution costs about as much as the bookkeeping around it), or run on one thread, is
//! faster sequentially. The policy has two thresholds: the transaction count, and the average
//! gas limit per transaction (known before execution, unlike the gas used, and the best
//! predictor of per-transaction work the shipped blocks offer). `gigas-bench blockstm`
//! measures, per mainnet block, sequential against parallel time and picks the pair of
//! thresholds that minimises the total; [`Policy::default`] holds the values measured on the
//! reference machine. Every decision is counted in [`Metrics`].
//!
//! Inside a parallel block, the executor's [`crate::Bailout`] is the second line of defence:
//! a block that turns out to conflict heavily finishes sequentially.

use std::fmt;

use gigas_evm::revm::database_interface::DatabaseRef;
use gigas_evm::{ExecutionError, PreparedBlock};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::executor::{execute_sequential, ParallelOutcome};

/// How a block was executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One transaction after another on plain revm.
    Sequential,
    /// Block-STM with this many workers.
    Parallel(usize),
}

/// The thresholds between the two strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Blocks with fewer transactions run sequentially.
    pub min_parallel_txs: usize,
    /// Blocks whose transactions' gas limits average less run sequentially.
    pub min_avg_gas_limit: u64,
}

impl Default for Policy {
    /// The thresholds `gigas-bench blockstm` measured on the 2-core reference machine over
    /// the 50 shipped mainnet blocks with 2 threads: over four runs it chose at least 18
    /// transactions (once 58) and an average gas limit of at least 80,897 (once 65,491) per
    /// transaction. Blocks of old-style plain transfers (21,000 to about 50,000 gas) and tiny
    /// blocks run sequentially.
    fn default() -> Self {
        Self {
            min_parallel_txs: 18,
            min_avg_gas_limit: 80_000,
        }
    }
}

impl Policy {
    /// The average gas limit of `block`'s transactions (0 for an empty block).
    pub fn avg_gas_limit(block: &PreparedBlock) -> u64 {
        let n = block.txs.len() as u128;
        if n == 0 {
            return 0;
        }
        let total: u128 = block.txs.iter().map(|tx| tx.env.gas_limit as u128).sum();
        (total / n) as u64
    }

    /// The strategy for `block` with `threads` available.
    pub fn choose(&self, block: &PreparedBlock, threads: usize) -> Strategy {
        if threads <= 1
            || block.txs.len() < self.min_parallel_txs
            || Self::avg_gas_limit(block) < self.min_avg_gas_limit
        {
            Strategy::Sequential
        } else {
            Strategy::Parallel(threads)
        }
    }
}

/// Counters of the decisions, for the node's `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// Blocks executed in parallel.
    pub parallel_blocks: Counter,
    /// Blocks executed sequentially by the policy.
    pub sequential_blocks: Counter,
    /// Incarnations aborted by validation.
    pub aborts: Counter,
    /// Transactions executed more than once (executions minus transactions).
    pub re_executions: Counter,
    /// Parallel blocks that bailed out and finished sequentially.
    pub bailouts: Counter,
}

impl Metrics {
    /// Counts what the scheduler did in one parallel block of `txs` transactions.
    pub(crate) fn record(&self, stats: &crate::Stats, txs: usize) {
        self.aborts.inc_by(stats.aborts as u64);
        if stats.sequential_from.is_some() {
            self.bailouts.inc();
        }
        self.re_executions
            .inc_by(stats.executions.saturating_sub(txs) as u64);
    }

    /// Registers the counters under `gigas_blockstm_*`.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("gigas_blockstm");
        sub.register(
            "parallel_blocks",
            "Blocks executed with Block-STM",
            self.parallel_blocks.clone(),
        );
        sub.register(
            "sequential_blocks",
            "Blocks the policy executed sequentially",
            self.sequential_blocks.clone(),
        );
        sub.register(
            "aborts",
            "Incarnations aborted by validation",
            self.aborts.clone(),
        );
        sub.register(
            "bailouts",
            "Parallel blocks that bailed out to sequential execution within the block",
            self.bailouts.clone(),
        );
        sub.register(
            "re_executions",
            "Executions beyond one per transaction",
            self.re_executions.clone(),
        );
    }
}

/// [`crate::ParallelExecutor::execute_with_policy`] on a fresh executor with `threads` workers
/// (a node keeps one executor instead, to reuse its memory from block to block).
pub fn execute_block_with_policy<B>(
    block: &PreparedBlock,
    base: &B,
    threads: usize,
    policy: &Policy,
    metrics: &Metrics,
) -> Result<(Strategy, ParallelOutcome), ExecutionError>
where
    B: DatabaseRef + Sync,
    B::Error: fmt::Display,
{
    crate::ParallelExecutor::new(threads).execute_with_policy(block, base, policy, metrics)
}

/// Executes `block` one transaction after another and returns what
/// [`execute_block_parallel`] returns: each transaction's changes without the fee, and the fee.
///
/// Runs the same loop as the sequential tail of a Block-STM block that bailed out, from the
/// first transaction; [`ParallelOutcome::stats`] counts one execution per transaction and
/// nothing else ([`crate::Stats::sequential_from`] is `None`: no parallel phase ran).
pub fn execute_block_sequential<B>(
    block: &PreparedBlock,
    base: &B,
) -> Result<ParallelOutcome, ExecutionError>
where
    B: DatabaseRef,
    B::Error: fmt::Display,
{
    execute_sequential(block, base, None, false)
}
