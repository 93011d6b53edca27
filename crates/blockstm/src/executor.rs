//! Running a block with Block-STM over revm.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use alloy_primitives::{Address, B256, U256};
use gigas_evm::receipts::TxReceipt;
use gigas_evm::{BlockOutcome, ExecutionError, PlainEvm, PreparedBlock};
use revm::context::result::{EVMError, ExecutionResult};
use revm::database_interface::{DBErrorMarker, Database, DatabaseCommit, DatabaseRef};
use revm::state::{AccountInfo, Bytecode, EvmState};

use crate::mvmemory::{Location, MvMemory, Origin, Read, ReadResult, Value};
use crate::scheduler::{Scheduler, Task, Version};

/// Counters of one parallel block execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Incarnations executed to the end (a transaction executed once counts one).
    pub executions: usize,
    /// Validations run.
    pub validations: usize,
    /// Validations that aborted an incarnation.
    pub aborts: usize,
    /// Executions that stopped on an ESTIMATE and waited for another transaction.
    pub waits: usize,
}

/// A block executed in parallel: the same outcome as sequential execution, and each
/// transaction's state changes to commit in order.
pub struct ParallelOutcome {
    /// Receipts, as sequential execution gives them.
    pub outcome: BlockOutcome,
    /// Each transaction's state changes, in block order, without the beneficiary's fee.
    pub states: Vec<EvmState>,
    /// Each transaction's fee to the beneficiary.
    pub fees: Vec<U256>,
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
    /// Accounts as this transaction read them, to leave unchanged ones out of its writes.
    read_accounts: HashMap<Address, AccountInfo>,
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
                self.reads.push((location, Origin::Written(version)));
                Ok(Some((version, value)))
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
                self.read_accounts.insert(address, info.clone());
            }
            return Ok(info);
        }
        // The beneficiary's balance includes every earlier transaction's fee; fees are paid
        // after a transaction's own changes, so a writer's own fee is not in what it wrote.
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
        let slot = self.resolve(Location::Slot(address, index))?;
        let reset = self.resolve(Location::StorageReset(address))?;
        match (slot, reset) {
            // A wipe after the last write of the slot leaves it zero; a wipe by the same
            // transaction (a contract created and written) comes before its writes.
            (Some(((w, _), Value::Slot(v))), Some(((r, _), _))) => {
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

/// The locations a transaction's state changes write, as later transactions must see them
/// (the same view `CacheDB::commit` gives a sequential run).
fn write_set(
    state: &EvmState,
    read_accounts: &HashMap<Address, AccountInfo>,
    codes: &Mutex<HashMap<B256, Bytecode>>,
) -> Vec<(Location, Value)> {
    let mut writes = Vec::new();
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
        if let Some(code) = &account.info.code {
            codes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(account.info.code_hash, code.clone());
        }
        // A touched account that existed and did not change (a contract called without
        // value) reads the same afterwards: writing it would make every caller conflict.
        let unchanged = !account.is_created()
            && read_accounts.get(address).is_some_and(|read| {
                read.balance == account.info.balance
                    && read.nonce == account.info.nonce
                    && read.code_hash == account.info.code_hash
            });
        if !unchanged {
            writes.push((
                Location::Account(*address),
                Value::Account(Some(account.info.clone())),
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
    writes
}

enum TxOutput {
    Done(ExecutionResult, EvmState, U256),
    Invalid(String),
}

struct Shared<'a, B> {
    block: &'a PreparedBlock,
    base: &'a B,
    scheduler: Scheduler,
    mv: MvMemory,
    codes: Mutex<HashMap<B256, Bytecode>>,
    outputs: Vec<Mutex<Option<TxOutput>>>,
    executions: AtomicUsize,
    validations: AtomicUsize,
    aborts: AtomicUsize,
    waits: AtomicUsize,
}

impl<B: DatabaseRef + Sync> Shared<'_, B>
where
    B::Error: fmt::Display,
{
    fn execute(
        &self,
        evm: &mut PlainEvm<MvDb<'_, B>>,
        (idx, incarnation): Version,
    ) -> Option<Task> {
        loop {
            let db = evm.db_mut();
            db.idx = idx;
            db.reads.clear();
            db.read_accounts.clear();
            let result = evm.transact_deferring_reward(self.block.txs[idx].env.clone());
            let reads = std::mem::take(&mut evm.db_mut().reads);
            let read_accounts = std::mem::take(&mut evm.db_mut().read_accounts);
            let (output, writes) = match result {
                Err(EVMError::Database(MvError::Blocked(blocking))) => {
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    if self.scheduler.add_dependency(idx, blocking) {
                        return None;
                    }
                    continue;
                }
                // A transaction that is invalid against this view (a nonce or balance an
                // earlier transaction has not written yet) is an output like any other:
                // validation decides whether the view was right.
                Err(e) => (TxOutput::Invalid(e.to_string()), Vec::new()),
                Ok((done, fee)) => {
                    let mut writes = write_set(&done.state, &read_accounts, &self.codes);
                    writes.push((Location::Fee(idx), Value::Fee(fee)));
                    (TxOutput::Done(done.result, done.state, fee), writes)
                }
            };
            self.executions.fetch_add(1, Ordering::Relaxed);
            *self.outputs[idx]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(output);
            let wrote_new = self.mv.record((idx, incarnation), reads, writes);
            return self.scheduler.finish_execution(idx, incarnation, wrote_new);
        }
    }

    fn validate(&self, (idx, incarnation): Version) -> Option<Task> {
        self.validations.fetch_add(1, Ordering::Relaxed);
        let valid = self.mv.validate_read_set(idx);
        let aborted = !valid && self.scheduler.try_validation_abort(idx, incarnation);
        if aborted {
            self.aborts.fetch_add(1, Ordering::Relaxed);
            self.mv.convert_writes_to_estimates(idx);
        }
        self.scheduler.finish_validation(idx, aborted)
    }

    fn work(&self) {
        // One EVM per worker, its database pointed at each transaction in turn: building an
        // EVM (instruction table, frame stack) costs more than a simple transfer.
        let mut evm = PlainEvm::new(
            MvDb {
                mv: &self.mv,
                base: self.base,
                codes: &self.codes,
                beneficiary: self.block.block_env.beneficiary,
                idx: 0,
                reads: Vec::new(),
                read_accounts: HashMap::new(),
            },
            self.block,
        );
        let mut task = None;
        loop {
            let next = match task.take() {
                Some(t) => Some(t),
                None => self.scheduler.next_task(),
            };
            let Some(next) = next else { return };
            task = match next {
                Task::Execute(version) => self.execute(&mut evm, version),
                Task::Validate(version) => self.validate(version),
            };
        }
    }
}

/// Executes `block` over `base` with `threads` Block-STM workers.
pub fn execute_block_parallel<B>(
    block: &PreparedBlock,
    base: &B,
    threads: usize,
) -> Result<ParallelOutcome, ExecutionError>
where
    B: DatabaseRef + Sync,
    B::Error: fmt::Display,
{
    let n = block.txs.len();
    let started = std::time::Instant::now();
    let shared = Shared {
        block,
        base,
        scheduler: Scheduler::new(n),
        mv: MvMemory::new(n),
        codes: Mutex::new(HashMap::new()),
        outputs: (0..n).map(|_| Mutex::new(None)).collect(),
        executions: AtomicUsize::new(0),
        validations: AtomicUsize::new(0),
        aborts: AtomicUsize::new(0),
        waits: AtomicUsize::new(0),
    };
    std::thread::scope(|scope| {
        for _ in 1..threads.max(1) {
            scope.spawn(|| shared.work());
        }
        shared.work();
    });
    let executed = started.elapsed();

    let mut receipts = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(n);
    let mut fees = Vec::with_capacity(n);
    let mut cumulative_gas_used = 0u64;
    for (index, output) in shared.outputs.into_iter().enumerate() {
        let tx = &block.txs[index];
        let output = output
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match output {
            Some(TxOutput::Done(result, state, fee)) => {
                fees.push(fee);
                receipts.push(TxReceipt::after(
                    tx.tx_type,
                    result,
                    &mut cumulative_gas_used,
                ));
                states.push(state);
            }
            Some(TxOutput::Invalid(message)) => {
                return Err(ExecutionError::Transaction {
                    block: block.number,
                    index,
                    hash: tx.hash,
                    message,
                })
            }
            None => {
                return Err(ExecutionError::Transaction {
                    block: block.number,
                    index,
                    hash: tx.hash,
                    message: "never executed: scheduler finished without it".into(),
                })
            }
        }
    }
    tracing::trace!(
        block = block.number,
        txs = n,
        threads,
        execute_ms = executed.as_secs_f64() * 1e3,
        assemble_ms = (started.elapsed() - executed).as_secs_f64() * 1e3,
        "block-stm"
    );
    Ok(ParallelOutcome {
        outcome: BlockOutcome {
            number: block.number,
            receipts,
        },
        states,
        fees,
        beneficiary: block.block_env.beneficiary,
        stats: Stats {
            executions: shared.executions.into_inner(),
            validations: shared.validations.into_inner(),
            aborts: shared.aborts.into_inner(),
            waits: shared.waits.into_inner(),
        },
    })
}
