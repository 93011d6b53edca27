//! What a node implements to be served: the [`Backend`] trait, the broadcast hub that feeds
//! subscriptions, and the prestate tracer's result type.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_rpc_types_eth::state::EvmOverrides;
use alloy_rpc_types_eth::state::StateOverride;
use alloy_rpc_types_eth::{
    AccessListResult, Block, BlockTransactions, EIP1186AccountProofResponse, FeeHistory, Filter,
    Header, Log, SyncStatus, Transaction, TransactionReceipt, TransactionRequest,
};
use alloy_rpc_types_trace::geth::{
    GethDebugTracingCallOptions, GethDebugTracingOptions, GethTrace,
};
use alloy_rpc_types_txpool::{TxpoolContent, TxpoolInspect, TxpoolStatus};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::RpcError;

/// The `at` of a state query for `latest` or `pending` when the backend
/// [resolves it at read time](Backend::resolves_latest_at_read).
pub const LATEST_STATE: u64 = u64::MAX;

/// One block's fees, as `eth_feeHistory` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeeHistoryBlock {
    /// Its base fee per gas.
    pub base_fee: u64,
    /// Gas its transactions used.
    pub gas_used: u64,
    /// Its gas limit.
    pub gas_limit: u64,
    /// The base fee of the block after it, by the chain's rule.
    pub next_base_fee: u64,
    /// The tips paid at each asked percentile of its gas (`None` when none were asked).
    pub reward: Option<Vec<u128>>,
}

/// The storage and execution side of a node, as the RPC layer sees it.
///
/// The RPC layer parses requests, resolves block tags and hashes to numbers (with
/// [`Backend::latest`] and friends and [`Backend::block_number`]), enforces limits, and calls
/// these methods with concrete block numbers that are at most [`Backend::latest`].
///
/// Threading: the methods that take `&self` and return quickly from memory
/// (`client_version`, `chain_id`, `syncing`, `latest`, `safe`, `finalized`, `earliest` and the
/// `subscribe_*` methods) are called on the async runtime and must not block. Every other
/// synchronous method is called on tokio's blocking pool, so it may read storage or run the EVM;
/// `call`, `estimate_gas`, `logs`, `fee_history` and `trace_block_prestate` are additionally
/// bounded by [`RpcConfig::max_concurrent_executions`](crate::RpcConfig).
///
/// A node that does not serve a method answers [`RpcError::MethodNotSupported`] from it.
pub trait Backend: Send + Sync + 'static {
    /// `web3_clientVersion`, e.g. "gigas-sequencer/0.1.0".
    fn client_version(&self) -> String;
    /// The chain id (`eth_chainId`, `net_version`).
    fn chain_id(&self) -> u64;
    /// `eth_syncing`; a sequencer is never syncing.
    fn syncing(&self) -> SyncStatus {
        SyncStatus::None
    }
    /// The head block number (`latest` and `pending`).
    fn latest(&self) -> u64;
    /// When true, state queries for `latest` and `pending` (balance, nonce, code, storage,
    /// call, estimate, proof) reach the backend with `at` = [`LATEST_STATE`], and the backend
    /// reads whatever state is newest when it opens it. A node that keeps only its head's
    /// state (the full node) needs this: its head may move between the tag's resolution and
    /// the read, which would otherwise turn a `latest` query into a request for a state it
    /// no longer has.
    fn resolves_latest_at_read(&self) -> bool {
        false
    }
    /// The block `safe` names; the head unless the node knows better.
    fn safe(&self) -> u64 {
        self.latest()
    }
    /// The block `finalized` names; the head unless the node knows better.
    fn finalized(&self) -> u64 {
        self.latest()
    }
    /// The block `earliest` names: the oldest block the node has.
    fn earliest(&self) -> u64 {
        0
    }
    /// The number of the block with this hash, if the node has it.
    fn block_number(&self, hash: B256) -> Result<Option<u64>, RpcError>;
    /// Block `number` with transaction hashes (`full == false`) or full transactions.
    fn block(&self, number: u64, full: bool) -> Result<Option<Block>, RpcError>;
    /// The header of block `number` (`eth_getHeaderByNumber`); the default takes it from
    /// [`Self::block`], a node that keeps headers without bodies answers it directly.
    fn header(&self, number: u64) -> Result<Option<Header>, RpcError> {
        Ok(self.block(number, false)?.map(|block| block.header))
    }
    /// `gigas_getStateRoot`: block `number`'s hash and state root (its header's, an alias of
    /// `eth_getBlockByNumber(n).stateRoot`).
    fn state_root(&self, number: u64) -> Result<Option<StateRoots>, RpcError> {
        Ok(self.header(number)?.map(|header| StateRoots {
            number: alloy_primitives::U64::from(number),
            hash: header.hash_slow(),
            state_root: header.state_root,
        }))
    }
    /// How many transactions block `number` holds; the default builds the block.
    fn block_transaction_count(&self, number: u64) -> Result<Option<u64>, RpcError> {
        Ok(self
            .block(number, false)?
            .map(|block| block.transactions.len() as u64))
    }
    /// Balance of `address` after block `at`.
    fn balance(&self, address: Address, at: u64) -> Result<U256, RpcError>;
    /// Nonce of `address` after block `at`.
    fn nonce(&self, address: Address, at: u64) -> Result<u64, RpcError>;
    /// The next nonce of `address` counting the transactions the pool holds (`pending`).
    fn pending_nonce(&self, address: Address) -> Result<u64, RpcError>;
    /// Code of `address` after block `at` (empty when none).
    fn code(&self, address: Address, at: u64) -> Result<Bytes, RpcError>;
    /// Storage slot `slot` of `address` after block `at`.
    fn storage(&self, address: Address, slot: B256, at: u64) -> Result<B256, RpcError>;
    /// `eth_getProof` (EIP-1186): `address` and its `slots` after block `at`, with their
    /// Merkle-Patricia proofs against that block's state root; one storage proof per slot, in
    /// the order given. The default refuses: a node that keeps no state trie (the sequencer,
    /// whose headers carry a state checksum instead of an MPT root) has nothing to prove
    /// against.
    fn proof(
        &self,
        address: Address,
        slots: Vec<U256>,
        at: u64,
    ) -> Result<EIP1186AccountProofResponse, RpcError> {
        let _ = (address, slots, at);
        Err(RpcError::ResourceNotFound(
            "eth_getProof: this node keeps no state trie (its headers' stateRoot is a state \
             checksum, not a Merkle-Patricia root), so it has no proofs; ask a gigas-fullnode, \
             which keeps the Ethereum state root"
                .into(),
        ))
    }
    /// `eth_call` on the state after block `at`, with optional state and block overrides.
    /// A revert is [`RpcError::revert`]; other failures [`RpcError::ExecutionFailed`].
    fn call(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<Bytes, RpcError>;
    /// `eth_estimateGas` on the state after block `at`; errors as for [`Backend::call`].
    fn estimate_gas(
        &self,
        request: TransactionRequest,
        at: u64,
        overrides: EvmOverrides,
    ) -> Result<u64, RpcError>;
    /// `eth_gasPrice`: a legacy gas price likely to be included (base fee plus tip).
    fn gas_price(&self) -> Result<U256, RpcError>;
    /// `eth_maxPriorityFeePerGas`.
    fn max_priority_fee(&self) -> Result<U256, RpcError>;
    /// `eth_feeHistory` for the `count` blocks ending at `newest` (both checked: `count >= 1`,
    /// `count <= newest + 1`, `count` within the configured bound; `percentiles` ascending in
    /// 0..=100, never empty). By default, from [`Backend::fee_history_block`] of each block,
    /// oldest first: a block it does not have is left out, and the next block's base fee
    /// follows the newest one's.
    fn fee_history(
        &self,
        count: u64,
        newest: u64,
        percentiles: Option<&[f64]>,
    ) -> Result<FeeHistory, RpcError> {
        let oldest = newest.saturating_sub(count.max(1) - 1);
        let mut history = FeeHistory {
            oldest_block: oldest,
            reward: percentiles.map(|_| Vec::new()),
            ..FeeHistory::default()
        };
        let mut next = None;
        for number in oldest..=newest {
            crate::deadline::check("eth_feeHistory")?;
            let Some(block) = self.fee_history_block(number, percentiles)? else {
                continue;
            };
            history.base_fee_per_gas.push(u128::from(block.base_fee));
            history
                .gas_used_ratio
                .push(block.gas_used as f64 / block.gas_limit.max(1) as f64);
            if let (Some(rewards), Some(reward)) = (history.reward.as_mut(), block.reward) {
                rewards.push(reward);
            }
            next = Some(block.next_base_fee);
        }
        if let Some(next) = next {
            history.base_fee_per_gas.push(u128::from(next));
        }
        Ok(history)
    }
    /// One block's part of `eth_feeHistory` (see [`FeeHistoryBlock`]), with its rewards at
    /// `percentiles` where they are asked; `None` for a block the node does not have.
    fn fee_history_block(
        &self,
        number: u64,
        percentiles: Option<&[f64]>,
    ) -> Result<Option<FeeHistoryBlock>, RpcError>;
    /// `eth_sendRawTransaction`: decode, check, admit to the pool and answer the hash. A
    /// rejection is [`RpcError::TxRejected`] with the pool's words; bad bytes are
    /// [`RpcError::InvalidParams`].
    fn send_raw_transaction(
        &self,
        raw: Bytes,
    ) -> impl Future<Output = Result<B256, RpcError>> + Send;
    /// A mined transaction by hash (the pool's transactions need not be served).
    fn transaction_by_hash(&self, hash: B256) -> Result<Option<Transaction>, RpcError>;
    /// A receipt by transaction hash.
    fn receipt(&self, hash: B256) -> Result<Option<TransactionReceipt>, RpcError>;
    /// All receipts of block `number`, in order.
    fn block_receipts(&self, number: u64) -> Result<Option<Vec<TransactionReceipt>>, RpcError>;
    /// Logs of blocks `from..=to` that match `filter`'s addresses and topics (its block option
    /// is already resolved into `from` and `to`), in chain order. The range is already bounded
    /// by the RPC layer; the backend may stop after `limit` logs plus one, since the RPC layer
    /// answers [`RpcError::TooManyLogs`] when it gets more than `limit`.
    fn logs(&self, from: u64, to: u64, filter: &Filter, limit: usize)
        -> Result<Vec<Log>, RpcError>;
    /// The channels the node publishes new heads, each block's logs and admitted transaction
    /// hashes into; subscriptions receive from them.
    fn subscriptions(&self) -> &SubscriptionHub;
    /// `debug_traceBlockByNumber` with the `prestateTracer`: per transaction, the accounts and
    /// slots it touched, as they were before it ran.
    fn trace_block_prestate(&self, number: u64) -> Result<Vec<PrestateTrace>, RpcError>;

    /// The hash of block `number`, if the node has it; the default builds the block.
    fn block_hash(&self, number: u64) -> Result<Option<B256>, RpcError> {
        Ok(self.block(number, false)?.map(|block| block.header.hash))
    }
    /// Transaction `index` of block `number`; the default builds the block with full
    /// transactions.
    fn transaction_by_block_and_index(
        &self,
        number: u64,
        index: usize,
    ) -> Result<Option<Transaction>, RpcError> {
        Ok(self
            .block(number, true)?
            .and_then(|block| match block.transactions {
                BlockTransactions::Full(txs) => txs.into_iter().nth(index),
                _ => None,
            }))
    }
    /// The EIP-2718 bytes of a transaction by hash; the default encodes
    /// [`Backend::transaction_by_hash`]'s answer.
    fn raw_transaction(&self, hash: B256) -> Result<Option<Bytes>, RpcError> {
        Ok(self
            .transaction_by_hash(hash)?
            .map(|tx| tx.inner.inner().encoded_2718().into()))
    }
    /// `eth_createAccessList` on the state after block `at`.
    fn create_access_list(
        &self,
        request: TransactionRequest,
        at: u64,
        state: Option<StateOverride>,
    ) -> Result<AccessListResult, RpcError> {
        let _ = (request, at, state);
        Err(RpcError::MethodNotSupported("eth_createAccessList"))
    }
    /// `txpool_status`; a node without a pool refuses.
    fn txpool_status(&self) -> Result<TxpoolStatus, RpcError> {
        Err(RpcError::MethodNotSupported("txpool_status"))
    }
    /// `txpool_content` (every sender, or only `from`); a node without a pool refuses.
    fn txpool_content(&self, from: Option<Address>) -> Result<TxpoolContent, RpcError> {
        let _ = from;
        Err(RpcError::MethodNotSupported("txpool_content"))
    }
    /// `txpool_inspect`; a node without a pool refuses.
    fn txpool_inspect(&self) -> Result<TxpoolInspect, RpcError> {
        Err(RpcError::MethodNotSupported("txpool_inspect"))
    }
    /// `debug_traceTransaction`.
    fn trace_transaction(
        &self,
        hash: B256,
        options: GethDebugTracingOptions,
    ) -> Result<GethTrace, RpcError> {
        let _ = (hash, options);
        Err(RpcError::MethodNotSupported("debug_traceTransaction"))
    }
    /// `debug_traceCall` on the state after block `at`.
    fn trace_call(
        &self,
        request: TransactionRequest,
        at: u64,
        options: GethDebugTracingCallOptions,
    ) -> Result<GethTrace, RpcError> {
        let _ = (request, at, options);
        Err(RpcError::MethodNotSupported("debug_traceCall"))
    }
}

/// How many messages each subscription channel keeps for its slowest subscriber. A subscriber
/// that falls further behind is dropped with an error notification, so a slow client costs at
/// most this much memory, never more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionBuffers {
    /// New heads (one per block).
    pub heads: usize,
    /// Blocks of logs (one message per block, holding all its logs).
    pub logs: usize,
    /// Pending transaction hashes (one per admitted transaction).
    pub pending: usize,
}

impl Default for SubscriptionBuffers {
    /// 256 heads (a minute of 250 ms blocks), 64 blocks of logs (whose size grows with the
    /// block, so fewer are kept) and 16,384 pending hashes (under a second at 20,000 TPS, 512 KiB).
    fn default() -> Self {
        SubscriptionBuffers {
            heads: 256,
            logs: 64,
            pending: 16_384,
        }
    }
}

/// The broadcast channels a node publishes into and subscriptions receive from
/// ([`Backend::subscriptions`]): the bounded subscription side of every backend.
#[derive(Debug, Clone)]
pub struct SubscriptionHub {
    heads: broadcast::Sender<Arc<Header>>,
    logs: broadcast::Sender<Arc<Vec<Log>>>,
    pending: broadcast::Sender<B256>,
}

impl Default for SubscriptionHub {
    fn default() -> Self {
        Self::new(SubscriptionBuffers::default())
    }
}

impl SubscriptionHub {
    /// Channels of the given capacities (each at least 1).
    pub fn new(buffers: SubscriptionBuffers) -> Self {
        SubscriptionHub {
            heads: broadcast::channel(buffers.heads.max(1)).0,
            logs: broadcast::channel(buffers.logs.max(1)).0,
            pending: broadcast::channel(buffers.pending.max(1)).0,
        }
    }

    /// Publishes a new head. Costs nothing but the clone when nobody listens.
    pub fn publish_head(&self, header: Header) {
        // An error only means there is no subscriber.
        let _ = self.heads.send(Arc::new(header));
    }

    /// Publishes one block's logs, in order; an empty block publishes nothing.
    pub fn publish_logs(&self, logs: Vec<Log>) {
        if !logs.is_empty() {
            let _ = self.logs.send(Arc::new(logs));
        }
    }

    /// Publishes the hash of a transaction the pool admitted.
    pub fn publish_pending(&self, hash: B256) {
        let _ = self.pending.send(hash);
    }

    /// Whether anyone subscribes to heads (to skip building headers nobody reads).
    pub fn has_head_subscribers(&self) -> bool {
        self.heads.receiver_count() > 0
    }

    /// Whether anyone subscribes to logs.
    pub fn has_log_subscribers(&self) -> bool {
        self.logs.receiver_count() > 0
    }

    /// Whether anyone subscribes to pending transactions.
    pub fn has_pending_subscribers(&self) -> bool {
        self.pending.receiver_count() > 0
    }

    /// A receiver of new heads.
    pub fn subscribe_heads(&self) -> broadcast::Receiver<Arc<Header>> {
        self.heads.subscribe()
    }

    /// A receiver of each block's logs.
    pub fn subscribe_logs(&self) -> broadcast::Receiver<Arc<Vec<Log>>> {
        self.logs.subscribe()
    }

    /// A receiver of pending transaction hashes.
    pub fn subscribe_pending(&self) -> broadcast::Receiver<B256> {
        self.pending.subscribe()
    }
}

/// `gigas_getStateRoot`'s answer: a block's number, hash and state root.
///
/// The header's `stateRoot` is the Ethereum state root (MPT) after the block, which the
/// sequencer computes for every block and signs, and which every follower checks against its
/// own: `eth_getProof` verifies against it, as on Ethereum. This method is an alias of
/// `eth_getBlockByNumber(n).stateRoot`, kept for tools written against the Gigas whose
/// headers carried a state checksum instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateRoots {
    /// The block's number.
    pub number: alloy_primitives::U64,
    /// The block's hash (the signed header's).
    pub hash: B256,
    /// The header's `stateRoot`: the Ethereum state root after the block.
    pub state_root: B256,
}

/// One transaction's entry in geth's `debug_traceBlockByNumber(n, {"tracer":"prestateTracer"})`
/// answer: `{"txHash": "0x..", "result": {"0xaddr": {...}}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrestateTrace {
    /// The transaction's hash.
    pub tx_hash: B256,
    /// The accounts the transaction touched, before it ran.
    pub result: BTreeMap<Address, PrestateAccount>,
}

/// An account in a prestate trace, in geth's shape: balance and code as hex, nonce as a JSON
/// number, storage as a map of 32-byte hex slots to 32-byte hex values. Code is omitted when
/// empty, storage when no slot was read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrestateAccount {
    /// Balance in wei.
    #[serde(default)]
    pub balance: U256,
    /// Nonce.
    #[serde(default)]
    pub nonce: u64,
    /// Runtime code, absent when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Bytes>,
    /// The slots the transaction read or wrote, with their values before it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage: BTreeMap<B256, B256>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prestate_has_geths_shape() {
        let mut result = BTreeMap::new();
        let mut storage = BTreeMap::new();
        storage.insert(B256::with_last_byte(1), B256::with_last_byte(2));
        result.insert(
            Address::with_last_byte(0xaa),
            PrestateAccount {
                balance: U256::from(16),
                nonce: 3,
                code: Some(Bytes::from_static(&[0x60, 0x00])),
                storage,
            },
        );
        result.insert(Address::with_last_byte(0xbb), PrestateAccount::default());
        let trace = vec![PrestateTrace {
            tx_hash: B256::with_last_byte(9),
            result,
        }];
        let json = serde_json::to_value(&trace).unwrap_or_default();
        let acct = &json[0]["result"]["0x00000000000000000000000000000000000000aa"];
        assert_eq!(acct["balance"], "0x10");
        assert_eq!(acct["nonce"], 3);
        assert_eq!(acct["code"], "0x6000");
        assert_eq!(
            acct["storage"]["0x0000000000000000000000000000000000000000000000000000000000000001"],
            "0x0000000000000000000000000000000000000000000000000000000000000002"
        );
        let empty = &json[0]["result"]["0x00000000000000000000000000000000000000bb"];
        assert!(empty.get("code").is_none() && empty.get("storage").is_none());
        assert_eq!(
            json[0]["txHash"],
            "0x0000000000000000000000000000000000000000000000000000000000000009"
        );
        let back: Vec<PrestateTrace> = serde_json::from_value(json).unwrap_or_default();
        assert_eq!(back, trace);
    }
}
