//! The method tables: one `#[rpc(server)]` trait per namespace, with alloy's RPC types as
//! parameters and results so that alloy, viem, web3.py and ethers parse them unchanged.
//!
//! [`EthRpc`](crate::EthRpc) implements all four over any [`Backend`](crate::Backend).
// The macro generates a `*Server` trait per trait and items inside it that carry no docs.
#![allow(missing_docs)]

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{Address, Bytes, B256, U256, U64};
use alloy_rpc_types_eth::pubsub::{Params, SubscriptionKind};
use alloy_rpc_types_eth::state::StateOverride;
use alloy_rpc_types_eth::{
    AccessListResult, Block, BlockOverrides, EIP1186AccountProofResponse, FeeHistory, Filter,
    FilterChanges, Header, Index, Log, SyncStatus, Transaction, TransactionReceipt,
    TransactionRequest,
};
use alloy_rpc_types_trace::geth::{
    GethDebugTracingCallOptions, GethDebugTracingOptions, GethTrace,
};
use alloy_rpc_types_txpool::{TxpoolContent, TxpoolContentFrom, TxpoolInspect, TxpoolStatus};
use jsonrpsee::core::{RpcResult, SubscriptionResult};
use jsonrpsee::proc_macros::rpc;
use serde::{Deserialize, Serialize};

use crate::PrestateTrace;

/// The `eth_` namespace.
#[rpc(server, namespace = "eth")]
pub trait EthApi {
    /// `eth_chainId`.
    #[method(name = "chainId")]
    async fn chain_id(&self) -> RpcResult<U64>;

    /// `eth_blockNumber`: the head.
    #[method(name = "blockNumber")]
    async fn block_number(&self) -> RpcResult<U64>;

    /// `eth_syncing`.
    #[method(name = "syncing")]
    async fn syncing(&self) -> RpcResult<SyncStatus>;

    /// `eth_accounts`: always empty, the node holds no user keys (wallet libraries call it).
    #[method(name = "accounts")]
    async fn accounts(&self) -> RpcResult<Vec<Address>>;

    /// `eth_getBalance`.
    #[method(name = "getBalance")]
    async fn balance(&self, address: Address, block: Option<BlockId>) -> RpcResult<U256>;

    /// `eth_getTransactionCount`; `pending` counts the pool's transactions.
    #[method(name = "getTransactionCount")]
    async fn transaction_count(&self, address: Address, block: Option<BlockId>) -> RpcResult<U64>;

    /// `eth_getCode`.
    #[method(name = "getCode")]
    async fn code(&self, address: Address, block: Option<BlockId>) -> RpcResult<Bytes>;

    /// `eth_getStorageAt`; the slot is a quantity or a 32-byte hex word.
    #[method(name = "getStorageAt")]
    async fn storage_at(
        &self,
        address: Address,
        slot: U256,
        block: Option<BlockId>,
    ) -> RpcResult<B256>;

    /// `eth_getProof` (EIP-1186): the account and the given storage slots with their
    /// Merkle-Patricia proofs against the state root of the block; each key is a quantity or a
    /// 32-byte hex word, as for `eth_getStorageAt`.
    #[method(name = "getProof")]
    async fn proof(
        &self,
        address: Address,
        keys: Vec<U256>,
        block: Option<BlockId>,
    ) -> RpcResult<EIP1186AccountProofResponse>;

    /// `eth_call` with optional state and block overrides.
    #[method(name = "call")]
    async fn call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
        block_overrides: Option<Box<BlockOverrides>>,
    ) -> RpcResult<Bytes>;

    /// `eth_estimateGas` with optional state and block overrides.
    #[method(name = "estimateGas")]
    async fn estimate_gas(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
        block_overrides: Option<Box<BlockOverrides>>,
    ) -> RpcResult<U64>;

    /// `eth_gasPrice`.
    #[method(name = "gasPrice")]
    async fn gas_price(&self) -> RpcResult<U256>;

    /// `eth_maxPriorityFeePerGas`.
    #[method(name = "maxPriorityFeePerGas")]
    async fn max_priority_fee_per_gas(&self) -> RpcResult<U256>;

    /// `eth_feeHistory`.
    #[method(name = "feeHistory")]
    async fn fee_history(
        &self,
        block_count: U64,
        newest_block: BlockNumberOrTag,
        reward_percentiles: Option<Vec<f64>>,
    ) -> RpcResult<FeeHistory>;

    /// `eth_sendRawTransaction`.
    #[method(name = "sendRawTransaction")]
    async fn send_raw_transaction(&self, raw: Bytes) -> RpcResult<B256>;

    /// `eth_getTransactionByHash`.
    #[method(name = "getTransactionByHash")]
    async fn transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Transaction>>;

    /// `eth_getTransactionReceipt`.
    #[method(name = "getTransactionReceipt")]
    async fn transaction_receipt(&self, hash: B256) -> RpcResult<Option<TransactionReceipt>>;

    /// `eth_getBlockReceipts`.
    #[method(name = "getBlockReceipts")]
    async fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<TransactionReceipt>>>;

    /// `eth_getBlockByNumber`; `full` selects full transactions over hashes.
    #[method(name = "getBlockByNumber")]
    async fn block_by_number(
        &self,
        number: BlockNumberOrTag,
        full: Option<bool>,
    ) -> RpcResult<Option<Block>>;

    /// `eth_getBlockByHash`.
    #[method(name = "getBlockByHash")]
    async fn block_by_hash(&self, hash: B256, full: Option<bool>) -> RpcResult<Option<Block>>;

    /// `eth_getBlockTransactionCountByNumber`.
    #[method(name = "getBlockTransactionCountByNumber")]
    async fn block_transaction_count_by_number(
        &self,
        number: BlockNumberOrTag,
    ) -> RpcResult<Option<U64>>;

    /// `eth_getBlockTransactionCountByHash`.
    #[method(name = "getBlockTransactionCountByHash")]
    async fn block_transaction_count_by_hash(&self, hash: B256) -> RpcResult<Option<U64>>;

    /// `eth_getLogs` over a bounded block range or one block hash.
    #[method(name = "getLogs")]
    async fn logs(&self, filter: Filter) -> RpcResult<Vec<Log>>;

    /// `eth_getTransactionByBlockNumberAndIndex`.
    #[method(name = "getTransactionByBlockNumberAndIndex")]
    async fn transaction_by_block_number_and_index(
        &self,
        number: BlockNumberOrTag,
        index: Index,
    ) -> RpcResult<Option<Transaction>>;

    /// `eth_getTransactionByBlockHashAndIndex`.
    #[method(name = "getTransactionByBlockHashAndIndex")]
    async fn transaction_by_block_hash_and_index(
        &self,
        hash: B256,
        index: Index,
    ) -> RpcResult<Option<Transaction>>;

    /// `eth_getRawTransactionByHash`: the EIP-2718 bytes of a mined or pooled transaction.
    #[method(name = "getRawTransactionByHash")]
    async fn raw_transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Bytes>>;

    /// `eth_getUncleCountByBlockNumber`: 0 for every block (a rollup has no uncles), null for
    /// an unknown one.
    #[method(name = "getUncleCountByBlockNumber")]
    async fn uncle_count_by_block_number(&self, number: BlockNumberOrTag)
        -> RpcResult<Option<U64>>;

    /// `eth_getUncleCountByBlockHash`.
    #[method(name = "getUncleCountByBlockHash")]
    async fn uncle_count_by_block_hash(&self, hash: B256) -> RpcResult<Option<U64>>;

    /// `eth_getUncleByBlockNumberAndIndex`: always null.
    #[method(name = "getUncleByBlockNumberAndIndex")]
    async fn uncle_by_block_number_and_index(
        &self,
        number: BlockNumberOrTag,
        index: Index,
    ) -> RpcResult<Option<Block>>;

    /// `eth_getUncleByBlockHashAndIndex`: always null.
    #[method(name = "getUncleByBlockHashAndIndex")]
    async fn uncle_by_block_hash_and_index(
        &self,
        hash: B256,
        index: Index,
    ) -> RpcResult<Option<Block>>;

    /// `eth_getHeaderByNumber`.
    #[method(name = "getHeaderByNumber")]
    async fn header_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<Header>>;

    /// `eth_getHeaderByHash`.
    #[method(name = "getHeaderByHash")]
    async fn header_by_hash(&self, hash: B256) -> RpcResult<Option<Header>>;

    /// `eth_createAccessList`: the accounts and slots the call touches, and its gas with that
    /// list.
    #[method(name = "createAccessList")]
    async fn create_access_list(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
    ) -> RpcResult<AccessListResult>;

    /// `eth_newFilter`: a log filter polled with `eth_getFilterChanges`; expires after five
    /// minutes without a poll.
    #[method(name = "newFilter", with_extensions)]
    async fn new_filter(&self, filter: Filter) -> RpcResult<String>;

    /// `eth_newBlockFilter`.
    #[method(name = "newBlockFilter", with_extensions)]
    async fn new_block_filter(&self) -> RpcResult<String>;

    /// `eth_newPendingTransactionFilter`.
    #[method(name = "newPendingTransactionFilter", with_extensions)]
    async fn new_pending_transaction_filter(&self, full: Option<bool>) -> RpcResult<String>;

    /// `eth_getFilterChanges`: what arrived since the last poll.
    #[method(name = "getFilterChanges")]
    async fn filter_changes(&self, id: String) -> RpcResult<FilterChanges>;

    /// `eth_getFilterLogs`: every log a log filter matches over its whole range.
    #[method(name = "getFilterLogs")]
    async fn filter_logs(&self, id: String) -> RpcResult<Vec<Log>>;

    /// `eth_uninstallFilter`.
    #[method(name = "uninstallFilter")]
    async fn uninstall_filter(&self, id: String) -> RpcResult<bool>;

    /// `eth_subscribe` (`newHeads`, `logs` with a filter, `newPendingTransactions`) and
    /// `eth_unsubscribe`; notifications are `eth_subscription`.
    #[subscription(
        name = "subscribe" => "subscription",
        unsubscribe = "unsubscribe",
        item = serde_json::Value
    )]
    async fn subscribe(&self, kind: SubscriptionKind, params: Option<Params>)
        -> SubscriptionResult;
}

/// The `net_` namespace.
#[rpc(server, namespace = "net")]
pub trait NetApi {
    /// `net_version`: the chain id in decimal.
    #[method(name = "version")]
    async fn version(&self) -> RpcResult<String>;

    /// `net_listening`: true while the server runs.
    #[method(name = "listening")]
    async fn listening(&self) -> RpcResult<bool>;

    /// `net_peerCount`: 0, a Gigas node has no peer-to-peer network.
    #[method(name = "peerCount")]
    async fn peer_count(&self) -> RpcResult<U64>;
}

/// The `web3_` namespace.
#[rpc(server, namespace = "web3")]
pub trait Web3Api {
    /// `web3_clientVersion`.
    #[method(name = "clientVersion")]
    async fn client_version(&self) -> RpcResult<String>;

    /// `web3_sha3`: keccak-256 of the given bytes.
    #[method(name = "sha3")]
    async fn sha3(&self, data: Bytes) -> RpcResult<B256>;
}

/// The `rpc_` namespace.
#[rpc(server, namespace = "rpc")]
pub trait RpcModulesApi {
    /// `rpc_modules`: the namespaces served, with their versions.
    #[method(name = "modules")]
    async fn modules(&self) -> RpcResult<std::collections::BTreeMap<String, String>>;
}

/// The `gigas_` namespace: what only Gigas nodes answer.
#[rpc(server, namespace = "gigas")]
pub trait GigasApi {
    /// `gigas_getStateRoot`: a block's hash and state root, an alias of
    /// `eth_getBlockByNumber(n).stateRoot` (see [`crate::StateRoots`]).
    #[method(name = "getStateRoot")]
    async fn state_root(&self, block: BlockNumberOrTag) -> RpcResult<Option<crate::StateRoots>>;
}

/// The `txpool_` namespace (the sequencer's pool; a full node has none and says so).
#[rpc(server, namespace = "txpool")]
pub trait TxpoolApi {
    /// `txpool_status`: how many transactions are pending and queued.
    #[method(name = "status")]
    async fn status(&self) -> RpcResult<TxpoolStatus>;

    /// `txpool_content`: every pooled transaction by sender and nonce.
    #[method(name = "content")]
    async fn content(&self) -> RpcResult<TxpoolContent>;

    /// `txpool_contentFrom`: one sender's pooled transactions.
    #[method(name = "contentFrom")]
    async fn content_from(&self, address: Address) -> RpcResult<TxpoolContentFrom>;

    /// `txpool_inspect`: a one-line summary of every pooled transaction.
    #[method(name = "inspect")]
    async fn inspect(&self) -> RpcResult<TxpoolInspect>;
}

/// The `debug_` namespace.
#[rpc(server, namespace = "debug")]
pub trait DebugApi {
    /// `debug_traceBlockByNumber`; only `{"tracer": "prestateTracer"}` is served.
    #[method(name = "traceBlockByNumber")]
    async fn trace_block_by_number(
        &self,
        block: BlockNumberOrTag,
        options: Option<TracerOptions>,
    ) -> RpcResult<Vec<PrestateTrace>>;

    /// `debug_traceTransaction` with the `callTracer`, the default struct logger or the
    /// `noopTracer`.
    #[method(name = "traceTransaction")]
    async fn trace_transaction(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<GethTrace>;

    /// `debug_traceCall`: a call request traced as `debug_traceTransaction` traces.
    #[method(name = "traceCall")]
    async fn trace_call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        options: Option<GethDebugTracingCallOptions>,
    ) -> RpcResult<GethTrace>;
}

/// The options object of geth's `debug_trace*` methods, as far as this node reads it; unknown
/// fields (the struct logger's switches) are accepted and ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TracerOptions {
    /// The tracer's name; only "prestateTracer" is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracer: Option<String>,
    /// The tracer's own options; `{"diffMode": true}` is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracer_config: Option<serde_json::Value>,
    /// geth's per-transaction timeout ("5s"); accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}
