//! The method tables implemented over a [`Backend`]: parameter checks, block resolution,
//! limits, blocking-pool dispatch and subscriptions.

use std::sync::Arc;
use std::time::Duration;

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{Address, Bytes, B256, U256, U64};
use alloy_rpc_types_eth::pubsub::{Params, SubscriptionKind};
use alloy_rpc_types_eth::state::{EvmOverrides, StateOverride};
use alloy_rpc_types_eth::{
    AccessListResult, Block, BlockOverrides, EIP1186AccountProofResponse, FeeHistory, Filter,
    FilterBlockOption, FilterChanges, Header, Index, Log, SyncStatus, Transaction,
    TransactionReceipt, TransactionRequest,
};
use alloy_rpc_types_trace::geth::{
    GethDebugTracingCallOptions, GethDebugTracingOptions, GethTrace,
};
use alloy_rpc_types_txpool::{TxpoolContent, TxpoolContentFrom, TxpoolInspect, TxpoolStatus};
use jsonrpsee::core::{async_trait, to_json_raw_value, RpcResult, SubscriptionResult};
use jsonrpsee::server::{Extensions, PendingSubscriptionSink, SendTimeoutError, SubscriptionSink};
use jsonrpsee::RpcModule;
use serde::Serialize;
use tokio::sync::{broadcast, Semaphore};

use crate::accept::ClientAddr;
use crate::api::{
    DebugApiServer, EthApiServer, GigasApiServer, NetApiServer, RpcModulesApiServer, TracerOptions,
    TxpoolApiServer, Web3ApiServer,
};
use crate::filters::{drain_pending, FilterKind, FilterLimits, FilterStore};
use crate::metrics::RpcMetrics;
use crate::{Backend, PrestateTrace, RpcError};

/// The bounds the method handlers enforce (the transport's bounds live in the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most blocks one `eth_getLogs` may span.
    pub max_log_block_range: u64,
    /// Most logs one `eth_getLogs` may return.
    pub max_log_results: usize,
    /// Most blocks one `eth_feeHistory` may cover (larger counts are clamped, as geth does).
    pub max_fee_history_blocks: u64,
    /// Most reward percentiles one `eth_feeHistory` may ask for.
    pub max_fee_history_percentiles: usize,
    /// Most `eth_call`, `eth_estimateGas`, `eth_getLogs`, `eth_feeHistory` and
    /// `debug_traceBlockByNumber` running at once; further ones wait.
    pub max_concurrent_executions: usize,
    /// How long one of those may run (scans check it between blocks, see
    /// [`crate::deadline`]).
    pub execution_timeout: Duration,
    /// Most whole blocks and block receipts being read and built at once (each may be
    /// thousands of transactions); further ones wait. Kept apart from executions, so that
    /// long calls do not hold up explorers reading blocks.
    pub max_concurrent_block_reads: usize,
    /// Most addresses one log filter may name (geth: 1,000).
    pub max_log_addresses: usize,
    /// Most topics one position of a log filter may name (geth: 1,000).
    pub max_log_topics: usize,
    /// The bounds of installed filters (`eth_newFilter` and friends).
    pub filters: FilterLimits,
    /// How long a subscription notification may wait for room in its connection's buffer
    /// (a client that stopped reading); then the subscription is dropped.
    pub subscription_send_timeout: Duration,
    /// Hold loopback clients to the per-client bounds (filters) too, as the server's
    /// `limit_loopback` does for connections.
    pub limit_loopback: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_log_block_range: 10_000,
            max_log_results: 10_000,
            max_fee_history_blocks: 1024,
            max_fee_history_percentiles: 100,
            max_concurrent_executions: default_executions(),
            execution_timeout: DEFAULT_EXECUTION_TIMEOUT,
            max_concurrent_block_reads: 4 * default_executions(),
            max_log_addresses: 1_000,
            max_log_topics: 1_000,
            filters: FilterLimits::default(),
            subscription_send_timeout: DEFAULT_SUBSCRIPTION_SEND_TIMEOUT,
            limit_loopback: false,
        }
    }
}

/// How long a notification waits for a connection that does not read before its
/// subscription is dropped: long enough for a slow link to drain a full buffer of large
/// blocks, short enough that a client that stopped reading pins its buffer for seconds, not
/// forever.
pub(crate) const DEFAULT_SUBSCRIPTION_SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// geth's `--rpc.evmtimeout` default, for every kind of execution.
pub const DEFAULT_EXECUTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Most storage keys one `eth_getProof` may ask for: each costs a walk of the account's storage
/// trie, and the answer grows by a proof (a few kilobytes) per key.
const MAX_PROOF_KEYS: usize = 1024;

/// One per core (at least two): executions are CPU-bound, and more in flight only queue for cores
/// while holding their memory.
fn default_executions() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2)
}

/// The handlers of every namespace over one backend. Cheap to clone.
#[derive(Debug)]
pub struct EthRpc<B> {
    backend: Arc<B>,
    limits: Limits,
    executions: Arc<Semaphore>,
    block_reads: Arc<Semaphore>,
    filters: Arc<FilterStore>,
    metrics: Arc<RpcMetrics>,
}

impl<B> Clone for EthRpc<B> {
    fn clone(&self) -> Self {
        EthRpc {
            backend: self.backend.clone(),
            limits: self.limits,
            executions: self.executions.clone(),
            block_reads: self.block_reads.clone(),
            filters: self.filters.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl<B: Backend> EthRpc<B> {
    /// Handlers over `backend`, counting subscriptions into `metrics`.
    pub fn new(backend: Arc<B>, limits: Limits, metrics: Arc<RpcMetrics>) -> Self {
        EthRpc {
            backend,
            executions: Arc::new(Semaphore::new(limits.max_concurrent_executions.max(1))),
            block_reads: Arc::new(Semaphore::new(limits.max_concurrent_block_reads.max(1))),
            filters: Arc::new(FilterStore::new(limits.filters)),
            limits,
            metrics,
        }
    }

    /// All four namespaces as one jsonrpsee module.
    pub fn into_module(self) -> Result<RpcModule<()>, RpcError> {
        let mut module = RpcModule::new(());
        let merge = |module: &mut RpcModule<()>, other: RpcModule<Self>| {
            module
                .merge(other)
                .map_err(|e| RpcError::Internal(format!("method table: {e}")))
        };
        merge(&mut module, EthApiServer::into_rpc(self.clone()))?;
        merge(&mut module, NetApiServer::into_rpc(self.clone()))?;
        merge(&mut module, Web3ApiServer::into_rpc(self.clone()))?;
        merge(&mut module, RpcModulesApiServer::into_rpc(self.clone()))?;
        merge(&mut module, TxpoolApiServer::into_rpc(self.clone()))?;
        merge(&mut module, GigasApiServer::into_rpc(self.clone()))?;
        merge(&mut module, DebugApiServer::into_rpc(self))?;
        Ok(module)
    }

    /// Runs a storage read on the blocking pool, so that a slow disk never stalls the runtime.
    async fn blocking<T, F>(&self, f: F) -> Result<T, RpcError>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T, RpcError> + Send + 'static,
    {
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || f(&backend))
            .await
            .map_err(|e| RpcError::Internal(format!("backend task failed: {e}")))?
    }

    /// As [`Self::blocking`], for work that executes transactions or scans many blocks: at most
    /// `max_concurrent_executions` run at once, and each within the execution timeout.
    ///
    /// The permit travels into the blocking task and is released when the work ends, not when
    /// the caller stops waiting: a client that disconnects (and so drops this future) does not
    /// free a slot while its execution still runs. The work sees its deadline through
    /// [`crate::deadline`], which scans check as they go; EVM executions carry their own
    /// budget from the backend.
    async fn execution<T, F>(&self, f: F) -> Result<T, RpcError>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T, RpcError> + Send + 'static,
    {
        self.bounded(&self.executions, f).await
    }

    /// As [`Self::execution`], under the permits of whole-block reads.
    async fn block_read<T, F>(&self, f: F) -> Result<T, RpcError>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T, RpcError> + Send + 'static,
    {
        self.bounded(&self.block_reads, f).await
    }

    async fn bounded<T, F>(&self, permits: &Arc<Semaphore>, f: F) -> Result<T, RpcError>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T, RpcError> + Send + 'static,
    {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RpcError::Internal("the server is shutting down".into()))?;
        let timeout = self.limits.execution_timeout;
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _deadline = crate::deadline::RequestDeadline::enter(timeout);
            f(&backend)
        })
        .await
        .map_err(|e| RpcError::Internal(format!("backend task failed: {e}")))?
    }

    /// The block number a hash names, if the node has it.
    async fn number_of_hash(&self, hash: B256) -> Result<Option<u64>, RpcError> {
        self.resolve(BlockId::from(hash)).await
    }

    async fn transaction_at(
        &self,
        number: Option<u64>,
        index: Index,
    ) -> Result<Option<Transaction>, RpcError> {
        let Some(n) = number else { return Ok(None) };
        let index = index.0;
        self.block_read(move |b| b.transaction_by_block_and_index(n, index))
            .await
    }

    async fn uncle_count(&self, number: Option<u64>) -> Result<Option<U64>, RpcError> {
        // A rollup block has no uncles: 0 for a block the node has, null otherwise.
        Ok(number.map(|_| U64::ZERO))
    }

    async fn header_at(&self, number: Option<u64>) -> Result<Option<Header>, RpcError> {
        match number {
            Some(n) => self.block_read(move |b| b.header(n)).await,
            None => Ok(None),
        }
    }

    /// Logs of blocks `from..=to` for a filter, under the bounds of `eth_getLogs`.
    async fn filter_logs_in(
        &self,
        filter: Filter,
        from: u64,
        to: u64,
    ) -> Result<Vec<Log>, RpcError> {
        if from > to {
            return Ok(Vec::new());
        }
        if to - from >= self.limits.max_log_block_range {
            return Err(RpcError::LogRangeTooLarge(self.limits.max_log_block_range));
        }
        let limit = self.limits.max_log_results;
        let logs = self
            .execution(move |b| b.logs(from, to, &filter, limit))
            .await?;
        if logs.len() > limit {
            return Err(RpcError::TooManyLogs(limit));
        }
        Ok(logs)
    }

    /// Refuses a log filter naming more addresses or topics than allowed, in geth's words.
    fn check_filter(&self, filter: &Filter) -> Result<(), RpcError> {
        if filter.address.len() > self.limits.max_log_addresses {
            return Err(RpcError::InvalidParams(format!(
                "exceed max addresses: {} (at most {})",
                filter.address.len(),
                self.limits.max_log_addresses
            )));
        }
        if let Some((position, topics)) = filter
            .topics
            .iter()
            .enumerate()
            .find(|(_, t)| t.len() > self.limits.max_log_topics)
        {
            return Err(RpcError::InvalidParams(format!(
                "exceed max topics: {} at position {position} (at most {})",
                topics.len(),
                self.limits.max_log_topics
            )));
        }
        Ok(())
    }

    /// The number a tag names (no storage access).
    fn tag_number(&self, tag: BlockNumberOrTag) -> u64 {
        match tag {
            BlockNumberOrTag::Latest | BlockNumberOrTag::Pending => self.backend.latest(),
            BlockNumberOrTag::Safe => self.backend.safe(),
            BlockNumberOrTag::Finalized => self.backend.finalized(),
            BlockNumberOrTag::Earliest => self.backend.earliest(),
            BlockNumberOrTag::Number(n) => n,
        }
    }

    /// The block number `tag` names, or `None` beyond the head.
    fn existing(&self, tag: BlockNumberOrTag) -> Option<u64> {
        let n = self.tag_number(tag);
        (n <= self.backend.latest()).then_some(n)
    }

    /// The block number `id` names, or `None` when the node has no such block.
    async fn resolve(&self, id: BlockId) -> Result<Option<u64>, RpcError> {
        match id {
            BlockId::Number(tag) => Ok(self.existing(tag)),
            BlockId::Hash(hash) => {
                let hash = hash.block_hash;
                self.blocking(move |b| b.block_number(hash)).await
            }
        }
    }

    /// The block whose state a query reads (default `latest`); unknown blocks are an error.
    async fn state_block(&self, id: Option<BlockId>) -> Result<u64, RpcError> {
        let id = id.unwrap_or_default();
        if self.backend.resolves_latest_at_read()
            && matches!(
                id,
                BlockId::Number(BlockNumberOrTag::Latest | BlockNumberOrTag::Pending)
            )
        {
            return Ok(crate::backend::LATEST_STATE);
        }
        self.resolve(id).await?.ok_or(RpcError::HeaderNotFound)
    }

    async fn block_at(&self, number: Option<u64>, full: bool) -> Result<Option<Block>, RpcError> {
        match number {
            Some(n) => self.block_read(move |b| b.block(n, full)).await,
            None => Ok(None),
        }
    }

    async fn tx_count_at(&self, number: Option<u64>) -> Result<Option<U64>, RpcError> {
        match number {
            Some(n) => Ok(self
                .blocking(move |b| b.block_transaction_count(n))
                .await?
                .map(U64::from)),
            None => Ok(None),
        }
    }

    /// The inclusive block range of a log filter, clamped to the head; `None` when it starts
    /// beyond the head (nothing to find).
    async fn log_range(&self, filter: &Filter) -> Result<Option<(u64, u64)>, RpcError> {
        match filter.block_option {
            FilterBlockOption::AtBlockHash(hash) => {
                let n = self
                    .blocking(move |b| b.block_number(hash))
                    .await?
                    .ok_or(RpcError::HeaderNotFound)?;
                Ok(Some((n, n)))
            }
            FilterBlockOption::Range {
                from_block,
                to_block,
            } => {
                let head = self.backend.latest();
                let from = self.tag_number(from_block.unwrap_or_default());
                let to = self.tag_number(to_block.unwrap_or_default());
                if from > to {
                    return Err(RpcError::InvalidParams(format!(
                        "invalid block range params: fromBlock {from} is after toBlock {to}"
                    )));
                }
                if from > head {
                    return Ok(None);
                }
                let to = to.min(head);
                if to - from >= self.limits.max_log_block_range {
                    return Err(RpcError::LogRangeTooLarge(self.limits.max_log_block_range));
                }
                Ok(Some((from, to)))
            }
        }
    }

    fn check_percentiles(&self, percentiles: &[f64]) -> Result<(), RpcError> {
        if percentiles.len() > self.limits.max_fee_history_percentiles {
            return Err(RpcError::InvalidParams(format!(
                "too many reward percentiles: {} (at most {})",
                percentiles.len(),
                self.limits.max_fee_history_percentiles
            )));
        }
        let mut previous = 0.0;
        for (i, &p) in percentiles.iter().enumerate() {
            // `contains` is false for NaN too.
            if !(0.0..=100.0).contains(&p) {
                return Err(RpcError::InvalidParams(format!(
                    "invalid reward percentile: #{i} is {p}, must be within 0..=100"
                )));
            }
            if p < previous {
                return Err(RpcError::InvalidParams(format!(
                    "invalid reward percentile: #{i}:{p} < #{}:{previous}, must be ascending",
                    i.saturating_sub(1)
                )));
            }
            previous = p;
        }
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> EthApiServer for EthRpc<B> {
    async fn chain_id(&self) -> RpcResult<U64> {
        Ok(U64::from(self.backend.chain_id()))
    }

    async fn block_number(&self) -> RpcResult<U64> {
        Ok(U64::from(self.backend.latest()))
    }

    async fn syncing(&self) -> RpcResult<SyncStatus> {
        Ok(self.backend.syncing())
    }

    async fn accounts(&self) -> RpcResult<Vec<Address>> {
        Ok(Vec::new())
    }

    async fn balance(&self, address: Address, block: Option<BlockId>) -> RpcResult<U256> {
        let at = self.state_block(block).await?;
        Ok(self.blocking(move |b| b.balance(address, at)).await?)
    }

    async fn transaction_count(&self, address: Address, block: Option<BlockId>) -> RpcResult<U64> {
        if matches!(block, Some(BlockId::Number(BlockNumberOrTag::Pending))) {
            return Ok(U64::from(
                self.blocking(move |b| b.pending_nonce(address)).await?,
            ));
        }
        let at = self.state_block(block).await?;
        Ok(U64::from(
            self.blocking(move |b| b.nonce(address, at)).await?,
        ))
    }

    async fn code(&self, address: Address, block: Option<BlockId>) -> RpcResult<Bytes> {
        let at = self.state_block(block).await?;
        Ok(self.blocking(move |b| b.code(address, at)).await?)
    }

    async fn storage_at(
        &self,
        address: Address,
        slot: U256,
        block: Option<BlockId>,
    ) -> RpcResult<B256> {
        let at = self.state_block(block).await?;
        let slot = B256::from(slot);
        Ok(self.blocking(move |b| b.storage(address, slot, at)).await?)
    }

    async fn proof(
        &self,
        address: Address,
        keys: Vec<U256>,
        block: Option<BlockId>,
    ) -> RpcResult<EIP1186AccountProofResponse> {
        if keys.len() > MAX_PROOF_KEYS {
            return Err(RpcError::InvalidParams(format!(
                "too many storage keys: {} (at most {MAX_PROOF_KEYS})",
                keys.len()
            ))
            .into());
        }
        let at = self.state_block(block).await?;
        // A proof walks the trie and hashes: bounded like an execution.
        Ok(self.execution(move |b| b.proof(address, keys, at)).await?)
    }

    async fn call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
        block_overrides: Option<Box<BlockOverrides>>,
    ) -> RpcResult<Bytes> {
        let at = self.state_block(block).await?;
        let overrides = EvmOverrides::new(state_overrides, block_overrides);
        Ok(self
            .execution(move |b| b.call(request, at, overrides))
            .await?)
    }

    async fn estimate_gas(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
        block_overrides: Option<Box<BlockOverrides>>,
    ) -> RpcResult<U64> {
        let at = self.state_block(block).await?;
        let overrides = EvmOverrides::new(state_overrides, block_overrides);
        Ok(U64::from(
            self.execution(move |b| b.estimate_gas(request, at, overrides))
                .await?,
        ))
    }

    async fn gas_price(&self) -> RpcResult<U256> {
        Ok(self.blocking(|b| b.gas_price()).await?)
    }

    async fn max_priority_fee_per_gas(&self) -> RpcResult<U256> {
        Ok(self.blocking(|b| b.max_priority_fee()).await?)
    }

    async fn fee_history(
        &self,
        block_count: U64,
        newest_block: BlockNumberOrTag,
        reward_percentiles: Option<Vec<f64>>,
    ) -> RpcResult<FeeHistory> {
        if let Some(p) = &reward_percentiles {
            self.check_percentiles(p)?;
        }
        // geth answers no `reward` field for an empty list.
        let reward_percentiles = reward_percentiles.filter(|p| !p.is_empty());
        let newest = self
            .existing(newest_block)
            .ok_or(RpcError::HeaderNotFound)?;
        let count = block_count
            .saturating_to::<u64>()
            .min(self.limits.max_fee_history_blocks)
            .min(newest + 1);
        if count == 0 {
            return Ok(FeeHistory::default());
        }
        Ok(self
            .execution(move |b| b.fee_history(count, newest, reward_percentiles.as_deref()))
            .await?)
    }

    async fn send_raw_transaction(&self, raw: Bytes) -> RpcResult<B256> {
        if raw.is_empty() {
            return Err(RpcError::InvalidParams("empty transaction data".into()).into());
        }
        Ok(self.backend.send_raw_transaction(raw).await?)
    }

    async fn transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Transaction>> {
        Ok(self.blocking(move |b| b.transaction_by_hash(hash)).await?)
    }

    async fn transaction_receipt(&self, hash: B256) -> RpcResult<Option<TransactionReceipt>> {
        Ok(self.blocking(move |b| b.receipt(hash)).await?)
    }

    async fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<TransactionReceipt>>> {
        match self.resolve(block).await? {
            Some(n) => Ok(self.block_read(move |b| b.block_receipts(n)).await?),
            None => Ok(None),
        }
    }

    async fn block_by_number(
        &self,
        number: BlockNumberOrTag,
        full: Option<bool>,
    ) -> RpcResult<Option<Block>> {
        Ok(self
            .block_at(self.existing(number), full.unwrap_or(false))
            .await?)
    }

    async fn block_by_hash(&self, hash: B256, full: Option<bool>) -> RpcResult<Option<Block>> {
        let number = self.resolve(BlockId::from(hash)).await?;
        Ok(self.block_at(number, full.unwrap_or(false)).await?)
    }

    async fn block_transaction_count_by_number(
        &self,
        number: BlockNumberOrTag,
    ) -> RpcResult<Option<U64>> {
        Ok(self.tx_count_at(self.existing(number)).await?)
    }

    async fn block_transaction_count_by_hash(&self, hash: B256) -> RpcResult<Option<U64>> {
        let number = self.resolve(BlockId::from(hash)).await?;
        Ok(self.tx_count_at(number).await?)
    }

    async fn logs(&self, filter: Filter) -> RpcResult<Vec<Log>> {
        self.check_filter(&filter)?;
        let Some((from, to)) = self.log_range(&filter).await? else {
            return Ok(Vec::new());
        };
        Ok(self.filter_logs_in(filter, from, to).await?)
    }

    async fn transaction_by_block_number_and_index(
        &self,
        number: BlockNumberOrTag,
        index: Index,
    ) -> RpcResult<Option<Transaction>> {
        Ok(self.transaction_at(self.existing(number), index).await?)
    }

    async fn transaction_by_block_hash_and_index(
        &self,
        hash: B256,
        index: Index,
    ) -> RpcResult<Option<Transaction>> {
        let number = self.number_of_hash(hash).await?;
        Ok(self.transaction_at(number, index).await?)
    }

    async fn raw_transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Bytes>> {
        Ok(self.blocking(move |b| b.raw_transaction(hash)).await?)
    }

    async fn uncle_count_by_block_number(
        &self,
        number: BlockNumberOrTag,
    ) -> RpcResult<Option<U64>> {
        Ok(self.uncle_count(self.existing(number)).await?)
    }

    async fn uncle_count_by_block_hash(&self, hash: B256) -> RpcResult<Option<U64>> {
        let number = self.number_of_hash(hash).await?;
        Ok(self.uncle_count(number).await?)
    }

    async fn uncle_by_block_number_and_index(
        &self,
        _number: BlockNumberOrTag,
        _index: Index,
    ) -> RpcResult<Option<Block>> {
        Ok(None)
    }

    async fn uncle_by_block_hash_and_index(
        &self,
        _hash: B256,
        _index: Index,
    ) -> RpcResult<Option<Block>> {
        Ok(None)
    }

    async fn header_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<Header>> {
        Ok(self.header_at(self.existing(number)).await?)
    }

    async fn header_by_hash(&self, hash: B256) -> RpcResult<Option<Header>> {
        let number = self.number_of_hash(hash).await?;
        Ok(self.header_at(number).await?)
    }

    async fn create_access_list(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
    ) -> RpcResult<AccessListResult> {
        let at = self.state_block(block).await?;
        Ok(self
            .execution(move |b| b.create_access_list(request, at, state_overrides))
            .await?)
    }

    async fn new_filter(&self, ext: &Extensions, filter: Filter) -> RpcResult<String> {
        self.check_filter(&filter)?;
        let head = self.backend.latest();
        // A filter's changes start after the head it was installed at, or at its fromBlock
        // when that is later (geth).
        let next = match filter.block_option {
            FilterBlockOption::Range {
                from_block: Some(from),
                ..
            } if !matches!(from, BlockNumberOrTag::Latest | BlockNumberOrTag::Pending) => {
                self.tag_number(from).max(head + 1)
            }
            _ => head + 1,
        };
        Ok(self.filters.install(
            FilterKind::Logs {
                filter: Box::new(filter),
                next,
            },
            self.filter_owner(ext),
        )?)
    }

    async fn new_block_filter(&self, ext: &Extensions) -> RpcResult<String> {
        let next = self.backend.latest() + 1;
        Ok(self
            .filters
            .install(FilterKind::Blocks { next }, self.filter_owner(ext))?)
    }

    async fn new_pending_transaction_filter(
        &self,
        ext: &Extensions,
        full: Option<bool>,
    ) -> RpcResult<String> {
        if full == Some(true) {
            return Err(RpcError::InvalidParams(
                "pending transaction filters with full transactions are not supported; \
                 install one for hashes"
                    .into(),
            )
            .into());
        }
        let hashes = self.backend.subscriptions().subscribe_pending();
        Ok(self
            .filters
            .install(FilterKind::Pending { hashes }, self.filter_owner(ext))?)
    }

    async fn filter_changes(&self, id: String) -> RpcResult<FilterChanges> {
        let head = self.backend.latest();
        let max_hashes = self.filters.limits().max_hashes;
        // Take what the poll needs and move the filter on under the lock; read the chain
        // after it.
        enum Poll {
            Blocks(u64, u64),
            Logs(Box<Filter>, u64, u64),
            Pending(Vec<B256>),
        }
        let range = self.limits.max_log_block_range;
        let poll = self.filters.with(&id, |kind| match kind {
            FilterKind::Blocks { next } => {
                let from = (*next).max((head + 1).saturating_sub(max_hashes as u64));
                let poll = Poll::Blocks(from, head);
                *next = (*next).max(head + 1);
                poll
            }
            FilterKind::Logs { filter, next } => {
                // A filter polled after more blocks than one query may span answers the
                // newest span; the blocks before are skipped, as a lagging subscription is.
                let from = (*next).max((head + 1).saturating_sub(range));
                let to = match filter.block_option {
                    FilterBlockOption::Range {
                        to_block: Some(to), ..
                    } if !matches!(to, BlockNumberOrTag::Latest | BlockNumberOrTag::Pending) => {
                        self.tag_number(to).min(head)
                    }
                    _ => head,
                };
                let poll = Poll::Logs(filter.clone(), from, to);
                *next = (*next).max(head + 1);
                poll
            }
            FilterKind::Pending { hashes } => Poll::Pending(drain_pending(hashes, max_hashes)),
        })?;
        match poll {
            Poll::Blocks(from, to) => {
                if from > to {
                    return Ok(FilterChanges::Hashes(Vec::new()));
                }
                let hashes = self
                    .block_read(move |b| {
                        let mut out = Vec::with_capacity((to - from + 1) as usize);
                        for n in from..=to {
                            crate::deadline::check("eth_getFilterChanges")?;
                            if let Some(hash) = b.block_hash(n)? {
                                out.push(hash);
                            }
                        }
                        Ok(out)
                    })
                    .await?;
                Ok(FilterChanges::Hashes(hashes))
            }
            Poll::Logs(filter, from, to) => Ok(FilterChanges::Logs(
                self.filter_logs_in(*filter, from, to).await?,
            )),
            Poll::Pending(hashes) => Ok(FilterChanges::Hashes(hashes)),
        }
    }

    async fn filter_logs(&self, id: String) -> RpcResult<Vec<Log>> {
        let filter = self.filters.with(&id, |kind| match kind {
            FilterKind::Logs { filter, .. } => Ok(filter.clone()),
            _ => Err(RpcError::InvalidParams(
                "filter is not a log filter: eth_getFilterLogs answers log filters".into(),
            )),
        })??;
        EthApiServer::logs(self, *filter).await
    }

    async fn uninstall_filter(&self, id: String) -> RpcResult<bool> {
        Ok(self.filters.uninstall(&id))
    }

    async fn subscribe(
        &self,
        pending: PendingSubscriptionSink,
        kind: SubscriptionKind,
        params: Option<Params>,
    ) -> SubscriptionResult {
        let params = params.unwrap_or_default();
        match (kind, params) {
            (SubscriptionKind::NewHeads, Params::None) => {
                let rx = self.backend.subscriptions().subscribe_heads();
                let sink = pending.accept().await?;
                self.forward(sink, rx, "newHeads", std::iter::once).await
            }
            (SubscriptionKind::Logs, params @ (Params::None | Params::Logs(_))) => {
                let filter = match params {
                    Params::Logs(filter) => *filter,
                    _ => Filter::default(),
                };
                if let Err(e) = self.check_filter(&filter) {
                    pending.reject(e).await;
                    return Ok(());
                }
                let rx = self.backend.subscriptions().subscribe_logs();
                let sink = pending.accept().await?;
                // Each subscription walks the block's one shared copy of its logs: a
                // thousand subscriptions waiting on slow clients hold a thousand references
                // to it, not a thousand copies.
                let filter = Arc::new(filter);
                self.forward(sink, rx, "logs", move |logs: Arc<Vec<Log>>| {
                    let filter = filter.clone();
                    let shared = logs.clone();
                    (0..logs.len())
                        .filter(move |&i| filter.matches(&shared[i].inner))
                        .map(move |i| SharedLog(logs.clone(), i))
                })
                .await
            }
            (SubscriptionKind::NewPendingTransactions, Params::None | Params::Bool(false)) => {
                let rx = self.backend.subscriptions().subscribe_pending();
                let sink = pending.accept().await?;
                self.forward(sink, rx, "newPendingTransactions", std::iter::once)
                    .await
            }
            (SubscriptionKind::NewPendingTransactions, Params::Bool(true)) => {
                pending
                    .reject(RpcError::InvalidParams(
                        "newPendingTransactions with full transactions is not supported; \
                         subscribe to hashes"
                            .into(),
                    ))
                    .await;
                Ok(())
            }
            (
                kind @ (SubscriptionKind::NewHeads
                | SubscriptionKind::Logs
                | SubscriptionKind::NewPendingTransactions),
                _,
            ) => {
                pending
                    .reject(RpcError::InvalidParams(format!(
                        "invalid parameters for the {kind} subscription"
                    )))
                    .await;
                Ok(())
            }
            (kind, _) => {
                pending
                    .reject(RpcError::InvalidParams(format!(
                        "unsupported subscription kind {kind}: this node serves newHeads, logs \
                         and newPendingTransactions"
                    )))
                    .await;
                Ok(())
            }
        }
    }
}

impl<B: Backend> EthRpc<B> {
    /// The client a filter installed with this request counts against
    /// ([`FilterLimits::max_per_client`]): its address's client key, unless it is a
    /// loopback client and those are exempt.
    fn filter_owner(&self, ext: &Extensions) -> Option<std::net::IpAddr> {
        let client = ext.get::<ClientAddr>()?.ip();
        crate::accept::held_to_client_bounds(client, self.limits.limit_loopback).then_some(client)
    }

    /// Pipes a broadcast channel into a subscription until the client unsubscribes or
    /// disconnects. A client that falls behind the channel's buffer, or whose connection takes
    /// no notification for [`Limits::subscription_send_timeout`] (it stopped reading, so the
    /// socket and the connection's buffer are full), is dropped with an error notification
    /// instead of being waited for: memory stays bounded, and the client learns that it missed
    /// messages rather than silently seeing a gap.
    async fn forward<T, I, It, F>(
        &self,
        sink: SubscriptionSink,
        mut rx: broadcast::Receiver<T>,
        kind: &'static str,
        mut items: F,
    ) -> SubscriptionResult
    where
        T: Clone,
        F: FnMut(T) -> It,
        It: IntoIterator<Item = I>,
        I: Serialize,
    {
        let _open = self.metrics.subscription_opened(kind);
        loop {
            let message = tokio::select! {
                _ = sink.closed() => return Ok(()),
                message = rx.recv() => message,
            };
            match message {
                Ok(value) => {
                    for item in items(value) {
                        let raw = to_json_raw_value(&item)?;
                        match sink
                            .send_timeout(raw, self.limits.subscription_send_timeout)
                            .await
                        {
                            Ok(()) => {}
                            Err(SendTimeoutError::Closed(_)) => return Ok(()),
                            Err(SendTimeoutError::Timeout(_)) => {
                                self.metrics.subscription_dropped(kind);
                                return Err(format!(
                                    "subscription dropped: the client read nothing for {} s",
                                    self.limits.subscription_send_timeout.as_secs_f64()
                                )
                                .into());
                            }
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    self.metrics.subscription_dropped(kind);
                    return Err(format!(
                        "subscription dropped: the client fell {missed} messages behind"
                    )
                    .into());
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            }
        }
    }
}

/// One log of a block's shared list, serialized in place (a logs subscription's item).
struct SharedLog(Arc<Vec<Log>>, usize);

impl Serialize for SharedLog {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0[self.1].serialize(serializer)
    }
}

#[async_trait]
impl<B: Backend> NetApiServer for EthRpc<B> {
    async fn version(&self) -> RpcResult<String> {
        Ok(self.backend.chain_id().to_string())
    }

    async fn listening(&self) -> RpcResult<bool> {
        Ok(true)
    }

    async fn peer_count(&self) -> RpcResult<U64> {
        Ok(U64::ZERO)
    }
}

#[async_trait]
impl<B: Backend> RpcModulesApiServer for EthRpc<B> {
    async fn modules(&self) -> RpcResult<std::collections::BTreeMap<String, String>> {
        Ok(["eth", "net", "web3", "debug", "txpool", "rpc", "gigas"]
            .into_iter()
            .map(|m| (m.to_string(), "1.0".to_string()))
            .collect())
    }
}

#[async_trait]
impl<B: Backend> TxpoolApiServer for EthRpc<B> {
    async fn status(&self) -> RpcResult<TxpoolStatus> {
        Ok(self.blocking(|b| b.txpool_status()).await?)
    }

    async fn content(&self) -> RpcResult<TxpoolContent> {
        Ok(self.block_read(|b| b.txpool_content(None)).await?)
    }

    async fn content_from(&self, address: Address) -> RpcResult<TxpoolContentFrom> {
        let mut content = self
            .block_read(move |b| b.txpool_content(Some(address)))
            .await?;
        Ok(content.remove_from(&address))
    }

    async fn inspect(&self) -> RpcResult<TxpoolInspect> {
        Ok(self.block_read(|b| b.txpool_inspect()).await?)
    }
}

#[async_trait]
impl<B: Backend> GigasApiServer for EthRpc<B> {
    async fn state_root(&self, block: BlockNumberOrTag) -> RpcResult<Option<crate::StateRoots>> {
        Ok(match self.existing(block) {
            Some(n) => self.block_read(move |b| b.state_root(n)).await?,
            None => None,
        })
    }
}

#[async_trait]
impl<B: Backend> Web3ApiServer for EthRpc<B> {
    async fn client_version(&self) -> RpcResult<String> {
        Ok(self.backend.client_version())
    }

    async fn sha3(&self, data: Bytes) -> RpcResult<B256> {
        Ok(alloy_primitives::keccak256(&data))
    }
}

/// The only tracer served.
const PRESTATE_TRACER: &str = "prestateTracer";

#[async_trait]
impl<B: Backend> DebugApiServer for EthRpc<B> {
    async fn trace_block_by_number(
        &self,
        block: BlockNumberOrTag,
        options: Option<TracerOptions>,
    ) -> RpcResult<Vec<PrestateTrace>> {
        let options = options.unwrap_or_default();
        match options.tracer.as_deref() {
            Some(PRESTATE_TRACER) => {}
            Some(other) => {
                return Err(RpcError::InvalidParams(format!(
                    "tracer {other:?} is not supported: this node serves only \
                     {{\"tracer\": \"{PRESTATE_TRACER}\"}}"
                ))
                .into())
            }
            None => {
                return Err(RpcError::InvalidParams(format!(
                    "the struct logger (no tracer) is not supported: this node serves only \
                     {{\"tracer\": \"{PRESTATE_TRACER}\"}}"
                ))
                .into())
            }
        }
        let diff_mode = options
            .tracer_config
            .as_ref()
            .and_then(|c| c.get("diffMode"))
            .and_then(|d| d.as_bool())
            .unwrap_or(false);
        if diff_mode {
            return Err(RpcError::InvalidParams(
                "prestateTracer with diffMode is not supported".into(),
            )
            .into());
        }
        let number = self.existing(block).ok_or(RpcError::HeaderNotFound)?;
        Ok(self
            .execution(move |b| b.trace_block_prestate(number))
            .await?)
    }

    async fn trace_transaction(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<GethTrace> {
        let options = options.unwrap_or_default();
        Ok(self
            .execution(move |b| b.trace_transaction(hash, options))
            .await?)
    }

    async fn trace_call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        options: Option<GethDebugTracingCallOptions>,
    ) -> RpcResult<GethTrace> {
        let at = self.state_block(block).await?;
        let options = options.unwrap_or_default();
        Ok(self
            .execution(move |b| b.trace_call(request, at, options))
            .await?)
    }
}
