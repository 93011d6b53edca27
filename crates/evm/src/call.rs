//! Executing a transaction that is not part of a block: `eth_call` and `eth_estimateGas`.
//!
//! A call runs in a block's environment over some state but relaxes the checks that only a
//! signed transaction must pass, as geth and reth do: the nonce is not checked, a sender may
//! be a contract (EIP-3607 off), and with no gas price the base fee is not charged (EIP-1559's
//! base fee check is off) so that a call needs no funds for gas. The balance is still checked
//! when the call pays for gas or moves value, so that estimates fail as the real transaction
//! would.

use revm::context::result::{ExecutionResult, ResultAndState};
use revm::context::{BlockEnv, TxEnv};
use revm::database_interface::{Database, DatabaseCommit};
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
