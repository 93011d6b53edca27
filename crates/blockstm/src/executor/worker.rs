//! The Block-STM workers: executing and validating incarnations ([`Shared`]), committing
//! final transactions in order to a [`Sink`], and running a block over them
//! ([`run_block`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, B256, U256};
use gigas_evm::jit::CodeCache;
use gigas_evm::receipts::TxReceipt;
use gigas_evm::{BlockChanges, ExecutionError, PlainEvm, PreparedBlock, TxError};
use revm::context::result::{EVMError, ExecutionResult, InvalidTransaction};
use revm::database_interface::{DatabaseCommit, DatabaseRef};
use revm::state::{Bytecode, EvmState};

use super::view::{write_set, MvDb, MvError};
use super::{deferred_changes, Bailout, Partial, Skipped, Stats};
use crate::mvmemory::{Location, MvMemory, Value};
use crate::scheduler::{Scheduler, Task, Version};

pub(super) enum TxOutput {
    Done(ExecutionResult, EvmState, U256),
    /// revm refused the transaction against this incarnation's view, or the base state
    /// failed; whether that is final is for validation to decide.
    Failed(TxError),
}

/// What an error of an incarnation means for the block. A read of an estimate never gets
/// here (the worker waits and retries); anything else keeps its kind.
fn tx_error(e: EVMError<MvError, InvalidTransaction>) -> TxError {
    match e {
        EVMError::Database(MvError::Base(message)) => TxError::Database(message),
        EVMError::Database(MvError::Blocked(j)) => TxError::Internal(format!(
            "an estimate of transaction {j} escaped the scheduler"
        )),
        other => TxError::from(other),
    }
}

/// Where final transactions go, in block order, while later ones still execute.
pub(super) trait Sink: Send {
    /// Transaction `index` is final: its state changes (without its fee) and its fee.
    fn accept(&mut self, index: usize, state: EvmState, fee: U256);
}

/// Keeps every transaction's changes, for [`ParallelOutcome`](super::ParallelOutcome).
#[derive(Default)]
pub(super) struct Collect {
    pub(super) states: Vec<EvmState>,
    pub(super) fees: Vec<U256>,
}

impl Sink for Collect {
    fn accept(&mut self, _index: usize, state: EvmState, fee: U256) {
        self.states.push(state);
        self.fees.push(fee);
    }
}

/// Commits each transaction into a database as soon as it is final, so that committing
/// overlaps execution and a transaction's changes are freed early. The fees it leaves unpaid
/// are the ones the block's [`BlockChanges`] settles.
pub(super) struct CommitInto<'a, DB> {
    pub(super) db: &'a mut DB,
}

impl<DB> Sink for CommitInto<'_, DB>
where
    DB: DatabaseCommit + Send,
{
    fn accept(&mut self, _index: usize, state: EvmState, _fee: U256) {
        self.db.commit(state);
    }
}

/// The in-order commit of final transactions. Whoever holds it commits; others go on.
struct Committer<'s> {
    /// The next transaction to commit.
    next: usize,
    cumulative_gas_used: u64,
    receipts: Vec<TxReceipt>,
    sink: &'s mut dyn Sink,
    /// The committed transactions' changes, folded in order.
    changes: BlockChanges,
    /// Invalid transactions committed as skipped (builder mode only).
    skipped: Vec<Skipped>,
    error: Option<ExecutionError>,
}

/// Each transaction's latest output and the incarnation that produced it.
pub(super) type OutputSlot = Mutex<Option<(usize, TxOutput)>>;

struct Shared<'a, 's, B> {
    block: &'a PreparedBlock,
    base: &'a B,
    jit: Option<&'a Arc<CodeCache>>,
    scheduler: Scheduler,
    mv: &'a MvMemory,
    codes: Mutex<HashMap<B256, Bytecode>>,
    outputs: &'a [OutputSlot],
    committer: Mutex<Committer<'s>>,
    /// How many transactions are committed (final), published by the committer.
    committed: AtomicUsize,
    /// Per transaction, `incarnation + 1` if that incarnation began executing when every
    /// transaction before it was already committed: it read only final values, so it needs
    /// no validation (0 otherwise).
    final_reads: Box<[AtomicUsize]>,
    /// Per transaction, the latest earlier transaction from the same sender: it certainly
    /// writes the account (nonce, balance) this one reads first, so this one waits for it
    /// instead of executing early and being aborted.
    same_sender: Vec<Option<usize>>,
    bailout: Option<Bailout>,
    /// Whether a final invalid transaction is skipped (a builder) or stops the block.
    skip_invalid: bool,
    bailed: std::sync::atomic::AtomicBool,
    sender_waits: AtomicUsize,
    /// Time spent inside the EVM, summed over executions.
    execution_ns: std::sync::atomic::AtomicU64,
    executions: AtomicUsize,
    validations: AtomicUsize,
    aborts: AtomicUsize,
    waits: AtomicUsize,
    commit_checks_failed: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<B: DatabaseRef + Sync> Shared<'_, '_, B>
where
    B::Error: fmt::Display,
{
    fn execute(
        &self,
        evm: &mut PlainEvm<MvDb<'_, B>>,
        writes: &mut Vec<(Location, Value)>,
        (idx, incarnation): Version,
    ) -> Option<Task> {
        if let Some(previous) = self.same_sender[idx] {
            if self.scheduler.add_dependency(idx, previous) {
                self.sender_waits.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        loop {
            let db = evm.db_mut();
            db.idx = idx;
            db.reads.clear();
            db.read_accounts.clear();
            writes.clear();
            let reads_final = self.committed.load(Ordering::Acquire) >= idx;
            let started = std::time::Instant::now();
            let result = evm.transact_deferring_reward(self.block.txs[idx].env.clone());
            self.execution_ns
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            let output = match result {
                Err(EVMError::Database(MvError::Blocked(blocking))) => {
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    self.check_bailout();
                    if self.scheduler.add_dependency(idx, blocking) {
                        return None;
                    }
                    continue;
                }
                // A transaction that is invalid against this view (a nonce or balance an
                // earlier transaction has not written yet) is an output like any other:
                // validation decides whether the view was right.
                Err(e) => TxOutput::Failed(tx_error(e)),
                Ok((done, fee)) => {
                    write_set(&done.state, &evm.db().read_accounts, &self.codes, writes);
                    writes.push((Location::Fee(idx), Value::Fee(fee)));
                    TxOutput::Done(done.result, done.state, fee)
                }
            };
            let executions = self.executions.fetch_add(1, Ordering::Relaxed) + 1;
            *lock(&self.outputs[idx]) = Some((incarnation, output));
            let wrote_new = self
                .mv
                .record((idx, incarnation), &mut evm.db_mut().reads, writes);
            self.final_reads[idx].store(
                if reads_final { incarnation + 1 } else { 0 },
                Ordering::Release,
            );
            self.check_execution_cost(executions);
            return self.scheduler.finish_execution(idx, incarnation, wrote_new);
        }
    }

    /// Stops the block when conflicts (aborted incarnations and reads of estimates) exceed
    /// the bailout's share of executions: the committed prefix is kept and the rest runs
    /// sequentially, so that a dependent block costs little more than sequential execution.
    fn check_bailout(&self) {
        let Some(bailout) = self.bailout else { return };
        let executions = self.executions.load(Ordering::Relaxed);
        let conflicts = self.aborts.load(Ordering::Relaxed) + self.waits.load(Ordering::Relaxed);
        if executions >= bailout.after_executions
            && conflicts as f64 > bailout.conflicts_per_execution * executions as f64
        {
            self.bail();
        }
    }

    /// Judges the cost of executions once, when the bailout's count is reached.
    fn check_execution_cost(&self, executions: usize) {
        let Some(bailout) = self.bailout else { return };
        if executions != bailout.after_executions {
            return;
        }
        let ns = self.execution_ns.load(Ordering::Relaxed);
        if ns < bailout.min_execution_ns.saturating_mul(executions as u64) {
            self.bail();
        }
    }

    fn bail(&self) {
        self.bailed.store(true, Ordering::Relaxed);
        self.scheduler.halt();
    }

    /// Whether `incarnation` of `idx` read only committed values (see `final_reads`).
    fn reads_are_final(&self, idx: usize, incarnation: usize) -> bool {
        self.final_reads[idx].load(Ordering::Acquire) == incarnation + 1
    }

    fn validate(&self, (idx, incarnation): Version) -> Option<Task> {
        self.validations.fetch_add(1, Ordering::Relaxed);
        let valid = self.reads_are_final(idx, incarnation) || self.mv.validate_read_set(idx);
        let aborted = !valid && self.scheduler.try_validation_abort(idx, incarnation);
        if aborted {
            self.aborts.fetch_add(1, Ordering::Relaxed);
            self.mv.convert_writes_to_estimates(idx);
            self.check_bailout();
        }
        self.scheduler.finish_validation(idx, aborted)
    }

    /// Commits, in order, every transaction that is final, if no other worker is committing.
    ///
    /// Transaction `i` is final once every transaction before it is committed (so their
    /// writes will not change) and its executed incarnation's reads still resolve to the same
    /// writes: it read final values, and executing it again would give the same output.
    /// Returns whether the block must stop (a final transaction is invalid).
    fn try_commit(&self, committer: &mut Committer<'_>) -> bool {
        while committer.next < self.block.txs.len() {
            let idx = committer.next;
            let Some(incarnation) = self.scheduler.executed_incarnation(idx) else {
                return false;
            };
            if !self.reads_are_final(idx, incarnation) && !self.mv.validate_read_set(idx) {
                self.commit_checks_failed.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            let output = {
                let mut slot = lock(&self.outputs[idx]);
                match slot.take() {
                    Some((i, output)) if i == incarnation => output,
                    // A newer incarnation finished after the check: try again later.
                    other => {
                        *slot = other;
                        return false;
                    }
                }
            };
            let tx = &self.block.txs[idx];
            match output {
                TxOutput::Done(result, state, fee) => {
                    committer.receipts.push(TxReceipt::after(
                        tx.tx_type,
                        result,
                        &mut committer.cumulative_gas_used,
                    ));
                    committer.changes.fold_deferred(&state, fee);
                    committer.sink.accept(idx, state, fee);
                }
                // Final and invalid: its incarnation wrote nothing (not even a fee), so every
                // later transaction already reads the block as if it were not there.
                TxOutput::Failed(TxError::Invalid(reason)) if self.skip_invalid => {
                    committer.skipped.push(Skipped {
                        index: idx,
                        hash: tx.hash,
                        reason,
                    });
                }
                TxOutput::Failed(error) => {
                    committer.error = Some(ExecutionError::Transaction {
                        block: self.block.number,
                        index: idx,
                        hash: tx.hash,
                        error,
                    });
                    return true;
                }
            }
            committer.next += 1;
            self.committed.store(committer.next, Ordering::Release);
        }
        false
    }

    fn commit_if_free(&self) {
        if let Ok(mut committer) = self.committer.try_lock() {
            if self.try_commit(&mut committer) {
                self.scheduler.halt();
            }
        }
    }

    fn work(&self) {
        // One EVM per worker, its database pointed at each transaction in turn: building an
        // EVM (instruction table, frame stack) costs more than a simple transfer.
        let mut evm = PlainEvm::with_code_cache(
            MvDb {
                mv: self.mv,
                base: self.base,
                codes: &self.codes,
                beneficiary: self.block.block_env.beneficiary,
                idx: 0,
                reads: Vec::new(),
                read_accounts: Vec::new(),
            },
            self.block,
            self.jit.cloned(),
        );
        let mut writes = Vec::new();
        let mut task = None;
        loop {
            let next = match task.take() {
                Some(t) => Some(t),
                None => {
                    self.commit_if_free();
                    self.scheduler.next_task()
                }
            };
            let Some(next) = next else { return };
            task = match next {
                Task::Execute(version) => self.execute(&mut evm, &mut writes, version),
                Task::Validate(version) => self.validate(version),
            };
        }
    }
}

/// For each transaction, the latest earlier one sent by the same account.
fn same_sender(block: &PreparedBlock) -> Vec<Option<usize>> {
    let mut last: HashMap<Address, usize, foldhash::fast::FixedState> = HashMap::default();
    block
        .txs
        .iter()
        .enumerate()
        .map(|(i, tx)| last.insert(tx.env.caller, i))
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_block<B>(
    block: &PreparedBlock,
    base: &B,
    jit: Option<&Arc<CodeCache>>,
    threads: usize,
    bailout: Option<Bailout>,
    skip_invalid: bool,
    mv: &MvMemory,
    outputs: &[OutputSlot],
    sink: &mut dyn Sink,
) -> Result<Partial, ExecutionError>
where
    B: DatabaseRef + Sync,
    B::Error: fmt::Display,
{
    let n = block.txs.len();
    let changes = deferred_changes(block, base)?;
    if n == 0 {
        return Ok(Partial::empty(0, changes));
    }
    let started = std::time::Instant::now();
    let shared = Shared {
        block,
        base,
        jit,
        scheduler: Scheduler::new(n),
        mv,
        codes: Mutex::new(HashMap::new()),
        outputs,
        committer: Mutex::new(Committer {
            next: 0,
            cumulative_gas_used: 0,
            receipts: Vec::with_capacity(n),
            sink,
            changes,
            skipped: Vec::new(),
            error: None,
        }),
        executions: AtomicUsize::new(0),
        validations: AtomicUsize::new(0),
        aborts: AtomicUsize::new(0),
        waits: AtomicUsize::new(0),
        commit_checks_failed: AtomicUsize::new(0),
        committed: AtomicUsize::new(0),
        final_reads: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        same_sender: same_sender(block),
        bailout,
        skip_invalid,
        bailed: std::sync::atomic::AtomicBool::new(false),
        sender_waits: AtomicUsize::new(0),
        execution_ns: std::sync::atomic::AtomicU64::new(0),
    };
    // More workers than transactions only spin; a worker costs a thread start.
    let workers = threads.clamp(1, n);
    std::thread::scope(|scope| {
        for _ in 1..workers {
            scope.spawn(|| shared.work());
        }
        shared.work();
    });
    let executed = started.elapsed();
    // Every transaction is executed and validated (or the block bailed out): what can be
    // committed now is final.
    let mut committer = lock(&shared.committer);
    if committer.error.is_none() {
        shared.try_commit(&mut committer);
    }
    if let Some(error) = committer.error.take() {
        return Err(error);
    }
    let bailed = shared.bailed.load(Ordering::Relaxed);
    if committer.next < n && !bailed {
        let tx = &block.txs[committer.next];
        return Err(ExecutionError::Transaction {
            block: block.number,
            index: committer.next,
            hash: tx.hash,
            error: TxError::Internal(
                "not final after every transaction was validated (a Block-STM bug)".into(),
            ),
        });
    }
    let partial = Partial {
        receipts: std::mem::take(&mut committer.receipts),
        cumulative_gas_used: committer.cumulative_gas_used,
        committed: committer.next,
        changes: std::mem::replace(&mut committer.changes, BlockChanges::new(block.spec())),
        skipped: std::mem::take(&mut committer.skipped),
        stats: Stats {
            executions: shared.executions.load(Ordering::Relaxed),
            validations: shared.validations.load(Ordering::Relaxed),
            aborts: shared.aborts.load(Ordering::Relaxed),
            waits: shared.waits.load(Ordering::Relaxed),
            sender_waits: shared.sender_waits.load(Ordering::Relaxed),
            commit_checks_failed: shared.commit_checks_failed.load(Ordering::Relaxed),
            sequential_from: None,
        },
    };
    drop(committer);
    tracing::trace!(
        block = block.number,
        txs = n,
        threads,
        execute_ms = executed.as_secs_f64() * 1e3,
        tail_ms = (started.elapsed() - executed).as_secs_f64() * 1e3,
        committed = partial.committed,
        stats = ?partial.stats,
        "block-stm"
    );
    Ok(partial)
}
