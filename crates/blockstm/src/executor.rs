//! Running a block with Block-STM over revm.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, B256, U256};
use gigas_evm::jit::CodeCache;
use gigas_evm::receipts::TxReceipt;
use gigas_evm::{
    BlockChanges, BlockEvm, BlockOutcome, ExecutionError, PlainEvm, PreparedBlock, TxError,
};
use revm::context::result::{EVMError, ExecutionResult, InvalidTransaction};
use revm::database::CacheDB;
use revm::database_interface::WrapDatabaseRef;
use revm::database_interface::{DBErrorMarker, Database, DatabaseCommit, DatabaseRef};
use revm::state::{AccountInfo, Bytecode, EvmState};

use crate::mvmemory::{Location, MvMemory, Origin, Read, ReadResult, Value};
use crate::scheduler::{Scheduler, Task, Version};

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

/// Why a read could not complete.
#[derive(Debug, Clone, thiserror::Error)]
enum MvError {
    #[error("reads an estimate of transaction {0}")]
    Blocked(usize),
    #[error("base state: {0}")]
    Base(String),
}

impl DBErrorMarker for MvError {}

/// The state as transaction `idx` sees it: earlier transactions' writes over the base.
struct MvDb<'a, B> {
    mv: &'a MvMemory,
    base: &'a B,
    codes: &'a Mutex<HashMap<B256, Bytecode>>,
    beneficiary: Address,
    idx: usize,
    reads: Vec<Read>,
    /// Accounts as this transaction read them (balance, nonce, code hash), to leave unchanged
    /// ones out of its writes. A handful per transaction: a vector beats a map.
    read_accounts: Vec<(Address, U256, u64, B256)>,
}

impl<B: DatabaseRef> MvDb<'_, B>
where
    B::Error: fmt::Display,
{
    fn resolve(&mut self, location: Location) -> Result<Option<(Version, Value)>, MvError> {
        match self.mv.read(&location, self.idx) {
            ReadResult::Estimate(j) => Err(MvError::Blocked(j)),
            ReadResult::NotFound => {
                self.reads.push((location, Origin::Base));
                Ok(None)
            }
            ReadResult::Value(version, value) => {
                self.reads
                    .push((location, Origin::Written(version, value.clone())));
                Ok(Some((version, value)))
            }
        }
    }

    /// Makes the read recorded at `at`, if it found a write, hold only while the same
    /// transaction remains the latest writer (see [`Origin::WrittenBy`]).
    fn pin_to_writer(&mut self, at: usize) {
        if let Some((_, origin)) = self.reads.get_mut(at) {
            if let Origin::Written(version, value) = std::mem::replace(origin, Origin::Base) {
                *origin = Origin::WrittenBy(version, value);
            }
        }
    }
}

impl<B: DatabaseRef> Database for MvDb<'_, B>
where
    B::Error: fmt::Display,
{
    type Error = MvError;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, MvError> {
        let account_read = self.reads.len();
        let (info, unpaid_from) = match self.resolve(Location::Account(address))? {
            Some(((writer, _), Value::Account(info))) => (info, writer),
            Some(_) => {
                return Err(MvError::Base(
                    "account location holds another kind of value".into(),
                ))
            }
            None => (
                self.base
                    .basic_ref(address)
                    .map_err(|e| MvError::Base(e.to_string()))?,
                0,
            ),
        };
        if address != self.beneficiary {
            if let Some(info) = &info {
                self.read_accounts
                    .push((address, info.balance, info.nonce, info.code_hash));
            }
            return Ok(info);
        }
        // The beneficiary's balance includes every earlier transaction's fee; fees are paid
        // after a transaction's own changes, so a writer's own fee is not in what it wrote.
        // Which fees are added depends on which transaction wrote the account: a later
        // writer that leaves it byte for byte as it was (a contract that sweeps its balance
        // twice) already accounts for the fees before it, which must not be added again.
        self.pin_to_writer(account_read);
        let mut fees = U256::ZERO;
        for j in unpaid_from..self.idx {
            if let Some((_, Value::Fee(fee))) = self.resolve(Location::Fee(j))? {
                fees = fees.saturating_add(fee);
            }
        }
        if fees.is_zero() {
            return Ok(info);
        }
        let mut info = info.unwrap_or_default();
        info.balance = info.balance.saturating_add(fees);
        Ok(Some(info))
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, MvError> {
        if let Some(code) = self
            .codes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&code_hash)
        {
            return Ok(code.clone());
        }
        self.base
            .code_by_hash_ref(code_hash)
            .map_err(|e| MvError::Base(e.to_string()))
    }

    fn storage(&mut self, address: Address, index: U256) -> Result<U256, MvError> {
        let slot_read = self.reads.len();
        let slot = self.resolve(Location::Slot(address, index))?;
        let reset = self.resolve(Location::StorageReset(address))?;
        match (slot, reset) {
            // A wipe after the last write of the slot leaves it zero; a wipe by the same
            // transaction (a contract created and written) comes before its writes. The
            // answer depends on which transactions wrote the two, so an equal value from
            // another one (every wipe is equal, and so is a slot written again with the
            // same value) must not let the read stand. A slot or a wipe found alone keeps
            // validation by value: its answer does not depend on who wrote it.
            (Some(((w, _), Value::Slot(v))), Some(((r, _), _))) => {
                self.pin_to_writer(slot_read);
                self.pin_to_writer(slot_read + 1);
                Ok(if r > w { U256::ZERO } else { v })
            }
            (Some((_, Value::Slot(v))), None) => Ok(v),
            (None, Some(_)) => Ok(U256::ZERO),
            (None, None) => self
                .base
                .storage_ref(address, index)
                .map_err(|e| MvError::Base(e.to_string())),
            _ => Err(MvError::Base(
                "slot location holds another kind of value".into(),
            )),
        }
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, MvError> {
        self.base
            .block_hash_ref(number)
            .map_err(|e| MvError::Base(e.to_string()))
    }
}

/// Appends to `writes` the locations a transaction's state changes write, as later
/// transactions must see them (the same view `CacheDB::commit` gives a sequential run).
fn write_set(
    state: &EvmState,
    read_accounts: &[(Address, U256, u64, B256)],
    codes: &Mutex<HashMap<B256, Bytecode>>,
    writes: &mut Vec<(Location, Value)>,
) {
    for (address, account) in state {
        if !account.is_touched() {
            continue;
        }
        if account.is_selfdestructed() {
            writes.push((Location::Account(*address), Value::Account(None)));
            writes.push((Location::StorageReset(*address), Value::StorageReset));
            continue;
        }
        if account.is_created() {
            writes.push((Location::StorageReset(*address), Value::StorageReset));
        }
        let read = read_accounts
            .iter()
            .find(|(a, ..)| a == address)
            .map(|&(_, balance, nonce, code_hash)| (balance, nonce, code_hash));
        let info = &account.info;
        // Code is published by hash only when it is new to this account (created, or an
        // EIP-7702 delegation set): calls into existing contracts take no lock here.
        if let Some(code) = &info.code {
            if account.is_created() || read.is_none_or(|(_, _, hash)| hash != info.code_hash) {
                codes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(info.code_hash)
                    .or_insert_with(|| code.clone());
            }
        }
        // A touched account that existed and did not change (a contract called without
        // value) reads the same afterwards: writing it would make every caller conflict.
        let unchanged =
            !account.is_created() && read == Some((info.balance, info.nonce, info.code_hash));
        if !unchanged {
            writes.push((
                Location::Account(*address),
                Value::Account(Some(info.copy_without_code())),
            ));
        }
        for (slot, value) in &account.storage {
            if value.is_changed() {
                writes.push((
                    Location::Slot(*address, *slot),
                    Value::Slot(value.present_value()),
                ));
            }
        }
    }
}

enum TxOutput {
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
trait Sink: Send {
    /// Transaction `index` is final: its state changes (without its fee) and its fee.
    fn accept(&mut self, index: usize, state: EvmState, fee: U256);
}

/// Keeps every transaction's changes, for [`ParallelOutcome`].
#[derive(Default)]
struct Collect {
    states: Vec<EvmState>,
    fees: Vec<U256>,
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
struct CommitInto<'a, DB> {
    db: &'a mut DB,
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
type OutputSlot = Mutex<Option<(usize, TxOutput)>>;

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
fn run_block<B>(
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
