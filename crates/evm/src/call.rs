//! Executing a transaction that is not part of a block: `eth_call` and `eth_estimateGas`.
//!
//! A call runs in a block's environment over some state but relaxes the checks that only a
//! signed transaction must pass, as geth and reth do: the nonce is not checked, a sender may
//! be a contract (EIP-3607 off), and with no gas price the base fee is not charged (EIP-1559's
//! base fee check is off) so that a call needs no funds for gas. The balance is still checked
//! when the call pays for gas or moves value, so that estimates fail as the real transaction
//! would.

use alloy_consensus::Header;
use alloy_primitives::{TxKind, U256};
use alloy_rpc_types_eth::state::StateOverride;
use alloy_rpc_types_eth::{BlockOverrides, TransactionRequest};
use revm::context::result::{ExecutionResult, ResultAndState};
use revm::context::{BlockEnv, TxEnv};
use revm::database::CacheDB;
use revm::database_interface::{Database, DatabaseCommit, DatabaseRef, WrapDatabaseRef};
use revm::state::Bytecode;
use std::fmt;

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
/// its result and state changes.
pub fn simulate<DB>(db: DB, block: &PreparedBlock, tx: TxEnv) -> Result<ResultAndState, TxError>
where
    DB: Database + DatabaseCommit,
    DB::Error: fmt::Display,
{
    let mut evm = PlainEvm::new(db, block);
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
}

/// An `eth_call` request prepared once and run at any gas limit (an estimate runs it many
/// times): the block environment of the block it reads, with the request's block overrides,
/// and the call relaxations of [`call_block`]. With no gas price given the call pays no gas
/// and the base fee is off, as in geth and reth.
#[derive(Debug)]
pub struct CallRequest<'a> {
    block: PreparedBlock,
    req: &'a TransactionRequest,
    state: Option<&'a StateOverride>,
    chain_id: u64,
    free: bool,
}

impl<'a> CallRequest<'a> {
    /// `req` in the block of `header` on `chain`, with the request's overrides.
    pub fn new(
        chain: &ChainSpec,
        header: &Header,
        req: &'a TransactionRequest,
        state: Option<&'a StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Self {
        let free = req.gas_price.is_none()
            && req.max_fee_per_gas.is_none()
            && req.max_priority_fee_per_gas.is_none();
        let env = block_env_with(chain, header, block);
        Self {
            block: call_block(chain, env, free),
            req,
            state,
            chain_id: chain.chain_id,
            free,
        }
    }

    /// Runs the request with `gas` over `db` (overrides laid over it in a cache; nothing is
    /// written to `db`).
    pub fn run<DB>(&self, db: &DB, gas: u64) -> Result<ExecutionResult, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let mut tx = tx_env_of(self.chain_id, self.req, gas);
        if self.free {
            tx.gas_price = 0;
            tx.gas_priority_fee = None;
        }
        let mut cache = CacheDB::new(WrapDatabaseRef(db));
        if let Some(overrides) = self.state {
            apply_state_overrides(&mut cache, overrides)?;
        }
        Ok(call(&mut cache, &self.block, tx)?)
    }

    /// `eth_estimateGas`: the least gas with which the request succeeds, at most `cap`, by
    /// binary search between the gas it used and `cap` (as geth), all over `db`. A request
    /// that fails with `cap` gives its failing result, which the caller reports.
    pub fn estimate<DB>(&self, db: &DB, cap: u64) -> Result<Result<u64, ExecutionResult>, CallError>
    where
        DB: DatabaseRef,
        DB::Error: fmt::Display,
    {
        let first = self.run(db, cap)?;
        if !first.is_success() {
            return Ok(Err(first));
        }
        let used = first.tx_gas_used();
        let (mut lo, mut hi) = (used.saturating_sub(1), cap);
        // Most calls succeed with what they used plus the 1/64 kept back at each call.
        let optimistic = (used + 2_300) * 64 / 63;
        if optimistic < hi {
            match self.run(db, optimistic)? {
                ExecutionResult::Success { .. } => hi = optimistic,
                _ => lo = optimistic,
            }
        }
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            match self.run(db, mid) {
                Ok(ExecutionResult::Success { .. }) => hi = mid,
                Ok(_) => lo = mid,
                // Too little gas for the intrinsic cost is refused as invalid: too low.
                Err(CallError::Tx(TxError::Invalid(_))) => lo = mid,
                Err(e) => return Err(e),
            }
        }
        Ok(Ok(hi))
    }
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
