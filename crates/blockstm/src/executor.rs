//! Running a block with Block-STM over revm.

use std::fmt;
use std::sync::Arc;

use alloy_primitives::{Address, B256, U256};
use gigas_evm::jit::CodeCache;
use gigas_evm::receipts::TxReceipt;
use gigas_evm::{
    BlockChanges, BlockEvm, BlockOutcome, ExecutionError, PlainEvm, PreparedBlock, TxError,
};
use revm::context::result::{EVMError, InvalidTransaction};
use revm::database::CacheDB;
use revm::database_interface::WrapDatabaseRef;
use revm::database_interface::{Database, DatabaseCommit, DatabaseRef};
use revm::state::EvmState;

use crate::mvmemory::MvMemory;

mod view;
mod worker;

use worker::{run_block, Collect, CommitInto, OutputSlot, Sink};

// Names the tests (`use super::*`) take from here that only the child modules use.
#[cfg(test)]
use std::collections::HashMap;
#[cfg(test)]
use std::sync::Mutex;

#[cfg(test)]
use crate::mvmemory::{Location, Value};
#[cfg(test)]
use revm::context::result::ExecutionResult;
#[cfg(test)]
use revm::state::{AccountInfo, Bytecode};
#[cfg(test)]
use view::{write_set, MvDb};

/// Counters of one parallel block execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Incarnations executed to the end (a transaction executed once counts one), the
    /// sequential ones after a bailout included.
    pub executions: usize,
    /// Validations run.
    pub validations: usize,
    /// Validations that aborted an incarnation.
    pub aborts: usize,
    /// Executions that stopped on an ESTIMATE and waited for another transaction.
    pub waits: usize,
    /// Executions that waited for the previous transaction of the same sender.
    pub sender_waits: usize,
    /// Times the in-order committer found the next transaction's reads out of date and left
    /// it for later.
    pub commit_checks_failed: usize,
    /// Set when the block conflicted too much to gain from parallel execution: transactions
    /// from this index on were executed sequentially after the committed prefix.
    pub sequential_from: Option<usize>,
}

/// A transaction a block builder left out of its block: invalid where it stood (a nonce an
/// earlier transaction's EIP-7702 authorization moved, a balance an earlier transaction
/// spent). It changed nothing, has no receipt and paid no fee.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// Its index in the block as given to the executor.
    pub index: usize,
    /// Its hash.
    pub hash: B256,
    /// Why revm refused it.
    pub reason: InvalidTransaction,
}

/// A block executed in parallel: the same outcome as sequential execution, and each
/// transaction's state changes to commit in order.
#[derive(Debug)]
pub struct ParallelOutcome {
    /// Receipts, as sequential execution gives them, one per transaction not skipped.
    pub outcome: BlockOutcome,
    /// Each included transaction's state changes, in block order, without the beneficiary's
    /// fee.
    pub states: Vec<EvmState>,
    /// Each included transaction's fee to the beneficiary.
    pub fees: Vec<U256>,
    /// The transactions left out, in block order; only a builder's executor (see
    /// [`ParallelExecutor::building`]) skips, any other stops at an invalid transaction.
    pub skipped: Vec<Skipped>,
    /// The block's beneficiary.
    pub beneficiary: Address,
    /// What the scheduler did.
    pub stats: Stats,
}

impl ParallelOutcome {
    /// Commits every transaction's changes, in order, into `db`, and pays the beneficiary.
    ///
    /// Sequential execution credits the fee after each transaction; only the final balance is
    /// state, so the fees since the last transaction that wrote the beneficiary itself (whose
    /// write already holds every fee before it) are credited once, at the end.
    pub fn commit_into<DB: Database + DatabaseCommit>(self, db: &mut DB) -> Result<(), DB::Error> {
        if self.states.is_empty() {
            // No transaction, no fee, and the beneficiary is not even touched.
            return Ok(());
        }
        let last_writer = self
            .states
            .iter()
            .rposition(|s| s.get(&self.beneficiary).is_some_and(|a| a.is_touched()))
            .unwrap_or(0);
        let unpaid = self.fees[last_writer.min(self.fees.len())..]
            .iter()
            .fold(U256::ZERO, |acc, fee| acc.saturating_add(*fee));
        for state in self.states {
            db.commit(state);
        }
        pay_beneficiary(db, self.beneficiary, unpaid)
    }
}

/// Credits `amount` to `beneficiary` in `db` and marks it touched, as revm's reward does at
/// the end of a transaction (a zero reward still touches the account).
pub(crate) fn pay_beneficiary<DB: Database + DatabaseCommit>(
    db: &mut DB,
    beneficiary: Address,
    amount: U256,
) -> Result<(), DB::Error> {
    let mut account = revm::state::Account::from(db.basic(beneficiary)?.unwrap_or_default());
    account.info.balance = account.info.balance.saturating_add(amount);
    account.mark_touch();
    let mut reward = EvmState::default();
    reward.insert(beneficiary, account);
    db.commit(reward);
    Ok(())
}

/// When to give up on parallel execution of a block that turns out not to gain from it.
///
/// Two things make a block lose: conflicts and cheap transactions. Conflicts are aborted
/// incarnations plus executions that stopped on an ESTIMATE: each one is wasted work. Cheap
/// transactions (plain transfers) cost about as much to execute as the multi-version
/// bookkeeping around them. Once `after_executions` executions ran, the block goes sequential
/// if conflicts exceed `conflicts_per_execution` of the executions, or if executions took
/// less than `min_execution_ns` on average: the workers stop, the committed prefix is kept,
/// and the rest of the block runs sequentially. A losing block then costs about its
/// sequential time plus the first `after_executions` executions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bailout {
    /// Executions to see before judging.
    pub after_executions: usize,
    /// Conflicts per execution above which the block goes sequential.
    pub conflicts_per_execution: f64,
    /// Average execution time (nanoseconds, in the parallel executor) below which the block
    /// goes sequential.
    pub min_execution_ns: u64,
}

impl Default for Bailout {
    /// Measured with `gigas-bench blockstm` on the reference machine (2 threads): the
    /// dependent chain runs at about 0.5 conflicts per execution or more, while mainnet blocks
    /// that still gain from parallel execution run at up to about 0.3; blocks whose
    /// transactions execute in less than about 6 us each in the parallel executor (plain
    /// transfers take 2 to 4 us) lose to sequential execution.
    fn default() -> Self {
        Self {
            after_executions: 48,
            conflicts_per_execution: 0.5,
            min_execution_ns: 6_000,
        }
    }
}

/// A Block-STM executor that keeps its multi-version memory and output slots from block to
/// block (a sequencer runs one for its lifetime; its tables then cost no allocation and no
/// page faults per block).
pub struct ParallelExecutor {
    threads: usize,
    bailout: Option<Bailout>,
    skip_invalid: bool,
    jit: Option<Arc<CodeCache>>,
    mv: MvMemory,
    outputs: Vec<OutputSlot>,
}

impl fmt::Debug for ParallelExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParallelExecutor")
            .field("threads", &self.threads)
            .field("bailout", &self.bailout)
            .field("skip_invalid", &self.skip_invalid)
            .field("capacity", &self.outputs.len())
            .finish()
    }
}

/// What the parallel phase of a block produced.
struct Partial {
    receipts: Vec<TxReceipt>,
    cumulative_gas_used: u64,
    /// Transactions done (included or skipped), in order; fewer than the block's after a
    /// bailout.
    committed: usize,
    /// Their changes, fees deferred (see [`BlockChanges::fold_deferred`]).
    changes: BlockChanges,
    /// The transactions among them that were skipped.
    skipped: Vec<Skipped>,
    stats: Stats,
}

impl Partial {
    /// Nothing committed yet, room for `txs` receipts.
    fn empty(txs: usize, changes: BlockChanges) -> Self {
        Self {
            receipts: Vec::with_capacity(txs),
            cumulative_gas_used: 0,
            committed: 0,
            changes,
            skipped: Vec::new(),
            stats: Stats::default(),
        }
    }
}

impl Partial {
    /// The whole block done, each transaction's changes kept in `collect`: the outcome
    /// [`ParallelExecutor::execute`] and the sequential path return.
    fn into_outcome(self, block: &PreparedBlock, collect: Collect) -> ParallelOutcome {
        ParallelOutcome {
            outcome: BlockOutcome {
                number: block.number,
                receipts: self.receipts,
                changes: self.changes.finish(),
            },
            states: collect.states,
            fees: collect.fees,
            skipped: self.skipped,
            beneficiary: block.block_env.beneficiary,
            stats: self.stats,
        }
    }
}

impl ParallelExecutor {
    /// An executor with `threads` workers (the calling thread is one of them) and the
    /// default [`Bailout`].
    pub fn new(threads: usize) -> Self {
        Self {
            threads: threads.max(1),
            bailout: Some(Bailout::default()),
            skip_invalid: false,
            jit: None,
            mv: MvMemory::new(0),
            outputs: Vec::new(),
        }
    }

    /// Sets when to fall back to sequential execution within a block (`None`: never).
    pub fn with_bailout(mut self, bailout: Option<Bailout>) -> Self {
        self.bailout = bailout;
        self
    }

    /// A block builder's executor: a transaction that turns out invalid where it stands in
    /// the block (its nonce or balance changed by an earlier one) is left out in place, as
    /// geth's and reth's builders do, instead of failing the block, and the others run on.
    /// The whole block is still executed once: an attacker whose EIP-7702 authorizations
    /// invalidate a thousand pooled transactions costs a thousand cheap refusals, not a
    /// thousand executions of the block. Receipts and changes then cover only the included
    /// transactions; [`ParallelOutcome::skipped`] lists the others. A block that is not built
    /// here (replayed, verified) must not skip: an invalid transaction there is an error.
    pub fn building(mut self) -> Self {
        self.skip_invalid = true;
        self
    }

    /// Runs hot contracts as compiled code from `cache` in every worker and in the sequential
    /// paths (as the cache's mode decides; `None` or `JitMode::Off` interprets everything).
    pub fn with_jit(mut self, cache: Option<Arc<CodeCache>>) -> Self {
        self.jit = cache;
        self
    }

    /// Executes `block` as `policy` decides (sequentially or with this executor's workers),
    /// counting the decision and, for a parallel block, aborts, re-executions and bailouts in
    /// `metrics`. Both strategies return the same outcome and per-transaction changes.
    pub fn execute_with_policy<B>(
        &mut self,
        block: &PreparedBlock,
        base: &B,
        policy: &crate::Policy,
        metrics: &crate::Metrics,
    ) -> Result<(crate::Strategy, ParallelOutcome), ExecutionError>
    where
        B: DatabaseRef + Sync,
        B::Error: fmt::Display,
    {
        let strategy = policy.choose(block, self.threads);
        let outcome = match strategy {
            crate::Strategy::Sequential => {
                metrics.sequential_blocks.inc();
                execute_sequential(block, base, self.jit.as_ref(), self.skip_invalid)?
            }
            crate::Strategy::Parallel(_) => {
                metrics.parallel_blocks.inc();
                let outcome = self.execute(block, base)?;
                metrics.record(&outcome.stats, block.txs.len());
                outcome
            }
        };
        Ok((strategy, outcome))
    }

    /// Workers per block.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Executes `block` over `base` and returns every transaction's changes (for callers
    /// that need them one by one; [`Self::execute_into`] commits as execution goes).
    pub fn execute<B>(
        &mut self,
        block: &PreparedBlock,
        base: &B,
    ) -> Result<ParallelOutcome, ExecutionError>
    where
        B: DatabaseRef + Sync,
        B::Error: fmt::Display,
    {
        let beneficiary = block.block_env.beneficiary;
        let mut collect = Collect::default();
        let mut partial = self.run(block, base, &mut collect)?;
        if partial.committed < block.txs.len() {
            // The state after the committed prefix, fees paid as sequential execution pays
            // them, to continue from.
            let mut overlay = CacheDB::new(WrapDatabaseRef(base));
            for (state, fee) in collect.states.iter().zip(&collect.fees) {
                overlay.commit(state.clone());
                pay_beneficiary(&mut overlay, beneficiary, *fee)
                    .map_err(|e| beneficiary_error(block, partial.committed, e))?;
            }
            partial.stats.sequential_from = Some(partial.committed);
            finish_sequentially(
                block,
                self.jit.as_ref(),
                self.skip_invalid,
                &mut partial,
                overlay,
                Some(&mut collect),
            )?;
        }
        Ok(partial.into_outcome(block, collect))
    }

    /// Executes `block` over `base`, committing each transaction into `target` as soon as it
    /// is final (in block order, while later transactions still execute) and paying the
    /// beneficiary at the end: `target` then holds what sequential execution over a copy of
    /// `base` would.
    pub fn execute_into<B, DB>(
        &mut self,
        block: &PreparedBlock,
        base: &B,
        target: &mut DB,
    ) -> Result<(BlockOutcome, Stats), ExecutionError>
    where
        B: DatabaseRef + Sync,
        B::Error: fmt::Display,
        DB: Database + DatabaseCommit + Send,
        DB::Error: fmt::Display,
    {
        let mut sink = CommitInto { db: target };
        let mut partial = self.run(block, base, &mut sink)?;
        // The fees the ChangeSet credits are the ones the database is owed; the tail below
        // pays the beneficiary in every transaction, as revm does.
        if let Some(unpaid) = partial.changes.settle() {
            pay_beneficiary(sink.db, block.block_env.beneficiary, unpaid)
                .map_err(|e| beneficiary_error(block, partial.committed, e))?;
        }
        if partial.committed < block.txs.len() {
            partial.stats.sequential_from = Some(partial.committed);
            finish_sequentially(
                block,
                self.jit.as_ref(),
                self.skip_invalid,
                &mut partial,
                &mut *sink.db,
                None,
            )?;
        }
        let outcome = BlockOutcome {
            number: block.number,
            receipts: partial.receipts,
            changes: partial.changes.finish(),
        };
        Ok((outcome, partial.stats))
    }

    /// Runs the block, handing final transactions to `sink` in order.
    fn run<B>(
        &mut self,
        block: &PreparedBlock,
        base: &B,
        sink: &mut dyn Sink,
    ) -> Result<Partial, ExecutionError>
    where
        B: DatabaseRef + Sync,
        B::Error: fmt::Display,
    {
        let n = block.txs.len();
        self.mv.reset(n);
        for slot in self.outputs.iter_mut().take(n) {
            *slot
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        self.outputs
            .resize_with(n.max(self.outputs.len()), Default::default);
        run_block(
            block,
            base,
            self.jit.as_ref(),
            self.threads,
            self.bailout,
            self.skip_invalid,
            &self.mv,
            &self.outputs[..n],
            sink,
        )
    }
}

fn beneficiary_error(block: &PreparedBlock, index: usize, e: impl fmt::Display) -> ExecutionError {
    let index = index.min(block.txs.len().saturating_sub(1));
    ExecutionError::Transaction {
        block: block.number,
        index,
        hash: block.txs.get(index).map(|tx| tx.hash).unwrap_or_default(),
        error: TxError::Database(format!("the beneficiary's account: {e}")),
    }
}

/// A fold of `block`'s changes whose fees are paid at the end, starting from the
/// beneficiary's account in `base`.
fn deferred_changes<B>(block: &PreparedBlock, base: &B) -> Result<BlockChanges, ExecutionError>
where
    B: DatabaseRef,
    B::Error: fmt::Display,
{
    let beneficiary = block.block_env.beneficiary;
    let pre = base
        .basic_ref(beneficiary)
        .map_err(|e| beneficiary_error(block, 0, e))?;
    Ok(BlockChanges::deferring(block.spec(), beneficiary, pre))
}

/// Executes the transactions after the committed prefix one after another over `db`, which
/// holds the state after that prefix with every fee paid. With `collect`, each transaction's
/// changes and fee are also kept, as the parallel phase keeps them. With `skip_invalid`, an
/// invalid transaction is recorded as skipped and changes nothing.
///
/// This is the crate's only sequential loop: the tail of a block that bailed out and, from
/// an empty prefix, the whole block in [`execute_sequential`]. It leaves
/// [`Stats::sequential_from`] to the caller, which alone knows whether a bailout happened.
fn finish_sequentially<D>(
    block: &PreparedBlock,
    jit: Option<&Arc<CodeCache>>,
    skip_invalid: bool,
    partial: &mut Partial,
    db: D,
    mut collect: Option<&mut Collect>,
) -> Result<(), ExecutionError>
where
    D: Database + DatabaseCommit,
    D::Error: fmt::Display,
{
    let from = partial.committed;
    let beneficiary = block.block_env.beneficiary;
    let mut evm = PlainEvm::with_code_cache(db, block, jit.cloned());
    for (index, tx) in block.txs.iter().enumerate().skip(from) {
        let failed = |e: EVMError<D::Error, InvalidTransaction>| ExecutionError::Transaction {
            block: block.number,
            index,
            hash: tx.hash,
            error: e.into(),
        };
        let executed = match collect.as_deref_mut() {
            Some(collect) => match evm.transact_deferring_reward(tx.env.clone()) {
                Ok((done, fee)) => {
                    partial.changes.fold_deferred(&done.state, fee);
                    collect.states.push(done.state.clone());
                    collect.fees.push(fee);
                    evm.db_mut().commit(done.state);
                    pay_beneficiary(evm.db_mut(), beneficiary, fee)
                        .map_err(|e| beneficiary_error(block, index, e))?;
                    Ok(done.result)
                }
                Err(e) => Err(e),
            },
            None => match evm.transact(tx.env.clone()) {
                Ok(done) => {
                    partial.changes.fold(&done.state);
                    BlockEvm::commit(&mut evm, done.state);
                    Ok(done.result)
                }
                Err(e) => Err(e),
            },
        };
        match executed {
            Ok(result) => partial.receipts.push(TxReceipt::after(
                tx.tx_type,
                result,
                &mut partial.cumulative_gas_used,
            )),
            // Refused before it ran: nothing of it is in `evm`'s state.
            Err(EVMError::Transaction(reason)) if skip_invalid => partial.skipped.push(Skipped {
                index,
                hash: tx.hash,
                reason,
            }),
            Err(e) => return Err(failed(e)),
        }
        partial.committed += 1;
        partial.stats.executions += 1;
    }
    Ok(())
}

/// Executes `block` over `base` one transaction after another, with no Block-STM machinery,
/// and returns what [`execute_block_parallel`] returns: each transaction's changes without the
/// fee, and the fee. This is [`finish_sequentially`] from transaction 0 over a fresh overlay
/// of `base`, so that the policy's sequential blocks and a bailed-out block's tail run the
/// same code; nothing bailed out, so [`Stats::sequential_from`] stays `None` and only
/// [`Stats::executions`] (one per transaction) is counted.
pub(crate) fn execute_sequential<B>(
    block: &PreparedBlock,
    base: &B,
    jit: Option<&Arc<CodeCache>>,
    skip_invalid: bool,
) -> Result<ParallelOutcome, ExecutionError>
where
    B: DatabaseRef,
    B::Error: fmt::Display,
{
    let n = block.txs.len();
    let mut partial = Partial::empty(n, deferred_changes(block, base)?);
    let mut collect = Collect {
        states: Vec::with_capacity(n),
        fees: Vec::with_capacity(n),
    };
    let overlay = CacheDB::new(WrapDatabaseRef(base));
    finish_sequentially(
        block,
        jit,
        skip_invalid,
        &mut partial,
        overlay,
        Some(&mut collect),
    )?;
    Ok(partial.into_outcome(block, collect))
}

/// Executes `block` over `base` with `threads` Block-STM workers and returns every
/// transaction's changes; see [`ParallelExecutor::execute`] (which keeps its memory for the
/// next block).
pub fn execute_block_parallel<B>(
    block: &PreparedBlock,
    base: &B,
    threads: usize,
) -> Result<ParallelOutcome, ExecutionError>
where
    B: DatabaseRef + Sync,
    B::Error: fmt::Display,
{
    ParallelExecutor::new(threads).execute(block, base)
}

/// Executes `block` over `base` with `threads` Block-STM workers, committing into `target`;
/// see [`ParallelExecutor::execute_into`].
pub fn execute_block_parallel_into<B, DB>(
    block: &PreparedBlock,
    base: &B,
    threads: usize,
    target: &mut DB,
) -> Result<(BlockOutcome, Stats), ExecutionError>
where
    B: DatabaseRef + Sync,
    B::Error: fmt::Display,
    DB: Database + DatabaseCommit + Send,
    DB::Error: fmt::Display,
{
    ParallelExecutor::new(threads).execute_into(block, base, target)
}

#[cfg(test)]
mod tests;
