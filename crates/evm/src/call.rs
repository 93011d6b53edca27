//! Executing a transaction that is not part of a block: `eth_call` and `eth_estimateGas`.
//!
//! A call runs in a block's environment over some state but relaxes the checks that only a
//! signed transaction must pass, as geth and reth do: the nonce is not checked, a sender may
//! be a contract (EIP-3607 off), and with no gas price the base fee is not charged (EIP-1559's
//! base fee check is off) so that a call needs no funds for gas. The balance is still checked
//! when the call pays for gas or moves value, so that estimates fail as the real transaction
//! would.
//!
//! Every execution here is bounded by a [`CallBudget`] (gas cap, EVM memory, wall clock): see
//! [`crate::budget`]. The block's gas limit does not bound a call (the cap does, as in geth),
//! so a block override cannot lift it.

use alloy_consensus::Header;
use alloy_primitives::{TxKind, U256};
use alloy_rpc_types_eth::state::StateOverride;
use alloy_rpc_types_eth::{BlockOverrides, TransactionRequest};
use revm::context::result::{ExecutionResult, HaltReason, OutOfGasError, ResultAndState};
use revm::context::{BlockEnv, TxEnv};
use revm::database::CacheDB;
use revm::database_interface::{Database, DatabaseCommit, DatabaseRef, WrapDatabaseRef};
use revm::state::Bytecode;
use std::fmt;
use std::time::{Duration, Instant};

use crate::budget::{CallBudget, Deadline};
use crate::executor::{BlockEvm, PlainEvm, PreparedBlock, TxError};
use gigas_primitives::ChainSpec;

/// The block a call executes in: `block_env` under `chain`'s fork, with the call relaxations
/// of the module documentation. `free` (no gas price given) turns the base fee off.
pub fn call_block(chain: &ChainSpec, block_env: BlockEnv, free: bool) -> PreparedBlock {
    let mut block = PreparedBlock::synthetic(chain, block_env, Vec::new());
    block.cfg.disable_nonce_check = true;
    block.cfg.disable_eip3607 = true;
    block.cfg.disable_base_fee = free;
    block
}

/// Executes `tx` in `block` (from [`call_block`]) over `db` without committing, and returns
/// its result and state changes. The loops and calls it runs check the deadline of this
/// thread's [`Deadline`] guard, if one is entered.
pub fn simulate<DB>(db: DB, block: &PreparedBlock, tx: TxEnv) -> Result<ResultAndState, TxError>
where
    DB: Database + DatabaseCommit,
    DB::Error: fmt::Display,
{
    let mut evm = PlainEvm::with_deadline_checks(db, block);
    BlockEvm::transact(&mut evm, tx).map_err(TxError::from)
}

/// [`simulate`], the result alone.
pub fn call<DB>(db: DB, block: &PreparedBlock, tx: TxEnv) -> Result<ExecutionResult, TxError>
where
    DB: Database + DatabaseCommit,
    DB::Error: fmt::Display,
{
    simulate(db, block, tx).map(|r| r.result)
}

/// Why a call request could not be run (a call that ran and reverted or halted is an
/// [`ExecutionResult`], not an error).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A state override could not be laid over the state (reading the account failed).
    #[error("state override: {0}")]
    Override(String),
    /// revm refused or failed the transaction.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// A trace could not be made (an unsupported tracer, or one larger than the node records).
    #[error("{0}")]
    Trace(String),
    /// The request ran out of its wall-clock budget ([`CallBudget::timeout`]); the words are
    /// geth's.
    #[error("execution aborted (timeout = {})", gigas_primitives::duration::format_duration(*.0))]
    Timeout(Duration),
}

/// What an estimate found, short of an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Estimate {
    /// The least gas with which the request succeeds.
    Gas(u64),
    /// The request fails with all the gas it may have for a reason other than gas (a revert
    /// or another halt): its result, which the caller reports.
    Failed(ExecutionResult),
    /// The request runs out of gas with all it may have: the cap, the block's gas limit, the
    /// request's own gas or what the sender's balance pays for (geth's "gas required exceeds
    /// allowance (N)").
    ExceedsAllowance(u64),
}

/// An `eth_call` request prepared once and run at any gas limit (an estimate runs it many
/// times): the block environment of the block it reads, with the request's block overrides,
/// and the call relaxations of [`call_block`]. With no gas price given the call pays no gas
/// and the base fee is off, as in geth and reth. Every run is held to the request's
/// [`CallBudget`]; its deadline is fixed when the request is prepared, so that all the runs
/// of an estimate share one.
#[derive(Debug)]
pub struct CallRequest<'a> {
    block: PreparedBlock,
    req: &'a TransactionRequest,
    state: Option<&'a StateOverride>,
    chain_id: u64,
    free: bool,
    budget: CallBudget,
    deadline: Option<Instant>,
}

/// The least gas a transaction can have.
const MIN_TX_GAS: u64 = 21_000;

impl<'a> CallRequest<'a> {
    /// `req` in the block of `header` on `chain`, with the request's overrides, bounded by
    /// `budget` from now on.
    pub fn new(
        chain: &ChainSpec,
        header: &Header,
        req: &'a TransactionRequest,
        state: Option<&'a StateOverride>,
        block: Option<&BlockOverrides>,
        budget: CallBudget,
    ) -> Self {
        let free = req.gas_price.is_none()
            && req.max_fee_per_gas.is_none()
            && req.max_priority_fee_per_gas.is_none();
        let env = block_env_with(chain, header, block);
        let mut block = call_block(chain, env, free);
        // The cap bounds a call's gas, not the block's limit (which an override could lift).
        block.cfg.disable_block_gas_limit = true;
        block.cfg.memory_limit = budget.memory_limit;
        Self {
            block,
            req,
            state,
            chain_id: chain.chain_id,
            free,
            budget,
            deadline: budget.deadline_from_now(),
        }
    }

    /// The gas an `eth_call` runs with: the request's, else the block's gas limit, never
    /// above the cap.
    pub fn call_gas(&self) -> u64 {
        self.budget
            .clamp_gas(self.req.gas.unwrap_or(self.block.block_env.gas_limit))
    }

    /// Runs the request with `gas` (held to the cap) over `db` (overrides laid over it in a
    /// cache; nothing is written to `db`). [`CallError::Timeout`] once the request's deadline
    /// has passed, during this run or before it.
    pub fn run<DB>(&self, db: &DB, gas: u64) -> Result<ExecutionResult, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let mut cache = self.overlaid(db)?;
        self.run_over(&mut cache, gas)
    }

    /// `db` with the request's state overrides laid over it.
    fn overlaid<'d, DB>(&self, db: &'d DB) -> Result<CacheDB<WrapDatabaseRef<&'d DB>>, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let mut cache = CacheDB::new(WrapDatabaseRef(db));
        if let Some(overrides) = self.state {
            apply_state_overrides(&mut cache, overrides)?;
        }
        Ok(cache)
    }

    /// One run over a cache holding the overrides. The cache is shared by the runs of an
    /// estimate: it is only read (nothing is committed into it), and what it keeps of the
    /// state read spares the later runs the reads.
    fn run_over<DB>(&self, cache: &mut CacheDB<DB>, gas: u64) -> Result<ExecutionResult, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let tx = self.tx_env(gas, None);
        self.run_tx(cache, tx)
    }

    /// The most gas an estimate may find, as geth's `DoEstimateGas`: the request's gas when it
    /// gives at least 21,000, else the block's gas limit; no more than the sender's balance
    /// pays for at the request's fee cap (after its value); never above the cap.
    fn allowance<DB>(&self, cache: &mut CacheDB<DB>) -> Result<u64, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let mut hi = match self.req.gas {
            Some(gas) if gas >= MIN_TX_GAS => gas,
            _ => self.block.block_env.gas_limit,
        };
        let fee_cap = self
            .req
            .gas_price
            .or(self.req.max_fee_per_gas)
            .unwrap_or_default();
        if fee_cap != 0 {
            let from = self.req.from.unwrap_or_default();
            let balance = Database::basic(cache, from)
                .map_err(|e| CallError::Tx(TxError::Database(e.to_string())))?
                .map(|a| a.balance)
                .unwrap_or_default();
            let value = self.req.value.unwrap_or_default();
            if value > balance {
                return Err(CallError::Tx(TxError::Invalid(
                    revm::context::result::InvalidTransaction::LackOfFundForMaxFee {
                        fee: Box::new(value),
                        balance: Box::new(balance),
                    },
                )));
            }
            let allowance = (balance - value) / U256::from(fee_cap);
            hi = hi.min(allowance.saturating_to::<u64>());
        }
        Ok(self.budget.clamp_gas(hi))
    }

    /// `debug_traceCall`: the request traced with `tracer` at its call gas, within the
    /// request's deadline.
    pub fn trace<DB>(
        &self,
        db: &DB,
        tracer: &crate::trace::Tracer,
        caps: crate::trace::TraceCaps,
    ) -> Result<alloy_rpc_types_trace::geth::GethTrace, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let mut cache = self.overlaid(db)?;
        let tx = self.tx_env(self.call_gas(), None);
        self.before_run()?;
        let deadline = Deadline::enter(self.deadline);
        let traced = crate::trace::trace(&mut cache, &self.block, tx, tracer, caps);
        if deadline.expired() {
            return Err(CallError::Timeout(self.budget.timeout));
        }
        match traced {
            Ok((trace, _)) => Ok(trace),
            Err(crate::trace::TraceError::Tx(e)) => Err(CallError::Tx(e)),
            Err(other) => Err(CallError::Trace(other.to_string())),
        }
    }

    /// `eth_createAccessList`: the accounts and slots the request touches (beyond its sender,
    /// recipient and the precompiles), found by running it until the list it runs with is the
    /// list it touches (as geth), and the gas it uses with that list. A call that fails still
    /// answers its list, with the failure.
    pub fn access_list<DB>(&self, db: &DB) -> Result<AccessListOutcome, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        use revm_inspectors::access_list::AccessListInspector;
        let mut cache = self.overlaid(db)?;
        let mut list = self.req.access_list.clone().unwrap_or_default();
        // Each round can only add what the previous list made reachable; a handful of rounds
        // settles any real call, and the deadline bounds the rest.
        for _ in 0..8 {
            let tx = self.tx_env(self.call_gas(), Some(list.clone()));
            self.before_run()?;
            let deadline = Deadline::enter(self.deadline);
            let (outcome, inspector) = crate::trace::inspect(
                &mut cache,
                &self.block,
                tx,
                AccessListInspector::new(list.clone()),
            );
            if deadline.expired() {
                return Err(CallError::Timeout(self.budget.timeout));
            }
            let result = outcome.map_err(TxError::from)?.result;
            let touched = inspector.into_access_list();
            if touched == list {
                return Ok(AccessListOutcome {
                    access_list: list,
                    gas_used: result.tx_gas_used(),
                    result,
                });
            }
            list = touched;
        }
        let tx = self.tx_env(self.call_gas(), Some(list.clone()));
        let result = self.run_tx(&mut cache, tx)?;
        Ok(AccessListOutcome {
            access_list: list,
            gas_used: result.tx_gas_used(),
            result,
        })
    }

    /// [`CallError::Timeout`] once the request's deadline has passed.
    fn before_run(&self) -> Result<(), CallError> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(CallError::Timeout(self.budget.timeout));
        }
        Ok(())
    }

    /// The request's transaction with `gas` (held to the cap), and `access_list` in place of
    /// its own when given.
    fn tx_env(&self, gas: u64, access_list: Option<alloy_eips::eip2930::AccessList>) -> TxEnv {
        let mut tx = tx_env_of(self.chain_id, self.req, self.budget.clamp_gas(gas));
        if self.free {
            tx.gas_price = 0;
            tx.gas_priority_fee = None;
        }
        if let Some(list) = access_list {
            if tx.tx_type == 0 {
                tx.tx_type = 1;
            }
            tx.access_list = list;
        }
        tx
    }

    fn run_tx<DB>(&self, cache: &mut CacheDB<DB>, tx: TxEnv) -> Result<ExecutionResult, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        self.before_run()?;
        let deadline = Deadline::enter(self.deadline);
        let result = call(&mut *cache, &self.block, tx);
        if deadline.expired() {
            return Err(CallError::Timeout(self.budget.timeout));
        }
        Ok(result?)
    }

    /// `eth_estimateGas`: the least gas with which the request succeeds, by binary search
    /// between the gas it used and its allowance (see [`Estimate`]), all over `db` and within
    /// the request's deadline.
    pub fn estimate<DB>(&self, db: &DB) -> Result<Estimate, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let mut cache = self.overlaid(db)?;
        let hi = self.allowance(&mut cache)?;
        let first = match self.run_over(&mut cache, hi) {
            Ok(result) => result,
            // Too little for the intrinsic cost: no gas the sender can have is enough.
            Err(CallError::Tx(TxError::Invalid(
                revm::context::result::InvalidTransaction::CallGasCostMoreThanGasLimit { .. }
                | revm::context::result::InvalidTransaction::GasFloorMoreThanGasLimit { .. },
            ))) => return Ok(Estimate::ExceedsAllowance(hi)),
            Err(e) => return Err(e),
        };
        match &first {
            ExecutionResult::Success { .. } => {}
            // More gas would not lift the memory limit: that halt is reported as it is.
            ExecutionResult::Halt {
                reason: HaltReason::OutOfGas(kind),
                ..
            } if *kind != OutOfGasError::MemoryLimit => return Ok(Estimate::ExceedsAllowance(hi)),
            _ => return Ok(Estimate::Failed(first)),
        }
        let used = first.tx_gas_used();
        let (mut lo, mut hi) = (used.saturating_sub(1), hi);
        // Most calls succeed with what they used plus the 1/64 kept back at each call.
        let optimistic = (used + 2_300) * 64 / 63;
        if optimistic < hi {
            match self.run_over(&mut cache, optimistic) {
                Ok(ExecutionResult::Success { .. }) => hi = optimistic,
                Ok(_) | Err(CallError::Tx(TxError::Invalid(_))) => lo = optimistic,
                Err(e) => return Err(e),
            }
        }
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            match self.run_over(&mut cache, mid) {
                Ok(ExecutionResult::Success { .. }) => hi = mid,
                Ok(_) => lo = mid,
                // Too little gas for the intrinsic cost is refused as invalid: too low.
                Err(CallError::Tx(TxError::Invalid(_))) => lo = mid,
                Err(e) => return Err(e),
            }
        }
        Ok(Estimate::Gas(hi))
    }
}

/// What [`CallRequest::access_list`] found.
#[derive(Debug, Clone)]
pub struct AccessListOutcome {
    /// The accounts and slots the call touches.
    pub access_list: alloy_eips::eip2930::AccessList,
    /// The gas it uses with that list.
    pub gas_used: u64,
    /// How the last run ended (a revert or halt is reported beside the list).
    pub result: ExecutionResult,
}

/// The block environment of a call in the block of `header`, with `overrides` applied.
pub fn block_env_with(
    chain: &ChainSpec,
    header: &Header,
    overrides: Option<&BlockOverrides>,
) -> BlockEnv {
    let fork = chain.fork_at(header.number, header.timestamp);
    let mut env = crate::env::block_env_of(header, fork);
    if let Some(o) = overrides {
        if let Some(n) = o.number {
            env.number = n;
        }
        if let Some(t) = o.time {
            env.timestamp = U256::from(t);
        }
        if let Some(g) = o.gas_limit {
            env.gas_limit = g;
        }
        if let Some(c) = o.coinbase {
            env.beneficiary = c;
        }
        if let Some(r) = o.random {
            env.prevrandao = Some(r);
        }
        if let Some(b) = o.base_fee {
            env.basefee = b.saturating_to();
        }
    }
    env
}

/// The transaction environment of a call request with `gas_limit` (the type from the fields
/// it sets, as the request would be signed).
pub fn tx_env_of(chain_id: u64, req: &TransactionRequest, gas_limit: u64) -> TxEnv {
    let tx_type = if req.authorization_list.is_some() {
        4
    } else if req.max_fee_per_gas.is_some() || req.max_priority_fee_per_gas.is_some() {
        2
    } else if req.access_list.is_some() {
        1
    } else {
        0
    };
    TxEnv {
        tx_type,
        caller: req.from.unwrap_or_default(),
        gas_limit,
        gas_price: req.gas_price.or(req.max_fee_per_gas).unwrap_or_default(),
        gas_priority_fee: req.max_priority_fee_per_gas,
        kind: req.to.unwrap_or(TxKind::Create),
        value: req.value.unwrap_or_default(),
        data: req.input.input().cloned().unwrap_or_default(),
        nonce: req.nonce.unwrap_or_default(),
        chain_id: Some(chain_id),
        access_list: req.access_list.clone().unwrap_or_default(),
        authorization_list: req
            .authorization_list
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(revm::context_interface::either::Either::Left)
            .collect(),
        ..Default::default()
    }
}

/// Lays `overrides` (balance, nonce, code, whole storage or single slots) over `cache`.
pub fn apply_state_overrides<DB>(
    cache: &mut CacheDB<DB>,
    overrides: &StateOverride,
) -> Result<(), CallError>
where
    DB: DatabaseRef,
    DB::Error: fmt::Display,
{
    let failed = |e: &dyn fmt::Display| CallError::Override(e.to_string());
    for (address, o) in overrides.iter() {
        let mut info = cache
            .basic(*address)
            .map_err(|e| failed(&e))?
            .unwrap_or_default();
        if let Some(balance) = o.balance {
            info.balance = balance;
        }
        if let Some(nonce) = o.nonce {
            info.nonce = nonce;
        }
        if let Some(code) = &o.code {
            let code = Bytecode::new_raw(code.clone());
            info.code_hash = code.hash_slow();
            info.code = Some(code);
        }
        cache.insert_account_info(*address, info);
        if let Some(state) = &o.state {
            let slots = state
                .iter()
                .map(|(k, v)| (U256::from_be_bytes(k.0), U256::from_be_bytes(v.0)));
            cache
                .replace_account_storage(*address, slots.collect())
                .map_err(|e| failed(&e))?;
        }
        if let Some(diff) = &o.state_diff {
            for (k, v) in diff {
                cache
                    .insert_account_storage(
                        *address,
                        U256::from_be_bytes(k.0),
                        U256::from_be_bytes(v.0),
                    )
                    .map_err(|e| failed(&e))?;
            }
        }
    }
    Ok(())
}
