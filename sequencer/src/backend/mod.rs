//! The sequencer's answers to JSON-RPC: chain history and state turned into the RPC types
//! Ethereum tools parse, calls and estimates over any retained block, fee history, the
//! prestate tracer, and subscriptions fed by committed blocks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::TxEnvelope;
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_rpc_types_eth::state::{EvmOverrides, StateOverride};
use alloy_rpc_types_eth::{
    AccessListResult, Block, BlockOverrides, BlockTransactions, Filter, Log, Transaction,
    TransactionReceipt, TransactionRequest,
};
use alloy_rpc_types_trace::geth::{
    GethDebugTracingCallOptions, GethDebugTracingOptions, GethTrace,
};
use alloy_rpc_types_txpool::{TxpoolContent, TxpoolInspect, TxpoolStatus};
use gigas_evm::budget::CallBudget;
use gigas_evm::revm::database::CacheDB;
use gigas_evm::revm::database_interface::{DatabaseRef, WrapDatabaseRef};
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_history::{LogQuery, SealedHeader};
use gigas_rpc::{
    Backend, FeeHistoryBlock, PrestateAccount, PrestateTrace, RpcError, SubscriptionHub,
};
use tokio::sync::broadcast;

use crate::node::{CommittedBlock, Node};
use crate::state::RevmState;
use gigas_rpc_eth::{block_size, rpc_header, StateCalls};

mod convert;
mod fees;
mod trace;
mod txpool;

use convert::{rpc_receipt, rpc_receipts, rpc_transaction};
use fees::{lowest_tips, rewards, MIN_SUGGESTED_TIP, TIP_BLOCKS};

/// The sequencer as a [`gigas_rpc::Backend`].
#[derive(Debug)]
pub struct SequencerBackend {
    node: Arc<Node>,
    hub: SubscriptionHub,
    /// Per recent block, the lowest tips it paid (see [`Self::max_priority_fee`]).
    tips: Mutex<BTreeMap<u64, Vec<u128>>>,
    /// What one client execution may use.
    budget: CallBudget,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::Internal(e.to_string())
}

impl SequencerBackend {
    /// The backend of `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self {
            node,
            hub: SubscriptionHub::default(),
            tips: Mutex::new(BTreeMap::new()),
            budget: CallBudget::default(),
        }
    }

    /// Holds every client execution (calls, estimates, traces) to `budget` instead of geth's
    /// defaults.
    pub fn with_call_budget(mut self, budget: CallBudget) -> Self {
        self.budget = budget;
        self
    }

    /// The node.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Feeds the `newHeads` and `logs` subscriptions from committed blocks until the node
    /// stops. Runs as a task on the RPC runtime.
    pub async fn forward_committed(self: Arc<Self>) {
        let mut committed = self.node.subscribe_committed();
        loop {
            match committed.recv().await {
                Ok(block) => self.publish(&block),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(skipped = n, "subscriptions fell behind the chain");
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Feeds `newPendingTransactions` from the pool until the node stops.
    pub async fn forward_pending(self: Arc<Self>) {
        let mut pending = self.node.pool().subscribe_pending();
        loop {
            match pending.recv().await {
                Ok(hash) => self.hub.publish_pending(hash),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    fn publish(&self, block: &CommittedBlock) {
        self.hub.publish_head(rpc_header(&block.header, block.hash));
        let sample = lowest_tips(
            &block.transactions,
            block.header.base_fee_per_gas.unwrap_or_default(),
        );
        {
            let mut samples = lock(&self.tips);
            samples.insert(block.header.number, sample);
            let oldest = block.header.number.saturating_sub(TIP_BLOCKS - 1);
            samples.retain(|n, _| *n >= oldest);
        }
        if !self.hub.has_log_subscribers() {
            return;
        }
        let sealed = SealedHeader {
            header: block.header.clone(),
            hash: block.hash,
            signature: block.signature,
        };
        let logs: Vec<Log> = rpc_receipts(&sealed, &block.transactions, block.receipts.clone())
            .into_iter()
            .flat_map(|r| r.inner.logs().to_vec())
            .collect();
        self.hub.publish_logs(logs);
    }

    /// The header of published block `number`, or "header not found".
    fn header(&self, number: u64) -> Result<alloy_consensus::Header, RpcError> {
        Ok(self.sealed(number)?.ok_or(RpcError::HeaderNotFound)?.header)
    }

    fn sealed(&self, number: u64) -> Result<Option<SealedHeader>, RpcError> {
        if number > self.node.head_number() {
            return Ok(None);
        }
        self.node.history().sealed_header(number).map_err(internal)
    }

    /// A published block's header and transactions.
    fn sealed_with_transactions(
        &self,
        number: u64,
    ) -> Result<Option<(SealedHeader, BlockTransactionsOf)>, RpcError> {
        let Some(header) = self.sealed(number)? else {
            return Ok(None);
        };
        let txs = self
            .node
            .history()
            .transactions(number)
            .map_err(internal)?
            .unwrap_or_default();
        Ok(Some((header, txs)))
    }

    /// Reads state at the end of block `at` through `f`.
    pub fn at<T>(
        &self,
        at: u64,
        f: impl FnOnce(&RevmState<'_, crate::state::At<'_>>) -> Result<T, crate::state::StateError>,
    ) -> Result<T, RpcError> {
        if at > self.node.head_number() {
            return Err(RpcError::HeaderNotFound);
        }
        self.node.with_state_at(at, f).map_err(state_error)
    }

    /// `eth_call`.
    pub fn call(
        &self,
        req: &TransactionRequest,
        at: u64,
        state: Option<&StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Result<Bytes, RpcError> {
        self.calls_at(at, |calls| calls.call(req, state, block))
    }

    /// Runs `f` with the calls over one snapshot of block `at`'s state.
    fn calls_at<T>(
        &self,
        at: u64,
        f: impl FnOnce(&StateCalls<'_, RevmState<'_, crate::state::At<'_>>>) -> Result<T, RpcError>,
    ) -> Result<T, RpcError> {
        let header = self.header(at)?;
        self.at(at, |db| {
            Ok(f(&StateCalls::new(
                self.node.spec(),
                &header,
                db,
                self.budget,
            )))
        })?
    }

    /// `eth_estimateGas` (see [`CallRequest::estimate`]), all over one snapshot of block
    /// `at`'s state.
    pub fn estimate_gas(
        &self,
        req: &TransactionRequest,
        at: u64,
        state: Option<&StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Result<u64, RpcError> {
        self.calls_at(at, |calls| calls.estimate_gas(req, state, block))
    }
}

/// A block's transactions with their senders, as the history returns them.
type BlockTransactionsOf = Vec<Recovered<TxEnvelope>>;

fn state_error(e: crate::state::StateError) -> RpcError {
    match e {
        crate::state::StateError::Pruned { block, oldest } => {
            RpcError::StatePruned { block, oldest }
        }
        other => internal(other),
    }
}

impl Backend for SequencerBackend {
    fn client_version(&self) -> String {
        format!(
            "gigas-sequencer/v{}/{}-{}/rust",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        )
    }

    fn chain_id(&self) -> u64 {
        self.node.config().chain.chain_id
    }

    fn latest(&self) -> u64 {
        self.node.head_number()
    }

    /// The number of the block with `hash`, if it is published.
    fn block_number(&self, hash: B256) -> Result<Option<u64>, RpcError> {
        let number = self.node.history().number_by_hash(hash).map_err(internal)?;
        Ok(number.filter(|n| *n <= self.node.head_number()))
    }

    /// The block by number, with hashes or full transactions.
    fn block(&self, number: u64, full: bool) -> Result<Option<Block>, RpcError> {
        let Some((header, txs)) = self.sealed_with_transactions(number)? else {
            return Ok(None);
        };
        let size = block_size(&header.header, &txs);
        let transactions = if full {
            BlockTransactions::Full(
                txs.into_iter()
                    .enumerate()
                    .map(|(i, tx)| rpc_transaction(tx, &header, i))
                    .collect(),
            )
        } else {
            BlockTransactions::Hashes(txs.iter().map(|tx| *tx.inner().tx_hash()).collect())
        };
        let mut rpc = rpc_header(&header.header, header.hash);
        // `size` is the block's RLP length (header, transactions, no ommers, no withdrawals),
        // as geth reports it, not the header's alone.
        rpc.size = Some(U256::from(size));
        Ok(Some(Block {
            header: rpc,
            uncles: Vec::new(),
            transactions,
            withdrawals: Some(Default::default()),
        }))
    }

    /// The transaction count of a block.
    fn block_transaction_count(&self, number: u64) -> Result<Option<u64>, RpcError> {
        if self.sealed(number)?.is_none() {
            return Ok(None);
        }
        Ok(self
            .node
            .history()
            .transactions(number)
            .map_err(internal)?
            .map(|t| t.len() as u64))
    }

    /// The balance of `address` at block `at`.
    fn balance(&self, address: Address, at: u64) -> Result<U256, RpcError> {
        self.at(at, |db| {
            Ok(db
                .account(&address)?
                .map_or(U256::ZERO, |a| a.state.balance))
        })
    }

    /// The nonce of `address` at block `at`.
    fn nonce(&self, address: Address, at: u64) -> Result<u64, RpcError> {
        self.at(at, |db| {
            Ok(db.account(&address)?.map_or(0, |a| a.state.nonce))
        })
    }

    /// The next nonce of `address` counting its pending pool transactions and those of blocks
    /// sealed but not yet published (ethers and viem ask for it before every send).
    ///
    /// The pool is read before the tip: a transaction is in the pool until the producer has
    /// put its block in flight, and in flight until the block is in the state, so whichever
    /// moment the two reads fall on, one of them counts it.
    fn pending_nonce(&self, address: Address) -> Result<u64, RpcError> {
        let pooled = self.node.pool().pending_nonce(address);
        let tip = self.node.tip_nonce(address).map_err(internal)?;
        Ok(pooled.map_or(tip, |n| n.max(tip)))
    }

    /// The code of `address` at block `at`.
    fn code(&self, address: Address, at: u64) -> Result<Bytes, RpcError> {
        self.at(at, |db| {
            let Some(account) = db.account(&address)? else {
                return Ok(Bytes::new());
            };
            Ok(db
                .code_by_hash_ref(account.state.code_hash)?
                .original_bytes())
        })
    }

    /// A storage slot of `address` at block `at`.
    fn storage(&self, address: Address, slot: B256, at: u64) -> Result<B256, RpcError> {
        let slot = U256::from_be_bytes(slot.0);
        self.at(at, |db| Ok(B256::from(db.storage_ref(address, slot)?)))
    }

    fn call(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<Bytes, RpcError> {
        SequencerBackend::call(
            self,
            &request,
            at,
            overrides.state.as_ref(),
            overrides.block.as_deref(),
        )
    }

    fn estimate_gas(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<u64, RpcError> {
        SequencerBackend::estimate_gas(
            self,
            &request,
            at,
            overrides.state.as_ref(),
            overrides.block.as_deref(),
        )
    }

    /// `eth_gasPrice`: the next block's base fee plus the suggested tip.
    fn gas_price(&self) -> Result<U256, RpcError> {
        Ok(U256::from(self.node.next_base_fee()) + self.max_priority_fee()?)
    }

    /// `eth_maxPriorityFeePerGas`, as geth's oracle suggests it: the median of the three
    /// lowest tips paid in each of the last 20 blocks, at least 0.001 gwei so that wallets
    /// never offer a zero tip to a busy pool. Each block's sample is taken once (from the
    /// committed block, or from the history for blocks from before this process started).
    fn max_priority_fee(&self) -> Result<U256, RpcError> {
        let head = self.node.head_number();
        let oldest = head.saturating_sub(TIP_BLOCKS - 1);
        let missing: Vec<u64> = {
            let samples = lock(&self.tips);
            (oldest..=head)
                .filter(|n| !samples.contains_key(n))
                .collect()
        };
        for number in missing {
            let Some((header, txs)) = self.sealed_with_transactions(number)? else {
                continue;
            };
            let sample = lowest_tips(&txs, header.header.base_fee_per_gas.unwrap_or_default());
            lock(&self.tips).insert(number, sample);
        }
        let mut tips: Vec<u128> = {
            let mut samples = lock(&self.tips);
            samples.retain(|n, _| *n >= oldest);
            samples.values().flatten().copied().collect()
        };
        tips.sort_unstable();
        let median = tips.get(tips.len() / 2).copied().unwrap_or_default();
        Ok(U256::from(median.max(MIN_SUGGESTED_TIP)))
    }

    /// A sealed block's fees from its header, and its rewards from its transactions and
    /// receipts in the history store.
    fn fee_history_block(
        &self,
        number: u64,
        percentiles: Option<&[f64]>,
    ) -> Result<Option<FeeHistoryBlock>, RpcError> {
        let Some(header) = self.sealed(number)? else {
            return Ok(None);
        };
        let h = &header.header;
        let base_fee = h.base_fee_per_gas.unwrap_or_default();
        let reward = match percentiles {
            Some(p) => {
                let history = self.node.history();
                let txs = history
                    .transactions(number)
                    .map_err(internal)?
                    .unwrap_or_default();
                let receipts = history
                    .receipts(number)
                    .map_err(internal)?
                    .unwrap_or_default();
                Some(rewards(&txs, &receipts, base_fee, h.gas_used, p))
            }
            None => None,
        };
        Ok(Some(FeeHistoryBlock {
            base_fee,
            gas_used: h.gas_used,
            gas_limit: h.gas_limit,
            next_base_fee: self.node.config().chain.base_fee.next(
                h.gas_used,
                h.gas_limit,
                base_fee,
            ),
            reward,
        }))
    }

    async fn send_raw_transaction(&self, raw: Bytes) -> Result<B256, RpcError> {
        self.node.submit(raw).await.map_err(|e| match e {
            // The node could not read the sender's account: its failure, not a rejection
            // (a wallet would otherwise tell its user the transaction is wrong).
            crate::node::SubmitError::Rejected(gigas_txpool::TxPoolError::State(reason)) => {
                RpcError::Internal(format!(
                    "reading the sender's account failed, so the transaction was not accepted: \
                     {reason}"
                ))
            }
            crate::node::SubmitError::Rejected(e) => RpcError::TxRejected(e.to_string()),
            crate::node::SubmitError::Journal(e) => RpcError::Internal(format!(
                "the transaction journal failed, so the transaction was not accepted: {e}"
            )),
            crate::node::SubmitError::Failed(e) => {
                RpcError::Internal(format!("the transaction was not accepted: {e}"))
            }
        })
    }

    /// A transaction by hash: from a published block, or pending (in the pool, or in a sealed
    /// block not yet published) without block fields, as geth answers.
    fn transaction_by_hash(&self, hash: B256) -> Result<Option<Transaction>, RpcError> {
        if let Some((location, tx)) = self.node.history().transaction(hash).map_err(internal)? {
            if let Some(header) = self.sealed(location.block)? {
                return Ok(Some(rpc_transaction(tx, &header, location.index as usize)));
            }
        }
        // In the pool, or sealed into a block not yet published: pending either way.
        let pending = match self.node.pool().get(hash) {
            Some(pooled) => Some(pooled.tx.clone()),
            None => self.node.in_flight_transaction(hash),
        };
        Ok(pending.map(|inner| Transaction {
            inner,
            block_hash: None,
            block_number: None,
            transaction_index: None,
            effective_gas_price: None,
            block_timestamp: None,
        }))
    }

    /// The receipt of a transaction in a published block. Only its own receipt is converted:
    /// wallets poll this while they wait, and a block may hold thousands of transactions.
    fn receipt(&self, hash: B256) -> Result<Option<TransactionReceipt>, RpcError> {
        let history = self.node.history();
        let Some((location, tx)) = history.transaction(hash).map_err(internal)? else {
            return Ok(None);
        };
        let Some(header) = self.sealed(location.block)? else {
            return Ok(None);
        };
        let mut receipts = history
            .receipts(location.block)
            .map_err(internal)?
            .unwrap_or_default();
        let index = location.index as usize;
        if index >= receipts.len() {
            return Err(internal(format!(
                "block {} has {} receipts, transaction {hash} is at index {index}",
                location.block,
                receipts.len()
            )));
        }
        let gas_before = index
            .checked_sub(1)
            .map_or(0, |i| receipts[i].cumulative_gas_used());
        let logs_before: usize = receipts[..index].iter().map(|r| r.logs().len()).sum();
        let receipt = receipts.swap_remove(index);
        Ok(Some(rpc_receipt(
            &header,
            &tx,
            receipt,
            index,
            gas_before,
            logs_before as u64,
        )))
    }

    /// Every receipt of a block.
    fn block_receipts(&self, number: u64) -> Result<Option<Vec<TransactionReceipt>>, RpcError> {
        let Some((header, txs)) = self.sealed_with_transactions(number)? else {
            return Ok(None);
        };
        let history = self.node.history();
        let receipts = history
            .receipts(number)
            .map_err(internal)?
            .unwrap_or_default();
        Ok(Some(rpc_receipts(&header, &txs, receipts)))
    }

    /// Logs of the published blocks `from..=to` matching `filter`.
    fn logs(
        &self,
        from: u64,
        to: u64,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Log>, RpcError> {
        let to = to.min(self.node.head_number());
        if from > to {
            return Ok(Vec::new());
        }
        let mut topics: [Option<Vec<B256>>; 4] = Default::default();
        for (i, t) in filter.topics.iter().enumerate() {
            if !t.is_empty() {
                topics[i] = Some(t.iter().copied().collect());
            }
        }
        let query = LogQuery {
            from,
            to,
            addresses: filter.address.iter().copied().collect(),
            topics,
        };
        let deadline = gigas_rpc::deadline::remaining().map(|left| Instant::now() + left);
        let found = self
            .node
            .history()
            .logs_until(&query, limit, deadline)
            .map_err(|e| match e {
                gigas_history::HistoryError::TooManyLogs { limit } => RpcError::TooManyLogs(limit),
                timed_out @ gigas_history::HistoryError::LogScanTimedOut { .. } => {
                    RpcError::Timeout(format!(
                        "eth_getLogs: {timed_out}; ask for a narrower range"
                    ))
                }
                other => internal(other),
            })?;
        let mut timestamps: BTreeMap<u64, u64> = BTreeMap::new();
        let mut out = Vec::with_capacity(found.len());
        for log in found {
            let timestamp = match timestamps.get(&log.block_number) {
                Some(t) => *t,
                None => {
                    let t = self
                        .sealed(log.block_number)?
                        .map_or(0, |h| h.header.timestamp);
                    timestamps.insert(log.block_number, t);
                    t
                }
            };
            out.push(Log {
                inner: log.log,
                block_hash: Some(log.block_hash),
                block_number: Some(log.block_number),
                block_timestamp: Some(timestamp),
                transaction_hash: Some(log.tx_hash),
                transaction_index: Some(log.tx_index as u64),
                log_index: Some(log.log_index as u64),
                removed: false,
            });
        }
        Ok(out)
    }

    fn subscriptions(&self) -> &SubscriptionHub {
        &self.hub
    }

    /// `debug_traceBlockByNumber` with the prestate tracer: for each transaction of block
    /// `number`, the accounts and slots it read or wrote as they were before it.
    fn trace_block_prestate(&self, number: u64) -> Result<Vec<PrestateTrace>, RpcError> {
        let replay = self.replay(
            number,
            format!("debug_traceBlockByNumber of block {number}"),
        )?;
        self.at(number - 1, |db| {
            let mut cache = CacheDB::new(WrapDatabaseRef(db));
            let mut out = Vec::with_capacity(replay.txs.len());
            for tx in &replay.txs {
                if let Err(e) = replay.check() {
                    return Ok(Err(e));
                }
                let done = replay.run(&mut cache, tx)?;
                let mut result = BTreeMap::new();
                for (address, account) in &done.state {
                    use gigas_evm::revm::database_interface::Database;
                    let pre: Option<AccountInfo> = cache
                        .basic(*address)
                        .map_err(|e| crate::state::StateError::History(format!("tracing: {e}")))?;
                    let pre = pre.unwrap_or_default();
                    let code = if pre.code_hash == alloy_primitives::KECCAK256_EMPTY {
                        None
                    } else {
                        Some(
                            cache
                                .code_by_hash(pre.code_hash)
                                .map(|c: Bytecode| c.original_bytes())
                                .map_err(|e| {
                                    crate::state::StateError::History(format!("tracing: {e}"))
                                })?,
                        )
                    };
                    let storage: BTreeMap<B256, B256> = account
                        .storage
                        .iter()
                        .map(|(slot, value)| {
                            (B256::from(*slot), B256::from(value.original_value()))
                        })
                        .collect();
                    result.insert(
                        *address,
                        PrestateAccount {
                            balance: pre.balance,
                            nonce: pre.nonce,
                            code,
                            storage,
                        },
                    );
                }
                use gigas_evm::revm::database_interface::DatabaseCommit;
                cache.commit(done.state);
                out.push(PrestateTrace {
                    tx_hash: *tx.inner().tx_hash(),
                    result,
                });
            }
            if let Err(e) = replay.check() {
                return Ok(Err(e));
            }
            Ok(Ok(out))
        })?
    }

    fn block_hash(&self, number: u64) -> Result<Option<B256>, RpcError> {
        Ok(self.sealed(number)?.map(|h| h.hash))
    }

    /// Transaction `index` of published block `number`.
    fn transaction_by_block_and_index(
        &self,
        number: u64,
        index: usize,
    ) -> Result<Option<Transaction>, RpcError> {
        let Some((header, txs)) = self.sealed_with_transactions(number)? else {
            return Ok(None);
        };
        Ok(txs
            .into_iter()
            .nth(index)
            .map(|tx| rpc_transaction(tx, &header, index)))
    }

    fn create_access_list(
        &self,
        request: TransactionRequest,
        at: u64,
        state: Option<StateOverride>,
    ) -> Result<AccessListResult, RpcError> {
        self.calls_at(at, |calls| calls.access_list(&request, state.as_ref()))
    }

    fn txpool_status(&self) -> Result<TxpoolStatus, RpcError> {
        Ok(SequencerBackend::txpool_status(self))
    }

    fn txpool_content(&self, from: Option<Address>) -> Result<TxpoolContent, RpcError> {
        Ok(SequencerBackend::txpool_content(self, from))
    }

    fn txpool_inspect(&self) -> Result<TxpoolInspect, RpcError> {
        Ok(SequencerBackend::txpool_inspect(self))
    }

    fn trace_transaction(
        &self,
        hash: B256,
        options: GethDebugTracingOptions,
    ) -> Result<GethTrace, RpcError> {
        SequencerBackend::trace_transaction(self, hash, &options)
    }

    fn trace_call(
        &self,
        request: TransactionRequest,
        at: u64,
        options: GethDebugTracingCallOptions,
    ) -> Result<GethTrace, RpcError> {
        self.calls_at(at, |calls| calls.trace(&request, &options))
    }
}
