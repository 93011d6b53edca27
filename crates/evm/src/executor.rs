//! Sequential block execution.
//!
//! A block is first *prepared* (environments built from the fixture, outside any timing), then
//! executed by any [`BlockEvm`]: the plain revm EVM here, or the probed one of [`crate::probe`].
//! Both share [`execute_block`], so that the profiler compares like with like.

use alloy_consensus::{TxType, Typed2718};
use alloy_primitives::B256;
use gigas_primitives::{ChainSpec, ChangeSet, Hardfork};
use revm::context::result::{
    EVMError, ExecutionResult, InvalidHeader, InvalidTransaction, ResultAndState,
};
use revm::context::{BlockEnv, CfgEnv, Context, Journal, TxEnv};
use revm::context_interface::ContextTr;
use revm::database_interface::{Database, DatabaseCommit};
use revm::handler::instructions::EthInstructions;
use revm::handler::EthFrame;
use revm::primitives::hardfork::SpecId;
use revm::state::EvmState;
use revm::MainBuilder;
use std::fmt;

use crate::changeset::BlockChanges;
use crate::env::{block_env, tx_env};
use crate::fixture::BlockFixture;
use crate::jit::{CodeCache, JitEvm, JitMode};
use crate::receipts::{BlockCheck, ExpectedHeader, TxReceipt};
use crate::spec::{cfg_env, spec_id};
use std::sync::Arc;

/// A transaction ready to execute.
#[derive(Debug, Clone)]
pub struct PreparedTx {
    /// Its hash, for error messages.
    pub hash: B256,
    /// Its EIP-2718 type, for its receipt.
    pub tx_type: TxType,
    /// Its revm environment.
    pub env: TxEnv,
}

impl PreparedTx {
    /// A transaction from its environment alone (its hash is left zero).
    pub fn from_env(env: TxEnv) -> Result<Self, ExecutionError> {
        let tx_type =
            TxType::try_from(env.tx_type).map_err(|_| ExecutionError::UnsupportedTxType {
                block: 0,
                hash: B256::ZERO,
                ty: env.tx_type,
            })?;
        Ok(Self {
            hash: B256::ZERO,
            tx_type,
            env,
        })
    }
}

/// A block ready to execute: environments built, header values to check kept aside.
#[derive(Debug, Clone)]
pub struct PreparedBlock {
    /// Block number.
    pub number: u64,
    /// The fork it runs under.
    pub hardfork: Hardfork,
    /// The configuration environment (spec, gas parameters, chain id).
    pub cfg: CfgEnv,
    /// The block environment.
    pub block_env: BlockEnv,
    /// The transactions, in block order.
    pub txs: Vec<PreparedTx>,
    /// What the replay must reproduce, for blocks that come with a header.
    pub expected: Option<ExpectedHeader>,
}

impl PreparedBlock {
    /// Prepares a fixture's block for execution on `chain`.
    pub fn from_fixture(fixture: &BlockFixture, chain: &ChainSpec) -> Result<Self, ExecutionError> {
        let header = &fixture.block.header;
        let number = header.inner.number;
        let hardfork = chain.fork_at(number, header.inner.timestamp);
        let txs = fixture
            .block
            .transactions
            .as_transactions()
            .unwrap_or_default()
            .iter()
            .map(|tx| {
                let tx_type = TxType::try_from(tx.inner.inner().ty()).map_err(|_| {
                    ExecutionError::UnsupportedTxType {
                        block: number,
                        hash: *tx.inner.inner().hash(),
                        ty: tx.inner.inner().ty(),
                    }
                })?;
                Ok(PreparedTx {
                    hash: *tx.inner.inner().hash(),
                    tx_type,
                    env: tx_env(tx),
                })
            })
            .collect::<Result<Vec<_>, ExecutionError>>()?;
        Ok(Self {
            number,
            hardfork,
            cfg: cfg_env(chain, hardfork),
            block_env: block_env(header, hardfork),
            txs,
            expected: Some(ExpectedHeader {
                gas_used: header.inner.gas_used,
                receipts_root: header.inner.receipts_root,
                logs_bloom: header.inner.logs_bloom,
                receipts_checkable: hardfork >= Hardfork::Byzantium,
            }),
        })
    }

    /// A block without a header to check against: a benchmark program, a generated workload,
    /// or a block the sequencer is about to build. The fork follows `chain` at `block_env`'s
    /// number and timestamp.
    pub fn synthetic(chain: &ChainSpec, block_env: BlockEnv, txs: Vec<PreparedTx>) -> Self {
        let number = block_env.number.saturating_to::<u64>();
        let hardfork = chain.fork_at(number, block_env.timestamp.saturating_to::<u64>());
        Self {
            number,
            hardfork,
            cfg: cfg_env(chain, hardfork),
            block_env,
            txs,
            expected: None,
        }
    }

    /// The revm spec of the block.
    pub fn spec(&self) -> SpecId {
        spec_id(self.hardfork)
    }

    /// Total gas the header says the block used, for blocks with a header.
    pub fn header_gas_used(&self) -> Option<u64> {
        self.expected.as_ref().map(|e| e.gas_used)
    }
}

/// Why one transaction could not be executed, by what a block builder must do about it.
///
/// A builder **drops** a transaction that is [`TxError::Invalid`] (its nonce is too low or
/// too high, its sender cannot pay, its gas limit exceeds the block's, its fee cap is below
/// the base fee, its chain id is wrong, ...) and goes on with the next one: the state is as
/// it was before the transaction. It **stops** the block on anything else: a
/// [`TxError::Header`] means the block environment itself is wrong, a [`TxError::Database`]
/// means state could not be read (retrying or halting the node is the caller's decision), and
/// a [`TxError::Internal`] is a bug or a fatal precompile failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    /// revm refused the transaction before executing it; the reason is revm's.
    #[error("invalid transaction: {0}")]
    Invalid(InvalidTransaction),
    /// revm refused the block environment.
    #[error("invalid block environment: {0}")]
    Header(InvalidHeader),
    /// The state database failed.
    #[error("state database: {0}")]
    Database(String),
    /// A custom or fatal EVM failure, or an executor's own inconsistency.
    #[error("internal: {0}")]
    Internal(String),
}

impl TxError {
    /// Whether a block builder drops the transaction and goes on (see the type's doc).
    pub fn is_invalid_transaction(&self) -> bool {
        matches!(self, TxError::Invalid(_))
    }
}

impl<E: fmt::Display> From<EVMError<E, InvalidTransaction>> for TxError {
    fn from(e: EVMError<E, InvalidTransaction>) -> Self {
        match e {
            EVMError::Transaction(reason) => TxError::Invalid(reason),
            EVMError::Header(reason) => TxError::Header(reason),
            EVMError::Database(e) => TxError::Database(e.to_string()),
            EVMError::Custom(message) => TxError::Internal(message),
            EVMError::CustomAny(e) => TxError::Internal(e.to_string()),
        }
    }
}

/// Why a block could not be executed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecutionError {
    /// A transaction could not be executed; [`TxError`] says whether to drop it or stop.
    #[error("block {block}, transaction {index} ({hash}): {error}")]
    Transaction {
        /// Block number.
        block: u64,
        /// Index in the block.
        index: usize,
        /// Transaction hash.
        hash: B256,
        /// What went wrong.
        error: TxError,
    },
    /// A transaction type revm does not know.
    #[error("block {block}, transaction {hash}: unsupported transaction type {ty}")]
    UnsupportedTxType {
        /// Block number.
        block: u64,
        /// Transaction hash.
        hash: B256,
        /// The type byte.
        ty: u8,
    },
}

impl ExecutionError {
    /// The failing transaction's index and error, when one transaction is to blame.
    pub fn transaction(&self) -> Option<(usize, &TxError)> {
        match self {
            ExecutionError::Transaction { index, error, .. } => Some((*index, error)),
            ExecutionError::UnsupportedTxType { .. } => None,
        }
    }

    /// Whether a block builder drops the failing transaction and goes on: it is invalid in
    /// this block (or of a type this node does not execute). Everything else stops the block.
    pub fn is_invalid_transaction(&self) -> bool {
        match self {
            ExecutionError::Transaction { error, .. } => error.is_invalid_transaction(),
            ExecutionError::UnsupportedTxType { .. } => true,
        }
    }
}

/// An EVM that executes one block's transactions in order against its own database.
pub trait BlockEvm {
    /// The database error.
    type DbError: fmt::Display;

    /// Executes one transaction and returns its result and state changes, not yet committed.
    fn transact(
        &mut self,
        tx: TxEnv,
    ) -> Result<ResultAndState, EVMError<Self::DbError, InvalidTransaction>>;

    /// Commits one transaction's state changes into the database.
    fn commit(&mut self, state: EvmState);

    /// Executes one transaction and commits its state changes.
    fn transact_commit(
        &mut self,
        tx: TxEnv,
    ) -> Result<ExecutionResult, EVMError<Self::DbError, InvalidTransaction>> {
        let outcome = self.transact(tx)?;
        self.commit(outcome.state);
        Ok(outcome.result)
    }
}

/// The outcome of a block: one receipt per transaction, and what it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockOutcome {
    /// Block number.
    pub number: u64,
    /// The receipts, in order.
    pub receipts: Vec<TxReceipt>,
    /// The block's state changes, canonical (see [`crate::changeset`]).
    pub changes: ChangeSet,
}

impl BlockOutcome {
    /// Gas used by the whole block.
    pub fn gas_used(&self) -> u64 {
        self.receipts.last().map_or(0, |r| r.cumulative_gas_used)
    }

    /// Checks the outcome against the block's header; `None` for a block without one.
    pub fn check(&self, block: &PreparedBlock) -> Option<BlockCheck> {
        block
            .expected
            .as_ref()
            .map(|expected| BlockCheck::new(self.number, expected, &self.receipts))
    }
}

/// Executes `block` on `evm`, transaction after transaction, and builds its ChangeSet.
pub fn execute_block<E: BlockEvm>(
    evm: &mut E,
    block: &PreparedBlock,
) -> Result<BlockOutcome, ExecutionError> {
    let mut receipts = Vec::with_capacity(block.txs.len());
    let mut changes = BlockChanges::new(block.spec());
    let mut cumulative_gas_used = 0u64;
    for (index, tx) in block.txs.iter().enumerate() {
        let outcome = evm
            .transact(tx.env.clone())
            .map_err(|e| ExecutionError::Transaction {
                block: block.number,
                index,
                hash: tx.hash,
                error: e.into(),
            })?;
        changes.fold(&outcome.state);
        evm.commit(outcome.state);
        receipts.push(TxReceipt::after(
            tx.tx_type,
            outcome.result,
            &mut cumulative_gas_used,
        ));
    }
    Ok(BlockOutcome {
        number: block.number,
        receipts,
        changes: changes.finish(),
    })
}

/// The revm context Gigas executes blocks in.
pub type BlockContext<DB, CHAIN = ()> = Context<BlockEnv, TxEnv, CfgEnv, DB, Journal<DB>, CHAIN>;

/// A context configured for `block` over `db`, with `chain` in revm's slot for chain-specific
/// data.
pub fn block_context<DB: Database, CHAIN>(
    db: DB,
    block: &PreparedBlock,
    chain: CHAIN,
) -> BlockContext<DB, CHAIN> {
    BlockContext::<DB, ()>::new(db, block.spec())
        .with_cfg(block.cfg.clone())
        .with_block(block.block_env.clone())
        .with_chain(chain)
}

/// Plain revm: the mainnet instruction table, precompiles and handler, no instrumentation;
/// frames run compiled code when built [`with_jit`](Self::with_jit).
pub struct PlainEvm<DB: Database> {
    evm: JitEvm<BlockContext<DB>>,
}

impl<DB: Database> fmt::Debug for PlainEvm<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainEvm")
            .field("spec", &self.evm.inner.ctx.cfg.spec)
            .field("block", &self.evm.inner.ctx.block.number)
            .finish_non_exhaustive()
    }
}

impl<DB: Database> PlainEvm<DB> {
    /// An EVM for `block` over `db`, interpreting every frame.
    pub fn new(db: DB, block: &PreparedBlock) -> Self {
        Self {
            evm: JitEvm::new(block_context(db, block, ()).build_mainnet(), None),
        }
    }

    /// An EVM for `block` over `db` that interprets every frame and whose loops and calls
    /// check the executing thread's deadline ([`crate::budget`]): for executions a client
    /// asked for, which must end on time whatever their code does.
    pub fn with_deadline_checks(db: DB, block: &PreparedBlock) -> Self {
        let mut evm = Self::new(db, block);
        crate::budget::guard_instructions(&mut evm.evm.inner.instruction);
        evm
    }

    /// An EVM for `block` over `db` whose frames run compiled code from `cache` (as its
    /// mode decides; `JitMode::Off` interprets everything).
    pub fn with_jit(db: DB, block: &PreparedBlock, cache: Arc<CodeCache>) -> Self {
        Self::with_code_cache(db, block, Some(cache))
    }

    /// [`Self::with_jit`] when a cache is given, [`Self::new`] otherwise.
    pub fn with_code_cache(db: DB, block: &PreparedBlock, cache: Option<Arc<CodeCache>>) -> Self {
        let cache = cache.filter(|c| c.mode() != JitMode::Off);
        Self {
            evm: JitEvm::new(block_context(db, block, ()).build_mainnet(), cache),
        }
    }

    fn run_mainnet(
        &mut self,
        tx: TxEnv,
    ) -> Result<revm::context::result::ResultAndState, EVMError<DB::Error, InvalidTransaction>>
    {
        use revm::context_interface::ContextSetters;
        use revm::handler::Handler;
        self.evm.inner.ctx.set_tx(tx);
        let mut handler = revm::handler::MainnetHandler::<
            JitEvm<BlockContext<DB>>,
            EVMError<DB::Error, InvalidTransaction>,
            EthFrame<revm::interpreter::interpreter::EthInterpreter>,
        >::default();
        let result = handler.run(&mut self.evm);
        let state = self.evm.inner.ctx.journal_mut().finalize();
        Ok(revm::context::result::ResultAndState::new(result?, state))
    }

    /// Executes one transaction like [`Self::transact`] but leaves the beneficiary unpaid, and
    /// returns the fee it would have received. A parallel executor credits the fees in block
    /// order afterwards, so that transactions do not all conflict on the beneficiary's
    /// balance.
    pub fn transact_deferring_reward(
        &mut self,
        tx: TxEnv,
    ) -> Result<
        (
            revm::context::result::ResultAndState,
            alloy_primitives::U256,
        ),
        EVMError<DB::Error, InvalidTransaction>,
    > {
        use revm::context_interface::ContextSetters;
        use revm::handler::Handler;
        self.evm.inner.ctx.set_tx(tx);
        let mut handler = DeferredReward {
            fee: std::cell::Cell::new(alloy_primitives::U256::ZERO),
            _db: std::marker::PhantomData,
        };
        let result = handler.run(&mut self.evm);
        let state = self.evm.inner.ctx.journal_mut().finalize();
        let result = result?;
        Ok((
            revm::context::result::ResultAndState::new(result, state),
            handler.fee.get(),
        ))
    }

    /// Executes one transaction and returns its result and state changes without committing
    /// them: how a parallel executor runs a transaction against its own view of state.
    pub fn transact(
        &mut self,
        tx: TxEnv,
    ) -> Result<revm::context::result::ResultAndState, EVMError<DB::Error, InvalidTransaction>>
    {
        self.run_mainnet(tx)
    }

    /// The database, with every committed transaction applied.
    pub fn db(&self) -> &DB {
        &self.evm.inner.ctx.journaled_state.database
    }

    /// The database, to change between transactions (a parallel executor reuses one EVM per
    /// worker and points its database at each transaction in turn).
    pub fn db_mut(&mut self) -> &mut DB {
        &mut self.evm.inner.ctx.journaled_state.database
    }

    /// Gives the database back.
    pub fn into_db(self) -> DB {
        self.evm.inner.ctx.journaled_state.database
    }
}

impl<DB: Database + DatabaseCommit> BlockEvm for PlainEvm<DB>
where
    DB::Error: fmt::Display,
{
    type DbError = DB::Error;

    fn transact(
        &mut self,
        tx: TxEnv,
    ) -> Result<ResultAndState, EVMError<DB::Error, InvalidTransaction>> {
        self.run_mainnet(tx)
    }

    fn commit(&mut self, state: EvmState) {
        self.evm.inner.ctx.db_mut().commit(state);
    }
}

/// revm's mainnet handler, except that the beneficiary's fee is computed as revm computes it
/// and kept instead of paid.
struct DeferredReward<DB: Database> {
    fee: std::cell::Cell<alloy_primitives::U256>,
    _db: std::marker::PhantomData<DB>,
}

impl<DB: Database> revm::handler::Handler for DeferredReward<DB> {
    type Evm = JitEvm<BlockContext<DB>>;
    type Error = EVMError<DB::Error, InvalidTransaction>;
    type HaltReason = revm::context::result::HaltReason;

    fn reward_beneficiary(
        &self,
        evm: &mut Self::Evm,
        exec_result: &mut revm::handler::FrameResult,
    ) -> Result<(), Self::Error> {
        use revm::context_interface::{Block, Cfg, Transaction};
        let ctx = &evm.inner.ctx;
        if ctx.cfg.is_fee_charge_disabled() {
            return Ok(());
        }
        let basefee = ctx.block.basefee() as u128;
        let effective_gas_price = ctx.tx.effective_gas_price(basefee);
        let coinbase_gas_price = if ctx.cfg.spec().is_enabled_in(SpecId::LONDON) {
            effective_gas_price.saturating_sub(basefee)
        } else {
            effective_gas_price
        };
        let gas = exec_result.gas();
        let used = gas.used().saturating_sub(gas.reservoir());
        self.fee.set(alloy_primitives::U256::from(
            coinbase_gas_price * used as u128,
        ));
        Ok(())
    }
}

// Keep the instruction and precompile types in one place for the probed EVM.
pub(crate) type Instructions<CTX> =
    EthInstructions<revm::interpreter::interpreter::EthInterpreter, CTX>;
pub(crate) type Frame = EthFrame<revm::interpreter::interpreter::EthInterpreter>;
