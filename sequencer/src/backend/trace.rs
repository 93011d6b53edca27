//! Re-executing a published block for a client: [`Replay`], and `debug_traceTransaction`.

use alloy_consensus::transaction::Recovered;
use alloy_consensus::TxEnvelope;
use alloy_primitives::B256;
use alloy_rpc_types_trace::geth::{GethDebugTracingOptions, GethTrace};
use gigas_evm::budget::Deadline;
use gigas_evm::call::CallError;
use gigas_evm::revm::database::CacheDB;
use gigas_evm::revm::database_interface::{DatabaseRef, WrapDatabaseRef};
use gigas_evm::trace::{TraceCaps, Tracer};
use gigas_rpc::RpcError;

use super::{internal, SequencerBackend};

impl SequencerBackend {
    /// Block `number` (not the genesis) prepared for [`Replay`], its deadline starting now;
    /// `what` names the request in a timeout.
    pub(super) fn replay(&self, number: u64, what: String) -> Result<Replay, RpcError> {
        if number == 0 {
            return Err(RpcError::InvalidParams(
                "the genesis block has no transactions to trace".into(),
            ));
        }
        let (header, txs) = self
            .sealed_with_transactions(number)?
            .ok_or(RpcError::HeaderNotFound)?;
        let header = header.header;
        let block_env = gigas_evm::env::block_env_of(&header, self.node.config().chain.fork);
        Ok(Replay {
            txs,
            prepared: gigas_evm::PreparedBlock::synthetic(self.node.spec(), block_env, Vec::new()),
            // A block of a billion gas would take minutes: the whole trace within one budget.
            deadline: Deadline::enter(self.budget.deadline_from_now()),
            timeout: self.budget.timeout,
            what,
        })
    }

    /// `debug_traceTransaction`: the block's transactions before it re-executed over the
    /// state after its parent, then the transaction traced, all within the budget.
    pub fn trace_transaction(
        &self,
        hash: B256,
        options: &GethDebugTracingOptions,
    ) -> Result<GethTrace, RpcError> {
        let tracer =
            Tracer::from_options(options).map_err(|e| RpcError::InvalidParams(e.to_string()))?;
        let history = self.node.history();
        let Some((location, _)) = history.transaction(hash).map_err(internal)? else {
            return Err(RpcError::ResourceNotFound(format!(
                "transaction {hash} not found (a pending transaction cannot be traced)"
            )));
        };
        let number = location.block;
        let index = location.index as usize;
        let replay = self.replay(number, format!("debug_traceTransaction of {hash}"))?;
        if index >= replay.txs.len() {
            return Err(internal(format!(
                "block {number} has {} transactions, {hash} is at index {index}",
                replay.txs.len()
            )));
        }
        self.at(number - 1, |db| {
            let mut cache = CacheDB::new(WrapDatabaseRef(db));
            for tx in &replay.txs[..index] {
                if let Err(e) = replay.check() {
                    return Ok(Err(e));
                }
                let done = replay.run(&mut cache, tx)?;
                use gigas_evm::revm::database_interface::DatabaseCommit;
                cache.commit(done.state);
            }
            let tx = &replay.txs[index];
            let env = gigas_evm::env::tx_env_from(tx.inner(), tx.signer());
            let traced = gigas_evm::trace::trace(
                &mut cache,
                &replay.prepared,
                env,
                &tracer,
                TraceCaps::default(),
            );
            if let Err(e) = replay.check() {
                return Ok(Err(e));
            }
            Ok(traced.map(|(trace, _)| trace).map_err(|e| match e {
                gigas_evm::trace::TraceError::TooLarge { .. } => {
                    RpcError::LimitExceeded(e.to_string())
                }
                other => internal(format!("tracing {hash}: {other}")),
            }))
        })?
    }
}

/// A published block's transactions ready to be re-executed for a client (a trace) over the
/// state after its parent, within the call budget.
pub(super) struct Replay {
    pub(super) txs: Vec<Recovered<TxEnvelope>>,
    prepared: gigas_evm::PreparedBlock,
    deadline: Deadline,
    timeout: std::time::Duration,
    what: String,
}

impl Replay {
    /// The deadline's error, once it has passed.
    pub(super) fn check(&self) -> Result<(), RpcError> {
        if self.deadline.expired() {
            return Err(RpcError::Timeout(format!(
                "{}: {}",
                self.what,
                CallError::Timeout(self.timeout)
            )));
        }
        Ok(())
    }

    /// Re-executes `tx` over `cache` and returns what it did (not committed).
    pub(super) fn run<DB>(
        &self,
        cache: &mut CacheDB<DB>,
        tx: &Recovered<TxEnvelope>,
    ) -> Result<gigas_evm::revm::context::result::ResultAndState, crate::state::StateError>
    where
        DB: DatabaseRef,
        DB::Error: std::fmt::Display,
    {
        let env = gigas_evm::env::tx_env_from(tx.inner(), tx.signer());
        gigas_evm::call::simulate(&mut *cache, &self.prepared, env).map_err(|e| {
            crate::state::StateError::History(format!("re-executing {}: {e}", tx.inner().tx_hash()))
        })
    }
}
